/*-------------------------------------------------------------------------
 *
 * schedule.c
 *		Schedules: create_schedule, alter_schedule, drop_schedule, and
 *		fire_schedules, the transition (schedule due) -> pending.
 *
 * A schedule's row keeps the next occurrence that has not been enqueued
 * (next_run_at).  fire_schedules locks the rows of due schedules (FOR
 * UPDATE SKIP LOCKED), enqueues their occurrences and moves next_run_at on,
 * in the caller's transaction: the jobs and the schedule's advance commit
 * together, so each occurrence is enqueued once whoever fires it, however
 * many fire at once, and after a crash or a failover that lost the commit
 * it is fired again.  A second caller that reaches a row the first has
 * just advanced re-reads it under READ COMMITTED and finds it no longer
 * due.
 *
 * When more than one occurrence of a schedule is due at once (the
 * schedule was disabled, or nothing fired it for a while), its "missed"
 * policy decides: skip (none), once (the latest), all (each, oldest first,
 * at most the latest CQ_MISSED_MAX).  The latest are found by looking back
 * from now, not by stepping through every missed occurrence.  If max_jobs
 * stops a call part-way through "all", the row remembers how far the
 * policy reached
 * (catch_up_to), and the next call enqueues the rest without applying the
 * policy again.
 *
 * A schedule whose queue is being dropped or redriven (its producer lock
 * is held exclusive) is passed over until the next call: waiting for that
 * lock while holding the schedule's row, which drop_queue deletes, could
 * deadlock.  Jobs enqueued into a queue with notify send NOTIFY claimq.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "utils/builtins.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_create_schedule);
PG_FUNCTION_INFO_V1(claimq_alter_schedule);
PG_FUNCTION_INFO_V1(claimq_drop_schedule);
PG_FUNCTION_INFO_V1(claimq_fire_schedules);

/* Of more missed occurrences than this, "all" enqueues the latest. */
#define CQ_MISSED_MAX	1000

typedef enum CqMissed
{
	CQ_MISSED_SKIP,
	CQ_MISSED_ONCE,
	CQ_MISSED_ALL
} CqMissed;

static CqMissed
cq_missed_value(const char *missed)
{
	if (strcmp(missed, "skip") == 0)
		return CQ_MISSED_SKIP;
	if (strcmp(missed, "once") == 0)
		return CQ_MISSED_ONCE;
	if (strcmp(missed, "all") == 0)
		return CQ_MISSED_ALL;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("missed must be \"skip\", \"once\" or \"all\"")));
	return CQ_MISSED_ONCE;		/* keep compiler quiet */
}

/*
 * The next occurrence after `after` of a schedule being set, given by its
 * cron text and time zone (anchor: now).  Refuses an expression that would
 * never fire.  NULL if there is none.
 */
static TimestampTz
cq_schedule_next(const char *cron_text, const char *zone, TimestampTz after,
				 TimestampTz anchor)
{
	CqCron		cron;

	cq_cron_parse(cron_text, &cron, true);
	cq_cron_check_fires(cron_text, &cron);
	return cq_cron_next(&cron, cq_time_zone(zone), after, anchor);
}

/*
 * create_schedule(schedule, queue, cron, payload, time_zone, priority,
 * missed) returns void
 */
Datum
claimq_create_schedule(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[9] = {TEXTOID, INT4OID, TEXTOID, JSONBOID, TEXTOID,
	INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[9];
	char		nulls[9] = "         ";
	char	   *name;
	char	   *queue_name;
	char	   *cron_text;
	char	   *zone;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next;
	CqQueue		queue;

	cq_require_primary(fcinfo);
	name = cq_name_arg(fcinfo, 0, "schedule");
	queue_name = cq_queue_name_arg(fcinfo, 1);
	cq_arg_not_null(fcinfo, 2, "cron");
	cq_arg_not_null(fcinfo, 3, "payload");
	cq_arg_not_null(fcinfo, 4, "time_zone");
	cq_arg_not_null(fcinfo, 5, "priority");
	cq_arg_not_null(fcinfo, 6, "missed");
	cron_text = text_to_cstring(PG_GETARG_TEXT_PP(2));
	zone = text_to_cstring(PG_GETARG_TEXT_PP(4));
	(void) cq_missed_value(text_to_cstring(PG_GETARG_TEXT_PP(6)));
	next = cq_schedule_next(cron_text, zone, now, now);

	SPI_connect();
	cq_require_queue(queue_name, &queue);
	cq_plan(&plan,
			"INSERT INTO claimq.schedule AS s"
			" (name, queue_id, cron, payload, time_zone, priority, missed,"
			"  anchor, next_run_at)"
			" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
			" ON CONFLICT (name) DO NOTHING",
			9, argtypes);
	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(queue.queue_id);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = PG_GETARG_DATUM(3);
	values[4] = PG_GETARG_DATUM(4);
	values[5] = PG_GETARG_DATUM(5);
	values[6] = PG_GETARG_DATUM(6);
	values[7] = TimestampTzGetDatum(now);
	values[8] = TimestampTzGetDatum(next);
	nulls[8] = (next == DT_NOEND) ? 'n' : ' ';
	cq_execute(plan, values, nulls, SPI_OK_INSERT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("schedule \"%s\" already exists", name)));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * alter_schedule(schedule, queue, cron, payload, time_zone, priority,
 * missed, enabled) returns void: a NULL option stays as it is.  A new cron
 * or time zone counts from the moment of the call.
 */
Datum
claimq_alter_schedule(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr plan = NULL;
	Oid			lock_types[1] = {TEXTOID};
	Oid			argtypes[10] = {TEXTOID, INT4OID, TEXTOID, JSONBOID, TEXTOID,
	INT4OID, TEXTOID, BOOLOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[10];
	char		nulls[10] = "          ";
	char	   *name;
	TimestampTz now = GetCurrentTimestamp();
	bool		isnull;
	char	   *cron_text;
	char	   *zone;
	bool		retimed;
	TimestampTz anchor;
	Datum		next;
	bool		next_null;
	int32		queue_id;

	cq_require_primary(fcinfo);
	name = cq_name_arg(fcinfo, 0, "schedule");
	if (!PG_ARGISNULL(6))
		(void) cq_missed_value(text_to_cstring(PG_GETARG_TEXT_PP(6)));

	SPI_connect();
	cq_plan(&lock_plan,
			"SELECT s.queue_id, s.cron, s.time_zone, s.anchor, s.next_run_at"
			"  FROM claimq.schedule s WHERE s.name = $1 FOR UPDATE",
			1, lock_types);
	values[0] = CStringGetTextDatum(name);
	cq_execute(lock_plan, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("schedule \"%s\" does not exist", name)));
	queue_id = DatumGetInt32(cq_spi_value(0, 1, &isnull));
	cron_text = PG_ARGISNULL(2) ? TextDatumGetCString(cq_spi_value(0, 2, &isnull)) :
		text_to_cstring(PG_GETARG_TEXT_PP(2));
	zone = PG_ARGISNULL(4) ? TextDatumGetCString(cq_spi_value(0, 3, &isnull)) :
		text_to_cstring(PG_GETARG_TEXT_PP(4));
	anchor = DatumGetTimestampTz(cq_spi_value(0, 4, &isnull));
	next = cq_spi_value(0, 5, &next_null);

	retimed = !PG_ARGISNULL(2) || !PG_ARGISNULL(4);
	if (retimed)
	{
		TimestampTz t;

		anchor = now;
		t = cq_schedule_next(cron_text, zone, now, now);
		next = TimestampTzGetDatum(t);
		next_null = (t == DT_NOEND);
	}
	if (!PG_ARGISNULL(1))
	{
		CqQueue		queue;

		cq_require_queue(cq_queue_name_arg(fcinfo, 1), &queue);
		queue_id = queue.queue_id;
	}

	cq_plan(&plan,
			"UPDATE claimq.schedule s"
			"   SET queue_id = $2, cron = $3, payload = COALESCE($4, s.payload),"
			"       time_zone = $5, priority = COALESCE($6, s.priority),"
			"       missed = COALESCE($7, s.missed),"
			"       enabled = COALESCE($8, s.enabled),"
			"       anchor = $9, next_run_at = $10,"
			"       catch_up_to = CASE WHEN $3 = s.cron AND $5 = s.time_zone"
			"                     THEN s.catch_up_to END"
			" WHERE s.name = $1",
			10, argtypes);
	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(queue_id);
	values[2] = CStringGetTextDatum(cron_text);
	values[4] = CStringGetTextDatum(zone);
	/* payload, priority, missed, enabled: the arguments of the same number */
	for (int argno = 3; argno <= 7; argno++)
	{
		if (argno == 4)
			continue;
		values[argno] = PG_ARGISNULL(argno) ? (Datum) 0 : PG_GETARG_DATUM(argno);
		nulls[argno] = PG_ARGISNULL(argno) ? 'n' : ' ';
	}
	values[8] = TimestampTzGetDatum(anchor);
	values[9] = next;
	nulls[9] = next_null ? 'n' : ' ';
	cq_execute(plan, values, nulls, SPI_OK_UPDATE);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * drop_schedule(schedule) returns void
 */
Datum
claimq_drop_schedule(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	char	   *name;

	cq_require_primary(fcinfo);
	name = cq_name_arg(fcinfo, 0, "schedule");
	SPI_connect();
	cq_plan(&plan, "DELETE FROM claimq.schedule s WHERE s.name = $1",
			1, argtypes);
	values[0] = CStringGetTextDatum(name);
	cq_execute(plan, values, NULL, SPI_OK_DELETE);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("schedule \"%s\" does not exist", name)));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * Enqueue one job per occurrence of a schedule, in one statement, and
 * advance the schedule: next_run_at, catch_up_to, and, if anything was
 * enqueued, last_run_at (the latest occurrence) and last_job_id.
 */
static void
cq_fire_one(const char *name, int32 queue_id, const char *queue_name,
			bool notify, Datum payload, int32 priority,
			TimestampTz *occurrences, int n,
			TimestampTz next, TimestampTz catch_up_to, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[9] = {TEXTOID, INT4OID, JSONBOID, INT4OID,
		TIMESTAMPTZARRAYOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID,
	TIMESTAMPTZOID};
	Datum		values[9];
	char		nulls[9] = "         ";
	Datum	   *elems = palloc(Max(n, 1) * sizeof(Datum));

	for (int i = 0; i < n; i++)
		elems[i] = TimestampTzGetDatum(occurrences[i]);
	cq_plan(&plan,
			"WITH ins AS ("
			"  INSERT INTO claimq.job AS j"
			"   (job_id, queue_id, state, priority, run_at, enqueued_at, payload)"
			"  SELECT $7 + pg_catalog.nextval('claimq.job_id_seq'), $2, 'pending',"
			"         $4, o.run_at, $6, $3"
			"    FROM pg_catalog.unnest($5::timestamptz[]) WITH ORDINALITY AS o(run_at, n)"
			"   ORDER BY o.n"
			"  RETURNING j.job_id, j.run_at"
			")"
			" UPDATE claimq.schedule s"
			"    SET next_run_at = $8, catch_up_to = $9,"
			"        last_run_at = COALESCE((SELECT pg_catalog.max(i.run_at) FROM ins i),"
			"                               s.last_run_at),"
			"        last_job_id = COALESCE((SELECT pg_catalog.max(i.job_id) FROM ins i),"
			"                               s.last_job_id)"
			"  WHERE s.name = $1 AND s.queue_id = $2",
			9, argtypes);
	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(queue_id);
	values[2] = payload;
	values[3] = Int32GetDatum(priority);
	values[4] = PointerGetDatum(construct_array(elems, n, TIMESTAMPTZOID,
												sizeof(TimestampTz), true,
												TYPALIGN_DOUBLE));
	values[5] = TimestampTzGetDatum(now);
	values[6] = Int64GetDatum(cq_job_id_base());
	values[7] = TimestampTzGetDatum(next);
	nulls[7] = (next == DT_NOEND) ? 'n' : ' ';
	values[8] = TimestampTzGetDatum(catch_up_to);
	nulls[8] = (catch_up_to == DT_NOBEGIN) ? 'n' : ' ';
	cq_execute(plan, values, nulls, SPI_OK_UPDATE);
	if (n > 0)
	{
		CqLedgerCall call = {0};
		CqMove		move;

		cq_move_init(&move, queue_id, CQ_IS_ABSENT, CQ_IS_PENDING, n);
		move.run_at = occurrences[0];
		cq_ledger_note(&call, &move);
		cq_ledger_close(&call);
		if (notify)
			Async_Notify("claimq", queue_name);
	}
}

/*
 * The latest occurrence at or before now, of a schedule whose occurrence
 * second (<= now) is due.  Rather than step through every occurrence since
 * second (a minutely schedule idle for a year has half a million), look
 * for one in the last hour, day, week, month, year, nine years before now,
 * and step from there.
 */
static const int64 cq_windows[] = {
	USECS_PER_HOUR, USECS_PER_DAY, 7 * USECS_PER_DAY, 31 * USECS_PER_DAY,
	366 * USECS_PER_DAY, 9 * 366 * USECS_PER_DAY
};

static TimestampTz
cq_latest_due(const CqCron *cron, pg_tz *tz, TimestampTz second,
			  TimestampTz now, TimestampTz anchor)
{
	const int64 *windows = cq_windows;
	TimestampTz latest = second;
	TimestampTz t;

	for (size_t i = 0; i < lengthof(cq_windows); i++)
	{
		if (now - windows[i] <= second)
			break;				/* the window reaches back to second */
		t = cq_cron_next(cron, tz, now - windows[i], anchor);
		if (t != DT_NOEND && t <= now)
		{
			latest = t;
			break;
		}
	}
	while ((t = cq_cron_next(cron, tz, latest, anchor)) != DT_NOEND && t <= now)
		latest = t;
	return latest;
}

/*
 * Where "all" starts stepping through the due occurrences since first:
 * the start of the shortest window before now that holds CQ_MISSED_MAX of
 * them (only the latest CQ_MISSED_MAX are enqueued), or first.
 */
static TimestampTz
cq_all_from(const CqCron *cron, pg_tz *tz, TimestampTz first,
			TimestampTz now, TimestampTz anchor)
{
	for (size_t i = 0; i < lengthof(cq_windows); i++)
	{
		TimestampTz start;
		TimestampTz t;
		int			count = 0;

		if (now - cq_windows[i] <= first)
			break;
		start = cq_cron_next(cron, tz, now - cq_windows[i], anchor);
		for (t = start; t != DT_NOEND && t <= now && count < CQ_MISSED_MAX;
			 t = cq_cron_next(cron, tz, t, anchor))
			count++;
		if (count >= CQ_MISSED_MAX)
			return start;
	}
	return first;
}

/*
 * Enqueue the due occurrences of every enabled schedule, up to max_jobs
 * jobs; returns how many.  The caller has connected SPI.
 */
uint64
cq_fire_schedules(int32 max_jobs)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	TimestampTz now = GetCurrentTimestamp();
	SPITupleTable *due;
	uint64		ndue;
	uint64		fired = 0;
	TimestampTz *occurrences = palloc(sizeof(TimestampTz) * (CQ_MISSED_MAX + 1));

	cq_plan(&plan,
			"SELECT s.name, s.queue_id, q.name, s.cron, s.time_zone, s.payload,"
			"       s.priority, s.missed, s.anchor, s.next_run_at, s.catch_up_to,"
			"       q.notify"
			"  FROM claimq.schedule s"
			"  JOIN claimq.queue q ON q.queue_id = s.queue_id"
			" WHERE s.enabled AND s.next_run_at <= $1"
			" ORDER BY s.next_run_at, s.name"
			"   FOR UPDATE OF s SKIP LOCKED",
			1, argtypes);
	values[0] = TimestampTzGetDatum(now);
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	due = SPI_tuptable;
	ndue = SPI_processed;
	SPI_tuptable = NULL;

	for (uint64 row = 0; row < ndue && fired < (uint64) max_jobs; row++)
	{
		HeapTuple	tuple = due->vals[row];
		TupleDesc	desc = due->tupdesc;
		bool		isnull;
		char	   *name = TextDatumGetCString(SPI_getbinval(tuple, desc, 1, &isnull));
		int32		queue_id = DatumGetInt32(SPI_getbinval(tuple, desc, 2, &isnull));
		char	   *queue_name = TextDatumGetCString(SPI_getbinval(tuple, desc, 3, &isnull));
		char	   *zone = TextDatumGetCString(SPI_getbinval(tuple, desc, 5, &isnull));
		Datum		payload = SPI_getbinval(tuple, desc, 6, &isnull);
		int32		priority = DatumGetInt32(SPI_getbinval(tuple, desc, 7, &isnull));
		CqMissed	missed = cq_missed_value(TextDatumGetCString(SPI_getbinval(tuple, desc, 8, &isnull)));
		TimestampTz anchor = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 9, &isnull));
		TimestampTz first = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 10, &isnull));
		Datum		catch_datum = SPI_getbinval(tuple, desc, 11, &isnull);
		TimestampTz catch_up_to = isnull ? DT_NOBEGIN : DatumGetTimestampTz(catch_datum);
		uint64		budget = (uint64) max_jobs - fired;
		CqCron		cron;
		pg_tz	   *tz;
		int			n = 0;
		TimestampTz t;
		TimestampTz next;

		bool		notify = DatumGetBool(SPI_getbinval(tuple, desc, 12, &isnull));

		if (!cq_try_lock_producers(queue_name, false, false))
			continue;
		cq_cron_parse(TextDatumGetCString(SPI_getbinval(tuple, desc, 4, &isnull)),
					  &cron, false);
		tz = cq_time_zone(zone);

		if (catch_up_to != DT_NOBEGIN)
		{
			/* Finishing what "all" began: no policy again. */
			for (t = first; t != DT_NOEND && t <= catch_up_to && n < (int) Min(budget, CQ_MISSED_MAX);
				 t = cq_cron_next(&cron, tz, t, anchor))
				occurrences[n++] = t;
			if (t == DT_NOEND || t > catch_up_to)
			{
				next = (t == DT_NOEND) ? DT_NOEND : t;
				catch_up_to = DT_NOBEGIN;
			}
			else
				next = t;
		}
		else
		{
			TimestampTz second = cq_cron_next(&cron, tz, first, anchor);

			if (second == DT_NOEND || second > now)
			{
				/* One occurrence due: it fires, however late. */
				occurrences[n++] = first;
				next = second;
			}
			else if (missed == CQ_MISSED_ALL)
			{
				/*
				 * Every due occurrence, at most the latest CQ_MISSED_MAX:
				 * keep a ring of the latest, then put them in order.
				 */
				TimestampTz *ring = palloc(sizeof(TimestampTz) * CQ_MISSED_MAX);
				int64		count = 0;

				for (t = cq_all_from(&cron, tz, first, now, anchor);
					 t != DT_NOEND && t <= now;
					 t = cq_cron_next(&cron, tz, t, anchor))
					ring[count++ % CQ_MISSED_MAX] = t;
				next = t;
				for (int64 i = Max(count - CQ_MISSED_MAX, 0); i < count; i++)
					occurrences[n++] = ring[i % CQ_MISSED_MAX];
				if ((uint64) n > budget)
				{
					/* The rest on the next call, without the policy. */
					catch_up_to = occurrences[n - 1];
					next = occurrences[budget];
					n = (int) budget;
				}
			}
			else
			{
				TimestampTz latest = cq_latest_due(&cron, tz, second, now,
												   anchor);

				next = cq_cron_next(&cron, tz, latest, anchor);
				if (missed == CQ_MISSED_ONCE)
					occurrences[n++] = latest;
			}
		}
		cq_fire_one(name, queue_id, queue_name, notify, payload, priority,
					occurrences, n, next, catch_up_to, now);
		fired += n;
	}
	SPI_freetuptable(due);
	return fired;
}

/*
 * fire_schedules(max_jobs int DEFAULT 1000) returns bigint
 */
Datum
claimq_fire_schedules(PG_FUNCTION_ARGS)
{
	int32		max_jobs;
	uint64		fired;

	cq_require_primary(fcinfo);
	max_jobs = cq_int_arg(fcinfo, 0, "max_jobs", 1, CQ_MAX_BATCH);
	SPI_connect();
	fired = cq_fire_schedules(max_jobs);
	SPI_finish();
	PG_RETURN_INT64((int64) fired);
}
