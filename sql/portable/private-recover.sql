-- The portable edition's private helpers: recovering and retention, the
-- work of reclaim() and prune() and of maintain()'s steps of those names.
-- A file of its own so that an update that changes them includes it
-- (sql/portable/update--0.6.2--0.7.sql).
--
-- The helpers that run statements on claimq's tables turn jit off and
-- keep generic plans, as the C edition does for its kept plans (src/
-- common.c, cq_execute): what they cost must not follow the caller's jit
-- and plan_cache_mode settings (test/sql/jit.sql).

/*
 * Recovering (the C edition: src/reclaim.c): reclaim()'s work, and
 * maintain()'s first step (with queue NULL).  Up to max_jobs expired
 * claims of the queue named (NULL: of every queue), oldest expiry first,
 * locked FOR UPDATE SKIP LOCKED, the expiry checked again under the lock:
 * claimed -> pending, no attempt counted, run_at unchanged; running ->
 * pending after the backoff, or dead on its last attempt.  One row per
 * queue with anything reclaimed, by name, and always one for a queue
 * named; the groups of the jobs reclaimed in a queue with group limits
 * are synced (src/groups.c), and the jobs waiting on a job that died are
 * judged (src/workflow.c).  (reclaim() itself is a LANGUAGE sql body
 * that calls this: PL/pgSQL refuses its argument queue, which is also the
 * name of a result column.)
 */
CREATE FUNCTION claimq.reclaim_expired(queue_name text, max_jobs integer)
RETURNS TABLE(queue text, released bigint, retried bigint, dead bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
	qid integer := 0;
	at timestamptz;
	r record;
	n bigint := 0;
	to_judge bigint[];
BEGIN
	-- @include check-primary.sql function=reclaim
	IF queue_name IS NOT NULL THEN
		PERFORM claimq.check_queue_name(queue_name);
	END IF;
	IF max_jobs IS NULL THEN
		RAISE EXCEPTION 'argument "max_jobs" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF max_jobs OPERATOR(pg_catalog.<) 1 OR max_jobs OPERATOR(pg_catalog.>) @CQ_MAX_BATCH@ THEN
		RAISE EXCEPTION 'max_jobs must be between 1 and @CQ_MAX_BATCH@'
			USING ERRCODE = '22023';
	END IF;
	IF queue_name IS NOT NULL THEN
		SELECT t.queue_id INTO qid FROM claimq.queue t
		 WHERE t.name OPERATOR(pg_catalog.=) queue_name;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'queue "%" does not exist', queue_name
				USING ERRCODE = '42704';
		END IF;
	END IF;

	at := pg_catalog.clock_timestamp();
	FOR r IN
		WITH cand AS MATERIALIZED (
			SELECT j.job_id FROM claimq.job j
			 WHERE j.expires_at OPERATOR(pg_catalog.<) at
			   AND (qid OPERATOR(pg_catalog.=) 0
					OR j.queue_id OPERATOR(pg_catalog.=) qid)
			 ORDER BY j.expires_at
			 LIMIT reclaim_expired.max_jobs
			 FOR UPDATE SKIP LOCKED
		), upd AS (
			UPDATE claimq.job j
			   SET state = CASE WHEN j.state OPERATOR(pg_catalog.=) 'running'
									 AND j.attempts OPERATOR(pg_catalog.>=) COALESCE(j.max_attempts, q.max_attempts)
								THEN 'dead' ELSE 'pending' END,
				   run_at = CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed'
									  OR (j.state OPERATOR(pg_catalog.=) 'running'
										  AND j.attempts OPERATOR(pg_catalog.>=) COALESCE(j.max_attempts, q.max_attempts))
								 THEN j.run_at
								 ELSE at OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => LEAST(
									pg_catalog.date_part('epoch', q.retry_base)
									OPERATOR(pg_catalog.*) pg_catalog.power(2::float8,
										LEAST(GREATEST(j.attempts OPERATOR(pg_catalog.-) 1, 0), 60)),
									pg_catalog.date_part('epoch', q.retry_max))
									OPERATOR(pg_catalog.*) (1 OPERATOR(pg_catalog.-) (0.2::float8
															OPERATOR(pg_catalog.*) pg_catalog.random()))) END,
				   finished_at = CASE WHEN j.state OPERATOR(pg_catalog.=) 'running'
										   AND j.attempts OPERATOR(pg_catalog.>=) COALESCE(j.max_attempts, q.max_attempts)
									  THEN at END,
				   last_error = CASE WHEN j.state OPERATOR(pg_catalog.=) 'running'
									 THEN 'lease expired' ELSE j.last_error END,
				   expires_at = NULL
			  FROM claimq.queue q
			 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.job_id FROM cand c))
			   AND j.expires_at OPERATOR(pg_catalog.<) at
			   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
			RETURNING q.queue_id, q.name, j.state,
					  -- A held job was claimed while its started_at is null.
					  CASE WHEN j.started_at IS NULL THEN 'claimed' ELSE 'running' END AS held_as,
					  CASE WHEN q.group_limit IS NOT NULL OR q.group_fifo
						   THEN j.group_key END AS group_key,
					  CASE WHEN j.state OPERATOR(pg_catalog.=) 'dead' AND j.dependents
						   THEN j.job_id END AS judge
		)
		-- A released job was claimed, a retried one running.
		SELECT u.queue_id, u.name,
			   pg_catalog.count(*) FILTER (WHERE u.state OPERATOR(pg_catalog.=) 'pending'
											 AND u.held_as OPERATOR(pg_catalog.=) 'claimed') AS released,
			   pg_catalog.count(*) FILTER (WHERE u.state OPERATOR(pg_catalog.=) 'pending'
											 AND u.held_as OPERATOR(pg_catalog.=) 'running') AS retried,
			   pg_catalog.count(*) FILTER (WHERE u.state OPERATOR(pg_catalog.=) 'dead') AS dead,
			   pg_catalog.array_agg(DISTINCT u.group_key)
				 FILTER (WHERE u.group_key IS NOT NULL) AS group_keys,
			   pg_catalog.array_agg(u.judge)
				 FILTER (WHERE u.judge IS NOT NULL) AS judge
		  FROM upd u GROUP BY u.queue_id, u.name ORDER BY u.name
	LOOP
		queue := r.name;
		released := r.released;
		retried := r.retried;
		dead := r.dead;
		n := n OPERATOR(pg_catalog.+) 1;
		RETURN NEXT;
		IF r.group_keys IS NOT NULL THEN
			PERFORM claimq.sync_groups(r.queue_id, r.group_keys);
		END IF;
		to_judge := to_judge OPERATOR(pg_catalog.||) r.judge;
	END LOOP;
	/* Workflows (src/workflow.c, cq_finishes_settle). */
	IF to_judge IS NOT NULL THEN
		PERFORM claimq.judge_dependents(to_judge);
	END IF;
	IF queue_name IS NOT NULL AND n OPERATOR(pg_catalog.=) 0 THEN
		queue := queue_name;
		released := 0;
		retried := 0;
		dead := 0;
		RETURN NEXT;
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.reclaim_expired(text,integer) IS
'private (portable edition): reclaim()''s work: put up to max_jobs expired claims of a queue (NULL: of every queue) back; one row per queue with anything reclaimed, always one for a queue named';

/*
 * Retention (the C edition: src/prune.c, cq_prune_finished): up to
 * max_jobs done, dead and cancelled jobs past their queue's keep_done or
 * keep_dead, oldest first per queue and state.  The DELETE checks again
 * that the row still has a finished_at, so a job redriven meanwhile stays.
 * A job that jobs ran after (workflows) is left alone here (the DELETE
 * checks that again too, for a job an enqueue linked meanwhile) and
 * pruned by claimq.prune_after with what is left of max_jobs; the sets of
 * jobs to run after that the jobs deleted named are forgotten.
 */
CREATE FUNCTION claimq.prune_finished(max_jobs integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
	at timestamptz := pg_catalog.clock_timestamp();
	n bigint;
	sets bigint[];
BEGIN
	WITH pruned AS (
		DELETE FROM claimq.job j
		 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (ARRAY(
			SELECT o.job_id
			  FROM claimq.queue q
			 CROSS JOIN LATERAL (
				(SELECT f.job_id FROM claimq.job f
				  WHERE f.queue_id OPERATOR(pg_catalog.=) q.queue_id
					AND f.state OPERATOR(pg_catalog.=) 'done'
					AND NOT f.dependents
					AND f.finished_at OPERATOR(pg_catalog.<) (at OPERATOR(pg_catalog.-) q.keep_done)
				  ORDER BY f.finished_at LIMIT max_jobs)
				UNION ALL
				(SELECT f.job_id FROM claimq.job f
				  WHERE f.queue_id OPERATOR(pg_catalog.=) q.queue_id
					AND f.state OPERATOR(pg_catalog.=) 'dead'
					AND NOT f.dependents
					AND f.finished_at OPERATOR(pg_catalog.<) (at OPERATOR(pg_catalog.-) q.keep_dead)
				  ORDER BY f.finished_at LIMIT max_jobs)
				UNION ALL
				(SELECT f.job_id FROM claimq.job f
				  WHERE f.queue_id OPERATOR(pg_catalog.=) q.queue_id
					AND f.state OPERATOR(pg_catalog.=) 'cancelled'
					AND NOT f.dependents
					AND f.finished_at OPERATOR(pg_catalog.<) (at OPERATOR(pg_catalog.-) q.keep_dead)
				  ORDER BY f.finished_at LIMIT max_jobs)) o
			 LIMIT max_jobs))
		   AND j.finished_at IS NOT NULL AND NOT j.dependents
		RETURNING j.after_set)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(DISTINCT p.after_set) FILTER (WHERE p.after_set IS NOT NULL)
	  INTO n, sets
	  FROM pruned p;
	IF sets IS NOT NULL THEN
		PERFORM claimq.forget_after(sets, '{}');
	END IF;
	/* The jobs that jobs ran after, with what is left of max_jobs. */
	IF n OPERATOR(pg_catalog.<) max_jobs THEN
		n := n OPERATOR(pg_catalog.+) claimq.prune_after(max_jobs OPERATOR(pg_catalog.-) n::integer);
	END IF;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.prune_finished(integer) IS
'private (portable edition): delete up to max_jobs done, dead and cancelled jobs past their queue''s retention; returns how many';
