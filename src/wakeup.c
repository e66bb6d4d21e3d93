/*-------------------------------------------------------------------------
 *
 * wakeup.c
 *		Wake-ups for claim(..., wait => ...): a session waiting for work
 *		on a queue sleeps on its latch until a transaction that made jobs
 *		of that queue ready commits.
 *
 * With shared_preload_libraries = 'claimq', shared memory holds one slot per
 * backend.  A waiting claim publishes (database, queue) in its slot before it
 * looks for jobs, then sleeps; a transaction that enqueued or released jobs
 * has them in its ledger (ledger.c), which, once its commit is visible to
 * others (XACT_EVENT_COMMIT), has cq_wake_waiters set the latch of every
 * backend waiting on one of their queues.  Because the slot is published
 * before the waiter's own look, and a latch stays set until reset, no wake-up
 * is lost: either the waiter's look sees the commit, or the committer sees the
 * waiter.
 *
 * The slots are read without a lock.  A slot's owner writes its queue
 * first and the flag after a write barrier; a reader checks the flag,
 * then reads the queue after a read barrier.  A stale read at worst sets a
 * latch for nothing, which every latch user tolerates.  There is one slot
 * per backend (MaxBackends), so the table is never full; a transaction
 * that touched more queues than its ledger lists wakes every waiter of its
 * database instead.
 *
 * Without the preload there are no slots and claim() polls instead.
 *
 * wait_for() uses the same slots under the queue id CQ_WAIT_FINISHED: a
 * transaction that finished or removed jobs (complete, fail or reclaim to
 * dead, cancel, prune, purge_queue, drop_queue) wakes every such waiter of
 * its database at commit, and each looks again at the jobs it waits for.
 *
 * What else a transaction's commit or abort does to waiting claims, the
 * claim floors (floor.c), is the ledger's to do, before the wake-ups.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "claimq.h"

typedef struct CqWaitSlot
{
	pg_atomic_uint32 waiting;	/* 1 while the owner waits */
	Oid			dboid;
	int32		queue_id;
	int			pid;
	Latch	   *latch;
} CqWaitSlot;

typedef struct CqWakeShared
{
	pg_atomic_uint32 nwaiting;	/* slots with waiting = 1, roughly */
	pg_atomic_uint32 nfinishwaiting;	/* those of them in wait_for */
	int			nslots;
	CqWaitSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} CqWakeShared;

static CqWakeShared *cq_wake = NULL;

static void cq_wait_exit(int code, Datum arg);

static bool cq_exit_callback_registered = false;

Size
cq_wakeup_shmem_size(void)
{
	return add_size(offsetof(CqWakeShared, slots),
					mul_size(MaxBackends, sizeof(CqWaitSlot)));
}

void
cq_wakeup_shmem_init(void)
{
	bool		found;

	cq_wake = ShmemInitStruct("claimq wake-ups", cq_wakeup_shmem_size(),
							  &found);
	if (!found)
	{
		pg_atomic_init_u32(&cq_wake->nwaiting, 0);
		pg_atomic_init_u32(&cq_wake->nfinishwaiting, 0);
		cq_wake->nslots = MaxBackends;
		for (int i = 0; i < MaxBackends; i++)
			pg_atomic_init_u32(&cq_wake->slots[i].waiting, 0);
	}
}

static CqWaitSlot *
cq_my_wait_slot(void)
{
	int			index = CQ_MY_BACKEND_INDEX;

	if (!cq_shmem_ready || index < 0 || index >= cq_wake->nslots)
		return NULL;
	return &cq_wake->slots[index];
}

/*
 * Start waiting for jobs of a queue (or, under CQ_WAIT_FINISHED, for jobs
 * to finish).  Returns false if wake-ups are not available (no preload),
 * in which case the caller polls.
 */
bool
cq_wait_begin(int32 queue_id)
{
	CqWaitSlot *slot = cq_my_wait_slot();

	if (slot == NULL)
		return false;

	/*
	 * A wait ended by FATAL (pg_terminate_backend, say) unwinds no
	 * PG_FINALLY: leave the slot on the way out instead, or it would count as
	 * waiting for ever.
	 */
	if (!cq_exit_callback_registered)
	{
		before_shmem_exit(cq_wait_exit, (Datum) 0);
		cq_exit_callback_registered = true;
	}
	slot->dboid = MyDatabaseId;
	slot->queue_id = queue_id;
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	pg_write_barrier();
	pg_atomic_write_u32(&slot->waiting, 1);
	pg_atomic_fetch_add_u32(&cq_wake->nwaiting, 1);
	if (queue_id == CQ_WAIT_FINISHED)
		pg_atomic_fetch_add_u32(&cq_wake->nfinishwaiting, 1);
	/* The caller's next look for jobs must not be read before the flag. */
	pg_memory_barrier();
	return true;
}

void
cq_wait_end(void)
{
	CqWaitSlot *slot = cq_my_wait_slot();

	if (slot == NULL || pg_atomic_read_u32(&slot->waiting) == 0)
		return;
	pg_atomic_write_u32(&slot->waiting, 0);
	pg_atomic_fetch_sub_u32(&cq_wake->nwaiting, 1);
	if (slot->queue_id == CQ_WAIT_FINISHED)
		pg_atomic_fetch_sub_u32(&cq_wake->nfinishwaiting, 1);
}

static void
cq_wait_exit(int code, Datum arg)
{
	cq_wait_end();
}

/*
 * Sleep until the deadline, or until this backend's latch is set: by a
 * wake-up if waiting (cq_wait_begin succeeded), then at most recheck_ms if
 * that is not zero; otherwise at most *poll_ms, which doubles for the next
 * time up to CQ_POLL_MAX_MS.  Then handle interrupts.
 */
void
cq_wait_sleep(bool waiting, long recheck_ms, long *poll_ms,
			  TimestampTz deadline)
{
	long		sleep_ms = (deadline - GetCurrentTimestamp() + 999) / 1000;

	if (!waiting)
	{
		sleep_ms = Min(sleep_ms, *poll_ms);
		*poll_ms = Min(*poll_ms * 2, CQ_POLL_MAX_MS);
	}
	else if (recheck_ms > 0)
		sleep_ms = Min(sleep_ms, recheck_ms);
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Max(sleep_ms, 0), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * waiting_claims() returns table(pid, queue_id): the claims of this
 * database that wait for work now (nothing without the preload).  For
 * diagnosis; no duty includes it.
 */
PG_FUNCTION_INFO_V1(claimq_waiting_claims);

Datum
claimq_waiting_claims(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (!cq_shmem_ready)
		return (Datum) 0;
	for (int i = 0; i < cq_wake->nslots; i++)
	{
		CqWaitSlot *slot = &cq_wake->slots[i];
		Datum		values[2];
		bool		nulls[2] = {false, false};

		if (pg_atomic_read_u32(&slot->waiting) == 0)
			continue;
		pg_read_barrier();
		if (slot->dboid != MyDatabaseId || slot->queue_id == CQ_WAIT_FINISHED)
			continue;
		values[0] = Int32GetDatum(slot->pid);
		values[1] = Int32GetDatum(slot->queue_id);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * Wake the waiters of this database that a commit concerns: claims
 * waiting on one of the n queues (on any, if all), and, if finished, every
 * wait_for.  Called once the commit is visible (ledger.c).
 */
void
cq_wake_waiters(const int32 *queue_ids, int n, bool all, bool finished)
{
	if (!cq_shmem_ready || pg_atomic_read_u32(&cq_wake->nwaiting) == 0)
		return;
	finished = finished && pg_atomic_read_u32(&cq_wake->nfinishwaiting) > 0;
	if (n == 0 && !all && !finished)
		return;
	for (int i = 0; i < cq_wake->nslots; i++)
	{
		CqWaitSlot *slot = &cq_wake->slots[i];
		bool		wake;

		if (pg_atomic_read_u32(&slot->waiting) == 0)
			continue;
		pg_read_barrier();
		if (slot->dboid != MyDatabaseId)
			continue;
		if (slot->queue_id == CQ_WAIT_FINISHED)
		{
			if (finished)
				SetLatch(slot->latch);
			continue;
		}
		wake = all;
		for (int q = 0; q < n && !wake; q++)
			wake = (queue_ids[q] == slot->queue_id);
		if (wake)
			SetLatch(slot->latch);
	}
}
