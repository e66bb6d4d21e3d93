/*-------------------------------------------------------------------------
 *
 * limits.c
 *		The queue-wide limits a claim obeys: max_in_flight and rate_limit.
 *		(Group limits are groups.c's.)
 *
 * With the preload, shared memory holds, per queue with max_in_flight or
 * rate_limit that was claimed from lately (a table of claimq.flow_slots
 * slots for the whole server), the slots reserved by claims whose
 * transactions are still in progress and the rate limit's token bucket.
 * A claim, under the slot's spinlock:
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
 * When the table is full.  A slot is taken over for another queue only if
 * that loses nothing: no transaction has reserved on it and its bucket is
 * full.  A queue that finds no slot so free takes the slow path: its
 * claims take turns on the queue's row, as without the preload (below).
 * The two paths never mix for a queue: a claim on the row is noted, per
 * hash of its key, until its transaction ends, and no slot is made for
 * the queue while one is; and a slot with reservations is never taken
 * over, so the claims through shared memory have all ended when a claim
 * on the row counts (with the latest snapshot).  A transaction that
 * claims from more than CQ_FLOW_HELD limited queues takes nothing more.
 *
 * The bucket.  The queue's row holds a record of it (rate_tokens at
 * rate_at): written by every claim on the row, and, for a bucket in
 * shared memory whose row has none, by the reclaimer's next pass (the
 * claim that made it may roll back), only while the row's rate is still
 * the bucket's.  A bucket is made from the row (cq_flow_row_tokens): full
 * without a record (the first use, or a new rate: alter_queue clears it),
 * else the record refilled to now and no fuller than has refilled since
 * the first claim of this shared memory as a primary (a start, a
 * crash-restart or a promotion), so that no restart or failover lets a
 * burst through.  A bucket in shared memory starts no fuller than its row
 * would give and then only spends, so one that is full when its slot is
 * taken over is made again full: eviction neither refills nor empties a
 * bucket.  Tokens a claim took and did not use go back to the bucket they
 * came from, which never holds more than its limit less the tokens that
 * claims in progress hold.  A claim's view of the queue's limits may
 * predate an alter_queue: a bucket is made anew only for the rate the row
 * has with the latest snapshot, and max_in_flight is read with the count.
 * A bucket first used less than a reclaimer pass before a restart (or in
 * a database the reclaimer does not serve) has no record yet, and starts
 * full again.
 *
 * The locks: the flow lock, shared to find a slot and change it under
 * its spinlock, exclusive to make or take over a slot; held only around
 * work in memory, never across a statement or a commit.  The launcher
 * frees the slots of dropped databases.
 *
 * Without the preload, a claim updates the queue's row and so holds it
 * until its transaction ends, counts the jobs in flight and refills the
 * bucket kept in the row.  Claims of one such queue then take turns; under
 * REPEATABLE READ one that missed the previous holder's commit fails to
 * serialize.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

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

/* The queue's jobs in flight ($1): every claimed or running job has a lease. */
#define CQ_IN_FLIGHT_SQL \
	"(SELECT pg_catalog.count(*) FROM claimq.job j" \
	"  WHERE j.expires_at IS NOT NULL AND j.queue_id = $1)"

/*
 * The queue-wide limits' shared memory (see the file header): a table of
 * claimq.flow_slots slots under the flow lock, each slot's fields under
 * its own spinlock; and, per key hash, how many transactions claim on
 * their queue's row.
 */
typedef struct CqFlowKey
{
	Oid			dboid;
	Oid			relid;
	int32		queue_id;
} CqFlowKey;

typedef struct CqFlowSlot
{
	CqFlowKey	key;
	slock_t		mutex;			/* the fields below */
	int64		reserved;		/* by transactions in progress */
	uint64		generation;		/* new for every slot made */
	uint64		bucket;			/* new for every bucket made; 0: none */
	int32		rate_limit;		/* the bucket was made for these */
	int64		period;			/* microseconds */
	double		tokens;			/* left at "at" */
	double		outstanding;	/* taken by claims not yet spent */
	TimestampTz at;
} CqFlowSlot;

typedef struct CqFlowShared
{
	pg_atomic_uint32 any_used;	/* a slot was ever made */
	pg_atomic_uint64 next_id;	/* generations and buckets */
	pg_atomic_uint64 started;	/* the first claim as a primary, or 0 */
	int			nrows;
	pg_atomic_uint32 row_claims[FLEXIBLE_ARRAY_MEMBER];
} CqFlowShared;

static LWLock *cq_flow_lock = NULL;
static LWLock *cq_flow_gate = NULL;
static HTAB *cq_flow_table = NULL;
static CqFlowShared *cq_flow = NULL;


/* What this backend's transaction holds: slots reserved, rows claimed on. */
#define CQ_FLOW_HELD	16		/* queues one transaction claims from */
typedef struct CqFlowHeld
{
	CqFlowSlot *slot;
	uint64		generation;
	int64		reserved;
	uint64		out_bucket;		/* tokens taken and not yet spent, */
	int32		out_tokens;		/* of that bucket */
} CqFlowHeld;

static CqFlowHeld cq_flow_held[CQ_FLOW_HELD];
static int	cq_flow_nheld = 0;
static uint32 cq_flow_rows[CQ_FLOW_HELD];	/* indexes into row_claims */
static int	cq_flow_nrows = 0;

static Size
cq_flow_shared_size(void)
{
	return add_size(offsetof(CqFlowShared, row_claims),
					mul_size(cq_flow_slots, sizeof(pg_atomic_uint32)));
}

Size
cq_flow_shmem_size(void)
{
	return add_size(hash_estimate_size(cq_flow_slots, sizeof(CqFlowSlot)),
					cq_flow_shared_size());
}

void
cq_flow_shmem_init(LWLock *lock, LWLock *gate)
{
	HASHCTL		ctl;
	bool		found;

	ctl.keysize = sizeof(CqFlowKey);
	ctl.entrysize = sizeof(CqFlowSlot);
	cq_flow_lock = lock;
	cq_flow_gate = gate;
	cq_flow_table = ShmemInitHash("claimq queue limits", cq_flow_slots,
								  cq_flow_slots, &ctl,
								  HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	cq_flow = ShmemInitStruct("claimq queue limits' rows",
							  cq_flow_shared_size(), &found);
	if (!found)
	{
		pg_atomic_init_u32(&cq_flow->any_used, 0);
		pg_atomic_init_u64(&cq_flow->next_id, 1);
		pg_atomic_init_u64(&cq_flow->started, 0);
		cq_flow->nrows = cq_flow_slots;
		for (int i = 0; i < cq_flow_slots; i++)
			pg_atomic_init_u32(&cq_flow->row_claims[i], 0);
	}
}

static CqFlowKey
cq_flow_key(int32 queue_id)
{
	CqFlowKey	key;

	memset(&key, 0, sizeof(key));	/* the padding too: keys are hashed */
	key.dboid = MyDatabaseId;
	key.relid = cq_job_relid();
	key.queue_id = queue_id;
	return key;
}

/*
 * A rate_period in microseconds: its days and time, greater than zero and
 * at most a day.  check_flow_settings refuses anything else, but a queue
 * row written by an earlier release may hold a month part (which this
 * leaves out, as the calendar gives a month no fixed length) and so a
 * length of zero, below or above: that raises an error rather than
 * handing out nothing, since a queue that silently never hands out looks
 * like one that is only rate limited, for ever, while the error says what
 * to mend.  Never called under a spinlock.
 */
static int64
cq_flow_period_of(const char *queue_name, const Interval *rate_period)
{
	int64		period = rate_period->time +
	(int64) rate_period->day * USECS_PER_DAY;

	if (period <= 0 || period > cq_max_rate_period.day * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("rate_period of queue \"%s\" cannot be used", queue_name),
				 errdetail("Counted in days and time, leaving out its month part, it is not greater than zero and at most 1 day."),
				 errhint("Set it again with claimq.alter_queue, in days, hours, minutes or seconds.")));
	return period;
}

/*
 * Milliseconds until a bucket of rate_limit tokens per period microseconds,
 * holding tokens (less than one), holds a whole token: how long a claim
 * that found it empty waits before it looks again.
 */
static long
cq_flow_refill_ms(double tokens, int32 rate_limit, int64 period)
{
	double		per_token = (double) period / rate_limit;
	double		usecs = (1.0 - Max(tokens, 0.0)) * per_token;

	return Max(1, (long) ceil(usecs / 1000.0));
}

/*
 * A bucket's tokens at now, never more than its limit less what claims in
 * progress have taken (so a token given back cannot raise it above what
 * refilled meanwhile).  The caller holds the slot's spinlock.
 */
static double
cq_flow_tokens_at(const CqFlowSlot *slot, TimestampTz now)
{
	double		room = (double) slot->rate_limit - slot->outstanding;
	double		tokens = slot->tokens;

	if (now > slot->at)
		tokens += (double) (now - slot->at) * slot->rate_limit / slot->period;
	return Min(room, tokens);
}

/*
 * Whether a slot can be given to another queue without losing anything:
 * no transaction has reserved on it or holds its tokens, and its bucket,
 * if any, is full (a bucket made again from the queue's row is then full
 * too: see cq_flow_row_tokens).  The caller holds the lock exclusive.
 */
static bool
cq_flow_evictable(CqFlowSlot *slot, TimestampTz now)
{
	return slot->reserved == 0 &&
		(slot->bucket == 0 ||
		 (slot->outstanding == 0 &&
		  cq_flow_tokens_at(slot, now) >= (double) slot->rate_limit));
}

/*
 * The queue's slot, made if missing, with the lock held (shared or
 * exclusive: the caller just lets it go).  NULL, without the lock, when
 * none can be had: every slot is in use and none can be taken over, or a
 * transaction claims on the queue's row (see cq_flow_row_enter).
 */
static CqFlowSlot *
cq_flow_slot(const CqFlowKey *key, TimestampTz now)
{
	uint32		hash = get_hash_value(cq_flow_table, key);
	CqFlowSlot *slot;
	bool		found;

	cq_lwlock_gated(cq_flow_lock, cq_flow_gate, LW_SHARED);
	slot = hash_search_with_hash_value(cq_flow_table, key, hash, HASH_FIND, NULL);
	if (slot != NULL)
		return slot;
	LWLockRelease(cq_flow_lock);

	cq_lwlock_gated(cq_flow_lock, cq_flow_gate, LW_EXCLUSIVE);
	slot = hash_search_with_hash_value(cq_flow_table, key, hash, HASH_FIND, NULL);
	if (slot != NULL)
		return slot;
	if (pg_atomic_read_u32(&cq_flow->row_claims[hash % cq_flow->nrows]) == 0)
	{
		slot = hash_search_with_hash_value(cq_flow_table, key, hash,
										   HASH_ENTER_NULL, &found);
		if (slot == NULL)
		{
			/* Full: take over a slot that loses nothing, if there is one. */
			HASH_SEQ_STATUS status;
			CqFlowSlot *victim;

			hash_seq_init(&status, cq_flow_table);
			while ((victim = hash_seq_search(&status)) != NULL)
				if (cq_flow_evictable(victim, now))
				{
					hash_seq_term(&status);
					break;
				}
			if (victim != NULL)
			{
				(void) hash_search(cq_flow_table, &victim->key, HASH_REMOVE, NULL);
				slot = hash_search_with_hash_value(cq_flow_table, key, hash,
												   HASH_ENTER_NULL, &found);
			}
		}
	}
	if (slot == NULL)
	{
		LWLockRelease(cq_flow_lock);
		return NULL;
	}
	SpinLockInit(&slot->mutex);
	slot->reserved = 0;
	slot->generation = pg_atomic_fetch_add_u64(&cq_flow->next_id, 1);
	slot->bucket = 0;
	slot->outstanding = 0;
	pg_atomic_write_u32(&cq_flow->any_used, 1);
	return slot;
}

/*
 * Note that this transaction claims on the queue's row, which keeps a
 * slot from being made for the queue until it ends.  False if the queue
 * has a slot after all (claim through it), or if this transaction claims
 * on too many rows already.
 */
static bool
cq_flow_row_enter(const CqFlowKey *key, bool *too_many)
{
	uint32		hash = get_hash_value(cq_flow_table, key);
	uint32		index = hash % cq_flow->nrows;
	bool		mine = false;

	*too_many = false;
	cq_ledger_use();
	cq_lwlock_gated(cq_flow_lock, cq_flow_gate, LW_SHARED);
	if (hash_search_with_hash_value(cq_flow_table, key, hash, HASH_FIND, NULL) != NULL)
	{
		LWLockRelease(cq_flow_lock);
		return false;
	}
	for (int i = 0; i < cq_flow_nrows; i++)
		mine |= cq_flow_rows[i] == index;
	if (!mine && cq_flow_nrows == CQ_FLOW_HELD)
	{
		LWLockRelease(cq_flow_lock);
		*too_many = true;
		return false;
	}
	if (!mine)
	{
		pg_atomic_fetch_add_u32(&cq_flow->row_claims[index], 1);
		cq_flow_rows[cq_flow_nrows++] = index;
	}
	LWLockRelease(cq_flow_lock);
	return true;
}

/*
 * At the end of a transaction, give back every slot it reserved and every
 * row it claimed on; tokens taken by a claim that failed before it spent
 * them count as spent.
 */
void
cq_flow_xact_event(XactEvent event)
{
	/*
	 * A prepared transaction's claims stay uncommitted after this backend has
	 * moved on, and nothing would hold their slots meanwhile.
	 */
	if (event == XACT_EVENT_PRE_PREPARE)
	{
		bool		reserved = cq_flow_nrows > 0;

		for (int i = 0; i < cq_flow_nheld; i++)
			reserved |= cq_flow_held[i].reserved > 0;
		if (reserved)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot prepare a transaction that claimed jobs of a queue with max_in_flight or rate_limit")));
		return;
	}
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PARALLEL_ABORT && event != XACT_EVENT_PREPARE)
		return;
	if (cq_flow_nheld > 0)
	{
		cq_lwlock_gated(cq_flow_lock, cq_flow_gate, LW_SHARED);
		for (int i = 0; i < cq_flow_nheld; i++)
		{
			CqFlowHeld *held = &cq_flow_held[i];
			CqFlowSlot *slot = held->slot;

			/* A slot with reservations or tokens out is never taken over. */
			if (held->reserved == 0 && held->out_tokens == 0)
				continue;
			SpinLockAcquire(&slot->mutex);
			if (slot->generation == held->generation)
			{
				slot->reserved -= held->reserved;
				if (held->out_tokens > 0 && slot->bucket == held->out_bucket)
					slot->outstanding -= held->out_tokens;
			}
			SpinLockRelease(&slot->mutex);
		}
		LWLockRelease(cq_flow_lock);
		cq_flow_nheld = 0;
	}
	for (int i = 0; i < cq_flow_nrows; i++)
		pg_atomic_fetch_sub_u32(&cq_flow->row_claims[cq_flow_rows[i]], 1);
	cq_flow_nrows = 0;
}

/* This transaction's entry for a slot, made if missing; or NULL. */
static CqFlowHeld *
cq_flow_held_entry(CqFlowSlot *slot)
{
	for (int i = 0; i < cq_flow_nheld; i++)
		if (cq_flow_held[i].slot == slot &&
			cq_flow_held[i].generation == slot->generation)
			return &cq_flow_held[i];
	/* Entries that hold nothing go: their slots may have been taken over. */
	for (int i = 0; i < cq_flow_nheld; i++)
		if (cq_flow_held[i].reserved == 0 && cq_flow_held[i].out_tokens == 0)
		{
			cq_flow_held[i] = cq_flow_held[--cq_flow_nheld];
			i--;
		}
	if (cq_flow_nheld == CQ_FLOW_HELD)
		return NULL;
	memset(&cq_flow_held[cq_flow_nheld], 0, sizeof(CqFlowHeld));
	cq_flow_held[cq_flow_nheld].slot = slot;
	cq_flow_held[cq_flow_nheld].generation = slot->generation;
	return &cq_flow_held[cq_flow_nheld++];
}

/*
 * When buckets were first used since shared memory was made, as a
 * primary: a bucket made from a record written before then holds no more
 * than has refilled since, since what was spent after the record was not
 * written down.  After a promotion that is the first claim on the new
 * primary.
 */
static TimestampTz
cq_flow_started(TimestampTz now)
{
	uint64		started = pg_atomic_read_u64(&cq_flow->started);

	if (started == 0)
	{
		(void) pg_atomic_compare_exchange_u64(&cq_flow->started, &started,
											  (uint64) now);
		started = pg_atomic_read_u64(&cq_flow->started);
	}
	return (TimestampTz) started;
}

/*
 * The queue's bucket at now as its row has it: full if the row has no
 * record of a bucket (its first use, or a new rate: alter_queue clears
 * it), else the recorded tokens refilled to now and, with the preload, no
 * more than have refilled since cq_flow_started.  Used both to make a
 * bucket in shared memory and by a claim on the row.  A bucket in shared
 * memory starts no fuller than its row would give and only spends after,
 * so one that is full when its slot is taken over is made again full.
 */
static double
cq_flow_row_tokens(int32 rate_limit, int64 period, bool no_record,
				   double rate_tokens, TimestampTz rate_at, TimestampTz now)
{
	double		per_usec = (double) rate_limit / period;
	double		tokens;

	if (no_record)
		return rate_limit;
	tokens = rate_tokens + (double) Max(now - rate_at, 0) * per_usec;
	if (cq_shmem_ready)
		tokens = Min(tokens, (double) Max(now - cq_flow_started(now), 0) * per_usec);
	return Min((double) rate_limit, tokens);
}

/* The queue row's limits and bucket, with the latest snapshot. */
typedef struct CqFlowRow
{
	bool		found;
	int32		max_in_flight;	/* 0: none */
	int32		rate_limit;		/* 0: none */
	int64		period;
	double		tokens;			/* the bucket refilled to now */
} CqFlowRow;

/*
 * Read the queue's row with the latest snapshot: its current limits (a
 * claim's own view of them may predate an alter_queue) and its bucket,
 * which the claims that wrote it last have ended.  The caller has
 * connected SPI.
 */
static void
cq_flow_read_row(const CqQueue *queue, TimestampTz now, CqFlowRow *row)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	bool		isnull;
	bool		no_record;
	double		rate_tokens;
	TimestampTz rate_at;

	cq_plan(&plan,
			"SELECT q.max_in_flight, q.rate_limit, q.rate_period,"
			"       q.rate_tokens, q.rate_at"
			"  FROM claimq.queue q WHERE q.queue_id = $1",
			1, argtypes);
	values[0] = Int32GetDatum(queue->queue_id);
	cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);
	memset(row, 0, sizeof(*row));
	if (SPI_processed != 1)
		return;					/* dropped meanwhile */
	row->found = true;
	row->max_in_flight = DatumGetInt32(cq_spi_value(0, 1, &isnull));
	if (isnull)
		row->max_in_flight = 0;
	row->rate_limit = DatumGetInt32(cq_spi_value(0, 2, &isnull));
	if (isnull || row->rate_limit <= 0)
	{
		row->rate_limit = 0;
		return;
	}
	row->period = cq_flow_period_of(queue->name,
									DatumGetIntervalP(cq_spi_value(0, 3, &isnull)));
	rate_tokens = DatumGetFloat8(cq_spi_value(0, 4, &isnull));
	if (isnull)
		rate_tokens = 0;
	rate_at = DatumGetTimestampTz(cq_spi_value(0, 5, &no_record));
	row->tokens = cq_flow_row_tokens(row->rate_limit, row->period, no_record,
									 rate_tokens, rate_at, now);
}

/*
 * Steps 1 and 2 of a claim with the preload (see the file header).
 * Returns false, having changed nothing, if the queue has no slot and
 * none can be had: the claim then takes turns on the queue's row.
 */
static bool
cq_flow_shared(const CqQueue *queue, int32 max_jobs, CqFlowTicket *ticket)
{
	CqFlowKey	key = cq_flow_key(queue->queue_id);
	TimestampTz now = GetCurrentTimestamp();
	int64		period = 0;
	CqFlowSlot *slot;
	CqFlowHeld *held;
	int64		others;
	CqFlowRow	row = {0};
	uint64		read_for = 0;	/* the slot whose bucket row was read for */

	if (queue->rate_limit > 0)
		period = cq_flow_period_of(queue->name, &queue->rate_period);
	cq_ledger_use();
	for (;;)
	{
		slot = cq_flow_slot(&key, now);
		if (slot == NULL)
			return false;
		held = cq_flow_held_entry(slot);
		if (held == NULL)
		{
			/* Claims from too many limited queues: nothing this time. */
			LWLockRelease(cq_flow_lock);
			ticket->allowed = 0;
			return true;
		}
		SpinLockAcquire(&slot->mutex);

		/*
		 * The bucket serves if it is the one this claim expects; else the
		 * row, read since this slot was found, says which rate is current
		 * (this claim's view may be older), and the bucket is made anew only
		 * for that rate.
		 */
		if (queue->rate_limit <= 0 ||
			(slot->bucket != 0 && slot->rate_limit == queue->rate_limit &&
			 slot->period == period))
			break;
		if (read_for == slot->generation)
		{
			if (row.rate_limit > 0 &&
				(slot->bucket == 0 || slot->rate_limit != row.rate_limit ||
				 slot->period != row.period))
			{
				slot->bucket = pg_atomic_fetch_add_u64(&cq_flow->next_id, 1);
				slot->rate_limit = row.rate_limit;
				slot->period = row.period;
				slot->tokens = row.tokens;
				slot->outstanding = 0;
				slot->at = now;
			}
			break;
		}
		read_for = slot->generation;
		SpinLockRelease(&slot->mutex);
		LWLockRelease(cq_flow_lock);
		cq_flow_read_row(queue, now, &row);
		if (!row.found)
		{
			ticket->allowed = 0;	/* dropped meanwhile */
			return true;
		}
	}

	/* Step 1: reserve, take tokens, note the others' reservations. */
	others = slot->reserved - held->reserved;
	ticket->slot = slot;
	ticket->generation = slot->generation;
	ticket->reserved = max_jobs;
	slot->reserved += ticket->reserved;
	held->reserved += ticket->reserved;
	ticket->allowed = max_jobs;
	ticket->tokens = 0;
	ticket->bucket = 0;
	if (queue->rate_limit > 0 && slot->bucket != 0)
	{
		slot->tokens = cq_flow_tokens_at(slot, now);
		slot->at = Max(slot->at, now);
		ticket->bucket = slot->bucket;
		ticket->tokens = (int32) Min((double) max_jobs, floor(slot->tokens));
		if (ticket->tokens == 0)
			ticket->refill_ms = cq_flow_refill_ms(slot->tokens, slot->rate_limit,
												  slot->period);
		slot->tokens -= ticket->tokens;
		slot->outstanding += ticket->tokens;
		held->out_bucket = slot->bucket;
		held->out_tokens += ticket->tokens;
		ticket->allowed = ticket->tokens;
	}
	SpinLockRelease(&slot->mutex);
	LWLockRelease(cq_flow_lock);

	/* Step 2: the jobs in flight, as committed by now, and the limit now. */
	if (queue->max_in_flight > 0 || queue->rate_limit > 0)
	{
		static SPIPlanPtr plan = NULL;
		Oid			argtypes[1] = {INT4OID};
		Datum		values[1];
		bool		isnull;
		int64		in_flight;
		Datum		limit;

		cq_plan(&plan,
				"SELECT " CQ_IN_FLIGHT_SQL ", q.max_in_flight"
				"  FROM claimq.queue q WHERE q.queue_id = $1",
				1, argtypes);
		values[0] = Int32GetDatum(queue->queue_id);
		/* The latest snapshot, whatever the isolation level. */
		cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);
		if (SPI_processed != 1)
			ticket->allowed = 0;	/* dropped meanwhile */
		else
		{
			in_flight = DatumGetInt64(cq_spi_value(0, 1, &isnull));
			limit = cq_spi_value(0, 2, &isnull);
			if (!isnull)
				ticket->allowed = (int32) Max(0, Min((int64) ticket->allowed,
													 DatumGetInt32(limit) - in_flight - others));
		}
	}
	return true;
}

/*
 * Jobs of the queue left flight (settled, cancelled or reclaimed): if the
 * queue has queue-wide limits, claims waiting on it are woken at commit.
 * "Has" means a claim set up its slot; a queue whose claims take turns on
 * its row is looked at again by its waiting claims within a second.
 */
void
cq_flow_freed(int32 queue_id)
{
	CqFlowKey	key;
	bool		found;

	if (!cq_shmem_ready || pg_atomic_read_u32(&cq_flow->any_used) == 0)
		return;
	key = cq_flow_key(queue_id);
	cq_lwlock_gated(cq_flow_lock, cq_flow_gate, LW_SHARED);
	found = hash_search(cq_flow_table, &key, HASH_FIND, NULL) != NULL;
	LWLockRelease(cq_flow_lock);
	if (found)
		cq_freed_on_commit(queue_id);
}

/*
 * Free the slots of databases that no longer exist.  Inside a transaction
 * (it reads pg_database), without the lock.
 */
void
cq_flow_free_dropped(void)
{
	HASH_SEQ_STATUS status;
	CqFlowSlot *slot;
	Oid		   *dboids;
	int			ndbs = 0;
	int			ndropped = 0;

	if (!cq_shmem_ready || pg_atomic_read_u32(&cq_flow->any_used) == 0)
		return;
	dboids = palloc(sizeof(Oid) * cq_flow_slots);
	cq_lwlock_gated(cq_flow_lock, cq_flow_gate, LW_SHARED);
	hash_seq_init(&status, cq_flow_table);
	while ((slot = hash_seq_search(&status)) != NULL)
		cq_note_database(dboids, &ndbs, cq_flow_slots, slot->key.dboid);
	LWLockRelease(cq_flow_lock);

	ndropped = cq_dropped_databases(dboids, ndbs);
	if (ndropped > 0)
	{
		cq_lwlock_gated(cq_flow_lock, cq_flow_gate, LW_EXCLUSIVE);
		hash_seq_init(&status, cq_flow_table);
		while ((slot = hash_seq_search(&status)) != NULL)
			for (int i = 0; i < ndropped; i++)
				if (slot->key.dboid == dboids[i])
				{
					(void) hash_search(cq_flow_table, &slot->key, HASH_REMOVE, NULL);
					break;
				}
		LWLockRelease(cq_flow_lock);
	}
	pfree(dboids);
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
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	bool		isnull;
	int32		allowed = max_jobs;

	ticket->slot = NULL;
	ticket->row_bucket = false;
	ticket->refill_ms = 0;
	if (queue->max_in_flight <= 0 && queue->rate_limit <= 0)
		return max_jobs;
	if (cq_shmem_ready)
	{
		CqFlowKey	key = cq_flow_key(queue->queue_id);
		bool		on_row = false;

		(void) cq_flow_started(GetCurrentTimestamp());

		/*
		 * Shared memory if the queue has a slot or can have one; else its
		 * row, noted so that no slot is made while the claim is in progress
		 * (nor a claim on the row is made while a slot has reservations: a
		 * slot with them is never taken over).  So the claims of a queue in
		 * progress at any moment all took the same path.
		 */
		for (int attempt = 0; attempt < 3 && !on_row; attempt++)
		{
			bool		too_many;

			if (cq_flow_shared(queue, max_jobs, ticket))
				return ticket->allowed;
			on_row = cq_flow_row_enter(&key, &too_many);
			if (too_many)
				return 0;
		}
		if (!on_row)
			return 0;
	}

	/*
	 * The row.  Take turns on it first; what follows runs with a newer
	 * snapshot, which sees the previous holder's claims and bucket.  The lock
	 * is an update, so that under REPEATABLE READ a claim whose snapshot is
	 * older than the previous holder's commit fails to serialize instead of
	 * counting from that snapshot.  With the preload, the count takes the
	 * latest snapshot: the claims through shared memory that came before have
	 * ended, but did not write the row.
	 */
	cq_plan(&lock_plan,
			"UPDATE claimq.queue q SET rate_at = q.rate_at WHERE q.queue_id = $1",
			1, argtypes);
	values[0] = Int32GetDatum(queue->queue_id);
	cq_execute(lock_plan, values, NULL, SPI_OK_UPDATE);

	cq_plan(&count_plan,
			"SELECT " CQ_IN_FLIGHT_SQL ", q.rate_tokens, q.rate_at"
			"  FROM claimq.queue q WHERE q.queue_id = $1",
			1, argtypes);
	ticket->at = GetCurrentTimestamp();
	if (cq_shmem_ready)
		cq_execute_latest(count_plan, values, NULL, SPI_OK_SELECT);
	else
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
		bool		no_record;
		TimestampTz rate_at = DatumGetTimestampTz(cq_spi_value(0, 3, &no_record));
		double		rate_tokens = DatumGetFloat8(cq_spi_value(0, 2, &isnull));
		int64		period = cq_flow_period_of(queue->name, &queue->rate_period);

		ticket->row_bucket = true;
		ticket->row_tokens = cq_flow_row_tokens(queue->rate_limit, period,
												no_record, isnull ? 0 : rate_tokens,
												rate_at, ticket->at);
		allowed = (int32) Max(0, Min((double) allowed, floor(ticket->row_tokens)));
		if (ticket->row_tokens < 1)
			ticket->refill_ms = cq_flow_refill_ms(ticket->row_tokens,
												  queue->rate_limit, period);
	}
	return allowed;
}

/*
 * After a claim that took n jobs: give back the slots and tokens it did not
 * use (shared memory), or store the bucket in the queue's row (this runs
 * SPI).
 */
void
cq_flow_spend(const CqQueue *queue, CqFlowTicket *ticket, int32 n)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[3] = {INT4OID, FLOAT8OID, TIMESTAMPTZOID};
	Datum		values[3];

	if (ticket->slot != NULL)
	{
		CqFlowSlot *slot = ticket->slot;
		CqFlowHeld *held = NULL;

		for (int i = 0; i < cq_flow_nheld; i++)
			if (cq_flow_held[i].slot == slot &&
				cq_flow_held[i].generation == ticket->generation)
				held = &cq_flow_held[i];
		Assert(held != NULL && n <= ticket->allowed);
		cq_lwlock_gated(cq_flow_lock, cq_flow_gate, LW_SHARED);
		SpinLockAcquire(&slot->mutex);
		slot->reserved -= ticket->reserved - n;
		held->reserved -= ticket->reserved - n;
		/* Tokens go back only to the bucket they came from. */
		if (ticket->tokens > 0)
		{
			if (slot->bucket == ticket->bucket)
			{
				slot->outstanding -= ticket->tokens;
				slot->tokens += ticket->tokens - n;
			}
			held->out_tokens -= ticket->tokens;
		}
		SpinLockRelease(&slot->mutex);
		LWLockRelease(cq_flow_lock);
		ticket->slot = NULL;
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
 * The reclaimer's share of the queue-wide limits, once a pass, in a
 * transaction of its own (before groups.c's): record in their queues' rows
 * the buckets in shared memory for this database whose rows have no
 * record, with the tokens they hold now, only where the row's rate is
 * still the bucket's (an alter_queue that changed the rate since has made
 * the next bucket new and full).  Each pass looks again, so a record whose
 * transaction failed is written by the next.  The caller has connected
 * SPI.
 */
void
cq_flow_upkeep(void)
{
	static SPIPlanPtr mark_plan = NULL;
	Oid			argtypes[5] = {INT4ARRAYOID, INT4ARRAYOID, INTERVALARRAYOID,
	FLOAT8ARRAYOID, TIMESTAMPTZOID};
	Datum		values[5];
	CqFlowKey	key;
	int32	   *ids;
	int32	   *rates;
	Interval   *periods;
	double	   *tokens;
	TimestampTz now;
	HASH_SEQ_STATUS status;
	CqFlowSlot *slot;
	int			n = 0;
	Datum	   *d[4];

	if (!cq_shmem_ready || pg_atomic_read_u32(&cq_flow->any_used) == 0)
		return;
	key = cq_flow_key(0);
	ids = palloc(sizeof(int32) * cq_flow_slots);
	rates = palloc(sizeof(int32) * cq_flow_slots);
	periods = palloc0(sizeof(Interval) * cq_flow_slots);
	tokens = palloc(sizeof(double) * cq_flow_slots);
	now = GetCurrentTimestamp();

	/* Copied under the spinlocks; no allocation while one is held. */
	cq_lwlock_gated(cq_flow_lock, cq_flow_gate, LW_SHARED);
	hash_seq_init(&status, cq_flow_table);
	while ((slot = hash_seq_search(&status)) != NULL)
	{
		if (slot->key.dboid != key.dboid || slot->key.relid != key.relid)
			continue;
		SpinLockAcquire(&slot->mutex);
		if (slot->bucket != 0)
		{
			ids[n] = slot->key.queue_id;
			rates[n] = slot->rate_limit;
			periods[n].time = slot->period;
			tokens[n++] = cq_flow_tokens_at(slot, now);
		}
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(cq_flow_lock);
	if (n == 0)
		return;

	for (int k = 0; k < 4; k++)
		d[k] = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
	{
		d[0][i] = Int32GetDatum(ids[i]);
		d[1][i] = Int32GetDatum(rates[i]);
		d[2][i] = IntervalPGetDatum(&periods[i]);
		d[3][i] = Float8GetDatum(tokens[i]);
	}
	cq_plan(&mark_plan,
			"UPDATE claimq.queue q SET rate_tokens = v.tokens, rate_at = $5"
			"  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
			"                 pg_catalog.unnest($3), pg_catalog.unnest($4))"
			"       v(queue_id, rate_limit, period, tokens)"
			" WHERE q.queue_id = v.queue_id AND q.rate_at IS NULL"
			"   AND q.rate_limit = v.rate_limit AND q.rate_period = v.period",
			5, argtypes);
	values[0] = PointerGetDatum(construct_array(d[0], n, INT4OID, sizeof(int32),
												true, TYPALIGN_INT));
	values[1] = PointerGetDatum(construct_array(d[1], n, INT4OID, sizeof(int32),
												true, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(d[2], n, INTERVALOID,
												sizeof(Interval), false,
												TYPALIGN_DOUBLE));
	values[3] = PointerGetDatum(construct_array(d[3], n, FLOAT8OID,
												sizeof(float8), FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	values[4] = TimestampTzGetDatum(now);
	cq_execute(mark_plan, values, NULL, SPI_OK_UPDATE);
}
