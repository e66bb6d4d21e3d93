/*
 * sql/job-calls.sql: the calls about jobs already enqueued, each with the
 * trailing "queue" argument of 0.8 (sql/claimq.sql and the update to 0.8
 * include it): given, every job found must be in that queue (22023;
 * 42704 if there is no such queue), as src/common.c's cq_in_queue_* and
 * check_in_queue() judge it.
 */

CREATE FUNCTION claimq.check_in_queue(queue text, job_ids bigint[])
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_check_in_queue';

COMMENT ON FUNCTION claimq.check_in_queue(text,bigint[]) IS
'private: raise 42704 if queue is given and does not exist, 22023 if a listed job is in another queue';

/*
 * Job control: cancel, status, wait_for.
 */
CREATE FUNCTION claimq.cancel(job_ids bigint[], queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, state text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_cancel';

COMMENT ON FUNCTION claimq.cancel(bigint[],text) IS
'cancel waiting, pending, claimed or running jobs; their holders'' tokens then get the outcome cancelled';

CREATE FUNCTION claimq.status(job_ids bigint[], queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, queue text, state text, attempts integer,
			  run_at timestamptz, finished_at timestamptz, last_error text,
			  result jsonb, headers jsonb)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_status';

COMMENT ON FUNCTION claimq.status(bigint[],text) IS
'the state of each listed job, in input order; every column but job_id NULL for a job that no longer exists';

CREATE FUNCTION claimq.wait_for(job_ids bigint[], timeout interval,
								queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, queue text, state text, attempts integer,
			  run_at timestamptz, finished_at timestamptz, last_error text,
			  result jsonb, headers jsonb)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_wait_for';

COMMENT ON FUNCTION claimq.wait_for(bigint[],interval,text) IS
'wait until every listed job is done, dead, cancelled or gone, or timeout passes; then return their status';

CREATE FUNCTION claimq.start(job_ids bigint[], tokens bigint[],
							 lease interval DEFAULT NULL,
							 queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_start';

COMMENT ON FUNCTION claimq.start(bigint[],bigint[],interval,text) IS
'mark claimed jobs running, counting the attempt';

CREATE FUNCTION claimq.start(job_id bigint, token bigint,
							 lease interval DEFAULT NULL,
							 queue text DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_start_one';

COMMENT ON FUNCTION claimq.start(bigint,bigint,interval,text) IS
'start one job; true if the token still held it';

CREATE FUNCTION claimq.extend(job_ids bigint[], tokens bigint[],
							  lease interval DEFAULT NULL,
							  queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_extend';

COMMENT ON FUNCTION claimq.extend(bigint[],bigint[],interval,text) IS
'renew the leases of claimed or running jobs from now';

CREATE FUNCTION claimq.extend(job_id bigint, token bigint,
							  lease interval DEFAULT NULL,
							  queue text DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_extend_one';

COMMENT ON FUNCTION claimq.extend(bigint,bigint,interval,text) IS
'extend one job''s lease; true if the token still held it';

/*
 * Working: results on complete, and snooze.
 */
CREATE FUNCTION claimq.complete(job_ids bigint[], tokens bigint[],
								results jsonb[] DEFAULT NULL,
								queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete';

COMMENT ON FUNCTION claimq.complete(bigint[],bigint[],jsonb[],text) IS
'finish claimed or running jobs: deleted, or kept as done (with its result) on a keep_done queue';

CREATE FUNCTION claimq.complete(job_id bigint, token bigint,
								result jsonb DEFAULT NULL,
								queue text DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete_one';

COMMENT ON FUNCTION claimq.complete(bigint,bigint,jsonb,text) IS
'complete one job; true if the token still held it';

CREATE FUNCTION claimq.fail(job_ids bigint[], tokens bigint[],
							error text DEFAULT NULL,
							retry_in interval DEFAULT NULL,
							permanent boolean DEFAULT false,
							queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, state text, run_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fail';

COMMENT ON FUNCTION claimq.fail(bigint[],bigint[],text,interval,boolean,text) IS
'record a failed attempt: pending again after a backoff while attempts are left, else dead';

CREATE FUNCTION claimq.fail(job_id bigint, token bigint,
							error text DEFAULT NULL,
							retry_in interval DEFAULT NULL,
							permanent boolean DEFAULT false,
							queue text DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fail_one';

COMMENT ON FUNCTION claimq.fail(bigint,bigint,text,interval,boolean,text) IS
'fail one job; true if the token still held it';

CREATE FUNCTION claimq.release(job_ids bigint[], tokens bigint[],
							   queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_release';

COMMENT ON FUNCTION claimq.release(bigint[],bigint[],text) IS
'hand claimed, not started jobs back to the queue without counting an attempt';

CREATE FUNCTION claimq.release(job_id bigint, token bigint,
							   queue text DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_release_one';

COMMENT ON FUNCTION claimq.release(bigint,bigint,text) IS
'release one claimed job; true if the token still held it and it was not started';

CREATE FUNCTION claimq.snooze(job_ids bigint[], tokens bigint[],
							  delay interval,
							  queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, run_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_snooze';

COMMENT ON FUNCTION claimq.snooze(bigint[],bigint[],interval,text) IS
'put claimed or running jobs back to pending after delay, giving back an attempt that start counted';

CREATE FUNCTION claimq.snooze(job_id bigint, token bigint, delay interval,
							  queue text DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_snooze_one';

COMMENT ON FUNCTION claimq.snooze(bigint,bigint,interval,text) IS
'snooze one job; true if the token still held it';

/*
 * For each listed job, the jobs it runs after, in order of first
 * appearance, as they are now.
 */
CREATE FUNCTION claimq.dependencies(job_ids bigint[], queue text DEFAULT NULL)
RETURNS TABLE(job_id bigint, after_id bigint, state text, result jsonb,
			  last_error text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
	-- @include check-job-ids.sql function=dependencies
-- @c
	-- Delegated to the queue's node, where check_in_queue routes the query
	-- to its shards (Citus cannot join the tables of every worker so);
	-- without its queue, or not delegated (on the coordinator), each job's
	-- on its queue's node.
	IF claimq.node_role() OPERATOR(pg_catalog.<>) 'single'
	   AND (dependencies.queue IS NULL
			OR claimq.node_role() OPERATOR(pg_catalog.=) 'coordinator') THEN
		IF dependencies.queue IS NOT NULL THEN
			PERFORM claimq.check_in_queue(dependencies.queue, dependencies.job_ids);
		END IF;
		RETURN QUERY SELECT * FROM claimq.dependencies_everywhere(dependencies.job_ids,
																   dependencies.queue);
		RETURN;
	END IF;
-- @end
	-- @include check-in-queue.sql function=dependencies ids=dependencies.job_ids
	RETURN QUERY
	SELECT i.job_id, e.after_id, a.state::text,
		   CASE WHEN a.state OPERATOR(pg_catalog.=) 'done' THEN a.result END,
		   CASE WHEN a.state OPERATOR(pg_catalog.=) 'dead' THEN a.last_error END
	  FROM ROWS FROM (pg_catalog.unnest(dependencies.job_ids))
		   WITH ORDINALITY AS i(job_id, ord)
	  JOIN claimq.job w ON w.job_id OPERATOR(pg_catalog.=) i.job_id
	  JOIN claimq.job_after e ON e.set_id OPERATOR(pg_catalog.=) w.after_set
	  LEFT JOIN claimq.job a ON a.job_id OPERATOR(pg_catalog.=) e.after_id
	 ORDER BY i.ord, e.position;
END
$$;

COMMENT ON FUNCTION claimq.dependencies(bigint[],text) IS
'for each listed job, one row per job it runs after, in order of first appearance: that job''s state, its result if done, its last error if dead (NULL if it no longer exists)';

