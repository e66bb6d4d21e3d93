#variable_conflict use_column
DECLARE
	t0 timestamptz;
	q record;
	limited boolean;
	replace boolean;
	id bigint;
	inserted boolean := false;
	link_set bigint;
	link_unfinished integer := 0;
	link_all_done boolean;
	new_state text := 'pending';
	replaced_key text;
BEGIN
	/* src/enqueue.c: the checks first, in the C edition's order. */
	-- @include portable/check-enqueue.sql function=enqueue
	IF enqueue.payload IS NULL THEN
		RAISE EXCEPTION 'argument "payload" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.octet_length(enqueue.group_key) OPERATOR(pg_catalog.>) 200 THEN
		RAISE EXCEPTION 'group_key must be at most 200 bytes long'
			USING ERRCODE = '22023';
	END IF;

	/* The producer lock, shared (src/common.c), before the look-up. */
	PERFORM pg_catalog.pg_advisory_xact_lock_shared(@CQ_PRODUCER_LOCK_KEY@,
		pg_catalog.hashtext(enqueue.queue COLLATE "C"));
	SELECT t.queue_id, t.notify, t.group_limit, t.group_fifo, t.fair, t.prioritized INTO q
	  FROM claimq.queue t WHERE t.name OPERATOR(pg_catalog.=) enqueue.queue;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" does not exist', enqueue.queue
			USING ERRCODE = '42704';
	END IF;
	limited := claimq.group_cap(q.group_limit, q.group_fifo) IS NOT NULL;

	IF enqueue.group_key IS NOT NULL THEN
		/*
		 * Under REPEATABLE READ the queue's group limits may have changed
		 * since the snapshot: the job would go in held or free by the old
		 * ones, which nothing would put right.  Fail to serialize instead.
		 */
		IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
			BEGIN
				/*
				 * A row lock fails to serialize if the row changed since the
				 * snapshot.  It is taken in a subtransaction that is then rolled
				 * back, which lets go of it: claims and alter_queue never wait
				 * for this producer.
				 */
				PERFORM FROM claimq.queue t
				 WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id FOR SHARE;
				RAISE SQLSTATE 'CQ000';
			EXCEPTION
				WHEN SQLSTATE 'CQ000' THEN
					NULL;
				WHEN serialization_failure THEN
					RAISE EXCEPTION 'could not serialize access due to a concurrent change of queue "%"', enqueue.queue
						USING ERRCODE = '40001', HINT = 'Retry the transaction.';
			END;
		END IF;
	END IF;

	/*
	 * Workflows (src/workflow.c): the jobs listed in after are checked,
	 * locked and recorded as a set; the job goes in waiting while one of
	 * them is unfinished, else judged at once: pending, or cancelled.  Only
	 * a pending job is held by, and synced with, its group's limit.
	 */
	IF pg_catalog.cardinality(enqueue.after) OPERATOR(pg_catalog.>) 0 THEN
		SELECT l.set_id, l.unfinished, l.all_done
		  INTO link_set, link_unfinished, link_all_done
		  FROM claimq.link_after(enqueue.after) l;
		new_state := CASE WHEN link_unfinished OPERATOR(pg_catalog.>) 0 THEN 'waiting'
						  WHEN link_all_done OR enqueue.after_failed OPERATOR(pg_catalog.=) 'run' THEN 'pending'
						  ELSE 'cancelled' END;
		limited := limited AND new_state OPERATOR(pg_catalog.=) 'pending';
	END IF;

	/* A first job at a priority but 0 marks its queue (queue-changed.sql). */
	IF enqueue.priority OPERATOR(pg_catalog.<>) 0 AND NOT q.prioritized THEN
		PERFORM claimq.mark_prioritized(q.queue_id);
	END IF;

	/* A fair queue's tenant (fair-share.sql). */
	IF q.fair THEN
		PERFORM claimq.fair_join(q.queue_id, enqueue.priority, ARRAY[enqueue.group_key]);
	END IF;

	/* The group's lock before the insert: id order is commit order. */
	IF enqueue.group_key IS NOT NULL AND limited THEN
		PERFORM claimq.sync_groups(q.queue_id, ARRAY[enqueue.group_key]);
	END IF;

	/*
	 * Insert, or find the live job that holds the dedup key (and, with
	 * replace, update it while it is pending or waiting).  If that job
	 * finished in between, the key is free again: try again.  A job
	 * cancelled at once holds no key, so its insert meets no conflict: a
	 * live job with the key is looked for first.  The headers are checked
	 * as the C edition's insert checks them (sql/check-headers.sql).
	 */
	PERFORM claimq.checked_headers(enqueue.headers, 'headers');
	FOR attempt IN 1 .. 100 LOOP
		IF new_state OPERATOR(pg_catalog.=) 'cancelled' AND enqueue.dedup_key IS NOT NULL THEN
			SELECT j.job_id INTO id FROM claimq.job j
			 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
			   AND j.dedup_key OPERATOR(pg_catalog.=) enqueue.dedup_key
			   AND j.state OPERATOR(pg_catalog.=) ANY (@CQ_LIVE_STATES@);
			EXIT WHEN FOUND;
		END IF;
		INSERT INTO claimq.job AS j
			(job_id, queue_id, state, priority, run_at, enqueued_at,
			 dedup_key, payload, max_attempts, group_key, held,
			 finished_at, after_set, after_count, after_failed, headers)
		VALUES (pg_catalog.nextval('claimq.job_id_seq'::pg_catalog.regclass),
				q.queue_id, new_state, enqueue.priority,
				COALESCE(enqueue.run_at, t0), t0, enqueue.dedup_key,
				enqueue.payload, enqueue.max_attempts, enqueue.group_key,
				limited AND enqueue.group_key IS NOT NULL,
				CASE WHEN new_state OPERATOR(pg_catalog.=) 'cancelled' THEN t0 END,
				link_set, link_unfinished,
				CASE WHEN link_set IS NOT NULL THEN enqueue.after_failed END,
				enqueue.headers)
		ON CONFLICT (queue_id, dedup_key)
			WHERE j.dedup_key IS NOT NULL
			  AND j.state OPERATOR(pg_catalog.=) ANY (@CQ_LIVE_STATES@)
		DO NOTHING
		RETURNING j.job_id INTO id;
		IF FOUND THEN
			inserted := true;
			EXIT;
		END IF;
		IF replace THEN
			UPDATE claimq.job j
			   SET payload = enqueue.payload, run_at = COALESCE(enqueue.run_at, t0),
				   priority = enqueue.priority,
				   max_attempts = COALESCE(enqueue.max_attempts, j.max_attempts),
				   headers = enqueue.headers
			 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
			   AND j.dedup_key OPERATOR(pg_catalog.=) enqueue.dedup_key
			   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,waiting}'::text[])
			RETURNING j.job_id, j.group_key INTO id, replaced_key;
			IF FOUND THEN
				/* Its own tenant at the priority it took (fair-share.sql). */
				IF q.fair THEN
					PERFORM claimq.fair_join(q.queue_id, enqueue.priority, ARRAY[replaced_key]);
				END IF;
				EXIT;
			END IF;
		END IF;
		SELECT j.job_id INTO id FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.dedup_key OPERATOR(pg_catalog.=) enqueue.dedup_key
		   AND j.state OPERATOR(pg_catalog.=) ANY (@CQ_LIVE_STATES@);
		EXIT WHEN FOUND;
		id := NULL;
	END LOOP;
	IF id IS NULL THEN
		RAISE EXCEPTION 'could not enqueue into queue "%": dedup key kept changing hands', enqueue.queue
			USING ERRCODE = '40001', HINT = 'Retry the transaction.';
	END IF;

	IF inserted AND limited AND enqueue.group_key IS NOT NULL THEN
		PERFORM claimq.sync_groups(q.queue_id, ARRAY[enqueue.group_key]);
	END IF;
	/* No job inserted (a dedup key matched): its set goes. */
	IF NOT inserted AND link_set IS NOT NULL THEN
		PERFORM claimq.forget_after(ARRAY[link_set], '{}');
	END IF;
	IF q.notify THEN
		PERFORM pg_catalog.pg_notify('claimq', enqueue.queue);
	END IF;
	RETURN id;
END
