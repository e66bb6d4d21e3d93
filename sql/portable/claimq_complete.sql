DECLARE
	in_queue_id integer;
	n integer;
	now_ timestamptz;
	nsettled bigint;
	s_ids bigint[];
	s_tokens bigint[];
	g_queues integer[];
	g_keys text[];
	id1 bigint;
	tok1 bigint;
	qid1 integer;
	gkey1 text;
	nmore bigint;
	m_ids bigint[];
	m_tokens bigint[];
	m_queues integer[];
	m_keys text[];
	set1 bigint;
	s_forget bigint[];
	m_judge bigint[];
	m_forget bigint[];
	s_judge bigint[];
BEGIN
	-- @include check-primary.sql function=complete
	-- @include portable/check-settle-pairs.sql
	IF complete.results IS NOT NULL THEN
		IF pg_catalog.array_ndims(complete.results) OPERATOR(pg_catalog.>) 1 THEN
			RAISE EXCEPTION 'results must be a one-dimensional array' USING ERRCODE = '22023';
		END IF;
		IF pg_catalog.cardinality(complete.results) OPERATOR(pg_catalog.<>) n THEN
			RAISE EXCEPTION 'results must be null or have as many elements as job_ids'
				USING ERRCODE = '22023';
		END IF;
	END IF;
	IF n OPERATOR(pg_catalog.=) 0 THEN
		-- @include check-in-queue.sql function=complete ids=complete.job_ids
		RETURN;
	END IF;
	-- @include portable/in-queue-id.sql function=complete

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
	 * A completed job is deleted, unless its queue keeps done jobs or jobs
	 * run after it (kept until those finish: see sql/claimq.sql, section
	 * 8).  While no queue keeps done jobs (the usual case) one DELETE does
	 * it; the statement after it runs only for the pairs that one left,
	 * which are stale, of a queue that keeps done jobs, or have
	 * dependents, and splits the jobs by their queue's setting.  A kept
	 * job keeps its result (src/settle.c).  The dependents of the jobs
	 * kept are judged, and the sets of jobs to run after that the jobs
	 * deleted named are forgotten, in the same call (src/workflow.c).
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
		DELETE FROM claimq.job j
		 WHERE j.job_id OPERATOR(pg_catalog.=) id1
		   AND j.token OPERATOR(pg_catalog.=) tok1
	-- @include portable/in-queue.sql
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
		   AND NOT EXISTS (SELECT 1 FROM claimq.queue k
							WHERE k.keep_done OPERATOR(pg_catalog.>) '0'::interval)
		   AND NOT j.dependents
		RETURNING j.queue_id, j.group_key, j.after_set INTO qid1, gkey1, set1;
		IF FOUND THEN
			IF gkey1 IS NOT NULL THEN
				PERFORM claimq.sync_groups(qid1, ARRAY[gkey1]);
			END IF;
			IF set1 IS NOT NULL THEN
				PERFORM claimq.forget_after(ARRAY[set1], '{}');
			END IF;
			job_id := id1;
			outcome := 'ok';
			RETURN NEXT;
			RETURN;
		END IF;
	END IF;
	/*
	 * The groups of the jobs this DELETE takes away are synced below, by
	 * sync_groups, which reads their queues' group limits afresh: a limit
	 * that alter_queue committed while the DELETE waited for its rows
	 * counts (complete-vs-group-limit.spec).
	 */
	WITH s AS (
		DELETE FROM claimq.job j
		 USING ROWS FROM (pg_catalog.unnest((SELECT job_ids)), pg_catalog.unnest((SELECT tokens)))
			   AS i(job_id, token)
		 WHERE j.job_id OPERATOR(pg_catalog.=) i.job_id
		   AND j.token OPERATOR(pg_catalog.=) i.token
	-- @include portable/in-queue.sql
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
		   AND NOT EXISTS (SELECT 1 FROM claimq.queue k
							WHERE k.keep_done OPERATOR(pg_catalog.>) '0'::interval)
		   AND NOT j.dependents
		RETURNING i.job_id, i.token, j.queue_id, j.group_key, j.after_set
	)
	SELECT pg_catalog.array_agg(s.job_id),
		   pg_catalog.array_agg(s.token),
		   pg_catalog.array_agg(s.queue_id) FILTER (WHERE s.group_key IS NOT NULL),
		   pg_catalog.array_agg(s.group_key) FILTER (WHERE s.group_key IS NOT NULL),
		   pg_catalog.array_agg(s.after_set) FILTER (WHERE s.after_set IS NOT NULL)
	  INTO s_ids, s_tokens, g_queues, g_keys, s_forget
	  FROM s;
	nsettled := COALESCE(pg_catalog.cardinality(s_ids), 0);

	/*
	 * Which branch takes a job is decided on the statement's snapshot: an
	 * enqueue after the job that commits dependents into it while the
	 * statement waits for its lock leaves it to neither, so the statement
	 * runs once more for the pairs it left, with a new snapshot
	 * (src/settle.c, cq_complete_all_op).
	 */
	FOR pass IN 1..2 LOOP
		EXIT WHEN nsettled OPERATOR(pg_catalog.>=) n;
		WITH input AS MATERIALIZED (
			SELECT i.job_id, i.token, i.result, i.ord
			  FROM ROWS FROM (pg_catalog.unnest((SELECT job_ids)), pg_catalog.unnest((SELECT tokens)),
							  pg_catalog.unnest((SELECT complete.results)))
				   WITH ORDINALITY AS i(job_id, token, result, ord)
		), del AS (
			DELETE FROM claimq.job j
			 USING input i, claimq.queue q
			 WHERE j.job_id OPERATOR(pg_catalog.=) i.job_id
			   AND j.token OPERATOR(pg_catalog.=) i.token
	-- @include portable/in-queue.sql
			   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
			   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
			   AND q.keep_done OPERATOR(pg_catalog.<=) '0'::interval
			   AND NOT j.dependents
			RETURNING i.job_id, i.token, j.queue_id, j.group_key,
					  NULL::bigint AS judge, j.after_set AS forget
		), kept AS (
			UPDATE claimq.job j
			   SET state = 'done', finished_at = now_, expires_at = NULL,
				   result = i.result
			  FROM input i, claimq.queue q
			 WHERE j.job_id OPERATOR(pg_catalog.=) i.job_id
			   AND j.token OPERATOR(pg_catalog.=) i.token
	-- @include portable/in-queue.sql
			   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
			   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
			   AND (j.dependents OR q.keep_done OPERATOR(pg_catalog.>) '0'::interval)
			RETURNING i.job_id, i.token, j.queue_id, j.group_key,
					  CASE WHEN j.dependents THEN j.job_id END AS judge,
					  NULL::bigint AS forget
		), s AS (
			SELECT * FROM del UNION ALL SELECT * FROM kept
		)
		SELECT pg_catalog.count(*),
			   pg_catalog.array_agg(s.job_id),
			   pg_catalog.array_agg(s.token),
			   pg_catalog.array_agg(s.queue_id) FILTER (WHERE s.group_key IS NOT NULL),
			   pg_catalog.array_agg(s.group_key) FILTER (WHERE s.group_key IS NOT NULL),
			   pg_catalog.array_agg(s.judge) FILTER (WHERE s.judge IS NOT NULL),
			   pg_catalog.array_agg(s.forget) FILTER (WHERE s.forget IS NOT NULL)
		  INTO nmore, m_ids, m_tokens, m_queues, m_keys, m_judge, m_forget
		  FROM s;
		IF nmore OPERATOR(pg_catalog.>) 0 THEN
			nsettled := nsettled OPERATOR(pg_catalog.+) nmore;
			s_ids := s_ids OPERATOR(pg_catalog.||) m_ids;
			s_tokens := s_tokens OPERATOR(pg_catalog.||) m_tokens;
			g_queues := g_queues OPERATOR(pg_catalog.||) m_queues;
			g_keys := g_keys OPERATOR(pg_catalog.||) m_keys;
			s_forget := s_forget OPERATOR(pg_catalog.||) m_forget;
			s_judge := s_judge OPERATOR(pg_catalog.||) m_judge;
		END IF;
	END LOOP;

	/* The groups of the jobs moved are synced with their queues' limits. */
	IF g_keys IS NOT NULL THEN
		PERFORM claimq.sync_groups(g.queue_id, g.keys)
		   FROM (SELECT x.queue_id, pg_catalog.array_agg(x.group_key) AS keys
				   FROM ROWS FROM (pg_catalog.unnest(g_queues), pg_catalog.unnest(g_keys))
						AS x(queue_id, group_key)
				  GROUP BY x.queue_id
				  ORDER BY x.queue_id) g;
	END IF;

	/* Workflows (src/workflow.c, cq_finishes_settle): judge, then forget. */
	IF s_judge IS NOT NULL THEN
		PERFORM claimq.judge_dependents(s_judge);
	END IF;
	IF s_forget IS NOT NULL THEN
		PERFORM claimq.forget_after(s_forget, '{}');
	END IF;

	IF nsettled OPERATOR(pg_catalog.=) n THEN
		/* Every pair settled, each once. */
		RETURN QUERY SELECT r.job_id, 'ok'::text FROM pg_catalog.unnest(job_ids) AS r(job_id);
		RETURN;
	END IF;
	-- @include check-in-queue.sql function=complete ids=complete.job_ids
	/*
	 * The pairs not settled are told apart by their jobs as they are now
	 * (claimq.settle_outcomes); a repeat of a settled pair is ok too.
	 */
	RETURN QUERY
	SELECT o.job_id, o.outcome
	  FROM claimq.settle_outcomes(job_ids, tokens, s_ids, s_tokens, false) o
	 ORDER BY o.ord;
END
