/*-------------------------------------------------------------------------
 *
 * settle.c
 *		Working: every call about a claimed job, fenced by its token.
 *
 *		start		claimed -> running (the attempt is counted here)
 *		extend		claimed | running -> same state, new expiry
 *		complete	claimed | running -> deleted, or done on a keep_done queue
 *					or when jobs run after it
 *		fail		claimed | running -> pending at a later run_at, or dead
 *		release		claimed -> pending (running jobs are left alone)
 *		snooze		claimed | running -> pending at now + delay, giving back
 *					the attempt that start counted
 *		release_worker	the same for every job a named worker holds claimed
 *
 * Each call takes arrays of (job_id, token) and settles the whole batch in
 * one statement.  The fence is part of that statement's WHERE clause: a row
 * changes only if it is still claimed or running under the very token
 * given.  Under READ COMMITTED a row that a concurrent reclaim or complete
 * changed first is re-checked against that clause after the other
 * transaction commits, so a stale holder can never overwrite a newer
 * claim.  Lease expiry alone does not void a token; only a transition made
 * by somebody else does.
 *
 * The call then reports one outcome per input pair, in input order: ok,
 * stale (held by another claim, or not claimed), started (release only:
 * the job is running under this token), cancelled (the job was cancelled
 * while this token held it: see cancel.c) or missing (no such job).  The
 * pairing of input to outcome is done here in C with the pair tables of
 * common.c (shared with keys.c), so a
 * batch of 10,000 costs O(n), whatever plan the planner would pick for
 * joining two unnested arrays of unknown size.  The scalar overloads run
 * the same statement for one pair and return whether it was settled.
 *
 * A job that finishes (complete, or fail to dead) with dependents has
 * them judged, and a deleted job's set of jobs to run after is forgotten,
 * in the same call (workflow.c); the statements return both per row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_start);
PG_FUNCTION_INFO_V1(claimq_extend);
PG_FUNCTION_INFO_V1(claimq_complete);
PG_FUNCTION_INFO_V1(claimq_fail);
PG_FUNCTION_INFO_V1(claimq_release);
PG_FUNCTION_INFO_V1(claimq_start_one);
PG_FUNCTION_INFO_V1(claimq_extend_one);
PG_FUNCTION_INFO_V1(claimq_complete_one);
PG_FUNCTION_INFO_V1(claimq_fail_one);
PG_FUNCTION_INFO_V1(claimq_release_one);
PG_FUNCTION_INFO_V1(claimq_snooze);
PG_FUNCTION_INFO_V1(claimq_snooze_one);
PG_FUNCTION_INFO_V1(claimq_release_worker);

/*
 * The input pairs, numbered; $1 job ids, $2 tokens, $3 the call's time.
 */
#define CQ_INPUT_SQL \
	"WITH input AS MATERIALIZED (" \
	"  SELECT i.job_id, i.token, i.ord" \
	"    FROM ROWS FROM (pg_catalog.unnest($1::bigint[])," \
	"                    pg_catalog.unnest($2::bigint[])) WITH ORDINALITY" \
	"         AS i(job_id, token, ord)" \
	") "

/*
 * The same with each pair's result: $4 results, NULL or one per pair.
 */
#define CQ_INPUT_RESULTS_SQL \
	"WITH input AS MATERIALIZED (" \
	"  SELECT i.job_id, i.token, i.result, i.ord" \
	"    FROM ROWS FROM (pg_catalog.unnest($1::bigint[])," \
	"                    pg_catalog.unnest($2::bigint[])," \
	"                    pg_catalog.unnest($4::jsonb[])) WITH ORDINALITY" \
	"         AS i(job_id, token, result, ord)" \
	") "

/*
 * The fence: job j is still held by the claim that issued the token.  The
 * planner reaches each job through its primary key, once per input pair.
 */
#define CQ_FENCE_SQL \
	" j.job_id = i.job_id AND j.token = i.token" \
	" AND j.state = ANY ('{claimed,running}'::text[]) "

/* The arguments a settle function takes after its pairs. */
typedef enum CqSettleArgs
{
	CQ_ARGS_NONE,				/* release */
	CQ_ARGS_LEASE,				/* start, extend: lease */
	CQ_ARGS_RESULTS,			/* complete: results */
	CQ_ARGS_FAIL,				/* fail: error, retry_in, permanent */
	CQ_ARGS_DELAY				/* snooze: delay */
} CqSettleArgs;

/*
 * Each statement changes the rows it may and returns, for each, the input
 * pair's number and the job's queue, followed by the operation's extra
 * result columns; then, by name, what the ledger is told of each job
 * moved: from_state and to_state (NULL: deleted), ready_at (its run_at,
 * if it was made pending), started_at (the start of a run that ended),
 * group_key (for the group limits), and for workflows judge (the id of a
 * job that finished with dependents) and forget (the set of jobs to run
 * after of a job deleted).  An update's RETURNING sees the new
 * row only: the state a held job left is told by its started_at, null
 * while claimed and set once running (claim.c and start keep that so);
 * start, which sets started_at, reads the state under the row lock
 * instead.  Pairs it does not return are told apart afterwards (see
 * cq_settle).
 */
typedef struct CqSettleOp
{
	const char *sql;
	CqSettleArgs args;			/* the call's arguments after the pairs */
	int			nextra;			/* parameters after $1..$3 */
	Oid			extratypes[3];
	int			ncols;			/* result columns: job_id, outcome, ... */
	bool		report_started; /* report a running job as "started" */
	int			spi_ok;			/* the statement's SPI result code */
	int			counter;		/* CqCounter of a settled pair, or -1 */
	SPIPlanPtr	plan;
	struct CqSettleOp *fallback;	/* run for the pairs left unsettled; its
									 * ncols is 2, as op's */
	bool		again;			/* run once more, with a new snapshot, for the
								 * pairs left unsettled (see
								 * cq_complete_all_op) */
} CqSettleOp;

/*
 * Start locks the jobs first, to read the state each leaves: a job started
 * again under its token stays running.  The update finds each locked row
 * by its id, so that a row changed since the statement's snapshot is
 * followed to the version locked.
 */
static CqSettleOp cq_start_op = {
	CQ_INPUT_SQL
	", held AS ("
	"  SELECT j.job_id, j.state, i.ord FROM claimq.job j, input i"
	"   WHERE" CQ_FENCE_SQL
	"     FOR UPDATE OF j"
	")"
	"UPDATE claimq.job j"
	"   SET state = 'running',"
	"       attempts = j.attempts"
	"                  + CASE WHEN j.state = 'claimed' THEN 1 ELSE 0 END,"
	"       started_at = CASE WHEN j.state = 'claimed' THEN $3"
	"                    ELSE j.started_at END,"
	"       expires_at = $3 + COALESCE($4, q.run_lease)"
	"  FROM held h, input i, claimq.queue q"
	" WHERE j.job_id = h.job_id AND i.ord = h.ord"
	"   AND" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	" RETURNING i.ord, j.queue_id, j.expires_at,"
	"           h.state AS from_state, 'running' AS to_state",
	CQ_ARGS_LEASE,
	1, {INTERVALOID}, 3, false, SPI_OK_UPDATE_RETURNING, CQ_STARTED, NULL, NULL,
	false
};

static CqSettleOp cq_extend_op = {
	CQ_INPUT_SQL
	"UPDATE claimq.job j"
	"   SET expires_at = $3 + COALESCE($4, CASE WHEN j.state = 'claimed'"
	"                                      THEN q.lease ELSE q.run_lease END)"
	"  FROM input i, claimq.queue q"
	" WHERE" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	" RETURNING i.ord, j.queue_id, j.expires_at",
	CQ_ARGS_LEASE,
	1, {INTERVALOID}, 3, false, SPI_OK_UPDATE_RETURNING, -1, NULL, NULL,
	false
};

/*
 * A completed job is deleted, unless its queue keeps done jobs.  While no
 * queue keeps done jobs (the usual case), complete runs one DELETE
 * (cq_complete_op) that deletes only while no queue keeps done jobs, and
 * the statement below (cq_complete_all_op) only for the pairs that one
 * left unsettled, which are stale, of a queue that keeps done jobs, or
 * have dependents (kept until those finish: see sql/claimq.sql, section
 * 8); a backend that has seen a job kept runs the statement below at once
 * from then on.  The statement below splits the jobs by their queue's
 * setting, and skips the deleting branches not taken outright (one-time
 * filters on the single look at claimq.queue).  A kept job keeps its
 * result.  (One
 * statement of three branches costs a claim-and-complete transaction of
 * one job 14% more instructions than the lone DELETE, most of it in
 * building the executor's state of the branches not taken.)
 *
 * Which branch takes a job is decided on the statement's snapshot, and an
 * enqueue "after" the job may commit dependents = true into it while the
 * statement waits for its lock: the deleting branch then re-checks the
 * new version and leaves it, and the keeping branch, which did not pick
 * it in the snapshot, never looks at it.  So the statement runs once more
 * for the pairs it left (again), with a new snapshot, in which the job
 * has dependents for good (nothing takes them away): the holder's complete
 * succeeds (test/specs/workflow-complete-waits.spec).  A pair that is
 * really stale costs that second statement.
 */
static CqSettleOp cq_complete_all_op = {
	CQ_INPUT_RESULTS_SQL
	", keeping AS MATERIALIZED ("
	"  SELECT COALESCE(pg_catalog.bool_or(k.keep_done > '0'::interval), false)"
	"         AS any FROM claimq.queue k"
	"), del AS ("
	"  DELETE FROM claimq.job j"
	"   USING input i"
	"   WHERE" CQ_FENCE_SQL
	"     AND NOT (SELECT k.any FROM keeping k) AND NOT j.dependents"
	"  RETURNING i.ord, j.queue_id, j.started_at, j.group_key,"
	"            j.state AS from_state, NULL::text AS to_state,"
	"            NULL::bigint AS judge, j.after_set AS forget"
	"), del_some AS ("
	"  DELETE FROM claimq.job j"
	"   USING input i, claimq.queue q"
	"   WHERE" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	"     AND q.keep_done <= '0'::interval AND NOT j.dependents"
	"     AND (SELECT k.any FROM keeping k)"
	"  RETURNING i.ord, j.queue_id, j.started_at, j.group_key,"
	"            j.state AS from_state, NULL::text AS to_state,"
	"            NULL::bigint AS judge, j.after_set AS forget"
	"), kept AS ("
	"  UPDATE claimq.job j"
	"     SET state = 'done', finished_at = $3, expires_at = NULL,"
	"         result = i.result"
	"    FROM input i, claimq.queue q"
	"   WHERE" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	"     AND (j.dependents OR ((SELECT k.any FROM keeping k)"
	"                           AND q.keep_done > '0'::interval))"
	"  RETURNING i.ord, j.queue_id, j.started_at, j.group_key,"
	"            " CQ_HELD_STATE_SQL " AS from_state, 'done' AS to_state,"
	"            CASE WHEN j.dependents THEN j.job_id END AS judge,"
	"            NULL::bigint AS forget"
	")"
	" SELECT * FROM del UNION ALL SELECT * FROM del_some"
	" UNION ALL SELECT * FROM kept",
	CQ_ARGS_RESULTS,
	1, {JSONBARRAYOID}, 2, false, SPI_OK_SELECT, CQ_COMPLETED, NULL, NULL,
	true
};

static CqSettleOp cq_complete_op = {
	CQ_INPUT_RESULTS_SQL
	"DELETE FROM claimq.job j"
	" USING input i"
	" WHERE" CQ_FENCE_SQL
	"   AND NOT EXISTS (SELECT 1 FROM claimq.queue k"
	"                    WHERE k.keep_done > '0'::interval)"
	"   AND NOT j.dependents"
	" RETURNING i.ord, j.queue_id, j.started_at, j.group_key,"
	"           j.state AS from_state, NULL::text AS to_state,"
	"           j.after_set AS forget",
	CQ_ARGS_RESULTS,
	1, {JSONBARRAYOID}, 2, false, SPI_OK_DELETE_RETURNING, CQ_COMPLETED, NULL,
	&cq_complete_all_op, false
};

/* Whether this backend has seen a completed job kept (see above). */
static bool cq_seen_kept = false;

/*
 * Failing a claimed job counts the attempt (its handler ran); a running
 * job's attempt was counted at start.  $4 error, $5 retry_in, $6 permanent.
 * A job's own max_attempts, if it has one, overrides its queue's.
 */
#define CQ_FAIL_ATTEMPTS \
	"(j.attempts + CASE WHEN j.state = 'claimed' THEN 1 ELSE 0 END)"
#define CQ_FAIL_DEAD \
	"($6 OR " CQ_FAIL_ATTEMPTS " >= COALESCE(j.max_attempts, q.max_attempts))"

static CqSettleOp cq_fail_op = {
	CQ_INPUT_SQL
	"UPDATE claimq.job j"
	"   SET attempts = " CQ_FAIL_ATTEMPTS ","
	"       state = CASE WHEN " CQ_FAIL_DEAD " THEN 'dead' ELSE 'pending' END,"
	"       run_at = CASE WHEN " CQ_FAIL_DEAD " THEN j.run_at"
	"                ELSE $3 + COALESCE($5, " CQ_BACKOFF_SQL(CQ_FAIL_ATTEMPTS) ") END,"
	"       finished_at = CASE WHEN " CQ_FAIL_DEAD " THEN $3 END,"
	"       last_error = $4, expires_at = NULL"
	"  FROM input i, claimq.queue q"
	" WHERE" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	" RETURNING i.ord, j.queue_id, j.state,"
	"           CASE WHEN j.state = 'pending' THEN j.run_at END AS ready_at,"
	"           j.started_at, j.group_key,"
	"           " CQ_HELD_STATE_SQL " AS from_state, j.state AS to_state,"
	"           CASE WHEN j.state = 'dead' AND j.dependents"
	"                THEN j.job_id END AS judge",
	CQ_ARGS_FAIL,
	3, {TEXTOID, INTERVALOID, BOOLOID}, 4, false, SPI_OK_UPDATE_RETURNING,
	CQ_FAILED, NULL, NULL, false
};

/* Release touches claimed jobs only; a running one reports "started". */
static CqSettleOp cq_release_op = {
	CQ_INPUT_SQL
	"UPDATE claimq.job j"
	"   SET state = 'pending', expires_at = NULL"
	"  FROM input i"
	" WHERE j.job_id = i.job_id AND j.token = i.token"
	"   AND j.state = 'claimed'"
	" RETURNING i.ord, j.queue_id, j.run_at AS ready_at, j.group_key,"
	"           'claimed' AS from_state, 'pending' AS to_state",
	CQ_ARGS_NONE,
	0, {InvalidOid}, 2, true, SPI_OK_UPDATE_RETURNING, CQ_RELEASED, NULL, NULL,
	false
};

/*
 * Snooze puts the job back to pending at $3 + $4 (delay) and gives back
 * the attempt that start counted: a snooze is never a failure.
 */
static CqSettleOp cq_snooze_op = {
	CQ_INPUT_SQL
	"UPDATE claimq.job j"
	"   SET state = 'pending', run_at = $3 + $4, expires_at = NULL,"
	"       attempts = GREATEST(j.attempts"
	"                  - CASE WHEN j.state = 'running' THEN 1 ELSE 0 END, 0)"
	"  FROM input i"
	" WHERE" CQ_FENCE_SQL
	" RETURNING i.ord, j.queue_id, j.run_at AS ready_at, j.group_key,"
	"           " CQ_HELD_STATE_SQL " AS from_state, 'pending' AS to_state",
	CQ_ARGS_DELAY,
	1, {INTERVALOID}, 3, false, SPI_OK_UPDATE_RETURNING, CQ_SNOOZED, NULL, NULL,
	false
};

typedef struct CqJobEntry
{
	int64		job_id;
	int64		token;
	bool		running;
	bool		cancelled;
	int32		queue_id;
} CqJobEntry;

/* An int8[] of n elements, for a statement's parameter. */
static Datum
cq_int8_array(Datum *elems, int n)
{
	return PointerGetDatum(construct_array(elems, n, INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * Why a pair was not settled: look up the jobs of the unsettled pairs as
 * they are now.  Fills jobs (keyed by job_id); the caller has connected
 * SPI, and SPI_tuptable is overwritten.
 */
static HTAB *
cq_unsettled_jobs(int64 *ids, int nids)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT8ARRAYOID};
	Datum		values[1];
	HASHCTL		ctl;
	HTAB	   *jobs;
	Datum	   *elems = palloc(nids * sizeof(Datum));

	for (int i = 0; i < nids; i++)
		elems[i] = Int64GetDatum(ids[i]);
	values[0] = cq_int8_array(elems, nids);
	cq_plan(&plan,
			"SELECT j.job_id, j.token, j.state = 'running', j.queue_id,"
			"       j.state = 'cancelled'"
			"  FROM claimq.job j WHERE j.job_id = ANY ($1)",
			1, argtypes);
	cq_execute(plan, values, NULL, SPI_OK_SELECT);

	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(CqJobEntry);
	ctl.hcxt = CurrentMemoryContext;
	jobs = hash_create("claimq unsettled jobs", Max(SPI_processed, 1), &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		bool		isnull;
		int64		job_id = DatumGetInt64(cq_spi_value(row, 1, &isnull));
		CqJobEntry *entry = hash_search(jobs, &job_id, HASH_ENTER, NULL);
		Datum		token = cq_spi_value(row, 2, &isnull);

		entry->token = isnull ? 0 : DatumGetInt64(token);
		entry->running = DatumGetBool(cq_spi_value(row, 3, &isnull));
		entry->queue_id = DatumGetInt32(cq_spi_value(row, 4, &isnull));
		entry->cancelled = DatumGetBool(cq_spi_value(row, 5, &isnull));
	}
	return jobs;
}

/*
 * Tell the ledger what a settle statement did: one move per row (of the
 * op's statement's result, settled), and note each row's pair in rowof.
 */
static void
cq_settle_rows(CqSettleOp *op, SPITupleTable *settled, uint64 nsettled,
			   int *rowof, CqLedgerCall *call, TimestampTz now,
			   CqFinishes *finishes, Datum *ids, CqInQueue *in_queue)
{
	TupleDesc	tupdesc = settled->tupdesc;
	int			from_col = SPI_fnumber(tupdesc, "from_state");
	int			to_col = SPI_fnumber(tupdesc, "to_state");
	int			ready_col = SPI_fnumber(tupdesc, "ready_at");
	int			started_col = SPI_fnumber(tupdesc, "started_at");
	int			group_col = SPI_fnumber(tupdesc, "group_key");
	int			judge_col = SPI_fnumber(tupdesc, "judge");
	int			forget_col = SPI_fnumber(tupdesc, "forget");

	for (uint64 row = 0; row < nsettled; row++)
	{
		HeapTuple	tuple = settled->vals[row];
		bool		isnull;
		int64		ord = DatumGetInt64(SPI_getbinval(tuple, tupdesc, 1,
													  &isnull));
		int32		queue_id = DatumGetInt32(SPI_getbinval(tuple, tupdesc, 2,
														   &isnull));
		CqState		from;
		CqState		to;
		CqMove		move;
		Datum		value;

		rowof[ord - 1] = (int) row;
		cq_in_queue_job(in_queue, DatumGetInt64(ids[ord - 1]), queue_id);
		if (from_col <= 0)
			continue;			/* extend: no state changes */

		from = cq_state_of(SPI_getbinval(tuple, tupdesc, from_col, &isnull));
		value = SPI_getbinval(tuple, tupdesc, to_col, &isnull);
		to = isnull ? CQ_IS_ABSENT : cq_state_of(value);
		cq_move_init(&move, queue_id, from, to, 1);
		move.counter = op->counter;
		if (ready_col > 0)
		{
			value = SPI_getbinval(tuple, tupdesc, ready_col, &isnull);
			if (!isnull)
				move.run_at = DatumGetTimestampTz(value);
		}
		if (started_col > 0)
		{
			/* A started job's run: from start to complete or fail. */
			value = SPI_getbinval(tuple, tupdesc, started_col, &isnull);
			if (!isnull)
			{
				move.latency = CQ_LATENCY_RUN;
				move.latency_us = now - DatumGetTimestampTz(value);
			}
		}
		if (group_col > 0)
		{
			value = SPI_getbinval(tuple, tupdesc, group_col, &isnull);
			if (!isnull)
				move.group_key = value;
		}
		if (judge_col > 0)
		{
			value = SPI_getbinval(tuple, tupdesc, judge_col, &isnull);
			if (!isnull)
				cq_finished_job(finishes, DatumGetInt64(value));
		}
		if (forget_col > 0)
		{
			value = SPI_getbinval(tuple, tupdesc, forget_col, &isnull);
			if (!isnull)
				cq_deleted_set(finishes, DatumGetInt64(value));
		}
		cq_ledger_note(call, &move);
	}
}

/* Run one settle statement; its result is left in SPI_tuptable. */
static void
cq_settle_statement(CqSettleOp *op, Datum *values, const char *nulls)
{
	Oid			argtypes[6] = {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID};

	for (int i = 0; i < op->nextra; i++)
		argtypes[3 + i] = op->extratypes[i];
	cq_plan(&op->plan, op->sql, 3 + op->nextra, argtypes);
	cq_execute(op->plan, values, nulls, op->spi_ok);
}

/*
 * Run op over the n pairs (ids[i], tokens[i]) and report one outcome per
 * pair, in input order, into result (if given).  Returns how many pairs
 * were settled ("ok").  Every job found must be in the queue in_queue
 * names, if it names one.  The caller has connected SPI.
 *
 * The statement returns the numbers of the pairs it settled; an op with a
 * fallback runs it too, for the pairs it left (see cq_complete_op), and
 * the last of them that runs again does so once more (see
 * cq_complete_all_op).  A pair repeated in the input is settled once and
 * reported ok each time.
 * For every other pair one more statement reads the job as it is now: no
 * row is "missing", a job cancelled while the pair's token held it is
 * "cancelled", a running job under the pair's token is "started" (for
 * release), anything else "stale".  That read only explains a refusal; the
 * decision was made under lock by the statement itself.
 */
static uint64
cq_settle(CqSettleOp *op, Datum *ids, Datum *tokens, int n,
		  Datum *extra, const char *extranulls, CqInQueue *in_queue,
		  Tuplestorestate *result, TupleDesc desc)
{
	Datum		values[6];
	char		nulls[6] = "      ";
	SPITupleTable *settled;
	SPITupleTable *more[2] = {NULL, NULL};
	CqSettleOp *next[2];
	CqSettleOp *last;
	int			nnext = 0;
	uint64		nsettled;
	int		   *rowof = palloc(n * sizeof(int));
	int			nunsettled = 0;
	HTAB	   *jobs = NULL;
	CqLedgerCall call = {0};
	CqFinishes	finishes = {0};
	TimestampTz now = GetCurrentTimestamp();

	if (op->fallback && cq_seen_kept)
		op = op->fallback;
	Assert(op->fallback == NULL || (op->ncols == 2 && op->fallback->ncols == 2));
	Assert(!op->again || op->ncols == 2);
	for (int i = 0; i < op->nextra; i++)
	{
		values[3 + i] = extra[i];
		nulls[3 + i] = extranulls[i];
	}
	values[0] = cq_int8_array(ids, n);
	values[1] = cq_int8_array(tokens, n);
	values[2] = TimestampTzGetDatum(now);
	for (int i = 0; i < n; i++)
		rowof[i] = -1;

	cq_settle_statement(op, values, nulls);
	settled = SPI_tuptable;
	nsettled = SPI_processed;
	SPI_tuptable = NULL;		/* keep it across the statements below */
	cq_settle_rows(op, settled, nsettled, rowof, &call, now, &finishes,
				   ids, in_queue);

	/* The statements that follow for the pairs left, if any are. */
	if (op->fallback)
		next[nnext++] = op->fallback;
	last = nnext > 0 ? next[nnext - 1] : op;
	if (last->again)
		next[nnext++] = last;
	for (int k = 0; k < nnext && nsettled < (uint64) n; k++)
	{
		uint64		nmore;

		cq_settle_statement(next[k], values, nulls);
		more[k] = SPI_tuptable;
		nmore = SPI_processed;
		SPI_tuptable = NULL;
		cq_settle_rows(next[k], more[k], nmore, rowof, &call, now,
					   &finishes, ids, in_queue);
		if (nmore > 0)
			cq_seen_kept = true;
		nsettled += nmore;
	}

	for (int i = 0; i < n; i++)
		nunsettled += (rowof[i] < 0);

	if (nunsettled > 0)
	{
		HTAB	   *pairs = cq_pair_table("claimq settled pairs", nsettled);
		int64	   *unsettled = palloc(nunsettled * sizeof(int64));
		int			nleft = 0;

		/* Repeats of a settled pair are ok too. */
		for (int i = 0; i < n; i++)
			if (rowof[i] >= 0)
				cq_pair(pairs, NULL, DatumGetInt64(ids[i]),
						DatumGetInt64(tokens[i]), true)->value = rowof[i];
		for (int i = 0; i < n; i++)
		{
			CqPairEntry *entry;

			if (rowof[i] >= 0)
				continue;
			entry = cq_pair(pairs, NULL, DatumGetInt64(ids[i]),
							DatumGetInt64(tokens[i]), false);
			if (entry)
				rowof[i] = (int) entry->value;
			else
				unsettled[nleft++] = DatumGetInt64(ids[i]);
		}
		if (nleft > 0)
			jobs = cq_unsettled_jobs(unsettled, nleft);
	}

	for (int i = 0; i < n; i++)
	{
		Datum		outvalues[4];
		bool		outnulls[4];
		const char *outcome;

		outvalues[0] = ids[i];
		outnulls[0] = false;
		if (rowof[i] >= 0)
		{
			outcome = "ok";
			for (int col = 2; col < op->ncols; col++)
				outvalues[col] = SPI_getbinval(settled->vals[rowof[i]],
											   settled->tupdesc, col + 1,
											   &outnulls[col]);
		}
		else
		{
			int64		job_id = DatumGetInt64(ids[i]);
			CqJobEntry *job = hash_search(jobs, &job_id, HASH_FIND, NULL);

			if (job != NULL)
				cq_in_queue_job(in_queue, job_id, job->queue_id);
			if (job == NULL)
				outcome = "missing";
			else if (job->cancelled && job->token == DatumGetInt64(tokens[i]))
				outcome = "cancelled";
			else if (op->report_started && job->running &&
					 job->token == DatumGetInt64(tokens[i]))
				outcome = "started";
			else
			{
				outcome = "stale";
				cq_count_add(&call.counts, job->queue_id, CQ_STALE, 1);
			}
			for (int col = 2; col < op->ncols; col++)
				outnulls[col] = true;
		}
		if (result)
		{
			outvalues[1] = CStringGetTextDatum(outcome);
			outnulls[1] = false;
			tuplestore_putvalues(result, desc, outvalues, outnulls);
		}
	}
	cq_in_queue_end(in_queue);
	cq_ledger_close(&call);
	cq_finishes_settle(&finishes, false);
	SPI_freetuptable(settled);
	for (int k = 0; k < 2; k++)
		if (more[k])
			SPI_freetuptable(more[k]);
	return nsettled;
}

/*
 * Extra arguments of each operation, checked; argno is where they start.
 */
static void
cq_settle_extra(FunctionCallInfo fcinfo, CqSettleOp *op, int argno,
				Datum *extra, char *extranulls)
{
	if (op->args == CQ_ARGS_LEASE)
	{
		Interval   *lease = cq_lease_arg(fcinfo, argno, "lease", false);

		extra[0] = lease ? IntervalPGetDatum(lease) : (Datum) 0;
		extranulls[0] = lease ? ' ' : 'n';
	}
	else if (op->args == CQ_ARGS_FAIL)
	{
		extra[0] = PG_ARGISNULL(argno) ? (Datum) 0 : PG_GETARG_DATUM(argno);
		extranulls[0] = PG_ARGISNULL(argno) ? 'n' : ' ';
		{
			Interval   *retry_in = cq_delay_arg(fcinfo, argno + 1, "retry_in",
												true);

			extra[1] = retry_in ? IntervalPGetDatum(retry_in) : (Datum) 0;
			extranulls[1] = retry_in ? ' ' : 'n';
		}
		cq_arg_not_null(fcinfo, argno + 2, "permanent");
		extra[2] = PG_GETARG_DATUM(argno + 2);
		extranulls[2] = ' ';
	}
	else if (op->args == CQ_ARGS_DELAY)
	{
		cq_arg_not_null(fcinfo, argno, "delay");
		extra[0] = IntervalPGetDatum(cq_lease_arg(fcinfo, argno, "delay",
												  true));
		extranulls[0] = ' ';
	}
	else if (op->args == CQ_ARGS_RESULTS)
	{
		/* results: set by the caller, which knows the form */
		extra[0] = (Datum) 0;
		extranulls[0] = 'n';
	}
}

/*
 * complete's results argument (argno), if the function has one: the array
 * form takes NULL or one result per pair, the scalar form one result.
 * (Before ALTER EXTENSION claimq UPDATE to 0.4, complete has no such
 * argument.)
 */
static void
cq_complete_results(FunctionCallInfo fcinfo, int argno, int npairs,
					bool scalar, Datum *extra, char *extranulls)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return;
	if (scalar)
	{
		Datum		result = PG_GETARG_DATUM(argno);

		extra[0] = PointerGetDatum(construct_array(&result, 1, JSONBOID, -1,
												   false, TYPALIGN_INT));
	}
	else
	{
		ArrayType  *results = cq_array_arg(fcinfo, argno, "results", true);

		if (ArrayGetNItems(ARR_NDIM(results), ARR_DIMS(results)) != npairs)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("results must be null or have as many elements as job_ids")));
		extra[0] = PointerGetDatum(results);
	}
	extranulls[0] = ' ';
}

/*
 * Where an operation's trailing "queue" argument is: after the pairs and
 * the operation's own arguments, which are its statement's extra
 * parameters.
 */
#define CQ_SETTLE_QUEUE_ARGNO(op)	(2 + (op)->nextra)

/*
 * The array form: settle every (job_ids[i], tokens[i]) and return a row per
 * pair.
 */
static Datum
cq_settle_many(FunctionCallInfo fcinfo, CqSettleOp *op)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *ids;
	ArrayType  *tokens;
	Datum	   *idv;
	Datum	   *tokenv;
	int			n;
	int			ntokens;
	Datum		extra[3];
	char		extranulls[3];
	CqInQueue	in_queue;
	Datum		elsewhere;

	cq_require_primary(fcinfo);
	ids = cq_array_arg(fcinfo, 0, "job_ids", false);
	tokens = cq_array_arg(fcinfo, 1, "tokens", false);
	deconstruct_array(ids, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &idv, NULL, &n);
	deconstruct_array(tokens, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &tokenv, NULL, &ntokens);
	if (n != ntokens)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job_ids and tokens must have the same number of elements")));
	if (n > CQ_MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at most %d jobs can be settled in one call",
						CQ_MAX_BATCH)));
	cq_settle_extra(fcinfo, op, 2, extra, extranulls);
	if (op->args == CQ_ARGS_RESULTS)
		cq_complete_results(fcinfo, 2, n, false, extra, extranulls);
	if (cq_answered_elsewhere(fcinfo, CQ_SETTLE_QUEUE_ARGNO(op), -1, 0, &elsewhere))
		return elsewhere;
	cq_in_queue_begin(&in_queue, fcinfo, CQ_SETTLE_QUEUE_ARGNO(op));

	InitMaterializedSRF(fcinfo, 0);
	if (n == 0)
		return (Datum) 0;

	SPI_connect();
	cq_settle(op, idv, tokenv, n, extra, extranulls, &in_queue,
			  rsinfo->setResult, rsinfo->setDesc);
	SPI_finish();
	return (Datum) 0;
}

/*
 * The scalar form: settle (job_id, token) and return whether that was ok.
 */
static Datum
cq_settle_one(FunctionCallInfo fcinfo, CqSettleOp *op)
{
	Datum		id;
	Datum		token;
	Datum		extra[3];
	char		extranulls[3];
	uint64		settled;
	CqInQueue	in_queue;
	Datum		elsewhere;

	cq_require_primary(fcinfo);
	cq_arg_not_null(fcinfo, 0, "job_id");
	cq_arg_not_null(fcinfo, 1, "token");
	cq_settle_extra(fcinfo, op, 2, extra, extranulls);
	if (op->args == CQ_ARGS_RESULTS)
		cq_complete_results(fcinfo, 2, 1, true, extra, extranulls);
	if (cq_answered_elsewhere(fcinfo, CQ_SETTLE_QUEUE_ARGNO(op), -1, 0, &elsewhere))
		return elsewhere;
	cq_in_queue_begin(&in_queue, fcinfo, CQ_SETTLE_QUEUE_ARGNO(op));
	id = PG_GETARG_DATUM(0);
	token = PG_GETARG_DATUM(1);

	SPI_connect();
	settled = cq_settle(op, &id, &token, 1, extra, extranulls, &in_queue,
						NULL, NULL);
	SPI_finish();
	PG_RETURN_BOOL(settled > 0);
}

Datum
claimq_start(PG_FUNCTION_ARGS)
{
	return cq_settle_many(fcinfo, &cq_start_op);
}

Datum
claimq_extend(PG_FUNCTION_ARGS)
{
	return cq_settle_many(fcinfo, &cq_extend_op);
}

Datum
claimq_complete(PG_FUNCTION_ARGS)
{
	return cq_settle_many(fcinfo, &cq_complete_op);
}

Datum
claimq_fail(PG_FUNCTION_ARGS)
{
	return cq_settle_many(fcinfo, &cq_fail_op);
}

Datum
claimq_release(PG_FUNCTION_ARGS)
{
	return cq_settle_many(fcinfo, &cq_release_op);
}

Datum
claimq_snooze(PG_FUNCTION_ARGS)
{
	return cq_settle_many(fcinfo, &cq_snooze_op);
}

Datum
claimq_start_one(PG_FUNCTION_ARGS)
{
	return cq_settle_one(fcinfo, &cq_start_op);
}

Datum
claimq_extend_one(PG_FUNCTION_ARGS)
{
	return cq_settle_one(fcinfo, &cq_extend_op);
}

Datum
claimq_complete_one(PG_FUNCTION_ARGS)
{
	return cq_settle_one(fcinfo, &cq_complete_op);
}

Datum
claimq_fail_one(PG_FUNCTION_ARGS)
{
	return cq_settle_one(fcinfo, &cq_fail_op);
}

Datum
claimq_release_one(PG_FUNCTION_ARGS)
{
	return cq_settle_one(fcinfo, &cq_release_op);
}

Datum
claimq_snooze_one(PG_FUNCTION_ARGS)
{
	return cq_settle_one(fcinfo, &cq_snooze_op);
}

/*
 * release_worker(queue, worker) returns bigint: release every claimed, not
 * started job of the queue that the worker holds (graceful shutdown).  No
 * token is needed: the caller names the worker whose claims it gives up.
 */
Datum
claimq_release_worker(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	char	   *queue_name;
	CqQueue		queue;
	uint64		n;
	bool		isnull;
	CqLedgerCall call = {0};
	CqMove		move;

	cq_require_primary(fcinfo);
	queue_name = cq_queue_name_arg(fcinfo, 0);
	cq_arg_not_null(fcinfo, 1, "worker");

	SPI_connect();
	cq_require_queue(queue_name, &queue);
	cq_plan(&plan,
			"WITH released AS ("
			"  UPDATE claimq.job j SET state = 'pending', expires_at = NULL"
			"   WHERE j.queue_id = $1 AND j.worker = $2 AND j.state = 'claimed'"
			"     AND j.expires_at IS NOT NULL"
			"  RETURNING j.group_key"
			")"
			" SELECT pg_catalog.count(*),"
			"        pg_catalog.array_agg(DISTINCT r.group_key)"
			"          FILTER (WHERE r.group_key IS NOT NULL)"
			"   FROM released r",
			2, argtypes);
	values[0] = Int32GetDatum(queue.queue_id);
	values[1] = PG_GETARG_DATUM(1);
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	n = DatumGetInt64(cq_spi_value(0, 1, &isnull));
	cq_move_init(&move, queue.queue_id, CQ_IS_CLAIMED, CQ_IS_PENDING, n);
	move.counter = CQ_RELEASED;
	move.group_keys = cq_spi_value(0, 2, &isnull);
	if (isnull || !cq_queue_groups_limited(&queue))
		move.group_keys = (Datum) 0;
	call.counts.queue_name = queue_name;
	call.counts.named_queue_id = queue.queue_id;
	cq_ledger_note(&call, &move);
	cq_ledger_close(&call);
	SPI_finish();
	PG_RETURN_INT64((int64) n);
}
