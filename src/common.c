/*-------------------------------------------------------------------------
 *
 * common.c
 *		The helpers every claimq entry point shares: argument checks with
 *		the contract's SQLSTATEs, kept SPI plans, the queue look-up and
 *		the settings each backend keeps of it, the producer lock and job
 *		ids; version() and edition().  It calls no other claimq file but
 *		shard.c, which routes the plans of a call that names a queue on a
 *		distributed install.
 *
 * Argument checks run before SPI is connected and before anything is
 * read, so a call with bad input fails without having changed or locked
 * anything.  Queue names are data: they are checked here and then passed
 * to SQL only as parameters.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "jit/jit.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/snapmgr.h"

#include "utils/syscache.h"

#include "claimq.h"

/*
 * Raise 25006 during recovery: the first thing every entry point that
 * writes does, so that a call on a standby gets this rather than the
 * error of claimq's own SQL (with that SQL in its context), and before
 * its arguments are judged.
 */
void
cq_require_primary(FunctionCallInfo fcinfo)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot run claimq.%s() during recovery",
						get_func_name(fcinfo->flinfo->fn_oid)),
				 errdetail("This server is a standby: claimq's jobs, key claims and schedules change only on the primary."),
				 errhint("Connect to the primary server.")));
}

/*
 * Raise 22004 if argument argno is NULL.
 */
void
cq_arg_not_null(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", argname)));
}

/*
 * Whether name (len bytes) is 1 to 63 characters of ASCII letters,
 * digits, '_', '-' and '.': the rule for queue and schedule names.
 */
static bool
cq_valid_name(const char *name, int len)
{
	if (len < 1 || len > CQ_QUEUE_NAME_MAX)
		return false;
	for (int i = 0; i < len; i++)
	{
		char		c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
			return false;
	}
	return true;
}

/*
 * Fetch the name of a queue or a schedule (what: "queue" or "schedule",
 * also the argument's name) and check it (cq_valid_name).
 */
char *
cq_name_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	text	   *arg;
	char	   *name;

	cq_arg_not_null(fcinfo, argno, what);
	arg = PG_GETARG_TEXT_PP(argno);
	name = VARDATA_ANY(arg);
	if (!cq_valid_name(name, VARSIZE_ANY_EXHDR(arg)))
	{
		int			shown = VARSIZE_ANY_EXHDR(arg);

		/* Quote at most a name's worth of a hostile argument. */
		shown = pg_mbcliplen(name, shown, Min(shown, CQ_QUEUE_NAME_MAX + 1));
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid %s name \"%.*s\"", what, shown, name),
				 errdetail("A %s name is 1 to %d characters, each a letter, a digit, \"_\", \"-\" or \".\".",
						   what, CQ_QUEUE_NAME_MAX)));
	}
	return text_to_cstring(arg);
}

/* The upper bounds of interval arguments (claimq.h). */
const Interval cq_max_lease = {.time = 0,.day = 7,.month = 0};
const Interval cq_max_delay = {.time = 0,.day = 0,.month = 100 * MONTHS_PER_YEAR};

/*
 * t + span, by the same calendar arithmetic as timestamptz + interval in
 * SQL (months and days in the session's time zone).
 */
TimestampTz
cq_time_plus(TimestampTz t, const Interval *span)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												   TimestampTzGetDatum(t),
												   IntervalPGetDatum(span)));
}

/*
 * Check an interval the way it will be used: added to the wall clock.  It
 * is valid when now < now + span <= now + max (now <= now + span, when
 * zero_ok), so that a month is as long as the calendar says at this moment
 * and "-10 months 302 days" is not taken for two days.  Raises 22023
 * naming argname and max_text.
 */
static void
cq_interval_check(const Interval *span, const char *argname, bool zero_ok,
				  const Interval *max, const char *max_text)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz end;
	TimestampTz limit;
	bool		valid = false;

	/*
	 * No field of a valid span comes near what would take the sum out of the
	 * timestamp range; refuse those before adding.
	 */
	if (abs(span->month) <= 10 * max->month + 12 &&
		abs(span->day) <= 10 * (max->day + 31 * max->month) + 31 &&
		span->time / USECS_PER_DAY >= -10 * (max->day + 31 * (int64) max->month) - 31 &&
		span->time / USECS_PER_DAY <= 10 * (max->day + 31 * (int64) max->month) + 31)
	{
		end = cq_time_plus(now, span);
		limit = cq_time_plus(now, max);
		valid = (zero_ok ? end >= now : end > now) && end <= limit;
	}
	if (!valid)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be %s zero and at most %s", argname,
						zero_ok ? "at least" : "greater than", max_text)));
}

/*
 * Fetch an interval argument and check it (cq_interval_check).  Returns
 * NULL for a NULL argument; the caller decides whether NULL is allowed.
 */
Interval *
cq_interval_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
				bool zero_ok, const Interval *max, const char *max_text)
{
	Interval   *span;

	if (PG_ARGISNULL(argno))
		return NULL;
	span = PG_GETARG_INTERVAL_P(argno);
	cq_interval_check(span, argname, zero_ok, max, max_text);
	return span;
}

/*
 * check_queue_name(queue) returns void: the queue-name rule for the
 * SQL-language functions, with the C entry points' errors (22004 for
 * NULL, 22023 for a bad name).
 */
PG_FUNCTION_INFO_V1(claimq_check_queue_name);

Datum
claimq_check_queue_name(PG_FUNCTION_ARGS)
{
	(void) cq_queue_name_arg(fcinfo, 0);
	PG_RETURN_VOID();
}

/*
 * valid_name(name) returns boolean: whether name follows the rule for queue
 * and schedule names; the tables' CHECK constraints call it.
 */
PG_FUNCTION_INFO_V1(claimq_valid_name);

Datum
claimq_valid_name(PG_FUNCTION_ARGS)
{
	text	   *name = PG_GETARG_TEXT_PP(0);

	PG_RETURN_BOOL(cq_valid_name(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name)));
}

/*
 * lock_producers(queue) returns void: the queue's producer lock, exclusive
 * (drop_queue, retry_dead), until the end of the transaction.
 */
PG_FUNCTION_INFO_V1(claimq_lock_producers);

Datum
claimq_lock_producers(PG_FUNCTION_ARGS)
{
	cq_lock_producers(cq_queue_name_arg(fcinfo, 0), true);
	PG_RETURN_VOID();
}

/*
 * check_queue_settings(lease, run_lease, max_attempts, retry_base,
 * retry_max, keep_done, keep_dead) returns void: the checks of
 * create_queue and alter_queue, with the rules every C entry point uses.
 * NULL passes (alter_queue: unchanged).
 */
PG_FUNCTION_INFO_V1(claimq_check_queue_settings);

Datum
claimq_check_queue_settings(PG_FUNCTION_ARGS)
{
	(void) cq_lease_arg(fcinfo, 0, "lease", false);
	(void) cq_lease_arg(fcinfo, 1, "run_lease", false);
	if (!PG_ARGISNULL(2) && PG_GETARG_INT32(2) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_attempts must be at least 1")));
	(void) cq_delay_arg(fcinfo, 3, "retry_base", true);
	(void) cq_delay_arg(fcinfo, 4, "retry_max", true);
	(void) cq_delay_arg(fcinfo, 5, "keep_done", true);
	(void) cq_delay_arg(fcinfo, 6, "keep_dead", true);
	PG_RETURN_VOID();
}

/*
 * Fetch a non-NULL integer argument within [min, max].
 */
int32
cq_int_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
		   int32 min, int32 max)
{
	int32		value;

	cq_arg_not_null(fcinfo, argno, argname);
	value = PG_GETARG_INT32(argno);
	if (value < min || value > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %d and %d", argname, min, max)));
	return value;
}

/*
 * Fetch a non-NULL, one-dimensional array argument.  Unless nulls_ok, its
 * elements must not be NULL either.
 */
ArrayType *
cq_array_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
			 bool nulls_ok)
{
	ArrayType  *array;

	cq_arg_not_null(fcinfo, argno, argname);
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", argname)));
	if (!nulls_ok && array_contains_nulls(array))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not contain null elements", argname)));
	return array;
}

/*
 * Raise 55000 unless the claimq extension installed in this database is
 * the version this library was built for: after a new library is
 * installed, the statements below name columns that only ALTER EXTENSION
 * claimq UPDATE adds.  Checked whenever a statement is prepared, which is
 * once per statement and backend.
 */
static void
cq_check_schema_version(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("claimq"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;
		Datum		datum = heap_getattr(tuple, Anum_pg_extension_extversion,
										 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = TextDatumGetCString(datum);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	if (version != NULL && strcmp(version, CQ_SCHEMA_VERSION) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"claimq\" is at version %s, but its library needs version %s",
						version, CQ_SCHEMA_VERSION),
				 errhint("Run ALTER EXTENSION claimq UPDATE.")));
}

/*
 * A job_ids argument of cancel, status and wait_for: no NULLs, at most
 * CQ_MAX_BATCH ids.
 */
ArrayType *
cq_job_ids_arg(FunctionCallInfo fcinfo, int argno)
{
	ArrayType  *ids = cq_array_arg(fcinfo, argno, "job_ids", false);

	if (ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids)) > CQ_MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at most %d job ids can be given in one call",
						CQ_MAX_BATCH)));
	return ids;
}

/*
 * Prepare a statement once per backend and keep its generic plan.  The plan
 * cache re-plans by itself when the extension's tables are dropped and created
 * again, since the statement text names them, not their OIDs.
 */
SPIPlanPtr
cq_plan(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes)
{
	/*
	 * On a distributed install a routed call's first statement finds the
	 * queue's shards, against which the planner hook plans (see shard.c).
	 */
	if (cq_distributed())
		cq_route_ready();
	return cq_plan_unrouted(cache, sql, nargs, argtypes);
}

/* cq_plan, without finding a route's shards first (shard.c's own looks). */
SPIPlanPtr
cq_plan_unrouted(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes)
{
	if (*cache == NULL)
	{
		SPIPlanPtr	plan;

		cq_check_schema_version();

		/*
		 * Every statement is written to run well with a generic plan, and
		 * planning some of them costs more than running them: plan once.
		 */
		plan = SPI_prepare_cursor(sql, nargs, argtypes,
								  CURSOR_OPT_GENERIC_PLAN);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed: %s",
				 SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		*cache = plan;
	}
	return *cache;
}

/*
 * Run a kept plan and insist on the expected SPI result code.
 *
 * The plan is generic and kept, so it must not depend on settings meant
 * for the caller's own queries: whatever jit and plan_cache_mode say, it
 * is never JIT-compiled (the claim statement's estimated cost follows the
 * table's statistics, and compiling it would cost more than running it)
 * and never planned again per call.  Both are decided when the statement
 * is planned, which happens inside SPI_execute_plan: the first time, and
 * again whenever the plan is invalidated.
 *
 * While it runs, the statement is counted in cq_own_statements: the
 * census's guard leaves claimq's own writes to the ledger (ledger.c).
 */
int			cq_own_statements = 0;

static void
cq_execute_plan(SPIPlanPtr plan, Datum *values, const char *nulls,
				int expected, bool read_only)
{
	bool		save_jit = jit_enabled;
	int			save_plan_cache_mode = plan_cache_mode;
	int			ret;

	jit_enabled = false;
	plan_cache_mode = PLAN_CACHE_MODE_FORCE_GENERIC_PLAN;
	cq_own_statements++;
	PG_TRY();
	{
		ret = SPI_execute_plan(plan, values, nulls, read_only, 0);
	}
	PG_FINALLY();
	{
		cq_own_statements--;
		jit_enabled = save_jit;
		plan_cache_mode = save_plan_cache_mode;
	}
	PG_END_TRY();

	if (ret != expected)
		elog(ERROR, "unexpected SPI result: %s", SPI_result_code_string(ret));
}

void
cq_execute(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	cq_execute_plan(plan, values, nulls, expected, false);
}

/*
 * Run a kept, read-only plan with a snapshot taken now, whatever the
 * transaction's isolation level: it sees every transaction committed
 * before this call, as a READ COMMITTED statement would.
 */
void
cq_execute_latest(SPIPlanPtr plan, Datum *values, const char *nulls,
				  int expected)
{
	cq_execute_in(plan, values, nulls, expected, GetLatestSnapshot());
}

/* Run a kept, read-only plan in the given snapshot. */
void
cq_execute_in(SPIPlanPtr plan, Datum *values, const char *nulls,
			  int expected, Snapshot snapshot)
{
	PushActiveSnapshot(snapshot);
	cq_execute_plan(plan, values, nulls, expected, true);
	PopActiveSnapshot();
}

/*
 * A column of row `row` of the last SPI result (columns count from 1).
 */
Datum
cq_spi_value(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						 col, isnull);
}

/*
 * Add a database to a list of distinct ones that holds at most max.
 */
void
cq_note_database(Oid *dboids, int *n, int max, Oid dboid)
{
	for (int i = *n - 1; i >= 0; i--)
		if (dboids[i] == dboid)
			return;
	if (*n < max)
		dboids[(*n)++] = dboid;
}

/*
 * Keep, of the n databases listed, those that no longer exist, and return
 * how many they are: what a shared-memory table's entries of them hold
 * can go.  Inside a transaction (it reads pg_database).
 */
int
cq_dropped_databases(Oid *dboids, int n)
{
	int			ndropped = 0;

	for (int i = 0; i < n; i++)
		if (!SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(dboids[i])))
			dboids[ndropped++] = dboids[i];
	return ndropped;
}

/*
 * A shared-memory hash table of a fixed number of entries, made at start
 * or attached to: a full table refuses new entries (HASH_ENTER_NULL)
 * rather than grow.
 */
HTAB *
cq_shmem_table(const char *name, long entries, Size keysize, Size entrysize)
{
	HASHCTL		ctl;

	ctl.keysize = keysize;
	ctl.entrysize = entrysize;
	return ShmemInitHash(name, entries, entries, &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
}

/*
 * Take a shared-memory table's lock behind its gate.  An exclusive taker
 * closes the gate first: shared holders come and go without pause, and it
 * would otherwise wait for a moment when there is none.  Every holder of
 * such a lock only works in memory.
 */
void
cq_lwlock_gated(LWLock *lock, LWLock *gate, LWLockMode mode)
{
	if (mode == LW_EXCLUSIVE)
	{
		LWLockAcquire(gate, LW_EXCLUSIVE);
		LWLockAcquire(lock, LW_EXCLUSIVE);
		LWLockRelease(gate);
	}
	else
	{
		LWLockAcquire(gate, LW_SHARED);
		LWLockRelease(gate);
		LWLockAcquire(lock, LW_SHARED);
	}
}

/*
 * The OID of claimq.job, which tells one installation of the extension in
 * a database from the next.
 */
Oid
cq_job_relid(void)
{
	return get_relname_relid("job", get_namespace_oid("claimq", false));
}

/*
 * The queue look-up, kept per backend.  A claim and an enqueue look their
 * queue up by name on every call, and its settings change only when its
 * row in claimq.queue does: every statement that writes a queue's row
 * (but for the rate limit's bucket, which the look-up does not read)
 * fires claimq.queue_changed, a statement trigger enabled always, which
 * invalidates claimq.queue's relation cache entry: in its own backend at
 * the statement's end, and in every other one when its transaction
 * commits.  Each backend keeps the settings it read, by name, until then.
 *
 * The backend takes in invalidations before each use, so a call sees
 * every change whose commit had ended before it began, as the look-up by
 * SPI in a statement's snapshot did.  A fill that an invalidation
 * overtakes (it may have read the row before the change committed) is not
 * kept, nor is a queue that does not exist.  The settings are kept only
 * where a look-up by SPI would see what is committed (READ COMMITTED: a
 * transaction snapshot shows them as they were when it began, and a
 * serializable one must record its read), on a single server (a
 * distributed install's queue rows change on its shards, where no trigger
 * of this node fires), and while the trigger is in place and enabled
 * always (an install not yet updated to 0.8 has none).  A subtransaction's
 * or transaction's abort invalidates what its statements had invalidated,
 * so settings read from a change that was rolled back are not kept.
 */
typedef struct CqQueueEntry
{
	char		name[CQ_QUEUE_NAME_MAX + 1];	/* the key */
	CqQueue		queue;			/* its name is the caller's */
} CqQueueEntry;

/* More queues than this in one backend: start again. */
#define CQ_QUEUE_CACHE_MAX	1024

static HTAB *cq_queue_cache = NULL;
static Oid	cq_queue_cache_relid = InvalidOid;	/* claimq.queue */
static uint64 cq_queue_cache_epoch = 0; /* moved on by each invalidation */
static int	cq_queue_cache_trigger = -1;	/* in place: 1, 0, or not known */

static void
cq_queue_cache_forget(Datum arg, Oid relid)
{
	if (OidIsValid(relid) && relid != cq_queue_cache_relid)
		return;
	cq_queue_cache_epoch++;
	cq_queue_cache_trigger = -1;
}

/*
 * Whether this call may use the kept settings: if so, the table is there,
 * emptied after any invalidation.  The caller has connected SPI.
 */
static bool
cq_queue_cache_open(void)
{
	static bool callback_registered = false;
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	uint64		epoch;
	bool		isnull;
	int			trigger;

	if (IsolationUsesXactSnapshot() || cq_distributed())
		return false;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(cq_queue_cache_forget, (Datum) 0);
		callback_registered = true;
	}
	AcceptInvalidationMessages();
	if (cq_queue_cache_trigger < 0)
	{
		if (cq_queue_cache != NULL)
		{
			hash_destroy(cq_queue_cache);
			cq_queue_cache = NULL;
		}
		cq_queue_cache_relid = get_relname_relid("queue",
												 get_namespace_oid("claimq", false));
		epoch = cq_queue_cache_epoch;
		cq_plan(&plan,
				"SELECT pg_catalog.bool_or(t.tgenabled = 'A')"
				"  FROM pg_catalog.pg_trigger t"
				" WHERE t.tgrelid = $1 AND t.tgname = 'queue_changed'",
				1, argtypes);
		values[0] = ObjectIdGetDatum(cq_queue_cache_relid);
		cq_execute(plan, values, NULL, SPI_OK_SELECT);
		trigger = DatumGetBool(cq_spi_value(0, 1, &isnull)) && !isnull;
		if (epoch != cq_queue_cache_epoch)
			return false;
		cq_queue_cache_trigger = trigger;
	}
	if (!cq_queue_cache_trigger)
		return false;
	if (cq_queue_cache == NULL ||
		hash_get_num_entries(cq_queue_cache) >= CQ_QUEUE_CACHE_MAX)
	{
		HASHCTL		ctl;

		if (cq_queue_cache != NULL)
			hash_destroy(cq_queue_cache);
		ctl.keysize = CQ_QUEUE_NAME_MAX + 1;
		ctl.entrysize = sizeof(CqQueueEntry);
		ctl.hcxt = CacheMemoryContext;
		cq_queue_cache = hash_create("claimq queues", 64, &ctl,
									 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	return true;
}

PG_FUNCTION_INFO_V1(claimq_queue_changed);

/*
 * claimq.queue_changed(): the trigger of claimq.queue (after INSERT,
 * DELETE, TRUNCATE, and an UPDATE that sets a setting) that tells every
 * backend to read its queues' settings again, and the fair queues' claims
 * their tenants (fair.c) once the transaction commits.
 */
Datum
claimq_queue_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("claimq.queue_changed() is a trigger of claimq.queue")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	cq_fair_note_changed();
	return PointerGetDatum(NULL);
}

/*
 * Look a queue up by name.  Returns false if there is none.
 */
bool
cq_lookup_queue(const char *name, CqQueue *queue)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	bool		keep;
	uint64		epoch;
	CqQueueEntry *entry;

	cq_route_to(name);
	keep = strlen(name) <= CQ_QUEUE_NAME_MAX && cq_queue_cache_open();
	if (keep)
	{
		entry = hash_search(cq_queue_cache, name, HASH_FIND, NULL);
		if (entry != NULL)
		{
			*queue = entry->queue;
			queue->name = name;
			return true;
		}
	}
	epoch = cq_queue_cache_epoch;
	cq_plan(&plan,
			"SELECT q.queue_id, q.paused, q.notify, q.lease, q.run_lease,"
			"       COALESCE(q.group_limit, 0), q.group_fifo,"
			"       COALESCE(q.max_in_flight, 0), COALESCE(q.rate_limit, 0),"
			"       q.rate_period, q.fair, q.prioritized"
			"  FROM claimq.queue q WHERE q.name = $1",
			1, argtypes);
	values[0] = CStringGetTextDatum(name);
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;

	queue->name = name;
	queue->queue_id = DatumGetInt32(cq_spi_value(0, 1, &isnull));
	queue->paused = DatumGetBool(cq_spi_value(0, 2, &isnull));
	queue->notify = DatumGetBool(cq_spi_value(0, 3, &isnull));
	queue->lease = *DatumGetIntervalP(cq_spi_value(0, 4, &isnull));
	queue->run_lease = *DatumGetIntervalP(cq_spi_value(0, 5, &isnull));
	queue->group_limit = DatumGetInt32(cq_spi_value(0, 6, &isnull));
	queue->group_fifo = DatumGetBool(cq_spi_value(0, 7, &isnull));
	queue->max_in_flight = DatumGetInt32(cq_spi_value(0, 8, &isnull));
	queue->rate_limit = DatumGetInt32(cq_spi_value(0, 9, &isnull));
	queue->rate_period = *DatumGetIntervalP(cq_spi_value(0, 10, &isnull));
	queue->fair = DatumGetBool(cq_spi_value(0, 11, &isnull));
	queue->prioritized = DatumGetBool(cq_spi_value(0, 12, &isnull));

	if (keep && epoch == cq_queue_cache_epoch)
	{
		entry = hash_search(cq_queue_cache, name, HASH_ENTER, NULL);
		entry->queue = *queue;
	}
	return true;
}

/*
 * Look a queue up by name; raise 42704 if there is none.
 */
void
cq_require_queue(const char *name, CqQueue *queue)
{
	if (!cq_lookup_queue(name, queue))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("queue \"%s\" does not exist", name)));
}

/*
 * The "queue" argument of a settle or job call, if given (argno is past
 * the function's arguments before claimq 0.8 added it).  The id noted for
 * a name is never wrong when it matches: a queue's id is never reused, and
 * its jobs go with it.  So a job found in the noted queue confirms the
 * name, and only a job in another queue, or no job found at all, sends the
 * check to the catalogue.
 */
static char cq_in_queue_noted_name[CQ_QUEUE_NAME_MAX + 1];
static int32 cq_in_queue_noted_id = 0;

void
cq_in_queue_begin(CqInQueue *check, FunctionCallInfo fcinfo, int argno)
{
	check->name = NULL;
	check->queue_id = 0;
	check->confirmed = false;
	check->looked_up = false;
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return;
	check->name = cq_queue_name_arg(fcinfo, argno);
	cq_route_to(check->name);
	if (strcmp(check->name, cq_in_queue_noted_name) == 0)
		check->queue_id = cq_in_queue_noted_id;
}

/* Read the queue's id from the catalogue; the caller has connected SPI. */
static void
cq_in_queue_look_up(CqInQueue *check)
{
	CqQueue		queue;

	cq_require_queue(check->name, &queue);
	check->queue_id = queue.queue_id;
	check->looked_up = true;
	strlcpy(cq_in_queue_noted_name, check->name,
			sizeof(cq_in_queue_noted_name));
	cq_in_queue_noted_id = queue.queue_id;
}

void
cq_in_queue_job(CqInQueue *check, int64 job_id, int32 queue_id)
{
	if (check->name == NULL)
		return;
	if (queue_id != check->queue_id && !check->looked_up)
		cq_in_queue_look_up(check);
	if (queue_id != check->queue_id)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job " INT64_FORMAT " is not in queue \"%s\"",
						job_id, check->name)));
	check->confirmed = true;
}

void
cq_in_queue_end(CqInQueue *check)
{
	if (check->name != NULL && !check->confirmed && !check->looked_up)
		cq_in_queue_look_up(check);
}

/*
 * The check for calls that do not read the jobs' queues themselves
 * (cancel, status, wait_for, dependencies): one look at the jobs listed
 * in ids (an int8[]).  The caller has connected SPI.
 */
void
cq_in_queue_jobs(CqInQueue *check, Datum ids)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT8ARRAYOID};
	SPITupleTable *rows;
	uint64		nrows;

	if (check->name == NULL)
		return;
	/* An empty list is a no-op: no look-up (as the settles, cq_settle). */
	if (ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(ids)),
					   ARR_DIMS(DatumGetArrayTypeP(ids))) == 0)
		return;
	cq_plan(&plan,
			"SELECT j.job_id, j.queue_id FROM claimq.job j"
			" WHERE j.job_id = ANY ($1)",
			1, argtypes);
	cq_execute(plan, &ids, NULL, SPI_OK_SELECT);
	/* A look-up by the check replaces SPI_tuptable: keep the rows. */
	rows = SPI_tuptable;
	nrows = SPI_processed;
	SPI_tuptable = NULL;
	for (uint64 row = 0; row < nrows; row++)
	{
		bool		isnull;

		cq_in_queue_job(check,
						DatumGetInt64(SPI_getbinval(rows->vals[row],
													rows->tupdesc, 1, &isnull)),
						DatumGetInt32(SPI_getbinval(rows->vals[row],
													rows->tupdesc, 2, &isnull)));
	}
	SPI_freetuptable(rows);
	cq_in_queue_end(check);
}

/*
 * check_in_queue(queue text, job_ids bigint[]) returns void: the same,
 * for the job calls written in SQL (dependencies).  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_check_in_queue);

Datum
claimq_check_in_queue(PG_FUNCTION_ARGS)
{
	CqInQueue	check;
	ArrayType  *ids = cq_job_ids_arg(fcinfo, 1);

	if (cq_forward_wanted_arg(fcinfo, 0))
		return cq_forward(fcinfo);
	cq_in_queue_begin(&check, fcinfo, 0);
	if (check.name == NULL)
		PG_RETURN_VOID();
	SPI_connect();
	cq_in_queue_jobs(&check, PointerGetDatum(ids));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * Take the producer lock of a queue in share mode (see claimq.h); held to
 * the end of the transaction.  Keyed by name so that it can be taken
 * before the queue is looked up: the look-up then sees a drop that
 * committed while this waited.
 */
void
cq_lock_producers(const char *queue_name, bool exclusive)
{
	(void) cq_try_lock_producers(queue_name, exclusive, true);
}

/*
 * The same, but without waiting unless wait: returns false if the lock is
 * held in a conflicting mode (shared: by a drop_queue or retry_dead in
 * progress).
 */
bool
cq_try_lock_producers(const char *queue_name, bool exclusive, bool wait)
{
	LOCKTAG		tag;
	int32		hash;

	hash = DatumGetInt32(DirectFunctionCall1Coll(hashtext, C_COLLATION_OID,
												 CStringGetTextDatum(queue_name)));
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) CQ_PRODUCER_LOCK_KEY,
						 (uint32) hash, 2);
	return LockAcquire(&tag, exclusive ? ExclusiveLock : ShareLock, false,
					   !wait) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * Pair tables: a call's input pairs (a job id or a key, and a token)
 * matched against the rows a statement returned, in O(n).  A key's text
 * is not copied: it must outlive the table.
 */
static uint32
cq_pair_hash(const void *key, Size keysize)
{
	const CqPairKey *pair = key;
	uint32		h;

	if (pair->str != NULL)
		h = hash_bytes((const unsigned char *) pair->str, strlen(pair->str));
	else
		h = hash_bytes((const unsigned char *) &pair->num, sizeof(pair->num));
	return h ^ hash_bytes_uint32((uint32) pair->token);
}

static int
cq_pair_match(const void *key1, const void *key2, Size keysize)
{
	const CqPairKey *a = key1;
	const CqPairKey *b = key2;

	if (a->token != b->token || a->num != b->num ||
		(a->str == NULL) != (b->str == NULL))
		return 1;
	return (a->str == NULL || strcmp(a->str, b->str) == 0) ? 0 : 1;
}

HTAB *
cq_pair_table(const char *name, long size)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(CqPairKey);
	ctl.entrysize = sizeof(CqPairEntry);
	ctl.hash = cq_pair_hash;
	ctl.match = cq_pair_match;
	ctl.hcxt = CurrentMemoryContext;
	return hash_create(name, Max(size, 1), &ctl,
					   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
}

/*
 * The entry of a pair (str NULL: the job id num), entered with value 0
 * and done false if missing and enter, else NULL if missing.
 */
CqPairEntry *
cq_pair(HTAB *table, const char *str, int64 num, int64 token, bool enter)
{
	CqPairKey	key = {str, num, token};
	bool		found;
	CqPairEntry *entry;

	entry = hash_search(table, &key, enter ? HASH_ENTER : HASH_FIND, &found);
	if (entry != NULL && !found)
	{
		entry->value = 0;
		entry->done = false;
	}
	return entry;
}

/*
 * What to add to a value of claimq.job_id_seq to make a job id: this
 * server's node number in the high bits, so that a router can send every
 * call about a job to the server that issued it.  On a distributed install
 * the node number is the node's Citus group (shard.c), so that jobs
 * enqueued on two workers never share an id, also after a move puts them
 * in one shard.  The caller has connected SPI.
 */
int64
cq_job_id_base(void)
{
	if (cq_distributed())
		return (int64) cq_local_group() << CQ_TOKEN_EPOCH_BITS;
	return (int64) cq_node_id << CQ_TOKEN_EPOCH_BITS;
}

/*
 * job_id_base() returns bigint: the same, for the SQL paths that insert
 * jobs (fire_schedules).  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_job_id_base);

Datum
claimq_job_id_base(PG_FUNCTION_ARGS)
{
	int64		base;

	/* A distributed install's reads the node's Citus group by SPI. */
	SPI_connect();
	base = cq_job_id_base();
	SPI_finish();
	PG_RETURN_INT64(base);
}

/*
 * node_of(job_id) returns integer: the node number in a job id, for a
 * router.
 */
PG_FUNCTION_INFO_V1(claimq_node_of);

Datum
claimq_node_of(PG_FUNCTION_ARGS)
{
	cq_arg_not_null(fcinfo, 0, "job_id");
	PG_RETURN_INT32((int32) (PG_GETARG_INT64(0) >> CQ_TOKEN_EPOCH_BITS));
}

/*
 * version() returns text: the release whose schema this library serves.
 * edition() returns text: 'c', this edition (the portable one says
 * 'portable').
 */
PG_FUNCTION_INFO_V1(claimq_version);

Datum
claimq_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(CQ_SCHEMA_VERSION));
}

PG_FUNCTION_INFO_V1(claimq_edition);

Datum
claimq_edition(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text("c"));
}
