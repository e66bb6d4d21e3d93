#variable_conflict use_column
BEGIN
	/* The job_ids rule of cancel, status and wait_for (src/common.c). */
	IF status.job_ids IS NULL THEN
		RAISE EXCEPTION 'argument "job_ids" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.array_ndims(status.job_ids) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'job_ids must be a one-dimensional array'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_position(status.job_ids, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'job_ids must not contain null elements'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.cardinality(status.job_ids) OPERATOR(pg_catalog.>) @CQ_MAX_BATCH@ THEN
		RAISE EXCEPTION 'at most @CQ_MAX_BATCH@ job ids can be given in one call'
			USING ERRCODE = '22023';
	END IF;
	RETURN QUERY
	SELECT i.job_id, q.name, j.state, j.attempts, j.run_at, j.finished_at,
		   j.last_error, j.result
	  FROM ROWS FROM (pg_catalog.unnest(status.job_ids))
		   WITH ORDINALITY AS i(job_id, ord)
	  LEFT JOIN claimq.job j ON j.job_id OPERATOR(pg_catalog.=) i.job_id
	  LEFT JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id
	 ORDER BY i.ord;
END
