#variable_conflict use_column
DECLARE
	t0 timestamptz;
	q record;
	limited boolean;
	sync boolean;
	replace boolean;
	n integer;
	ids bigint[];
	fresh boolean[];
	inserted bigint := 0;
	id bigint;
	p jsonb;
	k text;
	g text;
	h jsonb;
	replaced_key text;
	link_set bigint;
	link_unfinished integer := 0;
	link_all_done boolean;
	new_state text := 'pending';
BEGIN
	/* src/enqueue.c: the checks first, in the C edition's order. */
	-- @include portable/check-enqueue.sql function=enqueue_many
	IF enqueue_many.payloads IS NULL THEN
		RAISE EXCEPTION 'argument "payloads" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.array_ndims(enqueue_many.payloads) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'payloads must be a one-dimensional array'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_position(enqueue_many.payloads, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'payloads must not contain null elements'
			USING ERRCODE = '22004';
	END IF;
	n := pg_catalog.cardinality(enqueue_many.payloads);
	IF enqueue_many.dedup_keys IS NOT NULL THEN
		IF pg_catalog.array_ndims(enqueue_many.dedup_keys) OPERATOR(pg_catalog.>) 1 THEN
			RAISE EXCEPTION 'dedup_keys must be a one-dimensional array'
				USING ERRCODE = '22023';
		END IF;
		IF pg_catalog.cardinality(enqueue_many.dedup_keys) OPERATOR(pg_catalog.<>) n THEN
			RAISE EXCEPTION 'dedup_keys must have as many elements as payloads'
				USING ERRCODE = '22023';
		END IF;
	END IF;
	IF enqueue_many.group_keys IS NOT NULL THEN
		IF pg_catalog.array_ndims(enqueue_many.group_keys) OPERATOR(pg_catalog.>) 1 THEN
			RAISE EXCEPTION 'group_keys must be a one-dimensional array'
				USING ERRCODE = '22023';
		END IF;
		IF pg_catalog.cardinality(enqueue_many.group_keys) OPERATOR(pg_catalog.<>) n THEN
			RAISE EXCEPTION 'group_keys must have as many elements as payloads'
				USING ERRCODE = '22023';
		END IF;
		IF EXISTS (SELECT FROM pg_catalog.unnest(enqueue_many.group_keys) AS u(g)
					WHERE pg_catalog.octet_length(u.g) OPERATOR(pg_catalog.>) 200) THEN
			RAISE EXCEPTION 'each of group_keys must be at most 200 bytes long'
				USING ERRCODE = '22023';
		END IF;
	END IF;
	IF enqueue_many.headers IS NOT NULL THEN
		IF pg_catalog.array_ndims(enqueue_many.headers) OPERATOR(pg_catalog.>) 1 THEN
			RAISE EXCEPTION 'headers must be a one-dimensional array'
				USING ERRCODE = '22023';
		END IF;
		IF pg_catalog.cardinality(enqueue_many.headers) OPERATOR(pg_catalog.<>) n THEN
			RAISE EXCEPTION 'headers must have as many elements as payloads'
				USING ERRCODE = '22023';
		END IF;
	END IF;

	/* The producer lock, shared (src/common.c), before the look-up. */
	PERFORM pg_catalog.pg_advisory_xact_lock_shared(@CQ_PRODUCER_LOCK_KEY@,
		pg_catalog.hashtext(enqueue_many.queue COLLATE "C"));
	SELECT t.queue_id, t.notify, t.group_limit, t.group_fifo, t.fair, t.prioritized INTO q
	  FROM claimq.queue t WHERE t.name OPERATOR(pg_catalog.=) enqueue_many.queue;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" does not exist', enqueue_many.queue
			USING ERRCODE = '42704';
	END IF;
	IF enqueue_many.group_keys IS NOT NULL
	   AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		/* As in enqueue: group limits changed since the snapshot. */
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
				RAISE EXCEPTION 'could not serialize access due to a concurrent change of queue "%"', enqueue_many.queue
					USING ERRCODE = '40001', HINT = 'Retry the transaction.';
		END;
	END IF;

	/*
	 * Workflows (src/workflow.c): the jobs listed in after are checked,
	 * locked and recorded as one set that every job of the call names; the
	 * jobs go in waiting while one of them is unfinished, else judged at
	 * once: pending, or cancelled.  Only pending jobs are held by, and
	 * synced with, their groups' limits.  With no payloads the set goes.
	 */
	IF pg_catalog.cardinality(enqueue_many.after) OPERATOR(pg_catalog.>) 0 THEN
		SELECT l.set_id, l.unfinished, l.all_done
		  INTO link_set, link_unfinished, link_all_done
		  FROM claimq.link_after(enqueue_many.after) l;
		new_state := CASE WHEN link_unfinished OPERATOR(pg_catalog.>) 0 THEN 'waiting'
						  WHEN link_all_done OR enqueue_many.after_failed OPERATOR(pg_catalog.=) 'run' THEN 'pending'
						  ELSE 'cancelled' END;
	END IF;
	IF n OPERATOR(pg_catalog.=) 0 THEN
		IF link_set IS NOT NULL THEN
			PERFORM claimq.forget_after(ARRAY[link_set], '{}');
		END IF;
		RETURN;
	END IF;
	limited := claimq.group_cap(q.group_limit, q.group_fifo) IS NOT NULL;
	sync := enqueue_many.group_keys IS NOT NULL AND limited
			AND new_state OPERATOR(pg_catalog.=) 'pending';
	/* A first job at a priority but 0 marks its queue (queue-changed.sql). */
	IF enqueue_many.priority OPERATOR(pg_catalog.<>) 0 AND NOT q.prioritized THEN
		PERFORM claimq.mark_prioritized(q.queue_id);
	END IF;
	IF q.fair THEN
		PERFORM claimq.fair_join(q.queue_id, enqueue_many.priority,
			COALESCE(enqueue_many.group_keys, ARRAY[NULL::text]));
	END IF;
	IF sync THEN
		PERFORM claimq.sync_groups(q.queue_id, enqueue_many.group_keys);
	END IF;

	/*
	 * All rows in one INSERT, their ids drawn in input order first.  The
	 * rows go in in dedup key order (then input order, so that the first of
	 * a repeated key wins): producers that take keys in one order never
	 * wait for each other in a cycle.  Rows cancelled at once with a dedup
	 * key are left to the loop below: a cancelled job holds no key, so its
	 * insert would meet no conflict.
	 */
	WITH input AS MATERIALIZED (
		SELECT u.ord, u.payload, u.dedup_key, u.group_key,
			   claimq.checked_headers(u.headers, 'each of headers') AS headers,
			   pg_catalog.nextval('claimq.job_id_seq'::pg_catalog.regclass) AS job_id
		  FROM ROWS FROM (pg_catalog.unnest(enqueue_many.payloads),
						  pg_catalog.unnest(enqueue_many.dedup_keys),
						  pg_catalog.unnest(enqueue_many.group_keys),
						  pg_catalog.unnest(enqueue_many.headers))
			   WITH ORDINALITY AS u(payload, dedup_key, group_key, headers, ord)
	), ins AS (
		INSERT INTO claimq.job AS j
			(job_id, queue_id, state, priority, run_at, enqueued_at,
			 dedup_key, payload, max_attempts, group_key, held,
			 finished_at, after_set, after_count, after_failed, headers)
		SELECT i.job_id, q.queue_id, new_state, enqueue_many.priority,
			   COALESCE(enqueue_many.run_at, t0), t0, i.dedup_key, i.payload,
			   enqueue_many.max_attempts, i.group_key,
			   sync AND i.group_key IS NOT NULL,
			   CASE WHEN new_state OPERATOR(pg_catalog.=) 'cancelled' THEN t0 END,
			   link_set, link_unfinished,
			   CASE WHEN link_set IS NOT NULL THEN enqueue_many.after_failed END,
			   i.headers
		  FROM input i
		 WHERE new_state OPERATOR(pg_catalog.<>) 'cancelled' OR i.dedup_key IS NULL
		 ORDER BY i.dedup_key COLLATE "C", i.ord
		ON CONFLICT (queue_id, dedup_key)
			WHERE j.dedup_key IS NOT NULL
			  AND j.state OPERATOR(pg_catalog.=) ANY (@CQ_LIVE_STATES@)
		DO NOTHING
		RETURNING j.job_id
	)
	SELECT pg_catalog.array_agg(i.job_id ORDER BY i.ord),
		   pg_catalog.array_agg(x.job_id IS NOT NULL ORDER BY i.ord),
		   pg_catalog.count(x.job_id)
	  INTO ids, fresh, inserted
	  FROM input i LEFT JOIN ins x ON x.job_id OPERATOR(pg_catalog.=) i.job_id;

	/*
	 * The rows a dedup conflict dropped, in input order (so that with
	 * replace the last of a repeated key stays): the live job that holds
	 * the key, or an insert after all if it finished meanwhile.  A row
	 * cancelled at once looks for the live job first.
	 */
	FOR r IN 1 .. CASE WHEN inserted OPERATOR(pg_catalog.<) n THEN n ELSE 0 END LOOP
		CONTINUE WHEN fresh[r];
		p := enqueue_many.payloads[pg_catalog.array_lower(enqueue_many.payloads, 1) OPERATOR(pg_catalog.+) r OPERATOR(pg_catalog.-) 1];
		k := enqueue_many.dedup_keys[pg_catalog.array_lower(enqueue_many.dedup_keys, 1) OPERATOR(pg_catalog.+) r OPERATOR(pg_catalog.-) 1];
		g := enqueue_many.group_keys[pg_catalog.array_lower(enqueue_many.group_keys, 1) OPERATOR(pg_catalog.+) r OPERATOR(pg_catalog.-) 1];
		h := enqueue_many.headers[pg_catalog.array_lower(enqueue_many.headers, 1) OPERATOR(pg_catalog.+) r OPERATOR(pg_catalog.-) 1];
		id := NULL;
		FOR attempt IN 1 .. 100 LOOP
			IF new_state OPERATOR(pg_catalog.=) 'cancelled' THEN
				SELECT j.job_id INTO id FROM claimq.job j
				 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
				   AND j.dedup_key OPERATOR(pg_catalog.=) k
				   AND j.state OPERATOR(pg_catalog.=) ANY (@CQ_LIVE_STATES@);
				EXIT WHEN FOUND;
			END IF;
			INSERT INTO claimq.job AS j
				(job_id, queue_id, state, priority, run_at, enqueued_at,
				 dedup_key, payload, max_attempts, group_key, held,
				 finished_at, after_set, after_count, after_failed, headers)
			VALUES (pg_catalog.nextval('claimq.job_id_seq'::pg_catalog.regclass),
					q.queue_id, new_state, enqueue_many.priority,
					COALESCE(enqueue_many.run_at, t0), t0, k, p,
					enqueue_many.max_attempts, g, sync AND g IS NOT NULL,
					CASE WHEN new_state OPERATOR(pg_catalog.=) 'cancelled' THEN t0 END,
					link_set, link_unfinished,
					CASE WHEN link_set IS NOT NULL THEN enqueue_many.after_failed END,
					h)
			ON CONFLICT (queue_id, dedup_key)
				WHERE j.dedup_key IS NOT NULL
				  AND j.state OPERATOR(pg_catalog.=) ANY (@CQ_LIVE_STATES@)
			DO NOTHING
			RETURNING j.job_id INTO id;
			IF FOUND THEN
				inserted := inserted OPERATOR(pg_catalog.+) 1;
				EXIT;
			END IF;
			IF replace THEN
				UPDATE claimq.job j
				   SET payload = p, run_at = COALESCE(enqueue_many.run_at, t0),
					   priority = enqueue_many.priority,
					   max_attempts = COALESCE(enqueue_many.max_attempts, j.max_attempts),
					   headers = h
				 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
				   AND j.dedup_key OPERATOR(pg_catalog.=) k
				   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,waiting}'::text[])
				RETURNING j.job_id, j.group_key INTO id, replaced_key;
				IF FOUND THEN
					/* Its own tenant at the priority it took (fair-share.sql). */
					IF q.fair THEN
						PERFORM claimq.fair_join(q.queue_id, enqueue_many.priority, ARRAY[replaced_key]);
					END IF;
					EXIT;
				END IF;
			END IF;
			SELECT j.job_id INTO id FROM claimq.job j
			 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
			   AND j.dedup_key OPERATOR(pg_catalog.=) k
			   AND j.state OPERATOR(pg_catalog.=) ANY (@CQ_LIVE_STATES@);
			EXIT WHEN FOUND;
			id := NULL;
		END LOOP;
		IF id IS NULL THEN
			RAISE EXCEPTION 'could not enqueue into queue "%": dedup key kept changing hands', enqueue_many.queue
				USING ERRCODE = '40001', HINT = 'Retry the transaction.';
		END IF;
		ids[r] := id;
	END LOOP;

	IF sync AND inserted OPERATOR(pg_catalog.>) 0 THEN
		PERFORM claimq.sync_groups(q.queue_id, enqueue_many.group_keys);
	END IF;
	/* No job inserted (dedup keys matched): its set goes. */
	IF inserted OPERATOR(pg_catalog.=) 0 AND link_set IS NOT NULL THEN
		PERFORM claimq.forget_after(ARRAY[link_set], '{}');
	END IF;
	IF q.notify THEN
		PERFORM pg_catalog.pg_notify('claimq', enqueue_many.queue);
	END IF;
	RETURN QUERY SELECT u.id FROM pg_catalog.unnest(ids) AS u(id);
END
