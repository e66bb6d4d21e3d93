DECLARE
	in_queue_id integer;
	n integer;
	now_ timestamptz;
	nsettled bigint;
	s_ids bigint[];
	s_tokens bigint[];
	s_expires timestamptz[];
	id1 bigint;
	tok1 bigint;
BEGIN
	-- @include check-primary.sql function=extend
	-- @include portable/check-settle-pairs.sql
	IF extend.lease IS NOT NULL THEN
		PERFORM claimq.settle_check_interval(extend.lease, 'lease', false, '7 days', '7 days');
	END IF;
	IF n OPERATOR(pg_catalog.=) 0 THEN
		-- @include check-in-queue.sql function=extend ids=extend.job_ids
		RETURN;
	END IF;
	-- @include portable/in-queue-id.sql function=extend

	/*
	 * The fence is the statement's WHERE clause: a job changes only while
	 * the very token given still holds it.  Under READ COMMITTED a row that
	 * a concurrent reclaim or complete changed first is re-checked against
	 * it once that transaction commits (src/settle.c).  The pairs reach the
	 * planner through sub-selects, so that it sizes a batch alike whether
	 * or not it sees the arrays: the statement is then planned once and
	 * kept, not planned anew on every call.
	 */
	now_ := pg_catalog.clock_timestamp();
	/*
	 * One pair, the usual batch: the statement of the scalar form, and no
	 * second one when it settles the pair.  Otherwise the statements below
	 * run as for any batch (a pair left unsettled stays so).
	 */
	IF n OPERATOR(pg_catalog.=) 1 THEN
		id1 := job_ids[pg_catalog.array_lower(job_ids, 1)];
		tok1 := tokens[pg_catalog.array_lower(tokens, 1)];
		UPDATE claimq.job j
		   SET expires_at = now_ OPERATOR(pg_catalog.+)
				COALESCE(extend.lease, CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed'
											THEN q.lease ELSE q.run_lease END)
		  FROM claimq.queue q
		 WHERE j.job_id OPERATOR(pg_catalog.=) id1
		   AND j.token OPERATOR(pg_catalog.=) tok1
	-- @include portable/in-queue.sql
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
		   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
		RETURNING j.expires_at INTO expires_at;
		IF FOUND THEN
			job_id := id1;
			outcome := 'ok';
			RETURN NEXT;
			RETURN;
		END IF;
	END IF;
	WITH input AS MATERIALIZED (
		SELECT i.job_id, i.token, i.ord
		  FROM ROWS FROM (pg_catalog.unnest((SELECT job_ids)), pg_catalog.unnest((SELECT tokens)))
			   WITH ORDINALITY AS i(job_id, token, ord)
	), s AS (
		/* The new expiry: now + lease, or the queue's lease (claimed) or run_lease (running). */
		UPDATE claimq.job j
		   SET expires_at = now_ OPERATOR(pg_catalog.+)
				COALESCE(extend.lease, CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed'
											THEN q.lease ELSE q.run_lease END)
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
		/* Every pair settled, each once: in input order. */
		RETURN QUERY SELECT r.job_id, 'ok'::text, r.expires_at
					   FROM ROWS FROM (pg_catalog.unnest(s_ids), pg_catalog.unnest(s_expires)) AS r(job_id, expires_at);
		RETURN;
	END IF;
	-- @include check-in-queue.sql function=extend ids=extend.job_ids
	/*
	 * The pairs not settled are told apart by their jobs as they are now
	 * (claimq.settle_outcomes); a repeat of a settled pair is ok too.
	 */
	RETURN QUERY
	SELECT o.job_id, o.outcome, s_expires[o.settled]
	  FROM claimq.settle_outcomes(job_ids, tokens, s_ids, s_tokens, false) o
	 ORDER BY o.ord;
END
