BEGIN
	/* The portable edition keeps no census, counters or floors: checks only. */
	IF queue_id IS NULL THEN
		RAISE EXCEPTION 'argument "queue_id" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF from_states IS NULL THEN
		RAISE EXCEPTION 'argument "from_states" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF counts IS NULL THEN
		RAISE EXCEPTION 'argument "counts" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.cardinality(from_states) OPERATOR(pg_catalog.<>) pg_catalog.cardinality(counts) THEN
		RAISE EXCEPTION 'from_states and counts must have as many elements'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_position(counts, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'counts must not hold nulls'
			USING ERRCODE = '22004';
	END IF;
	IF NOT (ARRAY(SELECT COALESCE(u.s, 'pending') FROM pg_catalog.unnest(from_states) AS u(s))
			OPERATOR(pg_catalog.||) COALESCE(to_state, 'pending'))
		   OPERATOR(pg_catalog.<@) '{pending,claimed,running,done,dead,cancelled,waiting}'::text[] THEN
		RAISE EXCEPTION 'claimq: unknown job state "%"',
			(SELECT u.s FROM pg_catalog.unnest(ARRAY[to_state] OPERATOR(pg_catalog.||) from_states) AS u(s)
			  WHERE u.s OPERATOR(pg_catalog.<>) ALL ('{pending,claimed,running,done,dead,cancelled,waiting}'::text[])
			  LIMIT 1)
			USING ERRCODE = 'XX000';
	END IF;
END
