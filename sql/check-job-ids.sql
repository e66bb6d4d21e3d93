-- The job_ids rule of cancel, status, wait_for and dependencies (src/
-- common.c, cq_job_ids_arg), "-- @include check-job-ids.sql function=NAME"
-- in a body whose argument is job_ids.
	IF @function@.job_ids IS NULL THEN
		RAISE EXCEPTION 'argument "job_ids" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.array_ndims(@function@.job_ids) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'job_ids must be a one-dimensional array'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_position(@function@.job_ids, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'job_ids must not contain null elements'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.cardinality(@function@.job_ids) OPERATOR(pg_catalog.>) @CQ_MAX_BATCH@ THEN
		RAISE EXCEPTION 'at most @CQ_MAX_BATCH@ job ids can be given in one call'
			USING ERRCODE = '22023';
	END IF;
