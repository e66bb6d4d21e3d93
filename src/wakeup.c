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
 * latch for nothing, which every latch user tolerates.
 *
 * Without the preload there are no slots and claim() polls instead.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "claimq.h"

/* Queues remembered per transaction before it counts as "many". */
#define CQ_WAKE_QUEUES	8

typedef struct CqWaitSlot
{
	pg_atomic_uint32 waiting;	/* 1 while the owner waits */
	Oid			dboid;
	int32		queue_id;
	Latch	   *latch;
} CqWaitSlot;

typedef struct CqWakeShared
{
	pg_atomic_uint32 nwaiting;	/* slots with waiting = 1, roughly */
	int			nslots;
	CqWaitSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} CqWakeShared;

static CqWakeShared *cq_wake = NULL;

/* This transaction's queues with newly ready jobs. */
static int32 cq_ready_queues[CQ_WAKE_QUEUES];
static int	cq_nready = 0;
static bool cq_ready_many = false;
static bool cq_callback_registered = false;

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
		cq_wake->nslots = MaxBackends;
		for (int i = 0; i < MaxBackends; i++)
			pg_atomic_init_u32(&cq_wake->slots[i].waiting, 0);
	}
}

static CqWaitSlot *
cq_my_wait_slot(void)
{
	int			index = CQ_MY_BACKEND_INDEX();

	if (cq_wake == NULL || index < 0 || index >= cq_wake->nslots)
		return NULL;
	return &cq_wake->slots[index];
}

/*
 * Start waiting for jobs of a queue.  Returns false if wake-ups are not
 * available (no preload), in which case the caller polls.
 */
bool
cq_wait_begin(int32 queue_id)
{
	CqWaitSlot *slot = cq_my_wait_slot();

	if (slot == NULL)
		return false;
	slot->dboid = MyDatabaseId;
	slot->queue_id = queue_id;
	slot->latch = MyLatch;
	pg_write_barrier();
	pg_atomic_write_u32(&slot->waiting, 1);
	pg_atomic_fetch_add_u32(&cq_wake->nwaiting, 1);
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
}

static void
cq_wake_waiters(void)
{
	if (pg_atomic_read_u32(&cq_wake->nwaiting) == 0)
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
		wake = cq_ready_many;
		for (int q = 0; q < cq_nready && !wake; q++)
			wake = (cq_ready_queues[q] == slot->queue_id);
		if (wake)
			SetLatch(slot->latch);
	}
}

static void
cq_wakeup_xact_callback(XactEvent event, void *arg)
{
	if (cq_nready == 0 && !cq_ready_many)
		return;
	if (event == XACT_EVENT_COMMIT)
		cq_wake_waiters();
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT || event == XACT_EVENT_PREPARE)
	{
		cq_nready = 0;
		cq_ready_many = false;
	}
}

/*
 * Note that this transaction made jobs of the queue ready: waiters on it
 * are woken when the transaction commits.
 */
void
cq_wake_on_commit(int32 queue_id)
{
	if (cq_wake == NULL)
		return;
	if (!cq_callback_registered)
	{
		RegisterXactCallback(cq_wakeup_xact_callback, NULL);
		cq_callback_registered = true;
	}
	for (int q = 0; q < cq_nready; q++)
		if (cq_ready_queues[q] == queue_id)
			return;
	if (cq_nready < CQ_WAKE_QUEUES)
		cq_ready_queues[cq_nready++] = queue_id;
	else
		cq_ready_many = true;
}
