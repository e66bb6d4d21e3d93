/*-------------------------------------------------------------------------
 *
 * settle.c
 *		Working: every call about a claimed job, fenced by its token.
 *
 *		start		claimed -> running (the attempt is counted here)
 *		extend		claimed | running -> same state, new expiry
 *		complete	claimed | running -> deleted, or done on a keep_done queue
 *		fail		claimed | running -> pending at a later run_at, or dead
 *		release		claimed -> pending (running jobs are left alone)
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
 * The statement then reports one outcome per input pair, in input order:
 * ok, stale (held by another claim, or not claimed), started (release
 * only: the job is running under this token) or missing (no such job).
 * The scalar overloads run the same statement for one pair and return
 * whether its outcome was ok.
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

/*
 * The input pairs, numbered; $1 job ids, $2 tokens, $3 the call's time.
 */
#define CQ_INPUT_SQL \
	"WITH input AS MATERIALIZED (" \
	"  SELECT i.job_id, i.token, i.ord" \
	"    FROM ROWS FROM (pg_catalog.unnest($1::bigint[])," \
	"                    pg_catalog.unnest($2::bigint[])) WITH ORDINALITY" \
	"         AS i(job_id, token, ord)" \
	"), "

/* The fence: job j is still held by the claim that issued the token. */
#define CQ_FENCE_SQL \
	" j.job_id = i.job_id AND j.token = i.token" \
	" AND j.state = ANY ('{claimed,running}'::text[]) "

/*
 * One outcome row per input pair from the rows "upd" changed; j is the
 * job as it was before the call, which tells "missing" from "stale".
 */
#define CQ_OUTCOME_SQL(started, extra) \
	" SELECT i.job_id," \
	"        CASE WHEN u.job_id IS NOT NULL THEN 'ok'" \
	"             WHEN j.job_id IS NULL THEN 'missing'" \
	started \
	"             ELSE 'stale' END" \
	extra \
	"   FROM input i" \
	"   LEFT JOIN upd u ON u.job_id = i.job_id AND u.token = i.token" \
	"   LEFT JOIN claimq.job j ON j.job_id = i.job_id" \
	"  ORDER BY i.ord"

typedef struct CqSettleOp
{
	const char *sql;
	int			nextra;			/* parameters after $1..$3 */
	Oid			extratypes[3];
	int			ncols;			/* result columns */
	SPIPlanPtr	plan;
} CqSettleOp;

static CqSettleOp cq_start_op = {
	CQ_INPUT_SQL
	"upd AS ("
	"  UPDATE claimq.job j"
	"     SET state = 'running',"
	"         attempts = j.attempts"
	"                    + CASE WHEN j.state = 'claimed' THEN 1 ELSE 0 END,"
	"         expires_at = $3 + COALESCE($4, q.run_lease)"
	"    FROM input i, claimq.queue q"
	"   WHERE" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	"  RETURNING j.job_id, j.token, j.expires_at"
	")"
	CQ_OUTCOME_SQL("", ", u.expires_at"),
	1, {INTERVALOID}, 3, NULL
};

static CqSettleOp cq_extend_op = {
	CQ_INPUT_SQL
	"upd AS ("
	"  UPDATE claimq.job j"
	"     SET expires_at = $3 + COALESCE($4, CASE WHEN j.state = 'claimed'"
	"                                        THEN q.lease ELSE q.run_lease END)"
	"    FROM input i, claimq.queue q"
	"   WHERE" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	"  RETURNING j.job_id, j.token, j.expires_at"
	")"
	CQ_OUTCOME_SQL("", ", u.expires_at"),
	1, {INTERVALOID}, 3, NULL
};

/* A completed job is deleted, unless its queue keeps done jobs. */
static CqSettleOp cq_complete_op = {
	CQ_INPUT_SQL
	"del AS ("
	"  DELETE FROM claimq.job j"
	"   USING input i, claimq.queue q"
	"   WHERE" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	"     AND q.keep_done <= '0'::interval"
	"  RETURNING j.job_id, j.token"
	"), kept AS ("
	"  UPDATE claimq.job j"
	"     SET state = 'done', finished_at = $3, expires_at = NULL"
	"    FROM input i, claimq.queue q"
	"   WHERE" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	"     AND q.keep_done > '0'::interval"
	"  RETURNING j.job_id, j.token"
	"), upd AS (SELECT * FROM del UNION ALL SELECT * FROM kept)"
	CQ_OUTCOME_SQL("", ""),
	0, {InvalidOid}, 2, NULL
};

/*
 * Failing a claimed job counts the attempt (its handler ran); a running
 * job's attempt was counted at start.  $4 error, $5 retry_in, $6 permanent.
 */
#define CQ_FAIL_ATTEMPTS \
	"(j.attempts + CASE WHEN j.state = 'claimed' THEN 1 ELSE 0 END)"
#define CQ_FAIL_DEAD \
	"($6 OR " CQ_FAIL_ATTEMPTS " >= q.max_attempts)"

static CqSettleOp cq_fail_op = {
	CQ_INPUT_SQL
	"upd AS ("
	"  UPDATE claimq.job j"
	"     SET attempts = " CQ_FAIL_ATTEMPTS ","
	"         state = CASE WHEN " CQ_FAIL_DEAD " THEN 'dead' ELSE 'pending' END,"
	"         run_at = CASE WHEN " CQ_FAIL_DEAD " THEN j.run_at"
	"                  ELSE $3 + COALESCE($5, " CQ_BACKOFF_SQL(CQ_FAIL_ATTEMPTS) ") END,"
	"         finished_at = CASE WHEN " CQ_FAIL_DEAD " THEN $3 END,"
	"         last_error = $4, expires_at = NULL"
	"    FROM input i, claimq.queue q"
	"   WHERE" CQ_FENCE_SQL "AND q.queue_id = j.queue_id"
	"  RETURNING j.job_id, j.token, j.state,"
	"            CASE WHEN j.state = 'pending' THEN j.run_at END AS run_at"
	")"
	CQ_OUTCOME_SQL("", ", u.state, u.run_at"),
	3, {TEXTOID, INTERVALOID, BOOLOID}, 4, NULL
};

/* Release touches claimed jobs only; a running one reports "started". */
static CqSettleOp cq_release_op = {
	CQ_INPUT_SQL
	"upd AS ("
	"  UPDATE claimq.job j"
	"     SET state = 'pending', expires_at = NULL"
	"    FROM input i"
	"   WHERE j.job_id = i.job_id AND j.token = i.token"
	"     AND j.state = 'claimed'"
	"  RETURNING j.job_id, j.token"
	")"
	CQ_OUTCOME_SQL("             WHEN j.state = 'running' AND j.token = i.token"
				   "             THEN 'started'", ""),
	0, {InvalidOid}, 2, NULL
};

/*
 * Run op over the pairs in ids and tokens (already checked); the outcome
 * rows are left in SPI_tuptable.  The caller has connected SPI.
 */
static void
cq_settle(CqSettleOp *op, Datum ids, Datum tokens, Datum *extra,
		  const char *extranulls)
{
	Oid			argtypes[6] = {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID};
	Datum		values[6];
	char		nulls[6] = "      ";

	for (int i = 0; i < op->nextra; i++)
	{
		argtypes[3 + i] = op->extratypes[i];
		values[3 + i] = extra[i];
		nulls[3 + i] = extranulls[i];
	}
	cq_plan(&op->plan, op->sql, 3 + op->nextra, argtypes);
	values[0] = ids;
	values[1] = tokens;
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	cq_execute(op->plan, values, nulls, SPI_OK_SELECT);
}

/*
 * Extra arguments of each operation, checked; argno is where they start.
 */
static void
cq_settle_extra(FunctionCallInfo fcinfo, CqSettleOp *op, int argno,
				Datum *extra, char *extranulls)
{
	if (op == &cq_start_op || op == &cq_extend_op)
	{
		Interval   *lease = cq_lease_arg(fcinfo, argno, "lease", false);

		extra[0] = lease ? IntervalPGetDatum(lease) : (Datum) 0;
		extranulls[0] = lease ? ' ' : 'n';
	}
	else if (op == &cq_fail_op)
	{
		extra[0] = PG_ARGISNULL(argno) ? (Datum) 0 : PG_GETARG_DATUM(argno);
		extranulls[0] = PG_ARGISNULL(argno) ? 'n' : ' ';
		extranulls[1] = 'n';
		if (!PG_ARGISNULL(argno + 1))
		{
			Interval   *retry_in = PG_GETARG_INTERVAL_P(argno + 1);

			if (cq_interval_span(retry_in) < 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("retry_in must not be negative")));
			extra[1] = IntervalPGetDatum(retry_in);
			extranulls[1] = ' ';
		}
		cq_arg_not_null(fcinfo, argno + 2, "permanent");
		extra[2] = PG_GETARG_DATUM(argno + 2);
		extranulls[2] = ' ';
	}
}

/*
 * The array form: settle every (job_ids[i], tokens[i]) and return a row per
 * pair.
 */
static Datum
cq_settle_many(FunctionCallInfo fcinfo, CqSettleOp *op)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *ids = cq_array_arg(fcinfo, 0, "job_ids", false);
	ArrayType  *tokens = cq_array_arg(fcinfo, 1, "tokens", false);
	int			nids = ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids));
	Datum		extra[3];
	char		extranulls[3];

	if (nids != ArrayGetNItems(ARR_NDIM(tokens), ARR_DIMS(tokens)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job_ids and tokens must have the same number of elements")));
	if (nids > CQ_MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at most %d jobs can be settled in one call",
						CQ_MAX_BATCH)));
	cq_settle_extra(fcinfo, op, 2, extra, extranulls);

	InitMaterializedSRF(fcinfo, 0);
	if (nids == 0)
		return (Datum) 0;

	SPI_connect();
	cq_settle(op, PointerGetDatum(ids), PointerGetDatum(tokens),
			  extra, extranulls);
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		Datum		values[4];
		bool		nulls[4];

		heap_deform_tuple(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						  values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
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
	bool		ok;
	bool		isnull;
	char	   *outcome;

	cq_arg_not_null(fcinfo, 0, "job_id");
	cq_arg_not_null(fcinfo, 1, "token");
	cq_settle_extra(fcinfo, op, 2, extra, extranulls);
	id = PointerGetDatum(construct_array(&fcinfo->args[0].value, 1, INT8OID,
										 sizeof(int64), FLOAT8PASSBYVAL,
										 TYPALIGN_DOUBLE));
	token = PointerGetDatum(construct_array(&fcinfo->args[1].value, 1, INT8OID,
											sizeof(int64), FLOAT8PASSBYVAL,
											TYPALIGN_DOUBLE));

	SPI_connect();
	cq_settle(op, id, token, extra, extranulls);
	Assert(SPI_processed == 1);
	outcome = TextDatumGetCString(cq_spi_value(0, 2, &isnull));
	ok = strcmp(outcome, "ok") == 0;
	SPI_finish();
	PG_RETURN_BOOL(ok);
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
