/*-------------------------------------------------------------------------
 *
 * prune.c
 *		Retention: done, dead and cancelled jobs leave the table once they
 *		are older than their queue's keep_done or keep_dead (cancelled jobs
 *		are kept as long as dead ones).
 *
 * The background reclaimer prunes on every pass; without it, prune() can be
 * called from any scheduler (it sweeps expired key claims too).  Candidates
 * are found per queue and state through the partial index over finished jobs,
 * oldest first.  The DELETE re-checks that the row still has a finished_at,
 * which only done, dead and cancelled jobs have, so a dead job redriven by
 * retry_dead() meanwhile is not deleted.  (Re-checking the state instead would
 * invite the planner to scan that partial index in full rather than look the
 * ids up.)
 *
 * A job that jobs ran after (workflows) is kept until they are all
 * finished or removed: this pass leaves such jobs alone (the DELETE
 * re-checks that too, for a job an enqueue linked meanwhile) and
 * claimq.prune_after() prunes them, in sql/claimq.sql's section 8.  The
 * sets of jobs to run after that the jobs deleted named are forgotten.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_prune);

/*
 * Delete up to max_jobs done, dead and cancelled jobs past their
 * retention.  Returns how many were deleted.  The caller has connected SPI.
 */
uint64
cq_prune_finished(int32 max_jobs)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT4OID, TIMESTAMPTZOID};
	static SPIPlanPtr after_plan = NULL;
	Datum		values[2];
	CqLedgerCall call = {0};
	CqFinishes	finishes = {0};
	uint64		n = 0;
	bool		isnull;

	/*
	 * One branch per state, each with the state as a constant, so that each
	 * uses the partial index over finished jobs.
	 */
	cq_plan(&plan,
			"WITH pruned AS ("
			" DELETE FROM claimq.job j"
			" WHERE j.job_id = ANY (ARRAY("
			"   SELECT o.job_id"
			"     FROM claimq.queue q"
			"    CROSS JOIN LATERAL ("
			"      (SELECT f.job_id FROM claimq.job f"
			"        WHERE f.queue_id = q.queue_id AND f.state = 'done'"
			"          AND NOT f.dependents"
			"          AND f.finished_at < $2 - q.keep_done"
			"        ORDER BY f.finished_at LIMIT $1)"
			"      UNION ALL"
			"      (SELECT f.job_id FROM claimq.job f"
			"        WHERE f.queue_id = q.queue_id AND f.state = 'dead'"
			"          AND NOT f.dependents"
			"          AND f.finished_at < $2 - q.keep_dead"
			"        ORDER BY f.finished_at LIMIT $1)"
			"      UNION ALL"
			"      (SELECT f.job_id FROM claimq.job f"
			"        WHERE f.queue_id = q.queue_id AND f.state = 'cancelled'"
			"          AND NOT f.dependents"
			"          AND f.finished_at < $2 - q.keep_dead"
			"        ORDER BY f.finished_at LIMIT $1)) o"
			"    LIMIT $1))"
			"   AND j.finished_at IS NOT NULL AND NOT j.dependents"
			" RETURNING j.queue_id, j.state, j.after_set"
			")"
			" SELECT p.queue_id, p.state, pg_catalog.count(*),"
			"        pg_catalog.array_agg(DISTINCT p.after_set)"
			"          FILTER (WHERE p.after_set IS NOT NULL)"
			"   FROM pruned p GROUP BY p.queue_id, p.state",
			2, argtypes);
	values[0] = Int32GetDatum(max_jobs);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		CqMove		move;
		Datum		sets;

		cq_move_init(&move, DatumGetInt32(cq_spi_value(row, 1, &isnull)),
					 cq_state_of(cq_spi_value(row, 2, &isnull)), CQ_IS_ABSENT,
					 DatumGetInt64(cq_spi_value(row, 3, &isnull)));
		cq_ledger_note(&call, &move);
		n += move.n;
		sets = cq_spi_value(row, 4, &isnull);
		if (!isnull)
		{
			Datum	   *elems;
			int			nelems;

			deconstruct_array(DatumGetArrayTypeP(sets), INT8OID,
							  sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
							  &elems, NULL, &nelems);
			for (int i = 0; i < nelems; i++)
				cq_deleted_set(&finishes, DatumGetInt64(elems[i]));
		}
	}
	cq_ledger_close(&call);
	cq_finishes_settle(&finishes, true);

	/*
	 * The jobs that jobs ran after, with what is left of max_jobs (none on a
	 * distributed install, which has no workflows yet).
	 */
	if (n < (uint64) max_jobs && !cq_distributed())
	{
		cq_plan(&after_plan, "SELECT claimq.prune_after($1)", 1, argtypes);
		values[0] = Int32GetDatum(max_jobs - (int32) n);
		cq_execute(after_plan, values, NULL, SPI_OK_SELECT);
		n += DatumGetInt64(cq_spi_value(0, 1, &isnull));
	}

	/*
	 * The shares of fair queues' tenants that have no live job left
	 * (fair-share.sql): rows, not jobs, so not counted.  Shared memory
	 * (fair.c) reads the tenants again if it forgot any, or while (and once
	 * after) the database has prepared transactions, whose weights and queue
	 * changes no commit of this backend announces; it frees the sets of
	 * queues no longer fair or with priorities.
	 */
	if (!cq_distributed())
	{
		static SPIPlanPtr fair_plan = NULL;
		static SPIPlanPtr fair_ids_plan = NULL;

		static bool prepared_before = false;
		bool		prepared;

		cq_plan(&fair_plan,
				"SELECT claimq.fair_forget($1) > 0,"
				"       EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts p"
				"                WHERE p.database = pg_catalog.current_database())",
				1, argtypes);
		values[0] = Int32GetDatum(max_jobs);
		cq_execute(fair_plan, values, NULL, SPI_OK_SELECT);
		prepared = DatumGetBool(cq_spi_value(0, 2, &isnull));
		if (DatumGetBool(cq_spi_value(0, 1, &isnull)) || prepared ||
			prepared_before)
			cq_fair_note_changed();
		prepared_before = prepared;
		if (cq_fair_usable())
		{
			Datum		ids;
			Datum	   *elems = NULL;
			int			nelems = 0;
			int32	   *fair_ids;

			cq_plan(&fair_ids_plan,
					"SELECT pg_catalog.array_agg(q.queue_id) FROM claimq.queue q"
					" WHERE q.fair AND NOT q.prioritized", 0, NULL);
			cq_execute(fair_ids_plan, NULL, NULL, SPI_OK_SELECT);
			ids = cq_spi_value(0, 1, &isnull);
			if (!isnull)
				deconstruct_array(DatumGetArrayTypeP(ids), INT4OID, sizeof(int32),
								  true, TYPALIGN_INT, &elems, NULL, &nelems);
			fair_ids = palloc(Max(nelems, 1) * sizeof(int32));
			for (int i = 0; i < nelems; i++)
				fair_ids[i] = DatumGetInt32(elems[i]);
			cq_fair_sweep(fair_ids, nelems);
		}
	}
	return n;
}

/*
 * prune(max_jobs int DEFAULT 10000) returns bigint: what the reclaimer's
 * pass does besides reclaiming, for servers without it.  Deletes up to
 * max_jobs finished jobs and up to as many expired key claims, and
 * returns how many rows it deleted in all.
 */
Datum
claimq_prune(PG_FUNCTION_ARGS)
{
	int32		max_jobs;
	uint64		n;

	cq_require_primary(fcinfo);
	max_jobs = cq_int_arg(fcinfo, 0, "max_jobs", 1, CQ_MAX_BATCH);
	SPI_connect();
	n = cq_prune_finished(max_jobs) + cq_sweep_keys(max_jobs);
	SPI_finish();
	PG_RETURN_INT64((int64) n);
}
