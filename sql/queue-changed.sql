/*
 * queue-changed.sql: what the C edition keeps of a queue in each backend,
 * and how it learns that it changed; the one text of the install script
 * and of the update to 0.8.
 *
 * A backend keeps the settings of the queues it looked up (src/common.c,
 * cq_lookup_queue) until a statement writes claimq.queue: every column
 * but the rate limit's bucket (rate_tokens and rate_at, which a claim
 * without the preload writes), so a column added to claimq.queue is added
 * to this trigger's list too.
 *
 * One of them is not a setting: prioritized, whether a job of the queue
 * was ever enqueued at a priority other than 0.  While it is not, every
 * job of the queue is at priority 0, and a claim takes them in order
 * without walking the queue's priorities (src/claim.c).  The first
 * enqueue at another priority marks the queue in its own transaction
 * (mark_prioritized), so that claims walk the priorities once they can
 * see its job; after a write of jobs that is not claimq's own, the
 * census's guard marks every queue that has such a job (src/census.c).
 */
CREATE FUNCTION claimq.queue_changed()
RETURNS trigger
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_queue_changed';

COMMENT ON FUNCTION claimq.queue_changed() IS
'private: the trigger of claimq.queue that makes every backend read the queues'' settings again';

/*
 * mark_prioritized(queue_id): a job of the queue is at a priority other
 * than 0 from this transaction on.  Called by an enqueue at such a
 * priority into a queue that it found unmarked: the UPDATE waits for a
 * transaction that changes the queue's row (under REPEATABLE READ it
 * fails to serialize if one did since the snapshot), once per queue.
 * With NULL: every queue that has a job (of any state) at another
 * priority, which takes a pass over the jobs; by the census's guard after
 * a write of jobs that is not claimq's own (a restore's, say), and by the
 * update to 0.8.
 */
CREATE FUNCTION claimq.mark_prioritized(queue_id integer)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
	UPDATE claimq.queue q SET prioritized = true
	 WHERE q.queue_id OPERATOR(pg_catalog.=) mark_prioritized.queue_id
	   AND NOT q.prioritized;
	UPDATE claimq.queue q SET prioritized = true
	 WHERE mark_prioritized.queue_id IS NULL AND NOT q.prioritized
	   AND EXISTS (SELECT FROM claimq.job j
				    WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
				      AND j.priority OPERATOR(pg_catalog.<>) 0);
$$;

COMMENT ON FUNCTION claimq.mark_prioritized(integer) IS
'private: marks the queue as holding jobs at priorities other than 0, whose claims then walk its priorities';

-- @c
CREATE TRIGGER queue_changed
	AFTER INSERT OR DELETE OR TRUNCATE
		OR UPDATE OF queue_id, name, lease, run_lease, max_attempts,
			retry_base, retry_max, keep_done, keep_dead, notify, paused,
			created_at, group_limit, group_fifo, max_in_flight, rate_limit,
			rate_period, fair, prioritized
	ON claimq.queue
	FOR EACH STATEMENT EXECUTE FUNCTION claimq.queue_changed();

-- Also under session_replication_role = replica (a subscriber's apply,
-- some restores): a backend would go on with settings no longer there.
ALTER TABLE claimq.queue ENABLE ALWAYS TRIGGER queue_changed;
-- @end
