/*-------------------------------------------------------------------------
 *
 * claim.c
 *		Working: claim(), the transition pending -> claimed (or straight to
 *		running with start => true).
 *
 * Ready jobs are taken highest priority first, then earliest run_at, then
 * lowest id, from the partial index over pending jobs, under FOR UPDATE
 * SKIP LOCKED, each locked row claimed in the same pass.  Jobs that group
 * limits hold back are not in the index at all, and the queue-wide limits
 * cut max_jobs down before the claim runs (limits.c).
 *
 * A plain queue (every pending job at priority 0, not fair, on one
 * server: most queues) is claimed without a statement, through the table's
 * and the index's access methods (cq_claim_plain): one range of the index
 * from the queue's floor, each row locked and updated as the executor
 * would, with what a statement would check and write.  Building and
 * starting a plan for a statement on every call was a fifth of the
 * instructions of a claim-and-complete transaction of one job.
 *
 * A fair queue's claim, with its jobs all at priority 0 and its tenants'
 * shares in shared memory (fair.c), takes the same path (cq_claim_fair):
 * rounds of tenants picked there, each tenant's first jobs read from the
 * group due index, then, if the batch is not full, the queue's order.
 *
 * Any other queue's claim is one statement.  A scheduled job (run_at in
 * the future) sits in the index behind the ready ones of its priority, so
 * rather than filter them out row by row the statement visits the distinct
 * priorities that have pending jobs (a loose index scan, one probe each)
 * and reads only the ready range of each.  The cost is O(batch +
 * priorities in use), whatever else the table holds.  The probes walk the
 * index backwards, lowest priority first, so that each lands on the newest
 * entries of a priority: the oldest ones are where claimed jobs leave dead
 * index entries until VACUUM, and a forward probe would step over all of
 * them on every call (the pick itself starts there anyway).  The picked
 * rows are updated through their ctid, which the row lock keeps current,
 * rather than looked up again by id.  A fair queue's statement (the
 * portable edition's, a server's without the preload, or one whose
 * tenants are not in shared memory) shares the batch between its tenants
 * with their shares in tables (sql/fair-share.sql).
 *
 * Every claimed job gets a token of its own (token.c), which later calls
 * about the job must present (see settle.c); a caller that mixes up two
 * ids of one batch is refused rather than settling the wrong job.
 *
 * With wait > 0 and nothing claimable, the call sleeps on its latch and
 * tries again, until it gets jobs or the wait is over.  Each try runs in a
 * subtransaction, rolled back when it claimed nothing: a claim can
 * lock a row without claiming it (its snapshot saw the job pending, another
 * claim took it and committed before the lock, and under READ COMMITTED
 * the lock lands on the claimed version, whose recheck fails), and that
 * lock must not outlive the try, or the job's holder could not complete
 * it while this call sleeps.  With the preload,
 * a commit that makes jobs of the queue ready sets the latch (wakeup.c),
 * and the call looks again at least every CQ_WAKE_RECHECK_MS anyway (for
 * scheduled jobs coming due, and for jobs enqueued or released by a
 * transaction committed with COMMIT PREPARED, which wakes nobody);
 * without, the call polls.  Under READ COMMITTED each try sees jobs
 * committed meanwhile; under REPEATABLE READ it cannot, so waiting there
 * only delays the empty answer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/nbtree.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "catalog/pg_class.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_claim);

/*
 * The attribute numbers of the columns of claimq.job that a claim reads or
 * sets (an updated install's columns are not in the order of a fresh one).
 */
typedef struct CqJobColumns
{
	AttrNumber	job_id;
	AttrNumber	token;
	AttrNumber	payload;
	AttrNumber	attempts;
	AttrNumber	priority;
	AttrNumber	enqueued_at;
	AttrNumber	expires_at;
	AttrNumber	headers;
	AttrNumber	run_at;
	AttrNumber	state;
	AttrNumber	worker;
	AttrNumber	claimed_at;
	AttrNumber	started_at;
	AttrNumber	held;
	AttrNumber	group_key;
} CqJobColumns;

#define CQ_JOB_COLUMN(col, offset) (*(AttrNumber *) ((char *) (col) + (offset)))

/* The columns a claim sets. */
static const size_t cq_claim_sets[] = {
	offsetof(CqJobColumns, state), offsetof(CqJobColumns, attempts),
	offsetof(CqJobColumns, token), offsetof(CqJobColumns, worker),
	offsetof(CqJobColumns, claimed_at), offsetof(CqJobColumns, expires_at),
	offsetof(CqJobColumns, started_at)
};

/* What it returns: claim()'s columns, then run_at. */
static const size_t cq_claim_returns[] = {
	offsetof(CqJobColumns, job_id), offsetof(CqJobColumns, token),
	offsetof(CqJobColumns, payload), offsetof(CqJobColumns, attempts),
	offsetof(CqJobColumns, priority), offsetof(CqJobColumns, enqueued_at),
	offsetof(CqJobColumns, expires_at), offsetof(CqJobColumns, headers),
	offsetof(CqJobColumns, run_at)
};

static void
cq_job_columns(TupleDesc tupdesc, CqJobColumns *col)
{
	static const struct
	{
		const char *name;
		size_t		offset;
	}			names[] = {
#define CQ_COLUMN(c) {#c, offsetof(CqJobColumns, c)}
		CQ_COLUMN(job_id), CQ_COLUMN(token), CQ_COLUMN(payload),
		CQ_COLUMN(attempts), CQ_COLUMN(priority), CQ_COLUMN(enqueued_at),
		CQ_COLUMN(expires_at), CQ_COLUMN(headers), CQ_COLUMN(run_at),
		CQ_COLUMN(state), CQ_COLUMN(worker), CQ_COLUMN(claimed_at),
		CQ_COLUMN(started_at), CQ_COLUMN(held), CQ_COLUMN(group_key)
#undef CQ_COLUMN
	};

	memset(col, 0, sizeof(CqJobColumns));
	for (int i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, i);

		if (att->attisdropped)
			continue;
		for (size_t k = 0; k < lengthof(names); k++)
			if (strcmp(NameStr(att->attname), names[k].name) == 0)
				CQ_JOB_COLUMN(col, names[k].offset) = att->attnum;
	}
	for (size_t k = 0; k < lengthof(names); k++)
		if (CQ_JOB_COLUMN(col, names[k].offset) == 0)
			elog(ERROR, "column \"%s\" of claimq.job is missing", names[k].name);
}

/*
 * Note a claimed job in the ledger, with how long it waited since it
 * became ready: its run_at, or its enqueue if later.
 */
static void
cq_note_claimed(CqLedgerCall *call, int32 queue_id, bool start,
				TimestampTz now, TimestampTz run_at, TimestampTz enqueued_at)
{
	CqMove		move;

	cq_move_init(&move, queue_id, CQ_IS_PENDING,
				 start ? CQ_IS_RUNNING : CQ_IS_CLAIMED, 1);
	move.counter = CQ_CLAIMED;
	move.latency = CQ_LATENCY_WAIT;
	move.latency_us = now - Max(run_at, enqueued_at);
	cq_ledger_note(call, &move);
}

/* A claimed job's row of claim()'s result, until the claim's end. */
typedef struct CqClaimOut
{
	TimestampTz run_at;
	int64		job_id;
	Datum		values[lengthof(cq_claim_returns)];
	bool		nulls[lengthof(cq_claim_returns)];
} CqClaimOut;

/*
 * A claim through the table's and the indexes' access methods, as the
 * executor would run a statement "these ready jobs, FOR UPDATE SKIP
 * LOCKED, claimed", but without building and starting a plan for it on
 * every call (a fifth of the instructions of a claim-and-complete
 * transaction of one job): the run's state, from cq_claim_open to
 * cq_claim_close.
 *
 * In the statement's own snapshot, each row an index scan returns is
 * locked as LockRows locks it (skipping a row another transaction holds;
 * under READ COMMITTED the lock follows the row's updates to its last
 * version); once a batch is locked, each row is updated as ModifyTable
 * updates it: a new version checked against the table's constraints and
 * the state's domain, with the index entries it needs.  A row whose lock
 * followed its updates to a version newer than the snapshot stays locked
 * and is not claimed, which is what the statement does with it too (its
 * UPDATE does not see that version); under REPEATABLE READ or
 * SERIALIZABLE such a row fails to serialize, as it does there.  Predicate
 * locks are the access methods' own.
 */
typedef struct CqClaimRun
{
	CqQueue    *queue;
	TimestampTz now;
	bool		start;
	Datum		worker;
	bool		worker_null;
	TimestampTz expires_at;
	int64		token_epoch;
	Oid			seq_oid;
	Relation	rel;
	TupleDesc	tupdesc;
	int			natts;
	CqJobColumns col;
	Datum		state_value;
	Snapshot	snapshot;
	CommandId	cid;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *scanslot;
	TupleTableSlot *lockslot;
	TupleTableSlot *newslot;
	Datum	   *values;
	bool	   *nulls;
	bool	   *replace;
	HeapTuple  *picked;			/* locked, to be claimed */
	int			npicked;
	int			npicked_max;
	bool		all_picked;		/* every row seen was locked */
	bool		defer;			/* rows claimed go to out[], not result */
	CqClaimOut *out;
	int			nout;
	int			nout_max;
	Tuplestorestate *result;
	TupleDesc	desc;
	CqLedgerCall *call;
	uint64		claimed;
	TimestampTz last_run_at;
	int64		last_job_id;
} CqClaimRun;

/* Which rows an index scan's visible versions give a claim. */
typedef enum CqClaimFilter
{
	CQ_CLAIM_ANY,				/* the ready index's: all of them */
	CQ_CLAIM_KEYLESS,			/* the ready index's without a group key */
	CQ_CLAIM_FREE				/* the group due index's not held back, up to
								 * the first not due yet */
} CqClaimFilter;

/*
 * Begin a claim run.  Returns false, having done nothing, when the table
 * has what a statement would honour and this path does not: a trigger on
 * UPDATE other than the census's guard (which does nothing for claimq's
 * own writes), or row level security.  The caller then runs the statement.
 */
static bool
cq_claim_open(CqClaimRun *run, CqQueue *queue, int32 max_jobs,
			  TimestampTz now, Interval *lease, Datum worker, bool worker_null,
			  bool start, Tuplestorestate *result, TupleDesc desc,
			  CqLedgerCall *call)
{
	Oid			job_oid = cq_job_relid();
	Oid			state_type;
	Relation	rel;
	Bitmapset  *updated = NULL;
	RangeTblEntry *rte;
	void	   *domain_extra = NULL;

	memset(run, 0, sizeof(CqClaimRun));
	run->seq_oid = get_relname_relid("token_seq", get_rel_namespace(job_oid));
	if (!OidIsValid(job_oid) || !OidIsValid(run->seq_oid))
		elog(ERROR, "claimq's job table or token sequence is missing");

	rel = table_open(job_oid, RowExclusiveLock);
	if (rel->rd_rel->relrowsecurity)
	{
		table_close(rel, NoLock);
		return false;
	}
	if (rel->trigdesc)
		for (int i = 0; i < rel->trigdesc->numtriggers; i++)
		{
			Trigger    *trigger = &rel->trigdesc->triggers[i];

			if (TRIGGER_FOR_UPDATE(trigger->tgtype) &&
				strcmp(trigger->tgname, "job_census_guard") != 0)
			{
				table_close(rel, NoLock);
				return false;
			}
		}
	CheckCmdReplicaIdentity(rel, CMD_UPDATE);

	run->queue = queue;
	run->now = now;
	run->start = start;
	run->worker = worker;
	run->worker_null = worker_null;
	run->expires_at = cq_time_plus(now, lease);
	run->token_epoch = cq_token_epoch();
	run->rel = rel;
	run->result = result;
	run->desc = desc;
	run->call = call;
	run->all_picked = true;

	/* A statement's start: see what came before, in a snapshot of its own. */
	CommandCounterIncrement();
	run->snapshot = RegisterSnapshot(GetTransactionSnapshot());
	PushActiveSnapshot(run->snapshot);
	run->cid = GetCurrentCommandId(true);

	run->tupdesc = RelationGetDescr(rel);
	run->natts = run->tupdesc->natts;
	cq_job_columns(run->tupdesc, &run->col);
	state_type = TupleDescAttr(run->tupdesc, run->col.state - 1)->atttypid;
	run->state_value = CStringGetTextDatum(start ? "running" : "claimed");
	domain_check(run->state_value, false, state_type, &domain_extra,
				 CurrentMemoryContext);

	/*
	 * The executor's state of an UPDATE of the table that sets these columns:
	 * its indexes decide by them which of their new entries are for a changed
	 * key (index_unchanged_by_update), and a failed check would name them.
	 */
	for (size_t i = 0; i < lengthof(cq_claim_sets); i++)
		updated = bms_add_member(updated,
								 CQ_JOB_COLUMN(&run->col, cq_claim_sets[i]) -
								 FirstLowInvalidHeapAttributeNumber);
	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = job_oid;
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = RowExclusiveLock;
	run->estate = CreateExecutorState();
#if PG_VERSION_NUM >= 160000
	{
		RTEPermissionInfo *perminfo = makeNode(RTEPermissionInfo);

		perminfo->relid = job_oid;
		perminfo->requiredPerms = ACL_UPDATE;
		perminfo->updatedCols = updated;
		rte->perminfoindex = 1;
		ExecInitRangeTable(run->estate, list_make1(rte), list_make1(perminfo),
						   bms_make_singleton(1));
	}
#else
	rte->requiredPerms = ACL_UPDATE;
	rte->updatedCols = updated;
	ExecInitRangeTable(run->estate, list_make1(rte));
#endif
	run->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(run->rri, rel, 1, NULL, 0);
	ExecOpenIndices(run->rri, false);

	run->scanslot = table_slot_create(rel, NULL);
	run->lockslot = table_slot_create(rel, NULL);
	run->newslot = MakeSingleTupleTableSlot(run->tupdesc, &TTSOpsHeapTuple);
	run->values = palloc(run->natts * sizeof(Datum));
	run->nulls = palloc(run->natts * sizeof(bool));
	run->replace = palloc0(run->natts * sizeof(bool));
	run->npicked_max = Min(max_jobs, 1024);
	run->picked = palloc(run->npicked_max * sizeof(HeapTuple));
	return true;
}

/* An index of claimq.job by name, opened for a scan in the run's snapshot. */
static IndexScanDesc
cq_claim_index(CqClaimRun *run, const char *name, int nkeys)
{
	Oid			oid = get_relname_relid(name, RelationGetNamespace(run->rel));
	Relation	idx;

	if (!OidIsValid(oid))
		elog(ERROR, "claimq's index %s is missing", name);
	idx = index_open(oid, AccessShareLock);
#if PG_VERSION_NUM >= 180000
	return index_beginscan(run->rel, idx, run->snapshot, NULL, nkeys, 0);
#else
	return index_beginscan(run->rel, idx, run->snapshot, nkeys, 0);
#endif
}

static void
cq_claim_index_end(IndexScanDesc scan)
{
	Relation	idx = scan->indexRelation;

	index_endscan(scan);
	index_close(idx, AccessShareLock);
}

/*
 * Start a scan of the ready index at the queue's entries at priority 0 from
 * the floor, (run_at, job_id) >= (floor's), to the last due now: the row
 * comparison starts the scan at the floor itself, where a bound on run_at
 * alone would step over every job of the floor's run_at claimed before it.
 */
static void
cq_claim_ready_range(CqClaimRun *run, IndexScanDesc scan, const CqFloor *floor)
{
	ScanKeyData keys[4];
	ScanKeyData *from = palloc(2 * sizeof(ScanKeyData));

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(run->queue->queue_id));
	ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(0));
	ScanKeyEntryInitialize(&from[0], SK_ROW_MEMBER, 3,
						   BTGreaterEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_TIMESTAMPTZ_CMP,
						   TimestampTzGetDatum(floor->run_at));
	ScanKeyEntryInitialize(&from[1], SK_ROW_MEMBER | SK_ROW_END, 4,
						   BTGreaterEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_BTINT8CMP, Int64GetDatum(floor->job_id));
	/* A row comparison's header has no function (as the executor makes it). */
	memset(&keys[2], 0, sizeof(ScanKeyData));
	keys[2].sk_flags = SK_ROW_HEADER;
	keys[2].sk_attno = 3;
	keys[2].sk_strategy = BTGreaterEqualStrategyNumber;
	keys[2].sk_argument = PointerGetDatum(from);
	ScanKeyInit(&keys[3], 3, BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE,
				TimestampTzGetDatum(run->now));
	index_rescan(scan, keys, 4, NULL, 0);
}

/*
 * Lock up to want rows of the scan whose visible versions pass the filter,
 * adding them to the run's batch; *found tells whether any passed.
 * Returns how many it locked.
 */
static int
cq_claim_lock(CqClaimRun *run, IndexScanDesc scan, int want,
			  CqClaimFilter filter, bool *found)
{
	int			locked = 0;

	*found = false;
	while (locked < want &&
		   index_getnext_slot(scan, ForwardScanDirection, run->scanslot))
	{
		TM_FailureData tmfd;
		TM_Result	res;
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		if (filter != CQ_CLAIM_ANY &&
			DatumGetInt32(slot_getattr(run->scanslot, run->col.priority,
									   &isnull)) != 0)
			continue;			/* a queue's share is at priority 0 */
		if (filter == CQ_CLAIM_KEYLESS)
		{
			slot_getattr(run->scanslot, run->col.group_key, &isnull);
			if (!isnull)
				continue;
		}
		else if (filter == CQ_CLAIM_FREE)
		{
			/*
			 * The due bound is checked here rather than by the scan, which
			 * would check it on every entry of the page it reads.
			 */
			if (DatumGetTimestampTz(slot_getattr(run->scanslot,
												 run->col.run_at,
												 &isnull)) > run->now)
				break;
			if (DatumGetBool(slot_getattr(run->scanslot, run->col.held,
										  &isnull)))
				continue;
		}
		*found = true;
		res = table_tuple_lock(run->rel, &run->scanslot->tts_tid,
							   run->snapshot, run->lockslot, run->cid,
							   LockTupleExclusive, LockWaitSkip,
							   IsolationUsesXactSnapshot() ? 0 :
							   TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
							   &tmfd);
		switch (res)
		{
			case TM_Ok:
				break;
			case TM_WouldBlock:
			case TM_SelfModified:
				continue;
			case TM_Updated:
			case TM_Deleted:
				if (IsolationUsesXactSnapshot())
					ereport(ERROR,
							(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
							 errmsg("could not serialize access due to concurrent update")));
				continue;
			case TM_Invisible:
			default:
				elog(ERROR, "unexpected table_tuple_lock status: %u", res);
		}
		if (tmfd.traversed)
		{
			/* Locked, but its version is newer than the snapshot. */
			run->all_picked = false;
			continue;
		}
		if (run->npicked == run->npicked_max)
		{
			run->npicked_max *= 2;
			run->picked = repalloc(run->picked,
								   run->npicked_max * sizeof(HeapTuple));
		}
		run->picked[run->npicked++] = ExecCopySlotHeapTuple(run->lockslot);
		locked++;
	}
	return locked;
}

/*
 * Claim the rows locked so far, in the order they were locked, and empty
 * the batch.
 */
static void
cq_claim_write(CqClaimRun *run)
{
	CqJobColumns *col = &run->col;

	for (int i = 0; i < run->npicked; i++)
	{
		HeapTuple	oldtup = run->picked[i];
		HeapTuple	newtup;
		TimestampTz run_at;
		Datum		ret[lengthof(cq_claim_returns)];
		bool		retnull[lengthof(cq_claim_returns)];
		Datum	   *values = run->values;
		bool	   *nulls = run->nulls;
		bool	   *replace = run->replace;
#if PG_VERSION_NUM >= 160000
		TU_UpdateIndexes update_indexes;
#else
		bool		update_indexes;
#endif

		heap_deform_tuple(oldtup, run->tupdesc, values, nulls);
		run_at = DatumGetTimestampTz(values[col->run_at - 1]);
		memset(replace, 0, run->natts * sizeof(bool));
		values[col->state - 1] = run->state_value;
		replace[col->state - 1] = true;
		if (run->start)
		{
			values[col->attempts - 1] =
				Int32GetDatum(DatumGetInt32(values[col->attempts - 1]) + 1);
			replace[col->attempts - 1] = true;
		}
		values[col->token - 1] =
			Int64GetDatum(run->token_epoch + nextval_internal(run->seq_oid, true));
		nulls[col->token - 1] = false;
		replace[col->token - 1] = true;
		values[col->worker - 1] = run->worker;
		nulls[col->worker - 1] = run->worker_null;
		replace[col->worker - 1] = true;
		values[col->claimed_at - 1] = TimestampTzGetDatum(run->now);
		nulls[col->claimed_at - 1] = false;
		replace[col->claimed_at - 1] = true;
		values[col->expires_at - 1] = TimestampTzGetDatum(run->expires_at);
		nulls[col->expires_at - 1] = false;
		replace[col->expires_at - 1] = true;
		values[col->started_at - 1] = TimestampTzGetDatum(run->now);
		nulls[col->started_at - 1] = !run->start;
		replace[col->started_at - 1] = true;
		newtup = heap_modify_tuple(oldtup, run->tupdesc, values, nulls, replace);
		ExecStoreHeapTuple(newtup, run->newslot, true);
		ExecConstraints(run->rri, run->newslot, run->estate);
		simple_table_tuple_update(run->rel, &oldtup->t_self, run->newslot,
								  run->snapshot, &update_indexes);
#if PG_VERSION_NUM >= 160000
		if (update_indexes != TU_None)
			ExecInsertIndexTuples(run->rri, run->newslot, run->estate, true,
								  false, NULL, NIL,
								  update_indexes == TU_Summarizing);
#else
		if (update_indexes)
			ExecInsertIndexTuples(run->rri, run->newslot, run->estate, true,
								  false, NULL, NIL);
#endif

		for (size_t k = 0; k < lengthof(cq_claim_returns); k++)
		{
			AttrNumber	attnum = CQ_JOB_COLUMN(col, cq_claim_returns[k]);

			ret[k] = values[attnum - 1];
			retnull[k] = nulls[attnum - 1];
		}
		if (run->defer)
		{
			/* Its values point into oldtup, which stays until the end. */
			CqClaimOut *out;

			if (run->nout == run->nout_max)
			{
				run->nout_max = Max(16, run->nout_max * 2);
				run->out = run->out == NULL ?
					palloc(run->nout_max * sizeof(CqClaimOut)) :
					repalloc(run->out, run->nout_max * sizeof(CqClaimOut));
			}
			out = &run->out[run->nout++];
			out->run_at = run_at;
			out->job_id = DatumGetInt64(values[col->job_id - 1]);
			memcpy(out->values, ret, sizeof(ret));
			memcpy(out->nulls, retnull, sizeof(retnull));
		}
		else
			tuplestore_putvalues(run->result, run->desc, ret, retnull);
		cq_note_claimed(run->call, run->queue->queue_id, run->start, run->now,
						run_at, DatumGetTimestampTz(values[col->enqueued_at - 1]));
		run->last_run_at = run_at;
		run->last_job_id = DatumGetInt64(values[col->job_id - 1]);
		run->claimed++;
		ResetPerTupleExprContext(run->estate);
	}
	run->npicked = 0;
}

static int
cq_claim_out_order(const void *a, const void *b)
{
	const CqClaimOut *oa = a;
	const CqClaimOut *ob = b;

	if (oa->run_at != ob->run_at)
		return oa->run_at < ob->run_at ? -1 : 1;
	return (oa->job_id > ob->job_id) - (oa->job_id < ob->job_id);
}

static void
cq_claim_close(CqClaimRun *run)
{
	/* Rows claimed in rounds go out in the claim's order. */
	if (run->nout > 1)
		qsort(run->out, run->nout, sizeof(CqClaimOut), cq_claim_out_order);
	for (int i = 0; i < run->nout; i++)
		tuplestore_putvalues(run->result, run->desc, run->out[i].values,
							 run->out[i].nulls);

	ExecDropSingleTupleTableSlot(run->scanslot);
	ExecDropSingleTupleTableSlot(run->lockslot);
	ExecDropSingleTupleTableSlot(run->newslot);
	ExecCloseIndices(run->rri);
	FreeExecutorState(run->estate);
	table_close(run->rel, NoLock);
	PopActiveSnapshot();
	UnregisterSnapshot(run->snapshot);
	CommandCounterIncrement();
}

/*
 * The claim of a plain queue (all its pending jobs at priority 0, not
 * fair, on one server): one range of the ready index from the floor.  The
 * batch is locked first, as the statement's LockRows does before its
 * UPDATE runs, so that the rows are held for as short a time as a
 * statement holds them before they are claimed: a claim preempted half
 * way does not leave the rest of its range to the claims behind it.
 * Returns false, having done nothing, where cq_claim_open does.
 */
static bool
cq_claim_plain(CqQueue *queue, int32 max_jobs, TimestampTz now,
			   Interval *lease, Datum worker, bool worker_null, bool start,
			   const CqFloor *floor, Tuplestorestate *result, TupleDesc desc,
			   CqLedgerCall *call, uint64 *nclaimed, bool *all_picked,
			   TimestampTz *last_run_at, int64 *last_job_id)
{
	CqClaimRun	run;
	IndexScanDesc scan;
	bool		found;

	if (!cq_claim_open(&run, queue, max_jobs, now, lease, worker,
					   worker_null, start, result, desc, call))
		return false;
	scan = cq_claim_index(&run, "job_ready_idx", 4);
	cq_claim_ready_range(&run, scan, floor);
	cq_claim_lock(&run, scan, max_jobs, CQ_CLAIM_ANY, &found);
	cq_claim_write(&run);
	cq_claim_index_end(scan);
	cq_claim_close(&run);
	*nclaimed = run.claimed;
	*all_picked = run.all_picked;
	*last_run_at = run.last_run_at;
	*last_job_id = run.last_job_id;
	return true;
}

#define CQ_FAIR_CHUNK	100		/* jobs a pick shares at most */

/*
 * The claim of a fair queue whose jobs are all at priority 0, on one
 * server, with its tenants in shared memory (fair.c): start-time fair
 * queuing as claimq.claim_fair does it, without its statements.  Each
 * round picks the tenants of least start and their quotas (moving their
 * times on), locks each tenant's first jobs in the usual order from the
 * group due index (or, for the jobs without a group key, the ready index
 * from the floor), settles what each gave, and claims the batch.  A
 * tenant short of its quota is passed over by the later rounds, which go
 * on until the batch is full or every tenant was passed over: a round
 * either claims a job or passes over every tenant it picked.  What is
 * left of max_jobs then (jobs of tenants the set does not know, or that
 * came meanwhile) is filled in the queue's order and charged to the jobs'
 * tenants, so that fairness never makes a claim return fewer jobs.  The
 * batch is returned in the claim's order (run_at, id).  Returns false,
 * having done nothing, when the set is not usable (cq_fair_open), is gone
 * by the first pick (spilled or swept meanwhile), or where cq_claim_open
 * does.  (Gone after the first round, what is left is filled uncharged:
 * the next load starts the shares from the tables anyway.)
 */
static bool
cq_claim_fair(CqQueue *queue, int32 max_jobs, TimestampTz now,
			  Interval *lease, Datum worker, bool worker_null, bool start,
			  const CqFloor *floor, Tuplestorestate *result, TupleDesc desc,
			  CqLedgerCall *call, uint64 *nclaimed)
{
	CqClaimRun	run;
	IndexScanDesc due;
	IndexScanDesc ready;
	Oid			key_collation;
	uint64		claim;
	int			remaining = max_jobs;
	CqFairPick *picks;
	bool		found;
	bool		may_raise = true;	/* no tenant with jobs met yet */
	bool		fine = false;	/* tenants with nothing ready met */

	if (!cq_fair_open(queue->queue_id, 0) ||
		!cq_claim_open(&run, queue, max_jobs, now, lease, worker,
					   worker_null, start, result, desc, call))
		return false;
	run.defer = true;
	due = cq_claim_index(&run, "job_group_due_idx", 2);
	ready = cq_claim_index(&run, "job_ready_idx", 4);
	key_collation = due->indexRelation->rd_indcollation[1];
	claim = cq_fair_claim_begin();
	picks = palloc(Min(max_jobs, CQ_FAIR_CHUNK) * sizeof(CqFairPick));

	for (int round = 0; remaining > 0; round++)
	{
		int			npicks;
		int			got = 0;
		bool		whole;

		CHECK_FOR_INTERRUPTS();
		npicks = cq_fair_pick(queue->queue_id, 0, claim,
							  Min(remaining, CQ_FAIR_CHUNK), fine, picks,
							  &whole);
		if (npicks < 0 && round == 0)
		{
			cq_claim_index_end(due);
			cq_claim_index_end(ready);
			cq_claim_close(&run);
			return false;
		}
		if (npicks <= 0)
			break;
		for (int i = 0; i < npicks; i++)
		{
			CqFairPick *pick = &picks[i];

			pick->taken = 0;
			pick->found = false;
			if (pick->quota == 0)
				continue;
			if (pick->key == NULL)
			{
				cq_claim_ready_range(&run, ready, floor);
				pick->taken = cq_claim_lock(&run, ready, pick->quota,
											CQ_CLAIM_KEYLESS, &pick->found);
			}
			else
			{
				ScanKeyData keys[2];

				ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
							Int32GetDatum(queue->queue_id));
				ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber,
									   InvalidOid, key_collation, F_TEXTEQ,
									   PointerGetDatum(pick->key));
				index_rescan(due, keys, 2, NULL, 0);
				pick->taken = cq_claim_lock(&run, due, pick->quota,
											CQ_CLAIM_FREE, &pick->found);
			}
			got += pick->taken;
		}
		cq_fair_settle(queue->queue_id, 0, claim, picks, npicks, may_raise,
					   whole);
		for (int i = 0; i < npicks; i++)
			if (picks[i].quota > 0)
			{
				may_raise = may_raise && !picks[i].found;
				fine = fine || !picks[i].found;
			}
		cq_claim_write(&run);
		remaining -= got;
	}

	/* The rest in the queue's order, charged to the jobs' tenants. */
	if (remaining > 0)
	{
		text	  **keys;

		/* Every round ended with its batch claimed: this one starts empty. */
		cq_claim_ready_range(&run, ready, floor);
		cq_claim_lock(&run, ready, remaining, CQ_CLAIM_ANY, &found);
		keys = palloc(Max(run.npicked, 1) * sizeof(text *));
		for (int i = 0; i < run.npicked; i++)
		{
			bool		isnull;
			Datum		key = heap_getattr(run.picked[i], run.col.group_key,
										   run.tupdesc, &isnull);

			keys[i] = isnull ? NULL : DatumGetTextPP(key);
		}
		if (run.npicked > 0)
			cq_fair_charge(queue->queue_id, 0, keys, run.npicked);
		cq_claim_write(&run);
	}
	cq_claim_index_end(due);
	cq_claim_index_end(ready);
	cq_claim_close(&run);
	*nclaimed = run.claimed;
	return true;
}

/*
 * What every claim statement but a fair queue's does with the rows it
 * picked (the CTE "picked", of ctids): claim them, returning claim()'s
 * columns and each job's run_at.
 */
#define CQ_CLAIM_PICKED \
	"  UPDATE claimq.job j" \
	"     SET state = CASE WHEN $6 THEN 'running' ELSE 'claimed' END," \
	"         attempts = j.attempts + CASE WHEN $6 THEN 1 ELSE 0 END," \
	"         token = $7 + pg_catalog.nextval('claimq.token_seq')," \
	"         worker = $5, claimed_at = $3, expires_at = $3 + $4," \
	"         started_at = CASE WHEN $6 THEN $3 END" \
	"   WHERE j.ctid = ANY (ARRAY(SELECT p.ctid FROM picked p))" \
	"  RETURNING j.job_id, j.token, j.payload, j.attempts, j.priority," \
	"            j.enqueued_at, j.expires_at, j.headers, j.run_at"

/*
 * Claim up to max_jobs ready jobs of the queue into the result store.
 * Returns how many were claimed.
 *
 * The statement returns, after the columns of claim()'s result, each
 * job's run_at, the lowest priority with pending jobs and the number of
 * rows picked, which decide whether the queue's floor may be raised (see
 * floor.c).
 *
 * What the queue uses decides how.  A queue none of whose jobs was ever
 * enqueued at a priority other than 0 (claimq.queue.prioritized, set by
 * the first enqueue at another priority in the transaction that makes it,
 * sql/queue-changed.sql) has all its pending jobs at priority 0: its claim
 * takes them in order from its floor, through the access methods
 * (cq_claim_plain), with no walk of the queue's priorities (two index
 * probes, and the executor's start-up of a plan three times the size) and
 * no plan at all.  Any other queue's claim is a statement that walks its
 * priorities, highest first, and takes the ready jobs of each in order
 * until it has max_jobs; a fair queue's shares them between its tenants.
 */
static uint64
cq_claim_batch(CqQueue *queue, int32 max_jobs, Interval *lease,
			   Datum worker, bool worker_null, bool start,
			   Tuplestorestate *result, TupleDesc desc, long *refill_ms)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr fair_plan = NULL;
	SPIPlanPtr	use;
	Oid			argtypes[9] = {INT4OID, INT4OID, TIMESTAMPTZOID, INTERVALOID,
	TEXTOID, BOOLOID, INT8OID, TIMESTAMPTZOID, INT8OID};
	Datum		values[9];
	char		nulls[9] = "         ";
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz own_run_at;
	CqFloor		floor;
	uint64		claimed;
	bool		isnull;
	CqLedgerCall call = {0};
	CqFlowTicket ticket;
	bool		all_picked = false;
	TimestampTz last_run_at = 0;
	int64		last_job_id = 0;

	max_jobs = cq_flow_allowance(queue, max_jobs, &ticket);
	if (max_jobs == 0)
	{
		*refill_ms = ticket.refill_ms;
		cq_flow_spend(queue, &ticket, 0);
		return 0;
	}
	now = GetCurrentTimestamp();	/* the allowance may have waited */

	if (queue->fair)
		/* A fair queue's claim shares the batch between its tenants. */
		use = cq_plan(&fair_plan,
					  "SELECT f.job_id, f.token, f.payload, f.attempts, f.priority,"
					  "       f.enqueued_at, f.expires_at, f.headers, f.run_at"
					  "  FROM claimq.claim_fair($1, $2, $3, $4, $5, $6, $7) f"
					  " ORDER BY f.priority DESC, f.run_at, f.job_id",
					  7, argtypes);
	else
		use = cq_plan(&plan,
					  "WITH RECURSIVE prio(p) AS ("
					  "    SELECT pg_catalog.min(j.priority) FROM claimq.job j"
					  "     WHERE j.queue_id = $1 AND j.state = 'pending' AND NOT j.held"
					  "  UNION ALL"
					  "    SELECT (SELECT pg_catalog.min(j.priority) FROM claimq.job j"
					  "             WHERE j.queue_id = $1 AND j.state = 'pending'"
					  "               AND NOT j.held AND j.priority > prio.p)"
					  "      FROM prio WHERE prio.p IS NOT NULL"
					  "), picked AS MATERIALIZED ("
					  "  SELECT c.ctid"
					  "    FROM (SELECT prio.p FROM prio WHERE prio.p IS NOT NULL"
					  "           ORDER BY prio.p DESC) prio CROSS JOIN LATERAL ("
					  "      SELECT j.ctid FROM claimq.job j"
					  "       WHERE j.queue_id = $1 AND j.state = 'pending' AND NOT j.held"
					  "         AND j.priority = prio.p AND j.run_at <= $3"
					  "         AND (j.run_at, j.job_id) >= ($8, $9)"
					  "       ORDER BY j.run_at, j.job_id"
					  "       LIMIT $2"
					  "       FOR UPDATE SKIP LOCKED) c"
					  "   LIMIT $2"
					  "), upd AS (" CQ_CLAIM_PICKED ")"
					  " SELECT u.job_id, u.token, u.payload, u.attempts, u.priority,"
					  "        u.enqueued_at, u.expires_at, u.headers, u.run_at,"
					  "        (SELECT pg_catalog.min(prio.p) FROM prio),"
					  "        (SELECT pg_catalog.count(*) FROM picked)"
					  "   FROM upd u"
					  "  ORDER BY u.priority DESC, u.run_at, u.job_id",
					  9, argtypes);

	cq_floor_read(queue->queue_id, now, &floor);
	own_run_at = cq_xact_ready_run_at(queue->queue_id);
	if (own_run_at <= floor.run_at)
	{
		floor.run_at = own_run_at;
		floor.job_id = PG_INT64_MIN;
	}

	/*
	 * Should this transaction abort, whatever the statement locks or claims
	 * is pending again; all of it is at or past the floor.  Noted before the
	 * statement runs, which can fail after it locked rows.
	 */
	cq_claimed_in_xact(queue->queue_id, floor.run_at);

	call.counts.queue_name = queue->name;
	call.counts.named_queue_id = queue->queue_id;
	if (!queue->fair && !queue->prioritized && !cq_distributed() &&
		cq_claim_plain(queue, max_jobs, now, lease, worker, worker_null,
					   start, &floor, result, desc, &call, &claimed,
					   &all_picked, &last_run_at, &last_job_id))
		goto done;
	if (queue->fair && !queue->prioritized && !cq_distributed() &&
		cq_claim_fair(queue, max_jobs, now, lease, worker, worker_null,
					  start, &floor, result, desc, &call, &claimed))
		goto done;

	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Int32GetDatum(max_jobs);
	values[2] = TimestampTzGetDatum(now);
	values[3] = IntervalPGetDatum(lease);
	values[4] = worker;
	nulls[4] = worker_null ? 'n' : ' ';
	values[5] = BoolGetDatum(start);
	values[6] = Int64GetDatum(cq_token_epoch());
	values[7] = TimestampTzGetDatum(floor.run_at);
	values[8] = Int64GetDatum(floor.job_id);
	cq_execute(use, values, nulls, SPI_OK_SELECT);
	claimed = SPI_processed;

	for (uint64 row = 0; row < claimed; row++)
	{
		Datum		rowvalues[11];
		bool		rownulls[11];

		heap_deform_tuple(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						  rowvalues, rownulls);
		tuplestore_putvalues(result, desc, rowvalues, rownulls);
		cq_note_claimed(&call, queue->queue_id, start, now,
						DatumGetTimestampTz(rowvalues[8]),
						DatumGetTimestampTz(rowvalues[5]));
	}

	/*
	 * Every picked row was claimed, and the last one is of the lowest
	 * priority with pending jobs.  (A picked row goes unclaimed when
	 * transactions that committed after the snapshot claimed and released it;
	 * see floor.c.)
	 */
	if (claimed > 0 && !queue->fair &&
		DatumGetInt64(cq_spi_value(claimed - 1, 11, &isnull)) == (int64) claimed &&
		DatumGetInt32(cq_spi_value(claimed - 1, 5, &isnull)) ==
		DatumGetInt32(cq_spi_value(claimed - 1, 10, &isnull)))
	{
		all_picked = true;
		last_run_at = DatumGetTimestampTz(cq_spi_value(claimed - 1, 9, &isnull));
		last_job_id = DatumGetInt64(cq_spi_value(claimed - 1, 1, &isnull));
	}

done:
	cq_ledger_close(&call);
	if (claimed == 0)
	{
		cq_flow_spend(queue, &ticket, 0);
		return 0;
	}
	cq_tokens_durable();

	/*
	 * The last job claimed is the new floor if every row the claim picked
	 * ahead of it was claimed, and the snapshot was taken after the floor was
	 * read.
	 */
	if (all_picked && !IsolationUsesXactSnapshot())
		cq_floor_raise(&floor, last_run_at, last_job_id);
	cq_flow_spend(queue, &ticket, (int32) claimed);
	return claimed;
}

/*
 * claim(queue, max_jobs, lease, worker, start, wait)
 * returns table(job_id, token, payload, attempts, priority, enqueued_at,
 *				 expires_at, headers)
 */
Datum
claimq_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *queue_name;
	int32		max_jobs;
	Interval   *lease;
	bool		start;
	Interval   *wait;
	TimestampTz deadline;
	bool		can_wait;
	long		poll_ms = CQ_POLL_MIN_MS;
	volatile bool in_subxact = false;
	MemoryContext oldcontext;
	ResourceOwner oldowner;

	cq_require_primary(fcinfo);
	queue_name = cq_queue_name_arg(fcinfo, 0);
	max_jobs = cq_int_arg(fcinfo, 1, "max_jobs", 1, CQ_MAX_BATCH);
	lease = cq_lease_arg(fcinfo, 2, "lease", false);
	cq_arg_not_null(fcinfo, 4, "start");
	start = PG_GETARG_BOOL(4);
	cq_arg_not_null(fcinfo, 5, "wait");
	wait = cq_lease_arg(fcinfo, 5, "wait", true);
	deadline = cq_time_plus(GetCurrentTimestamp(), wait);
	if (cq_forward_wanted(queue_name))
		return cq_forward(fcinfo);

	InitMaterializedSRF(fcinfo, 0);
	can_wait = deadline > GetCurrentTimestamp();
	oldcontext = CurrentMemoryContext;
	oldowner = CurrentResourceOwner;

	PG_TRY();
	{
		bool		waiting = false;

		for (;;)
		{
			CqQueue		queue;
			uint64		claimed = 0;
			long		refill_ms = 0;

			if (can_wait)
			{
				BeginInternalSubTransaction(NULL);
				in_subxact = true;
				MemoryContextSwitchTo(oldcontext);
			}
			SPI_connect();
			cq_require_queue(queue_name, &queue);
			if (!queue.paused)
				claimed = cq_claim_batch(&queue, max_jobs,
										 lease ? lease :
										 start ? &queue.run_lease : &queue.lease,
										 PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3),
										 PG_ARGISNULL(3), start,
										 rsinfo->setResult, rsinfo->setDesc,
										 &refill_ms);
			SPI_finish();
			if (can_wait)
			{
				if (claimed > 0)
					ReleaseCurrentSubTransaction();
				else
					RollbackAndReleaseCurrentSubTransaction();
				in_subxact = false;
				MemoryContextSwitchTo(oldcontext);
				CurrentResourceOwner = oldowner;
			}

			if (claimed > 0 || GetCurrentTimestamp() >= deadline)
				break;

			/*
			 * Nothing yet.  With wake-ups, publish the wait and look once
			 * more before sleeping, so that a commit in between is seen one
			 * way or the other; then sleep until woken, re-checking now and
			 * then for scheduled jobs coming due, and when the rate limit's
			 * bucket holds a token again if it was empty.  Without, poll a
			 * little less often each time.
			 */
			if (!waiting && (waiting = cq_wait_begin(queue.queue_id)))
				continue;
			cq_wait_sleep(waiting,
						  refill_ms > 0 ? Min(refill_ms, CQ_WAKE_RECHECK_MS) :
						  CQ_WAKE_RECHECK_MS,
						  &poll_ms, deadline);
		}
	}
	PG_CATCH();
	{
		cq_wait_end();
		if (in_subxact)
		{
			/*
			 * Roll back the try's own subtransaction before the error goes
			 * on, so that whoever catches it (a PL/pgSQL exception block)
			 * rolls back its own, not ours.
			 */
			ErrorData  *edata;

			MemoryContextSwitchTo(oldcontext);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(oldcontext);
			CurrentResourceOwner = oldowner;
			ReThrowError(edata);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	cq_wait_end();
	return (Datum) 0;
}
