DECLARE
	t0 timestamptz;
	t1 timestamptz;
BEGIN
	IF group_limit OPERATOR(pg_catalog.<) 1 OR group_limit OPERATOR(pg_catalog.>) @CQ_MAX_LIMIT@ THEN
		RAISE EXCEPTION 'group_limit must be between 1 and @CQ_MAX_LIMIT@'
			USING ERRCODE = '22023';
	END IF;
	IF max_in_flight OPERATOR(pg_catalog.<) 1 OR max_in_flight OPERATOR(pg_catalog.>) @CQ_MAX_LIMIT@ THEN
		RAISE EXCEPTION 'max_in_flight must be between 1 and @CQ_MAX_LIMIT@'
			USING ERRCODE = '22023';
	END IF;
	IF rate_limit OPERATOR(pg_catalog.<) 1 OR rate_limit OPERATOR(pg_catalog.>) @CQ_MAX_LIMIT@ THEN
		RAISE EXCEPTION 'rate_limit must be between 1 and @CQ_MAX_LIMIT@'
			USING ERRCODE = '22023';
	END IF;
	IF rate_period IS NULL THEN
		RETURN;
	END IF;
	/* A month has no fixed length (src/limits.c). */
	IF pg_catalog.date_part('year', rate_period) OPERATOR(pg_catalog.<>) 0
	   OR pg_catalog.date_part('month', rate_period) OPERATOR(pg_catalog.<>) 0 THEN
		RAISE EXCEPTION 'rate_period must not have a month part'
			USING ERRCODE = '22023',
				  DETAIL = 'A rate period is at most a day, and a month''s length depends on the calendar.',
				  HINT = 'Give the rate period in days, hours, minutes or seconds.';
	END IF;
	/*
	 * Judged as it is used, against the wall clock (src/common.c,
	 * cq_interval_check): 0 < span <= 1 day; a field far beyond that is
	 * refused before any arithmetic.
	 */
	IF pg_catalog.abs(pg_catalog.date_part('day', rate_period)) OPERATOR(pg_catalog.<=) 41
	   AND pg_catalog.abs(pg_catalog.trunc(((pg_catalog.date_part('hour', rate_period) OPERATOR(pg_catalog.*) 3600)
			OPERATOR(pg_catalog.+) (pg_catalog.date_part('minute', rate_period) OPERATOR(pg_catalog.*) 60)
			OPERATOR(pg_catalog.+) pg_catalog.date_part('second', rate_period)) OPERATOR(pg_catalog./) 86400))
		   OPERATOR(pg_catalog.<=) 41 THEN
		t0 := pg_catalog.clock_timestamp();
		t1 := t0 OPERATOR(pg_catalog.+) rate_period;
	END IF;
	IF t1 IS NULL OR t1 OPERATOR(pg_catalog.<=) t0
	   OR t1 OPERATOR(pg_catalog.>) (t0 OPERATOR(pg_catalog.+) '1 day'::interval) THEN
		RAISE EXCEPTION 'rate_period must be greater than zero and at most 1 day'
			USING ERRCODE = '22023';
	END IF;
END
