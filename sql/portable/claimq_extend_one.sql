DECLARE
	in_queue_id integer;
BEGIN
	-- @include check-primary.sql function=extend
	-- @include portable/check-settle-pair.sql function=extend
	-- @include portable/in-queue-id.sql function=extend
	IF extend.lease IS NOT NULL THEN
		PERFORM claimq.settle_check_interval(extend.lease, 'lease', false, '7 days', '7 days');
	END IF;
	UPDATE claimq.job j
	   SET expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
			COALESCE(extend.lease, CASE WHEN j.state OPERATOR(pg_catalog.=) 'claimed'
										THEN q.lease ELSE q.run_lease END)
	  FROM claimq.queue q
	 WHERE j.job_id OPERATOR(pg_catalog.=) extend.job_id
	   AND j.token OPERATOR(pg_catalog.=) extend.token
	-- @include portable/in-queue.sql
	   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
	   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id;
	IF FOUND THEN
		RETURN true;
	END IF;
	-- @include check-in-queue.sql function=extend ids=ARRAY[extend.job_id]
	RETURN false;
END
