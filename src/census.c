/*-------------------------------------------------------------------------
 *
 * census.c
 *		How many jobs each queue has in each state, kept as committed
 *		changes come, so that a scrape of metrics() reads counts instead
 *		of passing over the job table: the trigger on claimq.job, the
 *		commit that adds its changes to shared memory, the recount that
 *		makes the counts exact after a start, and claimq.census().
 *
 * Every change of a job's state goes through claimq.job, whose row
 * triggers (claimq.job_census) note +1 for the new state and -1 for the
 * old one, per queue, in this backend's transaction; an aborted
 * subtransaction's notes are dropped.  Only AFTER row triggers see exactly
 * the rows written (an INSERT ... ON CONFLICT DO NOTHING that skips a row
 * fires none; a BEFORE trigger on UPDATE or DELETE would lock each row
 * once more).  Updates that set neither the state nor the queue, such as
 * extend, fire nothing; the few others that keep both add up to nothing.
 *
 * Shared memory holds, per database and installation (the OID of
 * claimq.job) and queue, one count per state; absent means all zero.
 * A transaction adds its notes to them after its commit is visible
 * (XACT_EVENT_COMMIT), having taken the census lock shared before it
 * (XACT_EVENT_PRE_COMMIT); it keeps the lock until then.  So whoever
 * holds the lock exclusive sees counts that hold exactly the changes of
 * the transactions committed in a snapshot taken then: none is between
 * its commit and its addition.
 *
 * That is what a recount uses (cq_census_recount, by the reclaimer once
 * per database after a start, failover or anything that made the counts
 * unknown): under the exclusive lock it takes a snapshot and copies the
 * counts (c0); without the lock it counts the jobs in that snapshot (n);
 * under the lock again it adds n - c0 to each count, which then holds n
 * plus whatever committed after the snapshot.  It marks the database's
 * census valid unless something made it unknown meanwhile: the epoch,
 * read before anything else and bumped before any count changes (see
 * cq_census_recount).
 *
 * What makes a database's census unknown, from the moment it commits: a
 * server start (shared memory is new), TRUNCATE of claimq.job (no row
 * triggers; its lock is let go after the commit callbacks, so a recount
 * that waited for it finds the epoch changed), PREPARE TRANSACTION of a
 * transaction that changed jobs (another backend decides its fate; the
 * recount waits until no transaction of the database is prepared), and no
 * room for a queue's entry.  Writes with the triggers disabled (ALTER
 * TABLE ... DISABLE TRIGGER, pg_restore --disable-triggers) are not seen:
 * claimq.census_recount() counts again.  On a standby nothing is counted.
 * While a database's census is not valid, claimq.census() says so and
 * metrics() reads queue_stats instead; so it does to a transaction that
 * changed jobs itself, whose changes the census does not hold yet.
 *
 * The price of the lock: from pre-commit on, a committing transaction that
 * changed jobs holds an LWLock, and so cannot be cancelled while it waits
 * in the rest of its commit (for the NOTIFY queue's lock, or for a
 * synchronous standby, which it could not be cancelled in anyway); and
 * while a recount waits for the lock exclusive, such commits wait for the
 * slowest one in progress.  Recounts are rare (after a start, and after
 * whatever made the census unknown).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_job_census);
PG_FUNCTION_INFO_V1(claimq_census);
PG_FUNCTION_INFO_V1(claimq_census_recount);

/* The states, in the order of claimq.census()'s columns. */
typedef enum CqState
{
	CQ_IS_PENDING,
	CQ_IS_CLAIMED,
	CQ_IS_RUNNING,
	CQ_IS_DONE,
	CQ_IS_DEAD,
	CQ_IS_CANCELLED,
	CQ_NSTATES
} CqState;

static const char *const cq_state_names[CQ_NSTATES] = {
	"pending", "claimed", "running", "done", "dead", "cancelled"
};

#define CQ_CENSUS_SLOTS		(1024 + CQ_MAX_DATABASES)

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
	/* The header's, changed under the exclusive lock: */
	bool		valid;
	uint64		epoch;			/* bumped by whatever makes it unknown */
} CqCensusEntry;

static LWLock *cq_census_lock = NULL;
static LWLock *cq_census_gate = NULL;
static HTAB *cq_census = NULL;

/* This transaction's notes, per queue and subtransaction level. */
typedef struct CqCensusNote
{
	int32		queue_id;
	int			level;
	int64		delta[CQ_NSTATES];
	CqCensusEntry *entry;		/* found at pre-commit */
} CqCensusNote;

static CqCensusNote *cq_notes = NULL;
static int	cq_nnotes = 0;
static int	cq_notes_size = 0;
static Oid	cq_notes_relid = InvalidOid;
static bool cq_census_held = false; /* the lock, from pre-commit to commit */
static bool cq_census_unknown = false;	/* make it unknown at commit */
static bool cq_census_callbacks = false;

/* Where the trigger finds queue_id and state in claimq.job's rows. */
static Oid	cq_attrs_relid = InvalidOid;
static AttrNumber cq_queue_attr;
static AttrNumber cq_state_attr;

Size
cq_census_shmem_size(void)
{
	return hash_estimate_size(CQ_CENSUS_SLOTS, sizeof(CqCensusEntry));
}

void
cq_census_shmem_init(LWLock *lock, LWLock *gate)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(CqCensusKey);
	ctl.entrysize = sizeof(CqCensusEntry);
	cq_census_lock = lock;
	cq_census_gate = gate;
	cq_census = ShmemInitHash("claimq census", CQ_CENSUS_SLOTS,
							  CQ_CENSUS_SLOTS, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
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

/*
 * Take the lock exclusive.  A recount, or a commit that needs new entries,
 * closes the gate first: shared holders come and go without pause, and an
 * exclusive waiter would otherwise wait for a moment when there is none.
 */
static void
cq_census_lock_exclusive(void)
{
	LWLockAcquire(cq_census_gate, LW_EXCLUSIVE);
	LWLockAcquire(cq_census_lock, LW_EXCLUSIVE);
	LWLockRelease(cq_census_gate);
}

/*
 * The entry of a key, added with zero counts if missing, or NULL if there
 * is no room even after the entries that are all zero (the same as absent)
 * were removed.  The caller holds the lock exclusive.
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
				entry->valid = false;
				entry->epoch = 0;
			}
			return entry;
		}
		if (attempt == 0)
		{
			HASH_SEQ_STATUS status;
			CqCensusEntry *e;

			hash_seq_init(&status, cq_census);
			while ((e = hash_seq_search(&status)) != NULL)
			{
				bool		zero = e->key.queue_id != 0;

				for (int s = 0; zero && s < CQ_NSTATES; s++)
					zero = pg_atomic_read_u64(&e->counts[s]) == 0;
				if (zero)
					(void) hash_search(cq_census, &e->key, HASH_REMOVE, NULL);
			}
		}
	}
	return NULL;
}

/* The database's header (queue_id 0); the caller holds the lock exclusive. */
static CqCensusEntry *
cq_census_header(Oid relid)
{
	CqCensusKey key = cq_census_key(relid, 0);

	return cq_census_enter(&key);
}

/*
 * Make the current database's census unknown until the next recount.
 * Takes the lock exclusive; not while this backend holds it.
 */
static void
cq_census_forget(Oid relid)
{
	CqCensusEntry *header;

	Assert(!LWLockHeldByMe(cq_census_lock));
	cq_census_lock_exclusive();
	header = cq_census_header(relid);
	if (header != NULL)
	{
		header->valid = false;
		header->epoch++;
	}
	LWLockRelease(cq_census_lock);
}

static void
cq_census_reset_notes(void)
{
	cq_nnotes = 0;
	cq_census_held = false;
	cq_census_unknown = false;
}

/*
 * Before the commit: find every noted queue's entry, making those that are
 * missing, and keep the lock shared until the commit is visible and added.
 */
static void
cq_census_pre_commit(void)
{
	CqCensusKey key = cq_census_key(cq_notes_relid, 0);

	for (int attempt = 0;; attempt++)
	{
		bool		missing = false;

		LWLockAcquire(cq_census_gate, LW_SHARED);
		LWLockRelease(cq_census_gate);
		LWLockAcquire(cq_census_lock, LW_SHARED);
		for (int i = 0; i < cq_nnotes; i++)
		{
			key.queue_id = cq_notes[i].queue_id;
			cq_notes[i].entry = hash_search(cq_census, &key, HASH_FIND, NULL);
			missing |= cq_notes[i].entry == NULL;
		}
		if (!missing || attempt == 2)
			break;
		LWLockRelease(cq_census_lock);

		cq_census_lock_exclusive();
		for (int i = 0; i < cq_nnotes; i++)
		{
			key.queue_id = cq_notes[i].queue_id;
			if (cq_census_enter(&key) == NULL || attempt == 1)
			{
				/*
				 * No room (or no luck): the notes without an entry are
				 * dropped, and the census is unknown once this commits.
				 */
				cq_census_unknown = true;
				break;
			}
		}
		LWLockRelease(cq_census_lock);
	}
	cq_census_held = true;
}

/* After the commit is visible: add the notes, let the lock go. */
static void
cq_census_commit(void)
{
	Assert(LWLockHeldByMeInMode(cq_census_lock, LW_SHARED));
	for (int i = 0; i < cq_nnotes; i++)
	{
		CqCensusEntry *entry = cq_notes[i].entry;

		if (entry == NULL)
			continue;
		for (int s = 0; s < CQ_NSTATES; s++)
			if (cq_notes[i].delta[s] != 0)
				pg_atomic_fetch_add_u64(&entry->counts[s], cq_notes[i].delta[s]);
	}
	LWLockRelease(cq_census_lock);
}

static void
cq_census_xact_callback(XactEvent event, void *arg)
{
	if (cq_nnotes == 0 && !cq_census_unknown)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (cq_nnotes > 0)
				cq_census_pre_commit();
			return;
		case XACT_EVENT_COMMIT:
			if (cq_census_held)
				cq_census_commit();

			/*
			 * What made the census unknown counts from the commit: a recount
			 * whose snapshot missed it finds the epoch changed. (A TRUNCATE's
			 * lock is let go only after this, so a recount that waited for it
			 * does too.)
			 */
			if (cq_census_unknown)
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
			/* Abort, which has let the lock go already. */
			break;
	}
	cq_census_reset_notes();
}

/*
 * A subtransaction's notes become its parent's when it commits, and are
 * dropped when it aborts.
 */
static void
cq_census_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
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

static CqState
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

/* Note one row of claimq.job entering (+1) or leaving (-1) its state. */
static void
cq_census_note(Relation rel, HeapTuple tuple, int sign)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			level = GetCurrentTransactionNestLevel();
	bool		isnull;
	int32		queue_id;
	CqState		state;
	CqCensusNote *note = NULL;

	queue_id = DatumGetInt32(heap_getattr(tuple, cq_queue_attr, desc, &isnull));
	state = cq_state_of(heap_getattr(tuple, cq_state_attr, desc, &isnull));

	for (int i = cq_nnotes - 1; i >= 0; i--)
		if (cq_notes[i].queue_id == queue_id && cq_notes[i].level == level)
		{
			note = &cq_notes[i];
			break;
		}
	if (note == NULL)
	{
		if (cq_nnotes == cq_notes_size)
		{
			cq_notes_size = Max(16, cq_notes_size * 2);
			cq_notes = cq_notes == NULL ?
				MemoryContextAlloc(TopMemoryContext,
								   cq_notes_size * sizeof(CqCensusNote)) :
				repalloc(cq_notes, cq_notes_size * sizeof(CqCensusNote));
		}
		note = &cq_notes[cq_nnotes++];
		memset(note, 0, sizeof(*note));
		note->queue_id = queue_id;
		note->level = level;
	}
	note->delta[state] += sign;
}

/*
 * claimq.job_census(): the row triggers of claimq.job (AFTER INSERT or
 * DELETE, AFTER UPDATE of a job's state) and its TRUNCATE trigger.
 */
Datum
claimq_job_census(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	TriggerEvent event;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("claimq.job_census() is a trigger of claimq.job")));
	rel = trigdata->tg_relation;
	event = trigdata->tg_event;
	if (!cq_shmem_ready)
		return PointerGetDatum(NULL);
	if (!cq_census_callbacks)
	{
		RegisterXactCallback(cq_census_xact_callback, NULL);
		RegisterSubXactCallback(cq_census_subxact_callback, NULL);
		cq_census_callbacks = true;
	}
	cq_notes_relid = RelationGetRelid(rel);
	if (TRIGGER_FIRED_BY_TRUNCATE(event))
	{
		/* Rows gone without row triggers: unknown once this commits. */
		cq_census_unknown = true;
		return PointerGetDatum(NULL);
	}
	if (!TRIGGER_FIRED_FOR_ROW(event) || !TRIGGER_FIRED_AFTER(event))
		elog(ERROR, "claimq.job_census() fired for something other than a row, after");

	if (cq_attrs_relid != RelationGetRelid(rel))
	{
		cq_queue_attr = SPI_fnumber(RelationGetDescr(rel), "queue_id");
		cq_state_attr = SPI_fnumber(RelationGetDescr(rel), "state");
		if (cq_queue_attr <= 0 || cq_state_attr <= 0)
			elog(ERROR, "claimq.job_census() fired for a table without queue_id and state");
		cq_attrs_relid = RelationGetRelid(rel);
	}
	if (TRIGGER_FIRED_BY_INSERT(event))
		cq_census_note(rel, trigdata->tg_trigtuple, 1);
	else if (TRIGGER_FIRED_BY_DELETE(event))
		cq_census_note(rel, trigdata->tg_trigtuple, -1);
	else
	{
		cq_census_note(rel, trigdata->tg_trigtuple, -1);
		cq_census_note(rel, trigdata->tg_newtuple, 1);
	}
	return PointerGetDatum(NULL);
}

/* A queue's counts as the recount copied them (c0). */
typedef struct CqCensusCopy
{
	CqCensusKey key;
	int64		c0[CQ_NSTATES];
	bool		counted;		/* n - c0 added already */
} CqCensusCopy;

/*
 * Count the current database's jobs again (see the file header), if its
 * census is not valid.  Called by the reclaimer inside a transaction that
 * has written nothing, connected to SPI, as the extension's owner.
 * Returns true if the census is valid afterwards.
 *
 * The epoch is read first and checked at the end, where it is also bumped
 * before any count changes: a transaction prepared before the first read
 * is listed by the check that follows it (or committed before the
 * snapshot), anything that made the census unknown since changes the
 * epoch, and of two recounts at once only the first to finish adds.
 */
bool
cq_census_recount(void)
{
	static SPIPlanPtr prepared_plan = NULL;
	static SPIPlanPtr count_plan = NULL;
	Oid			relid = cq_job_relid();
	CqCensusEntry *header;
	Snapshot	snapshot;
	uint64		epoch;
	HTAB	   *copies;
	HASHCTL		ctl;
	HASH_SEQ_STATUS status;
	CqCensusEntry *entry;
	CqCensusCopy *copy;
	CqCensusKey key = cq_census_key(relid, 0);
	bool		valid;

	if (!cq_shmem_ready || RecoveryInProgress())
		return false;

	LWLockAcquire(cq_census_lock, LW_SHARED);
	header = hash_search(cq_census, &key, HASH_FIND, NULL);
	valid = header != NULL && header->valid;
	epoch = header != NULL ? header->epoch : 0;
	LWLockRelease(cq_census_lock);
	if (valid)
		return true;
	if (header == NULL)
	{
		/* The database's first count: make its header (epoch 0). */
		cq_census_lock_exclusive();
		header = cq_census_header(relid);
		valid = header != NULL && header->valid;
		epoch = header != NULL ? header->epoch : 0;
		LWLockRelease(cq_census_lock);
		if (valid || header == NULL)
			return valid;
	}

	/*
	 * A prepared transaction's changes would come without notes when it is
	 * committed: wait until there is none.
	 */
	cq_execute(cq_plan(&prepared_plan,
					   "SELECT 1 FROM pg_catalog.pg_prepared_xacts p"
					   " WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()"
					   " LIMIT 1", 0, NULL),
			   NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		return false;

	ctl.keysize = sizeof(CqCensusKey);
	ctl.entrysize = sizeof(CqCensusCopy);
	ctl.hcxt = CurrentMemoryContext;
	copies = hash_create("claimq census recount", 64, &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	/*
	 * Under the exclusive lock: the snapshot and c0.  No commit is between
	 * its pre-commit and the addition of its notes.
	 */
	cq_census_lock_exclusive();
	snapshot = RegisterSnapshot(GetLatestSnapshot());
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
		copy->counted = false;
	}
	LWLockRelease(cq_census_lock);

	/* n: the jobs in the snapshot, counted without the lock. */
	cq_execute_in(cq_plan(&count_plan,
						  "SELECT j.queue_id, j.state, pg_catalog.count(*)"
						  "  FROM claimq.job j GROUP BY j.queue_id, j.state",
						  0, NULL),
				  NULL, NULL, SPI_OK_SELECT, snapshot);
	UnregisterSnapshot(snapshot);

	/* Under the exclusive lock: add n - c0 to each count. */
	cq_census_lock_exclusive();
	header = cq_census_header(relid);
	valid = header != NULL && header->epoch == epoch;
	if (valid)
		header->epoch++;		/* before any count changes */
	for (uint64 r = 0; valid && r < SPI_processed; r++)
	{
		bool		isnull;
		bool		found;

		key.queue_id = DatumGetInt32(cq_spi_value(r, 1, &isnull));
		entry = cq_census_enter(&key);
		if (entry == NULL)
		{
			valid = false;
			break;
		}
		copy = hash_search(copies, &key, HASH_ENTER, &found);
		if (!found)
			memset(copy->c0, 0, sizeof(copy->c0));
		if (!found || !copy->counted)
		{
			for (int s = 0; s < CQ_NSTATES; s++)
				pg_atomic_fetch_sub_u64(&entry->counts[s], copy->c0[s]);
			copy->counted = true;
		}
		pg_atomic_fetch_add_u64(&entry->counts[cq_state_of(cq_spi_value(r, 2, &isnull))],
								DatumGetInt64(cq_spi_value(r, 3, &isnull)));
	}
	/* The queues without jobs in the snapshot: n is 0. */
	hash_seq_init(&status, copies);
	while ((copy = hash_seq_search(&status)) != NULL)
	{
		if (!valid || copy->counted)
			continue;
		entry = cq_census_enter(&copy->key);
		if (entry == NULL)
		{
			valid = false;
			continue;
		}
		for (int s = 0; s < CQ_NSTATES; s++)
			pg_atomic_fetch_sub_u64(&entry->counts[s], copy->c0[s]);
	}
	if (header != NULL && header->epoch == epoch + 1)
		header->valid = valid;
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
	LWLockAcquire(cq_census_lock, LW_SHARED);
	header = hash_search(cq_census, &key, HASH_FIND, NULL);
	if (header != NULL && header->valid)
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
