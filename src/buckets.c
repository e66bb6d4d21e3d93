/*-------------------------------------------------------------------------
 *
 * buckets.c
 *		The queue-wide limits' shared memory: one slot per limited queue
 *		holding its in-flight reservations and its rate bucket.  (What a
 *		claim does with them, and why the limits hold, is limits.c's.)
 *
 * With the preload, a table of claimq.flow_slots slots for the whole
 * server holds, per queue with max_in_flight or rate_limit that was
 * claimed from lately, the slots reserved by claims whose transactions
 * are still in progress and the rate limit's token bucket.  A claim
 * reserves and takes tokens in its queue's slot (cq_bucket_reserve, step 1
 * of limits.c's header), gives back at once what it did not use
 * (cq_bucket_give_back), and its transaction gives back the rest when it
 * ends (cq_buckets_xact_event, called by the ledger).  Nothing here runs a
 * statement: reading the queue's row and counting its jobs is limits.c's.
 *
 * The locks: the flow lock, shared to find a slot and change it under
 * its spinlock, exclusive to make or take over a slot, each taken behind
 * the flow gate (cq_lwlock_gated); held only around work in memory, never
 * across a statement or a commit.  So whoever holds them waits for no
 * other session, and claims never wait for each other here.  The
 * launcher frees the slots of dropped databases.
 *
 * When the table is full.  A slot is taken over for another queue only if
 * that loses nothing: no transaction has reserved on it and its bucket is
 * full, or is what its queue's row records (the reclaimer writes a bucket
 * unused for a whole pass to its row, and nothing was taken since).  A
 * queue that finds no slot so free takes the slow path: its claims take
 * turns on the queue's row, as without the preload (limits.c).
 * The two paths never mix for a queue: a claim on the row is noted, per
 * hash of its key, until its transaction ends, and no slot is made for
 * the queue while one is; and a slot with reservations is never taken
 * over, so the claims through shared memory have all ended when a claim
 * on the row counts (with the latest snapshot).  A transaction that
 * claims from more than CQ_BUCKET_HELD limited queues takes nothing more.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "claimq.h"

/*
 * The queue-wide limits' shared memory (see the file header): a table of
 * claimq.flow_slots slots under the flow lock, each slot's fields under
 * its own spinlock; and, per key hash, how many transactions claim on
 * their queue's row.
 */
typedef struct CqBucketKey
{
	Oid			dboid;
	Oid			relid;
	int32		queue_id;
} CqBucketKey;

typedef struct CqBucketSlot
{
	CqBucketKey key;
	slock_t		mutex;			/* the fields below */
	int64		reserved;		/* by transactions in progress */
	uint64		generation;		/* new for every slot made */
	uint64		bucket;			/* new for every bucket made; 0: none */
	int32		rate_limit;		/* the bucket was made for these */
	int64		period;			/* microseconds */
	double		tokens;			/* left at "at" */
	double		outstanding;	/* taken by claims not yet spent */
	TimestampTz at;
	uint64		spent;			/* times claims took tokens of it */
	uint64		seen;			/* spent, at the reclaimer's last look */
	uint64		recorded_bucket;	/* the bucket that its row's record */
	uint64		recorded;		/* holds as it was after this many */
} CqBucketSlot;

typedef struct CqBucketsShared
{
	pg_atomic_uint32 any_used;	/* a slot was ever made */
	pg_atomic_uint64 next_id;	/* generations and buckets */
	pg_atomic_uint64 started;	/* the first claim as a primary, or 0 */
	int			nrows;
	pg_atomic_uint32 row_claims[FLEXIBLE_ARRAY_MEMBER];
} CqBucketsShared;

static LWLock *cq_buckets_lock = NULL;
static LWLock *cq_buckets_gate = NULL;
static HTAB *cq_buckets_table = NULL;
static CqBucketsShared *cq_buckets = NULL;


/* What this backend's transaction holds: slots reserved, rows claimed on. */
#define CQ_BUCKET_HELD	16		/* queues one transaction claims from */
typedef struct CqBucketHeld
{
	CqBucketSlot *slot;
	uint64		generation;
	int64		reserved;
	uint64		out_bucket;		/* tokens taken and not yet spent, */
	int32		out_tokens;		/* of that bucket */
} CqBucketHeld;

static CqBucketHeld cq_bucket_held[CQ_BUCKET_HELD];
static int	cq_bucket_nheld = 0;
static uint32 cq_bucket_rows[CQ_BUCKET_HELD];	/* indexes into row_claims */
static int	cq_bucket_nrows = 0;

/* Records of buckets this transaction wrote to their rows (the reclaimer). */
static CqFlowBucket *cq_bucket_records = NULL;
static int	cq_bucket_nrecords = 0;
static int	cq_bucket_records_size = 0;

static void cq_bucket_records_commit(void);

PG_FUNCTION_INFO_V1(claimq_flow_row_paths);
PG_FUNCTION_INFO_V1(claimq_flow_slots);

static Size
cq_buckets_shared_size(void)
{
	return add_size(offsetof(CqBucketsShared, row_claims),
					mul_size(cq_flow_slots, sizeof(pg_atomic_uint32)));
}

Size
cq_buckets_shmem_size(void)
{
	return add_size(hash_estimate_size(cq_flow_slots, sizeof(CqBucketSlot)),
					cq_buckets_shared_size());
}

void
cq_buckets_shmem_init(LWLock *lock, LWLock *gate)
{
	bool		found;

	cq_buckets_lock = lock;
	cq_buckets_gate = gate;
	cq_buckets_table = cq_shmem_table("claimq queue limits", cq_flow_slots,
									  sizeof(CqBucketKey), sizeof(CqBucketSlot));
	cq_buckets = ShmemInitStruct("claimq queue limits' rows",
								 cq_buckets_shared_size(), &found);
	if (!found)
	{
		pg_atomic_init_u32(&cq_buckets->any_used, 0);
		pg_atomic_init_u64(&cq_buckets->next_id, 1);
		pg_atomic_init_u64(&cq_buckets->started, 0);
		cq_buckets->nrows = cq_flow_slots;
		for (int i = 0; i < cq_flow_slots; i++)
			pg_atomic_init_u32(&cq_buckets->row_claims[i], 0);
	}
}

static CqBucketKey
cq_bucket_key(int32 queue_id)
{
	CqBucketKey key;

	memset(&key, 0, sizeof(key));	/* the padding too: keys are hashed */
	key.dboid = MyDatabaseId;
	key.relid = cq_job_relid();
	key.queue_id = queue_id;
	return key;
}

/*
 * Milliseconds until a bucket of rate_limit tokens per period microseconds,
 * holding tokens (less than one), holds a whole token: how long a claim
 * that found it empty waits before it looks again.
 */
long
cq_bucket_refill_ms(double tokens, int32 rate_limit, int64 period)
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
cq_bucket_tokens_at(const CqBucketSlot *slot, TimestampTz now)
{
	double		room = (double) slot->rate_limit - slot->outstanding;
	double		tokens = slot->tokens;

	if (now > slot->at)
		tokens += (double) (now - slot->at) * slot->rate_limit / slot->period;
	return Min(room, tokens);
}

/*
 * Whether the queue's row records the slot's bucket as it is: the record
 * was written of this bucket, and no claim took tokens of it since.  The
 * caller holds the slot's spinlock, or the lock exclusive.
 */
static bool
cq_bucket_in_row(const CqBucketSlot *slot)
{
	return slot->recorded_bucket == slot->bucket &&
		slot->recorded == slot->spent;
}

/*
 * Whether a slot can be given to another queue without losing anything:
 * no transaction has reserved on it or holds its tokens, and its bucket,
 * if any, is full (a bucket made again from the queue's row is then full
 * too: see limits.c's cq_flow_row_tokens) or is what its row's record
 * says, refilled: nothing was taken from it since the record was written
 * (so the bucket made again from the row holds no more than this one).
 * The reclaimer writes that record for a bucket left unused for a whole
 * pass (limits.c's cq_flow_upkeep), so that slow queues' buckets, which
 * are full only after a whole period, give their slots back.  The caller
 * holds the lock exclusive, or the slot's spinlock.
 */
static bool
cq_bucket_evictable(CqBucketSlot *slot, TimestampTz now)
{
	return slot->reserved == 0 &&
		(slot->bucket == 0 ||
		 (slot->outstanding == 0 &&
		  (cq_bucket_in_row(slot) ||
		   cq_bucket_tokens_at(slot, now) >= (double) slot->rate_limit)));
}

/*
 * The queue's slot, made if missing, with the lock held (shared or
 * exclusive: the caller just lets it go).  NULL, without the lock, when
 * none can be had: every slot is in use and none can be taken over, or a
 * transaction claims on the queue's row (see cq_bucket_row_enter).
 */
static CqBucketSlot *
cq_bucket_slot(const CqBucketKey *key, TimestampTz now)
{
	uint32		hash = get_hash_value(cq_buckets_table, key);
	CqBucketSlot *slot;
	bool		found;

	cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
	slot = hash_search_with_hash_value(cq_buckets_table, key, hash, HASH_FIND, NULL);
	if (slot != NULL)
		return slot;
	LWLockRelease(cq_buckets_lock);

	cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_EXCLUSIVE);
	slot = hash_search_with_hash_value(cq_buckets_table, key, hash, HASH_FIND, NULL);
	if (slot != NULL)
		return slot;
	if (pg_atomic_read_u32(&cq_buckets->row_claims[hash % cq_buckets->nrows]) == 0)
	{
		slot = hash_search_with_hash_value(cq_buckets_table, key, hash,
										   HASH_ENTER_NULL, &found);
		if (slot == NULL)
		{
			/* Full: take over a slot that loses nothing, if there is one. */
			HASH_SEQ_STATUS status;
			CqBucketSlot *victim;

			hash_seq_init(&status, cq_buckets_table);
			while ((victim = hash_seq_search(&status)) != NULL)
				if (cq_bucket_evictable(victim, now))
				{
					hash_seq_term(&status);
					break;
				}
			if (victim != NULL)
			{
				(void) hash_search(cq_buckets_table, &victim->key, HASH_REMOVE, NULL);
				slot = hash_search_with_hash_value(cq_buckets_table, key, hash,
												   HASH_ENTER_NULL, &found);
			}
		}
	}
	if (slot == NULL)
	{
		LWLockRelease(cq_buckets_lock);
		return NULL;
	}
	SpinLockInit(&slot->mutex);
	slot->reserved = 0;
	slot->generation = pg_atomic_fetch_add_u64(&cq_buckets->next_id, 1);
	slot->bucket = 0;
	slot->outstanding = 0;
	slot->spent = slot->seen = slot->recorded = 0;
	slot->recorded_bucket = 0;
	pg_atomic_write_u32(&cq_buckets->any_used, 1);
	return slot;
}

/*
 * Note that this transaction claims on the queue's row, which keeps a
 * slot from being made for the queue until it ends.  False if the queue
 * has a slot after all (claim through it), or if this transaction claims
 * on too many rows already.
 */
bool
cq_bucket_row_enter(int32 queue_id, bool *too_many)
{
	CqBucketKey key = cq_bucket_key(queue_id);
	uint32		hash = get_hash_value(cq_buckets_table, &key);
	uint32		index = hash % cq_buckets->nrows;
	bool		mine = false;

	*too_many = false;
	cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
	if (hash_search_with_hash_value(cq_buckets_table, &key, hash, HASH_FIND, NULL) != NULL)
	{
		LWLockRelease(cq_buckets_lock);
		return false;
	}
	for (int i = 0; i < cq_bucket_nrows; i++)
		mine |= cq_bucket_rows[i] == index;
	if (!mine && cq_bucket_nrows == CQ_BUCKET_HELD)
	{
		LWLockRelease(cq_buckets_lock);
		*too_many = true;
		return false;
	}
	if (!mine)
	{
		pg_atomic_fetch_add_u32(&cq_buckets->row_claims[index], 1);
		cq_bucket_rows[cq_bucket_nrows++] = index;
	}
	LWLockRelease(cq_buckets_lock);
	return true;
}

/*
 * At the end of a transaction, give back every slot it reserved and every
 * row it claimed on; tokens taken by a claim that failed before it spent
 * them count as spent.
 */
void
cq_buckets_xact_event(XactEvent event)
{
	/*
	 * A prepared transaction's claims stay uncommitted after this backend has
	 * moved on, and nothing would hold their slots meanwhile.
	 */
	if (event == XACT_EVENT_PRE_PREPARE)
	{
		bool		reserved = cq_bucket_nrows > 0;

		for (int i = 0; i < cq_bucket_nheld; i++)
			reserved |= cq_bucket_held[i].reserved > 0;
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
	if (cq_bucket_nheld > 0)
	{
		cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
		for (int i = 0; i < cq_bucket_nheld; i++)
		{
			CqBucketHeld *held = &cq_bucket_held[i];
			CqBucketSlot *slot = held->slot;

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
		LWLockRelease(cq_buckets_lock);
		cq_bucket_nheld = 0;
	}
	for (int i = 0; i < cq_bucket_nrows; i++)
		pg_atomic_fetch_sub_u32(&cq_buckets->row_claims[cq_bucket_rows[i]], 1);
	cq_bucket_nrows = 0;
	if (cq_bucket_nrecords > 0)
	{
		if (event == XACT_EVENT_COMMIT)
			cq_bucket_records_commit();
		cq_bucket_nrecords = 0;
	}
}

/* This transaction's entry for a slot, made if missing; or NULL. */
static CqBucketHeld *
cq_bucket_held_entry(CqBucketSlot *slot)
{
	for (int i = 0; i < cq_bucket_nheld; i++)
		if (cq_bucket_held[i].slot == slot &&
			cq_bucket_held[i].generation == slot->generation)
			return &cq_bucket_held[i];
	/* Entries that hold nothing go: their slots may have been taken over. */
	for (int i = 0; i < cq_bucket_nheld; i++)
		if (cq_bucket_held[i].reserved == 0 && cq_bucket_held[i].out_tokens == 0)
		{
			cq_bucket_held[i] = cq_bucket_held[--cq_bucket_nheld];
			i--;
		}
	if (cq_bucket_nheld == CQ_BUCKET_HELD)
		return NULL;
	memset(&cq_bucket_held[cq_bucket_nheld], 0, sizeof(CqBucketHeld));
	cq_bucket_held[cq_bucket_nheld].slot = slot;
	cq_bucket_held[cq_bucket_nheld].generation = slot->generation;
	return &cq_bucket_held[cq_bucket_nheld++];
}

/*
 * When buckets were first used since shared memory was made, as a
 * primary: a bucket made from a record written before then holds no more
 * than has refilled since, since what was spent after the record was not
 * written down.  After a promotion that is the first claim on the new
 * primary.
 */
TimestampTz
cq_buckets_started(TimestampTz now)
{
	uint64		started = pg_atomic_read_u64(&cq_buckets->started);

	if (started == 0)
	{
		(void) pg_atomic_compare_exchange_u64(&cq_buckets->started, &started,
											  (uint64) now);
		started = pg_atomic_read_u64(&cq_buckets->started);
	}
	return (TimestampTz) started;
}

/*
 * Step 1 of a claim with the preload (see limits.c's header), in the
 * queue's slot, made if missing: reserve max_jobs slots, take up to
 * max_jobs tokens (period: the queue's rate_period in microseconds, 0
 * without a rate limit) and set *others to what the other transactions
 * in progress had reserved.  The slot's bucket serves if it is the one
 * the claim expects; else the row, read since this slot was found (row,
 * read for the slot of generation *read_for), says which rate is current
 * (the claim's view may be older), and the bucket is made anew only for
 * that rate.  Reserves and takes nothing unless it returns
 * CQ_FLOW_RESERVED; after CQ_FLOW_READ_ROW, the caller reads the row and
 * calls again.
 */
CqFlowReserve
cq_bucket_reserve(const CqQueue *queue, int64 period, int32 max_jobs,
				  TimestampTz now, const CqFlowRow *row, uint64 *read_for,
				  CqFlowTicket *ticket, int64 *others)
{
	CqBucketKey key = cq_bucket_key(queue->queue_id);
	CqBucketSlot *slot;
	CqBucketHeld *held;

	slot = cq_bucket_slot(&key, now);
	if (slot == NULL)
		return CQ_FLOW_NO_SLOT;
	held = cq_bucket_held_entry(slot);
	if (held == NULL)
	{
		LWLockRelease(cq_buckets_lock);
		return CQ_FLOW_TOO_MANY;
	}
	SpinLockAcquire(&slot->mutex);
	if (queue->rate_limit > 0 &&
		(slot->bucket == 0 || slot->rate_limit != queue->rate_limit ||
		 slot->period != period))
	{
		if (*read_for != slot->generation)
		{
			*read_for = slot->generation;
			SpinLockRelease(&slot->mutex);
			LWLockRelease(cq_buckets_lock);
			return CQ_FLOW_READ_ROW;
		}
		if (row->rate_limit > 0 &&
			(slot->bucket == 0 || slot->rate_limit != row->rate_limit ||
			 slot->period != row->period))
		{
			slot->bucket = pg_atomic_fetch_add_u64(&cq_buckets->next_id, 1);
			slot->rate_limit = row->rate_limit;
			slot->period = row->period;
			slot->tokens = row->tokens;
			slot->outstanding = 0;
			slot->at = now;
			/* Made from the row: what its record says, so far. */
			slot->recorded_bucket = slot->bucket;
			slot->recorded = slot->spent;
		}
	}

	*others = slot->reserved - held->reserved;
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
		slot->tokens = cq_bucket_tokens_at(slot, now);
		slot->at = Max(slot->at, now);
		ticket->bucket = slot->bucket;
		ticket->tokens = (int32) Min((double) max_jobs, floor(slot->tokens));
		if (ticket->tokens == 0)
			ticket->refill_ms = cq_bucket_refill_ms(slot->tokens, slot->rate_limit,
													slot->period);
		slot->tokens -= ticket->tokens;
		slot->outstanding += ticket->tokens;
		if (ticket->tokens > 0)
			slot->spent++;
		held->out_bucket = slot->bucket;
		held->out_tokens += ticket->tokens;
		ticket->allowed = ticket->tokens;
	}
	SpinLockRelease(&slot->mutex);
	LWLockRelease(cq_buckets_lock);
	return CQ_FLOW_RESERVED;
}

/*
 * After a claim through the ticket's slot that took n jobs: give back at
 * once the reservations and tokens it did not use.
 */
void
cq_bucket_give_back(CqFlowTicket *ticket, int32 n)
{
	CqBucketSlot *slot = ticket->slot;
	CqBucketHeld *held = NULL;

	for (int i = 0; i < cq_bucket_nheld; i++)
		if (cq_bucket_held[i].slot == slot &&
			cq_bucket_held[i].generation == ticket->generation)
			held = &cq_bucket_held[i];
	Assert(held != NULL && n <= ticket->allowed);
	cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
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
	LWLockRelease(cq_buckets_lock);
	ticket->slot = NULL;
}

/*
 * The buckets in shared memory of this database's queues, with the tokens
 * they hold at now, for the reclaimer to record in their rows (limits.c's
 * cq_flow_upkeep): how many, and in *buckets an array of them, palloc'd
 * unless there are none.
 */
int
cq_buckets_of_database(TimestampTz now, CqFlowBucket **buckets)
{
	CqBucketKey key;
	HASH_SEQ_STATUS status;
	CqBucketSlot *slot;
	CqFlowBucket *b;
	int			n = 0;

	*buckets = NULL;
	if (!cq_shmem_ready || pg_atomic_read_u32(&cq_buckets->any_used) == 0)
		return 0;
	key = cq_bucket_key(0);
	b = palloc0(sizeof(CqFlowBucket) * cq_flow_slots);

	/* Copied under the spinlocks; no allocation while one is held. */
	cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
	hash_seq_init(&status, cq_buckets_table);
	while ((slot = hash_seq_search(&status)) != NULL)
	{
		if (slot->key.dboid != key.dboid || slot->key.relid != key.relid)
			continue;
		SpinLockAcquire(&slot->mutex);
		if (slot->bucket != 0)
		{
			b[n].queue_id = slot->key.queue_id;
			b[n].rate_limit = slot->rate_limit;
			b[n].period.time = slot->period;
			b[n].tokens = cq_bucket_tokens_at(slot, now);
			b[n].idle = slot->reserved == 0 && slot->outstanding == 0 &&
				slot->spent == slot->seen && !cq_bucket_in_row(slot) &&
				b[n].tokens < (double) slot->rate_limit;
			b[n].slot = slot;
			b[n].generation = slot->generation;
			b[n].bucket = slot->bucket;
			b[n++].spent = slot->spent;
			slot->seen = slot->spent;
		}
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(cq_buckets_lock);
	*buckets = b;
	return n;
}

/*
 * The reclaimer wrote this bucket, which was idle, to its queue's row:
 * once the transaction commits, the slot may be taken over, unless claims
 * took tokens of it meanwhile.
 */
void
cq_bucket_recorded(const CqFlowBucket *bucket)
{
	if (cq_bucket_nrecords == cq_bucket_records_size)
	{
		cq_bucket_records_size = Max(16, cq_bucket_records_size * 2);
		cq_bucket_records = cq_bucket_records == NULL ?
			MemoryContextAlloc(TopMemoryContext,
							   cq_bucket_records_size * sizeof(CqFlowBucket)) :
			repalloc(cq_bucket_records, cq_bucket_records_size * sizeof(CqFlowBucket));
	}
	cq_bucket_records[cq_bucket_nrecords++] = *bucket;
}

/* At the commit of the transaction that wrote them: the records hold. */
static void
cq_bucket_records_commit(void)
{
	cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
	for (int i = 0; i < cq_bucket_nrecords; i++)
	{
		CqFlowBucket *r = &cq_bucket_records[i];
		CqBucketSlot *slot = (CqBucketSlot *) r->slot;

		SpinLockAcquire(&slot->mutex);
		if (slot->generation == r->generation && slot->bucket == r->bucket &&
			slot->spent == r->spent)
		{
			slot->recorded_bucket = r->bucket;
			slot->recorded = r->spent;
		}
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(cq_buckets_lock);
}

/*
 * Jobs of the queue left flight (settled, cancelled or reclaimed): whether
 * claims waiting on its queue-wide limits are to be woken at commit (the
 * ledger does it), that is whether a claim set up the queue's slot.  A
 * queue whose claims take turns on its row is looked at again by its
 * waiting claims within a second.
 */
bool
cq_bucket_freed(int32 queue_id)
{
	CqBucketKey key;
	bool		found;

	if (!cq_shmem_ready || pg_atomic_read_u32(&cq_buckets->any_used) == 0)
		return false;
	key = cq_bucket_key(queue_id);
	cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
	found = hash_search(cq_buckets_table, &key, HASH_FIND, NULL) != NULL;
	LWLockRelease(cq_buckets_lock);
	return found;
}

/*
 * Free the slots of databases that no longer exist.  Inside a transaction
 * (it reads pg_database), without the lock.
 */
void
cq_buckets_free_dropped(void)
{
	HASH_SEQ_STATUS status;
	CqBucketSlot *slot;
	Oid		   *dboids;
	int			ndbs = 0;
	int			ndropped = 0;

	if (!cq_shmem_ready || pg_atomic_read_u32(&cq_buckets->any_used) == 0)
		return;
	dboids = palloc(sizeof(Oid) * cq_flow_slots);
	cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
	hash_seq_init(&status, cq_buckets_table);
	while ((slot = hash_seq_search(&status)) != NULL)
		cq_note_database(dboids, &ndbs, cq_flow_slots, slot->key.dboid);
	LWLockRelease(cq_buckets_lock);

	ndropped = cq_dropped_databases(dboids, ndbs);
	if (ndropped > 0)
	{
		cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_EXCLUSIVE);
		hash_seq_init(&status, cq_buckets_table);
		while ((slot = hash_seq_search(&status)) != NULL)
			for (int i = 0; i < ndropped; i++)
				if (slot->key.dboid == dboids[i])
				{
					(void) hash_search(cq_buckets_table, &slot->key, HASH_REMOVE, NULL);
					break;
				}
		LWLockRelease(cq_buckets_lock);
	}
	pfree(dboids);
}

/*
 * How many slots are held: in use by a queue and not to be taken over now
 * (cq_bucket_evictable).  The rest are free for a queue that has none.
 */
static int
cq_buckets_held_count(TimestampTz now)
{
	HASH_SEQ_STATUS status;
	CqBucketSlot *slot;
	int			held = 0;

	cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
	hash_seq_init(&status, cq_buckets_table);
	while ((slot = hash_seq_search(&status)) != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		if (!cq_bucket_evictable(slot, now))
			held++;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(cq_buckets_lock);
	return held;
}

/*
 * flow_row_paths(queue_ids int[]) returns table(queue_id int, row_path
 * bool), for metrics(): whether each of these limited queues of the
 * current database is on the row path, its claims taking turns on its row:
 * it has no slot, and a claim on its row is in progress or no slot is free
 * for it.  Every one is, without the preload.
 */
Datum
claimq_flow_row_paths(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *array = cq_array_arg(fcinfo, 0, "queue_ids", false);
	Datum	   *ids;
	int			nids;
	int			free = -1;

	InitMaterializedSRF(fcinfo, 0);
	deconstruct_array(array, INT4OID, sizeof(int32), true, TYPALIGN_INT,
					  &ids, NULL, &nids);
	for (int i = 0; i < nids; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {0};
		bool		row_path = true;

		if (cq_shmem_ready)
		{
			CqBucketKey key = cq_bucket_key(DatumGetInt32(ids[i]));
			uint32		hash = get_hash_value(cq_buckets_table, &key);
			bool		found;

			cq_lwlock_gated(cq_buckets_lock, cq_buckets_gate, LW_SHARED);
			found = hash_search_with_hash_value(cq_buckets_table, &key, hash,
												HASH_FIND, NULL) != NULL;
			LWLockRelease(cq_buckets_lock);
			row_path = !found &&
				pg_atomic_read_u32(&cq_buckets->row_claims[hash % cq_buckets->nrows]) > 0;
			if (!found && !row_path)
			{
				if (free < 0)
					free = cq_flow_slots - cq_buckets_held_count(GetCurrentTimestamp());
				row_path = free == 0;
			}
		}
		values[0] = ids[i];
		values[1] = BoolGetDatum(row_path);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * flow_slots() returns table(held int, free int), for metrics(): the
 * server's slots held and free (cq_buckets_held_count).  No row without the
 * preload, nor for a caller without the administer duty (EXECUTE on
 * claimq.maintain()), judged by the role that called metrics(), which is
 * a security definer.
 */
Datum
claimq_flow_slots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			maintain;
	Datum		values[2];
	bool		nulls[2] = {0};
	int			held;

	InitMaterializedSRF(fcinfo, 0);
	if (!cq_shmem_ready)
		return (Datum) 0;
	maintain = LookupFuncName(list_make2(makeString("claimq"),
										 makeString("maintain")),
							  0, NULL, true);
	if (!OidIsValid(maintain) ||
		CQ_PROC_ACLCHECK(maintain, GetOuterUserId()) != ACLCHECK_OK)
		return (Datum) 0;
	held = cq_buckets_held_count(GetCurrentTimestamp());
	values[0] = Int32GetDatum(held);
	values[1] = Int32GetDatum(cq_flow_slots - held);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}
