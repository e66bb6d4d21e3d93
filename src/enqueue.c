/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *		Producing: enqueue() and enqueue_many(), the transition into
 *		"pending", or "waiting" for the jobs listed in "after".
 *
 * Dedup is race-free because of the unique partial index over the dedup
 * keys of live jobs: the insert goes through ON CONFLICT DO NOTHING, which
 * waits for a concurrent inserter of the same key to finish.  When the
 * insert yields nothing, a second statement (with a fresh snapshot under
 * READ COMMITTED) reads the id of the live job that holds the key.  If
 * that job finished in between, the key is free again and the insert is
 * tried once more.
 *
 * Debounce (on_duplicate => 'replace'): when the key is held by a live
 * job, that job takes the call's payload, run_at, priority and (if given)
 * max_attempts, but only while it is pending.  The update re-checks
 * "pending" under the row's lock, so a job that a claim took meanwhile is
 * left alone, and a claim skips the job while the update holds it.
 *
 * A job's id is this server's node number (claimq.node_id) in the high
 * bits plus the next value of claimq.job_id_seq.
 *
 * On a queue with group limits, a job with a group key goes in held, after
 * its group's lock is taken (by a sync of its group before the insert),
 * and its group is synced afterwards, through the ledger.
 *
 * Every enqueue holds its queue's producer lock in share mode (claimq.h),
 * so a job cannot be inserted into a queue that drop_queue is deleting.
 *
 * With "after" (workflow.c), the listed jobs are checked, locked and
 * recorded as a set before anything is inserted; the jobs then go in
 * waiting while a listed job is unfinished, else judged at once: pending,
 * or cancelled (finished, its dedup key not held: a live job with the key
 * is looked for first, since the insert of a cancelled job meets no
 * conflict).  When a dedup key matches, the call's "after" is ignored and
 * its set forgotten.
 *
 * A job's headers (its trace context) are checked by the statement that
 * inserts it, through claimq.checked_headers (sql/check-headers.sql, the
 * one rule of both editions), and kept with the job as given; the server
 * never reads them.
 *
 * On a queue created with notify, every enqueue queues NOTIFY claimq with
 * the queue's name; PostgreSQL folds identical notifications of one
 * transaction into one, sent at commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_enqueue);
PG_FUNCTION_INFO_V1(claimq_enqueue_many);

/* A live job's key cannot be freed and taken again forever; bound it. */
#define CQ_DEDUP_RETRIES	100

/* Limits of the contract. */
#define CQ_MAX_JOB_ATTEMPTS	1000
#define CQ_MAX_GROUP_KEY	CQ_FAIR_KEY_MAX /* bytes */

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
	Datum		max_attempts;	/* 0 when NULL: the queue's */
	bool		max_attempts_null;
	bool		replace;		/* on_duplicate => 'replace' */
	CqAfter		after;			/* after, after_failed */
	const char *state;			/* the state the jobs start in */
	/* What the call did: */
	int64		inserted;		/* jobs inserted */
	bool		replaced;		/* a pending job took the call's run_at */
} CqEnqueueArgs;

static void cq_enqueue_fair(CqEnqueueArgs *args, Datum keys, bool keys_null);
static void cq_enqueue_fair_one(CqEnqueueArgs *args, Datum key, bool key_null);

/*
 * The arguments every enqueue shares: queue (0), run_at (2), priority (3),
 * max_attempts (5) and on_duplicate (6).  Before ALTER EXTENSION claimq
 * UPDATE to 0.4 the functions end after argument 4.
 */
static void
cq_enqueue_args(FunctionCallInfo fcinfo, CqEnqueueArgs *args)
{
	args->queue_name = cq_queue_name_arg(fcinfo, 0);
	args->run_at_null = PG_ARGISNULL(2);
	args->run_at = args->run_at_null ? (Datum) 0 : PG_GETARG_DATUM(2);
	cq_arg_not_null(fcinfo, 3, "priority");
	args->priority = PG_GETARG_INT32(3);
	args->now = GetCurrentTimestamp();
	args->max_attempts_null = true;
	args->max_attempts = (Datum) 0;
	args->replace = false;
	args->inserted = 0;
	args->replaced = false;
	if (PG_NARGS() > 6)
	{
		char	   *on_duplicate;

		if (!PG_ARGISNULL(5))
		{
			args->max_attempts_null = false;
			args->max_attempts =
				Int32GetDatum(cq_int_arg(fcinfo, 5, "max_attempts", 1,
										 CQ_MAX_JOB_ATTEMPTS));
		}
		cq_arg_not_null(fcinfo, 6, "on_duplicate");
		on_duplicate = TextDatumGetCString(PG_GETARG_DATUM(6));
		if (strcmp(on_duplicate, "replace") == 0)
			args->replace = true;
		else if (strcmp(on_duplicate, "keep") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("on_duplicate must be \"keep\" or \"replace\"")));
	}
	cq_after_args(fcinfo, 8, &args->after);
	args->state = "pending";
}

/*
 * The four parameters both inserts end with: the state the jobs start in,
 * then their after_set, after_count and after_failed (NULL without after).
 */
static void
cq_enqueue_state_values(CqEnqueueArgs *args, Datum *values, char *nulls)
{
	char		after_null = args->after.ids ? ' ' : 'n';

	values[0] = CStringGetTextDatum(args->state);
	nulls[0] = ' ';
	values[1] = Int64GetDatum(args->after.set_id);
	nulls[1] = after_null;
	values[2] = Int32GetDatum(args->after.unfinished);
	nulls[2] = ' ';
	values[3] = CStringGetTextDatum(args->after.run ? "run" : "cancel");
	nulls[3] = after_null;
}

/*
 * Raise 22023 unless a group key (not NULL) is at most CQ_MAX_GROUP_KEY
 * bytes long.
 */
static void
cq_check_group_key(Datum key, const char *argname)
{
	if (VARSIZE_ANY_EXHDR(DatumGetTextPP(key)) > CQ_MAX_GROUP_KEY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be at most %d bytes long", argname,
						CQ_MAX_GROUP_KEY)));
}

/*
 * Debounce: give the pending or waiting job of the queue that holds key
 * the call's payload, run_at, priority, headers (checked by the insert
 * that met the key) and max_attempts (a waiting job keeps its after list).
 * Returns its id, or 0 if the job holding the key is neither (or no job
 * does).
 */
static int64
cq_replace_pending(CqEnqueueArgs *args, Datum payload, Datum key,
				   Datum headers, bool headers_null)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[8] = {INT4OID, TEXTOID, JSONBOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INT4OID, INT4OID, JSONBOID};
	Datum		values[8];
	char		nulls[8] = "        ";
	bool		isnull;
	int64		job_id;

	cq_plan(&plan,
			"UPDATE claimq.job j"
			"   SET payload = $3, run_at = COALESCE($4, $5), priority = $6,"
			"       max_attempts = COALESCE($7, j.max_attempts), headers = $8"
			" WHERE j.queue_id = $1 AND j.dedup_key = $2"
			"   AND j.state = ANY ('{pending,waiting}'::text[])"
			" RETURNING j.job_id, j.group_key",
			8, argtypes);
	values[0] = Int32GetDatum(args->queue.queue_id);
	values[1] = key;
	values[2] = payload;
	values[3] = args->run_at;
	nulls[3] = args->run_at_null ? 'n' : ' ';
	values[4] = TimestampTzGetDatum(args->now);
	values[5] = Int32GetDatum(args->priority);
	values[6] = args->max_attempts;
	nulls[6] = args->max_attempts_null ? 'n' : ' ';
	values[7] = headers;
	nulls[7] = headers_null ? 'n' : ' ';
	cq_execute(plan, values, nulls, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed == 0)
		return 0;
	job_id = DatumGetInt64(cq_spi_value(0, 1, &isnull));
	/* Its own tenant, at the priority it took (fair-share.sql). */
	if (args->queue.fair)
	{
		Datum		group_key = cq_spi_value(0, 2, &isnull);

		cq_enqueue_fair_one(args, group_key, isnull);
	}
	return job_id;
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
 * Insert one job, or find the live job holding its dedup key (and, with
 * replace, update it while it is pending).  Returns the job's id.  The
 * headers are checked by claimq.checked_headers (sql/check-headers.sql).
 */
static int64
cq_enqueue_one(CqEnqueueArgs *args, Datum payload, Datum key, bool key_null,
			   Datum group_key, bool group_key_null,
			   Datum headers, bool headers_null)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[15] = {INT4OID, INT4OID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, TEXTOID, JSONBOID, INT8OID, INT4OID, TEXTOID, BOOLOID,
	TEXTOID, INT8OID, INT4OID, TEXTOID, JSONBOID};
	Datum		values[15];
	char		nulls[15] = "               ";
	bool		isnull;
	bool		cancelled = strcmp(args->state, "cancelled") == 0;

	cq_plan(&plan,
			"INSERT INTO claimq.job AS j"
			" (job_id, queue_id, state, priority, run_at, enqueued_at,"
			"  dedup_key, payload, max_attempts, group_key, held,"
			"  finished_at, after_set, after_count, after_failed, headers)"
			" VALUES ($7 + pg_catalog.nextval('claimq.job_id_seq'),"
			"         $1, $11, $2, COALESCE($3, $4), $4, $5, $6, $8, $9,"
			"         $10 AND $9 IS NOT NULL,"
			"         CASE WHEN $11 = 'cancelled' THEN $4 END, $12, $13, $14,"
			"         claimq.checked_headers($15, 'headers'))"
			" ON CONFLICT (queue_id, dedup_key)"
			"   WHERE dedup_key IS NOT NULL AND state = ANY (" CQ_LIVE_STATES ")"
			" DO NOTHING"
			" RETURNING j.job_id",
			15, argtypes);
	values[0] = Int32GetDatum(args->queue.queue_id);
	values[1] = Int32GetDatum(args->priority);
	values[2] = args->run_at;
	nulls[2] = args->run_at_null ? 'n' : ' ';
	values[3] = TimestampTzGetDatum(args->now);
	values[4] = key;
	nulls[4] = key_null ? 'n' : ' ';
	values[5] = payload;
	values[6] = Int64GetDatum(cq_job_id_base());
	values[7] = args->max_attempts;
	nulls[7] = args->max_attempts_null ? 'n' : ' ';
	values[8] = group_key;
	nulls[8] = group_key_null ? 'n' : ' ';
	values[9] = BoolGetDatum(cq_queue_groups_limited(&args->queue) &&
							 strcmp(args->state, "pending") == 0);
	cq_enqueue_state_values(args, values + 10, nulls + 10);
	values[14] = headers;
	nulls[14] = headers_null ? 'n' : ' ';

	for (int attempt = 0; attempt < CQ_DEDUP_RETRIES; attempt++)
	{
		int64		job_id;

		/* A cancelled job holds no key: a live job with it wins first. */
		if (cancelled && !key_null &&
			(job_id = cq_live_job_for_key(args->queue.queue_id, key)) != 0)
			return job_id;
		cq_execute(plan, values, nulls, SPI_OK_INSERT_RETURNING);
		if (SPI_processed == 1)
		{
			args->inserted++;
			return DatumGetInt64(cq_spi_value(0, 1, &isnull));
		}

		/* Only a dedup conflict inserts nothing. */
		Assert(!key_null);
		if (args->replace &&
			(job_id = cq_replace_pending(args, payload, key, headers,
										 headers_null)) != 0)
		{
			args->replaced = true;
			return job_id;
		}
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

/*
 * Look the queue up for an enqueue.  Under REPEATABLE READ the lookup sees
 * the transaction's snapshot; if the queue's group limits have changed
 * since, the job would go in held or free by the old ones, and if it was
 * made fair since, its tenant would have no share, which nothing would put
 * right: fail to serialize instead.
 *
 * A job at a priority other than 0 into a queue not marked as holding
 * such jobs marks it, in this transaction, so that claims walk the
 * queue's priorities from when they can see the job (queue-changed.sql).
 */
static void
cq_enqueue_queue(CqEnqueueArgs *args)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr mark_plan = NULL;
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	bool		isnull;

	cq_require_queue(args->queue_name, &args->queue);
	values[0] = Int32GetDatum(args->queue.queue_id);
	if (IsolationUsesXactSnapshot())
	{
		cq_plan(&plan,
				"SELECT COALESCE(q.group_limit, 0), q.group_fifo, q.fair,"
				"       q.prioritized"
				"  FROM claimq.queue q WHERE q.queue_id = $1",
				1, argtypes);
		cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);
		if (SPI_processed != 1 ||
			DatumGetInt32(cq_spi_value(0, 1, &isnull)) != args->queue.group_limit ||
			DatumGetBool(cq_spi_value(0, 2, &isnull)) != args->queue.group_fifo ||
			DatumGetBool(cq_spi_value(0, 3, &isnull)) != args->queue.fair)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to a concurrent change of queue \"%s\"",
							args->queue_name),
					 errhint("Retry the transaction.")));
		/* Marked since the snapshot: nothing to do. */
		if (DatumGetBool(cq_spi_value(0, 4, &isnull)))
			args->queue.prioritized = true;
	}
	if (args->priority != 0 && !args->queue.prioritized)
	{
		cq_plan(&mark_plan, "SELECT claimq.mark_prioritized($1)", 1, argtypes);
		cq_execute(mark_plan, values, NULL, SPI_OK_SELECT);
		args->queue.prioritized = true;
	}
}

/*
 * Before an enqueue into a fair queue: the rows of its jobs' tenants at
 * their priority (keys a text[], or NULL for the tenant of jobs without a
 * group key), held until the transaction ends (fair-share.sql).
 */
static void
cq_enqueue_fair(CqEnqueueArgs *args, Datum keys, bool keys_null)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[3] = {INT4OID, INT4OID, TEXTARRAYOID};
	Datum		values[3];
	char		nulls[3] = "   ";

	cq_plan(&plan,
			"SELECT claimq.fair_join($1, $2, COALESCE($3, ARRAY[NULL::text]))",
			3, argtypes);
	values[0] = Int32GetDatum(args->queue.queue_id);
	values[1] = Int32GetDatum(args->priority);
	values[2] = keys;
	nulls[2] = keys_null ? 'n' : ' ';
	cq_execute(plan, values, nulls, SPI_OK_SELECT);
}

/* cq_enqueue_fair for one tenant: key, or the jobs without one. */
static void
cq_enqueue_fair_one(CqEnqueueArgs *args, Datum key, bool key_null)
{
	cq_enqueue_fair(args, key_null ? (Datum) 0 :
					PointerGetDatum(construct_array(&key, 1, TEXTOID, -1,
													false, TYPALIGN_INT)),
					key_null);
}

/*
 * The end of an enqueue: the jobs inserted go to the ledger, which syncs
 * their groups (a text[], or 0) with the queue's group limits; a pending
 * job that took the call's run_at is claimable from then; and the queue's
 * listeners hear of it.  The caller has connected SPI.
 */
static void
cq_enqueue_done(CqEnqueueArgs *args, Datum groups)
{
	CqLedgerCall call = {0};
	CqMove		move;
	TimestampTz run_at = args->now;

	if (!args->run_at_null)
		run_at = DatumGetTimestampTz(args->run_at);

	cq_move_init(&move, args->queue.queue_id, CQ_IS_ABSENT,
				 cq_state_of(CStringGetTextDatum(args->state)),
				 args->inserted);
	move.run_at = run_at;
	if (move.to == CQ_IS_PENDING)
		move.group_keys = groups;
	if (move.to == CQ_IS_CANCELLED)
		move.counter = CQ_CANCELLED;
	cq_ledger_note(&call, &move);
	cq_ledger_close(&call);
	if (args->after.ids && args->inserted == 0)
		cq_after_unlink(&args->after);
	if (args->replaced)
		cq_made_ready(args->queue.queue_id, run_at);
	if (args->queue.notify)
		cq_notify(args->queue_name);
}

/*
 * Before an enqueue into limited groups (keys a text[]), sync them, so
 * that the new jobs go in held or free by the groups' current state; held
 * jobs the sync freed are ready at commit.
 */
static void
cq_enqueue_sync_groups(int32 queue_id, Datum keys)
{
	TimestampTz freed_at = cq_groups_sync_one(queue_id, keys);

	if (freed_at != DT_NOEND)
		cq_made_ready(queue_id, freed_at);
}

/*
 * enqueue(queue, payload, run_at, priority, dedup_key, max_attempts,
 * on_duplicate, group_key, after, after_failed, headers) returns bigint
 */
Datum
claimq_enqueue(PG_FUNCTION_ARGS)
{
	CqEnqueueArgs args;
	int64		job_id;
	bool		group_key_null = PG_NARGS() <= 7 || PG_ARGISNULL(7);
	bool		headers_null = PG_NARGS() <= 10 || PG_ARGISNULL(10);
	Datum		groups = (Datum) 0;

	cq_require_primary(fcinfo);
	cq_enqueue_args(fcinfo, &args);
	cq_arg_not_null(fcinfo, 1, "payload");
	if (!group_key_null)
		cq_check_group_key(PG_GETARG_DATUM(7), "group_key");
	if (cq_forward_wanted(args.queue_name))
		return cq_forward(fcinfo);

	cq_lock_producers(args.queue_name, false);
	SPI_connect();
	cq_enqueue_queue(&args);
	if (args.after.ids)
	{
		cq_after_link(&args.after);
		args.state = cq_after_state(&args.after);
	}
	if (args.queue.fair)
		cq_enqueue_fair_one(&args, group_key_null ? (Datum) 0 : PG_GETARG_DATUM(7),
							group_key_null);
	if (!group_key_null && cq_queue_groups_limited(&args.queue) &&
		strcmp(args.state, "pending") == 0)
	{
		groups = PointerGetDatum(construct_array(&PG_GETARG_DATUM(7), 1,
												 TEXTOID, -1, false,
												 TYPALIGN_INT));
		cq_enqueue_sync_groups(args.queue.queue_id, groups);
	}
	job_id = cq_enqueue_one(&args, PG_GETARG_DATUM(1),
							PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4),
							PG_ARGISNULL(4),
							group_key_null ? (Datum) 0 : PG_GETARG_DATUM(7),
							group_key_null,
							headers_null ? (Datum) 0 : PG_GETARG_DATUM(10),
							headers_null);
	cq_enqueue_done(&args, groups);
	SPI_finish();
	PG_RETURN_INT64(job_id);
}

/*
 * enqueue_many(queue, payloads, run_at, priority, dedup_keys, max_attempts,
 * on_duplicate, group_keys, after, after_failed, headers) returns setof
 * bigint, one id per payload in input order.
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
 *
 * The conflicts are resolved in input order, so that with replace the
 * last element of a repeated key is the one that stays.
 */
Datum
claimq_enqueue_many(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[15] = {INT4OID, JSONBARRAYOID, TEXTARRAYOID, INT4OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TEXTARRAYOID, INT4OID, BOOLOID,
	TEXTOID, INT8OID, INT4OID, TEXTOID, JSONBARRAYOID};
	Datum		values[15];
	char		nulls[15] = "               ";
	bool		sync;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CqEnqueueArgs args;
	ArrayType  *payloads;
	ArrayType  *keys = NULL;
	ArrayType  *group_keys = NULL;
	ArrayType  *headers = NULL;
	int			npayloads;

	cq_require_primary(fcinfo);
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
	if (PG_NARGS() > 7 && !PG_ARGISNULL(7))
	{
		Datum	   *elems;
		bool	   *elemnulls;
		int			nelems;

		group_keys = cq_array_arg(fcinfo, 7, "group_keys", true);
		deconstruct_array(group_keys, TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, &elemnulls, &nelems);
		if (nelems != npayloads)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("group_keys must have as many elements as payloads")));
		for (int i = 0; i < nelems; i++)
			if (!elemnulls[i])
				cq_check_group_key(elems[i], "each of group_keys");
	}
	if (PG_NARGS() > 10 && !PG_ARGISNULL(10))
	{
		headers = cq_array_arg(fcinfo, 10, "headers", true);
		if (ArrayGetNItems(ARR_NDIM(headers), ARR_DIMS(headers)) != npayloads)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("headers must have as many elements as payloads")));
	}
	if (cq_forward_wanted(args.queue_name))
		return cq_forward(fcinfo);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	cq_lock_producers(args.queue_name, false);
	SPI_connect();
	cq_enqueue_queue(&args);
	if (args.after.ids)
	{
		cq_after_link(&args.after);
		args.state = cq_after_state(&args.after);
	}
	if (npayloads == 0)
	{
		if (args.after.ids)
			cq_after_unlink(&args.after);
		SPI_finish();
		return (Datum) 0;
	}
	sync = group_keys != NULL && cq_queue_groups_limited(&args.queue) &&
		strcmp(args.state, "pending") == 0;
	if (args.queue.fair)
		cq_enqueue_fair(&args, group_keys ? PointerGetDatum(group_keys) : (Datum) 0,
						group_keys == NULL);
	if (sync)
		cq_enqueue_sync_groups(args.queue.queue_id, PointerGetDatum(group_keys));

	cq_plan(&plan,
			"WITH input AS MATERIALIZED ("
			"  SELECT u.ord, u.payload, u.dedup_key, u.group_key,"
			"         claimq.checked_headers(u.headers, 'each of headers')"
			"           AS headers,"
			"         $7 + pg_catalog.nextval('claimq.job_id_seq') AS job_id"
			"    FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3),"
			"                    pg_catalog.unnest($8), pg_catalog.unnest($15))"
			"         WITH ORDINALITY"
			"         AS u(payload, dedup_key, group_key, headers, ord)"
			"), ins AS ("
			"  INSERT INTO claimq.job AS j"
			"   (job_id, queue_id, state, priority, run_at, enqueued_at,"
			"    dedup_key, payload, max_attempts, group_key, held,"
			"    finished_at, after_set, after_count, after_failed, headers)"
			"  SELECT i.job_id, $1, $11, $4, COALESCE($5, $6), $6,"
			"         i.dedup_key, i.payload, $9, i.group_key,"
			"         $10 AND i.group_key IS NOT NULL,"
			"         CASE WHEN $11 = 'cancelled' THEN $6 END, $12, $13, $14,"
			"         i.headers"
			"    FROM input i"
			"   WHERE $11 <> 'cancelled' OR i.dedup_key IS NULL"
			"   ORDER BY i.dedup_key COLLATE \"C\", i.ord"
			"  ON CONFLICT (queue_id, dedup_key)"
			"    WHERE dedup_key IS NOT NULL AND state = ANY (" CQ_LIVE_STATES ")"
			"  DO NOTHING"
			"  RETURNING j.job_id"
			")"
			" SELECT i.job_id, ins.job_id IS NOT NULL AS inserted,"
			"        i.dedup_key, i.payload, i.group_key, i.headers"
			"   FROM input i LEFT JOIN ins ON ins.job_id = i.job_id"
			"  ORDER BY i.ord",
			15, argtypes);
	values[0] = Int32GetDatum(args.queue.queue_id);
	values[1] = PointerGetDatum(payloads);
	values[2] = keys ? PointerGetDatum(keys) : (Datum) 0;
	nulls[2] = keys ? ' ' : 'n';
	values[3] = Int32GetDatum(args.priority);
	values[4] = args.run_at;
	nulls[4] = args.run_at_null ? 'n' : ' ';
	values[5] = TimestampTzGetDatum(args.now);
	values[6] = Int64GetDatum(cq_job_id_base());
	values[7] = group_keys ? PointerGetDatum(group_keys) : (Datum) 0;
	nulls[7] = group_keys ? ' ' : 'n';
	values[8] = args.max_attempts;
	nulls[8] = args.max_attempts_null ? 'n' : ' ';
	values[9] = BoolGetDatum(sync);
	cq_enqueue_state_values(&args, values + 10, nulls + 10);
	values[14] = headers ? PointerGetDatum(headers) : (Datum) 0;
	nulls[14] = headers ? ' ' : 'n';
	cq_execute(plan, values, nulls, SPI_OK_SELECT);

	{
		SPITupleTable *tuptable = SPI_tuptable;
		uint64		nrows = SPI_processed;
		bool		job_id_null = false;

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
			if (inserted)
				args.inserted++;
			else
			{
				/* A live job holds the key: find it, or insert after all. */
				Datum		key = SPI_getbinval(tuptable->vals[row],
												tuptable->tupdesc, 3, &isnull);
				Datum		payload = SPI_getbinval(tuptable->vals[row],
													tuptable->tupdesc, 4,
													&isnull);
				bool		group_key_null;
				Datum		group_key = SPI_getbinval(tuptable->vals[row],
													  tuptable->tupdesc, 5,
													  &group_key_null);
				bool		headers_null;
				Datum		job_headers = SPI_getbinval(tuptable->vals[row],
														tuptable->tupdesc, 6,
														&headers_null);

				job_id = Int64GetDatum(cq_enqueue_one(&args, payload, key,
													  false, group_key,
													  group_key_null,
													  job_headers,
													  headers_null));
			}
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 &job_id, &job_id_null);
		}
		SPI_freetuptable(tuptable);
	}
	cq_enqueue_done(&args, sync ? PointerGetDatum(group_keys) : (Datum) 0);
	SPI_finish();
	return (Datum) 0;
}
