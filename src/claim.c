/*-------------------------------------------------------------------------
 *
 * claim.c
 *		Working: claim(), the transition pending -> claimed (or straight to
 *		running with start => true).
 *
 * One statement finds, locks and claims the batch.  Ready jobs are taken
 * highest priority first, then earliest run_at, then lowest id, from the
 * partial index over pending jobs.  A scheduled job (run_at in the future)
 * sits in the same index behind the ready ones of its priority, so rather
 * than filter them out row by row the statement visits the distinct
 * priorities that have pending jobs (a loose index scan, one probe each)
 * and reads only the ready range of each, under FOR UPDATE SKIP LOCKED.
 * The cost is O(batch + priorities in use), whatever else the table holds.
 * Jobs that group limits hold back are not in the index at all, and the
 * queue-wide limits cut max_jobs down before the statement runs (limits.c).
 *
 * The probes walk the index backwards, lowest priority first, so that
 * each lands on the newest entries of a priority: the oldest ones are
 * where claimed jobs leave dead index entries until VACUUM, and a forward
 * probe would step over all of them on every call (the pick itself starts
 * there anyway).  The picked rows are updated through their ctid, which
 * the row lock keeps current, rather than looked up again by id.
 *
 * Every claimed job gets a token of its own (token.c), which later calls
 * about the job must present (see settle.c); a caller that mixes up two
 * ids of one batch is refused rather than settling the wrong job.
 *
 * With wait > 0 and nothing claimable, the call sleeps on its latch and
 * tries again, until it gets jobs or the wait is over.  Each try runs in a
 * subtransaction, rolled back when it claimed nothing: the statement can
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

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/resowner.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_claim);

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
 * Three statements, for what the queue uses.  A queue none of whose jobs
 * was ever enqueued at a priority other than 0 (claimq.queue.prioritized,
 * set by the first enqueue at another priority in the transaction that
 * makes it, sql/queue-changed.sql) has all its pending jobs at priority 0:
 * its claim takes them in order from its floor, with no walk of the
 * queue's priorities (two index probes, and the executor's start-up of a
 * plan three times the size: about 160,000 instructions of a claim of one
 * job).  Any other queue's claim walks its priorities, highest first, and
 * takes the ready jobs of each in order until it has max_jobs; a fair
 * queue's shares them between its tenants.
 */
static uint64
cq_claim_batch(CqQueue *queue, int32 max_jobs, Interval *lease,
			   Datum worker, bool worker_null, bool start,
			   Tuplestorestate *result, TupleDesc desc, long *refill_ms)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plain_plan = NULL;
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
	else if (queue->prioritized)
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
	else
		/* Every pending job at priority 0: no priorities to walk. */
		use = cq_plan(&plain_plan,
					  "WITH picked AS MATERIALIZED ("
					  "  SELECT j.ctid FROM claimq.job j"
					  "   WHERE j.queue_id = $1 AND j.state = 'pending' AND NOT j.held"
					  "     AND j.priority = 0 AND j.run_at <= $3"
					  "     AND (j.run_at, j.job_id) >= ($8, $9)"
					  "   ORDER BY j.run_at, j.job_id"
					  "   LIMIT $2"
					  "   FOR UPDATE SKIP LOCKED"
					  "), upd AS (" CQ_CLAIM_PICKED ")"
					  " SELECT u.job_id, u.token, u.payload, u.attempts, u.priority,"
					  "        u.enqueued_at, u.expires_at, u.headers, u.run_at, 0,"
					  "        (SELECT pg_catalog.count(*) FROM picked)"
					  "   FROM upd u"
					  "  ORDER BY u.run_at, u.job_id",
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

	call.counts.queue_name = queue->name;
	call.counts.named_queue_id = queue->queue_id;
	for (uint64 row = 0; row < claimed; row++)
	{
		Datum		rowvalues[11];
		bool		rownulls[11];
		CqMove		move;

		heap_deform_tuple(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						  rowvalues, rownulls);
		tuplestore_putvalues(result, desc, rowvalues, rownulls);
		cq_move_init(&move, queue->queue_id, CQ_IS_PENDING,
					 start ? CQ_IS_RUNNING : CQ_IS_CLAIMED, 1);
		move.counter = CQ_CLAIMED;
		/* Waiting since it became ready: run_at, or its enqueue if later. */
		move.latency = CQ_LATENCY_WAIT;
		move.latency_us = now - Max(DatumGetTimestampTz(rowvalues[8]),
									DatumGetTimestampTz(rowvalues[5]));
		cq_ledger_note(&call, &move);
	}
	cq_ledger_close(&call);
	if (claimed == 0)
	{
		cq_flow_spend(queue, &ticket, 0);
		return 0;
	}
	cq_tokens_durable();

	/*
	 * The last job claimed is the new floor if it is of the lowest priority
	 * with pending jobs, every picked row was claimed, and the snapshot was
	 * taken after the floor was read.  (A picked row goes unclaimed when
	 * transactions that committed after the snapshot claimed and released it;
	 * see floor.c.)
	 */
	if (!queue->fair && !IsolationUsesXactSnapshot() &&
		DatumGetInt64(cq_spi_value(claimed - 1, 11, &isnull)) == (int64) claimed &&
		DatumGetInt32(cq_spi_value(claimed - 1, 5, &isnull)) ==
		DatumGetInt32(cq_spi_value(claimed - 1, 10, &isnull)))
		cq_floor_raise(&floor,
					   DatumGetTimestampTz(cq_spi_value(claimed - 1, 9, &isnull)),
					   DatumGetInt64(cq_spi_value(claimed - 1, 1, &isnull)));
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
