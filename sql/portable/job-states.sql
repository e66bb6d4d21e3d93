-- The portable edition's status and wait_for, as private functions that
-- status() and wait_for() return (their bodies are SQL): a PL/pgSQL body
-- cannot take an argument named as one of its result columns, and both
-- take "queue" and return it.  The install (private.sql) and the update
-- to 0.8 include it.

CREATE FUNCTION claimq.status_rows(job_ids bigint[], queue text)
RETURNS TABLE(job_id bigint, job_queue text, state text, attempts integer,
			  run_at timestamptz, finished_at timestamptz, last_error text,
			  result jsonb, headers jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
	-- @include check-job-ids.sql function=status_rows
	-- @include check-in-queue.sql function=status_rows ids=status_rows.job_ids
	RETURN QUERY
	SELECT i.job_id, q.name, j.state::text, j.attempts, j.run_at, j.finished_at,
		   j.last_error, j.result, j.headers
	  FROM ROWS FROM (pg_catalog.unnest(status_rows.job_ids))
		   WITH ORDINALITY AS i(job_id, ord)
	  LEFT JOIN claimq.job j ON j.job_id OPERATOR(pg_catalog.=) i.job_id
	  LEFT JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id
	 ORDER BY i.ord;
END
$$;

COMMENT ON FUNCTION claimq.status_rows(bigint[],text) IS
'private: status() (the portable edition)';

REVOKE ALL ON FUNCTION claimq.status_rows(bigint[], text) FROM PUBLIC;

CREATE FUNCTION claimq.wait_for_rows(job_ids bigint[], timeout interval,
									 queue text)
RETURNS TABLE(job_id bigint, job_queue text, state text, attempts integer,
			  run_at timestamptz, finished_at timestamptz, last_error text,
			  result jsonb, headers jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	deadline timestamptz;
	t0 timestamptz;
	t1 timestamptz;
	poll_ms integer := 10;
	sleep_ms float8;
	done boolean;
	ids bigint[];
	queues text[];
	states text[];
	attempts_ integer[];
	run_ats timestamptz[];
	finished_ats timestamptz[];
	errors text[];
	results jsonb[];
	headers_ jsonb[];
BEGIN
	-- @include check-job-ids.sql function=wait_for_rows
	IF wait_for_rows.timeout IS NULL THEN
		RAISE EXCEPTION 'argument "timeout" must not be null'
			USING ERRCODE = '22004';
	END IF;
	/*
	 * Judged as it is used, against the wall clock (src/common.c,
	 * cq_interval_check): 0 <= timeout <= 7 days; a field far beyond that
	 * is refused before any arithmetic.
	 */
	IF pg_catalog.abs((pg_catalog.date_part('year', wait_for_rows.timeout) OPERATOR(pg_catalog.*) 12)
			OPERATOR(pg_catalog.+) pg_catalog.date_part('month', wait_for_rows.timeout)) OPERATOR(pg_catalog.<=) 12
	   AND pg_catalog.abs(pg_catalog.date_part('day', wait_for_rows.timeout)) OPERATOR(pg_catalog.<=) 101
	   AND pg_catalog.abs(pg_catalog.trunc(((pg_catalog.date_part('hour', wait_for_rows.timeout) OPERATOR(pg_catalog.*) 3600)
			OPERATOR(pg_catalog.+) (pg_catalog.date_part('minute', wait_for_rows.timeout) OPERATOR(pg_catalog.*) 60)
			OPERATOR(pg_catalog.+) pg_catalog.date_part('second', wait_for_rows.timeout)) OPERATOR(pg_catalog./) 86400))
		   OPERATOR(pg_catalog.<=) 101 THEN
		t0 := pg_catalog.clock_timestamp();
		t1 := t0 OPERATOR(pg_catalog.+) wait_for_rows.timeout;
	END IF;
	IF t1 IS NULL OR t1 OPERATOR(pg_catalog.<) t0
	   OR t1 OPERATOR(pg_catalog.>) (t0 OPERATOR(pg_catalog.+) '7 days'::interval) THEN
		RAISE EXCEPTION 'timeout must be at least zero and at most 7 days'
			USING ERRCODE = '22023';
	END IF;
	deadline := t1;
	-- @include check-in-queue.sql function=wait_for_rows ids=wait_for_rows.job_ids

	/*
	 * Look until every job is finished (done, dead, cancelled or gone) or
	 * the deadline passes, polling: after 10 ms, doubling up to 100 ms.
	 * Each look is a statement of its own, with a snapshot of its own under
	 * READ COMMITTED.  It locks nothing.
	 */
	LOOP
		SELECT pg_catalog.array_agg(i.job_id ORDER BY i.ord),
			   pg_catalog.array_agg(q.name ORDER BY i.ord),
			   pg_catalog.array_agg(j.state ORDER BY i.ord),
			   pg_catalog.array_agg(j.attempts ORDER BY i.ord),
			   pg_catalog.array_agg(j.run_at ORDER BY i.ord),
			   pg_catalog.array_agg(j.finished_at ORDER BY i.ord),
			   pg_catalog.array_agg(j.last_error ORDER BY i.ord),
			   pg_catalog.array_agg(j.result ORDER BY i.ord),
			   pg_catalog.array_agg(j.headers ORDER BY i.ord),
			   COALESCE(pg_catalog.bool_and(j.state IS NULL
					OR j.state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[])), true)
		  INTO ids, queues, states, attempts_, run_ats, finished_ats, errors,
			   results, headers_, done
		  FROM ROWS FROM (pg_catalog.unnest(wait_for_rows.job_ids))
			   WITH ORDINALITY AS i(job_id, ord)
		  LEFT JOIN claimq.job j ON j.job_id OPERATOR(pg_catalog.=) i.job_id
		  LEFT JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id;
		EXIT WHEN done OR pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) deadline;
		sleep_ms := LEAST(pg_catalog.ceil(pg_catalog.date_part('epoch',
						deadline OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
						OPERATOR(pg_catalog.*) 1000), poll_ms);
		poll_ms := LEAST(poll_ms OPERATOR(pg_catalog.*) 2, 100);
		PERFORM pg_catalog.pg_sleep(GREATEST(sleep_ms, 0) OPERATOR(pg_catalog./) 1000);
	END LOOP;

	RETURN QUERY
	SELECT u.job_id, u.queue, u.state, u.attempts, u.run_at, u.finished_at,
		   u.last_error, u.result, u.headers
	  FROM ROWS FROM (pg_catalog.unnest(ids), pg_catalog.unnest(queues),
					  pg_catalog.unnest(states), pg_catalog.unnest(attempts_),
					  pg_catalog.unnest(run_ats), pg_catalog.unnest(finished_ats),
					  pg_catalog.unnest(errors), pg_catalog.unnest(results),
					  pg_catalog.unnest(headers_))
		   WITH ORDINALITY AS u(job_id, queue, state, attempts, run_at,
								finished_at, last_error, result, headers, ord)
	 ORDER BY u.ord;
END
$$;

COMMENT ON FUNCTION claimq.wait_for_rows(bigint[],interval,text) IS
'private: wait_for() (the portable edition)';

REVOKE ALL ON FUNCTION claimq.wait_for_rows(bigint[], interval, text) FROM PUBLIC;
