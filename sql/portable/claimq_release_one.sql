DECLARE
	in_queue_id integer;
	qid integer;
	gkey text;
BEGIN
	-- @include check-primary.sql function=release
	-- @include portable/check-settle-pair.sql function=release
	-- @include portable/in-queue-id.sql function=release
	/* Release touches claimed jobs only; a running one reports started. */
	UPDATE claimq.job j
	   SET state = 'pending', expires_at = NULL
	 WHERE j.job_id OPERATOR(pg_catalog.=) release.job_id
	   AND j.token OPERATOR(pg_catalog.=) release.token
	-- @include portable/in-queue.sql
	   AND j.state OPERATOR(pg_catalog.=) 'claimed'
	RETURNING j.queue_id, j.group_key INTO qid, gkey;
	IF NOT FOUND THEN
		-- @include check-in-queue.sql function=release ids=ARRAY[release.job_id]
		RETURN false;
	END IF;
	IF gkey IS NOT NULL THEN
		PERFORM claimq.sync_groups(qid, ARRAY[gkey]);
	END IF;
	RETURN true;
END
