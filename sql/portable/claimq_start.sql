DECLARE
	in_queue_id integer;
	n integer;
	now_ timestamptz;
	nsettled bigint;
	s_ids bigint[];
	s_tokens bigint[];
	s_expires timestamptz[];
BEGIN
	/* src/settle.c: the checks first, in the C edition's order. */
	-- @include check-primary.sql function=start
	-- @include portable/check-settle-pairs.sql
	IF start.lease IS NOT NULL THEN
		PERFORM claimq.settle_check_interval(start.lease, 'lease', false, '7 days', '7 days');
	END IF;
	IF n OPERATOR(pg_catalog.=) 0 THEN
		-- @include check-in-queue.sql function=start ids=start.job_ids
		RETURN;
	END IF;
	-- @include portable/in-queue-id.sql function=start

	/*
	 * claimed -> running, counting the attempt; a job started again under
	 * its token stays running, its attempt counted once, with a new expiry.
	 * The fence is the statement's WHERE clause, re-checked on the version
	 * a concurrent change left (src/settle.c).
	 */
	now_ := pg_catalog.clock_timestamp();
	WITH input AS MATERIALIZED (
		SELECT i.job_id, i.token, i.ord
		  FROM ROWS FROM (pg_catalog.unnest((SELECT job_ids)), pg_catalog.unnest((SELECT tokens)))
			   WITH ORDINALITY AS i(job_id, token, ord)
	), s AS (
		UPDATE claimq.job j
		   SET state = 'running',
			   attempts = j.attempts OPERATOR(pg_catalog.+)
						  CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END,
			   started_at = CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN now_
								 ELSE j.started_at END,
			   expires_at = now_ OPERATOR(pg_catalog.+) COALESCE(start.lease, q.run_lease)
		  FROM input i, claimq.queue q
		 WHERE j.job_id OPERATOR(pg_catalog.=) i.job_id
		   AND j.token OPERATOR(pg_catalog.=) i.token
	-- @include portable/in-queue.sql
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
		   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
		RETURNING i.ord, i.job_id, i.token, j.expires_at
	)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(s.job_id ORDER BY s.ord),
		   pg_catalog.array_agg(s.token ORDER BY s.ord),
		   pg_catalog.array_agg(s.expires_at ORDER BY s.ord)
	  INTO nsettled, s_ids, s_tokens, s_expires
	  FROM s;

	IF nsettled OPERATOR(pg_catalog.=) n THEN
		/* Every pair settled, each once: they are in input order. */
		RETURN QUERY SELECT r.job_id, 'ok'::text, r.expires_at
					   FROM ROWS FROM (pg_catalog.unnest(s_ids), pg_catalog.unnest(s_expires))
							AS r(job_id, expires_at);
		RETURN;
	END IF;
	-- @include check-in-queue.sql function=start ids=start.job_ids
	/*
	 * The pairs not settled are told apart by their jobs as they are now
	 * (claimq.settle_outcomes); a repeat of a settled pair is ok too.
	 */
	RETURN QUERY
	SELECT o.job_id, o.outcome, s_expires[o.settled]
	  FROM claimq.settle_outcomes(job_ids, tokens, s_ids, s_tokens, false) o
	 ORDER BY o.ord;
END
