/*-------------------------------------------------------------------------
 *
 * limits.c
 *		The queue-wide limits a claim obeys: max_in_flight and rate_limit.
 *		(Group limits are groups.c's; the shared memory that holds these
 *		limits' reservations and buckets is buckets.c's.)
 *
 * With the preload, shared memory holds, per queue with max_in_flight or
 * rate_limit that was claimed from lately, the slots reserved by claims
 * whose transactions are still in progress and the rate limit's token
 * bucket (buckets.c, whose header states its locks and what happens when
 * its table is full).  A claim, under the slot's spinlock:
 *
 *	1. reserves max_jobs slots and takes up to max_jobs tokens, and notes
 *	   what the other transactions in progress had reserved (r);
 *	2. then counts the queue's jobs in flight with the latest snapshot (c),
 *	   which sees every claim whose transaction had ended by step 1, under
 *	   any isolation level;
 *	3. claims at most max_in_flight - c - r jobs, and no more than the
 *	   tokens it took;
 *	4. gives back at once the slots and tokens it did not use.
 *
 * Its transaction gives the rest of its slots back when it ends (by then
 * its claims are committed and counted by step 2 of later claims, or
 * rolled back).  Whatever was in flight at a given moment was claimed by
 * claims of which one came last to step 1: it counted each of the others
 * in c (their transaction had ended) or in r (it had not), or both, so it
 * left room for all of them.  Claims never wait for each other, and
 * settling a job touches no shared memory: the count is the job table's.
 *
 * A queue that has no slot and can have none takes the slow path: its
 * claims take turns on the queue's row, as without the preload (below).
 * The two paths never mix for a queue (buckets.c).
 *
 * The bucket.  The queue's row holds a record of it (rate_tokens at
 * rate_at): written by every claim on the row, and, for a bucket in
 * shared memory whose row has none, by the reclaimer's next pass (the
 * claim that made it may roll back), only while the row's rate is still
 * the bucket's.  A bucket is made from the row (cq_flow_row_tokens): full
 * without a record (the first use, or a new rate: alter_queue clears it),
 * else the record refilled to now and no fuller than has refilled since
 * the first claim of this shared memory as a primary (a start, a
 * crash-restart or a promotion), so that no restart or failover lets a
 * burst through.  A bucket in shared memory starts no fuller than its row
 * would give and then only spends, so one that is full when its slot is
 * taken over is made again full: eviction neither refills nor empties a
 * bucket.  Tokens a claim took and did not use go back to the bucket they
 * came from, which never holds more than its limit less the tokens that
 * claims in progress hold.  A claim's view of the queue's limits may
 * predate an alter_queue: a bucket is made anew only for the rate the row
 * has with the latest snapshot, and max_in_flight is read with the count.
 * A bucket first used less than a reclaimer pass before a restart (or in
 * a database the reclaimer does not serve) has no record yet, and starts
 * full again.
 *
 * Without the preload, a claim updates the queue's row and so holds it
 * until its transaction ends, counts the jobs in flight and refills the
 * bucket kept in the row.  Claims of one such queue then take turns; under
 * REPEATABLE READ one that missed the previous holder's commit fails to
 * serialize.
 *
 * The only lock this file takes is the queue's row, on that slow path.
 * Shared memory's locks, and why holding them never makes anyone wait for
 * another session, are stated once, in buckets.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "utils/timestamp.h"

#include "claimq.h"

/* rate_period's bound (a limit's is CQ_MAX_LIMIT). */
static const Interval cq_max_rate_period = {.time = 0,.day = 1,.month = 0};

PG_FUNCTION_INFO_V1(claimq_check_flow_settings);

/*
 * check_flow_settings(group_limit, max_in_flight, rate_limit, rate_period)
 * returns void: the checks of create_queue and alter_queue.  NULL passes.
 */
Datum
claimq_check_flow_settings(PG_FUNCTION_ARGS)
{
	static const char *const names[3] = {"group_limit", "max_in_flight",
	"rate_limit"};

	for (int argno = 0; argno < 3; argno++)
		if (!PG_ARGISNULL(argno))
			(void) cq_int_arg(fcinfo, argno, names[argno], 1, CQ_MAX_LIMIT);

	/*
	 * The bucket counts a period in days and time (cq_flow_period_of): a
	 * month has no fixed length, and "1 mon -30 days" would pass the check
	 * below in a 31-day month while counting as -30 days.
	 */
	if (!PG_ARGISNULL(3) && PG_GETARG_INTERVAL_P(3)->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate_period must not have a month part"),
				 errdetail("A rate period is at most a day, and a month's length depends on the calendar."),
				 errhint("Give the rate period in days, hours, minutes or seconds.")));
	(void) cq_interval_arg(fcinfo, 3, "rate_period", false,
						   &cq_max_rate_period, "1 day");
	PG_RETURN_VOID();
}

/* The queue's jobs in flight: every claimed or running job has a lease. */
#define CQ_IN_FLIGHT_SQL \
	"(SELECT pg_catalog.count(*) FROM claimq.job j" \
	"  WHERE j.expires_at IS NOT NULL AND j.queue_id = $1)"

/*
 * A rate_period in microseconds: its days and time, greater than zero and
 * at most a day.  check_flow_settings refuses anything else, but a queue
 * row written by an earlier release may hold a month part (which this
 * leaves out, as the calendar gives a month no fixed length) and so a
 * length of zero, below or above: that raises an error rather than
 * handing out nothing, since a queue that silently never hands out looks
 * like one that is only rate limited, for ever, while the error says what
 * to mend.  Never called under a spinlock.
 */
static int64
cq_flow_period_of(const char *queue_name, const Interval *rate_period)
{
	int64		period = rate_period->time +
	(int64) rate_period->day * USECS_PER_DAY;

	if (period <= 0 || period > cq_max_rate_period.day * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("rate_period of queue \"%s\" cannot be used", queue_name),
				 errdetail("Counted in days and time, leaving out its month part, it is not greater than zero and at most 1 day."),
				 errhint("Set it again with claimq.alter_queue, in days, hours, minutes or seconds.")));
	return period;
}

/*
 * The queue's bucket at now as its row has it: full if the row has no
 * record of a bucket (its first use, or a new rate: alter_queue clears
 * it), else the recorded tokens refilled to now and, with the preload, no
 * more than have refilled since cq_buckets_started.  Used both to make a
 * bucket in shared memory and by a claim on the row.  A bucket in shared
 * memory starts no fuller than its row would give and only spends after,
 * so one that is full when its slot is taken over is made again full.
 */
static double
cq_flow_row_tokens(int32 rate_limit, int64 period, bool no_record,
				   double rate_tokens, TimestampTz rate_at, TimestampTz now)
{
	double		per_usec = (double) rate_limit / period;
	double		tokens;

	if (no_record)
		return rate_limit;
	tokens = rate_tokens + (double) Max(now - rate_at, 0) * per_usec;
	if (cq_shmem_ready)
		tokens = Min(tokens, (double) Max(now - cq_buckets_started(now), 0) * per_usec);
	return Min((double) rate_limit, tokens);
}

/*
 * Read the queue's row with the latest snapshot: its current limits (a
 * claim's own view of them may predate an alter_queue) and its bucket,
 * which the claims that wrote it last have ended.  The caller has
 * connected SPI.
 */
static void
cq_flow_read_row(const CqQueue *queue, TimestampTz now, CqFlowRow *row)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	bool		isnull;
	bool		no_record;
	double		rate_tokens;
	TimestampTz rate_at;

	cq_plan(&plan,
			"SELECT q.max_in_flight, q.rate_limit, q.rate_period,"
			"       q.rate_tokens, q.rate_at"
			"  FROM claimq.queue q WHERE q.queue_id = $1",
			1, argtypes);
	values[0] = Int32GetDatum(queue->queue_id);
	cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);
	memset(row, 0, sizeof(*row));
	if (SPI_processed != 1)
		return;					/* dropped meanwhile */
	row->found = true;
	row->max_in_flight = DatumGetInt32(cq_spi_value(0, 1, &isnull));
	if (isnull)
		row->max_in_flight = 0;
	row->rate_limit = DatumGetInt32(cq_spi_value(0, 2, &isnull));
	if (isnull || row->rate_limit <= 0)
	{
		row->rate_limit = 0;
		return;
	}
	row->period = cq_flow_period_of(queue->name,
									DatumGetIntervalP(cq_spi_value(0, 3, &isnull)));
	rate_tokens = DatumGetFloat8(cq_spi_value(0, 4, &isnull));
	if (isnull)
		rate_tokens = 0;
	rate_at = DatumGetTimestampTz(cq_spi_value(0, 5, &no_record));
	row->tokens = cq_flow_row_tokens(row->rate_limit, row->period, no_record,
									 rate_tokens, rate_at, now);
}

/*
 * Steps 1 and 2 of a claim with the preload (see the file header): step 1
 * in the queue's slot, reading the row first if the slot's bucket is not
 * the one the claim expects (cq_bucket_reserve), then the count.  Returns
 * false, having changed nothing, if the queue has no slot and none can be
 * had: the claim then takes turns on the queue's row.
 */
static bool
cq_flow_shared(const CqQueue *queue, int32 max_jobs, CqFlowTicket *ticket)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		period = 0;
	int64		others;
	CqFlowRow	row = {0};
	uint64		read_for = 0;	/* the slot whose bucket row was read for */
	CqFlowReserve done;

	if (queue->rate_limit > 0)
		period = cq_flow_period_of(queue->name, &queue->rate_period);
	while ((done = cq_bucket_reserve(queue, period, max_jobs, now, &row,
									 &read_for, ticket, &others)) == CQ_FLOW_READ_ROW)
	{
		cq_flow_read_row(queue, now, &row);
		if (!row.found)
		{
			ticket->allowed = 0;	/* dropped meanwhile */
			return true;
		}
	}
	if (done == CQ_FLOW_NO_SLOT)
		return false;
	if (done == CQ_FLOW_TOO_MANY)
	{
		/* Claims from too many limited queues: nothing this time. */
		ticket->allowed = 0;
		return true;
	}

	/* Step 2: the jobs in flight, as committed by now, and the limit now. */
	if (queue->max_in_flight > 0 || queue->rate_limit > 0)
	{
		static SPIPlanPtr plan = NULL;
		Oid			argtypes[1] = {INT4OID};
		Datum		values[1];
		bool		isnull;
		int64		in_flight;
		Datum		limit;

		cq_plan(&plan,
				"SELECT " CQ_IN_FLIGHT_SQL ", q.max_in_flight"
				"  FROM claimq.queue q WHERE q.queue_id = $1",
				1, argtypes);
		values[0] = Int32GetDatum(queue->queue_id);
		/* The latest snapshot, whatever the isolation level. */
		cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);
		if (SPI_processed != 1)
			ticket->allowed = 0;	/* dropped meanwhile */
		else
		{
			in_flight = DatumGetInt64(cq_spi_value(0, 1, &isnull));
			limit = cq_spi_value(0, 2, &isnull);
			if (!isnull)
				ticket->allowed = (int32) Max(0, Min((int64) ticket->allowed,
													 DatumGetInt32(limit) - in_flight - others));
		}
	}
	return true;
}

/*
 * How many jobs a claim of the queue may take, at most max_jobs, under its
 * queue-wide limits.  The claim must then call cq_flow_spend with the
 * number it took.  The caller has connected SPI.
 */
int32
cq_flow_allowance(const CqQueue *queue, int32 max_jobs, CqFlowTicket *ticket)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr count_plan = NULL;
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	bool		isnull;
	int32		allowed = max_jobs;

	ticket->slot = NULL;
	ticket->row_bucket = false;
	ticket->refill_ms = 0;
	if (queue->max_in_flight <= 0 && queue->rate_limit <= 0)
		return max_jobs;
	if (cq_shmem_ready)
	{
		bool		on_row = false;

		(void) cq_buckets_started(GetCurrentTimestamp());

		/*
		 * Shared memory if the queue has a slot or can have one; else its
		 * row, noted so that no slot is made while the claim is in progress
		 * (nor a claim on the row is made while a slot has reservations: a
		 * slot with them is never taken over).  So the claims of a queue in
		 * progress at any moment all took the same path.
		 */
		for (int attempt = 0; attempt < 3 && !on_row; attempt++)
		{
			bool		too_many;

			if (cq_flow_shared(queue, max_jobs, ticket))
				return ticket->allowed;
			on_row = cq_bucket_row_enter(queue->queue_id, &too_many);
			if (too_many)
				return 0;
		}
		if (!on_row)
			return 0;
	}

	/*
	 * The row.  Take turns on it first; what follows runs with a newer
	 * snapshot, which sees the previous holder's claims and bucket.  The lock
	 * is an update, so that under REPEATABLE READ a claim whose snapshot is
	 * older than the previous holder's commit fails to serialize instead of
	 * counting from that snapshot.  With the preload, the count takes the
	 * latest snapshot: the claims through shared memory that came before have
	 * ended, but did not write the row.
	 */
	cq_plan(&lock_plan,
			"UPDATE claimq.queue q SET rate_at = q.rate_at WHERE q.queue_id = $1",
			1, argtypes);
	values[0] = Int32GetDatum(queue->queue_id);
	cq_execute(lock_plan, values, NULL, SPI_OK_UPDATE);

	cq_plan(&count_plan,
			"SELECT " CQ_IN_FLIGHT_SQL ", q.rate_tokens, q.rate_at"
			"  FROM claimq.queue q WHERE q.queue_id = $1",
			1, argtypes);
	ticket->at = GetCurrentTimestamp();
	if (cq_shmem_ready)
		cq_execute_latest(count_plan, values, NULL, SPI_OK_SELECT);
	else
		cq_execute(count_plan, values, NULL, SPI_OK_SELECT);
	if (SPI_processed != 1)
		return 0;				/* dropped meanwhile */

	if (queue->max_in_flight > 0)
	{
		int64		in_flight = DatumGetInt64(cq_spi_value(0, 1, &isnull));

		allowed = (int32) Max(0, Min((int64) allowed,
									 queue->max_in_flight - in_flight));
	}
	if (queue->rate_limit > 0)
	{
		bool		no_record;
		TimestampTz rate_at = DatumGetTimestampTz(cq_spi_value(0, 3, &no_record));
		double		rate_tokens = DatumGetFloat8(cq_spi_value(0, 2, &isnull));
		int64		period = cq_flow_period_of(queue->name, &queue->rate_period);

		ticket->row_bucket = true;
		ticket->row_tokens = cq_flow_row_tokens(queue->rate_limit, period,
												no_record, isnull ? 0 : rate_tokens,
												rate_at, ticket->at);
		allowed = (int32) Max(0, Min((double) allowed, floor(ticket->row_tokens)));
		if (ticket->row_tokens < 1)
			ticket->refill_ms = cq_bucket_refill_ms(ticket->row_tokens,
													queue->rate_limit, period);
	}
	return allowed;
}

/*
 * After a claim that took n jobs: give back the slots and tokens it did not
 * use (shared memory: cq_bucket_give_back), or store the bucket in the
 * queue's row (this runs SPI).
 */
void
cq_flow_spend(const CqQueue *queue, CqFlowTicket *ticket, int32 n)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[3] = {INT4OID, FLOAT8OID, TIMESTAMPTZOID};
	Datum		values[3];

	if (ticket->slot != NULL)
	{
		cq_bucket_give_back(ticket, n);
		return;
	}
	if (!ticket->row_bucket || n == 0)
		return;
	cq_plan(&plan,
			"UPDATE claimq.queue q SET rate_tokens = $2, rate_at = $3"
			" WHERE q.queue_id = $1",
			3, argtypes);
	values[0] = Int32GetDatum(queue->queue_id);
	values[1] = Float8GetDatum(ticket->row_tokens - n);
	values[2] = TimestampTzGetDatum(ticket->at);
	cq_execute(plan, values, NULL, SPI_OK_UPDATE);
}

/*
 * The reclaimer's share of the queue-wide limits, once a pass, in a
 * transaction of its own (before groups.c's): record in their queues' rows
 * the buckets in shared memory for this database whose rows have no
 * record, and those left unused since the last pass that are not full,
 * with the tokens they hold now, only where the row's rate is still the
 * bucket's (an alter_queue that changed the rate since has made the next
 * bucket new and full).  Each pass looks again, so a record whose
 * transaction failed is written by the next.  A bucket unused since its
 * record was written may give its slot to another queue (buckets.c's
 * cq_bucket_evictable), to be made again from the record when its queue is
 * claimed from next: so a table full of slow queues' buckets (full again
 * only after a whole rate_period, up to a day) does not keep other limited
 * queues on their rows for long.  A row that another transaction holds
 * (an alter_queue not yet committed) is skipped, not waited for: the next
 * pass writes it.  On a distributed install the buckets, read once, are
 * written to the queue rows of each shard placed here in turn.  The
 * caller has connected SPI.
 */
void
cq_flow_upkeep(void)
{
	static SPIPlanPtr mark_plan = NULL;
	Oid			argtypes[6] = {INT4ARRAYOID, INT4ARRAYOID, INTERVALARRAYOID,
	FLOAT8ARRAYOID, TIMESTAMPTZOID, BOOLARRAYOID};
	Datum		values[6];
	CqFlowBucket *buckets;
	TimestampTz now;
	int			n;
	Datum	   *d[5];
	List	   *shards;
	ListCell   *lc;

	if (!cq_shmem_ready)
		return;
	now = GetCurrentTimestamp();
	n = cq_buckets_of_database(now, &buckets);
	if (n == 0)
		return;

	for (int k = 0; k < 5; k++)
		d[k] = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
	{
		d[0][i] = Int32GetDatum(buckets[i].queue_id);
		d[1][i] = Int32GetDatum(buckets[i].rate_limit);
		d[2][i] = IntervalPGetDatum(&buckets[i].period);
		d[3][i] = Float8GetDatum(buckets[i].tokens);
		d[4][i] = BoolGetDatum(buckets[i].idle);
	}
	cq_plan(&mark_plan,
			"WITH v AS ("
			"  SELECT * FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
			"                           pg_catalog.unnest($3), pg_catalog.unnest($4),"
			"                           pg_catalog.unnest($6)) WITH ORDINALITY"
			"         v(queue_id, rate_limit, period, tokens, idle, i)),"
			" free AS ("
			"  SELECT q.queue_id, v.tokens, v.i FROM claimq.queue q, v"
			"   WHERE q.queue_id = v.queue_id AND (q.rate_at IS NULL OR v.idle)"
			"     AND q.rate_limit = v.rate_limit AND q.rate_period = v.period"
			"     FOR UPDATE OF q SKIP LOCKED)"
			"UPDATE claimq.queue q SET rate_tokens = f.tokens, rate_at = $5"
			"  FROM free f WHERE q.queue_id = f.queue_id"
			" RETURNING f.i",
			6, argtypes);
	values[0] = PointerGetDatum(construct_array(d[0], n, INT4OID, sizeof(int32),
												true, TYPALIGN_INT));
	values[1] = PointerGetDatum(construct_array(d[1], n, INT4OID, sizeof(int32),
												true, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(d[2], n, INTERVALOID,
												sizeof(Interval), false,
												TYPALIGN_DOUBLE));
	values[3] = PointerGetDatum(construct_array(d[3], n, FLOAT8OID,
												sizeof(float8), FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	values[4] = TimestampTzGetDatum(now);
	values[5] = PointerGetDatum(construct_array(d[4], n, BOOLOID, sizeof(bool),
												true, TYPALIGN_CHAR));
	shards = cq_distributed() ? cq_local_shards(false) : list_make1(NULL);
	foreach(lc, shards)
	{
		if (lfirst(lc) != NULL)
		{
			cq_route_to_shard(*(int64 *) lfirst(lc), false);
			cq_route_ready();
		}
		cq_execute(mark_plan, values, NULL, SPI_OK_UPDATE_RETURNING);

		/* The idle buckets written: their slots may go once this commits. */
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			CqFlowBucket *b = &buckets[DatumGetInt64(cq_spi_value(r, 1, &isnull)) - 1];

			if (b->idle)
				cq_bucket_recorded(b);
		}
	}
	if (cq_distributed())
		cq_route_end();
}
