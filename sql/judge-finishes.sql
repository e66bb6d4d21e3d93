-- The judge of a transaction's finishes at its commit, written once for
-- the install script and the update that creates it.
CREATE FUNCTION claimq.judge_finishes()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	finished bigint[];
-- @c
	at_shard bigint;
-- @end
BEGIN
-- @c
	/*
	 * A distributed install judges each shard's finishes against that
	 * shard (its statements routed there), one shard after another, until
	 * none is left: a judgement that finishes more jobs (cancelled
	 * dependents) notes them behind the others.
	 */
	IF claimq.node_role() OPERATOR(pg_catalog.<>) 'single' THEN
		LOOP
			SELECT f.shard INTO at_shard FROM claimq.job_finish f
			 WHERE f.xact OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id()
			 ORDER BY f.shard LIMIT 1;
			EXIT WHEN NOT FOUND;
			WITH noted AS (
				DELETE FROM claimq.job_finish f
				 WHERE f.xact OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id()
				   AND f.shard OPERATOR(pg_catalog.=) at_shard
				RETURNING f.job_ids)
			SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO finished
			  FROM noted n CROSS JOIN LATERAL pg_catalog.unnest(n.job_ids) AS u(id);
			PERFORM claimq.route_to_shard(at_shard);
			PERFORM claimq.judge_finished(finished);
		END LOOP;
		RETURN NULL;
	END IF;
-- @end
	WITH noted AS (
		DELETE FROM claimq.job_finish f
		 WHERE f.xact OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id()
		RETURNING f.job_ids)
	SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO finished
	  FROM noted n CROSS JOIN LATERAL pg_catalog.unnest(n.job_ids) AS u(id);
	IF finished IS NOT NULL THEN
		PERFORM claimq.judge_finished(finished);
	END IF;
	RETURN NULL;
END
$$;

COMMENT ON FUNCTION claimq.judge_finishes() IS
'private: at the commit, judge the dependents of every job the transaction finished or removed, in id order (on a distributed install, shard by shard)';
