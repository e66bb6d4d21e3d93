DECLARE
	in_queue_id integer;
	n integer;
	now_ timestamptz;
	nsettled bigint;
	s_ids bigint[];
	s_tokens bigint[];
	s_states text[];
	s_run_ats timestamptz[];
	g_queues integer[];
	g_keys text[];
	id1 bigint;
	tok1 bigint;
	qid1 integer;
	gkey1 text;
	judge1 bigint;
	s_judge bigint[];
BEGIN
	-- @include check-primary.sql function=fail
	-- @include portable/check-settle-pairs.sql
	IF fail.retry_in IS NOT NULL THEN
		PERFORM claimq.settle_check_interval(fail.retry_in, 'retry_in', true, '100 years', '100 years');
	END IF;
	IF fail.permanent IS NULL THEN
		RAISE EXCEPTION 'argument "permanent" must not be null' USING ERRCODE = '22004';
	END IF;
	IF n OPERATOR(pg_catalog.=) 0 THEN
		-- @include check-in-queue.sql function=fail ids=fail.job_ids
		RETURN;
	END IF;
	-- @include portable/in-queue-id.sql function=fail

	/*
	 * The fence is the statement's WHERE clause: a job changes only while
	 * the very token given still holds it.  Under READ COMMITTED a row that
	 * a concurrent reclaim or complete changed first is re-checked against
	 * it once that transaction commits (src/settle.c).  The pairs reach the
	 * planner through sub-selects, so that it sizes a batch alike whether
	 * or not it sees the arrays: the statement is then planned once and
	 * kept, not planned anew on every call.
	 */
	/*
	 * Failing a claimed job counts the attempt (its handler ran); a running
	 * job's attempt was counted at start.  With attempts left and not
	 * permanent, the job is pending again at now + retry_in, or else at now
	 * + retry_base * 2^(attempts - 1), at most retry_max, less up to 20%
	 * jitter; otherwise it is dead.  A job's own max_attempts, if it has
	 * one, overrides its queue's.  The dependents of a job that went to
	 * dead are judged in the same call (src/workflow.c).
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
		   SET attempts = (j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END),
			   state = CASE WHEN (fail.permanent OR (j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END) OPERATOR(pg_catalog.>=) COALESCE(j.max_attempts, q.max_attempts))
							THEN 'dead' ELSE 'pending' END,
			   run_at = CASE WHEN (fail.permanent OR (j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END) OPERATOR(pg_catalog.>=) COALESCE(j.max_attempts, q.max_attempts))
							 THEN j.run_at
							 ELSE now_ OPERATOR(pg_catalog.+) COALESCE(fail.retry_in,
								pg_catalog.make_interval(secs => LEAST(
									pg_catalog.date_part('epoch', q.retry_base)
										OPERATOR(pg_catalog.*) pg_catalog.power(2::float8,
											LEAST(GREATEST((j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END) OPERATOR(pg_catalog.-) 1, 0), 60)),
									pg_catalog.date_part('epoch', q.retry_max))
									OPERATOR(pg_catalog.*) (1 OPERATOR(pg_catalog.-) (0.2 OPERATOR(pg_catalog.*) pg_catalog.random()))))
						 END,
			   finished_at = CASE WHEN (fail.permanent OR (j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END) OPERATOR(pg_catalog.>=) COALESCE(j.max_attempts, q.max_attempts))
								  THEN now_ END,
			   last_error = fail.error, expires_at = NULL
		  FROM claimq.queue q
		 WHERE j.job_id OPERATOR(pg_catalog.=) id1
		   AND j.token OPERATOR(pg_catalog.=) tok1
	-- @include portable/in-queue.sql
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
		   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
		RETURNING j.queue_id, j.group_key, j.state,
				  CASE WHEN j.state OPERATOR(pg_catalog.=) 'pending' THEN j.run_at END,
				  CASE WHEN j.state OPERATOR(pg_catalog.=) 'dead' AND j.dependents THEN j.job_id END
			 INTO qid1, gkey1, state, run_at, judge1;
		IF FOUND THEN
			IF gkey1 IS NOT NULL THEN
				PERFORM claimq.sync_groups(qid1, ARRAY[gkey1]);
			END IF;
			IF judge1 IS NOT NULL THEN
				PERFORM claimq.judge_dependents(ARRAY[judge1]);
			END IF;
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
		UPDATE claimq.job j
		   SET attempts = (j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END),
			   state = CASE WHEN (fail.permanent OR (j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END) OPERATOR(pg_catalog.>=) COALESCE(j.max_attempts, q.max_attempts))
							THEN 'dead' ELSE 'pending' END,
			   run_at = CASE WHEN (fail.permanent OR (j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END) OPERATOR(pg_catalog.>=) COALESCE(j.max_attempts, q.max_attempts))
							 THEN j.run_at
							 ELSE now_ OPERATOR(pg_catalog.+) COALESCE(fail.retry_in,
								pg_catalog.make_interval(secs => LEAST(
									pg_catalog.date_part('epoch', q.retry_base)
										OPERATOR(pg_catalog.*) pg_catalog.power(2::float8,
											LEAST(GREATEST((j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END) OPERATOR(pg_catalog.-) 1, 0), 60)),
									pg_catalog.date_part('epoch', q.retry_max))
									OPERATOR(pg_catalog.*) (1 OPERATOR(pg_catalog.-) (0.2 OPERATOR(pg_catalog.*) pg_catalog.random()))))
						 END,
			   finished_at = CASE WHEN (fail.permanent OR (j.attempts OPERATOR(pg_catalog.+) CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END) OPERATOR(pg_catalog.>=) COALESCE(j.max_attempts, q.max_attempts))
								  THEN now_ END,
			   last_error = fail.error, expires_at = NULL
		  FROM input i, claimq.queue q
		 WHERE j.job_id OPERATOR(pg_catalog.=) i.job_id
		   AND j.token OPERATOR(pg_catalog.=) i.token
	-- @include portable/in-queue.sql
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
		   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
		RETURNING i.ord, i.job_id, i.token, j.queue_id, j.group_key, j.state,
				  CASE WHEN j.state OPERATOR(pg_catalog.=) 'pending' THEN j.run_at END AS run_at,
				  CASE WHEN j.state OPERATOR(pg_catalog.=) 'dead' AND j.dependents THEN j.job_id END AS judge
	)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(s.job_id ORDER BY s.ord),
		   pg_catalog.array_agg(s.token ORDER BY s.ord),
		   pg_catalog.array_agg(s.state ORDER BY s.ord),
		   pg_catalog.array_agg(s.run_at ORDER BY s.ord),
		   pg_catalog.array_agg(s.queue_id) FILTER (WHERE s.group_key IS NOT NULL),
		   pg_catalog.array_agg(s.group_key) FILTER (WHERE s.group_key IS NOT NULL),
		   pg_catalog.array_agg(s.judge) FILTER (WHERE s.judge IS NOT NULL)
	  INTO nsettled, s_ids, s_tokens, s_states, s_run_ats, g_queues, g_keys, s_judge
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
	/* Workflows (src/workflow.c, cq_finishes_settle). */
	IF s_judge IS NOT NULL THEN
		PERFORM claimq.judge_dependents(s_judge);
	END IF;

	IF nsettled OPERATOR(pg_catalog.=) n THEN
		/* Every pair settled, each once: in input order. */
		RETURN QUERY SELECT r.job_id, 'ok'::text, r.state, r.run_at
					   FROM ROWS FROM (pg_catalog.unnest(s_ids), pg_catalog.unnest(s_states), pg_catalog.unnest(s_run_ats)) AS r(job_id, state, run_at);
		RETURN;
	END IF;
	-- @include check-in-queue.sql function=fail ids=fail.job_ids
	/*
	 * The pairs not settled are told apart by their jobs as they are now
	 * (claimq.settle_outcomes); a repeat of a settled pair is ok too.
	 */
	RETURN QUERY
	SELECT o.job_id, o.outcome, s_states[o.settled], s_run_ats[o.settled]
	  FROM claimq.settle_outcomes(job_ids, tokens, s_ids, s_tokens, false) o
	 ORDER BY o.ord;
END
