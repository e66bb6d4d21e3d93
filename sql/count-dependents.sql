-- How many jobs each waiting job still waits for, written once for the
-- install script and the update that replaces it.
/*
 * The jobs waiting on the listed jobs count them off (delta -1: they
 * finished or were removed) or on again (delta 1: retry_dead redrove
 * them), each under its row lock, taken in id order.  A set's job of
 * another shard (remote) is counted only when its state is heard, which
 * names the set (sets); without sets, only the others.  Returns the jobs
 * that have none left to wait for.  In PL/pgSQL, not SQL: a SQL
 * function's plans stay with its caller's expression for the whole
 * transaction, and on a distributed install a transaction judges shard
 * after shard (judge_finishes), each statement planned for its own.
 */
CREATE FUNCTION claimq.count_dependents(job_ids bigint[], delta integer,
										sets bigint[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	ready bigint[];
BEGIN
	WITH hit AS (
		SELECT e.set_id, pg_catalog.count(*)::integer AS n
		  FROM claimq.job_after e
		 WHERE e.after_id OPERATOR(pg_catalog.=) ANY (job_ids)
		   AND CASE WHEN sets IS NULL THEN NOT e.remote
					ELSE e.set_id OPERATOR(pg_catalog.=) ANY (sets) END
		 GROUP BY e.set_id),
	locked AS MATERIALIZED (
		SELECT w.job_id, h.n
		  FROM claimq.job w
		  JOIN hit h ON h.set_id OPERATOR(pg_catalog.=) w.after_set
		 WHERE w.state OPERATOR(pg_catalog.=) 'waiting'
		 ORDER BY w.job_id
		 FOR UPDATE OF w),
	counted AS (
		UPDATE claimq.job j
		   SET after_count = j.after_count OPERATOR(pg_catalog.+) (delta OPERATOR(pg_catalog.*) l.n)
		  FROM locked l
		 WHERE j.job_id OPERATOR(pg_catalog.=) l.job_id
		   AND j.state OPERATOR(pg_catalog.=) 'waiting'
		RETURNING j.job_id, j.after_count)
	SELECT pg_catalog.array_agg(c.job_id) INTO ready FROM counted c
	 WHERE c.after_count OPERATOR(pg_catalog.<=) 0;
	RETURN ready;
END
$$;

COMMENT ON FUNCTION claimq.count_dependents(bigint[],integer,bigint[]) IS
'private: the jobs waiting on the listed jobs (in the sets given, or any) count them off (delta -1) or on again (delta 1), under their row locks; returns those with none left to wait for';
