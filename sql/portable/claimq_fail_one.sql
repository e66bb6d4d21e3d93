DECLARE
	in_queue_id integer;
	now_ timestamptz;
	qid integer;
	gkey text;
	judge_id bigint;
BEGIN
	-- @include check-primary.sql function=fail
	-- @include portable/check-settle-pair.sql function=fail
	-- @include portable/in-queue-id.sql function=fail
	IF fail.retry_in IS NOT NULL THEN
		PERFORM claimq.settle_check_interval(fail.retry_in, 'retry_in', true, '100 years', '100 years');
	END IF;
	IF fail.permanent IS NULL THEN
		RAISE EXCEPTION 'argument "permanent" must not be null' USING ERRCODE = '22004';
	END IF;
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
	 WHERE j.job_id OPERATOR(pg_catalog.=) fail.job_id
	   AND j.token OPERATOR(pg_catalog.=) fail.token
	-- @include portable/in-queue.sql
	   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
	   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
	RETURNING j.queue_id, j.group_key,
			  CASE WHEN j.state OPERATOR(pg_catalog.=) 'dead' AND j.dependents THEN j.job_id END
		 INTO qid, gkey, judge_id;
	IF NOT FOUND THEN
		-- @include check-in-queue.sql function=fail ids=ARRAY[fail.job_id]
		RETURN false;
	END IF;
	IF gkey IS NOT NULL THEN
		PERFORM claimq.sync_groups(qid, ARRAY[gkey]);
	END IF;
	IF judge_id IS NOT NULL THEN
		PERFORM claimq.judge_dependents(ARRAY[judge_id]);
	END IF;
	RETURN true;
END
