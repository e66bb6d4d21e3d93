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
 * A set per database, installation (the OID of claimq.job) and queue (at
 * priority 0, the one priority shared memory serves), holding every
 * tenant with live jobs there: its key, weight, virtual time and the jobs
 * handed to it.  The set is loaded from the tables (a tenant's row and
 * unfolded charges, its weight, the level), in a snapshot taken then
 * whatever the isolation level, by the first claim that needs it, and
 * loaded again, keeping the times it has, when the tenants or weights may
 * have changed: at the commit of a write of claimq.queue (trigger
 * queue_changed) or claimq.group_weight (trigger group_weight_changed),
 * and after a reclaimer's pass that forgot tenants or saw prepared
 * transactions in the database (now or at its pass before).  A load
 * removes the tenants that it did not find, that nobody added since it
 * began (confirmed), and whose adding transaction is not still open (or
 * prepared).  fair_join, by which every way to a pending job makes sure of
 * its tenant's row, adds the tenant at once (its own transaction's claims
 * must see it) and confirms it at its commit, so that a load whose
 * snapshot missed the row cannot drop it for good.
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
 * that are gone, no longer fair or have priorities are freed by the
 * reclaimer's pass (cq_fair_sweep), those of dropped databases by the
 * launcher (cq_fair_free_dropped).
 *
 * One LWLock guards the tables; it is held for memory work only (a pass
 * over one set's tenants at most, and a load's look at whether a joining
 * transaction is still open), never across a statement or a commit, and
 * nothing under it allocates memory or can fail: what a charge needs in
 * backend memory is made before the lock is taken.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
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
	bool		loading;		/* load load_gen is under way (since
								 * loading_at) */
	uint64		load_gen;
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
	uint64		incarnation;	/* unique to this entry */
	double		vt;				/* the start of its next job */
	double		weight;
	int64		handed;			/* jobs handed to it since it was added */
	uint64		passed;			/* the claim that found it short */
	TransactionId joined_xid;	/* the transaction that added it, until it
								 * commits */
	bool		confirmed;		/* found or added since its set's last load */
} CqFairTenant;

typedef struct CqFairShared
{
	LWLock	   *lock;
	int			ntenants;
	int			nsets;
	pg_atomic_uint64 next_id;	/* claims and tenants' incarnations */
} CqFairShared;

int			cq_fair_tenants = 4096;

static CqFairShared *cq_fair = NULL;
static HTAB *cq_fair_sets = NULL;
static HTAB *cq_fair_tenant_table = NULL;

/*
 * What this backend's transaction did, in TopTransactionContext: notes
 * appended before the lock is taken (a zero amount and incarnation 0,
 * which no tenant has, until filled in under it).  Each list's notes are
 * in order of nesting level, the deepest last.
 */
typedef struct CqFairNote
{
	CqFairTenantKey key;
	uint64		incarnation;	/* the tenant's, when charged or added */
	double		amount;			/* charged: jobs / weight */
	int64		jobs;
	int			level;			/* transaction nesting level */
} CqFairNote;

static List *cq_fair_charges = NIL;
static List *cq_fair_joined = NIL;
static Oid	cq_fair_changed = InvalidOid;	/* claimq.job, if tenants or
											 * weights may have changed */

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
		pg_atomic_init_u64(&cq_fair->next_id, 1);
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
 * if it is longer than CQ_FAIR_KEY_MAX bytes, which only a row written
 * behind claimq's back can be.
 */
static bool
cq_fair_tenant_key_ok(CqFairTenantKey *key, const CqFairSetKey *set,
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

/* The same, a longer key an error. */
static void
cq_fair_tenant_key(CqFairTenantKey *key, const CqFairSetKey *set,
				   text *group_key)
{
	if (!cq_fair_tenant_key_ok(key, set, group_key))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a fair queue's group key must be at most %d bytes long",
						CQ_FAIR_KEY_MAX)));
}

/* Tenants' keys in an order of their own, to find the same twice. */
static int
cq_fair_key_order(const void *a, const void *b)
{
	const CqFairTenantKey *ka = a;
	const CqFairTenantKey *kb = b;

	if (ka->len != kb->len)
		return ka->len < kb->len ? -1 : 1;
	return memcmp(ka->key, kb->key, Max(ka->len, 0));
}

/*
 * Sort n tenants' keys and keep each once, with how many times it came in
 * counts (if not NULL).  Returns how many are kept.
 */
static int
cq_fair_unique(CqFairTenantKey *keys, int n, int *counts)
{
	int			kept = 0;

	if (n > 1)
		qsort(keys, n, sizeof(CqFairTenantKey), cq_fair_key_order);
	for (int i = 0; i < n; i++)
	{
		if (kept == 0 || cq_fair_key_order(&keys[i], &keys[kept - 1]) != 0)
		{
			keys[kept] = keys[i];
			if (counts != NULL)
				counts[kept] = 0;
			kept++;
		}
		if (counts != NULL)
			counts[kept - 1]++;
	}
	return kept;
}

/* Remove a tenant from its set (under the exclusive lock). */
static void
cq_fair_remove(CqFairSet *set, CqFairTenant *t)
{
	dlist_delete(&t->node);
	hash_search(cq_fair_tenant_table, &t->key, HASH_REMOVE, NULL);
	cq_fair->ntenants--;
	set->ntenants--;
}

/* Free a set's tenants (under the exclusive lock). */
static void
cq_fair_free_tenants(CqFairSet *set)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &set->tenants)
		cq_fair_remove(set, dlist_container(CqFairTenant, node, iter.cur));
}

/* Spill a set that has no room (under the exclusive lock). */
static void
cq_fair_spill(CqFairSet *set)
{
	cq_fair_free_tenants(set);
	set->ready = false;
	set->spilled_at = GetCurrentTimestamp();
}

/* Whether a set is spilled with no load under way: nothing to add to. */
static bool
cq_fair_spilled(const CqFairSet *set)
{
	return !set->ready && set->spilled_at != 0 && !set->loading;
}

/*
 * Find or add a tenant of a set (under the exclusive lock).  NULL if the
 * table is full, which spills the set.
 */
static CqFairTenant *
cq_fair_enter(CqFairSet *set, const CqFairTenantKey *key, double weight,
			  bool *added)
{
	CqFairTenant *t;
	bool		found;

	*added = false;
	t = hash_search(cq_fair_tenant_table, key, HASH_FIND, NULL);
	if (t != NULL)
		return t;
	if (cq_fair->ntenants >= cq_fair_tenants ||
		(t = hash_search(cq_fair_tenant_table, key, HASH_ENTER_NULL,
						 &found)) == NULL)
	{
		cq_fair_spill(set);
		return NULL;
	}
	cq_fair->ntenants++;
	t->incarnation = pg_atomic_fetch_add_u64(&cq_fair->next_id, 1);
	t->vt = -INFINITY;			/* at the level */
	t->weight = weight;
	t->handed = 0;
	t->passed = 0;
	t->joined_xid = InvalidTransactionId;
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
	if (cq_fair->nsets >= cq_fair_sets_max() ||
		(set = hash_search(cq_fair_sets, key, HASH_ENTER_NULL, &found)) == NULL)
		return NULL;
	cq_fair->nsets++;
	set->ready = false;
	set->stale = true;
	set->loading = false;
	set->load_gen = 0;
	set->loading_at = 0;
	set->spilled_at = 0;
	set->level = 0;
	set->ntenants = 0;
	dlist_init(&set->tenants);
	return set;
}

/* Free a set and its tenants (under the exclusive lock). */
static void
cq_fair_free_set(CqFairSet *set)
{
	cq_fair_free_tenants(set);
	hash_search(cq_fair_sets, &set->key, HASH_REMOVE, NULL);
	cq_fair->nsets--;
}

/*
 * n empty notes at the end of a list, for filling in under the lock: no
 * memory is allocated there, and whatever was charged has its note.
 */
static CqFairNote **
cq_fair_notes(List **list, int n)
{
	CqFairNote **notes = palloc(Max(n, 1) * sizeof(CqFairNote *));
	int			level = GetCurrentTransactionNestLevel();
	MemoryContext old;

	/* The (sub)transaction's own memory: an abort of it frees them. */
	for (int i = 0; i < n; i++)
	{
		notes[i] = MemoryContextAllocZero(CurTransactionContext,
										  sizeof(CqFairNote));
		notes[i]->level = level;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	for (int i = 0; i < n; i++)
		*list = lappend(*list, notes[i]);
	MemoryContextSwitchTo(old);
	return notes;
}

/* Charge a tenant (under the exclusive lock), noting it in note. */
static void
cq_fair_charge_one(CqFairTenant *t, double amount, int64 jobs,
				   CqFairNote *note)
{
	t->vt += amount;
	t->handed += jobs;
	note->key = t->key;
	note->incarnation = t->incarnation;
	note->amount += amount;
	note->jobs += jobs;
}

PG_FUNCTION_INFO_V1(claimq_fair_joined);

/*
 * fair_joined(queue_id, priority, group_keys) returns void: fair_join made
 * sure of these tenants' rows at this priority of a fair queue (a NULL
 * element: the jobs without a group key).  Each is in the queue's set from
 * now, and confirmed when the transaction commits.  A new tenant's weight
 * is read here, once.  Only priority 0 has sets.
 */
Datum
claimq_fair_joined(PG_FUNCTION_ARGS)
{
	int32		queue_id = PG_GETARG_INT32(0);
	int32		priority = PG_GETARG_INT32(1);
	CqFairSetKey setkey;
	Datum	   *elems;
	bool	   *elemnulls;
	int			n;
	CqFairTenantKey *tkeys;
	double	   *weights;
	bool	   *missing;
	int			nmissing = 0;
	CqFairSet  *set;
	CqFairNote **notes;

	if (!cq_fair_usable() || priority != 0 || PG_ARGISNULL(2))
		PG_RETURN_VOID();
	cq_fair_set_key(&setkey, queue_id, priority);
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(2), TEXTOID, -1, false,
					  TYPALIGN_INT, &elems, &elemnulls, &n);
	tkeys = palloc(Max(n, 1) * sizeof(CqFairTenantKey));
	for (int i = 0; i < n; i++)
		cq_fair_tenant_key(&tkeys[i], &setkey,
						   elemnulls[i] ? NULL : DatumGetTextPP(elems[i]));

	/* Each tenant once (enqueue_many names one per job). */
	n = cq_fair_unique(tkeys, n, NULL);
	weights = palloc(Max(n, 1) * sizeof(double));
	missing = palloc0(Max(n, 1) * sizeof(bool));

	/* Which are new to the set. */
	LWLockAcquire(cq_fair->lock, LW_SHARED);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	for (int i = 0; i < n; i++)
	{
		weights[i] = 1;
		missing[i] = (set == NULL || !cq_fair_spilled(set)) &&
			hash_search(cq_fair_tenant_table, &tkeys[i], HASH_FIND, NULL) == NULL;
		nmissing += missing[i];
	}
	LWLockRelease(cq_fair->lock);

	/* The new ones' weights, read before the lock is taken again. */
	if (nmissing > 0)
	{
		SPI_connect();
		for (int i = 0; i < n; i++)
		{
			static SPIPlanPtr plan = NULL;
			Oid			argtypes[2] = {INT4OID, TEXTOID};
			Datum		values[2];
			char		nulls[2] = "  ";
			bool		isnull;

			if (!missing[i])
				continue;
			cq_plan(&plan,
					"SELECT w.weight::float8 FROM claimq.group_weight w"
					" WHERE w.queue_id = $1 AND w.group_key IS NOT DISTINCT FROM $2",
					2, argtypes);
			values[0] = Int32GetDatum(queue_id);
			values[1] = tkeys[i].len < 0 ? (Datum) 0 :
				PointerGetDatum(cstring_to_text_with_len(tkeys[i].key,
														 tkeys[i].len));
			nulls[1] = tkeys[i].len < 0 ? 'n' : ' ';
			cq_execute(plan, values, nulls, SPI_OK_SELECT);
			if (SPI_processed > 0)
				weights[i] = DatumGetFloat8(cq_spi_value(0, 1, &isnull));
		}
		SPI_finish();
	}

	/*
	 * Every tenant in the set, held while this transaction is open (a load
	 * that does not see its row yet keeps it), and confirmed at its commit.
	 */
	notes = cq_fair_notes(&cq_fair_joined, n);
	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = cq_fair_set(&setkey);
	for (int i = 0; set != NULL && i < n; i++)
	{
		bool		added;
		CqFairTenant *t;

		notes[i]->key = tkeys[i];
		notes[i]->incarnation = 1;	/* a tenant to confirm */
		if (cq_fair_spilled(set))
			continue;			/* a load will read the row */
		t = cq_fair_enter(set, &tkeys[i], weights[i], &added);
		if (t == NULL)
			continue;
		t->confirmed = true;
		t->joined_xid = GetTopTransactionIdIfAny();
	}
	LWLockRelease(cq_fair->lock);
	PG_RETURN_VOID();
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
 * or to queues not in fair_ids (the fair queues without priorities): the
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
		if (!keep)
			cq_fair_free_set(set);
	}
	LWLockRelease(cq_fair->lock);
}

/*
 * Free the sets of databases that no longer exist: the launcher's pass,
 * inside a transaction (it reads pg_database), without the lock.
 */
void
cq_fair_free_dropped(void)
{
	HASH_SEQ_STATUS status;
	CqFairSet  *set;
	Oid		   *dboids;
	int			ndbs = 0;
	int			ndropped;
	int			room = cq_fair_sets_max();

	if (!cq_fair_usable())
		return;
	dboids = palloc(sizeof(Oid) * room);
	LWLockAcquire(cq_fair->lock, LW_SHARED);
	hash_seq_init(&status, cq_fair_sets);
	while ((set = hash_seq_search(&status)) != NULL)
		cq_note_database(dboids, &ndbs, room, set->key.dboid);
	LWLockRelease(cq_fair->lock);

	ndropped = cq_dropped_databases(dboids, ndbs);
	if (ndropped > 0)
	{
		LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
		hash_seq_init(&status, cq_fair_sets);
		while ((set = hash_seq_search(&status)) != NULL)
			for (int i = 0; i < ndropped; i++)
				if (dboids[i] == set->key.dboid)
				{
					cq_fair_free_set(set);
					break;
				}
		LWLockRelease(cq_fair->lock);
	}
	pfree(dboids);
}

/* A load's view of one row of claimq.fair_share. */
typedef struct CqFairRow
{
	CqFairTenantKey key;
	bool		has_vt;
	double		vt;
	double		weight;
} CqFairRow;

/* A statement of the load, in a snapshot of its own. */
static void
cq_fair_load_execute(SPIPlanPtr plan, Datum *values)
{
	int			rc;

	rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, true, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_snapshot returned %s",
			 SPI_result_code_string(rc));
}

/*
 * Load a set from the tables (load gen), keeping the times of the tenants
 * it has; then it holds the tenants found, those added or confirmed since
 * the load began, and those whose adding transaction is still open.  With
 * SPI connected; its statements' snapshot is taken after the load began.
 * Another load begun since (this one took too long) or the set's removal
 * makes it do nothing.
 */
static void
cq_fair_load(const CqFairSetKey *setkey, uint64 gen)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr level_plan = NULL;
	Oid			argtypes[2] = {INT4OID, INT4OID};
	Datum		values[2];
	bool		isnull;
	double		level = 0;
	CqFairSet  *set;
	int			nrows;
	CqFairRow  *rows;
	bool		spilled = false;
	bool		too_long = false;
	dlist_mutable_iter iter;

	values[0] = Int32GetDatum(setkey->queue_id);
	values[1] = Int32GetDatum(setkey->priority);
	cq_plan(&level_plan,
			"SELECT pg_catalog.max(l.v) FROM claimq.fair_level l"
			" WHERE l.queue_id = $1 AND l.priority = $2", 2, argtypes);
	cq_fair_load_execute(level_plan, values);
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
	cq_fair_load_execute(plan, values);
	nrows = (int) SPI_processed;
	rows = palloc(Max(nrows, 1) * sizeof(CqFairRow));
	for (int row = 0; row < nrows; row++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[row];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		Datum		key = SPI_getbinval(tuple, desc, 1, &isnull);
		Datum		vt;

		if (!cq_fair_tenant_key_ok(&rows[row].key, setkey,
								   isnull ? NULL : DatumGetTextPP(key)))
			too_long = true;
		vt = SPI_getbinval(tuple, desc, 2, &isnull);
		rows[row].has_vt = !isnull;
		rows[row].vt = isnull ? 0 : DatumGetFloat8(vt);
		rows[row].weight = DatumGetFloat8(SPI_getbinval(tuple, desc, 3,
														&isnull));
	}

	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = hash_search(cq_fair_sets, setkey, HASH_FIND, NULL);
	if (set == NULL || !set->loading || set->load_gen != gen)
	{
		LWLockRelease(cq_fair->lock);
		return;
	}
	set->loading = false;
	if (too_long)
	{
		/* The statements serve a tenant whose key it cannot keep. */
		cq_fair_spill(set);
		LWLockRelease(cq_fair->lock);
		return;
	}
	if (!set->ready)
		set->level = Max(set->level, level);
	for (int row = 0; row < nrows; row++)
	{
		CqFairTenant *t;
		bool		added;

		t = cq_fair_enter(set, &rows[row].key, rows[row].weight, &added);
		if (t == NULL)
		{
			spilled = true;
			break;
		}
		if (added && rows[row].has_vt)
			t->vt = rows[row].vt;
		t->weight = rows[row].weight;
		t->confirmed = true;
	}
	if (!spilled)
	{
		/* What neither the tables nor an open transaction hold is gone. */
		dlist_foreach_modify(iter, &set->tenants)
		{
			CqFairTenant *t = dlist_container(CqFairTenant, node, iter.cur);

			if (t->confirmed)
				continue;
			if (TransactionIdIsValid(t->joined_xid) &&
				TransactionIdIsInProgress(t->joined_xid))
				continue;
			cq_fair_remove(set, t);
		}
		set->ready = true;
		set->spilled_at = 0;
	}
	LWLockRelease(cq_fair->lock);
}

/*
 * Whether a fair queue's claim at this priority can use shared memory:
 * its set is loaded (or this call loads it).  False sends the claim to
 * the statements: no preload, no room for a set, a set spilled or being
 * loaded for the first time by another claim.  With SPI connected.
 */
bool
cq_fair_open(int32 queue_id, int32 priority)
{
	CqFairSetKey setkey;
	CqFairSet  *set;
	TimestampTz now = GetCurrentTimestamp();
	uint64		gen = 0;
	bool		ready;

	if (!cq_fair_usable() || priority != 0)
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
	if ((set->stale || !set->ready) &&
		(!set->loading ||
		 TimestampDifferenceExceeds(set->loading_at, now, CQ_FAIR_RETRY_MS)) &&
		(set->ready || set->spilled_at == 0 ||
		 TimestampDifferenceExceeds(set->spilled_at, now, CQ_FAIR_RETRY_MS)))
	{
		dlist_iter	iter;

		set->stale = false;
		set->loading = true;
		set->loading_at = now;
		gen = ++set->load_gen;
		dlist_foreach(iter, &set->tenants)
			dlist_container(CqFairTenant, node, iter.cur)->confirmed = false;
	}
	LWLockRelease(cq_fair->lock);

	/*
	 * A load that fails leaves the set loading: the claims go on with what it
	 * holds, and one of them loads it again a moment later.
	 */
	if (gen != 0)
		cq_fair_load(&setkey, gen);

	LWLockAcquire(cq_fair->lock, LW_SHARED);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	ready = set != NULL && set->ready;
	LWLockRelease(cq_fair->lock);
	return ready;
}

/* A new claim: tenants it finds short are passed over by its later picks. */
uint64
cq_fair_claim_begin(void)
{
	return pg_atomic_fetch_add_u64(&cq_fair->next_id, 1);
}

/*
 * Pick the tenants of the set with the least starts (passing over those
 * this claim found short) and share chunk jobs between them: the smallest
 * tags, tenant i's k-th run of jobs tagged start_i + k x run / weight_i.
 * A run is a quarter of the chunk (at least one job), so that a large
 * claim probes a few tenants rather than one per job: what runs add to
 * the gap between two tenants' shares, two runs, is at most half of the
 * claim (the bound allows the claim plus one).  Runs of one job (fine)
 * once a claim has met tenants with nothing ready, so that it passes
 * over many of them per pick.  Of equal starts, the
 * tenant that joined the set first comes first.  Each tenant's time
 * moves on by its quota at once.  Fills picks[] in order of start;
 * returns how many, and whether they are all the tenants it did not pass
 * over (whole); -1 if the set is not ready any more.
 */
int
cq_fair_pick(int32 queue_id, int32 priority, uint64 claim, int chunk,
			 bool fine, CqFairPick *picks, bool *whole)
{
	CqFairSetKey setkey;
	CqFairSet  *set;
	CqFairTenant **best;
	int			nbest = 0;
	dlist_iter	iter;
	double	   *next;
	int			seen = 0;
	int			run = fine ? 1 : Max(1, chunk / 4);
	int			nsel = (chunk + run - 1) / run;
	CqFairNote **notes;

	*whole = false;
	cq_fair_set_key(&setkey, queue_id, priority);
	best = palloc(nsel * sizeof(CqFairTenant *));
	next = palloc(nsel * sizeof(double));
	for (int i = 0; i < nsel; i++)
		picks[i].key = palloc(VARHDRSZ + CQ_FAIR_KEY_MAX);
	notes = cq_fair_notes(&cq_fair_charges, nsel);

	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	if (set == NULL || !set->ready)
	{
		LWLockRelease(cq_fair->lock);
		return -1;
	}

	/* The nsel least starts, kept sorted (insertion: nsel <= 100). */
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
		picks[i].incarnation = best[i]->incarnation;
		picks[i].quota = 0;
		if (best[i]->key.len < 0)
			picks[i].key = NULL;
		else
		{
			SET_VARSIZE(picks[i].key, VARHDRSZ + best[i]->key.len);
			memcpy(VARDATA(picks[i].key), best[i]->key.key, best[i]->key.len);
		}
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
		best[i]->vt = picks[i].start;
		cq_fair_charge_one(best[i], picks[i].quota / best[i]->weight,
						   picks[i].quota, notes[i]);
	}
	LWLockRelease(cq_fair->lock);
	return nbest;
}

/*
 * After a pick: tenant picks[i] gave taken of its quota; found tells
 * whether it had a ready job at all.  Gives back the rest of each quota;
 * a tenant that gave less than its quota is passed over by this claim's
 * later picks, and one with nothing ready starts no earlier than the
 * level (it earns no credit).  If may_raise (no earlier pick of the
 * claim met a tenant with jobs: every tenant it passed over had none),
 * the level moves to the least start of the tenants that had jobs (every
 * tenant before it had none), or, if the pick was whole, to the least of
 * where those and the tenants that got no quota stand now.
 */
void
cq_fair_settle(int32 queue_id, int32 priority, uint64 claim,
			   CqFairPick *picks, int npicks, bool may_raise, bool whole)
{
	CqFairSetKey setkey;
	CqFairSet  *set;
	double		top = -INFINITY;
	double		after = INFINITY;
	CqFairTenantKey *tkeys = palloc(Max(npicks, 1) * sizeof(CqFairTenantKey));
	CqFairNote **notes = cq_fair_notes(&cq_fair_charges, npicks);

	cq_fair_set_key(&setkey, queue_id, priority);
	for (int i = 0; i < npicks; i++)
		cq_fair_tenant_key(&tkeys[i], &setkey, picks[i].key);
	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	for (int i = 0; i < npicks; i++)
	{
		CqFairTenant *t;
		int			unused = picks[i].quota - picks[i].taken;

		if (picks[i].found && top == -INFINITY)
			top = picks[i].start;
		if (picks[i].found || picks[i].quota == 0)
			after = Min(after, picks[i].start + picks[i].taken / picks[i].weight);
		if (set == NULL || !set->ready)
			continue;
		t = hash_search(cq_fair_tenant_table, &tkeys[i], HASH_FIND, NULL);
		if (t == NULL || t->incarnation != picks[i].incarnation)
			continue;
		if (unused > 0)
		{
			cq_fair_charge_one(t, -unused / picks[i].weight, -unused, notes[i]);
			t->passed = claim;
		}
		if (!picks[i].found && picks[i].quota > 0)
			t->vt = Max(t->vt, set->level);
	}
	if (whole && after != INFINITY)
		top = Max(top, after);
	if (may_raise && set != NULL && set->ready && top > set->level)
		set->level = top;
	LWLockRelease(cq_fair->lock);
}

/*
 * Jobs handed out outside the share (a claim's fill in the queue's order,
 * once its tenants had no more to give), one key per job (NULL: the jobs
 * without a group key): each tenant charged for its jobs at once.
 */
void
cq_fair_charge(int32 queue_id, int32 priority, text **keys, int n)
{
	CqFairSetKey setkey;
	CqFairTenantKey *tkeys = palloc(Max(n, 1) * sizeof(CqFairTenantKey));
	int		   *counts = palloc(Max(n, 1) * sizeof(int));
	CqFairSet  *set;
	CqFairNote **notes;

	cq_fair_set_key(&setkey, queue_id, priority);
	for (int i = 0; i < n; i++)
		cq_fair_tenant_key(&tkeys[i], &setkey, keys[i]);
	n = cq_fair_unique(tkeys, n, counts);
	notes = cq_fair_notes(&cq_fair_charges, n);
	LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
	set = hash_search(cq_fair_sets, &setkey, HASH_FIND, NULL);
	for (int i = 0; set != NULL && set->ready && i < n; i++)
	{
		CqFairTenant *t;
		bool		added;

		/* A tenant it has not seen (written behind claimq's back): read next. */
		t = cq_fair_enter(set, &tkeys[i], 1, &added);
		if (t == NULL)
			break;
		if (added)
			set->stale = true;
		t->vt = Max(t->vt, set->level);
		cq_fair_charge_one(t, counts[i] / t->weight, counts[i], notes[i]);
	}
	LWLockRelease(cq_fair->lock);
}

/* Take back a charge (under the exclusive lock). */
static void
cq_fair_undo(CqFairNote *note)
{
	CqFairTenant *t;

	if (note->jobs == 0)
		return;
	t = hash_search(cq_fair_tenant_table, &note->key, HASH_FIND, NULL);
	if (t == NULL || t->incarnation != note->incarnation)
		return;
	t->vt -= note->amount;
	t->handed -= note->jobs;
}

/*
 * The end of a transaction: its tenants confirmed at commit, its charges
 * taken back at abort.  A prepared transaction's are forgotten (its
 * tenants stay while it is open; see cq_fair_load).
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

					if (note->incarnation == 0)
						continue;
					set = hash_search(cq_fair_sets, &note->key.set,
									  HASH_FIND, NULL);
					if (set == NULL || cq_fair_spilled(set))
						continue;	/* a load will read the row */
					t = hash_search(cq_fair_tenant_table, &note->key,
									HASH_FIND, NULL);
					if (t == NULL)
					{
						/*
						 * A load missed it and dropped it: back, and its
						 * weight read at the next load.
						 */
						t = cq_fair_enter(set, &note->key, 1, &added);
						set->stale = true;
					}
					if (t != NULL)
					{
						t->confirmed = true;
						t->joined_xid = InvalidTransactionId;
					}
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

/*
 * The end of a subtransaction: its notes, the last of each list, go to
 * the parent, or are undone.
 */
void
cq_fair_subxact_event(SubXactEvent event)
{
	int			level = GetCurrentTransactionNestLevel();
	List	  **lists[2] = {&cq_fair_charges, &cq_fair_joined};

	if (event != SUBXACT_EVENT_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB)
		return;
	for (int l = 0; l < 2; l++)
	{
		List	   *list = *lists[l];
		int			first = list_length(list);

		while (first > 0 &&
			   ((CqFairNote *) list_nth(list, first - 1))->level >= level)
			first--;
		if (first == list_length(list))
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
		{
			for (int i = first; i < list_length(list); i++)
				((CqFairNote *) list_nth(list, i))->level = level - 1;
			continue;
		}
		if (l == 0 && cq_fair_usable())
		{
			LWLockAcquire(cq_fair->lock, LW_EXCLUSIVE);
			for (int i = first; i < list_length(list); i++)
				cq_fair_undo(list_nth(list, i));
			LWLockRelease(cq_fair->lock);
		}
		*lists[l] = list_truncate(list, first);
	}
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
	/* Room for the tenants there are now; any added meanwhile wait a scrape. */
	LWLockAcquire(cq_fair->lock, LW_SHARED);
	max = cq_fair->ntenants;
	LWLockRelease(cq_fair->lock);
	*out = palloc(Max(max, 1) * sizeof(CqFairHanded));
	LWLockAcquire(cq_fair->lock, LW_SHARED);
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
