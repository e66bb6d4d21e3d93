/*-------------------------------------------------------------------------
 *
 * cancel.c
 *		Job control: cancel(), the transition into "cancelled".
 *
 *		waiting | pending | claimed | running -> cancelled (terminal, kept
 *									   for the queue's keep_dead, then pruned)
 *
 * The jobs waiting on a job cancelled are judged in the same call
 * (workflow.c).
 *
 * A cancelled job leaves the index of live dedup keys, so its key is free
 * at once.  It keeps the token of the claim that held it, if one did: a
 * settle call of that holder then reports "cancelled" (settle.c) and
 * changes nothing, so the holder knows to stop.  A job cancelled while
 * pending forgets the token of any earlier claim, whose holder is told
 * "stale" as before.
 *
 * The statement locks each live job it cancels.  Under READ COMMITTED a
 * job that a concurrent complete, fail, snooze, reclaim or claim changes
 * first is re-checked after that transaction commits: still live, it is
 * cancelled (a claim that won keeps nothing); finished or gone, it is
 * reported so.  Exactly one of two racing transitions wins, and the loser
 * sees the winner's result.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_cancel);

/* A job that is live again at the second look is cancelled once more. */
#define CQ_CANCEL_TRIES	3

/*
 * Cancel the live jobs among ids ($1); $2 is the call's time.  Returns, for
 * each job cancelled, its id, queue, group key, the state it left (a
 * waiting job is the one with jobs to wait for left, a job cancelled while
 * pending loses its token, and a held one's is read off its started_at,
 * CQ_HELD_STATE_SQL) and whether jobs wait on it.
 */
static void
cq_cancel_live(Datum ids)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT8ARRAYOID, TIMESTAMPTZOID};
	Datum		values[2];

	cq_plan(&plan,
			"UPDATE claimq.job j"
			"   SET state = 'cancelled', finished_at = $2, expires_at = NULL,"
			"       token = CASE WHEN j.state = 'pending' THEN NULL"
			"               ELSE j.token END"
			" WHERE j.job_id = ANY ($1)"
			"   AND j.state = ANY (" CQ_LIVE_STATES ")"
			" RETURNING j.job_id, j.queue_id, j.group_key,"
			"           CASE WHEN j.after_count > 0 THEN 'waiting'"
			"                WHEN j.token IS NULL THEN 'pending'"
			"                ELSE " CQ_HELD_STATE_SQL " END,"
			"           j.dependents",
			2, argtypes);
	values[0] = ids;
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	cq_execute(plan, values, NULL, SPI_OK_UPDATE_RETURNING);
}

/*
 * The states of the jobs among ids ($1) as they are now.
 */
static void
cq_job_states(Datum ids)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT8ARRAYOID};
	Datum		values[1];

	cq_plan(&plan,
			"SELECT j.job_id, j.state FROM claimq.job j"
			" WHERE j.job_id = ANY ($1)",
			1, argtypes);
	values[0] = ids;
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
}

typedef struct CqCancelEntry
{
	int64		job_id;
	const char *outcome;		/* NULL until known */
	const char *state;
} CqCancelEntry;

/*
 * cancel(job_ids bigint[]) returns table(job_id, outcome, state)
 *
 * One row per input id, in input order: ok (state cancelled), finished
 * (already done, dead or cancelled; state says which) or missing.
 */
Datum
claimq_cancel(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *ids;
	Datum	   *idv;
	int			n;
	HASHCTL		ctl;
	HTAB	   *jobs;
	CqLedgerCall call = {0};
	CqFinishes	finishes = {0};
	CqInQueue	in_queue;
	Datum		elsewhere;

	cq_require_primary(fcinfo);
	ids = cq_job_ids_arg(fcinfo, 0);
	if (cq_answered_elsewhere(fcinfo, 1, -1, 0, &elsewhere))
		return elsewhere;
	cq_in_queue_begin(&in_queue, fcinfo, 1);
	deconstruct_array(ids, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &idv, NULL, &n);
	InitMaterializedSRF(fcinfo, 0);
	if (n == 0)
		PG_RETURN_VOID();

	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(CqCancelEntry);
	ctl.hcxt = CurrentMemoryContext;
	jobs = hash_create("claimq cancelled jobs", n, &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	for (int i = 0; i < n; i++)
	{
		int64		job_id = DatumGetInt64(idv[i]);
		bool		found;
		CqCancelEntry *entry = hash_search(jobs, &job_id, HASH_ENTER, &found);

		if (!found)
			entry->outcome = entry->state = NULL;
	}

	SPI_connect();
	cq_in_queue_jobs(&in_queue, PointerGetDatum(ids));
	for (int try = 0; try < CQ_CANCEL_TRIES; try++)
	{
		bool		live_again = false;

		cq_cancel_live(PointerGetDatum(ids));
		for (uint64 row = 0; row < SPI_processed; row++)
		{
			bool		isnull;
			int64		job_id = DatumGetInt64(cq_spi_value(row, 1, &isnull));
			int32		queue_id = DatumGetInt32(cq_spi_value(row, 2, &isnull));
			CqState		from = cq_state_of(cq_spi_value(row, 4, &isnull));
			Datum		group_key = cq_spi_value(row, 3, &isnull);
			CqCancelEntry *entry = hash_search(jobs, &job_id, HASH_FIND, NULL);
			CqMove		move;

			entry->outcome = "ok";
			entry->state = "cancelled";
			cq_move_init(&move, queue_id, from, CQ_IS_CANCELLED, 1);
			move.counter = CQ_CANCELLED;
			if (!isnull)
				move.group_key = group_key;
			cq_ledger_note(&call, &move);
			if (DatumGetBool(cq_spi_value(row, 5, &isnull)))
				cq_finished_job(&finishes, job_id);
		}
		/* A cancelled job frees its group's slot (groups.c). */
		cq_ledger_close(&call);

		/*
		 * Why the others were not cancelled, with a fresh snapshot: gone, or
		 * finished by someone else.  A job that is live now although the
		 * statement found it not live was made visible by a commit in
		 * between: cancel again.
		 */
		cq_job_states(PointerGetDatum(ids));
		for (uint64 row = 0; row < SPI_processed; row++)
		{
			bool		isnull;
			int64		job_id = DatumGetInt64(cq_spi_value(row, 1, &isnull));
			char	   *state = TextDatumGetCString(cq_spi_value(row, 2, &isnull));
			CqCancelEntry *entry = hash_search(jobs, &job_id, HASH_FIND, NULL);

			/* The state outlives SPI: keep a constant, not SPI's copy. */
			if (entry->outcome != NULL)
				continue;
			if (strcmp(state, "done") == 0)
				entry->state = "done";
			else if (strcmp(state, "dead") == 0)
				entry->state = "dead";
			else if (strcmp(state, "cancelled") == 0)
				entry->state = "cancelled";
			else
				live_again = true;
			if (entry->state)
				entry->outcome = "finished";
		}
		if (!live_again)
			break;
		if (try == CQ_CANCEL_TRIES - 1)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not cancel jobs that kept changing state"),
					 errhint("Retry the transaction.")));
	}
	cq_finishes_settle(&finishes, false);
	SPI_finish();

	for (int i = 0; i < n; i++)
	{
		int64		job_id = DatumGetInt64(idv[i]);
		CqCancelEntry *entry = hash_search(jobs, &job_id, HASH_FIND, NULL);
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = idv[i];
		values[1] = CStringGetTextDatum(entry->outcome ? entry->outcome : "missing");
		if (entry->state)
			values[2] = CStringGetTextDatum(entry->state);
		else
			nulls[2] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
