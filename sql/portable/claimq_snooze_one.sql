DECLARE
	in_queue_id integer;
	qid integer;
	gkey text;
BEGIN
	-- @include check-primary.sql function=snooze
	-- @include portable/check-settle-pair.sql function=snooze
	-- @include portable/in-queue-id.sql function=snooze
	IF snooze.delay IS NULL THEN
		RAISE EXCEPTION 'argument "delay" must not be null' USING ERRCODE = '22004';
	END IF;
	PERFORM claimq.settle_check_interval(snooze.delay, 'delay', true, '7 days', '7 days');
	/*
	 * Snooze puts the job back to pending at now + delay and gives back the
	 * attempt that start counted: a snooze is never a failure.
	 */
	UPDATE claimq.job j
	   SET state = 'pending', run_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) snooze.delay,
		   expires_at = NULL,
		   attempts = GREATEST(j.attempts OPERATOR(pg_catalog.-)
							   CASE WHEN j.state OPERATOR(pg_catalog.=) 'running' THEN 1 ELSE 0 END, 0)
	 WHERE j.job_id OPERATOR(pg_catalog.=) snooze.job_id
	   AND j.token OPERATOR(pg_catalog.=) snooze.token
	-- @include portable/in-queue.sql
	   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
	RETURNING j.queue_id, j.group_key INTO qid, gkey;
	IF NOT FOUND THEN
		-- @include check-in-queue.sql function=snooze ids=ARRAY[snooze.job_id]
		RETURN false;
	END IF;
	IF gkey IS NOT NULL THEN
		PERFORM claimq.sync_groups(qid, ARRAY[gkey]);
	END IF;
	RETURN true;
END
