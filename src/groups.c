/*-------------------------------------------------------------------------
 *
 * groups.c
 *		Group limits: held pending -> pending under a queue's group_limit
 *		or group_fifo.  (The queue-wide limits are limits.c's.)
 *
 * On a queue with group_limit or group_fifo, a pending job of a group is
 * either free or "held".  Held jobs are not in the claim's index, so a
 * claim never sees, let alone steps over, the jobs of a blocked or
 * saturated group; and the free jobs of a group, pending or in flight,
 * are never more than its limit, so a claim may take any free job without
 * looking at its group at all.  A claim turns a free pending job into a
 * free job in flight and so changes no group's count.  The limit, a
 * group's cap, is group_limit, or 1 with group_fifo (cq_group_cap, which
 * SQL calls as claimq.group_cap).
 *
 * Which jobs are held is decided by claimq.sync_groups (sql/claimq.sql)
 * under the group's lock, a row of claimq.job_group:
 *
 *		enqueue		locks the group before the insert (so that in a FIFO
 *					group id order is commit order), inserts the job held,
 *					then syncs
 *		complete, fail, release, snooze, release_worker, cancel, reclaim
 *					sync the groups of the jobs they changed, in the same
 *					statement's transaction
 *		retry_dead, purge_queue, alter_queue
 *					the same, in SQL
 *
 * The sync counts the group's free jobs after taking the lock, so it sees
 * every change of the group's previous holder; a free job settled by a
 * transaction still in progress is still counted, which errs on the side
 * of the limit, and that transaction syncs after it.  Jobs it frees wake
 * waiting claims and lower the queue's claim floor at commit.
 *
 * Once a pass, the reclaimer syncs the groups left behind
 * (cq_groups_upkeep).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "utils/builtins.h"

#include "claimq.h"

/*
 * A group's cap: how many of its jobs may be free at a time under the
 * queue's group_limit (0: none) and group_fifo.  A FIFO group's cap is 1,
 * whatever group_limit says (one job at a time, in id order); 0 means the
 * queue's groups are not limited.  The one copy of the rule: SQL reaches
 * it through claimq.group_cap.
 */
static int32
cq_group_cap(int32 group_limit, bool group_fifo)
{
	if (group_fifo)
		return 1;
	return Max(group_limit, 0);
}

PG_FUNCTION_INFO_V1(claimq_group_cap);

/*
 * group_cap(group_limit, group_fifo) returns integer: cq_group_cap, NULL
 * where that is 0.  A NULL group_limit is none, a NULL group_fifo false.
 */
Datum
claimq_group_cap(PG_FUNCTION_ARGS)
{
	int32		cap = cq_group_cap(PG_ARGISNULL(0) ? 0 : PG_GETARG_INT32(0),
								   !PG_ARGISNULL(1) && PG_GETARG_BOOL(1));

	if (cap == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT32(cap);
}

/*
 * Whether the queue's groups are limited (they have a cap), so that its
 * grouped pending jobs go in held.
 */
bool
cq_queue_groups_limited(const CqQueue *queue)
{
	return cq_group_cap(queue->group_limit, queue->group_fifo) > 0;
}

/*
 * Note that a statement changed a job of group key in the queue.
 */
void
cq_groups_note(CqGroups *groups, int32 queue_id, Datum key)
{
	if (groups->n == groups->size)
	{
		groups->size = Max(8, groups->size * 2);
		if (groups->n == 0)
		{
			groups->queue_ids = palloc(groups->size * sizeof(int32));
			groups->keys = palloc(groups->size * sizeof(Datum));
		}
		else
		{
			groups->queue_ids = repalloc(groups->queue_ids,
										 groups->size * sizeof(int32));
			groups->keys = repalloc(groups->keys, groups->size * sizeof(Datum));
		}
	}
	groups->queue_ids[groups->n] = queue_id;
	groups->keys[groups->n] = key;
	groups->n++;
}

/*
 * Sync one queue's groups, keys a text[] (claimq.sync_groups does nothing
 * on a queue without group limits).  Returns the earliest run_at of the
 * held jobs it freed, DT_NOEND if none: the caller tells the ledger that
 * they are ready at commit.  The caller has connected SPI.
 */
TimestampTz
cq_groups_sync_one(int32 queue_id, Datum keys)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT4OID, TEXTARRAYOID};
	Datum		values[2];
	bool		isnull;
	Datum		freed_at;

	cq_plan(&plan, "SELECT claimq.sync_groups($1, $2)", 2, argtypes);
	values[0] = Int32GetDatum(queue_id);
	values[1] = keys;
	cq_execute(plan, values, NULL, SPI_OK_SELECT);
	freed_at = cq_spi_value(0, 1, &isnull);
	return isnull ? DT_NOEND : DatumGetTimestampTz(freed_at);
}

/* Room in groups for what syncs of up to n queues free. */
static void
cq_groups_freed_init(CqGroups *groups, int n)
{
	groups->nfreed = 0;
	groups->freed_queue_ids = palloc(Max(n, 1) * sizeof(int32));
	groups->freed_run_ats = palloc(Max(n, 1) * sizeof(TimestampTz));
}

/* Note in groups that a sync freed held jobs of the queue from run_at. */
static void
cq_groups_freed(CqGroups *groups, int32 queue_id, TimestampTz run_at)
{
	if (run_at == DT_NOEND)
		return;
	groups->freed_queue_ids[groups->nfreed] = queue_id;
	groups->freed_run_ats[groups->nfreed++] = run_at;
}

/*
 * Sync the groups noted, one call per queue, and note in groups the
 * queues whose held jobs were freed, which the caller tells the ledger.  The
 * caller has connected SPI; the keys must stay valid until this returns.
 */
void
cq_groups_sync_noted(CqGroups *groups)
{
	bool	   *done;

	groups->nfreed = 0;
	if (groups->n == 0)
		return;
	cq_groups_freed_init(groups, groups->n);
	done = palloc0(groups->n * sizeof(bool));
	for (int i = 0; i < groups->n; i++)
	{
		Datum	   *keys;
		int			nkeys = 0;

		if (done[i])
			continue;
		keys = palloc(groups->n * sizeof(Datum));
		for (int j = i; j < groups->n; j++)
			if (!done[j] && groups->queue_ids[j] == groups->queue_ids[i])
			{
				keys[nkeys++] = groups->keys[j];
				done[j] = true;
			}
		cq_groups_freed(groups, groups->queue_ids[i],
						cq_groups_sync_one(groups->queue_ids[i],
										   PointerGetDatum(construct_array(keys, nkeys,
																		   TEXTOID, -1,
																		   false,
																		   TYPALIGN_INT))));
		pfree(keys);
	}
	pfree(done);
	groups->n = 0;
}

/*
 * The reclaimer's share of group limits, once a pass, in a transaction of
 * its own (after limits.c's): sync the groups that have held jobs but
 * fewer free jobs than their cap.  Every call that changes a group syncs
 * it, so such a group is one whose sync had to skip a row another
 * transaction held, or one changed under REPEATABLE READ from a snapshot
 * older than the group's last change; without this it could wait for
 * ever.
 *
 * Returns the number of groups synced, and notes in groups (empty) the
 * queues whose held jobs were freed, which the caller tells the ledger.  The
 * caller has connected SPI.
 */
uint64
cq_groups_upkeep(CqGroups *groups)
{
	static SPIPlanPtr stuck_plan = NULL;
	uint64		synced = 0;
	SPITupleTable *stuck;
	uint64		nstuck;

	cq_plan(&stuck_plan,
			"SELECT g.queue_id, pg_catalog.array_agg(g.group_key), q.name"
			"  FROM claimq.job_group g JOIN claimq.queue q ON q.queue_id = g.queue_id"
			" WHERE claimq.group_cap(q.group_limit, q.group_fifo) IS NOT NULL"
			"   AND EXISTS (SELECT 1 FROM claimq.job j"
			"                WHERE j.queue_id = g.queue_id AND j.group_key = g.group_key"
			"                  AND j.held AND j.state = 'pending')"
			"   AND (SELECT pg_catalog.count(*) FROM claimq.job j"
			"         WHERE j.queue_id = g.queue_id AND j.group_key = g.group_key"
			"           AND NOT j.held"
			"           AND j.state = ANY (" CQ_GROUP_STATES "))"
			"       < claimq.group_cap(q.group_limit, q.group_fifo)"
			" GROUP BY g.queue_id, q.name",
			0, NULL);
	cq_execute(stuck_plan, NULL, NULL, SPI_OK_SELECT);
	stuck = SPI_tuptable;
	nstuck = SPI_processed;
	cq_groups_freed_init(groups, (int) nstuck);
	for (uint64 row = 0; row < nstuck; row++)
	{
		bool		isnull;
		Datum		keys = SPI_getbinval(stuck->vals[row], stuck->tupdesc, 2, &isnull);
		int32		queue_id = DatumGetInt32(SPI_getbinval(stuck->vals[row],
														   stuck->tupdesc,
														   1, &isnull));

		/*
		 * On a distributed install a shard's pass finds them: the sync, which
		 * may add a group's row, routes to the queue by its name.
		 */
		if (cq_distributed())
			cq_route_to(TextDatumGetCString(SPI_getbinval(stuck->vals[row],
														  stuck->tupdesc,
														  3, &isnull)));
		cq_groups_freed(groups, queue_id, cq_groups_sync_one(queue_id, keys));
		synced += ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(keys)),
								 ARR_DIMS(DatumGetArrayTypeP(keys)));
	}
	return synced;
}
