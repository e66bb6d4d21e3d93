/*-------------------------------------------------------------------------
 *
 * census.c
 *		How many jobs each queue has in each state, kept as committed
 *		changes come, so that a scrape of metrics() reads counts instead
 *		of passing over the job table: the trigger on claimq.job, the
 *		commit that adds its changes to shared memory, the recount that
 *		makes the counts exact after a start, and claimq.census().
 *
 * Every change of a job's state that claimq makes is reported to the
 * ledger (ledger.c), which notes here -n for the state left and +n for the
 * one entered, per queue, in this backend's transaction
 * (cq_census_move); an aborted subtransaction's notes are dropped.  Writes
 * by anything else are caught by the guard, a statement-level trigger on
 * claimq.job (claimq.job_census: after INSERT, DELETE, TRUNCATE, and an
 * UPDATE that sets queue_id, state or priority), which makes the census
 * unknown from the moment the transaction commits, unless one of claimq's
 * own statements is running (cq_own_statements).  (After an INSERT or an
 * UPDATE it also marks every queue that holds jobs at priorities other
 * than 0, whose claims then walk their priorities: see claim.c.  That it
 * does with the preload or without.)  A row trigger on every job,
 * which counted in 0.6, cost about 5% of a claim's throughput.
 *
 * Shared memory holds, per database and installation (the OID of
 * claimq.job) and queue, one count per state (absent means all zero), in
 * a table of claimq.census_entries entries shared by every database; and
 * one commit slot per backend.  A transaction with notes publishes its
 * xid in its commit slot at pre-commit and, once its commit is visible
 * (XACT_EVENT_COMMIT), adds its notes to the counts and clears the slot.
 *
 * Locking.  No lock is held across commit: the census lock is taken only
 * inside a callback, around work in memory, and nothing is waited for
 * while it is held (but ProcArrayLock, by a recount's snapshot).  A commit
 * takes it shared to add its notes, exclusive to make missing entries; a
 * recount and the removal of entries take it exclusive.  A gate in front
 * of it keeps an exclusive taker from starving behind shared ones.  So a
 * commit may wait only for another backend's few memory operations,
 * never for another transaction, a NOTIFY, a standby or a recount's
 * count.  Making a database's census unknown takes no lock at all: it
 * bumps the database's epoch, an atomic in its header (queue_id 0).
 *
 * A recount (cq_census_recount, by the reclaimer once per database after a
 * start, failover or anything that made the counts unknown) reads the
 * epoch first, then, under the exclusive lock, takes a snapshot, copies
 * the counts (c0) and looks at the commit slots: a transaction of the
 * database whose slot is set and that the snapshot sees as finished has a
 * commit the count will see and notes not yet added, so the recount tries
 * again a moment later.  Otherwise c0 holds exactly the notes of the
 * transactions the snapshot sees: every one of them added before the
 * lock was taken, and none that it does not see added yet.  Without the
 * lock it counts the jobs in the snapshot (n); under the lock again it
 * adds n - c0 to each count, which then holds n plus whatever committed
 * after the snapshot.  It marks the census valid unless the epoch moved
 * meanwhile.
 *
 * What makes a database's census unknown, from the moment it commits: a server
 * start (shared memory is new), a write to claimq.job that is not claimq's own
 * (the guard), PREPARE TRANSACTION of a transaction that changed jobs (another
 * backend decides its fate; the recount waits until no prepared transaction
 * holds a lock on claimq.job), and no room for a queue's entry when the table
 * is full (the notes without one are dropped). When the table is full, room is
 * made of the entries whose counts are all zero and of other databases'
 * entries while their census is unknown (a commit there may have made an entry
 * that holds only its own change, say pending = -1, which only their next
 * recount sets right; removing it moves their epoch on, so that a recount of
 * theirs under way adds nothing).  A recount sets right the queues that have
 * entries before it makes new ones, which brings the entries of queues without
 * jobs to zero. Those of dropped databases are freed by the launcher (and by a
 * recount that finds no room), those of a database whose claimq was dropped by
 * its reclaimer, and those of an earlier installation by the recount of the
 * next one.  Writes with the guard disabled (ALTER TABLE ... DISABLE TRIGGER,
 * pg_restore --disable-triggers) are not seen: claimq.census_recount() counts
 * again.  On a standby nothing is counted. While a database's census is not
 * valid, claimq.census() says so and metrics() reads queue_stats instead; so
 * it does to a transaction that changed jobs itself, whose changes the census
 * does not hold yet.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_job_census);
PG_FUNCTION_INFO_V1(claimq_census);
PG_FUNCTION_INFO_V1(claimq_census_recount);

static const char *const cq_state_names[CQ_NSTATES] = {
	"pending", "claimed", "running", "done", "dead", "cancelled", "waiting"
};

typedef struct CqCensusKey
{
	Oid			dboid;
	Oid			relid;			/* claimq.job: one installation */
	int32		queue_id;		/* 0: the database's header */
} CqCensusKey;

typedef struct CqCensusEntry
{
	CqCensusKey key;
	pg_atomic_uint64 counts[CQ_NSTATES];	/* int64, two's complement */
	/* The header's: */
	pg_atomic_uint64 epoch;		/* bumped by whatever makes it unknown */
	uint64		valid_epoch;	/* set by a recount, lock exclusive */
} CqCensusEntry;

/* A backend's commit, from its pre-commit until its notes are added. */
typedef struct CqCommitSlot
{
	pg_atomic_uint32 xid;		/* its top transaction, or 0 */
	Oid			dboid;
} CqCommitSlot;

typedef struct CqCensusShared
{
	pg_atomic_uint64 next_epoch;	/* a new header's epoch: never reused */
	int			nslots;
	CqCommitSlot slots[FLEXIBLE_ARRAY_MEMBER];
} CqCensusShared;

static LWLock *cq_census_lock = NULL;
static LWLock *cq_census_gate = NULL;
static HTAB *cq_census = NULL;
static CqCensusShared *cq_census_shared = NULL;

/* This transaction's notes, per queue and subtransaction level. */
typedef struct CqCensusNote
{
	int32		queue_id;
	int			level;
	int64		delta[CQ_NSTATES];
} CqCensusNote;

static CqCensusNote *cq_notes = NULL;
static int	cq_nnotes = 0;
static int	cq_notes_size = 0;
static Oid	cq_notes_relid = InvalidOid;
static CqCommitSlot *cq_my_slot = NULL; /* set from pre-commit to commit */
static bool cq_census_unknown = false;	/* make it unknown at commit */

Size
cq_census_shmem_size(void)
{
	return add_size(hash_estimate_size(cq_census_entries, sizeof(CqCensusEntry)),
					add_size(offsetof(CqCensusShared, slots),
							 mul_size(MaxBackends, sizeof(CqCommitSlot))));
}

void
cq_census_shmem_init(LWLock *lock, LWLock *gate)
{
	bool		found;

	cq_census_lock = lock;
	cq_census_gate = gate;
	cq_census = cq_shmem_table("claimq census", cq_census_entries,
							   sizeof(CqCensusKey), sizeof(CqCensusEntry));
	cq_census_shared = ShmemInitStruct("claimq census commits",
									   add_size(offsetof(CqCensusShared, slots),
												mul_size(MaxBackends,
														 sizeof(CqCommitSlot))),
									   &found);
	if (!found)
	{
		pg_atomic_init_u64(&cq_census_shared->next_epoch, UINT64CONST(1) << 32);
		cq_census_shared->nslots = MaxBackends;
		for (int i = 0; i < MaxBackends; i++)
		{
			pg_atomic_init_u32(&cq_census_shared->slots[i].xid,
							   InvalidTransactionId);
			cq_census_shared->slots[i].dboid = InvalidOid;
		}
	}
}

/* The key of the current database's entry of a queue (0: its header). */
static CqCensusKey
cq_census_key(Oid relid, int32 queue_id)
{
	CqCensusKey key;

	memset(&key, 0, sizeof(key));	/* the padding too: keys are hashed */
	key.dboid = MyDatabaseId;
	key.relid = relid;
	key.queue_id = queue_id;
	return key;
}

/* Whether a header's counts are valid; under the lock, either mode. */
static bool
cq_census_is_valid(CqCensusEntry *header)
{
	return header != NULL && header->valid_epoch != 0 &&
		header->valid_epoch == pg_atomic_read_u64(&header->epoch);
}

/*
 * Make room: remove the queues' entries that are all zero (the same as
 * absent), and those of other databases whose census is not valid, whose
 * next recount counts them again anyway (their epoch moves on first, so
 * that a recount of theirs under way does not add to what is gone).  The
 * current database's own entries with counts stay: its caller is adding
 * to them.  The caller holds the lock exclusive.
 */
static void
cq_census_make_room(void)
{
	HASH_SEQ_STATUS status;
	CqCensusEntry *e;

	Assert(LWLockHeldByMeInMode(cq_census_lock, LW_EXCLUSIVE));
	hash_seq_init(&status, cq_census);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		bool		zero = true;
		CqCensusKey hkey;
		CqCensusEntry *header;

		if (e->key.queue_id == 0)
			continue;
		for (int s = 0; zero && s < CQ_NSTATES; s++)
			zero = pg_atomic_read_u64(&e->counts[s]) == 0;
		if (!zero)
		{
			if (e->key.dboid == MyDatabaseId)
				continue;
			hkey = e->key;
			hkey.queue_id = 0;
			header = hash_search(cq_census, &hkey, HASH_FIND, NULL);
			if (cq_census_is_valid(header))
				continue;
			if (header != NULL)
				pg_atomic_fetch_add_u64(&header->epoch, 1);
		}
		(void) hash_search(cq_census, &e->key, HASH_REMOVE, NULL);
	}
}

/*
 * The entry of a key, added with zero counts if missing, or NULL if there
 * is no room even after cq_census_make_room().  The caller holds the lock
 * exclusive.
 */
static CqCensusEntry *
cq_census_enter(const CqCensusKey *key)
{
	CqCensusEntry *entry;
	bool		found;

	Assert(LWLockHeldByMeInMode(cq_census_lock, LW_EXCLUSIVE));
	for (int attempt = 0; attempt < 2; attempt++)
	{
		entry = hash_search(cq_census, key, HASH_ENTER_NULL, &found);
		if (entry != NULL)
		{
			if (!found)
			{
				for (int s = 0; s < CQ_NSTATES; s++)
					pg_atomic_init_u64(&entry->counts[s], 0);

				/*
				 * A header made again (after its database's entries were
				 * freed) never takes an epoch that a recount may have read of
				 * the one before.
				 */
				pg_atomic_init_u64(&entry->epoch,
								   pg_atomic_fetch_add_u64(&cq_census_shared->next_epoch,
														   UINT64CONST(1) << 32));
				entry->valid_epoch = 0;
			}
			return entry;
		}
		if (attempt == 0)
			cq_census_make_room();
	}
	return NULL;
}

/*
 * Make the current database's census unknown until the next recount: bump
 * its epoch.  Takes the lock shared to find the header; without one, the
 * census is unknown already.
 */
static void
cq_census_forget(Oid relid)
{
	CqCensusKey key = cq_census_key(relid, 0);
	CqCensusEntry *header;

	cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_SHARED);
	header = hash_search(cq_census, &key, HASH_FIND, NULL);
	if (header != NULL)
		pg_atomic_fetch_add_u64(&header->epoch, 1);
	LWLockRelease(cq_census_lock);
}

/*
 * Before the commit: publish the transaction in this backend's commit
 * slot, so that a recount can tell a commit it sees whose notes are not
 * added yet.
 */
static void
cq_census_pre_commit(void)
{
	TransactionId xid = GetTopTransactionIdIfAny();
	int			index = CQ_MY_BACKEND_INDEX;

	if (!TransactionIdIsValid(xid) || index < 0 ||
		index >= cq_census_shared->nslots)
	{
		/* Nothing a recount could tell apart: unknown once it commits. */
		cq_census_unknown = true;
		return;
	}
	cq_my_slot = &cq_census_shared->slots[index];
	cq_my_slot->dboid = MyDatabaseId;
	pg_write_barrier();
	pg_atomic_write_u32(&cq_my_slot->xid, xid);
}

/* Clear this backend's commit slot, after every addition it covers. */
static void
cq_census_clear_slot(void)
{
	if (cq_my_slot == NULL)
		return;
	pg_write_barrier();
	pg_atomic_write_u32(&cq_my_slot->xid, InvalidTransactionId);
	cq_my_slot = NULL;
}

/* Add one note to its entry. */
static void
cq_census_add(CqCensusEntry *entry, const CqCensusNote *note)
{
	for (int s = 0; s < CQ_NSTATES; s++)
		if (note->delta[s] != 0)
			pg_atomic_fetch_add_u64(&entry->counts[s], note->delta[s]);
}

/*
 * After the commit is visible: add the notes (making missing entries
 * under the exclusive lock; where there is no room, the census is unknown
 * from now on), then clear the commit slot.  Nothing here may fail.
 */
static void
cq_census_commit(void)
{
	CqCensusKey key = cq_census_key(cq_notes_relid, 0);
	int			missing = 0;

	cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_SHARED);

	/*
	 * Without a header nothing was counted yet: a recount that makes one
	 * later takes its snapshot after this commit, which it sees.
	 */
	if (hash_search(cq_census, &key, HASH_FIND, NULL) == NULL)
	{
		LWLockRelease(cq_census_lock);
		cq_census_clear_slot();
		return;
	}
	for (int i = 0; i < cq_nnotes; i++)
	{
		CqCensusEntry *entry;

		key.queue_id = cq_notes[i].queue_id;
		entry = hash_search(cq_census, &key, HASH_FIND, NULL);
		if (entry != NULL)
			cq_census_add(entry, &cq_notes[i]);
		else
			cq_notes[missing++] = cq_notes[i];
	}
	LWLockRelease(cq_census_lock);

	if (missing > 0)
	{
		cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_EXCLUSIVE);
		for (int i = 0; i < missing; i++)
		{
			CqCensusEntry *entry;

			key.queue_id = cq_notes[i].queue_id;
			entry = cq_census_enter(&key);
			if (entry != NULL)
				cq_census_add(entry, &cq_notes[i]);
			else
				cq_census_unknown = true;
		}
		LWLockRelease(cq_census_lock);
	}

	/*
	 * Unknown before the slot is cleared: a recount that saw this commit in
	 * its snapshot either found the slot set or finds the epoch changed.
	 */
	if (cq_census_unknown)
		cq_census_forget(cq_notes_relid);
	cq_census_clear_slot();
}

static void
cq_census_reset_notes(void)
{
	cq_nnotes = 0;
	cq_census_unknown = false;
}

/* The end of a transaction (ledger.c calls it). */
void
cq_census_xact_event(XactEvent event)
{
	if (cq_nnotes == 0 && !cq_census_unknown && cq_my_slot == NULL)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (cq_nnotes > 0)
				cq_census_pre_commit();
			return;
		case XACT_EVENT_COMMIT:
			if (cq_nnotes > 0 && cq_my_slot != NULL)
				cq_census_commit();
			else if (cq_census_unknown || cq_nnotes > 0)
				cq_census_forget(cq_notes_relid);
			break;
		case XACT_EVENT_PRE_PREPARE:
			return;
		case XACT_EVENT_PREPARE:

			/*
			 * Its changes are not ours to add: count again once it is
			 * decided.  It is listed as prepared by now, so a recount that
			 * read the epoch before this finds it listed.
			 */
			cq_census_forget(cq_notes_relid);
			break;
		default:
			/* Abort: its notes go, and so does its commit slot. */
			cq_census_clear_slot();
			break;
	}
	cq_census_reset_notes();
}

/*
 * A subtransaction's notes become its parent's when it commits, and are
 * dropped when it aborts.
 */
void
cq_census_subxact_event(SubXactEvent event)
{
	int			level = GetCurrentTransactionNestLevel();
	int			kept = 0;

	if (cq_nnotes == 0 ||
		(event != SUBXACT_EVENT_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB))
		return;
	for (int i = 0; i < cq_nnotes; i++)
	{
		CqCensusNote *note = &cq_notes[i];

		Assert(note->level <= level);
		if (note->level >= level)
		{
			if (event == SUBXACT_EVENT_ABORT_SUB)
				continue;
			/* Merge into the parent's note of the queue, if it has one. */
			for (int j = 0; j < kept; j++)
				if (cq_notes[j].queue_id == note->queue_id &&
					cq_notes[j].level == level - 1)
				{
					for (int s = 0; s < CQ_NSTATES; s++)
						cq_notes[j].delta[s] += note->delta[s];
					note = NULL;
					break;
				}
			if (note == NULL)
				continue;
			note->level = level - 1;
		}
		cq_notes[kept++] = *note;
	}
	cq_nnotes = kept;
}

/* The state named by a text datum. */
CqState
cq_state_of(Datum state)
{
	text	   *t = DatumGetTextPP(state);
	int			len = VARSIZE_ANY_EXHDR(t);

	for (int s = 0; s < CQ_NSTATES; s++)
		if (strlen(cq_state_names[s]) == (size_t) len &&
			memcmp(VARDATA_ANY(t), cq_state_names[s], len) == 0)
			return (CqState) s;
	elog(ERROR, "claimq: unknown job state \"%.*s\"", len, VARDATA_ANY(t));
	return CQ_NSTATES;			/* keep the compiler quiet */
}

/*
 * This transaction's note of a queue at the current level, made if
 * missing; relid is claimq.job's OID in this transaction.
 */
static CqCensusNote *
cq_census_note(Oid relid, int32 queue_id)
{
	int			level = GetCurrentTransactionNestLevel();
	CqCensusNote *note;

	for (int i = cq_nnotes - 1; i >= 0; i--)
		if (cq_notes[i].queue_id == queue_id && cq_notes[i].level == level)
			return &cq_notes[i];
	if (cq_nnotes == cq_notes_size)
	{
		cq_notes_size = Max(16, cq_notes_size * 2);
		cq_notes = cq_notes == NULL ?
			MemoryContextAlloc(TopMemoryContext,
							   cq_notes_size * sizeof(CqCensusNote)) :
			repalloc(cq_notes, cq_notes_size * sizeof(CqCensusNote));
	}
	if (cq_nnotes == 0)
		cq_notes_relid = relid;
	note = &cq_notes[cq_nnotes++];
	memset(note, 0, sizeof(*note));
	note->queue_id = queue_id;
	note->level = level;
	return note;
}

/*
 * n jobs of the queue left state from and entered state to in this
 * transaction (either CQ_IS_ABSENT: inserted, deleted); relid is
 * claimq.job's OID.  Called by the ledger only.
 */
void
cq_census_move(Oid relid, int32 queue_id, CqState from, CqState to, int64 n)
{
	CqCensusNote *note;

	if (!cq_shmem_ready)
		return;
	note = cq_census_note(relid, queue_id);
	if (from != CQ_IS_ABSENT)
		note->delta[from] -= n;
	if (to != CQ_IS_ABSENT)
		note->delta[to] += n;
}

/*
 * After a write of jobs that is not claimq's own: mark every queue that has
 * a job at a priority other than 0, by claimq.mark_prioritized(NULL).
 * Before ALTER EXTENSION claimq UPDATE to 0.8 there is no such function
 * (and the update marks the queues from their jobs, after its own writes).
 */
static void
cq_census_mark_prioritized(void)
{
	Oid			argtypes[1] = {INT4OID};

	if (!OidIsValid(LookupFuncName(list_make2(makeString("claimq"),
											  makeString("mark_prioritized")),
								   1, argtypes, true)))
		return;
	SPI_connect();
	if (SPI_execute("SELECT claimq.mark_prioritized(NULL)", false, 0) != SPI_OK_SELECT)
		elog(ERROR, "claimq.mark_prioritized() failed");
	SPI_finish();
}

/*
 * claimq.job_census(): the census's guard, a statement-level trigger of
 * claimq.job (after INSERT, DELETE, TRUNCATE, and an UPDATE that sets
 * queue_id, state or priority).  A statement of claimq's own has told the
 * ledger what it did; anything else makes the census unknown once its
 * transaction commits, and TRUNCATE always does.  A job such a statement
 * wrote may be at a priority other than 0 in a queue whose claims do not
 * walk priorities: every queue that has such a job is marked, by
 * claimq.mark_prioritized, the one statement this function runs
 * (schema-qualified, and only after a write that is not claimq's own).
 */
Datum
claimq_job_census(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("claimq.job_census() is a trigger of claimq.job")));

	/*
	 * (The row triggers of 0.6 call it too, until ALTER EXTENSION claimq
	 * UPDATE replaces them: the same for each row.)
	 */
	if (cq_own_statements == 0 &&
		(TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ||
		 TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event)))
		cq_census_mark_prioritized();
	if (!cq_shmem_ready)
		return PointerGetDatum(NULL);
	if (cq_own_statements > 0 && !TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		return PointerGetDatum(NULL);
	cq_notes_relid = RelationGetRelid(trigdata->tg_relation);
	cq_census_unknown = true;
	return PointerGetDatum(NULL);
}

/* A queue's counts as the recount copied them (c0), and as it counted (n). */
typedef struct CqCensusCopy
{
	CqCensusKey key;
	int64		c0[CQ_NSTATES];
	int64		n[CQ_NSTATES];
	bool		had_entry;		/* c0 was copied from an entry */
	bool		counted;		/* n - c0 added already */
} CqCensusCopy;

/* How often a recount looks again for commits it sees but not their notes. */
#define CQ_RECOUNT_TRIES	20

/*
 * Whether a transaction of this database has a commit that the snapshot
 * sees and notes not added yet.  The caller holds the lock exclusive, so
 * no addition is under way.
 */
static bool
cq_census_commits_pending(Snapshot snapshot)
{
	for (int i = 0; i < cq_census_shared->nslots; i++)
	{
		CqCommitSlot *slot = &cq_census_shared->slots[i];
		TransactionId xid = pg_atomic_read_u32(&slot->xid);

		if (!TransactionIdIsValid(xid))
			continue;
		pg_read_barrier();
		if (slot->dboid == MyDatabaseId && !XidInMVCCSnapshot(xid, snapshot))
			return true;
	}
	return false;
}

/* Remove every entry of the listed databases, under the lock exclusive. */
static void
cq_census_remove_databases(const Oid *dboids, int ndbs)
{
	HASH_SEQ_STATUS status;
	CqCensusEntry *entry;

	cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_EXCLUSIVE);
	hash_seq_init(&status, cq_census);
	while ((entry = hash_seq_search(&status)) != NULL)
		for (int i = 0; i < ndbs; i++)
			if (entry->key.dboid == dboids[i])
			{
				(void) hash_search(cq_census, &entry->key, HASH_REMOVE, NULL);
				break;
			}
	LWLockRelease(cq_census_lock);
}

/*
 * Free the entries of databases that no longer exist.  Inside a
 * transaction (it reads pg_database), without the lock.
 */
void
cq_census_free_dropped(void)
{
	HASH_SEQ_STATUS status;
	CqCensusEntry *entry;
	Oid		   *dboids;
	int			ndbs = 0;
	int			ndropped = 0;

	if (!cq_shmem_ready)
		return;
	dboids = palloc(sizeof(Oid) * cq_census_entries);
	cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_SHARED);
	hash_seq_init(&status, cq_census);
	while ((entry = hash_seq_search(&status)) != NULL)
		cq_note_database(dboids, &ndbs, cq_census_entries, entry->key.dboid);
	LWLockRelease(cq_census_lock);

	ndropped = cq_dropped_databases(dboids, ndbs);
	if (ndropped > 0)
		cq_census_remove_databases(dboids, ndropped);
	pfree(dboids);
}

/*
 * Free the current database's entries: it has no claimq (the reclaimer
 * found it dropped), so nobody adds to them or counts them again.
 */
void
cq_census_free_database(void)
{
	if (cq_shmem_ready)
		cq_census_remove_databases(&MyDatabaseId, 1);
}

/*
 * Count the current database's jobs again (see the file header), if its
 * census is not valid.  Called by the reclaimer inside a transaction that
 * has written nothing, connected to SPI, as the extension's owner.
 * Returns true if the census is valid afterwards.
 *
 * The epoch is read first and, at the end, moved on by one before any
 * count changes (only if it is still what was read): a transaction
 * prepared before the first read is listed by the check that follows it
 * (or committed before the snapshot), anything that made the census
 * unknown since changes the epoch, and of two recounts at once only the
 * first to finish adds.
 */
bool
cq_census_recount(void)
{
	static SPIPlanPtr prepared_plan = NULL;
	static SPIPlanPtr count_plan = NULL;
	Oid			relid = cq_job_relid();
	CqCensusEntry *header;
	Snapshot	snapshot;
	uint64		epoch = 0;
	uint64		expected;
	HTAB	   *copies;
	HASHCTL		ctl;
	HASH_SEQ_STATUS status;
	CqCensusEntry *entry;
	CqCensusCopy *copy;
	CqCensusKey key = cq_census_key(relid, 0);
	bool		valid;

	if (!cq_shmem_ready || RecoveryInProgress())
		return false;

	cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_SHARED);
	header = hash_search(cq_census, &key, HASH_FIND, NULL);
	valid = cq_census_is_valid(header);
	if (header != NULL)
		epoch = pg_atomic_read_u64(&header->epoch);
	LWLockRelease(cq_census_lock);
	if (valid)
		return true;
	if (header == NULL)
	{
		/* The database's first count: make its header. */
		cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_EXCLUSIVE);
		header = cq_census_enter(&key);
		valid = cq_census_is_valid(header);
		if (header != NULL)
			epoch = pg_atomic_read_u64(&header->epoch);
		LWLockRelease(cq_census_lock);
		if (header == NULL)
		{
			/* No room: make some for the next pass. */
			cq_census_free_dropped();
			return false;
		}
		if (valid)
			return true;
	}

	/*
	 * A prepared transaction's changes would come without notes when it is
	 * committed: wait until none that wrote claimq.job is left (each holds a
	 * lock on it, and has no backend).
	 */
	{
		Oid			argtypes[1] = {OIDOID};
		Datum		values[1] = {ObjectIdGetDatum(relid)};

		cq_execute(cq_plan(&prepared_plan,
						   "SELECT 1 FROM pg_catalog.pg_locks l"
						   " WHERE l.locktype OPERATOR(pg_catalog.=) 'relation'"
						   "   AND l.relation OPERATOR(pg_catalog.=) $1"
						   "   AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d"
						   "        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())"
						   "   AND l.pid IS NULL LIMIT 1", 1, argtypes),
				   values, NULL, SPI_OK_SELECT);
		if (SPI_processed > 0)
			return false;
	}

	ctl.keysize = sizeof(CqCensusKey);
	ctl.entrysize = sizeof(CqCensusCopy);
	ctl.hcxt = CurrentMemoryContext;
	copies = hash_create("claimq census recount", 64, &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	/*
	 * Under the exclusive lock: the snapshot and c0, once no commit it sees
	 * has notes still to add.  Such a commit is between its visibility and
	 * its callback, a matter of moments.
	 */
	for (int attempt = 0;; attempt++)
	{
		cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_EXCLUSIVE);
		snapshot = GetLatestSnapshot();
		if (!cq_census_commits_pending(snapshot))
			break;
		LWLockRelease(cq_census_lock);
		if (attempt == CQ_RECOUNT_TRIES)
		{
			hash_destroy(copies);
			return false;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1 + attempt, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	snapshot = RegisterSnapshot(snapshot);
	hash_seq_init(&status, cq_census);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dboid != MyDatabaseId)
			continue;
		if (entry->key.relid != relid)
		{
			/* An earlier installation's: nobody adds to it any more. */
			(void) hash_search(cq_census, &entry->key, HASH_REMOVE, NULL);
			continue;
		}
		if (entry->key.queue_id == 0)
			continue;
		copy = hash_search(copies, &entry->key, HASH_ENTER, NULL);
		for (int s = 0; s < CQ_NSTATES; s++)
			copy->c0[s] = (int64) pg_atomic_read_u64(&entry->counts[s]);
		memset(copy->n, 0, sizeof(copy->n));
		copy->counted = false;
		copy->had_entry = true;
	}
	LWLockRelease(cq_census_lock);

	/* n: the jobs in the snapshot, counted without the lock. */
	cq_execute_in(cq_plan(&count_plan,
						  "SELECT j.queue_id, j.state, pg_catalog.count(*)"
						  "  FROM claimq.job j GROUP BY j.queue_id, j.state",
						  0, NULL),
				  NULL, NULL, SPI_OK_SELECT, snapshot);
	UnregisterSnapshot(snapshot);

	/*
	 * n per queue, beside c0: the queues that have entries now and those with
	 * jobs in the snapshot.
	 */
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		bool		found;

		key.queue_id = DatumGetInt32(cq_spi_value(r, 1, &isnull));
		copy = hash_search(copies, &key, HASH_ENTER, &found);
		if (!found)
		{
			memset(copy->c0, 0, sizeof(copy->c0));
			memset(copy->n, 0, sizeof(copy->n));
			copy->counted = false;
			copy->had_entry = false;
		}
		copy->n[cq_state_of(cq_spi_value(r, 2, &isnull))] +=
			DatumGetInt64(cq_spi_value(r, 3, &isnull));
	}

	/*
	 * Under the exclusive lock: add n - c0 to each count, unless another
	 * recount or anything that made the census unknown came first.  The
	 * queues that had entries first (which needs no room, and brings those of
	 * queues without jobs to zero, which makes room), then the others; every
	 * queue is set right that can be, even when one finds no room.
	 */
	cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_EXCLUSIVE);
	key.queue_id = 0;
	header = hash_search(cq_census, &key, HASH_FIND, NULL);
	expected = epoch;
	if (header == NULL ||
		!pg_atomic_compare_exchange_u64(&header->epoch, &expected, epoch + 1))
	{
		valid = cq_census_is_valid(header);
		LWLockRelease(cq_census_lock);
		hash_destroy(copies);
		return valid;
	}
	valid = true;
	for (int pass = 0; pass < 2; pass++)
	{
		hash_seq_init(&status, copies);
		while ((copy = hash_seq_search(&status)) != NULL)
		{
			if (copy->counted || copy->had_entry != (pass == 0))
				continue;
			entry = cq_census_enter(&copy->key);
			if (entry == NULL)
			{
				valid = false;
				continue;
			}
			for (int s = 0; s < CQ_NSTATES; s++)
				pg_atomic_fetch_add_u64(&entry->counts[s],
										copy->n[s] - copy->c0[s]);
			copy->counted = true;
		}
	}
	if (valid)
		header->valid_epoch = epoch + 1;
	LWLockRelease(cq_census_lock);
	hash_destroy(copies);
	return valid;
}

/*
 * claimq.census_recount(): count again now, valid or not: for a superuser
 * who wrote to claimq.job with its triggers disabled, or who will not wait
 * for the reclaimer after a start (and for the tests, whose servers run no
 * reclaimer).
 */
Datum
claimq_census_recount(PG_FUNCTION_ARGS)
{
	bool		valid;

	/*
	 * Its snapshot would count this transaction's own uncommitted rows, whose
	 * notes are still to be added.
	 */
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("census_recount() cannot run in a transaction that has written anything")));
	SPI_connect();
	if (cq_shmem_ready)
		cq_census_forget(cq_job_relid());
	valid = cq_census_recount();
	SPI_finish();
	PG_RETURN_BOOL(valid);
}

/*
 * claimq.census(): the current database's counts per queue and state, one
 * row per queue with an entry, and a row with queue_id 0 if and only if
 * the counts are valid for the caller.  Nothing if they are not, or
 * without the preload.
 */
Datum
claimq_census(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CqCensusKey key;
	CqCensusEntry *header;
	HASH_SEQ_STATUS status;
	CqCensusEntry *entry;
	CqCensusCopy *rows = NULL;
	int			nrows = 0;

	InitMaterializedSRF(fcinfo, 0);

	/*
	 * A transaction that changed jobs itself sees them in queue_stats, not
	 * yet in the census: it is told the counts are not valid, so that
	 * metrics() shows what queue_stats would.
	 */
	if (!cq_shmem_ready || cq_nnotes > 0 || cq_census_unknown)
		return (Datum) 0;
	key = cq_census_key(cq_job_relid(), 0);

	/* Copy under the lock, hand out after. */
	cq_lwlock_gated(cq_census_lock, cq_census_gate, LW_SHARED);
	header = hash_search(cq_census, &key, HASH_FIND, NULL);
	if (cq_census_is_valid(header))
	{
		rows = palloc(sizeof(CqCensusCopy) * hash_get_num_entries(cq_census));
		hash_seq_init(&status, cq_census);
		while ((entry = hash_seq_search(&status)) != NULL)
		{
			if (entry->key.dboid != key.dboid || entry->key.relid != key.relid)
				continue;
			rows[nrows].key = entry->key;
			for (int s = 0; s < CQ_NSTATES; s++)
				rows[nrows].c0[s] = (int64) pg_atomic_read_u64(&entry->counts[s]);
			nrows++;
		}
	}
	LWLockRelease(cq_census_lock);

	for (int r = 0; r < nrows; r++)
	{
		Datum		values[CQ_NSTATES + 1];
		bool		nulls[CQ_NSTATES + 1] = {false};

		values[0] = Int32GetDatum(rows[r].key.queue_id);

		/*
		 * A commit becomes visible before its notes are added: another
		 * transaction that changed its jobs may add first, for a moment below
		 * zero.
		 */
		for (int s = 0; s < CQ_NSTATES; s++)
			values[s + 1] = Int64GetDatum(Max(rows[r].c0[s], 0));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
