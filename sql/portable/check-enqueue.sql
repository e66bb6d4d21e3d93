-- The options both enqueues take, "-- @include portable/check-enqueue.sql
-- function=enqueue|enqueue_many", checked in the C edition's order
-- (src/enqueue.c); it sets t0 (after priority) and replace.
	-- @include check-primary.sql function=@function@
	IF NOT COALESCE(claimq.valid_name(@function@.queue), false) THEN
		PERFORM claimq.check_queue_name(@function@.queue);
	END IF;
	IF @function@.priority IS NULL THEN
		RAISE EXCEPTION 'argument "priority" must not be null'
			USING ERRCODE = '22004';
	END IF;
	t0 := pg_catalog.clock_timestamp();
	IF @function@.max_attempts OPERATOR(pg_catalog.<) 1
	   OR @function@.max_attempts OPERATOR(pg_catalog.>) 1000 THEN
		RAISE EXCEPTION 'max_attempts must be between 1 and 1000'
			USING ERRCODE = '22023';
	END IF;
	IF @function@.on_duplicate IS NULL THEN
		RAISE EXCEPTION 'argument "on_duplicate" must not be null'
			USING ERRCODE = '22004';
	END IF;
	replace := @function@.on_duplicate OPERATOR(pg_catalog.=) 'replace';
	IF NOT replace AND @function@.on_duplicate OPERATOR(pg_catalog.<>) 'keep' THEN
		RAISE EXCEPTION 'on_duplicate must be "keep" or "replace"'
			USING ERRCODE = '22023';
	END IF;
	/* after_failed, with or without after (src/workflow.c, cq_after_args). */
	IF @function@.after_failed IS NULL THEN
		RAISE EXCEPTION 'argument "after_failed" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF @function@.after_failed OPERATOR(pg_catalog.<>) ALL ('{cancel,run}'::text[]) THEN
		RAISE EXCEPTION 'after_failed must be "cancel" or "run"'
			USING ERRCODE = '22023';
	END IF;
