/*-------------------------------------------------------------------------
 *
 * reclaim.c
 *		Recovering: reclaim(), which puts expired claims back.
 *
 *		claimed, lease expired -> pending, no attempt counted (the handler
 *								  never ran), run_at unchanged
 *		running, lease expired -> the attempt counted at start failed:
 *								  pending after a backoff, or dead when no
 *								  attempts are left (the jobs waiting on a
 *								  job that died are judged, workflow.c)
 *
 * The expired rows are found through the partial index over leases (only
 * claimed and running jobs have one), oldest expiry first, and locked FOR
 * UPDATE SKIP LOCKED: a row its holder is settling right now is skipped,
 * to be looked at again on the next pass if it is still expired then.
 * Locking re-checks the row's latest version, and the UPDATE re-checks the
 * expiry once more under that lock, so a job completed, extended or
 * claimed again meanwhile is never overwritten.
 *
 * The same function serves SQL callers and the background reclaimer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_reclaim);

#define CQ_RECLAIM_DEAD \
	"(j.state = 'running'" \
	" AND j.attempts >= COALESCE(j.max_attempts, q.max_attempts))"

/*
 * Reclaim up to max_jobs expired claims of one queue (queue_id > 0) or of
 * every queue (queue_id = 0).  Appends one row (queue, released, retried,
 * dead) per queue with anything reclaimed to result, if given, and returns
 * the number of jobs reclaimed.  The caller has connected SPI.
 */
uint64
cq_reclaim_expired(int32 queue_id, int32 max_jobs,
				   Tuplestorestate *result, TupleDesc desc)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[3] = {INT4OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[3];
	uint64		total = 0;
	CqLedgerCall call = {0};
	CqFinishes	finishes = {0};
	SPITupleTable *tuptable;
	uint64		nrows;

	cq_plan(&plan,
			"WITH cand AS MATERIALIZED ("
			"  SELECT j.job_id FROM claimq.job j"
			"   WHERE j.expires_at < $3"
			"     AND ($1 = 0 OR j.queue_id = $1)"
			"   ORDER BY j.expires_at"
			"   LIMIT $2"
			"   FOR UPDATE SKIP LOCKED"
			"), upd AS ("
			"  UPDATE claimq.job j"
			"     SET state = CASE WHEN " CQ_RECLAIM_DEAD " THEN 'dead'"
			"                 ELSE 'pending' END,"
			"         run_at = CASE WHEN j.state = 'claimed' OR " CQ_RECLAIM_DEAD
			"                  THEN j.run_at"
			"                  ELSE $3 + " CQ_BACKOFF_SQL("j.attempts") " END,"
			"         finished_at = CASE WHEN " CQ_RECLAIM_DEAD " THEN $3 END,"
			"         last_error = CASE WHEN j.state = 'running'"
			"                      THEN 'lease expired' ELSE j.last_error END,"
			"         expires_at = NULL"
			"    FROM claimq.queue q"
			"   WHERE j.job_id = ANY (ARRAY(SELECT c.job_id FROM cand c))"
			"     AND j.expires_at < $3 AND q.queue_id = j.queue_id"
			"  RETURNING q.queue_id, q.name, j.state, j.run_at,"
			"            " CQ_HELD_STATE_SQL " AS held_as,"
			"            CASE WHEN q.group_limit IS NOT NULL OR q.group_fifo"
			"                 THEN j.group_key END AS group_key,"
			"            CASE WHEN j.state = 'dead' AND j.dependents"
			"                 THEN j.job_id END AS judge"
			")"

	/* A released job was claimed, a retried one running. */
			" SELECT u.queue_id, u.name,"
			"        pg_catalog.count(*) FILTER (WHERE u.state = 'pending'"
			"                                      AND u.held_as = 'claimed'),"
			"        pg_catalog.count(*) FILTER (WHERE u.state = 'pending'"
			"                                      AND u.held_as = 'running'),"
			"        pg_catalog.count(*) FILTER (WHERE u.state = 'dead'),"
			"        pg_catalog.min(u.run_at) FILTER (WHERE u.state = 'pending'),"
			"        pg_catalog.array_agg(DISTINCT u.group_key)"
			"          FILTER (WHERE u.group_key IS NOT NULL),"
			"        pg_catalog.array_agg(u.judge)"
			"          FILTER (WHERE u.judge IS NOT NULL)"
			"   FROM upd u GROUP BY u.queue_id, u.name ORDER BY u.name",
			3, argtypes);

	values[0] = Int32GetDatum(queue_id);
	values[1] = Int32GetDatum(max_jobs);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	tuptable = SPI_tuptable;
	nrows = SPI_processed;

	for (uint64 row = 0; row < nrows; row++)
	{
		Datum		rowvalues[8];
		bool		rownulls[8];
		int64		n;

		/*
		 * queue_id, then the result row: queue, released, retried, dead; then
		 * the earliest run_at made pending, the groups of jobs reclaimed in a
		 * queue with group limits, and the jobs that died with dependents
		 */
		heap_deform_tuple(tuptable->vals[row], tuptable->tupdesc,
						  rowvalues, rownulls);
		n = DatumGetInt64(rowvalues[2]) + DatumGetInt64(rowvalues[3]) +
			DatumGetInt64(rowvalues[4]);
		total += n;
		if (result)
			tuplestore_putvalues(result, desc, rowvalues + 1, rownulls + 1);
		/* The groups go with the first move of any jobs. */
		for (int m = 0; m < 3; m++)
		{
			CqMove		move;

			cq_move_init(&move, DatumGetInt32(rowvalues[0]),
						 m == 0 ? CQ_IS_CLAIMED : CQ_IS_RUNNING,
						 m == 2 ? CQ_IS_DEAD : CQ_IS_PENDING,
						 DatumGetInt64(rowvalues[2 + m]));
			move.counter = CQ_RECLAIMED;
			if (!rownulls[5])
				move.run_at = DatumGetTimestampTz(rowvalues[5]);
			if (!rownulls[6] && move.n > 0)
			{
				move.group_keys = rowvalues[6];
				rownulls[6] = true;
			}
			cq_ledger_note(&call, &move);
		}
		if (!rownulls[7])
		{
			Datum	   *elems;
			int			nelems;

			deconstruct_array(DatumGetArrayTypeP(rowvalues[7]), INT8OID,
							  sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
							  &elems, NULL, &nelems);
			for (int i = 0; i < nelems; i++)
				cq_finished_job(&finishes, DatumGetInt64(elems[i]));
		}
	}
	cq_ledger_close(&call);
	cq_finishes_settle(&finishes, false);
	return total;
}

/*
 * reclaim(queue text DEFAULT NULL, max_jobs int DEFAULT 10000)
 * returns table(queue, released, retried, dead)
 *
 * With a queue named, there is always exactly one row for it; without,
 * one row per queue that had expired claims.
 */
Datum
claimq_reclaim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *queue_name = NULL;
	int32		max_jobs;
	CqQueue		queue;
	uint64		total;

	cq_require_primary(fcinfo);
	if (!PG_ARGISNULL(0))
		queue_name = cq_queue_name_arg(fcinfo, 0);
	max_jobs = cq_int_arg(fcinfo, 1, "max_jobs", 1, CQ_MAX_BATCH);
	if (queue_name == NULL && cq_distributed())
		return cq_reclaim_every_queue(fcinfo, max_jobs);
	if (queue_name != NULL && cq_forward_wanted(queue_name))
		return cq_forward(fcinfo);

	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	if (queue_name)
		cq_require_queue(queue_name, &queue);
	total = cq_reclaim_expired(queue_name ? queue.queue_id : 0, max_jobs,
							   rsinfo->setResult, rsinfo->setDesc);
	if (queue_name && total == 0)
	{
		Datum		values[4] = {CStringGetTextDatum(queue_name),
		Int64GetDatum(0), Int64GetDatum(0), Int64GetDatum(0)};
		bool		nulls[4] = {false, false, false, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}
