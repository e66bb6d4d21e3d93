/*-------------------------------------------------------------------------
 *
 * schedule.c
 *		Schedules: the reclaimer's and maintain()'s call of fire_schedules,
 *		and the C symbols of the schedule functions before 0.8.
 *
 * Schedules and their cron expressions are one PL/pgSQL body in both
 * editions, sql/schedules.sql (docs/performance.md, "Schedules in
 * PL/pgSQL", has the measurement that put them there): create_schedule,
 * alter_schedule, drop_schedule, fire_schedules and cron_next, which
 * report the jobs they enqueue to the ledger through
 * claimq.ledger_begin(), ledger_note() and ledger_end().  The C side
 * calls fire_schedules through SPI.
 *
 * The update scripts of releases before 0.8 create those functions as
 * LANGUAGE c with the symbols below, and CREATE FUNCTION looks the symbol
 * up: each stays, and refuses to run, until the update to 0.8 replaces
 * the function.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_create_schedule);
PG_FUNCTION_INFO_V1(claimq_alter_schedule);
PG_FUNCTION_INFO_V1(claimq_drop_schedule);
PG_FUNCTION_INFO_V1(claimq_fire_schedules);
PG_FUNCTION_INFO_V1(claimq_cron_next);

/*
 * Enqueue the due occurrences of every enabled schedule, up to max_jobs
 * jobs; returns how many.  The caller has connected SPI.
 */
uint64
cq_fire_schedules(int32 max_jobs)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	bool		isnull;

	cq_plan(&plan, "SELECT claimq.fire_schedules($1)", 1, argtypes);
	values[0] = Int32GetDatum(max_jobs);
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	return (uint64) DatumGetInt64(cq_spi_value(0, 1, &isnull));
}

/* A schedule function of an install that the update to 0.8 has not reached. */
static void
cq_schedule_replaced(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("claimq.%s() is no longer in claimq's library", name),
			 errdetail("From claimq 0.8 on it is a PL/pgSQL function, created by the update to 0.8."),
			 errhint("Run ALTER EXTENSION claimq UPDATE.")));
}

Datum
claimq_create_schedule(PG_FUNCTION_ARGS)
{
	cq_schedule_replaced("create_schedule");
	PG_RETURN_VOID();
}

Datum
claimq_alter_schedule(PG_FUNCTION_ARGS)
{
	cq_schedule_replaced("alter_schedule");
	PG_RETURN_VOID();
}

Datum
claimq_drop_schedule(PG_FUNCTION_ARGS)
{
	cq_schedule_replaced("drop_schedule");
	PG_RETURN_VOID();
}

Datum
claimq_fire_schedules(PG_FUNCTION_ARGS)
{
	cq_schedule_replaced("fire_schedules");
	PG_RETURN_VOID();
}

Datum
claimq_cron_next(PG_FUNCTION_ARGS)
{
	cq_schedule_replaced("cron_next");
	PG_RETURN_VOID();
}
