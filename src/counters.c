/*-------------------------------------------------------------------------
 *
 * counters.c
 *		Cumulative per-queue counters in shared memory: claimed, started,
 *		completed, failed, released, reclaimed, dead and stale (refused
 *		calls), and the SQL functions counters() and reset_counters().
 *
 * The counters live in a fixed-size shared hash table keyed by database
 * and queue id, so memory is bounded.  Once CQ_MAX_COUNTER_SLOTS queues
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
 * at their end, so a batch of 10,000 jobs takes the lock once.
 *
 * Without shared_preload_libraries = 'claimq' there is no shared memory
 * and nothing is counted.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/syscache.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_counters);
PG_FUNCTION_INFO_V1(claimq_reset_counters);

#define CQ_MAX_COUNTER_SLOTS 1024

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
} CqCounterEntry;

static LWLock *cq_counters_lock = NULL;
static HTAB *cq_counters = NULL;
static pg_atomic_uint64 *cq_counters_lost = NULL;	/* CQ_NCOUNTERS of them */

Size
cq_counters_shmem_size(void)
{
	/* Room for every queue's entry plus one overflow entry per database. */
	return add_size(hash_estimate_size(CQ_MAX_COUNTER_SLOTS + CQ_MAX_DATABASES,
									   sizeof(CqCounterEntry)),
					sizeof(pg_atomic_uint64) * CQ_NCOUNTERS);
}

void
cq_counters_shmem_init(LWLock *lock)
{
	HASHCTL		ctl;
	bool		found;

	ctl.keysize = sizeof(CqCounterKey);
	ctl.entrysize = sizeof(CqCounterEntry);
	cq_counters_lock = lock;
	cq_counters = ShmemInitHash("claimq counters",
								CQ_MAX_COUNTER_SLOTS + CQ_MAX_DATABASES,
								CQ_MAX_COUNTER_SLOTS + CQ_MAX_DATABASES,
								&ctl, HASH_ELEM | HASH_BLOBS);
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
static void
cq_counters_free_dropped(void)
{
	HASH_SEQ_STATUS status;
	CqCounterEntry *entry;
	Oid		   *dboids;
	int			ndbs = 0;

	dboids = palloc(sizeof(Oid) * (CQ_MAX_COUNTER_SLOTS + CQ_MAX_DATABASES));
	LWLockAcquire(cq_counters_lock, LW_SHARED);
	hash_seq_init(&status, cq_counters);
	while ((entry = hash_seq_search(&status)) != NULL)
		dboids[ndbs++] = entry->key.dboid;
	LWLockRelease(cq_counters_lock);

	for (int i = 0; i < ndbs; i++)
		if (SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(dboids[i])))
			dboids[i] = InvalidOid;

	LWLockAcquire(cq_counters_lock, LW_EXCLUSIVE);
	hash_seq_init(&status, cq_counters);
	while ((entry = hash_seq_search(&status)) != NULL)
		for (int i = 0; i < ndbs; i++)
			if (dboids[i] == entry->key.dboid)
			{
				hash_search(cq_counters, &entry->key, HASH_REMOVE, NULL);
				break;
			}
	LWLockRelease(cq_counters_lock);
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
	if (hash_get_num_entries(cq_counters) >= CQ_MAX_COUNTER_SLOTS &&
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
	}
	if (queue_name && entry->queue[0] == '\0')
		strlcpy(entry->queue, queue_name, NAMEDATALEN);
	return entry;
}

/*
 * Add the counts of one queue.  queue_name may be NULL when the caller
 * knows only the id; the claim that preceded any settle call has named it.
 */
static void
cq_count_queue(int32 queue_id, const char *queue_name, const uint64 *counts)
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
	LWLockRelease(cq_counters_lock);
}

void
cq_count(int32 queue_id, const char *queue_name, CqCounter counter, uint64 n)
{
	uint64		counts[CQ_NCOUNTERS] = {0};

	if (!cq_shmem_ready || n == 0)
		return;
	counts[counter] = n;
	cq_count_queue(queue_id, queue_name, counts);
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
			cq_count_queue(batch->slots[i].queue_id, NULL,
						   batch->slots[i].counts);
	batch->nslots = 0;
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
