/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *		Producing: enqueue() and enqueue_many(), the transition into
 *		"pending".
 *
 * Dedup is race-free because of the unique partial index over the dedup
 * keys of live jobs: the insert goes through ON CONFLICT DO NOTHING, which
 * waits for a concurrent inserter of the same key to finish.  When the
 * insert yields nothing, a second statement (with a fresh snapshot under
 * READ COMMITTED) reads the id of the live job that holds the key.  If
 * that job finished in between, the key is free again and the insert is
 * tried once more.
 *
 * A job's id is this server's node number (claimq.node_id) in the high
 * bits plus the next value of claimq.job_id_seq.
 *
 * Every enqueue holds its queue's producer lock in share mode (claimq.h),
 * so a job cannot be inserted into a queue that drop_queue is deleting.
 *
 * On a queue created with notify, every enqueue queues NOTIFY claimq with
 * the queue's name; PostgreSQL folds identical notifications of one
 * transaction into one, sent at commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "utils/builtins.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_enqueue);
PG_FUNCTION_INFO_V1(claimq_enqueue_many);

/* A live job's key cannot be freed and taken again forever; bound it. */
#define CQ_DEDUP_RETRIES	100

#define CQ_LIVE_STATES "'{pending,claimed,running}'::text[]"

/*
 * The arguments every enqueue shares.
 */
typedef struct CqEnqueueArgs
{
	CqQueue		queue;
	char	   *queue_name;
	TimestampTz now;
	Datum		run_at;			/* 0 when NULL: run at once */
	bool		run_at_null;
	int32		priority;
} CqEnqueueArgs;

static void
cq_enqueue_args(FunctionCallInfo fcinfo, CqEnqueueArgs *args)
{
	args->queue_name = cq_queue_name_arg(fcinfo, 0);
	args->run_at_null = PG_ARGISNULL(2);
	args->run_at = args->run_at_null ? (Datum) 0 : PG_GETARG_DATUM(2);
	cq_arg_not_null(fcinfo, 3, "priority");
	args->priority = PG_GETARG_INT32(3);
	args->now = GetCurrentTimestamp();
}

/*
 * Id of the live job of the queue that holds key, or 0 if none does.
 */
static int64
cq_live_job_for_key(int32 queue_id, Datum key)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	bool		isnull;

	cq_plan(&plan,
			"SELECT j.job_id FROM claimq.job j"
			" WHERE j.queue_id = $1 AND j.dedup_key = $2"
			"   AND j.state = ANY (" CQ_LIVE_STATES ")",
			2, argtypes);
	values[0] = Int32GetDatum(queue_id);
	values[1] = key;
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return 0;
	return DatumGetInt64(cq_spi_value(0, 1, &isnull));
}

/*
 * Insert one job, or find the live job holding its dedup key.  Returns the
 * job's id.
 */
static int64
cq_enqueue_one(CqEnqueueArgs *args, Datum payload, Datum key, bool key_null)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[7] = {INT4OID, INT4OID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, TEXTOID, JSONBOID, INT8OID};
	Datum		values[7];
	char		nulls[7] = "       ";
	bool		isnull;

	cq_plan(&plan,
			"INSERT INTO claimq.job AS j"
			" (job_id, queue_id, state, priority, run_at, enqueued_at,"
			"  dedup_key, payload)"
			" VALUES ($7 + pg_catalog.nextval('claimq.job_id_seq'),"
			"         $1, 'pending', $2, COALESCE($3, $4), $4, $5, $6)"
			" ON CONFLICT (queue_id, dedup_key)"
			"   WHERE dedup_key IS NOT NULL AND state = ANY (" CQ_LIVE_STATES ")"
			" DO NOTHING"
			" RETURNING j.job_id",
			7, argtypes);
	values[0] = Int32GetDatum(args->queue.queue_id);
	values[1] = Int32GetDatum(args->priority);
	values[2] = args->run_at;
	nulls[2] = args->run_at_null ? 'n' : ' ';
	values[3] = TimestampTzGetDatum(args->now);
	values[4] = key;
	nulls[4] = key_null ? 'n' : ' ';
	values[5] = payload;
	values[6] = Int64GetDatum(cq_job_id_base());

	for (int attempt = 0; attempt < CQ_DEDUP_RETRIES; attempt++)
	{
		int64		job_id;

		cq_execute(plan, values, nulls, SPI_OK_INSERT_RETURNING);
		if (SPI_processed == 1)
			return DatumGetInt64(cq_spi_value(0, 1, &isnull));

		/* Only a dedup conflict inserts nothing. */
		Assert(!key_null);
		job_id = cq_live_job_for_key(args->queue.queue_id, key);
		if (job_id != 0)
			return job_id;
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not enqueue into queue \"%s\": dedup key kept changing hands",
					args->queue_name),
			 errhint("Retry the transaction.")));
	return 0;					/* keep compiler quiet */
}

static void
cq_enqueue_notify(CqEnqueueArgs *args)
{
	cq_ready_on_commit(args->queue.queue_id,
					   args->run_at_null ? args->now :
					   DatumGetTimestampTz(args->run_at));
	if (args->queue.notify)
		Async_Notify("claimq", args->queue_name);
}

/*
 * enqueue(queue, payload, run_at, priority, dedup_key) returns bigint
 */
Datum
claimq_enqueue(PG_FUNCTION_ARGS)
{
	CqEnqueueArgs args;
	int64		job_id;

	cq_enqueue_args(fcinfo, &args);
	cq_arg_not_null(fcinfo, 1, "payload");

	cq_lock_producers(args.queue_name);
	SPI_connect();
	cq_require_queue(args.queue_name, &args.queue);
	job_id = cq_enqueue_one(&args, PG_GETARG_DATUM(1),
							PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4),
							PG_ARGISNULL(4));
	SPI_finish();

	cq_enqueue_notify(&args);
	PG_RETURN_INT64(job_id);
}

/*
 * enqueue_many(queue, payloads, run_at, priority, dedup_keys)
 * returns setof bigint, one id per payload in input order.
 *
 * All rows go in with one INSERT.  Ids are drawn before the insert so that
 * each input row knows its id whether or not the insert kept it; the rows
 * a dedup conflict dropped are then resolved one by one, which is the rare
 * path.
 *
 * The rows are inserted in dedup key order (then input order, so the first
 * of a repeated key wins), whatever the input order: an insert that meets
 * an uncommitted job with the same key waits for its transaction, and
 * producers that each took keys in their own order could wait for each
 * other.  In one order, whoever waits holds no key the other still needs.
 */
Datum
claimq_enqueue_many(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[7] = {INT4OID, JSONBARRAYOID, TEXTARRAYOID, INT4OID,
	TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID};
	Datum		values[7];
	char		nulls[7] = "       ";
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CqEnqueueArgs args;
	ArrayType  *payloads;
	ArrayType  *keys = NULL;
	int			npayloads;

	cq_enqueue_args(fcinfo, &args);
	payloads = cq_array_arg(fcinfo, 1, "payloads", false);
	npayloads = ArrayGetNItems(ARR_NDIM(payloads), ARR_DIMS(payloads));
	if (!PG_ARGISNULL(4))
	{
		keys = cq_array_arg(fcinfo, 4, "dedup_keys", true);
		if (ArrayGetNItems(ARR_NDIM(keys), ARR_DIMS(keys)) != npayloads)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("dedup_keys must have as many elements as payloads")));
	}

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	cq_lock_producers(args.queue_name);
	SPI_connect();
	cq_require_queue(args.queue_name, &args.queue);
	if (npayloads == 0)
	{
		SPI_finish();
		return (Datum) 0;
	}

	cq_plan(&plan,
			"WITH input AS MATERIALIZED ("
			"  SELECT u.ord, u.payload, u.dedup_key,"
			"         $7 + pg_catalog.nextval('claimq.job_id_seq') AS job_id"
			"    FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3))"
			"         WITH ORDINALITY"
			"         AS u(payload, dedup_key, ord)"
			"), ins AS ("
			"  INSERT INTO claimq.job AS j"
			"   (job_id, queue_id, state, priority, run_at, enqueued_at,"
			"    dedup_key, payload)"
			"  SELECT i.job_id, $1, 'pending', $4, COALESCE($5, $6), $6,"
			"         i.dedup_key, i.payload"
			"    FROM input i ORDER BY i.dedup_key COLLATE \"C\", i.ord"
			"  ON CONFLICT (queue_id, dedup_key)"
			"    WHERE dedup_key IS NOT NULL AND state = ANY (" CQ_LIVE_STATES ")"
			"  DO NOTHING"
			"  RETURNING j.job_id"
			")"
			" SELECT i.job_id, ins.job_id IS NOT NULL AS inserted,"
			"        i.dedup_key, i.payload"
			"   FROM input i LEFT JOIN ins ON ins.job_id = i.job_id"
			"  ORDER BY i.ord",
			7, argtypes);
	values[0] = Int32GetDatum(args.queue.queue_id);
	values[1] = PointerGetDatum(payloads);
	values[2] = keys ? PointerGetDatum(keys) : (Datum) 0;
	nulls[2] = keys ? ' ' : 'n';
	values[3] = Int32GetDatum(args.priority);
	values[4] = args.run_at;
	nulls[4] = args.run_at_null ? 'n' : ' ';
	values[5] = TimestampTzGetDatum(args.now);
	values[6] = Int64GetDatum(cq_job_id_base());
	cq_execute(plan, values, nulls, SPI_OK_SELECT);

	{
		SPITupleTable *tuptable = SPI_tuptable;
		uint64		nrows = SPI_processed;

		/* Resolving a conflict runs SPI again; keep this result. */
		SPI_tuptable = NULL;
		for (uint64 row = 0; row < nrows; row++)
		{
			bool		isnull;
			bool		inserted;
			Datum		job_id;

			job_id = SPI_getbinval(tuptable->vals[row], tuptable->tupdesc, 1,
								   &isnull);
			inserted = DatumGetBool(SPI_getbinval(tuptable->vals[row],
												  tuptable->tupdesc, 2,
												  &isnull));
			if (!inserted)
			{
				/* A live job holds the key: find it, or insert after all. */
				Datum		key = SPI_getbinval(tuptable->vals[row],
												tuptable->tupdesc, 3, &isnull);
				Datum		payload = SPI_getbinval(tuptable->vals[row],
													tuptable->tupdesc, 4,
													&isnull);

				job_id = Int64GetDatum(cq_enqueue_one(&args, payload, key,
													  false));
			}
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 &job_id, (bool[]) {false});
		}
		SPI_freetuptable(tuptable);
	}
	SPI_finish();

	cq_enqueue_notify(&args);
	return (Datum) 0;
}
