DECLARE
	/* Jobs or key claims each step handles at most. */
	batch constant integer := @CQ_MAINTAIN_BATCH@;
	reclaimed bigint;
	fired bigint;
	pruned bigint;
	swept bigint;
BEGIN
	-- @include check-primary.sql function=maintain
	/* A new lifetime's epoch is registered here, if no claim did yet. */
	PERFORM claimq.lifetime_epoch();
	SELECT COALESCE(pg_catalog.sum(r.released OPERATOR(pg_catalog.+) r.retried
								   OPERATOR(pg_catalog.+) r.dead), 0)::bigint
	  INTO reclaimed
	  FROM claimq.reclaim_expired(NULL, batch) r;
	fired := claimq.fire_schedules(batch);
	pruned := claimq.prune_finished(batch);
	PERFORM claimq.fair_forget(batch);
	swept := claimq.sweep_keys(batch);
	/* For reclaimer_status: this pass, if it commits. */
	INSERT INTO claimq.maintained AS m (id, last_run, last_reclaimed, total_reclaimed)
	VALUES (true, pg_catalog.clock_timestamp(), reclaimed, reclaimed)
	ON CONFLICT ON CONSTRAINT maintained_pkey DO UPDATE
	   SET last_run = excluded.last_run,
		   last_reclaimed = excluded.last_reclaimed,
		   total_reclaimed = m.total_reclaimed OPERATOR(pg_catalog.+) excluded.last_reclaimed;
	RETURN QUERY VALUES ('reclaim'::text, reclaimed), ('fire_schedules', fired),
						('prune', pruned), ('sweep_keys', swept);
END
