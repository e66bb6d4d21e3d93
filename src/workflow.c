/*-------------------------------------------------------------------------
 *
 * workflow.c
 *		Workflows: jobs that run after other jobs.
 *
 *		(new) -> waiting		an enqueue with "after" (enqueue.c inserts the
 *								job; its list is checked, locked and recorded
 *								here first)
 *		waiting -> pending | cancelled
 *								when the last of the jobs it runs after
 *								finishes, at the commit of the transaction
 *								of that finish
 *
 * The rules live in one place, section 8 of sql/claimq.sql, which both
 * editions share: this file is how the C paths call it.  A path that
 * finishes jobs (settle.c's complete and fail, cancel.c, reclaim.c) or
 * deletes them (settle.c's complete, prune.c) notes, from the same
 * statement's rows, the jobs that have dependents and the sets of jobs to
 * run after that the deleted jobs named; cq_finishes_settle() then hands
 * the jobs to claimq.judge_dependents, which has their dependents judged
 * at the transaction's commit (with every other finish of it, in id
 * order: a deferred trigger, the same in both editions), and forgets the
 * sets in the same call.  A job without dependents and without "after"
 * notes nothing, so a call that finishes only such jobs runs no statement
 * here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "claimq.h"

/*
 * An enqueue's after (argno) and after_failed (argno + 1), if the function
 * has them: after_failed must be cancel or run, whether or not after is
 * given (22004, 22023); an empty after is no after.  The elements of after
 * are checked when it is linked.  (Before ALTER EXTENSION claimq UPDATE to
 * 0.7 the functions have no such arguments.)
 */
void
cq_after_args(FunctionCallInfo fcinfo, int argno, CqAfter *after)
{
	char	   *after_failed;

	memset(after, 0, sizeof(*after));
	if (PG_NARGS() <= argno + 1)
		return;
	cq_arg_not_null(fcinfo, argno + 1, "after_failed");
	after_failed = TextDatumGetCString(PG_GETARG_DATUM(argno + 1));
	if (strcmp(after_failed, "run") == 0)
		after->run = true;
	else if (strcmp(after_failed, "cancel") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("after_failed must be \"cancel\" or \"run\"")));
	if (!PG_ARGISNULL(argno))
	{
		ArrayType  *ids = PG_GETARG_ARRAYTYPE_P(argno);

		if (ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids)) > 0)
			after->ids = ids;
	}
}

/*
 * Link the listed jobs (claimq.link_after): raises their errors, locks
 * them, and records the set that the jobs of the enqueue will name.  The
 * caller has connected SPI.
 */
void
cq_after_link(CqAfter *after)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT8ARRAYOID};
	Datum		values[1];
	bool		isnull;

	Assert(after->ids != NULL);
	cq_plan(&plan,
			"SELECT l.set_id, l.unfinished, l.all_done"
			"  FROM claimq.link_after($1) l",
			1, argtypes);
	values[0] = PointerGetDatum(after->ids);
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	after->set_id = DatumGetInt64(cq_spi_value(0, 1, &isnull));
	after->unfinished = DatumGetInt32(cq_spi_value(0, 2, &isnull));
	after->all_done = DatumGetBool(cq_spi_value(0, 3, &isnull));
}

/*
 * The state the enqueue's jobs start in: waiting while a listed job is
 * unfinished, else judged at once: pending if all of them ended done (or
 * after_failed is run), cancelled if not.  Without after, pending.
 */
const char *
cq_after_state(const CqAfter *after)
{
	if (after->ids == NULL)
		return "pending";
	if (after->unfinished > 0)
		return "waiting";
	if (after->all_done || after->run)
		return "pending";
	return "cancelled";
}

/* The enqueue inserted no job (a dedup key matched): its set goes. */
void
cq_after_unlink(CqAfter *after)
{
	CqFinishes	finishes = {0};

	cq_deleted_set(&finishes, after->set_id);
	cq_finishes_settle(&finishes, true);
}

/* Append a value to a growing array of Datums. */
static void
cq_datum_append(Datum **elems, int *n, int *max, Datum value)
{
	if (*n == *max)
	{
		*max = Max(*max * 2, 16);
		*elems = *elems ? repalloc(*elems, *max * sizeof(Datum))
			: palloc(*max * sizeof(Datum));
	}
	(*elems)[(*n)++] = value;
}

/* A job with dependents finished, or was deleted. */
void
cq_finished_job(CqFinishes *finishes, int64 job_id)
{
	cq_datum_append(&finishes->jobs, &finishes->njobs, &finishes->maxjobs,
					Int64GetDatum(job_id));
}

/* A job that named the set was deleted. */
void
cq_deleted_set(CqFinishes *finishes, int64 set_id)
{
	cq_datum_append(&finishes->sets, &finishes->nsets, &finishes->maxsets,
					Int64GetDatum(set_id));
}

/*
 * Have the dependents of the jobs noted judged at the commit
 * (claimq.judge_dependents), and forget the sets that no job names any more
 * (claimq.forget_after): those noted, and, if the jobs noted were deleted,
 * those that named them.  Runs nothing when nothing was noted.  The caller has
 * connected SPI.
 */
void
cq_finishes_settle(CqFinishes *finishes, bool deleted)
{
	static SPIPlanPtr judge_plan = NULL;
	static SPIPlanPtr forget_plan = NULL;
	Oid			argtypes[2] = {INT8ARRAYOID, INT8ARRAYOID};
	Datum		values[2];
	Datum		jobs;

	if (finishes->njobs == 0 && finishes->nsets == 0)
		return;
	jobs = PointerGetDatum(construct_array(finishes->jobs, finishes->njobs,
										   INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	if (finishes->njobs > 0)
	{
		cq_plan(&judge_plan, "SELECT claimq.judge_dependents($1)",
				1, argtypes);
		values[0] = jobs;
		cq_execute(judge_plan, values, NULL, SPI_OK_SELECT);
	}
	if (finishes->nsets > 0 || (deleted && finishes->njobs > 0))
	{
		cq_plan(&forget_plan, "SELECT claimq.forget_after($1, $2)",
				2, argtypes);
		values[0] = PointerGetDatum(construct_array(finishes->sets,
													finishes->nsets,
													INT8OID, sizeof(int64),
													FLOAT8PASSBYVAL,
													TYPALIGN_DOUBLE));
		values[1] = deleted ? jobs
			: PointerGetDatum(construct_empty_array(INT8OID));
		cq_execute(forget_plan, values, NULL, SPI_OK_SELECT);
	}
	finishes->njobs = finishes->nsets = 0;
}
