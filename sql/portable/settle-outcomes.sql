-- The portable edition's outcomes of a batch settle's pairs: the install
-- (private-work.sql) and the update to 0.8 include it.

/*
 * The outcome of each pair of a batch settle, in input order (ord), once
 * the settle's statements are done (src/settle.c, cq_unsettled_jobs): ok
 * for a pair among those settled, given as s_ids and s_tokens (a repeat of
 * one too), and for the others what their jobs are now, as the statements
 * decided under lock: missing without a row, cancelled when cancelled
 * under the pair's token, started when running under it and started is
 * asked for (a release), stale otherwise.  settled is the pair's place in
 * s_ids, from 1, so that a settle returns its own columns of the pairs it
 * settled from its arrays; NULL for a pair not settled.
 */
CREATE FUNCTION claimq.settle_outcomes(job_ids bigint[], tokens bigint[],
									   s_ids bigint[], s_tokens bigint[],
									   started boolean)
RETURNS TABLE(ord bigint, job_id bigint, outcome text, settled bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	RETURN QUERY
	WITH input AS MATERIALIZED (
		SELECT i.job_id, i.token, i.ord
		  FROM ROWS FROM (pg_catalog.unnest((SELECT job_ids)), pg_catalog.unnest((SELECT tokens)))
			   WITH ORDINALITY AS i(job_id, token, ord)
	), done AS MATERIALIZED (
		SELECT s.job_id, s.token, s.n
		  FROM ROWS FROM (pg_catalog.unnest((SELECT s_ids)), pg_catalog.unnest((SELECT s_tokens)))
			   WITH ORDINALITY AS s(job_id, token, n)
	), unsettled AS MATERIALIZED (
		SELECT j.job_id, j.token, j.state
		  FROM claimq.job j
		 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT i.job_id FROM input i
				 WHERE NOT EXISTS (SELECT 1 FROM done s
									WHERE s.job_id OPERATOR(pg_catalog.=) i.job_id
									  AND s.token OPERATOR(pg_catalog.=) i.token)))
	)
	SELECT i.ord, i.job_id,
		   CASE WHEN s.job_id IS NOT NULL THEN 'ok'
				WHEN u.job_id IS NULL THEN 'missing'
				WHEN u.state OPERATOR(pg_catalog.=) 'cancelled'
					 AND COALESCE(u.token, 0) OPERATOR(pg_catalog.=) i.token THEN 'cancelled'
				WHEN settle_outcomes.started
					 AND u.state OPERATOR(pg_catalog.=) 'running'
					 AND COALESCE(u.token, 0) OPERATOR(pg_catalog.=) i.token THEN 'started'
				ELSE 'stale' END,
		   s.n
	  FROM input i
	  LEFT JOIN done s ON s.job_id OPERATOR(pg_catalog.=) i.job_id
					  AND s.token OPERATOR(pg_catalog.=) i.token
	  LEFT JOIN unsettled u ON u.job_id OPERATOR(pg_catalog.=) i.job_id
	 ORDER BY i.ord;
END
$$;

COMMENT ON FUNCTION claimq.settle_outcomes(bigint[],bigint[],bigint[],bigint[],boolean) IS
'private (portable edition): each pair''s outcome of a batch settle, in input order, given the pairs it settled';
