/*-------------------------------------------------------------------------
 *
 * status.c
 *		Reading jobs' states: status() and wait_for().
 *
 * Both report, per input id and in input order, a job's queue, state,
 * attempts, run_at, finished_at, last_error and result, or NULLs for a
 * job that no longer exists.  They change nothing and lock nothing.
 *
 * wait_for() looks until every listed job is finished (done, dead,
 * cancelled or gone) or its timeout passes.  Each look takes a snapshot
 * of its own, so it sees commits made while it waits under any isolation
 * level.  With the preload it sleeps between looks until a transaction
 * that finished or removed jobs commits (wakeup.c).  A transaction that is
 * prepared wakes nobody, and COMMIT PREPARED runs none of claimq's commit
 * hooks; so where prepared transactions are possible
 * (max_prepared_transactions > 0), it also looks again at least every
 * CQ_WAKE_RECHECK_MS (one second), which bounds how late such a finish is
 * seen.  Where they are not, it never polls: a job finished behind
 * claimq's back (by plain SQL) is seen at the next wake-up or at the
 * timeout.  Without the preload it polls.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_status);
PG_FUNCTION_INFO_V1(claimq_wait_for);

#define CQ_STATUS_COLS		9

/*
 * Look at the jobs, with a snapshot taken now; the rows are left in
 * SPI_tuptable, in input order.  Returns whether every job is finished.
 */
static bool
cq_look(ArrayType *ids)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT8ARRAYOID};
	Datum		values[1];
	bool		finished = true;

	cq_plan(&plan,
			"SELECT i.job_id, q.name, j.state, j.attempts, j.run_at,"
			"       j.finished_at, j.last_error, j.result, j.headers,"
			"       j.state IS NULL"
			"       OR j.state = ANY ('{done,dead,cancelled}'::text[])"
			"  FROM ROWS FROM (pg_catalog.unnest($1::bigint[]))"
			"       WITH ORDINALITY AS i(job_id, ord)"
			"  LEFT JOIN claimq.job j ON j.job_id = i.job_id"
			"  LEFT JOIN claimq.queue q ON q.queue_id = j.queue_id"
			" ORDER BY i.ord",
			1, argtypes);
	values[0] = PointerGetDatum(ids);
	cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);

	for (uint64 row = 0; row < SPI_processed && finished; row++)
	{
		bool		isnull;

		finished = DatumGetBool(cq_spi_value(row, CQ_STATUS_COLS + 1, &isnull));
	}
	return finished;
}

/* Copy the rows of the last look into the function's result. */
static void
cq_put_look(ReturnSetInfo *rsinfo)
{
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		/* The statement's last column (finished) is not the caller's. */
		Datum		values[CQ_STATUS_COLS + 1];
		bool		nulls[CQ_STATUS_COLS + 1];

		heap_deform_tuple(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						  values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
}

/*
 * status(job_ids bigint[], queue text) returns table(job_id, queue, state,
 * attempts, run_at, finished_at, last_error, result)
 */
Datum
claimq_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *ids = cq_job_ids_arg(fcinfo, 0);
	CqInQueue	in_queue;
	Datum		elsewhere;

	if (cq_answered_elsewhere(fcinfo, 1, -1, 0, &elsewhere))
		return elsewhere;
	cq_in_queue_begin(&in_queue, fcinfo, 1);
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	cq_in_queue_jobs(&in_queue, PointerGetDatum(ids));
	(void) cq_look(ids);
	cq_put_look(rsinfo);
	SPI_finish();
	return (Datum) 0;
}

/*
 * wait_for(job_ids bigint[], timeout interval, queue text) returns the
 * same as status, once every job is finished or timeout has passed.
 */
Datum
claimq_wait_for(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *ids = cq_job_ids_arg(fcinfo, 0);
	TimestampTz deadline;
	long		poll_ms = CQ_POLL_MIN_MS;
	bool		waiting = false;
	CqInQueue	in_queue;
	Datum		elsewhere;

	cq_arg_not_null(fcinfo, 1, "timeout");
	deadline = cq_time_plus(GetCurrentTimestamp(),
							cq_lease_arg(fcinfo, 1, "timeout", true));

	/*
	 * On a distributed install a wait runs where its queue is: without one, a
	 * wait per queue of the jobs, in turn, each until what is left of the
	 * timeout.
	 */
	if (cq_answered_elsewhere(fcinfo, 2, 1, deadline, &elsewhere))
		return elsewhere;
	cq_in_queue_begin(&in_queue, fcinfo, 2);

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	cq_in_queue_jobs(&in_queue, PointerGetDatum(ids));
	PG_TRY();
	{
		for (;;)
		{
			if (cq_look(ids) || GetCurrentTimestamp() >= deadline)
				break;

			/*
			 * Publish the wait, then look once more before sleeping, so that
			 * a commit in between is seen one way or the other.
			 */
			SPI_freetuptable(SPI_tuptable);
			if (!waiting && (waiting = cq_wait_begin(CQ_WAIT_FINISHED)))
				continue;
			cq_wait_sleep(waiting,
						  max_prepared_xacts > 0 ? CQ_WAKE_RECHECK_MS : 0,
						  &poll_ms, deadline);
		}
	}
	PG_FINALLY();
	{
		cq_wait_end();
	}
	PG_END_TRY();
	cq_put_look(rsinfo);
	SPI_finish();
	return (Datum) 0;
}
