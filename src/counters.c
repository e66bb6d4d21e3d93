/*-------------------------------------------------------------------------
 *
 * counters.c
 *		Cumulative per-queue counters in shared memory: claimed, started,
 *		completed, failed, released, reclaimed, dead, stale (refused
 *		calls), cancelled and snoozed, and latency histograms of waiting
 *		and running jobs; the SQL functions counters(), queue_latency()
 *		and reset_counters().
 *
 * The counters live in a fixed-size shared hash table keyed by database
 * and queue id, so memory is bounded.  Once claimq.counter_entries queues
 * have entries, further queues of a database share one overflow entry
 * (queue_id 0, reported with a NULL queue name).  When no entry can be
 * had, the entries of databases that no longer exist are freed first; if
 * there is still no room the counts are added to one set of lost counts,
 * which counters() shows in every database as a row with neither database
 * nor queue, so that nothing goes missing silently.  Each database sees
 * and resets only its own entries.  Like the statistics collector's, these
 * counts are taken when a call does its work and are not rolled back with
 * its transaction.
 *
 * Locking: the table's lock (claimq's LWLock) is taken shared to find an
 * entry and bump its counters, which are atomics, and exclusive to add or
 * remove entries.  Calls count into a CqCountBatch first and flush it once
 * at their end, so a batch of 10,000 jobs takes the lock once.  It is held
 * only around work in memory, never across a statement or a commit, and
 * its holders wait for nothing else.
 *
 * Without shared_preload_libraries = 'claimq' there is no shared memory
 * and nothing is counted.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_counters);
PG_FUNCTION_INFO_V1(claimq_queue_latency);
PG_FUNCTION_INFO_V1(claimq_latency_histogram);
PG_FUNCTION_INFO_V1(claimq_reset_counters);

typedef struct CqCounterKey
{
	Oid			dboid;
	int32		queue_id;		/* 0: the database's overflow entry */
} CqCounterKey;

typedef struct CqCounterEntry
{
	CqCounterKey key;
	char		queue[NAMEDATALEN]; /* name, once a caller has told it */
	pg_atomic_uint64 counts[CQ_NCOUNTERS];
	pg_atomic_uint64 latency[CQ_NLATENCIES][CQ_LATENCY_BUCKETS];
	pg_atomic_uint64 latency_sum_us[CQ_NLATENCIES];
} CqCounterEntry;

static LWLock *cq_counters_lock = NULL;
static HTAB *cq_counters = NULL;
static pg_atomic_uint64 *cq_counters_lost = NULL;	/* CQ_NCOUNTERS of them */

Size
cq_counters_shmem_size(void)
{
	/* Room for every queue's entry plus one overflow entry per database. */
	return add_size(hash_estimate_size(cq_counter_entries + CQ_MAX_DATABASES,
									   sizeof(CqCounterEntry)),
					sizeof(pg_atomic_uint64) * CQ_NCOUNTERS);
}

void
cq_counters_shmem_init(LWLock *lock)
{
	bool		found;

	cq_counters_lock = lock;
	cq_counters = cq_shmem_table("claimq counters",
								 cq_counter_entries + CQ_MAX_DATABASES,
								 sizeof(CqCounterKey), sizeof(CqCounterEntry));
	cq_counters_lost = ShmemInitStruct("claimq lost counts",
									   sizeof(pg_atomic_uint64) * CQ_NCOUNTERS,
									   &found);
	if (!found)
		for (int i = 0; i < CQ_NCOUNTERS; i++)
			pg_atomic_init_u64(&cq_counters_lost[i], 0);
}

/*
 * Free the entries of databases that no longer exist.  Called without the
 * lock, inside a transaction (it reads pg_database).
 */
void
cq_counters_free_dropped(void)
{
	HASH_SEQ_STATUS status;
	CqCounterEntry *entry;
	Oid		   *dboids;
	int			ndbs = 0;
	int			ndropped;
	int			room = cq_counter_entries + CQ_MAX_DATABASES;

	if (!cq_shmem_ready)
		return;
	dboids = palloc(sizeof(Oid) * room);
	LWLockAcquire(cq_counters_lock, LW_SHARED);
	hash_seq_init(&status, cq_counters);
	while ((entry = hash_seq_search(&status)) != NULL)
		cq_note_database(dboids, &ndbs, room, entry->key.dboid);
	LWLockRelease(cq_counters_lock);

	ndropped = cq_dropped_databases(dboids, ndbs);
	if (ndropped > 0)
	{
		LWLockAcquire(cq_counters_lock, LW_EXCLUSIVE);
		hash_seq_init(&status, cq_counters);
		while ((entry = hash_seq_search(&status)) != NULL)
			for (int i = 0; i < ndropped; i++)
				if (dboids[i] == entry->key.dboid)
				{
					hash_search(cq_counters, &entry->key, HASH_REMOVE, NULL);
					break;
				}
		LWLockRelease(cq_counters_lock);
	}
	pfree(dboids);
}

/*
 * The entry for a queue of this database, created if need be.  Called with
 * the lock held exclusive.
 */
static CqCounterEntry *
cq_counter_entry(int32 queue_id, const char *queue_name)
{
	CqCounterKey key;
	CqCounterEntry *entry;
	bool		found;

	memset(&key, 0, sizeof(key));
	key.dboid = MyDatabaseId;
	key.queue_id = queue_id;
	if (hash_get_num_entries(cq_counters) >= cq_counter_entries &&
		hash_search(cq_counters, &key, HASH_FIND, NULL) == NULL)
	{
		key.queue_id = 0;
		queue_name = NULL;
	}
	entry = hash_search(cq_counters, &key, HASH_ENTER_NULL, &found);
	if (entry == NULL)
		return NULL;			/* more databases than overflow entries */
	if (!found)
	{
		entry->queue[0] = '\0';
		for (int i = 0; i < CQ_NCOUNTERS; i++)
			pg_atomic_init_u64(&entry->counts[i], 0);
		for (int k = 0; k < CQ_NLATENCIES; k++)
		{
			for (int b = 0; b < CQ_LATENCY_BUCKETS; b++)
				pg_atomic_init_u64(&entry->latency[k][b], 0);
			pg_atomic_init_u64(&entry->latency_sum_us[k], 0);
		}
	}
	if (queue_name && entry->queue[0] == '\0')
		strlcpy(entry->queue, queue_name, NAMEDATALEN);
	return entry;
}

/*
 * Add the counts of one queue, and the latencies of the batch that are of
 * that queue.  queue_name may be NULL when the caller knows only the id
 * (settle calls, reclaim); the entry then stays unnamed until a claim
 * names it or a reader looks the name up (cq_entry_name).
 */
static void
cq_count_queue(int32 queue_id, const char *queue_name, const uint64 *counts,
			   const CqCountBatch *batch)
{
	CqCounterKey key;
	CqCounterEntry *entry;

	memset(&key, 0, sizeof(key));
	key.dboid = MyDatabaseId;
	key.queue_id = queue_id;

	for (int try = 0;; try++)
	{
		LWLockAcquire(cq_counters_lock, LW_SHARED);
		entry = hash_search(cq_counters, &key, HASH_FIND, NULL);
		if (entry == NULL || (queue_name && entry->queue[0] == '\0'))
		{
			LWLockRelease(cq_counters_lock);
			LWLockAcquire(cq_counters_lock, LW_EXCLUSIVE);
			entry = cq_counter_entry(queue_id, queue_name);
		}
		if (entry || try > 0)
			break;
		/* No room: make some, once. */
		LWLockRelease(cq_counters_lock);
		cq_counters_free_dropped();
	}
	for (int i = 0; i < CQ_NCOUNTERS; i++)
		if (counts[i] > 0)
			pg_atomic_fetch_add_u64(entry ? &entry->counts[i] :
									&cq_counters_lost[i], counts[i]);
	for (int i = 0; entry && batch && i < batch->nlatencies; i++)
		if (batch->latencies[i].queue_id == queue_id)
		{
			int			kind = batch->latencies[i].kind;

			pg_atomic_fetch_add_u64(&entry->latency[kind][batch->latencies[i].bucket],
									batch->latencies[i].n);
			pg_atomic_fetch_add_u64(&entry->latency_sum_us[kind],
									batch->latencies[i].sum_us);
		}
	LWLockRelease(cq_counters_lock);
}

void
cq_count(int32 queue_id, const char *queue_name, CqCounter counter, uint64 n)
{
	uint64		counts[CQ_NCOUNTERS] = {0};

	if (!cq_shmem_ready || n == 0)
		return;
	counts[counter] = n;
	cq_count_queue(queue_id, queue_name, counts, NULL);
}

void
cq_count_add(CqCountBatch *batch, int32 queue_id, CqCounter counter, uint64 n)
{
	int			i;

	for (i = 0; i < batch->nslots; i++)
		if (batch->slots[i].queue_id == queue_id)
			break;
	if (i == batch->nslots)
	{
		if (batch->nslots == CQ_COUNT_BATCH_SLOTS)
		{
			cq_count_flush(batch);
			i = 0;
		}
		batch->nslots++;
		batch->slots[i].queue_id = queue_id;
		memset(batch->slots[i].counts, 0, sizeof(batch->slots[i].counts));
	}
	batch->slots[i].counts[counter] += n;
}

void
cq_count_flush(CqCountBatch *batch)
{
	if (cq_shmem_ready)
		for (int i = 0; i < batch->nslots; i++)
			cq_count_queue(batch->slots[i].queue_id,
						   batch->queue_name &&
						   batch->named_queue_id == batch->slots[i].queue_id ?
						   batch->queue_name : NULL,
						   batch->slots[i].counts, batch);
	batch->nslots = 0;
	batch->nlatencies = 0;
}

/* The histogram bucket of a duration. */
static int
cq_latency_bucket(int64 usecs)
{
	int			b;

	if (usecs < 1)
		return 0;
	b = 1 + (int) floor(log((double) usecs) / log(CQ_LATENCY_RATIO));
	return Min(b, CQ_LATENCY_BUCKETS - 1);
}

/* The value reported for a bucket: its geometric middle, in microseconds. */
static double
cq_latency_value(int bucket)
{
	if (bucket == 0)
		return 0.5;
	return pow(CQ_LATENCY_RATIO, bucket - 0.5);
}

/*
 * Count a latency sample of a queue's job into the batch.  Its queue gets a
 * slot among the counts too, so that cq_count_flush finds its entry.
 */
void
cq_latency_add(CqCountBatch *batch, int32 queue_id, CqLatencyKind kind,
			   int64 usecs)
{
	int			bucket = cq_latency_bucket(usecs);
	int			i;

	if (!cq_shmem_ready)
		return;
	cq_count_add(batch, queue_id, CQ_CLAIMED, 0);
	for (i = 0; i < batch->nlatencies; i++)
		if (batch->latencies[i].queue_id == queue_id &&
			batch->latencies[i].kind == (int16) kind &&
			batch->latencies[i].bucket == bucket)
			break;
	if (i == batch->nlatencies)
	{
		if (batch->nlatencies == CQ_LATENCY_BATCH_SLOTS)
		{
			cq_count_flush(batch);
			cq_count_add(batch, queue_id, CQ_CLAIMED, 0);
			i = 0;
		}
		batch->nlatencies++;
		batch->latencies[i].queue_id = queue_id;
		batch->latencies[i].kind = (int16) kind;
		batch->latencies[i].bucket = (int16) bucket;
		batch->latencies[i].n = 0;
		batch->latencies[i].sum_us = 0;
	}
	batch->latencies[i].n++;
	batch->latencies[i].sum_us += (uint64) Max(usecs, 0);
}

/*
 * The name of a queue of this database whose entry has none, into name
 * (NAMEDATALEN bytes); false if the queue is gone.  An entry made by a
 * settle call or a reclaim knows only the queue's id, and after a start
 * those may come before any claim of the queue: a job claimed before a
 * restart (or a pg_upgrade) and settled after it.  The name is noted in
 * the entry too, so that the next reader need not look it up.  Called
 * without the lock.
 */
static bool
cq_entry_name(int32 queue_id, char *name)
{
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(queue_id)};
	CqCounterKey key;
	CqCounterEntry *entry;
	bool		found = false;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("SELECT q.name FROM claimq.queue q"
							  " WHERE q.queue_id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look up the name of queue %d", queue_id);
	if (SPI_processed == 1)
	{
		char	   *value = SPI_getvalue(SPI_tuptable->vals[0],
										 SPI_tuptable->tupdesc, 1);

		strlcpy(name, value, NAMEDATALEN);
		found = true;
	}
	SPI_finish();
	if (!found)
		return false;

	memset(&key, 0, sizeof(key));
	key.dboid = MyDatabaseId;
	key.queue_id = queue_id;
	LWLockAcquire(cq_counters_lock, LW_EXCLUSIVE);
	entry = hash_search(cq_counters, &key, HASH_FIND, NULL);
	if (entry && entry->queue[0] == '\0')
		strlcpy(entry->queue, name, NAMEDATALEN);
	LWLockRelease(cq_counters_lock);
	return true;
}

/*
 * counters() returns table(database, queue, claimed, started, completed,
 * failed, released, reclaimed, dead, stale)
 */
Datum
claimq_counters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	CqCounterEntry *entry;
	List	   *rows = NIL;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	if (!cq_shmem_ready)
		return (Datum) 0;

	/* Copy under the lock; name the databases after releasing it. */
	LWLockAcquire(cq_counters_lock, LW_SHARED);
	hash_seq_init(&status, cq_counters);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		CqCounterEntry *copy;

		if (entry->key.dboid != MyDatabaseId)
			continue;
		copy = palloc(sizeof(CqCounterEntry));

		copy->key = entry->key;
		memcpy(copy->queue, entry->queue, NAMEDATALEN);
		for (int i = 0; i < CQ_NCOUNTERS; i++)
			pg_atomic_init_u64(&copy->counts[i],
							   pg_atomic_read_u64(&entry->counts[i]));
		rows = lappend(rows, copy);
	}
	LWLockRelease(cq_counters_lock);

	foreach(lc, rows)
	{
		Datum		values[2 + CQ_NCOUNTERS];
		bool		nulls[2 + CQ_NCOUNTERS] = {0};
		char	   *dbname;

		entry = lfirst(lc);
		dbname = get_database_name(entry->key.dboid);
		if (dbname == NULL)
			continue;			/* dropped since */
		values[0] = CStringGetTextDatum(dbname);
		if (entry->key.queue_id != 0 && entry->queue[0] == '\0')
			(void) cq_entry_name(entry->key.queue_id, entry->queue);
		if (entry->key.queue_id == 0 || entry->queue[0] == '\0')
			nulls[1] = true;
		else
			values[1] = CStringGetTextDatum(entry->queue);
		for (int i = 0; i < CQ_NCOUNTERS; i++)
			values[2 + i] = Int64GetDatum((int64)
										  pg_atomic_read_u64(&entry->counts[i]));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}

	/* Counts that found no entry, of any database. */
	{
		Datum		values[2 + CQ_NCOUNTERS];
		bool		nulls[2 + CQ_NCOUNTERS] = {true, true};
		bool		any = false;

		for (int i = 0; i < CQ_NCOUNTERS; i++)
		{
			uint64		n = pg_atomic_read_u64(&cq_counters_lost[i]);

			values[2 + i] = Int64GetDatum((int64) n);
			any |= (n > 0);
		}
		if (any)
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 values, nulls);
	}
	return (Datum) 0;
}

/*
 * The q-quantile (nearest rank) of a histogram of n samples, as an
 * interval.
 */
static Datum
cq_latency_quantile(const uint64 *hist, uint64 n, double q)
{
	uint64		rank = (uint64) ceil(q * (double) n);
	uint64		seen = 0;
	Interval   *span = palloc0(sizeof(Interval));

	for (int b = 0; b < CQ_LATENCY_BUCKETS; b++)
	{
		seen += hist[b];
		if (seen >= Max(rank, 1))
		{
			span->time = (int64) llround(cq_latency_value(b));
			break;
		}
	}
	return IntervalPGetDatum(span);
}

/* A copy of one queue's latency histograms, taken under the lock. */
typedef struct CqLatencyCopy
{
	int32		queue_id;
	char		queue[NAMEDATALEN];
	uint64		hist[CQ_NLATENCIES][CQ_LATENCY_BUCKETS];
	uint64		n[CQ_NLATENCIES];	/* samples: the sum of hist[k] */
	uint64		sum_us[CQ_NLATENCIES];
} CqLatencyCopy;

/*
 * Copies of the latency histograms of the current database's queues (not
 * the overflow entry, nor a queue dropped since) that have a sample, so
 * that callers build their results without holding the lock.
 */
static List *
cq_latency_copies(void)
{
	HASH_SEQ_STATUS status;
	CqCounterEntry *entry;
	List	   *copies = NIL;
	ListCell   *lc;

	LWLockAcquire(cq_counters_lock, LW_SHARED);
	hash_seq_init(&status, cq_counters);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		CqLatencyCopy *copy;

		if (entry->key.dboid != MyDatabaseId || entry->key.queue_id == 0)
			continue;
		copy = palloc0(sizeof(CqLatencyCopy));
		copy->queue_id = entry->key.queue_id;
		memcpy(copy->queue, entry->queue, NAMEDATALEN);
		for (int k = 0; k < CQ_NLATENCIES; k++)
		{
			for (int b = 0; b < CQ_LATENCY_BUCKETS; b++)
			{
				copy->hist[k][b] = pg_atomic_read_u64(&entry->latency[k][b]);
				copy->n[k] += copy->hist[k][b];
			}
			copy->sum_us[k] = pg_atomic_read_u64(&entry->latency_sum_us[k]);
		}
		if (copy->n[CQ_LATENCY_WAIT] == 0 && copy->n[CQ_LATENCY_RUN] == 0)
			pfree(copy);
		else
			copies = lappend(copies, copy);
	}
	LWLockRelease(cq_counters_lock);

	foreach(lc, copies)
	{
		CqLatencyCopy *copy = lfirst(lc);

		if (copy->queue[0] == '\0' &&
			!cq_entry_name(copy->queue_id, copy->queue))
		{
			copies = foreach_delete_current(copies, lc);
			pfree(copy);
		}
	}
	return copies;
}

/*
 * queue_latency() returns table(queue, samples, wait_p50, wait_p90,
 * wait_p99, run_p50, run_p90, run_p99, wait_sum, run_samples, run_sum):
 * the current database's queues with a latency sample (nothing without
 * the preload).  The sums (in seconds) and run_samples are for metrics().
 */
Datum
claimq_queue_latency(PG_FUNCTION_ARGS)
{
	static const double quantiles[3] = {0.5, 0.9, 0.99};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	if (!cq_shmem_ready)
		return (Datum) 0;

	foreach(lc, cq_latency_copies())
	{
		CqLatencyCopy *copy = lfirst(lc);
		Datum		values[11];
		bool		nulls[11] = {0};

		values[0] = CStringGetTextDatum(copy->queue);
		values[1] = Int64GetDatum((int64) copy->n[CQ_LATENCY_WAIT]);
		for (int k = 0; k < CQ_NLATENCIES; k++)
			for (int i = 0; i < 3; i++)
			{
				int			col = 2 + 3 * k + i;

				if (copy->n[k] == 0)
					nulls[col] = true;
				else
					values[col] = cq_latency_quantile(copy->hist[k], copy->n[k],
													  quantiles[i]);
			}
		values[8] = Float8GetDatum((double) copy->sum_us[CQ_LATENCY_WAIT] / 1e6);
		values[9] = Int64GetDatum((int64) copy->n[CQ_LATENCY_RUN]);
		values[10] = Float8GetDatum((double) copy->sum_us[CQ_LATENCY_RUN] / 1e6);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * latency_histogram() returns table(queue, kind, bucket, upper, samples):
 * the non-empty buckets of the current database's latency histograms, for
 * tools that want percentiles over an interval (the difference of two
 * readings); upper is the bucket's upper bound in seconds.  In no duty.
 */
Datum
claimq_latency_histogram(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	if (!cq_shmem_ready)
		return (Datum) 0;

	foreach(lc, cq_latency_copies())
	{
		CqLatencyCopy *copy = lfirst(lc);

		for (int k = 0; k < CQ_NLATENCIES; k++)
			for (int b = 0; b < CQ_LATENCY_BUCKETS; b++)
			{
				Datum		values[5];
				bool		nulls[5] = {0};

				if (copy->hist[k][b] == 0)
					continue;
				values[0] = CStringGetTextDatum(copy->queue);
				values[1] = CStringGetTextDatum(k == CQ_LATENCY_WAIT ? "wait" : "run");
				values[2] = Int32GetDatum(b);
				values[3] = Float8GetDatum(pow(CQ_LATENCY_RATIO, b) / 1e6);
				values[4] = Int64GetDatum((int64) copy->hist[k][b]);
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
									 values, nulls);
			}
	}
	return (Datum) 0;
}

/*
 * reset_counters() returns void: forget every count of this database.
 * Lost counts belong to no database and stay.
 */
Datum
claimq_reset_counters(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS status;
	CqCounterEntry *entry;

	if (!cq_shmem_ready)
		PG_RETURN_VOID();

	LWLockAcquire(cq_counters_lock, LW_EXCLUSIVE);
	hash_seq_init(&status, cq_counters);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (entry->key.dboid == MyDatabaseId)
			hash_search(cq_counters, &entry->key, HASH_REMOVE, NULL);
	LWLockRelease(cq_counters_lock);
	PG_RETURN_VOID();
}
