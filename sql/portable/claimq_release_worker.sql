DECLARE
	qid integer;
	n bigint;
	keys text[];
BEGIN
	-- @include check-primary.sql function=release_worker
	PERFORM claimq.check_queue_name(release_worker.queue);
	IF release_worker.worker IS NULL THEN
		RAISE EXCEPTION 'argument "worker" must not be null' USING ERRCODE = '22004';
	END IF;
	SELECT q.queue_id INTO qid FROM claimq.queue q
	 WHERE q.name OPERATOR(pg_catalog.=) release_worker.queue;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" does not exist', release_worker.queue
			USING ERRCODE = '42704';
	END IF;
	/*
	 * Every claimed, not started job of the queue that the worker holds
	 * (graceful shutdown); fenced by the worker's name, not by tokens.
	 */
	WITH released AS (
		UPDATE claimq.job j
		   SET state = 'pending', expires_at = NULL
		 WHERE j.queue_id OPERATOR(pg_catalog.=) qid
		   AND j.worker OPERATOR(pg_catalog.=) release_worker.worker
		   AND j.state OPERATOR(pg_catalog.=) 'claimed'
		   AND j.expires_at IS NOT NULL
		RETURNING j.group_key
	)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(DISTINCT r.group_key) FILTER (WHERE r.group_key IS NOT NULL)
	  INTO n, keys
	  FROM released r;
	IF keys IS NOT NULL THEN
		PERFORM claimq.sync_groups(qid, keys);
	END IF;
	RETURN n;
END
