BEGIN
	-- @include check-primary.sql function=prune
	IF max_jobs IS NULL THEN
		RAISE EXCEPTION 'argument "max_jobs" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF max_jobs OPERATOR(pg_catalog.<) 1 OR max_jobs OPERATOR(pg_catalog.>) @CQ_MAX_BATCH@ THEN
		RAISE EXCEPTION 'max_jobs must be between 1 and @CQ_MAX_BATCH@'
			USING ERRCODE = '22023';
	END IF;
	/* Fair queues' tenants with no live job left: rows, not jobs. */
	PERFORM claimq.fair_forget(max_jobs);
	RETURN claimq.prune_finished(max_jobs)
		OPERATOR(pg_catalog.+) claimq.sweep_keys(max_jobs);
END
