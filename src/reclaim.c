/*-------------------------------------------------------------------------
 *
 * reclaim.c
 *		Recovering: reclaim(), which puts expired claims back.
 *
 *		claimed, lease expired -> pending, no attempt counted (the handler
 *								  never ran), run_at unchanged
 *		running, lease expired -> the attempt counted at start failed:
 *								  pending after a backoff, or dead when no
 *								  attempts are left
 *
 * Since version 0.4, expired jobs are found through claimq.lease: every
 * claim, start and extend files one row holding the ids of the jobs it
 * gave an expiry and that expiry, so each claimed or running job has a row
 * due no later than its own expires_at.  A pass takes the due rows, oldest
 * first (FOR UPDATE SKIP LOCKED, so two passes share the work), looks their
 * jobs up by id and reclaims those whose own expires_at has passed; a job
 * settled, extended or claimed again meanwhile no longer matches.  The
 * same statement deletes each due row none of whose jobs is held and
 * expired any more, as its snapshot sees them: the jobs reclaimed by this
 * very pass are seen still expired, so their rows go on the next pass.
 * (Before 0.4, the expired rows were found through an index over
 * claimq.job.expires_at; this library still does that on the old schema,
 * until ALTER EXTENSION UPDATE.)
 *
 * The jobs are locked FOR UPDATE SKIP LOCKED: a row its holder is settling
 * right now is skipped, to be looked at again on the next pass if it is
 * still expired then (its lease row stays for that).  Locking re-checks
 * the row's latest version, and the UPDATE re-checks the expiry once more
 * under that lock, so a job completed, extended or claimed again meanwhile
 * is never overwritten.
 *
 * The same function serves SQL callers and the background reclaimer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/varlena.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_reclaim);

#define CQ_RECLAIM_DEAD "(j.state = 'running' AND j.attempts >= q.max_attempts)"

/*
 * Reclaim up to max_jobs expired claims of one queue (queue_id > 0) or of
 * every queue (queue_id = 0), looking at up to max_jobs due lease rows.
 * Adds what it did to *pass: per queue (in pass->queues, a list of
 * CqReclaimed, if the caller wants it), and in all.  The caller has
 * connected SPI; the list lives in the SPI procedure's memory.
 */
void
cq_reclaim_expired(int32 queue_id, int32 max_jobs, CqReclaimPass *pass)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	bool		leases = cq_leases();
	Oid			argtypes[3] = {INT4OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[3];
	CqCountBatch counts = {0};

	if (plans[leases] == NULL)
		cq_plan(&plans[leases], psprintf("%s%s", leases ?
			"WITH due AS MATERIALIZED ("
			"  SELECT l.ctid AS lctid, l.job_ids FROM claimq.lease l"
			"   WHERE l.expires_at < $3"
			"     AND ($1 = 0 OR l.queue_id = $1)"
			"   ORDER BY l.expires_at"
			"   LIMIT $2"
			"   FOR UPDATE SKIP LOCKED"
			"), cand AS MATERIALIZED ("
			"  SELECT j.job_id FROM claimq.job j"
			"   WHERE j.job_id = ANY (ARRAY("
			"           SELECT pg_catalog.unnest(d.job_ids) FROM due d))"
			"     AND j.expires_at < $3"
			"   ORDER BY j.expires_at, j.job_id"
			"   LIMIT $2"
			"   FOR UPDATE SKIP LOCKED"
			"), gone AS ("
			"  DELETE FROM claimq.lease l"
			"   WHERE l.ctid = ANY (ARRAY(SELECT d.lctid FROM due d))"
			"     AND NOT EXISTS (SELECT 1 FROM claimq.job j"
			"                      WHERE j.job_id = ANY (l.job_ids)"
			"                        AND j.expires_at < $3)"
			"  RETURNING 1"
			")" :
			"WITH cand AS MATERIALIZED ("
			"  SELECT j.job_id FROM claimq.job j"
			"   WHERE j.expires_at < $3"
			"     AND ($1 = 0 OR j.queue_id = $1)"
			"   ORDER BY j.expires_at"
			"   LIMIT $2"
			"   FOR UPDATE SKIP LOCKED"
			"), due AS (SELECT c.job_id FROM cand c), gone AS (SELECT 1 WHERE false)",
			", upd AS ("
			"  UPDATE claimq.job j"
			"     SET state = CASE WHEN " CQ_RECLAIM_DEAD " THEN 'dead'"
			"                 ELSE 'pending' END,"
			"         run_at = CASE WHEN j.state = 'claimed' OR " CQ_RECLAIM_DEAD
			"                  THEN j.run_at"
			"                  ELSE $3 + " CQ_BACKOFF_SQL("j.attempts") " END,"
			"         finished_at = CASE WHEN " CQ_RECLAIM_DEAD " THEN $3 END,"
			"         last_error = CASE WHEN j.state = 'running'"
			"                      THEN 'lease expired' ELSE j.last_error END,"
			"         expires_at = NULL"
			"    FROM claimq.queue q"
			"   WHERE j.job_id = ANY (ARRAY(SELECT c.job_id FROM cand c))"
			"     AND j.expires_at < $3 AND q.queue_id = j.queue_id"
			"  RETURNING q.queue_id, q.name, j.state, j.run_at"
			")"
			/*
			 * A released job keeps its run_at, which is before its claim and
			 * so before $3; a retried one runs at $3 plus a backoff.  The
			 * last row (queue_id 0) counts the due lease rows taken and
			 * deleted (before 0.4: the jobs taken, and none).
			 */
			" SELECT u.queue_id, u.name,"
			"        pg_catalog.count(*) FILTER (WHERE u.state = 'pending'"
			"                                      AND u.run_at < $3),"
			"        pg_catalog.count(*) FILTER (WHERE u.state = 'pending'"
			"                                      AND u.run_at >= $3),"
			"        pg_catalog.count(*) FILTER (WHERE u.state = 'dead'),"
			"        pg_catalog.min(u.run_at) FILTER (WHERE u.state = 'pending')"
			"   FROM upd u GROUP BY u.queue_id, u.name"
			" UNION ALL"
			" SELECT 0, NULL, (SELECT pg_catalog.count(*) FROM due),"
			"        (SELECT pg_catalog.count(*) FROM gone), 0, NULL"),
			3, argtypes);

	values[0] = Int32GetDatum(queue_id);
	values[1] = Int32GetDatum(max_jobs);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	cq_execute(plans[leases], values, NULL, SPI_OK_SELECT);

	pass->taken = pass->dropped = pass->reclaimed = 0;
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		Datum		v[6];
		bool		isnull[6];
		int32		qid;
		int64		n;
		CqReclaimed *acc = NULL;
		ListCell   *lc;

		/*
		 * queue_id, queue, released, retried, dead, the earliest run_at
		 * made pending
		 */
		heap_deform_tuple(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						  v, isnull);
		qid = DatumGetInt32(v[0]);
		if (qid == 0)
		{
			pass->taken = DatumGetInt64(v[2]);
			pass->dropped = DatumGetInt64(v[3]);
			continue;
		}
		n = DatumGetInt64(v[2]) + DatumGetInt64(v[3]) + DatumGetInt64(v[4]);
		pass->reclaimed += n;
		cq_count_add(&counts, qid, CQ_RECLAIMED, n);
		if (!isnull[5])
			cq_ready_on_commit(qid, DatumGetTimestampTz(v[5]));
		cq_count_add(&counts, qid, CQ_DEAD, DatumGetInt64(v[4]));
		if (!pass->want_queues)
			continue;
		foreach(lc, pass->queues)
		{
			if (((CqReclaimed *) lfirst(lc))->queue_id == qid)
				acc = lfirst(lc);
		}
		if (acc == NULL)
		{
			acc = palloc0(sizeof(CqReclaimed));
			acc->queue_id = qid;
			acc->name = TextDatumGetCString(v[1]);
			pass->queues = lappend(pass->queues, acc);
		}
		for (int i = 0; i < 3; i++)
			acc->counts[i] += DatumGetInt64(v[2 + i]);
	}
	cq_count_flush(&counts);
}

/* Queue rows of reclaim()'s result in the order of their names. */
static int
cq_reclaimed_cmp(const ListCell *a, const ListCell *b)
{
	const char *x = ((CqReclaimed *) lfirst(a))->name;
	const char *y = ((CqReclaimed *) lfirst(b))->name;

	return varstr_cmp(x, strlen(x), y, strlen(y), DEFAULT_COLLATION_OID);
}

/*
 * reclaim(queue text DEFAULT NULL, max_jobs int DEFAULT 10000)
 * returns table(queue, released, retried, dead)
 *
 * With a queue named, there is always exactly one row for it; without,
 * one row per queue that had expired claims.
 */
Datum
claimq_reclaim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *queue_name = NULL;
	int32		max_jobs;
	CqQueue		queue;
	CqReclaimPass pass = {0};
	uint64		total = 0;
	ListCell   *lc;

	if (!PG_ARGISNULL(0))
		queue_name = cq_queue_name_arg(fcinfo, 0);
	max_jobs = cq_int_arg(fcinfo, 1, "max_jobs", 1, CQ_MAX_BATCH);

	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	if (queue_name)
		cq_require_queue(queue_name, &queue);

	/*
	 * Due lease rows of jobs settled meanwhile come first in expiry order
	 * and are only deleted; go on past them while the statement did
	 * something and was not done, up to max_jobs jobs in all.
	 */
	pass.want_queues = true;
	for (;;)
	{
		int32		want = max_jobs - (int32) total;

		cq_reclaim_expired(queue_name ? queue.queue_id : 0, want, &pass);
		total += pass.reclaimed;
		if (total >= (uint64) max_jobs || pass.taken < (uint64) want ||
			(pass.reclaimed == 0 && pass.dropped == 0))
			break;
	}
	list_sort(pass.queues, cq_reclaimed_cmp);
	foreach(lc, pass.queues)
	{
		CqReclaimed *r = lfirst(lc);
		Datum		values[4] = {CStringGetTextDatum(r->name),
			Int64GetDatum(r->counts[0]), Int64GetDatum(r->counts[1]),
			Int64GetDatum(r->counts[2])};
		bool		nulls[4] = {false, false, false, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	if (queue_name && total == 0)
	{
		Datum		values[4] = {CStringGetTextDatum(queue_name),
			Int64GetDatum(0), Int64GetDatum(0), Int64GetDatum(0)};
		bool		nulls[4] = {false, false, false, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}
