/*
 * queue-changed.sql: the trigger that tells each backend to read a
 * queue's settings again, the one text of the install script and of the
 * update to 0.8.  The C edition keeps the settings of the queues a
 * backend looked up (src/common.c, cq_lookup_queue) until a statement
 * writes claimq.queue: every column but the rate limit's bucket
 * (rate_tokens and rate_at, which a claim without the preload writes),
 * so a column added to claimq.queue is added to this list too.
 */
CREATE FUNCTION claimq.queue_changed()
RETURNS trigger
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_queue_changed';

COMMENT ON FUNCTION claimq.queue_changed() IS
'private: the trigger of claimq.queue that makes every backend read the queues'' settings again';

-- @c
CREATE TRIGGER queue_changed
	AFTER INSERT OR DELETE OR TRUNCATE
		OR UPDATE OF queue_id, name, lease, run_lease, max_attempts,
			retry_base, retry_max, keep_done, keep_dead, notify, paused,
			created_at, group_limit, group_fifo, max_in_flight, rate_limit,
			rate_period, fair
	ON claimq.queue
	FOR EACH STATEMENT EXECUTE FUNCTION claimq.queue_changed();

-- Also under session_replication_role = replica (a subscriber's apply,
-- some restores): a backend would go on with settings no longer there.
ALTER TABLE claimq.queue ENABLE ALWAYS TRIGGER queue_changed;
-- @end
