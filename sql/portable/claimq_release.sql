DECLARE
	in_queue_id integer;
	n integer;
	nsettled bigint;
	s_ids bigint[];
	s_tokens bigint[];
	g_queues integer[];
	g_keys text[];
BEGIN
	-- @include check-primary.sql function=release
	-- @include portable/check-settle-pairs.sql
	IF n OPERATOR(pg_catalog.=) 0 THEN
		-- @include check-in-queue.sql function=release ids=release.job_ids
		RETURN;
	END IF;
	-- @include portable/in-queue-id.sql function=release

	/*
	 * The fence is the statement's WHERE clause: a job changes only while
	 * the very token given still holds it.  Under READ COMMITTED a row that
	 * a concurrent reclaim or complete changed first is re-checked against
	 * it once that transaction commits (src/settle.c).  The pairs reach the
	 * planner through sub-selects, so that it sizes a batch alike whether
	 * or not it sees the arrays: the statement is then planned once and
	 * kept, not planned anew on every call.
	 */
	/* Release touches claimed jobs only; a running one reports started. */
	WITH input AS MATERIALIZED (
		SELECT i.job_id, i.token, i.ord
		  FROM ROWS FROM (pg_catalog.unnest((SELECT job_ids)), pg_catalog.unnest((SELECT tokens)))
			   WITH ORDINALITY AS i(job_id, token, ord)
	), s AS (
		UPDATE claimq.job j
		   SET state = 'pending', expires_at = NULL
		  FROM input i
		 WHERE j.job_id OPERATOR(pg_catalog.=) i.job_id
		   AND j.token OPERATOR(pg_catalog.=) i.token
	-- @include portable/in-queue.sql
		   AND j.state OPERATOR(pg_catalog.=) 'claimed'
		RETURNING i.job_id, i.token, j.queue_id, j.group_key
	)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(s.job_id),
		   pg_catalog.array_agg(s.token),
		   pg_catalog.array_agg(s.queue_id) FILTER (WHERE s.group_key IS NOT NULL),
		   pg_catalog.array_agg(s.group_key) FILTER (WHERE s.group_key IS NOT NULL)
	  INTO nsettled, s_ids, s_tokens, g_queues, g_keys
	  FROM s;

	/* The groups of the jobs moved are synced with their queues' limits. */
	IF g_keys IS NOT NULL THEN
		PERFORM claimq.sync_groups(g.queue_id, g.keys)
		   FROM (SELECT x.queue_id, pg_catalog.array_agg(x.group_key) AS keys
				   FROM ROWS FROM (pg_catalog.unnest(g_queues), pg_catalog.unnest(g_keys))
						AS x(queue_id, group_key)
				  GROUP BY x.queue_id
				  ORDER BY x.queue_id) g;
	END IF;

	IF nsettled OPERATOR(pg_catalog.=) n THEN
		/* Every pair settled, each once. */
		RETURN QUERY SELECT r.job_id, 'ok'::text FROM pg_catalog.unnest(job_ids) AS r(job_id);
		RETURN;
	END IF;
	-- @include check-in-queue.sql function=release ids=release.job_ids
	/*
	 * The pairs not settled are told apart by their jobs as they are now
	 * (claimq.settle_outcomes); a repeat of a settled pair is ok too.
	 */
	RETURN QUERY
	SELECT o.job_id, o.outcome
	  FROM claimq.settle_outcomes(job_ids, tokens, s_ids, s_tokens, true) o
	 ORDER BY o.ord;
END
