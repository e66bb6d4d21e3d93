/*-------------------------------------------------------------------------
 *
 * floor.c
 *		Claim floors: where in a queue's ready index a claim may start.
 *
 * Every claimed job leaves a dead entry at the head of the partial index
 * over pending jobs, and VACUUM is what removes it.  Until then each claim
 * that starts at the head of the index steps over all of them, one index
 * page per few hundred claimed jobs, so a busy queue's claims slow down by
 * the minute.  A floor is a position (run_at, job_id) below which the queue
 * has no pending job; a claim that knows it starts its scan there.
 *
 * With shared_preload_libraries = 'claimq', shared memory holds one floor
 * per recently claimed queue (claimq.floor_slots slots; a queue without
 * one just starts at the head).  The floor is only ever raised by a claim and
 * lowered by the transitions that make jobs pending:
 *
 *	- A claim that read the floor, then took its statement's snapshot, and
 *	  claimed every job it picked, of the lowest priority with pending jobs
 *	  last, raises the floor to the last job it claimed.  Every pending job
 *	  before that was claimed, skipped as locked by another claim, or not
 *	  yet visible to it.  Lowerings since it read the floor are jobs it may
 *	  not have seen, so it raises the floor no further than the earliest of
 *	  them (each slot remembers its last CQ_FLOOR_LOG lowerings; a claim
 *	  that outlived more does not raise).  Jobs enqueued while it ran come
 *	  after the ones it claimed, so a steady stream of producers does not
 *	  keep the floor down.  Raising happens only under READ COMMITTED,
 *	  where the claim's snapshot is younger than its read.
 *	- A transaction that made jobs pending (enqueue, release, reclaim,
 *	  fail with a retry) lowers the floor to their earliest run_at once its
 *	  commit is visible; one that claimed jobs lowers it to the earliest
 *	  of them when it, or the subtransaction that claimed them, aborts
 *	  (ledger.c keeps the list and calls here, once per queue; a
 *	  transaction that made jobs of more queues ready than its list holds
 *	  drops the database's floors once, at its end).
 *
 * So a job skipped as locked by a claim that then rolls back, or committed by
 * a transaction the claim could not see yet, lowers the floor again before or
 * after the claim raises it; either way no later claim starts past it.
 * Whatever else makes a job pending behind the claims' back is caught by the
 * age limit: a floor older than CQ_FLOOR_MAX_AGE_MS since a claim last started
 * at the head of the index is not used, so the next claim starts at the head
 * again and sets it anew.  Such cases: a superuser's UPDATE; ROLLBACK
 * PREPARED; a drop_queue or purge_queue that deleted pending jobs and then
 * failed (claims skipped the rows it had locked); and a claim whose snapshot
 * saw a job pending that another claim then took and released, both committing
 * before this claim locked it: the lock lands on the released version, which
 * the claim's snapshot cannot update, so the job stays pending and locked
 * until the claim's transaction ends.
 *
 * Slots are keyed by database, the OID of claimq.job (a dropped and
 * re-created extension starts afresh) and queue id.  One spinlock guards
 * them all; every operation is a few comparisons (dropping a database's
 * floors, a pass over claimq.floor_slots slots), and nothing else is
 * waited for, or held across a commit, while it is held.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "claimq.h"

#define CQ_FLOOR_PROBES		8	/* slots a key may occupy */
#define CQ_FLOOR_MAX_AGE_MS	1000
#define CQ_FLOOR_LOG		32	/* recent lowerings a slot remembers */

typedef struct CqFloorSlot
{
	bool		used;
	Oid			dboid;
	Oid			relid;
	int32		queue_id;
	uint64		incarnation;	/* changes when the slot is (re)assigned */
	uint64		seq;			/* lowerings so far */
	/* run_at of lowering number seq, at [seq % CQ_FLOOR_LOG] */
	TimestampTz lowered[CQ_FLOOR_LOG];
	bool		valid;			/* run_at, job_id hold a floor */
	TimestampTz run_at;
	int64		job_id;
	TimestampTz head_at;		/* when a claim last started at the head */
} CqFloorSlot;

typedef struct CqFloorShared
{
	slock_t		mutex;
	uint64		next_incarnation;
	int			nslots;
	CqFloorSlot slots[FLEXIBLE_ARRAY_MEMBER];
} CqFloorShared;

static CqFloorShared *cq_floors = NULL;

Size
cq_floor_shmem_size(void)
{
	return add_size(offsetof(CqFloorShared, slots),
					mul_size(cq_floor_slots, sizeof(CqFloorSlot)));
}

void
cq_floor_shmem_init(void)
{
	bool		found;

	cq_floors = ShmemInitStruct("claimq claim floors", cq_floor_shmem_size(),
								&found);
	if (!found)
	{
		memset(cq_floors, 0, cq_floor_shmem_size());
		cq_floors->nslots = cq_floor_slots;
		SpinLockInit(&cq_floors->mutex);
		cq_floors->next_incarnation = 1;
	}
}

static uint32
cq_floor_home(Oid dboid, Oid relid, int32 queue_id)
{
	/*
	 * Its database, the OID of claimq.job (one installation from the next),
	 * its id.
	 */
	uint32		key[3] = {dboid, relid, (uint32) queue_id};

	return hash_bytes((const unsigned char *) key, sizeof(key)) % cq_floors->nslots;
}

/*
 * The slot of a queue, or NULL.  With create, a missing slot is assigned
 * (without a floor), taking over the least recently reset slot of the
 * key's probe window if all are used.  Called with the mutex held.
 */
static CqFloorSlot *
cq_floor_slot(Oid dboid, Oid relid, int32 queue_id, bool create)
{
	uint32		home = cq_floor_home(dboid, relid, queue_id);
	CqFloorSlot *victim = NULL;

	for (int i = 0; i < CQ_FLOOR_PROBES; i++)
	{
		CqFloorSlot *slot = &cq_floors->slots[(home + i) % cq_floors->nslots];

		if (slot->used && slot->dboid == dboid && slot->relid == relid &&
			slot->queue_id == queue_id)
			return slot;
		if (victim == NULL || !slot->used ||
			(victim->used && slot->head_at < victim->head_at))
			victim = slot;
	}
	if (!create)
		return NULL;
	victim->used = true;
	victim->dboid = dboid;
	victim->relid = relid;
	victim->queue_id = queue_id;
	victim->incarnation = cq_floors->next_incarnation++;
	victim->seq = 0;
	memset(victim->lowered, 0, sizeof(victim->lowered));
	victim->valid = false;
	victim->head_at = 0;
	return victim;
}

/*
 * Count a lowering of the slot's floor to run_at.  The caller holds the
 * mutex.
 */
static void
cq_floor_note_lowering(CqFloorSlot *slot, TimestampTz run_at)
{
	slot->seq++;
	slot->lowered[slot->seq % CQ_FLOOR_LOG] = run_at;
}

/*
 * The earliest run_at the slot's floor was lowered to after lowering seq,
 * in *low (DT_NOEND if none).  False if the slot no longer remembers all
 * of them.  The caller holds the mutex.
 */
static bool
cq_floor_lowered_since(const CqFloorSlot *slot, uint64 seq, TimestampTz *low)
{
	*low = DT_NOEND;
	if (slot->seq - seq > CQ_FLOOR_LOG)
		return false;
	for (uint64 s = seq + 1; s <= slot->seq; s++)
		*low = Min(*low, slot->lowered[s % CQ_FLOOR_LOG]);
	return true;
}

/*
 * Read the floor a claim on the queue may start at, before the claim takes
 * its snapshot.  Sets floor->run_at and floor->job_id to the position
 * (-infinity when the claim must start at the head) and remembers what
 * cq_floor_raise needs.
 */
void
cq_floor_read(int32 queue_id, TimestampTz now, CqFloor *floor)
{
	CqFloorSlot *slot;
	Oid			relid;

	floor->run_at = DT_NOBEGIN;
	floor->job_id = PG_INT64_MIN;
	floor->slot = -1;
	if (!cq_shmem_ready || !cq_claim_floors)
		return;

	relid = cq_job_relid();
	SpinLockAcquire(&cq_floors->mutex);
	slot = cq_floor_slot(MyDatabaseId, relid, queue_id, true);
	floor->slot = slot - cq_floors->slots;
	floor->incarnation = slot->incarnation;
	floor->seq = slot->seq;
	/* A clock that went backwards ages the floor out too. */
	floor->from_head = !slot->valid || now < slot->head_at ||
		TimestampDifferenceExceeds(slot->head_at, now, CQ_FLOOR_MAX_AGE_MS);
	if (!floor->from_head)
	{
		floor->run_at = slot->run_at;
		floor->job_id = slot->job_id;
	}
	SpinLockRelease(&cq_floors->mutex);
	floor->read_at = now;
}

/*
 * After a claim that read floor: raise the queue's floor to the last job
 * the claim took, unless anything lowered it since the read.  The caller
 * has checked the other conditions (see the file header).
 */
void
cq_floor_raise(const CqFloor *floor, TimestampTz run_at, int64 job_id)
{
	CqFloorSlot *slot;
	TimestampTz low;

	if (!cq_shmem_ready || floor->slot < 0)
		return;

	SpinLockAcquire(&cq_floors->mutex);
	slot = &cq_floors->slots[floor->slot];
	if (slot->used && slot->incarnation == floor->incarnation &&
		cq_floor_lowered_since(slot, floor->seq, &low))
	{
		/*
		 * Jobs made pending since the claim read the floor, from run_at low
		 * on, may be invisible to its snapshot: the floor may not pass them.
		 * Those enqueued at the tail of the queue while the claim ran, the
		 * usual case, come after the jobs it claimed.
		 */
		if (low <= run_at)
		{
			run_at = low;
			job_id = PG_INT64_MIN;
		}
		if (floor->from_head)
		{
			slot->valid = true;
			slot->run_at = run_at;
			slot->job_id = job_id;
			slot->head_at = floor->read_at;
		}
		else if (slot->valid &&
				 (run_at > slot->run_at ||
				  (run_at == slot->run_at && job_id > slot->job_id)))
		{
			slot->run_at = run_at;
			slot->job_id = job_id;
		}
	}
	SpinLockRelease(&cq_floors->mutex);
}

/*
 * Jobs of the queue with run_at at or after run_at became pending (or may
 * have): lower its floor to there.  DT_NOBEGIN drops the floor.  Called
 * from transaction callbacks, so it must not fail.
 */
void
cq_floor_lower(Oid dboid, Oid relid, int32 queue_id, TimestampTz run_at)
{
	CqFloorSlot *slot;

	if (!cq_shmem_ready)
		return;

	SpinLockAcquire(&cq_floors->mutex);
	slot = cq_floor_slot(dboid, relid, queue_id, false);
	if (slot != NULL)
	{
		cq_floor_note_lowering(slot, run_at);
		if (slot->valid && run_at <= slot->run_at)
		{
			if (run_at == DT_NOBEGIN)
				slot->valid = false;
			slot->run_at = run_at;
			slot->job_id = PG_INT64_MIN;
		}
	}
	SpinLockRelease(&cq_floors->mutex);
}

/*
 * Drop the floors of every queue of a database (a transaction that touched
 * too many queues to list).
 */
void
cq_floor_drop_database(Oid dboid)
{
	if (!cq_shmem_ready)
		return;

	SpinLockAcquire(&cq_floors->mutex);
	for (int i = 0; i < cq_floors->nslots; i++)
	{
		CqFloorSlot *slot = &cq_floors->slots[i];

		if (slot->used && slot->dboid == dboid)
		{
			cq_floor_note_lowering(slot, DT_NOBEGIN);
			slot->valid = false;
		}
	}
	SpinLockRelease(&cq_floors->mutex);
}
