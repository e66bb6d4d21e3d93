DECLARE
	qid integer;
	stray bigint;
BEGIN
	/*
	 * src/common.c, cq_in_queue_*: a valid name (22023); with jobs listed,
	 * a queue of that name (42704), and none of the jobs that exist in
	 * another queue (22023).  A job never changes queues, so looking
	 * before the call's own statement judges as looking after it.
	 */
	IF check_in_queue.queue IS NULL THEN
		RETURN;
	END IF;
	PERFORM claimq.check_queue_name(check_in_queue.queue);
	IF pg_catalog.cardinality(check_in_queue.job_ids) OPERATOR(pg_catalog.=) 0 THEN
		RETURN;
	END IF;
	SELECT q.queue_id INTO qid FROM claimq.queue q
	 WHERE q.name OPERATOR(pg_catalog.=) check_in_queue.queue;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" does not exist', check_in_queue.queue
			USING ERRCODE = '42704';
	END IF;
	SELECT j.job_id INTO stray FROM claimq.job j
	 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (check_in_queue.job_ids)
	   AND j.queue_id OPERATOR(pg_catalog.<>) qid
	 LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'job % is not in queue "%"', stray, check_in_queue.queue
			USING ERRCODE = '22023';
	END IF;
END
