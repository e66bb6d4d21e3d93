BEGIN
	-- @include check-primary.sql function=release_keys
	IF scope IS NULL THEN
		RAISE EXCEPTION 'argument "scope" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF keys IS NULL THEN
		RAISE EXCEPTION 'argument "keys" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.array_ndims(keys) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'keys must be a one-dimensional array'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_position(keys, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'keys must not contain null elements'
			USING ERRCODE = '22004';
	END IF;
	IF tokens IS NULL THEN
		RAISE EXCEPTION 'argument "tokens" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.array_ndims(tokens) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'tokens must be a one-dimensional array'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_position(tokens, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'tokens must not contain null elements'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.cardinality(keys) OPERATOR(pg_catalog.<>) pg_catalog.cardinality(tokens) THEN
		RAISE EXCEPTION 'keys and tokens must have the same number of elements'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.cardinality(keys) OPERATOR(pg_catalog.=) 0 THEN
		RETURN;
	END IF;

	RETURN QUERY
	SELECT r.key, r.outcome
	  FROM claimq.release_keys_held(release_keys.scope, keys, tokens) AS r;
END
