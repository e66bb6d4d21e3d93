#variable_conflict use_column
DECLARE
	cancelled bigint[] := '{}';
	fin_ids bigint[] := '{}';
	fin_states text[] := '{}';
	now_ids bigint[];
	now_states text[];
	qids integer[];
	keys text[];
	live_again boolean;
	t timestamptz;
	to_judge bigint[] := '{}';
BEGIN
	-- @include check-primary.sql function=cancel
	-- @include check-job-ids.sql function=cancel
	-- @include check-in-queue.sql function=cancel ids=cancel.job_ids
	IF pg_catalog.cardinality(cancel.job_ids) OPERATOR(pg_catalog.=) 0 THEN
		RETURN;
	END IF;

	/*
	 * src/cancel.c: cancel the live jobs, locking each; under READ
	 * COMMITTED one that a concurrent transaction changed first is
	 * re-checked once that commits.  A job cancelled while pending forgets
	 * the token of any earlier claim; a held one keeps its holder's, whose
	 * settle calls are then told "cancelled".  A waiting job is live too;
	 * the jobs waiting on a job cancelled are judged in the same call
	 * (src/workflow.c).
	 */
	FOR try IN 1 .. 3 LOOP
		t := pg_catalog.clock_timestamp();
		WITH c AS (
			UPDATE claimq.job j
			   SET state = 'cancelled', finished_at = t,
				   expires_at = NULL,
				   token = CASE WHEN j.state OPERATOR(pg_catalog.=) 'pending' THEN NULL
							ELSE j.token END
			 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (cancel.job_ids)
			   AND j.state OPERATOR(pg_catalog.=) ANY (@CQ_LIVE_STATES@)
			RETURNING j.job_id, j.queue_id, j.group_key, j.dependents)
		SELECT cancelled OPERATOR(pg_catalog.||) COALESCE(pg_catalog.array_agg(c.job_id), '{}'),
			   pg_catalog.array_agg(c.queue_id) FILTER (WHERE c.group_key IS NOT NULL),
			   pg_catalog.array_agg(c.group_key) FILTER (WHERE c.group_key IS NOT NULL),
			   to_judge OPERATOR(pg_catalog.||)
				   COALESCE(pg_catalog.array_agg(c.job_id) FILTER (WHERE c.dependents), '{}')
		  INTO cancelled, qids, keys, to_judge
		  FROM c;
		/* A cancelled job frees its group's slot (src/groups.c). */
		IF qids IS NOT NULL THEN
			PERFORM claimq.sync_groups(g.queue_id, g.keys)
			   FROM (SELECT u.queue_id, pg_catalog.array_agg(u.key) AS keys
					   FROM ROWS FROM (pg_catalog.unnest(qids), pg_catalog.unnest(keys)) AS u(queue_id, key)
					  GROUP BY u.queue_id ORDER BY u.queue_id) g;
		END IF;

		/*
		 * Why the others were not cancelled, with a fresh snapshot: gone, or
		 * finished by someone else.  A job that is live now although the
		 * statement found it not live was made visible by a commit in
		 * between: cancel again.
		 */
		SELECT pg_catalog.array_agg(j.job_id) FILTER (WHERE j.state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[])),
			   pg_catalog.array_agg(j.state) FILTER (WHERE j.state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[])),
			   COALESCE(pg_catalog.bool_or(j.state OPERATOR(pg_catalog.<>) ALL ('{done,dead,cancelled}'::text[])), false)
		  INTO now_ids, now_states, live_again
		  FROM claimq.job j
		 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (cancel.job_ids)
		   AND NOT EXISTS (SELECT FROM pg_catalog.unnest(cancelled) AS c(job_id)
							WHERE c.job_id OPERATOR(pg_catalog.=) j.job_id)
		   AND NOT EXISTS (SELECT FROM pg_catalog.unnest(fin_ids) AS f(job_id)
							WHERE f.job_id OPERATOR(pg_catalog.=) j.job_id);
		IF now_ids IS NOT NULL THEN
			fin_ids := fin_ids OPERATOR(pg_catalog.||) now_ids;
			fin_states := fin_states OPERATOR(pg_catalog.||) now_states;
		END IF;
		EXIT WHEN NOT live_again;
		IF try OPERATOR(pg_catalog.=) 3 THEN
			RAISE EXCEPTION 'could not cancel jobs that kept changing state'
				USING ERRCODE = '40001', HINT = 'Retry the transaction.';
		END IF;
	END LOOP;
	/* Workflows (src/workflow.c, cq_finishes_settle). */
	IF pg_catalog.cardinality(to_judge) OPERATOR(pg_catalog.>) 0 THEN
		PERFORM claimq.judge_dependents(to_judge);
	END IF;

	RETURN QUERY
	SELECT i.job_id,
		   CASE WHEN c.job_id IS NOT NULL THEN 'ok'
				WHEN f.state IS NOT NULL THEN 'finished'
				ELSE 'missing' END,
		   CASE WHEN c.job_id IS NOT NULL THEN 'cancelled' ELSE f.state END
	  FROM ROWS FROM (pg_catalog.unnest(cancel.job_ids)) WITH ORDINALITY AS i(job_id, ord)
	  LEFT JOIN (SELECT DISTINCT u.job_id FROM pg_catalog.unnest(cancelled) AS u(job_id)) c
		ON c.job_id OPERATOR(pg_catalog.=) i.job_id
	  LEFT JOIN ROWS FROM (pg_catalog.unnest(fin_ids), pg_catalog.unnest(fin_states)) AS f(job_id, state)
		ON f.job_id OPERATOR(pg_catalog.=) i.job_id
	 ORDER BY i.ord;
END
