-- The pair of a scalar settle, "-- @include portable/check-settle-pair.sql
-- function=NAME": its job_id and token are given (src/settle.c,
-- cq_settle_one).
	IF @function@.job_id IS NULL THEN
		RAISE EXCEPTION 'argument "job_id" must not be null' USING ERRCODE = '22004';
	END IF;
	IF @function@.token IS NULL THEN
		RAISE EXCEPTION 'argument "token" must not be null' USING ERRCODE = '22004';
	END IF;
