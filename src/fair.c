/*-------------------------------------------------------------------------
 *
 * fair.c
 *		Fair queues' shares in shared memory: each tenant's virtual time,
 *		which a fair queue's claim reads and moves on without writing a
 *		row (claim.c, cq_claim_fair), and the set of a queue's tenants it
 *		chooses from.
 *
 * Start-time fair queuing, as sql/fair-share.sql describes it: a claim
 * takes, at a priority, the tenants with a ready job in order of virtual
 * time, hands out the smallest tags (a tenant's k-th next job is tagged
 * start + k / weight), and moves each served tenant past what it got; a
 * tenant's start is never behind the priority's own time (its level), so
 * a tenant that had nothing ready earns no credit.  Without the preload
 * (and in the portable edition) the times live in the tables
 * claimq.fair_share, fair_level and fair_charge, and the claim is the
 * statements of claimq.claim_fair.  With it, shared memory keeps them
 * (claimq.fair_tenants entries over all databases):
 *
 * A set per database, installation (the OID of claimq.job), queue and
 * priority, holding every tenant with live jobs there: its key, weight,
 * virtual time and the jobs handed to it.  The set is loaded from the
 * tables (a tenant's row and unfolded charges, its weight, the level) by
 * the first claim that needs it, and loaded again, keeping the times it
 * has, when the tenants or weights may have changed: at the commit of a
 * write of claimq.queue or claimq.group_weight (their statement trigger
 * claimq.queue_changed), and of a pass of fair_forget that removed rows.
 * A load removes the tenants that it did not find and that nobody added
 * meanwhile (confirmed).  An enqueue adds its tenants at once (its own
 * transaction's claims must see them) and confirms them at its commit, so
 * that a load whose snapshot missed its rows cannot drop them for good.
 *
 * A claim moves its tenants' times on in shared memory as it picks them,
 * before it takes their jobs (so that claims at once spread over the
 * tenants), gives back what a tenant could not give, and notes in
 * backend memory what it charged: if the transaction or subtransaction
 * aborts, the charges are taken back; a job counts when the claim that
 * handed it out commits.  (A prepared transaction's charges stay, should
 * it be rolled back: its tenants get one claim's jobs less.)  Nothing is
 * written to the tables: they hold the times as the last claims without
 * shared memory left them.  So after a restart or a failover, and while a
 * set is not loaded or has no room, claims use the statements and the
 * tables' times.  Tenants backlogged all along moved on together in both,
 * so their differences carry over, but for the claims of the last moments.
 *
 * Full: a set that cannot add a tenant (no free entry) gives its entries
 * back and is spilled; its queue's claims use the statements, and the
 * first claim a second later tries to load it again.  The sets of queues
 * that are gone or no longer fair are freed by the reclaimer's pass
 * (cq_fair_sweep).
 *
 * One LWLock guards the tables; it is held for memory work only (a pass
 * over one set's tenants at most), never across a statement or a commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "claimq.h"

#define CQ_FAIR_RETRY_MS	1000	/* a spilled set's next try to load */

typedef struct CqFairSetKey
{
	Oid			dboid;
	Oid			relid;			/* claimq.job: the installation */
	int32		queue_id;
	int32		priority;
} CqFairSetKey;

typedef struct CqFairSet
{
	CqFairSetKey key;
	bool		ready;			/* loaded, and not spilled since */
	bool		stale;			/* to be loaded again */
	bool		loading;		/* a load is under way (since loading_at) */
	TimestampTz loading_at;
	TimestampTz spilled_at;		/* 0, or when it last found no room */
	double		level;			/* the priority's virtual time */
	int			ntenants;
	dlist_head	tenants;
} CqFairSet;

typedef struct CqFairTenantKey
{
	CqFairSetKey set;
	int32		len;			/* -1: the jobs without a group key */
	char		key[CQ_FAIR_KEY_MAX];
} CqFairTenantKey;

typedef struct CqFairTenant
{
	CqFairTenantKey key;
	dlist_node	node;			/* in its set's list */
	double		vt;				/* the start of its next job */
	double		weight;
	int64		handed;			/* jobs handed to it since it was added */
	uint64		passed;			/* the claim that found nothing here */
	bool		confirmed;		/* found or added since its set's last load */
} CqFairTenant;

typedef struct CqFairShared
{
	LWLock	   *lock;
	int			ntenants;
	int			nsets;
} CqFairShared;

int			cq_fair_tenants = 4096;

static CqFairShared *cq_fair = NULL;
static HTAB *cq_fair_sets = NULL;
static HTAB *cq_fair_tenant_table = NULL;

/* What this backend's transaction did, in TopTransactionContext. */
typedef struct CqFairNote
{
	CqFairTenantKey key;
	double		amount;			/* charged: jobs / weight */
	int64		jobs;
	int			level;			/* transaction nesting level */
} CqFairNote;

static List *cq_fair_charges = NIL; /* CqFairNote *, charged */
static List *cq_fair_joined = NIL;	/* CqFairNote *, tenants added */
static Oid	cq_fair_changed = InvalidOid;	/* claimq.job, if tenants or
											 * weights may have changed */
static uint64 cq_fair_claims = 0;	/* this backend's fair claims so far */

static int
cq_fair_sets_max(void)
{
	return Max(64, cq_fair_tenants / 8);
}

Size
cq_fair_shmem_size(void)
{
	Size		size;

	if (cq_fair_tenants == 0)
		return 0;
	size = MAXALIGN(sizeof(CqFairShared));
	size = add_size(size, hash_estimate_size(cq_fair_sets_max(),
											 sizeof(CqFairSet)));
	size = add_size(size, hash_estimate_size(cq_fair_tenants,
											 sizeof(CqFairTenant)));
	return size;
}

void
cq_fair_shmem_init(LWLock *lock)
{
	HASHCTL		info;
	bool		found;

	if (cq_fair_tenants == 0)
		return;
	cq_fair = ShmemInitStruct("claimq fair shares", sizeof(CqFairShared),
							  &found);
	if (!found)
	{
		cq_fair->lock = lock;
		cq_fair->ntenants = 0;
		cq_fair->nsets = 0;
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(CqFairSetKey);
	info.entrysize = sizeof(CqFairSet);
	cq_fair_sets = ShmemInitHash("claimq fair sets", cq_fair_sets_max(),
								 cq_fair_sets_max(), &info,
								 HASH_ELEM | HASH_BLOBS);
	info.keysize = sizeof(CqFairTenantKey);
	info.entrysize = sizeof(CqFairTenant);
	cq_fair_tenant_table = ShmemInitHash("claimq fair tenants",
										 cq_fair_tenants, cq_fair_tenants,
										 &info, HASH_ELEM | HASH_BLOBS);
}

/* Whether this backend keeps fair shares in shared memory. */
bool
cq_fair_usable(void)
{
	return cq_shmem_ready && cq_fair != NULL;
}

static void
cq_fair_set_key(CqFairSetKey *key, int32 queue_id, int32 priority)
{
	memset(key, 0, sizeof(CqFairSetKey));
	key->dboid = MyDatabaseId;
	key->relid = cq_job_relid();
	key->queue_id = queue_id;
	key->priority = priority;
}

/*
 * A tenant's key from its group key (NULL: the jobs without one).  False
 * if the key is too long to be kept (only a row written behind claimq's
 * back can hold one).
 */
static bool
cq_fair_tenant_key(CqFairTenantKey *key, const CqFairSetKey *set,
				   text *group_key)
{
	memset(key, 0, sizeof(CqFairTenantKey));
	key->set = *set;
	if (group_key == NULL)
	{
		key->len = -1;
		return true;
	}
	if (VARSIZE_ANY_EXHDR(group_key) > CQ_FAIR_KEY_MAX)
		return false;
	key->len = VARSIZE_ANY_EXHDR(group_key);
	memcpy(key->key, VARDATA_ANY(group_key), key->len);
	return true;
}

/* Free a set's tenants (under the exclusive lock). */
static void
cq_fair_free_tenants(CqFairSet *set)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &set->tenants)
	{
		CqFairTenant *t = dlist_container(CqFairTenant, node, iter.cur);

		dlist_delete(&t->node);
		hash_search(cq_fair_tenant_table, &t->key, HASH_REMOVE, NULL);
		cq_fair->ntenants--;
	}
	set->ntenants = 0;
}

/* Spill a set that has no room (under the exclusive lock). */
static void
cq_fair_spill(CqFairSet *set)
{
	cq_fair_free_tenants(set);
	set->ready = false;
	set->spilled_at = GetCurrentTimestamp();
}

/*
 * Find or add a tenant of a set (under the exclusive lock).  NULL if the
 * table is full, which spills the set.
 */
static CqFairTenant *
cq_fair_enter(CqFairSet *set, const CqFairTenantKey *key, double weight,
			  double vt, bool *added)
{
	CqFairTenant *t;
	bool		found;

	*added = false;
	t = hash_search(cq_fair_tenant_table, key, HASH_FIND, NULL);
	if (t != NULL)
		return t;
	if (cq_fair->ntenants >= cq_fair_tenants)
	{
		cq_fair_spill(set);
		return NULL;
	}
	t = hash_search(cq_fair_tenant_table, key, HASH_ENTER_NULL, &found);
	if (t == NULL)
	{
		cq_fair_spill(set);
		return NULL;
	}
	Assert(!found);
	cq_fair->ntenants++;
	t->vt = vt;
	t->weight = weight;
	t->handed = 0;
	t->passed = 0;
	t->confirmed = true;
	dlist_push_tail(&set->tenants, &t->node);
	set->ntenants++;
	*added = true;
	return t;
}

/* Find or make a set (under the exclusive lock); NULL if none is free. */
static CqFairSet *
cq_fair_set(const CqFairSetKey *key)
{
	CqFairSet  *set;
	bool		found;

	set = hash_search(cq_fair_sets, key, HASH_FIND, NULL);
	if (set != NULL)
		return set;
	if (cq_fair->nsets >= cq_fair_sets_max())
		return NULL;
	set = hash_search(cq_fair_sets, key, HASH_ENTER_NULL, &found);
	if (set == NULL)
		return NULL;
	cq_fair->nsets++;
	set->ready = false;
	set->stale = true;
	set->loading = false;
	set->loading_at = 0;
	set->spilled_at = 0;
	set->level = 0;
	set->ntenants = 0;
	dlist_init(&set->tenants);
	return set;
}

static void
cq_fair_note(List **list, const CqFairTenantKey *key, double amount,
			 int64 jobs)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	CqFairNote *note = palloc(sizeof(CqFairNote));

	note->key = *key;
	note->amount = amount;
	note->jobs = jobs;
	note->level = GetCurrentTransactionNestLevel();
	*list = lappend(*list, note);
	MemoryContextSwitchTo(old);
}

/*
 * An enqueue of jobs of these tenants (keys: text[], or 0 for the jobs
 * without a group key) at this priority into a fair queue, after
 * fair_join made sure of their rows: each is in the queue's set from now,
 * and confirmed when the transaction commits.  A new tenant's weight is
 * read here, once.
 */
void
cq_fair_join(int32 queue_id, int32 priority, Datum keys, bool keys_null)
{
	CqFairSetKey setkey;
	Datum	   *elems;
	bool	   *elemnulls;
	int			n;
	CqFairTenantKey *tkeys;
	double	   *weights;
	bool	   *missing;
	int			nmissing = 0;
	CqFairSet  *set;

	if (!cq_fair_usable())
		return;
	cq_fair_set_key(&setkey, queue_id, priority);
	if (keys_null)
	{
		n = 1;
		elems = palloc0(sizeof(Datum));
		elemnulls = palloc(sizeof(bool));
		elemnulls[0] = true;
	}
	else
		deconstruct_array(DatumGetArrayTypeP(keys), TEXTOID, -1, false,
						  TYPALIGN_INT, &elems, &elemnulls, &n);
	tkeys = palloc(n * sizeof(CqFairTenantKey));
	weights = palloc(n * sizeof(double));
	missing = palloc0(n * sizeof(bool));
	for (int i = 0; i < n; i++)
		if (!cq_fair_tenant_key(&tkeys[i], &setkey,
								elemnulls[i] ? NULL : DatumGetTextPP(elems[i])))
			elog(ERROR, "group key too long for a fair queue");

	/* Which are new to the set (a set not loaded yet takes them too). */
	LWLockAcquire(cq_fair->lock, LW_SHARED);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	for (int i = 0; i < n; i++)
	{
		if (set != NULL &&
			hash_search(cq_fair_tenant_table, &tkeys[i], HASH_FIND, NULL))
			continue;
		missing[i] = true;
		nmissing++;
	}
	LWLockRelease(cq_fair->lock);

	/* Their weights, read before the lock is taken again. */
	for (int i = 0; i < n; i++)
	{
		static SPIPlanPtr plan = NULL;
		Oid			argtypes[2] = {INT4OID, TEXTOID};
		Datum		values[2];
		char		nulls[2] = "  ";
		bool		isnull;

		weights[i] = 1;
		if (!missing[i])
			continue;
		cq_plan(&plan,
				"SELECT w.weight::float8 FROM claimq.group_weight w"
				" WHERE w.queue_id = $1 AND w.group_key IS NOT DISTINCT FROM $2",
				2, argtypes);
		values[0] = Int32GetDatum(queue_id);
		values[1] = elems[i];
		nulls[1] = elemnulls[i] ? 'n' : ' ';
		cq_execute(plan, values, nulls, SPI_OK_SELECT);
		if (SPI_processed > 0)
			weights[i] = DatumGetFloat8(cq_spi_value(0, 1, &isnull));
	}

	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = cq_fair_set(&setkey);
	for (int i = 0; set != NULL && i < n; i++)
	{
		bool		added;
		CqFairTenant *t;

		if (set->spilled_at != 0 && !set->ready)
			break;				/* spilled: a load will read the rows */
		t = cq_fair_enter(set, &tkeys[i], weights[i], -INFINITY, &added);
		if (t == NULL)
			break;
		t->confirmed = true;
	}
	LWLockRelease(cq_fair->lock);
	for (int i = 0; i < n; i++)
		cq_fair_note(&cq_fair_joined, &tkeys[i], 0, 0);
}

/*
 * Claims of this database's fair queues load their sets again once this
 * transaction commits: it wrote claimq.queue or claimq.group_weight, or
 * forgot tenants.
 */
void
cq_fair_note_changed(void)
{
	if (cq_fair_usable())
		cq_fair_changed = cq_job_relid();
}

/* Mark the sets of this database and installation stale. */
static void
cq_fair_mark_stale(Oid relid)
{
	HASH_SEQ_STATUS status;
	CqFairSet  *set;

	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, cq_fair_sets);
	while ((set = hash_seq_search(&status)) != NULL)
		if (set->key.dboid == MyDatabaseId && set->key.relid == relid)
			set->stale = true;
	LWLockRelease(cq_fair->lock);
}

/*
 * Free the sets of this database that belong to an earlier installation,
 * or to queues not in fair_ids (the queues that are fair now): the
 * reclaimer's pass.
 */
void
cq_fair_sweep(const int32 *fair_ids, int nfair)
{
	HASH_SEQ_STATUS status;
	CqFairSet  *set;
	Oid			relid;

	if (!cq_fair_usable())
		return;
	relid = cq_job_relid();
	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, cq_fair_sets);
	while ((set = hash_seq_search(&status)) != NULL)
	{
		bool		keep = false;

		if (set->key.dboid != MyDatabaseId)
			continue;
		if (set->key.relid == relid)
			for (int i = 0; i < nfair && !keep; i++)
				keep = fair_ids[i] == set->key.queue_id;
		if (keep)
			continue;
		cq_fair_free_tenants(set);
		hash_search(cq_fair_sets, &set->key, HASH_REMOVE, NULL);
		cq_fair->nsets--;
	}
	LWLockRelease(cq_fair->lock);
}

/*
 * Load a set from the tables, keeping the times of the tenants it has;
 * then it holds the tenants found and those added since the load began.
 * Runs under READ COMMITTED only, with SPI connected: its statements'
 * snapshots are taken after the load began.
 */
static void
cq_fair_load(const CqFairSetKey *setkey)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr level_plan = NULL;
	Oid			argtypes[2] = {INT4OID, INT4OID};
	Datum		values[2];
	bool		isnull;
	double		level = 0;
	CqFairSet  *set;
	uint64		nrows;
	SPITupleTable *rows;
	bool		spilled = false;

	values[0] = Int32GetDatum(setkey->queue_id);
	values[1] = Int32GetDatum(setkey->priority);
	cq_plan(&level_plan,
			"SELECT pg_catalog.max(l.v) FROM claimq.fair_level l"
			" WHERE l.queue_id = $1 AND l.priority = $2", 2, argtypes);
	cq_execute(level_plan, values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		Datum		v = cq_spi_value(0, 1, &isnull);

		if (!isnull)
			level = DatumGetFloat8(v);
	}
	cq_plan(&plan,
			"SELECT s.group_key,"
			"       s.vt + COALESCE((SELECT pg_catalog.sum(d.amount)"
			"                          FROM claimq.fair_charge d"
			"                         WHERE d.queue_id = s.queue_id"
			"                           AND d.priority = s.priority"
			"                           AND d.group_key IS NOT DISTINCT FROM s.group_key), 0),"
			"       COALESCE((SELECT w.weight FROM claimq.group_weight w"
			"                  WHERE w.queue_id = s.queue_id"
			"                    AND w.group_key IS NOT DISTINCT FROM s.group_key), 1)::float8"
			"  FROM claimq.fair_share s"
			" WHERE s.queue_id = $1 AND s.priority = $2",
			2, argtypes);
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	nrows = SPI_processed;
	rows = SPI_tuptable;

	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = cq_fair_set(setkey);
	if (set == NULL || !set->loading)
	{
		/* Swept meanwhile: the next claim tries again. */
		LWLockRelease(cq_fair->lock);
		return;
	}
	set->loading = false;
	if (!set->ready)
		set->level = Max(set->level, level);
	for (uint64 row = 0; row < nrows && !spilled; row++)
	{
		CqFairTenantKey tkey;
		Datum		key;
		bool		keynull;
		Datum		vt;
		bool		vtnull;
		double		weight;
		CqFairTenant *t;
		bool		added;

		key = SPI_getbinval(rows->vals[row], rows->tupdesc, 1, &keynull);
		vt = SPI_getbinval(rows->vals[row], rows->tupdesc, 2, &vtnull);
		weight = DatumGetFloat8(SPI_getbinval(rows->vals[row], rows->tupdesc,
											  3, &isnull));
		if (!cq_fair_tenant_key(&tkey, setkey,
								keynull ? NULL : DatumGetTextPP(key)))
		{
			cq_fair_spill(set);
			spilled = true;
			break;
		}
		t = cq_fair_enter(set, &tkey, weight,
						  vtnull ? -INFINITY : DatumGetFloat8(vt), &added);
		if (t == NULL)
		{
			spilled = true;
			break;
		}
		t->weight = weight;
		t->confirmed = true;
	}
	if (!spilled)
	{
		dlist_mutable_iter iter;

		/* What neither the tables nor an enqueue since hold is gone. */
		dlist_foreach_modify(iter, &set->tenants)
		{
			CqFairTenant *t = dlist_container(CqFairTenant, node, iter.cur);

			if (t->confirmed)
				continue;
			dlist_delete(&t->node);
			hash_search(cq_fair_tenant_table, &t->key, HASH_REMOVE, NULL);
			cq_fair->ntenants--;
			set->ntenants--;
		}
		set->ready = true;
		set->spilled_at = 0;
	}
	LWLockRelease(cq_fair->lock);
}

/*
 * Whether a fair queue's claim at this priority can use shared memory:
 * its set is loaded (or this call loads it).  False sends the claim to
 * the statements: no preload, a set spilled, being loaded by another
 * claim, or stale under REPEATABLE READ (whose snapshot may be older than
 * the changes).
 */
bool
cq_fair_open(int32 queue_id, int32 priority)
{
	CqFairSetKey setkey;
	CqFairSet  *set;
	TimestampTz now = GetCurrentTimestamp();
	bool		load = false;
	bool		ready;

	if (!cq_fair_usable())
		return false;
	cq_fair_set_key(&setkey, queue_id, priority);

	/* Most calls: loaded, nothing changed since. */
	LWLockAcquire(cq_fair->lock, LW_SHARED);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	ready = set != NULL && set->ready && !set->stale;
	LWLockRelease(cq_fair->lock);
	if (ready)
		return true;

	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = cq_fair_set(&setkey);
	if (set == NULL)
	{
		LWLockRelease(cq_fair->lock);
		return false;
	}
	if ((set->stale || !set->ready) && !IsolationUsesXactSnapshot() &&
		(!set->loading ||
		 TimestampDifferenceExceeds(set->loading_at, now, CQ_FAIR_RETRY_MS)) &&
		(set->ready || set->spilled_at == 0 ||
		 TimestampDifferenceExceeds(set->spilled_at, now, CQ_FAIR_RETRY_MS)))
	{
		dlist_iter	iter;

		load = true;
		set->stale = false;
		set->loading = true;
		set->loading_at = now;
		dlist_foreach(iter, &set->tenants)
			dlist_container(CqFairTenant, node, iter.cur)->confirmed = false;
	}
	LWLockRelease(cq_fair->lock);

	if (load)
	{
		PG_TRY();
		{
			cq_fair_load(&setkey);
		}
		PG_CATCH();
		{
			LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
			set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
			if (set != NULL)
			{
				set->loading = false;
				set->stale = true;
			}
			LWLockRelease(cq_fair->lock);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}

	LWLockAcquire(cq_fair->lock, LW_SHARED);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	ready = set != NULL && set->ready;
	LWLockRelease(cq_fair->lock);
	return ready;
}

/* A new claim: tenants it finds empty are passed over by its later picks. */
uint64
cq_fair_claim_begin(void)
{
	return ((uint64) MyProcPid << 32) | (uint32) ++cq_fair_claims;
}

/*
 * Pick the tenants of the set with the least starts (passing over those
 * this claim found empty) and share chunk jobs between them: the smallest
 * tags, tenant i's k-th run of jobs tagged start_i + k x run / weight_i.
 * A run is a quarter of the chunk (at least one job), so that a large
 * claim probes a few tenants rather than one per job: what it may cost
 * the share, two runs between two tenants, is within the contract's bound
 * for a claim of that size ((chunk + 1) / weight, with one claim open).
 * Each tenant's time moves on by its quota at once.  Fills picks[] in
 * order of start; returns how many, and whether they are all the tenants
 * it did not pass over (whole).  0 if the set is not ready any more.
 */
int
cq_fair_pick(int32 queue_id, int32 priority, uint64 claim, int chunk,
			 CqFairPick *picks, bool *whole)
{
	CqFairSetKey setkey;
	CqFairSet  *set;
	CqFairTenant **best;
	int			nbest = 0;
	dlist_iter	iter;
	double	   *next;
	int			seen = 0;
	int			run = Max(1, chunk / 4);
	int			nsel = (chunk + run - 1) / run;

	*whole = false;
	cq_fair_set_key(&setkey, queue_id, priority);
	best = palloc(nsel * sizeof(CqFairTenant *));
	next = palloc(nsel * sizeof(double));
	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	if (set == NULL || !set->ready)
	{
		LWLockRelease(cq_fair->lock);
		return 0;
	}

	/*
	 * The nsel least starts, kept sorted (insertion: nsel <= 100); of equal
	 * starts, the tenant that joined the set first.
	 */
	dlist_foreach(iter, &set->tenants)
	{
		CqFairTenant *t = dlist_container(CqFairTenant, node, iter.cur);
		double		s = Max(t->vt, set->level);
		int			at;

		if (t->passed == claim)
			continue;
		seen++;
		if (nbest == nsel && !(s < Max(best[nbest - 1]->vt, set->level)))
			continue;
		at = nbest < nsel ? nbest++ : nbest - 1;
		while (at > 0 && s < Max(best[at - 1]->vt, set->level))
		{
			best[at] = best[at - 1];
			at--;
		}
		best[at] = t;
	}

	*whole = seen == nbest;

	/* Quotas: the smallest tags, by merging the tenants' sequences. */
	for (int i = 0; i < nbest; i++)
	{
		picks[i].start = Max(best[i]->vt, set->level);
		picks[i].weight = best[i]->weight;
		picks[i].quota = 0;
		picks[i].key = best[i]->key.len < 0 ? NULL :
			cstring_to_text_with_len(best[i]->key.key, best[i]->key.len);
		next[i] = picks[i].start;
	}
	for (int k = 0; k < chunk && nbest > 0; k += run)
	{
		int			m = 0;

		for (int i = 1; i < nbest; i++)
			if (next[i] < next[m])
				m = i;
		picks[m].quota += Min(run, chunk - k);
		next[m] += run / picks[m].weight;
	}
	for (int i = 0; i < nbest; i++)
	{
		CqFairTenant *t = best[i];
		double		amount = picks[i].quota / t->weight;

		t->vt = picks[i].start + amount;
		t->handed += picks[i].quota;
		if (picks[i].quota > 0)
			cq_fair_note(&cq_fair_charges, &t->key, amount, picks[i].quota);
	}
	LWLockRelease(cq_fair->lock);
	pfree(best);
	pfree(next);
	return nbest;
}

/*
 * After a pick: tenant picks[i] gave taken of its quota; found tells
 * whether it had a ready job at all.  Gives back the rest of each quota;
 * a tenant that gave less than its quota is passed over by this claim's
 * later picks, and one with nothing ready starts no earlier than the
 * level (it earns no credit).  The level moves to the least start of the
 * tenants that had jobs (every tenant before it in order had none), or,
 * if the pick was whole (it saw every tenant), to the least of where those
 * are now; if may_raise (a claim's first pick: later ones pass over
 * tenants that were only short of jobs).
 */
void
cq_fair_settle(int32 queue_id, int32 priority, uint64 claim,
			   CqFairPick *picks, int npicks, bool may_raise, bool whole)
{
	CqFairSetKey setkey;
	CqFairSet  *set;
	double		top = -INFINITY;
	double		after = INFINITY;

	cq_fair_set_key(&setkey, queue_id, priority);
	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	for (int i = 0; i < npicks; i++)
	{
		CqFairTenantKey tkey;
		CqFairTenant *t;
		int			unused = picks[i].quota - picks[i].taken;

		if (picks[i].found && top == -INFINITY)
			top = picks[i].start;
		if (picks[i].found)
			after = Min(after, picks[i].start + picks[i].taken / picks[i].weight);
		if (set == NULL || !set->ready)
			continue;
		cq_fair_tenant_key(&tkey, &setkey, picks[i].key);
		t = hash_search(cq_fair_tenant_table, &tkey, HASH_FIND, NULL);
		if (t == NULL)
			continue;
		if (unused > 0)
		{
			double		amount = unused / picks[i].weight;

			t->vt -= amount;
			t->handed -= unused;
			cq_fair_note(&cq_fair_charges, &tkey, -amount, -unused);
			t->passed = claim;
		}
		if (!picks[i].found)
			t->vt = Max(t->vt, set->level);
	}
	if (whole && after != INFINITY)
		top = Max(top, after);
	if (may_raise && set != NULL && set->ready && top > set->level)
		set->level = top;
	LWLockRelease(cq_fair->lock);
}

/*
 * A job handed out outside the share (a claim's fill in the queue's
 * order, once its tenants had no more to give): charged to its tenant.
 */
void
cq_fair_charge(int32 queue_id, int32 priority, text *group_key)
{
	CqFairSetKey setkey;
	CqFairTenantKey tkey;
	CqFairSet  *set;
	CqFairTenant *t;
	bool		added;

	cq_fair_set_key(&setkey, queue_id, priority);
	if (!cq_fair_tenant_key(&tkey, &setkey, group_key))
		return;
	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	if (set != NULL && set->ready)
	{
		/*
		 * A tenant it has not seen (written behind claimq's back): loaded
		 * next.
		 */
		t = cq_fair_enter(set, &tkey, 1, -INFINITY, &added);
		if (added)
			set->stale = true;
		if (t != NULL)
		{
			double		amount = 1.0 / t->weight;

			t->vt = Max(t->vt, set->level) + amount;
			t->handed++;
			cq_fair_note(&cq_fair_charges, &tkey, amount, 1);
		}
	}
	LWLockRelease(cq_fair->lock);
}

/* Take back charges (under the exclusive lock). */
static void
cq_fair_undo(CqFairNote *note)
{
	CqFairTenant *t;

	t = hash_search(cq_fair_tenant_table, &note->key, HASH_FIND, NULL);
	if (t == NULL)
		return;
	t->vt -= note->amount;
	t->handed -= note->jobs;
}

/*
 * The end of a transaction: its tenants confirmed at commit, its charges
 * taken back at abort.
 */
void
cq_fair_xact_event(XactEvent event)
{
	ListCell   *lc;

	if (cq_fair_charges == NIL && cq_fair_joined == NIL &&
		!OidIsValid(cq_fair_changed))
		return;
	if (!cq_fair_usable())
		event = XACT_EVENT_PREPARE; /* nothing to do but forget */
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (cq_fair_joined != NIL)
			{
				LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
				foreach(lc, cq_fair_joined)
				{
					CqFairNote *note = lfirst(lc);
					CqFairSet  *set;
					CqFairTenant *t;
					bool		added;

					set = hash_search(cq_fair_sets, &note->key.set,
									  HASH_FIND, NULL);
					if (set == NULL || (set->spilled_at != 0 && !set->ready))
						continue;
					t = hash_search(cq_fair_tenant_table, &note->key,
									HASH_FIND, NULL);
					if (t == NULL)
					{
						/*
						 * A load missed it and dropped it: back, and its
						 * weight read at the next load.
						 */
						t = cq_fair_enter(set, &note->key, 1, -INFINITY,
										  &added);
						set->stale = true;
					}
					if (t != NULL)
						t->confirmed = true;
				}
				LWLockRelease(cq_fair->lock);
			}
			if (OidIsValid(cq_fair_changed))
				cq_fair_mark_stale(cq_fair_changed);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (cq_fair_charges != NIL)
			{
				LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
				foreach(lc, cq_fair_charges)
					cq_fair_undo(lfirst(lc));
				LWLockRelease(cq_fair->lock);
			}
			break;
		default:
			break;
	}
	cq_fair_charges = NIL;
	cq_fair_joined = NIL;
	cq_fair_changed = InvalidOid;
}

/* The end of a subtransaction: its notes go to the parent, or are undone. */
void
cq_fair_subxact_event(SubXactEvent event)
{
	int			level = GetCurrentTransactionNestLevel();
	List	   *lists[2] = {cq_fair_charges, cq_fair_joined};

	if (event != SUBXACT_EVENT_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB)
		return;
	for (int l = 0; l < 2; l++)
	{
		List	   *kept = NIL;
		ListCell   *lc;
		bool		locked = false;
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

		foreach(lc, lists[l])
		{
			CqFairNote *note = lfirst(lc);

			if (note->level >= level)
			{
				if (event == SUBXACT_EVENT_ABORT_SUB)
				{
					if (l == 0 && cq_fair_usable())
					{
						if (!locked)
							LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
						locked = true;
						cq_fair_undo(note);
					}
					continue;
				}
				note->level = level - 1;
			}
			kept = lappend(kept, note);
		}
		if (locked)
			LWLockRelease(cq_fair->lock);
		MemoryContextSwitchTo(old);
		lists[l] = kept;
	}
	cq_fair_charges = lists[0];
	cq_fair_joined = lists[1];
}

/*
 * What shared memory holds of the tenants of this database's fair queues:
 * (queue_id, priority, group_key, handed) per tenant, for metrics().
 */
int
cq_fair_handed(CqFairHanded **out)
{
	HASH_SEQ_STATUS status;
	CqFairTenant *t;
	int			n = 0;
	int			max;
	Oid			relid = cq_job_relid();

	*out = NULL;
	if (!cq_fair_usable())
		return 0;
	LWLockAcquire(cq_fair->lock, LW_SHARED);
	max = cq_fair->ntenants;
	*out = palloc(Max(max, 1) * sizeof(CqFairHanded));
	hash_seq_init(&status, cq_fair_tenant_table);
	while ((t = hash_seq_search(&status)) != NULL)
	{
		if (t->key.set.dboid != MyDatabaseId || t->key.set.relid != relid ||
			n >= max)
			continue;
		(*out)[n].queue_id = t->key.set.queue_id;
		(*out)[n].priority = t->key.set.priority;
		(*out)[n].len = t->key.len;
		memcpy((*out)[n].key, t->key.key, Max(t->key.len, 0));
		(*out)[n].handed = t->handed;
		n++;
	}
	LWLockRelease(cq_fair->lock);
	return n;
}

PG_FUNCTION_INFO_V1(claimq_fair_changed);
PG_FUNCTION_INFO_V1(claimq_fair_handed);

/*
 * claimq.fair_changed(): the trigger of claimq.group_weight (after any
 * write): fair queues' claims load their tenants and weights again once
 * the transaction commits.
 */
Datum
claimq_fair_changed(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("claimq.fair_changed() is a trigger of claimq.group_weight")));
	cq_fair_note_changed();
	return PointerGetDatum(NULL);
}

/*
 * fair_handed() returns table(queue_id, priority, group_key, handed): the
 * jobs handed to each tenant of this database's fair queues that shared
 * memory holds (since the tenant joined its set), for metrics().
 */
Datum
claimq_fair_handed(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CqFairHanded *rows;
	int			n;

	InitMaterializedSRF(fcinfo, 0);
	n = cq_fair_handed(&rows);
	for (int i = 0; i < n; i++)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		values[0] = Int32GetDatum(rows[i].queue_id);
		values[1] = Int32GetDatum(rows[i].priority);
		if (rows[i].len < 0)
			nulls[2] = true;
		else
			values[2] = PointerGetDatum(cstring_to_text_with_len(rows[i].key,
																 rows[i].len));
		values[3] = Int64GetDatum(rows[i].handed);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
