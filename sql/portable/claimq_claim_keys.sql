DECLARE
	t0 timestamptz;
	t1 timestamptz;
	nkeys integer;
	call_token bigint;
	token_epoch integer;
	epoch_durable boolean;
BEGIN
	-- @include check-primary.sql function=claim_keys
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
	IF ttl IS NULL THEN
		RAISE EXCEPTION 'argument "ttl" must not be null'
			USING ERRCODE = '22004';
	END IF;
	/*
	 * Judged as it is used, against the wall clock (src/common.c,
	 * cq_interval_check): 0 < ttl <= 100 years; a field far beyond that is
	 * refused before any arithmetic.
	 */
	IF pg_catalog.abs((pg_catalog.date_part('year', ttl) OPERATOR(pg_catalog.*) 12)
			OPERATOR(pg_catalog.+) pg_catalog.date_part('month', ttl)) OPERATOR(pg_catalog.<=) 12012
	   AND pg_catalog.abs(pg_catalog.date_part('day', ttl)) OPERATOR(pg_catalog.<=) 372031
	   AND pg_catalog.abs(pg_catalog.trunc(((pg_catalog.date_part('hour', ttl) OPERATOR(pg_catalog.*) 3600)
			OPERATOR(pg_catalog.+) (pg_catalog.date_part('minute', ttl) OPERATOR(pg_catalog.*) 60)
			OPERATOR(pg_catalog.+) pg_catalog.date_part('second', ttl)) OPERATOR(pg_catalog./) 86400))
		   OPERATOR(pg_catalog.<=) 372031 THEN
		t0 := pg_catalog.clock_timestamp();
		t1 := t0 OPERATOR(pg_catalog.+) ttl;
	END IF;
	IF t1 IS NULL OR t1 OPERATOR(pg_catalog.<=) t0
	   OR t1 OPERATOR(pg_catalog.>) (t0 OPERATOR(pg_catalog.+) '100 years'::interval) THEN
		RAISE EXCEPTION 'ttl must be greater than zero and at most 100 years'
			USING ERRCODE = '22023';
	END IF;
	nkeys := pg_catalog.cardinality(keys);
	IF nkeys OPERATOR(pg_catalog.=) 0 THEN
		RETURN;
	END IF;

	/*
	 * One token for every key this call wins, of an epoch that a committed
	 * transaction registered (src/token.c).  A key claim cannot say "come
	 * back later" the way an empty claim does: no keys would read as keys
	 * that others hold.  So a call that finds this lifetime's epoch not yet
	 * registered fails, and whatever it registered goes with it: maintain()
	 * or a claim, in a transaction of its own, registers the epoch.  The
	 * look of lifetime_epoch() comes first, by its view.
	 */
	SELECT r.epoch INTO token_epoch
	  FROM claimq.lifetime_registered r WHERE NOT r.ours LIMIT 1;
	IF NOT FOUND THEN
		SELECT l.epoch, l.durable INTO token_epoch, epoch_durable
		  FROM claimq.lifetime_epoch() l;
	END IF;
	IF NOT COALESCE(epoch_durable, true) THEN
		RAISE EXCEPTION 'cannot hand out key tokens before this server lifetime''s token epoch is registered'
			USING ERRCODE = '55000',
				  DETAIL = 'The server restarted, recovered or was promoted, or claimq was moved or restored, since a transaction last registered an epoch.',
				  HINT = 'Call claimq.maintain() or claimq.claim() in a transaction of its own and try again; the portable edition''s maintain() runs every few seconds from pg_cron.';
	END IF;
	call_token := (token_epoch::bigint OPERATOR(pg_catalog.<<) 48) OPERATOR(pg_catalog.+)
		pg_catalog.nextval('claimq.token_seq'::pg_catalog.regclass);

	RETURN QUERY
	SELECT w.key, w.token
	  FROM claimq.claim_keys_won(claim_keys.scope, keys, call_token, ttl) AS w;
END
