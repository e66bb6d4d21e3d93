/*-------------------------------------------------------------------------
 *
 * flow.c
 *		Flow control: group limits (held pending -> pending) and the
 *		queue-wide limits a claim obeys (max_in_flight, rate_limit).
 *
 * Group limits.  On a queue with group_limit or group_fifo, a pending job
 * of a group is either free or "held".  Held jobs are not in the claim's
 * index, so a claim never sees, let alone steps over, the jobs of a
 * blocked or saturated group; and the free jobs of a group, pending or in
 * flight, are never more than its limit, so a claim may take any free job
 * without looking at its group at all.  A claim turns a free pending job
 * into a free job in flight and so changes no group's count.
 *
 * Which jobs are held is decided by claimq.sync_groups (in the update
 * script to 0.5) under the group's lock, a row of claimq.job_group:
 *
 *		enqueue		locks the group before the insert (so that in a FIFO
 *					group id order is commit order), inserts the job held,
 *					then syncs
 *		complete, fail, release, snooze, release_worker, cancel, reclaim
 *					sync the groups of the jobs they changed, in the same
 *					statement's transaction
 *		retry_dead, purge_queue, alter_queue
 *					the same, in SQL
 *
 * The sync counts the group's free jobs after taking the lock, so it sees
 * every change of the group's previous holder; a free job settled by a
 * transaction still in progress is still counted, which errs on the side
 * of the limit, and that transaction syncs after it.  Jobs it frees wake
 * waiting claims and lower the queue's claim floor at commit.
 *
 * Queue-wide limits, with the preload.  Shared memory holds, per queue with
 * max_in_flight or rate_limit that was claimed from lately (a fixed number
 * of slots, like the claim floors'), the slots reserved by claims whose
 * transactions are still in progress and the rate limit's token bucket.
 * A claim, under the slot's spinlock only:
 *
 *	1. reserves max_jobs slots and takes up to max_jobs tokens, and notes
 *	   what the other transactions in progress had reserved (r);
 *	2. then counts the queue's jobs in flight with the latest snapshot (c),
 *	   which sees every claim whose transaction had ended by step 1, under
 *	   any isolation level;
 *	3. claims at most max_in_flight - c - r jobs, and no more than the
 *	   tokens it took;
 *	4. gives back at once the slots and tokens it did not use.
 *
 * Its transaction gives the rest of its slots back when it ends (by then
 * its claims are committed and counted by step 2 of later claims, or
 * rolled back).  Whatever was in flight at a given moment was claimed by
 * claims of which one came last to step 1: it counted each of the others
 * in c (their transaction had ended) or in r (it had not), or both, so it
 * left room for all of them.  Claims never wait for each other, and
 * settling a job touches no shared memory: the count is the job table's.
 *
 * A bucket's first use is recorded in the queue's row; a bucket set up
 * again after a restart, a failover or the loss of its slot starts empty
 * rather than full, so that no restart lets a burst through.
 *
 * Every claim of the server takes this path, so that no claim escapes the
 * reservations of another; one that finds no slot (all of its key's are
 * reserved, or its transaction already claims from CQ_FLOW_HELD such
 * queues) takes nothing that time.
 *
 * Queue-wide limits without the preload: a claim updates the queue's row
 * and so holds it until its transaction ends, counts the jobs in flight
 * and refills the bucket kept in the row.  Claims of one such queue then
 * take turns; under REPEATABLE READ one that missed the previous holder's
 * commit fails to serialize.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"

#include "claimq.h"

/* A limit's range, and rate_period's bound. */
#define CQ_MAX_LIMIT	1000000
static const Interval cq_max_rate_period = {.time = 0,.day = 1,.month = 0};

PG_FUNCTION_INFO_V1(claimq_check_flow_settings);

/*
 * check_flow_settings(group_limit, max_in_flight, rate_limit, rate_period)
 * returns void: the checks of create_queue and alter_queue.  NULL passes.
 */
Datum
claimq_check_flow_settings(PG_FUNCTION_ARGS)
{
	static const char *const names[3] = {"group_limit", "max_in_flight",
	"rate_limit"};

	for (int argno = 0; argno < 3; argno++)
		if (!PG_ARGISNULL(argno))
			(void) cq_int_arg(fcinfo, argno, names[argno], 1, CQ_MAX_LIMIT);

	/*
	 * The bucket counts a period in days and time (cq_flow_period): a month
	 * has no fixed length, and "1 mon -30 days" would pass the check below in
	 * a 31-day month while counting as -30 days.
	 */
	if (!PG_ARGISNULL(3) && PG_GETARG_INTERVAL_P(3)->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate_period must not have a month part"),
				 errdetail("A rate period is at most a day, and a month's length depends on the calendar."),
				 errhint("Give the rate period in days, hours, minutes or seconds.")));
	(void) cq_interval_arg(fcinfo, 3, "rate_period", false,
						   &cq_max_rate_period, "1 day");
	PG_RETURN_VOID();
}

/*
 * Whether the queue's groups are limited, so that its grouped pending
 * jobs go in held.
 */
bool
cq_queue_groups_limited(const CqQueue *queue)
{
	return queue->group_limit > 0 || queue->group_fifo;
}

/*
 * Note that a statement changed a job of group key in the queue.
 */
void
cq_groups_note(CqGroups *groups, int32 queue_id, Datum key)
{
	if (groups->n == groups->size)
	{
		groups->size = Max(8, groups->size * 2);
		if (groups->n == 0)
		{
			groups->queue_ids = palloc(groups->size * sizeof(int32));
			groups->keys = palloc(groups->size * sizeof(Datum));
		}
		else
		{
			groups->queue_ids = repalloc(groups->queue_ids,
										 groups->size * sizeof(int32));
			groups->keys = repalloc(groups->keys, groups->size * sizeof(Datum));
		}
	}
	groups->queue_ids[groups->n] = queue_id;
	groups->keys[groups->n] = key;
	groups->n++;
}

/*
 * Sync one queue's groups, keys a text[] (claimq.sync_groups does nothing
 * on a queue without group limits).  The caller has connected SPI.
 */
void
cq_sync_groups(int32 queue_id, Datum keys)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT4OID, TEXTARRAYOID};
	Datum		values[2];
	bool		isnull;
	Datum		freed_at;

	cq_plan(&plan, "SELECT claimq.sync_groups($1, $2)", 2, argtypes);
	values[0] = Int32GetDatum(queue_id);
	values[1] = keys;
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	freed_at = cq_spi_value(0, 1, &isnull);
	if (!isnull)
		cq_ready_on_commit(queue_id, DatumGetTimestampTz(freed_at));
}

/*
 * Sync the groups noted, one call per queue.  The caller has connected
 * SPI; the keys must stay valid until this returns.
 */
void
cq_groups_sync(CqGroups *groups)
{
	bool	   *done;

	if (groups->n == 0)
		return;
	done = palloc0(groups->n * sizeof(bool));
	for (int i = 0; i < groups->n; i++)
	{
		Datum	   *keys;
		int			nkeys = 0;

		if (done[i])
			continue;
		keys = palloc(groups->n * sizeof(Datum));
		for (int j = i; j < groups->n; j++)
			if (!done[j] && groups->queue_ids[j] == groups->queue_ids[i])
			{
				keys[nkeys++] = groups->keys[j];
				done[j] = true;
			}
		cq_sync_groups(groups->queue_ids[i],
					   PointerGetDatum(construct_array(keys, nkeys, TEXTOID,
													   -1, false,
													   TYPALIGN_INT)));
		pfree(keys);
	}
	pfree(done);
	groups->n = 0;
}

/* The queue's jobs in flight ($1): every claimed or running job has a lease. */
#define CQ_IN_FLIGHT_SQL \
	"(SELECT pg_catalog.count(*) FROM claimq.job j" \
	"  WHERE j.expires_at IS NOT NULL AND j.queue_id = $1)"

/*
 * The queue-wide limits' shared memory (see the file header).
 */
#define CQ_FLOW_SLOTS	256
#define CQ_FLOW_PROBES	8		/* slots a key may occupy */

typedef struct CqFlowSlot
{
	bool		used;
	Oid			dboid;
	Oid			relid;
	int32		queue_id;
	int64		reserved;		/* by transactions in progress */
	uint64		generation;		/* changes when the slot changes hands */
	bool		bucket_valid;
	bool		marked;			/* the queue row records the bucket's use */
	int32		rate_limit;		/* the bucket was made for these */
	int64		period;			/* microseconds */
	double		tokens;			/* left at "at" */
	TimestampTz at;
} CqFlowSlot;

typedef struct CqFlowShared
{
	slock_t		mutex;
	bool		any_used;		/* a slot was ever assigned */
	uint64		next_generation;
	CqFlowSlot	slots[CQ_FLOW_SLOTS];
} CqFlowShared;

static CqFlowShared *cq_flow = NULL;

/* The slots this backend's transaction has reserved. */
typedef struct CqFlowHeld
{
	int			slot;
	int32		queue_id;
	int64		reserved;
} CqFlowHeld;

#define CQ_FLOW_HELD	16		/* queues one transaction claims from */
static CqFlowHeld cq_flow_held[CQ_FLOW_HELD];
static int	cq_flow_nheld = 0;
static bool cq_flow_callback = false;

Size
cq_flow_shmem_size(void)
{
	return sizeof(CqFlowShared);
}

void
cq_flow_shmem_init(void)
{
	bool		found;

	cq_flow = ShmemInitStruct("claimq queue limits", cq_flow_shmem_size(),
							  &found);
	if (!found)
	{
		memset(cq_flow, 0, cq_flow_shmem_size());
		SpinLockInit(&cq_flow->mutex);
	}
}

/*
 * At the end of a transaction, give back every slot it reserved.
 */
static void
cq_flow_xact_callback(XactEvent event, void *arg)
{
	/*
	 * A prepared transaction's claims stay uncommitted after this backend has
	 * moved on, and nothing would hold their slots meanwhile.
	 */
	if (event == XACT_EVENT_PRE_PREPARE)
	{
		for (int i = 0; i < cq_flow_nheld; i++)
			if (cq_flow_held[i].reserved > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot prepare a transaction that claimed jobs of a queue with max_in_flight")));
		return;
	}
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PARALLEL_ABORT)
		return;
	if (cq_flow_nheld == 0)
		return;
	SpinLockAcquire(&cq_flow->mutex);
	for (int i = 0; i < cq_flow_nheld; i++)
		cq_flow->slots[cq_flow_held[i].slot].reserved -= cq_flow_held[i].reserved;
	SpinLockRelease(&cq_flow->mutex);
	cq_flow_nheld = 0;
}

/*
 * The queue's slot, or NULL.  With create, a missing slot is assigned: one
 * nobody holds reservations on is taken over (its bucket is lost), and
 * NULL means all the key's slots are reserved.  Called with the mutex held
 * (or, for a look without create whose answer may be stale, without).
 */
static CqFlowSlot *
cq_flow_slot(Oid dboid, Oid relid, int32 queue_id, bool create)
{
	uint32		home = cq_queue_key_hash(dboid, relid, queue_id) % CQ_FLOW_SLOTS;
	CqFlowSlot *victim = NULL;

	for (int i = 0; i < CQ_FLOW_PROBES; i++)
	{
		CqFlowSlot *slot = &cq_flow->slots[(home + i) % CQ_FLOW_SLOTS];

		if (slot->used && slot->dboid == dboid && slot->relid == relid &&
			slot->queue_id == queue_id)
			return slot;
		if (slot->reserved == 0 && (victim == NULL || !slot->used))
			victim = slot;
	}
	if (!create || victim == NULL)
		return NULL;
	cq_flow->any_used = true;
	victim->used = true;
	victim->dboid = dboid;
	victim->relid = relid;
	victim->queue_id = queue_id;
	victim->reserved = 0;
	victim->generation = ++cq_flow->next_generation;
	victim->bucket_valid = false;
	return victim;
}

/* This transaction's entry for a slot, made if missing; or NULL. */
static CqFlowHeld *
cq_flow_held_entry(int slot, int32 queue_id)
{
	for (int i = 0; i < cq_flow_nheld; i++)
		if (cq_flow_held[i].slot == slot)
			return &cq_flow_held[i];
	if (cq_flow_nheld == CQ_FLOW_HELD)
		return NULL;
	cq_flow_held[cq_flow_nheld].slot = slot;
	cq_flow_held[cq_flow_nheld].queue_id = queue_id;
	cq_flow_held[cq_flow_nheld].reserved = 0;
	return &cq_flow_held[cq_flow_nheld++];
}

/*
 * Where a bucket set up in shared memory starts: full if the queue's row
 * has no record of a bucket (its first use, or a new rate), empty
 * otherwise (after a restart, a failover, a restore or the loss of its
 * slot), so that no restart lets a burst through.  The record is written
 * by the reclaimer (cq_flow_upkeep), in a transaction of its own, since the
 * claim that sets the bucket up may roll back.  Sets *full.  The caller
 * has connected SPI.
 */
static void
cq_flow_bucket_start(const CqQueue *queue, bool *full)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	bool		isnull;

	cq_plan(&plan,
			"SELECT q.rate_at IS NULL FROM claimq.queue q WHERE q.queue_id = $1",
			1, argtypes);
	values[0] = Int32GetDatum(queue->queue_id);
	cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);
	*full = SPI_processed == 1 && DatumGetBool(cq_spi_value(0, 1, &isnull));
}

/*
 * A queue's rate_period in microseconds: its days and time, greater than
 * zero and at most a day.  check_flow_settings refuses anything else, but a
 * queue row written by an earlier release may hold a month part (which
 * this leaves out, as the calendar gives a month no fixed length) and so a
 * length of zero, below or above: that raises an error rather than handing
 * out nothing, since a queue that silently never hands out looks like one
 * that is only rate limited, for ever, while the error says what to mend.
 * Only a queue with a rate_limit is judged.  cq_flow_shared calls this
 * before it takes the spinlock, so that its later call under the lock (by
 * cq_flow_refill_ms) finds the same period valid; the fallback's bucket
 * hands out nothing for such a period, and its refill wait raises this.
 */
static int64
cq_flow_period(const CqQueue *queue)
{
	int64		period = queue->rate_period.time +
	(int64) queue->rate_period.day * USECS_PER_DAY;

	if (queue->rate_limit > 0 &&
		(period <= 0 || period > cq_max_rate_period.day * USECS_PER_DAY))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("rate_period of queue \"%s\" cannot be used", queue->name),
				 errdetail("Counted in days and time, leaving out its month part, it is not greater than zero and at most 1 day."),
				 errhint("Set it again with claimq.alter_queue, in days, hours, minutes or seconds.")));
	return period;
}

/*
 * Milliseconds until the queue's bucket, holding tokens (less than one),
 * holds a whole token: how long a claim that found it empty waits before it
 * looks again.
 */
static long
cq_flow_refill_ms(double tokens, const CqQueue *queue)
{
	double		per_token = (double) cq_flow_period(queue) / queue->rate_limit;
	double		usecs = (1.0 - Max(tokens, 0.0)) * per_token;

	return Max(1, (long) ceil(usecs / 1000.0));
}

/* The bucket refilled to now; the caller holds the mutex. */
static void
cq_flow_refill(CqFlowSlot *slot, TimestampTz now)
{
	if (now > slot->at)
	{
		slot->tokens = Min((double) slot->rate_limit,
						   slot->tokens + (double) (now - slot->at) *
						   slot->rate_limit / slot->period);
		slot->at = now;
	}
}

/*
 * Steps 1 and 2 of a claim with the preload (see the file header).
 * Returns false, having changed nothing, if no slot could be had.
 */
static bool
cq_flow_shared(const CqQueue *queue, int32 max_jobs, CqFlowTicket *ticket)
{
	Oid			relid = cq_job_relid();
	TimestampTz now = GetCurrentTimestamp();
	int64		period = cq_flow_period(queue);
	CqFlowSlot *slot;
	CqFlowHeld *held;
	int64		others;
	bool		full = false;
	bool		started = false;

	if (!cq_flow_callback)
	{
		RegisterXactCallback(cq_flow_xact_callback, NULL);
		cq_flow_callback = true;
	}

	for (;;)
	{
		SpinLockAcquire(&cq_flow->mutex);
		slot = cq_flow_slot(MyDatabaseId, relid, queue->queue_id, true);
		if (slot == NULL)
		{
			SpinLockRelease(&cq_flow->mutex);
			return false;
		}
		held = cq_flow_held_entry(slot - cq_flow->slots, queue->queue_id);
		if (held == NULL)
		{
			SpinLockRelease(&cq_flow->mutex);
			return false;
		}
		if (queue->rate_limit <= 0 ||
			(slot->bucket_valid && slot->rate_limit == queue->rate_limit &&
			 slot->period == period))
			break;
		if (started)
		{
			/* A new bucket for the queue's current rate. */
			slot->bucket_valid = true;
			slot->marked = !full;
			slot->rate_limit = queue->rate_limit;
			slot->period = period;
			slot->tokens = full ? queue->rate_limit : 0;
			slot->at = now;
			break;
		}
		SpinLockRelease(&cq_flow->mutex);
		cq_flow_bucket_start(queue, &full);
		started = true;
	}

	/* Step 1: reserve, take tokens, note the others' reservations. */
	others = slot->reserved - held->reserved;
	ticket->slot = slot - cq_flow->slots;
	ticket->generation = slot->generation;
	ticket->reserved = queue->max_in_flight > 0 ? max_jobs : 0;
	slot->reserved += ticket->reserved;
	held->reserved += ticket->reserved;
	ticket->allowed = max_jobs;
	ticket->tokens = 0;
	if (queue->rate_limit > 0)
	{
		cq_flow_refill(slot, now);
		ticket->tokens = (int32) Min((double) max_jobs, floor(slot->tokens));
		if (ticket->tokens == 0)
			ticket->refill_ms = cq_flow_refill_ms(slot->tokens, queue);
		slot->tokens -= ticket->tokens;
		ticket->allowed = ticket->tokens;
	}
	SpinLockRelease(&cq_flow->mutex);

	/* Step 2: the jobs in flight, as committed by now. */
	if (queue->max_in_flight > 0)
	{
		static SPIPlanPtr plan = NULL;
		Oid			argtypes[1] = {INT4OID};
		Datum		values[1];
		bool		isnull;
		int64		in_flight;

		cq_plan(&plan, "SELECT " CQ_IN_FLIGHT_SQL, 1, argtypes);
		values[0] = Int32GetDatum(queue->queue_id);
		/* The latest snapshot, whatever the isolation level. */
		cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);
		in_flight = DatumGetInt64(cq_spi_value(0, 1, &isnull));
		ticket->allowed = (int32) Max(0, Min((int64) ticket->allowed,
											 queue->max_in_flight - in_flight - others));
	}
	return true;
}

/*
 * Jobs of the queue left flight (settled, cancelled or reclaimed): if the
 * queue has queue-wide limits, claims waiting on it are woken at commit.
 * "Has" means a claim set up its slot; the slots are read without the
 * lock, as a stale answer costs only a wake-up for nothing, or a waiting
 * claim's look a second later.
 */
void
cq_flow_freed(int32 queue_id)
{
	if (!cq_shmem_ready || !((volatile CqFlowShared *) cq_flow)->any_used)
		return;
	if (cq_flow_slot(MyDatabaseId, cq_job_relid(), queue_id, false) != NULL)
		cq_freed_on_commit(queue_id);
}

/*
 * How many jobs a claim of the queue may take, at most max_jobs, under its
 * queue-wide limits.  The claim must then call cq_flow_spend with the
 * number it took.  The caller has connected SPI.
 */
int32
cq_flow_allowance(const CqQueue *queue, int32 max_jobs, CqFlowTicket *ticket)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr count_plan = NULL;
	Oid			argtypes[2] = {INT4OID, TIMESTAMPTZOID};
	Datum		values[2];
	bool		isnull;
	int32		allowed = max_jobs;

	ticket->slot = -1;
	ticket->row_bucket = false;
	ticket->refill_ms = 0;
	if (queue->max_in_flight <= 0 && queue->rate_limit <= 0)
		return max_jobs;
	if (cq_shmem_ready)
	{
		/*
		 * One path per server: a claim that fell back to the queue's row
		 * would not see the shared reservations, nor they its claims.  With
		 * no slot to be had (all of the key's reserved, or this transaction
		 * claims from too many limited queues) the claim takes nothing now.
		 */
		if (cq_flow_shared(queue, max_jobs, ticket))
			return ticket->allowed;
		return 0;
	}

	/*
	 * The fallback.  Take turns on the queue's row first; what follows runs
	 * with a newer snapshot, which sees the previous holder's claims and
	 * bucket.  The lock is an update, so that under REPEATABLE READ a claim
	 * whose snapshot is older than the previous holder's commit fails to
	 * serialize instead of counting from that snapshot.
	 */
	cq_plan(&lock_plan,
			"UPDATE claimq.queue q SET rate_at = q.rate_at WHERE q.queue_id = $1",
			1, argtypes);
	values[0] = Int32GetDatum(queue->queue_id);
	cq_execute(lock_plan, values, NULL, SPI_OK_UPDATE);

	/*
	 * The jobs in flight, and the bucket refilled to now: full when new,
	 * never above the limit.  The period is counted in days and time, as
	 * cq_flow_period counts it; one that is not greater than zero and at most
	 * a day (a month part from an earlier release) gives no tokens, and the
	 * refill wait then raises cq_flow_period's error.
	 */
	cq_plan(&count_plan,
			"SELECT " CQ_IN_FLIGHT_SQL ","
			"       CASE WHEN p.secs > 0 AND p.secs <= 86400"
			"            THEN LEAST(q.rate_limit::float8,"
			"                       COALESCE(q.rate_tokens"
			"                                + pg_catalog.date_part('epoch', $2 - q.rate_at)"
			"                                  / p.secs * q.rate_limit,"
			"                                q.rate_limit))"
			"            ELSE 0 END"
			"  FROM claimq.queue q,"
			"       LATERAL (SELECT pg_catalog.date_part('day', q.rate_period) * 86400"
			"                       + pg_catalog.date_part('epoch', q.rate_period"
			"                           - pg_catalog.date_trunc('day', q.rate_period))) p(secs)"
			" WHERE q.queue_id = $1",
			2, argtypes);
	ticket->at = GetCurrentTimestamp();
	values[1] = TimestampTzGetDatum(ticket->at);
	cq_execute(count_plan, values, NULL, SPI_OK_SELECT);
	if (SPI_processed != 1)
		return 0;				/* dropped meanwhile */

	if (queue->max_in_flight > 0)
	{
		int64		in_flight = DatumGetInt64(cq_spi_value(0, 1, &isnull));

		allowed = (int32) Max(0, Min((int64) allowed,
									 queue->max_in_flight - in_flight));
	}
	if (queue->rate_limit > 0)
	{
		ticket->row_bucket = true;
		ticket->row_tokens = DatumGetFloat8(cq_spi_value(0, 2, &isnull));
		allowed = (int32) Max(0, Min((double) allowed, floor(ticket->row_tokens)));
		if (ticket->row_tokens < 1)
			ticket->refill_ms = cq_flow_refill_ms(ticket->row_tokens, queue);
	}
	return allowed;
}

/*
 * After a claim that took n jobs: give back the slots and tokens it did not
 * use (shared memory), or store the bucket in the queue's row (the
 * fallback; this runs SPI).
 */
void
cq_flow_spend(const CqQueue *queue, CqFlowTicket *ticket, int32 n)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[3] = {INT4OID, FLOAT8OID, TIMESTAMPTZOID};
	Datum		values[3];

	if (ticket->slot >= 0)
	{
		CqFlowSlot *slot = &cq_flow->slots[ticket->slot];
		CqFlowHeld *held = NULL;

		for (int i = 0; i < cq_flow_nheld; i++)
			if (cq_flow_held[i].slot == ticket->slot)
				held = &cq_flow_held[i];
		Assert(held != NULL && n <= ticket->allowed);
		SpinLockAcquire(&cq_flow->mutex);
		if (ticket->reserved > 0)
		{
			slot->reserved -= ticket->reserved - n;
			held->reserved -= ticket->reserved - n;
		}
		if (queue->rate_limit > 0 && slot->bucket_valid &&
			slot->generation == ticket->generation)
			slot->tokens += ticket->tokens - n;
		SpinLockRelease(&cq_flow->mutex);
		ticket->slot = -1;
		return;
	}
	if (!ticket->row_bucket || n == 0)
		return;
	cq_plan(&plan,
			"UPDATE claimq.queue q SET rate_tokens = $2, rate_at = $3"
			" WHERE q.queue_id = $1",
			3, argtypes);
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Float8GetDatum(ticket->row_tokens - n);
	values[2] = TimestampTzGetDatum(ticket->at);
	cq_execute(plan, values, NULL, SPI_OK_UPDATE);
}

/*
 * The reclaimer's share of flow control, once a pass, in a transaction of
 * its own:
 *
 *	- record in their queues' rows the buckets set up in shared memory for
 *	  this database (see cq_flow_bucket_start);
 *	- sync the groups that have held jobs but fewer free jobs than their
 *	  limit.  Every call that changes a group syncs it, so such a group is
 *	  one whose sync had to skip a row another transaction held, or one
 *	  changed under REPEATABLE READ from a snapshot older than the group's
 *	  last change; without this it could wait for ever.
 *
 * Returns the number of groups synced.  The caller has connected SPI.
 */
uint64
cq_flow_upkeep(void)
{
	static SPIPlanPtr mark_plan = NULL;
	static SPIPlanPtr stuck_plan = NULL;
	Oid			argtypes[2] = {INT4ARRAYOID, TIMESTAMPTZOID};
	Datum		values[2];
	Datum	   *ids;
	uint64		marked[CQ_FLOW_SLOTS];
	int			n = 0;
	Oid			relid = cq_job_relid();
	uint64		synced = 0;
	SPITupleTable *stuck;
	uint64		nstuck;

	if (cq_shmem_ready && cq_flow->any_used)
	{
		ids = palloc(CQ_FLOW_SLOTS * sizeof(Datum));
		SpinLockAcquire(&cq_flow->mutex);
		for (int i = 0; i < CQ_FLOW_SLOTS; i++)
		{
			CqFlowSlot *slot = &cq_flow->slots[i];

			if (slot->used && slot->dboid == MyDatabaseId && slot->relid == relid &&
				slot->bucket_valid && !slot->marked)
			{
				ids[n] = Int32GetDatum(slot->queue_id);
				marked[n++] = slot->generation;
			}
		}
		SpinLockRelease(&cq_flow->mutex);
		if (n > 0)
		{
			cq_plan(&mark_plan,
					"UPDATE claimq.queue q SET rate_tokens = 0, rate_at = $2"
					" WHERE q.queue_id = ANY ($1) AND q.rate_at IS NULL",
					2, argtypes);
			values[0] = PointerGetDatum(construct_array(ids, n, INT4OID, sizeof(int32),
														true, TYPALIGN_INT));
			values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
			cq_execute(mark_plan, values, NULL, SPI_OK_UPDATE);
			SpinLockAcquire(&cq_flow->mutex);
			for (int i = 0; i < CQ_FLOW_SLOTS; i++)
				for (int k = 0; k < n; k++)
					if (cq_flow->slots[i].generation == marked[k])
						cq_flow->slots[i].marked = true;
			SpinLockRelease(&cq_flow->mutex);
		}
	}

	cq_plan(&stuck_plan,
			"SELECT g.queue_id, pg_catalog.array_agg(g.group_key)"
			"  FROM claimq.job_group g JOIN claimq.queue q ON q.queue_id = g.queue_id"
			" WHERE (q.group_limit IS NOT NULL OR q.group_fifo)"
			"   AND EXISTS (SELECT 1 FROM claimq.job j"
			"                WHERE j.queue_id = g.queue_id AND j.group_key = g.group_key"
			"                  AND j.held AND j.state = 'pending')"
			"   AND (SELECT pg_catalog.count(*) FROM claimq.job j"
			"         WHERE j.queue_id = g.queue_id AND j.group_key = g.group_key"
			"           AND NOT j.held"
			"           AND j.state = ANY ('{pending,claimed,running}'::text[]))"
			"       < CASE WHEN q.group_fifo THEN 1 ELSE q.group_limit END"
			" GROUP BY g.queue_id",
			0, NULL);
	cq_execute(stuck_plan, NULL, NULL, SPI_OK_SELECT);
	stuck = SPI_tuptable;
	nstuck = SPI_processed;
	for (uint64 row = 0; row < nstuck; row++)
	{
		bool		isnull;
		Datum		keys = SPI_getbinval(stuck->vals[row], stuck->tupdesc, 2, &isnull);

		cq_sync_groups(DatumGetInt32(SPI_getbinval(stuck->vals[row], stuck->tupdesc,
												   1, &isnull)), keys);
		synced += ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(keys)),
								 ARR_DIMS(DatumGetArrayTypeP(keys)));
	}
	return synced;
}
