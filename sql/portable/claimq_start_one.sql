DECLARE
	in_queue_id integer;
	now_ timestamptz;
BEGIN
	-- @include check-primary.sql function=start
	-- @include portable/check-settle-pair.sql function=start
	-- @include portable/in-queue-id.sql function=start
	IF start.lease IS NOT NULL THEN
		PERFORM claimq.settle_check_interval(start.lease, 'lease', false, '7 days', '7 days');
	END IF;
	/* As the array form does, for one pair (src/settle.c). */
	now_ := pg_catalog.clock_timestamp();
	UPDATE claimq.job j
	   SET state = 'running',
		   attempts = j.attempts OPERATOR(pg_catalog.+)
					  CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed' THEN 1 ELSE 0 END,
		   started_at = CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed'
							 THEN now_ ELSE j.started_at END,
		   expires_at = now_ OPERATOR(pg_catalog.+)
						COALESCE(start.lease, q.run_lease)
	  FROM claimq.queue q
	 WHERE j.job_id OPERATOR(pg_catalog.=) start.job_id
	   AND j.token OPERATOR(pg_catalog.=) start.token
	-- @include portable/in-queue.sql
	   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
	   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id;
	IF FOUND THEN
		RETURN true;
	END IF;
	-- @include check-in-queue.sql function=start ids=ARRAY[start.job_id]
	RETURN false;
END
