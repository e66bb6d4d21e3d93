/*-------------------------------------------------------------------------
 *
 * wakeup.c
 *		Wake-ups for claim(..., wait => ...): a session waiting for work
 *		on a queue sleeps on its latch until a transaction that made jobs
 *		of that queue ready commits.
 *
 * With shared_preload_libraries = 'claimq', shared memory holds one slot
 * per backend.  A waiting claim publishes (database, queue) in its slot
 * before it looks for jobs, then sleeps; a transaction that enqueued or
 * released jobs remembers their queues and, once its commit is visible to
 * others (XACT_EVENT_COMMIT), sets the latch of every backend waiting on
 * one of them.  Because the slot is published before the waiter's own
 * look, and a latch stays set until reset, no wake-up is lost: either the
 * waiter's look sees the commit, or the committer sees the waiter.
 *
 * The slots are read without a lock.  A slot's owner writes its queue
 * first and the flag after a write barrier; a reader checks the flag,
 * then reads the queue after a read barrier.  A stale read at worst sets a
 * latch for nothing, which every latch user tolerates.  There is one slot
 * per backend (MaxBackends), so the table is never full; a transaction
 * that touched more queues than it remembers wakes every waiter of its
 * database instead.
 *
 * Without the preload there are no slots and claim() polls instead.
 *
 * wait_for() uses the same slots under the queue id CQ_WAIT_FINISHED: a
 * transaction that finished or removed jobs (complete, fail or reclaim to
 * dead, cancel, prune, purge_queue, drop_queue) wakes every such waiter of
 * its database at commit, and each looks again at the jobs it waits for.
 *
 * The same list of queues serves the claim floors (floor.c): at commit
 * each listed queue's floor is lowered to the earliest run_at this
 * transaction made pending, and the queues it claimed from are lowered to
 * the earliest job it claimed when it, or a subtransaction, aborts.
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

/* Queues remembered per transaction before it counts as "many". */
#define CQ_WAKE_QUEUES	8

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

/*
 * This transaction's queues: those it made jobs pending in (ready) and
 * those it claimed jobs from (claimed), each with the earliest run_at.
 * Past CQ_WAKE_QUEUES queues it counts as "many": every waiter of the
 * database is woken and every floor of it dropped.
 */
typedef struct CqXactQueue
{
	int32		queue_id;
	bool		ready;
	bool		freed;			/* took jobs of a limited queue out of flight */
	bool		claimed;
	TimestampTz ready_run_at;
	TimestampTz claimed_run_at;
} CqXactQueue;

static CqXactQueue cq_xact_queues[CQ_WAKE_QUEUES];
static int	cq_nqueues = 0;
static bool cq_queues_many = false;
static bool cq_xact_finished = false;	/* finished or removed jobs */
static Oid	cq_xact_relid = InvalidOid;
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
 * Wake the waiters of this database that this transaction's commit
 * concerns: claims waiting on a queue it made jobs pending in, and, if it
 * finished or removed jobs, every wait_for.
 */
static void
cq_wake_waiters(void)
{
	bool		finished = cq_xact_finished &&
	pg_atomic_read_u32(&cq_wake->nfinishwaiting) > 0;

	if (pg_atomic_read_u32(&cq_wake->nwaiting) == 0)
		return;
	if (cq_nqueues == 0 && !cq_queues_many && !finished)
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
		wake = cq_queues_many;
		for (int q = 0; q < cq_nqueues && !wake; q++)
			wake = ((cq_xact_queues[q].ready || cq_xact_queues[q].freed) &&
					cq_xact_queues[q].queue_id == slot->queue_id);
		if (wake)
			SetLatch(slot->latch);
	}
}

/*
 * Lower the floors of the listed queues: those made ready (at commit) or
 * those claimed from (at abort).
 */
static void
cq_lower_floors(bool ready)
{
	if (cq_queues_many)
	{
		cq_floor_drop_database(MyDatabaseId);
		return;
	}
	for (int q = 0; q < cq_nqueues; q++)
	{
		CqXactQueue *xq = &cq_xact_queues[q];

		if (ready ? xq->ready : xq->claimed)
			cq_floor_lower(MyDatabaseId, cq_xact_relid, xq->queue_id,
						   ready ? xq->ready_run_at : xq->claimed_run_at);
	}
}

/* The end of a transaction (ledger.c calls it). */
void
cq_wakeup_xact_event(XactEvent event)
{
	if (cq_nqueues == 0 && !cq_queues_many && !cq_xact_finished)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			/* Lower first: a woken waiter must find the floor lowered. */
			cq_lower_floors(true);
			cq_wake_waiters();
			break;
		case XACT_EVENT_ABORT:
			cq_lower_floors(false);
			break;
		case XACT_EVENT_PREPARE:

			/*
			 * Its fate is decided elsewhere, and COMMIT PREPARED runs no
			 * callback of ours: the floors' age limit covers it, and waiters
			 * see its commit at their next recheck (CQ_WAKE_RECHECK_MS).
			 */
			cq_lower_floors(true);
			cq_lower_floors(false);
			break;
		default:
			return;
	}
	cq_nqueues = 0;
	cq_queues_many = false;
	cq_xact_finished = false;
}

/* Claims of an aborted subtransaction are undone: lower at once. */
void
cq_wakeup_subxact_event(SubXactEvent event)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		cq_lower_floors(false);
}

/*
 * The entry of a queue in this transaction's list, or NULL once there are
 * too many to list.
 */
static CqXactQueue *
cq_xact_queue(int32 queue_id)
{
	CqXactQueue *xq;

	cq_ledger_use();
	if (cq_nqueues == 0 && !cq_queues_many)
		cq_xact_relid = cq_job_relid();
	for (int q = 0; q < cq_nqueues; q++)
		if (cq_xact_queues[q].queue_id == queue_id)
			return &cq_xact_queues[q];
	if (cq_nqueues == CQ_WAKE_QUEUES)
	{
		cq_queues_many = true;
		return NULL;
	}
	xq = &cq_xact_queues[cq_nqueues++];
	xq->queue_id = queue_id;
	xq->ready = xq->freed = xq->claimed = false;
	xq->ready_run_at = xq->claimed_run_at = DT_NOEND;
	return xq;
}

/*
 * Note that this transaction made jobs of the queue pending, the earliest
 * at run_at (DT_NOBEGIN if unknown): waiters on the queue are woken and
 * its floor lowered when the transaction commits.  The floor is lowered
 * at once as well, for this transaction's own later claims, which see the
 * jobs already.
 */
void
cq_ready_on_commit(int32 queue_id, TimestampTz run_at)
{
	CqXactQueue *xq;

	if (!cq_shmem_ready)
		return;
	xq = cq_xact_queue(queue_id);
	if (xq == NULL)
	{
		cq_floor_drop_database(MyDatabaseId);
		return;
	}
	xq->ready = true;
	xq->ready_run_at = Min(xq->ready_run_at, run_at);
	cq_floor_lower(MyDatabaseId, cq_xact_relid, queue_id, run_at);
}

/*
 * Note that this transaction took jobs of a queue with queue-wide limits
 * out of flight: claims waiting on the queue are woken when it commits
 * (flow.c).
 */
void
cq_freed_on_commit(int32 queue_id)
{
	CqXactQueue *xq;

	if (!cq_shmem_ready)
		return;
	xq = cq_xact_queue(queue_id);
	if (xq != NULL)
		xq->freed = true;
}

/*
 * Note that this transaction finished or removed jobs: every wait_for of
 * the database looks again when it commits.  (A wait_for that finds its
 * jobs unfinished sleeps on; one woken for nothing costs a look.)
 */
void
cq_finished_on_commit(void)
{
	if (!cq_shmem_ready)
		return;
	cq_ledger_use();
	cq_xact_finished = true;
}

/*
 * note_change(queue_id, made_pending, finished) returns void: what the
 * SQL-language transitions (resume_queue, retry_dead, purge_queue,
 * drop_queue) did, told to the C side.  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_note_change);

Datum
claimq_note_change(PG_FUNCTION_ARGS)
{
	cq_arg_not_null(fcinfo, 0, "queue_id");
	if (!PG_ARGISNULL(1) && PG_GETARG_BOOL(1))
		cq_ready_on_commit(PG_GETARG_INT32(0), DT_NOBEGIN);
	if (!PG_ARGISNULL(2) && PG_GETARG_BOOL(2))
		cq_finished_on_commit();
	PG_RETURN_VOID();
}

/*
 * Note that this transaction claimed jobs of the queue, the earliest at
 * run_at: if it aborts, they are pending again.
 */
void
cq_claimed_in_xact(int32 queue_id, TimestampTz run_at)
{
	CqXactQueue *xq;

	if (!cq_shmem_ready)
		return;
	xq = cq_xact_queue(queue_id);
	if (xq == NULL)
		return;
	xq->claimed = true;
	xq->claimed_run_at = Min(xq->claimed_run_at, run_at);
}

/*
 * The earliest run_at at which this transaction made jobs of the queue
 * pending (DT_NOEND if none): its own claims start no later than that,
 * whatever floor other sessions' claims have set meanwhile, since those
 * could not see the jobs.
 */
TimestampTz
cq_xact_ready_run_at(int32 queue_id)
{
	if (cq_queues_many)
		return DT_NOBEGIN;
	for (int q = 0; q < cq_nqueues; q++)
		if (cq_xact_queues[q].queue_id == queue_id && cq_xact_queues[q].ready)
			return cq_xact_queues[q].ready_run_at;
	return DT_NOEND;
}
