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
 * rather than looked up again by id.  A fair queue's statement shares the
 * batch between its tenants (sql/fair-share.sql).
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
		CQ_COLUMN(started_at)
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

/*
 * The claim of a plain queue (all its pending jobs at priority 0, not
 * fair, on one server) through the table's and the ready index's access
 * methods, as the executor would run the statement "the first max_jobs
 * ready jobs of the queue from its floor, FOR UPDATE SKIP LOCKED, claimed"
 * but without building and starting a plan for it on every call (a fifth
 * of the instructions of a claim-and-complete transaction of one job).
 *
 * One range of the ready index from the floor, in the statement's own
 * snapshot; each row locked as LockRows locks it (skipping a row another
 * transaction holds; under READ COMMITTED the lock follows the row's
 * updates to its last version); once the batch is locked, each row
 * updated as ModifyTable updates it: a new version checked against the
 * table's constraints and the state's domain, with the index entries it
 * needs.  A row whose lock followed its updates to a version newer than
 * the snapshot stays locked and is not claimed, which is what the
 * statement does with it too (its UPDATE does not see that version);
 * under REPEATABLE READ or SERIALIZABLE such a row fails to serialize, as
 * it does there.  Predicate locks are the access methods' own.
 *
 * Returns false, having done nothing, when the table has what a statement
 * would honour and this path does not: a trigger on UPDATE other than the
 * census's guard (which does nothing for claimq's own writes), or row
 * level security.  The caller then runs the statement.
 */
static bool
cq_claim_plain(CqQueue *queue, int32 max_jobs, TimestampTz now,
			   Interval *lease, Datum worker, bool worker_null, bool start,
			   const CqFloor *floor, Tuplestorestate *result, TupleDesc desc,
			   CqLedgerCall *call, uint64 *nclaimed, bool *all_picked,
			   TimestampTz *last_run_at, int64 *last_job_id)
{
	Oid			job_oid = cq_job_relid();
	Oid			nsp = get_rel_namespace(job_oid);
	Oid			ready_oid = get_relname_relid("job_ready_idx", nsp);
	Oid			seq_oid = get_relname_relid("token_seq", nsp);
	Oid			state_type;
	Relation	rel;
	Relation	idx;
	TupleDesc	tupdesc;
	EState	   *estate;
	ResultRelInfo *rri;
	IndexScanDesc scan;
	ScanKeyData keys[4];
	ScanKeyData from[2];
	TupleTableSlot *scanslot;
	TupleTableSlot *lockslot;
	TupleTableSlot *newslot;
	Snapshot	snapshot;
	CommandId	cid;
	int			natts;
	CqJobColumns col;
	Bitmapset  *updated = NULL;
	RangeTblEntry *rte;
	Datum	   *values;
	bool	   *nulls;
	bool	   *replace;
	Datum		state_value;
	void	   *domain_extra = NULL;
	TimestampTz expires_at = cq_time_plus(now, lease);
	int64		token_epoch = cq_token_epoch();
	uint64		claimed = 0;
	HeapTuple  *picked;
	int			npicked = 0;
	int			npicked_max;

	if (!OidIsValid(job_oid) || !OidIsValid(ready_oid) || !OidIsValid(seq_oid))
		elog(ERROR, "claimq's job table, ready index or token sequence is missing");

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

	/* A statement's start: see what came before, in a snapshot of its own. */
	CommandCounterIncrement();
	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	PushActiveSnapshot(snapshot);
	cid = GetCurrentCommandId(true);

	idx = index_open(ready_oid, AccessShareLock);
	tupdesc = RelationGetDescr(rel);
	natts = tupdesc->natts;
	cq_job_columns(tupdesc, &col);
	state_type = TupleDescAttr(tupdesc, col.state - 1)->atttypid;
	state_value = CStringGetTextDatum(start ? "running" : "claimed");
	domain_check(state_value, false, state_type, &domain_extra,
				 CurrentMemoryContext);

	/*
	 * The executor's state of an UPDATE of the table that sets these columns:
	 * its indexes decide by them which of their new entries are for a changed
	 * key (index_unchanged_by_update), and a failed check would name them.
	 */
	for (size_t i = 0; i < lengthof(cq_claim_sets); i++)
		updated = bms_add_member(updated,
								 CQ_JOB_COLUMN(&col, cq_claim_sets[i]) -
								 FirstLowInvalidHeapAttributeNumber);
	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = job_oid;
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = RowExclusiveLock;
	estate = CreateExecutorState();
#if PG_VERSION_NUM >= 160000
	{
		RTEPermissionInfo *perminfo = makeNode(RTEPermissionInfo);

		perminfo->relid = job_oid;
		perminfo->requiredPerms = ACL_UPDATE;
		perminfo->updatedCols = updated;
		rte->perminfoindex = 1;
		ExecInitRangeTable(estate, list_make1(rte), list_make1(perminfo),
						   bms_make_singleton(1));
	}
#else
	rte->requiredPerms = ACL_UPDATE;
	rte->updatedCols = updated;
	ExecInitRangeTable(estate, list_make1(rte));
#endif
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, false);

	scanslot = table_slot_create(rel, NULL);
	lockslot = table_slot_create(rel, NULL);
	newslot = MakeSingleTupleTableSlot(tupdesc, &TTSOpsHeapTuple);
	values = palloc(natts * sizeof(Datum));
	nulls = palloc(natts * sizeof(bool));
	replace = palloc0(natts * sizeof(bool));

	/*
	 * The ready index's entries of the queue at priority 0 from the floor,
	 * (run_at, job_id) >= (floor's), to the last due now: the row comparison
	 * starts the scan at the floor itself, where a bound on run_at alone
	 * would step over every job of the floor's run_at claimed before it.
	 */
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(queue->queue_id));
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
				TimestampTzGetDatum(now));
#if PG_VERSION_NUM >= 180000
	scan = index_beginscan(rel, idx, snapshot, NULL, 4, 0);
#else
	scan = index_beginscan(rel, idx, snapshot, 4, 0);
#endif
	index_rescan(scan, keys, 4, NULL, 0);

	/*
	 * First lock the batch, as the statement's LockRows does before its
	 * UPDATE runs, so that the rows are held for as short a time as a
	 * statement holds them before they are claimed: a claim preempted half
	 * way does not leave the rest of its range to the claims behind it.
	 */
	*all_picked = true;
	picked = palloc(Min(max_jobs, 1024) * sizeof(HeapTuple));
	npicked_max = Min(max_jobs, 1024);
	while (npicked < max_jobs &&
		   index_getnext_slot(scan, ForwardScanDirection, scanslot))
	{
		TM_FailureData tmfd;
		TM_Result	res;

		CHECK_FOR_INTERRUPTS();
		res = table_tuple_lock(rel, &scanslot->tts_tid, snapshot, lockslot,
							   cid, LockTupleExclusive, LockWaitSkip,
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
			*all_picked = false;
			continue;
		}
		if (npicked == npicked_max)
		{
			npicked_max *= 2;
			picked = repalloc(picked, npicked_max * sizeof(HeapTuple));
		}
		picked[npicked++] = ExecCopySlotHeapTuple(lockslot);
	}

	/* Then claim them. */
	for (int i = 0; i < npicked; i++)
	{
		HeapTuple	oldtup = picked[i];
		HeapTuple	newtup;
		TimestampTz run_at;
		Datum		ret[lengthof(cq_claim_returns)];
		bool		retnull[lengthof(cq_claim_returns)];
#if PG_VERSION_NUM >= 160000
		TU_UpdateIndexes update_indexes;
#else
		bool		update_indexes;
#endif

		heap_deform_tuple(oldtup, tupdesc, values, nulls);
		run_at = DatumGetTimestampTz(values[col.run_at - 1]);
		memset(replace, 0, natts * sizeof(bool));
		values[col.state - 1] = state_value;
		replace[col.state - 1] = true;
		if (start)
		{
			values[col.attempts - 1] =
				Int32GetDatum(DatumGetInt32(values[col.attempts - 1]) + 1);
			replace[col.attempts - 1] = true;
		}
		values[col.token - 1] = Int64GetDatum(token_epoch +
											  nextval_internal(seq_oid, true));
		nulls[col.token - 1] = false;
		replace[col.token - 1] = true;
		values[col.worker - 1] = worker;
		nulls[col.worker - 1] = worker_null;
		replace[col.worker - 1] = true;
		values[col.claimed_at - 1] = TimestampTzGetDatum(now);
		nulls[col.claimed_at - 1] = false;
		replace[col.claimed_at - 1] = true;
		values[col.expires_at - 1] = TimestampTzGetDatum(expires_at);
		nulls[col.expires_at - 1] = false;
		replace[col.expires_at - 1] = true;
		values[col.started_at - 1] = TimestampTzGetDatum(now);
		nulls[col.started_at - 1] = !start;
		replace[col.started_at - 1] = true;
		newtup = heap_modify_tuple(oldtup, tupdesc, values, nulls, replace);
		ExecStoreHeapTuple(newtup, newslot, true);
		ExecConstraints(rri, newslot, estate);
		simple_table_tuple_update(rel, &oldtup->t_self, newslot, snapshot,
								  &update_indexes);
#if PG_VERSION_NUM >= 160000
		if (update_indexes != TU_None)
			ExecInsertIndexTuples(rri, newslot, estate, true, false, NULL, NIL,
								  update_indexes == TU_Summarizing);
#else
		if (update_indexes)
			ExecInsertIndexTuples(rri, newslot, estate, true, false, NULL, NIL);
#endif

		for (size_t i = 0; i < lengthof(cq_claim_returns); i++)
		{
			AttrNumber	attnum = CQ_JOB_COLUMN(&col, cq_claim_returns[i]);

			ret[i] = values[attnum - 1];
			retnull[i] = nulls[attnum - 1];
		}
		tuplestore_putvalues(result, desc, ret, retnull);
		cq_note_claimed(call, queue->queue_id, start, now, run_at,
						DatumGetTimestampTz(values[col.enqueued_at - 1]));
		*last_run_at = run_at;
		*last_job_id = DatumGetInt64(values[col.job_id - 1]);
		claimed++;
		ResetPerTupleExprContext(estate);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(scanslot);
	ExecDropSingleTupleTableSlot(lockslot);
	ExecDropSingleTupleTableSlot(newslot);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
	index_close(idx, AccessShareLock);
	table_close(rel, NoLock);
	PopActiveSnapshot();
	UnregisterSnapshot(snapshot);
	CommandCounterIncrement();
	*nclaimed = claimed;
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
