-- create_queue and alter_queue, written once for the install script and
-- the update that changes them.

CREATE FUNCTION claimq.create_queue(
	queue text,
	lease interval DEFAULT '30 seconds',
	run_lease interval DEFAULT '5 minutes',
	max_attempts integer DEFAULT 5,
	retry_base interval DEFAULT '1 second',
	retry_max interval DEFAULT '1 hour',
	keep_done interval DEFAULT '0',
	keep_dead interval DEFAULT '14 days',
	notify boolean DEFAULT false,
	group_limit integer DEFAULT NULL,
	group_fifo boolean DEFAULT false,
	max_in_flight integer DEFAULT NULL,
	rate_limit integer DEFAULT NULL,
	rate_period interval DEFAULT '1 second',
	fair boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM claimq.check_queue_name(queue);
	IF lease IS NULL OR run_lease IS NULL OR max_attempts IS NULL
	   OR retry_base IS NULL OR retry_max IS NULL OR keep_done IS NULL
	   OR keep_dead IS NULL OR notify IS NULL OR group_fifo IS NULL
	   OR rate_period IS NULL OR fair IS NULL THEN
		RAISE EXCEPTION 'queue settings must not be null'
			USING ERRCODE = '22004',
				  HINT = 'Omit a setting to take its default; a limit may be NULL (no limit).';
	END IF;
	PERFORM claimq.check_queue_settings(lease, run_lease, max_attempts,
										retry_base, retry_max,
										keep_done, keep_dead);
	PERFORM claimq.check_flow_settings(group_limit, max_in_flight,
									   rate_limit, rate_period);
	PERFORM claimq.check_fair(fair);
	INSERT INTO claimq.queue AS q
		(name, lease, run_lease, max_attempts, retry_base, retry_max,
		 keep_done, keep_dead, notify, group_limit, group_fifo,
		 max_in_flight, rate_limit, rate_period, fair)
	VALUES (queue, lease, run_lease, max_attempts, retry_base, retry_max,
			keep_done, keep_dead, notify, group_limit, group_fifo,
			max_in_flight, rate_limit, rate_period, fair)
	ON CONFLICT (name) DO NOTHING;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" already exists', queue
			USING ERRCODE = '42710';
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.create_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean) IS
'create a queue; raises 42710 if it exists';

/*
 * A change of group_limit or group_fifo re-decides which pending jobs of
 * the queue's groups are held.  Enqueues wait (the producer lock), and so
 * does every transaction that is changing one of the queue's grouped live
 * jobs (their row locks): one that changed a job before could not know of
 * the new limits, and one that changes a job after sees them.
 */
CREATE FUNCTION claimq.alter_queue(
	queue text,
	lease interval DEFAULT NULL,
	run_lease interval DEFAULT NULL,
	max_attempts integer DEFAULT NULL,
	retry_base interval DEFAULT NULL,
	retry_max interval DEFAULT NULL,
	keep_done interval DEFAULT NULL,
	keep_dead interval DEFAULT NULL,
	notify boolean DEFAULT NULL,
	group_limit integer DEFAULT NULL,
	group_fifo boolean DEFAULT NULL,
	max_in_flight integer DEFAULT NULL,
	rate_limit integer DEFAULT NULL,
	rate_period interval DEFAULT NULL,
	fair boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	old claimq.queue;
BEGIN
	PERFORM claimq.check_queue_name(queue);
	/* 0 removes a limit. */
	PERFORM claimq.check_flow_settings(
		NULLIF(alter_queue.group_limit, 0), NULLIF(alter_queue.max_in_flight, 0),
		NULLIF(alter_queue.rate_limit, 0), alter_queue.rate_period);
	IF alter_queue.group_limit IS NOT NULL OR alter_queue.group_fifo IS NOT NULL
	   OR alter_queue.fair IS NOT NULL THEN
		PERFORM claimq.lock_producers(queue);
	END IF;
	q := claimq.lock_queue(queue);
	old := q;
	q.lease := COALESCE(lease, q.lease);
	q.run_lease := COALESCE(run_lease, q.run_lease);
	q.max_attempts := COALESCE(max_attempts, q.max_attempts);
	q.retry_base := COALESCE(retry_base, q.retry_base);
	q.retry_max := COALESCE(retry_max, q.retry_max);
	q.keep_done := COALESCE(keep_done, q.keep_done);
	q.keep_dead := COALESCE(keep_dead, q.keep_dead);
	q.notify := COALESCE(notify, q.notify);
	IF alter_queue.group_limit IS NOT NULL THEN
		q.group_limit := NULLIF(alter_queue.group_limit, 0);
	END IF;
	q.group_fifo := COALESCE(alter_queue.group_fifo, q.group_fifo);
	IF alter_queue.max_in_flight IS NOT NULL THEN
		q.max_in_flight := NULLIF(alter_queue.max_in_flight, 0);
	END IF;
	IF alter_queue.rate_limit IS NOT NULL THEN
		q.rate_limit := NULLIF(alter_queue.rate_limit, 0);
	END IF;
	q.rate_period := COALESCE(alter_queue.rate_period, q.rate_period);
	q.fair := COALESCE(alter_queue.fair, q.fair);
	PERFORM claimq.check_fair(alter_queue.fair);
	/* The tenants of a queue made fair are read from the latest jobs. */
	IF q.fair AND NOT old.fair
	   AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		RAISE EXCEPTION 'a queue can be made fair only in a READ COMMITTED transaction'
			USING ERRCODE = '0A000';
	END IF;
	IF (q.rate_limit, q.rate_period) IS DISTINCT FROM (old.rate_limit, old.rate_period) THEN
		/* A new bucket, full. */
		q.rate_tokens := NULL;
		q.rate_at := NULL;
	END IF;
	PERFORM claimq.check_queue_settings(q.lease, q.run_lease, q.max_attempts,
										q.retry_base, q.retry_max,
										q.keep_done, q.keep_dead);
	UPDATE claimq.queue t
	   SET lease = q.lease, run_lease = q.run_lease,
		   max_attempts = q.max_attempts, retry_base = q.retry_base,
		   retry_max = q.retry_max, keep_done = q.keep_done,
		   keep_dead = q.keep_dead, notify = q.notify,
		   group_limit = q.group_limit, group_fifo = q.group_fifo,
		   max_in_flight = q.max_in_flight, rate_limit = q.rate_limit,
		   rate_period = q.rate_period, rate_tokens = q.rate_tokens,
		   rate_at = q.rate_at, fair = q.fair
	 WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id;

	/*
	 * A queue made fair: a row for each tenant with live jobs, at each of
	 * their priorities (enqueues wait, and every other way to pending
	 * starts from a live job).  Made unfair: the shares are forgotten.
	 */
	IF q.fair AND NOT old.fair THEN
		/* Charges a claim left as the queue was made unfair are moot. */
		DELETE FROM claimq.fair_charge d WHERE d.queue_id OPERATOR(pg_catalog.=) q.queue_id;
		INSERT INTO claimq.fair_share (queue_id, priority, group_key)
		SELECT DISTINCT q.queue_id, j.priority, j.group_key FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{waiting,pending,claimed,running}'::text[])
		ON CONFLICT DO NOTHING;
		INSERT INTO claimq.fair_level (queue_id, priority, v)
		SELECT DISTINCT q.queue_id, s.priority, 0 FROM claimq.fair_share s
		 WHERE s.queue_id OPERATOR(pg_catalog.=) q.queue_id
		ON CONFLICT DO NOTHING;
	ELSIF old.fair AND NOT q.fair THEN
		DELETE FROM claimq.fair_share s WHERE s.queue_id OPERATOR(pg_catalog.=) q.queue_id;
		DELETE FROM claimq.fair_level l WHERE l.queue_id OPERATOR(pg_catalog.=) q.queue_id;
		DELETE FROM claimq.fair_charge d WHERE d.queue_id OPERATOR(pg_catalog.=) q.queue_id;
	END IF;

	IF (q.group_limit, q.group_fifo) IS DISTINCT FROM (old.group_limit, old.group_fifo) THEN
		PERFORM 1 FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.group_key IS NOT NULL
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[])
		   FOR UPDATE OF j;
		UPDATE claimq.job j
		   SET held = (q.group_limit IS NOT NULL OR q.group_fifo)
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.group_key IS NOT NULL
		   AND j.state OPERATOR(pg_catalog.=) 'pending'
		   AND j.held OPERATOR(pg_catalog.<>) (q.group_limit IS NOT NULL OR q.group_fifo);
		IF q.group_limit IS NULL AND NOT q.group_fifo THEN
			DELETE FROM claimq.job_group x
			 WHERE x.queue_id OPERATOR(pg_catalog.=) q.queue_id;
		ELSE
			PERFORM claimq.sync_groups(q.queue_id, ARRAY(
				SELECT DISTINCT j.group_key FROM claimq.job j
				 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
				   AND j.group_key IS NOT NULL
				   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[])));
		END IF;
		PERFORM claimq.ledger_wake(q.queue_id, true, false);
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.alter_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean) IS
'change a queue''s settings; a NULL setting stays as it is, and a limit of 0 is removed';
