-- The arrays of a batch settle, "-- @include portable/check-settle-pairs.sql"
-- in a body that declares n integer: job_ids and tokens are given, flat,
-- without nulls and of one length, at most CQ_MAX_BATCH pairs (src/settle.c,
-- cq_settle_many); n is that length.  The checks one by one, in the C
-- edition's order, only when one test of them all fails.
	n := pg_catalog.cardinality(job_ids);
	IF job_ids IS NULL OR tokens IS NULL
	   OR n OPERATOR(pg_catalog.<>) pg_catalog.cardinality(tokens)
	   OR n OPERATOR(pg_catalog.>) @CQ_MAX_BATCH@
	   OR pg_catalog.array_ndims(job_ids) OPERATOR(pg_catalog.>) 1
	   OR pg_catalog.array_ndims(tokens) OPERATOR(pg_catalog.>) 1
	   OR pg_catalog.array_position(job_ids, NULL::bigint) IS NOT NULL
	   OR pg_catalog.array_position(tokens, NULL::bigint) IS NOT NULL THEN
		IF job_ids IS NULL THEN
			RAISE EXCEPTION 'argument "job_ids" must not be null' USING ERRCODE = '22004';
		END IF;
		IF pg_catalog.array_ndims(job_ids) OPERATOR(pg_catalog.>) 1 THEN
			RAISE EXCEPTION 'job_ids must be a one-dimensional array' USING ERRCODE = '22023';
		END IF;
		IF pg_catalog.array_position(job_ids, NULL::bigint) IS NOT NULL THEN
			RAISE EXCEPTION 'job_ids must not contain null elements' USING ERRCODE = '22004';
		END IF;
		IF tokens IS NULL THEN
			RAISE EXCEPTION 'argument "tokens" must not be null' USING ERRCODE = '22004';
		END IF;
		IF pg_catalog.array_ndims(tokens) OPERATOR(pg_catalog.>) 1 THEN
			RAISE EXCEPTION 'tokens must be a one-dimensional array' USING ERRCODE = '22023';
		END IF;
		IF pg_catalog.array_position(tokens, NULL::bigint) IS NOT NULL THEN
			RAISE EXCEPTION 'tokens must not contain null elements' USING ERRCODE = '22004';
		END IF;
		IF n OPERATOR(pg_catalog.<>) pg_catalog.cardinality(tokens) THEN
			RAISE EXCEPTION 'job_ids and tokens must have the same number of elements'
				USING ERRCODE = '22023';
		END IF;
		IF n OPERATOR(pg_catalog.>) @CQ_MAX_BATCH@ THEN
			RAISE EXCEPTION 'at most @CQ_MAX_BATCH@ jobs can be settled in one call' USING ERRCODE = '22023';
		END IF;
	END IF;
