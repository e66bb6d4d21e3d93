DECLARE
	now_ timestamptz;
	deadline timestamptz;
	lim integer := claim.max_jobs;
	limited boolean := false;
	n bigint;
	qu record;
	in_flight bigint;
	row_tokens float8;
	row_at timestamptz;
	flow_at timestamptz;
	period float8;
	poll_ms integer := 10;
	took boolean;
	token_epoch integer;
	epoch_durable boolean;
	token_base bigint;
BEGIN
	/*
	 * src/claim.c.  The checks first, in the C edition's order; the queue's
	 * name is checked only where it matters: before any other argument is
	 * refused, and when no queue of that name was found (a queue's name is
	 * valid, so a claim that found its queue had a valid name).
	 */
	-- @include check-primary.sql function=claim
	IF claim.queue IS NULL THEN
		PERFORM claimq.check_queue_name(claim.queue);
	END IF;
	IF claim.max_jobs IS NULL THEN
		PERFORM claimq.check_queue_name(claim.queue);
		RAISE EXCEPTION 'argument "max_jobs" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF claim.max_jobs OPERATOR(pg_catalog.<) 1
	   OR claim.max_jobs OPERATOR(pg_catalog.>) @CQ_MAX_BATCH@ THEN
		PERFORM claimq.check_queue_name(claim.queue);
		RAISE EXCEPTION 'max_jobs must be between 1 and @CQ_MAX_BATCH@'
			USING ERRCODE = '22023';
	END IF;
	IF claim.lease IS NOT NULL THEN
		PERFORM claimq.check_queue_name(claim.queue);
		PERFORM claimq.settle_check_interval(claim.lease, 'lease', false, '7 days', '7 days');
	END IF;
	IF claim.start IS NULL THEN
		PERFORM claimq.check_queue_name(claim.queue);
		RAISE EXCEPTION 'argument "start" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF claim.wait IS NULL THEN
		PERFORM claimq.check_queue_name(claim.queue);
		RAISE EXCEPTION 'argument "wait" must not be null'
			USING ERRCODE = '22004';
	END IF;
	/*
	 * Tokens of an epoch that a committed transaction registered, and only
	 * those (src/token.c): the look of lifetime_epoch() first, by its view.
	 * The first claim of a server lifetime registers its epoch (or finds
	 * another transaction doing so) and returns no jobs, without waiting:
	 * its transaction commits synchronously, and the claims after it hand
	 * out that epoch's tokens.
	 */
	SELECT r.epoch INTO token_epoch
	  FROM claimq.lifetime_registered r WHERE NOT r.ours LIMIT 1;
	IF NOT FOUND THEN
		SELECT l.epoch, l.durable INTO token_epoch, epoch_durable
		  FROM claimq.lifetime_epoch() l;
		IF NOT epoch_durable THEN
			IF NOT EXISTS (SELECT FROM claimq.queue t
							WHERE t.name OPERATOR(pg_catalog.=) claim.queue) THEN
				PERFORM claimq.check_queue_name(claim.queue);
				RAISE EXCEPTION 'queue "%" does not exist', claim.queue
					USING ERRCODE = '42704';
			END IF;
			RETURN;
		END IF;
	END IF;
	token_base := token_epoch::bigint OPERATOR(pg_catalog.<<) 48;

	/* The default, no wait at all, needs no arithmetic. */
	IF pg_catalog.date_part('epoch', claim.wait) OPERATOR(pg_catalog.<>) 0
	   OR pg_catalog.date_part('day', claim.wait) OPERATOR(pg_catalog.<>) 0
	   OR pg_catalog.date_part('month', claim.wait) OPERATOR(pg_catalog.<>) 0
	   OR pg_catalog.date_part('year', claim.wait) OPERATOR(pg_catalog.<>) 0 THEN
		PERFORM claimq.check_queue_name(claim.queue);
		PERFORM claimq.settle_check_interval(claim.wait, 'wait', true, '7 days', '7 days');
		now_ := pg_catalog.clock_timestamp();
		deadline := now_ OPERATOR(pg_catalog.+) claim.wait;
		IF deadline OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
			/*
			 * Poll: each look is a claim without a wait, in a subtransaction
			 * rolled back when it claimed nothing, since the look can lock a
			 * row without claiming it (src/claim.c) and that lock must not
			 * outlive it.  Under READ COMMITTED each look sees the commits
			 * made meanwhile.
			 */
			LOOP
				took := false;
				BEGIN
					RETURN QUERY
					SELECT c.job_id, c.token, c.payload, c.attempts, c.priority,
						   c.enqueued_at, c.expires_at, c.headers
					  FROM claimq.claim(claim.queue, claim.max_jobs, claim.lease,
										claim.worker, claim.start) c;
					took := FOUND;
					IF NOT took THEN
						RAISE EXCEPTION USING ERRCODE = 'CQ000';
					END IF;
				EXCEPTION WHEN SQLSTATE 'CQ000' THEN
					NULL;
				END;
				IF took OR pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) deadline THEN
					RETURN;
				END IF;
				PERFORM pg_catalog.pg_sleep(GREATEST(0, LEAST(poll_ms,
					pg_catalog.ceil(pg_catalog.date_part('epoch',
						deadline OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
						OPERATOR(pg_catalog.*) 1000)))
					OPERATOR(pg_catalog./) 1000.0);
				poll_ms := LEAST(poll_ms OPERATOR(pg_catalog.*) 2, 100);
			END LOOP;
		END IF;
	END IF;

	/*
	 * One statement finds, locks and claims the batch: the ready jobs of
	 * each priority in use, highest first, under FOR UPDATE SKIP LOCKED (a
	 * loose index scan over job_ready_idx, as in C).  It claims only from a
	 * queue that exists, is not paused and, unless the queue-wide limits
	 * were applied below, has none.  Each job gets a token of its own.
	 *
	 * The batch size and the time reach the planner as sub-selects, which
	 * it cannot look into: PL/pgSQL then keeps the statement's generic plan
	 * (the plan C forces), where with their values it would plan the
	 * statement anew on every call, which costs more than running it.  Each
	 * priority's scan is cut at the largest batch (the outer LIMIT takes
	 * the batch; rows are locked only as they are taken), so that the
	 * plan's estimated cost does not grow with the table and never reaches
	 * jit_above_cost's default, which C avoids by turning JIT off.
	 */
	LOOP
		now_ := pg_catalog.clock_timestamp();
		RETURN QUERY
		WITH RECURSIVE qr AS MATERIALIZED (
			SELECT q.queue_id,
				   COALESCE(claim.lease, CASE WHEN claim.start THEN q.run_lease
											  ELSE q.lease END) AS lease
			  FROM claimq.queue q
			 WHERE q.name OPERATOR(pg_catalog.=) claim.queue AND NOT q.paused
			   AND NOT q.fair
			   AND (limited
					OR (COALESCE(q.max_in_flight, 0) OPERATOR(pg_catalog.<=) 0
						AND COALESCE(q.rate_limit, 0) OPERATOR(pg_catalog.<=) 0))
		), prio(p) AS (
			SELECT pg_catalog.min(j.priority) FROM claimq.job j
			 WHERE j.queue_id OPERATOR(pg_catalog.=) (SELECT qr.queue_id FROM qr)
			   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
		  UNION ALL
			SELECT (SELECT pg_catalog.min(j.priority) FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) (SELECT qr.queue_id FROM qr)
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
					   AND j.priority OPERATOR(pg_catalog.>) prio.p)
			  FROM prio WHERE prio.p IS NOT NULL
		), picked AS MATERIALIZED (
			SELECT c.ctid
			  FROM (SELECT prio.p FROM prio WHERE prio.p IS NOT NULL
					 ORDER BY prio.p DESC) prio
			 CROSS JOIN LATERAL (
				SELECT j.ctid FROM claimq.job j
				 WHERE j.queue_id OPERATOR(pg_catalog.=) (SELECT qr.queue_id FROM qr)
				   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
				   AND j.priority OPERATOR(pg_catalog.=) prio.p
				   AND j.run_at OPERATOR(pg_catalog.<=) (SELECT now_)
				 ORDER BY j.run_at, j.job_id
				 LIMIT @CQ_MAX_BATCH@
				   FOR UPDATE SKIP LOCKED) c
			 LIMIT (SELECT lim)
		), upd AS (
			UPDATE claimq.job j
			   SET state = CASE WHEN claim.start THEN 'running' ELSE 'claimed' END,
				   attempts = j.attempts OPERATOR(pg_catalog.+)
							  CASE WHEN claim.start THEN 1 ELSE 0 END,
				   token = (SELECT token_base) OPERATOR(pg_catalog.+)
						   pg_catalog.nextval('claimq.token_seq'),
				   worker = claim.worker, claimed_at = now_,
				   expires_at = now_ OPERATOR(pg_catalog.+) (SELECT qr.lease FROM qr),
				   started_at = CASE WHEN claim.start THEN now_ END
			 WHERE j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT p.ctid FROM picked p))
			RETURNING j.job_id, j.token, j.payload, j.attempts, j.priority,
					  j.enqueued_at, j.expires_at, j.headers, j.run_at
		)
		SELECT u.job_id, u.token, u.payload, u.attempts, u.priority,
			   u.enqueued_at, u.expires_at, u.headers
		  FROM upd u
		 ORDER BY u.priority DESC, u.run_at, u.job_id;
		GET DIAGNOSTICS n = ROW_COUNT;
		EXIT WHEN n OPERATOR(pg_catalog.>) 0 OR limited;

		/* Nothing: no such queue, paused, nothing ready, or limited. */
		SELECT t.queue_id, t.paused, COALESCE(t.max_in_flight, 0) AS max_in_flight,
			   COALESCE(t.rate_limit, 0) AS rate_limit, t.rate_period, t.fair,
			   COALESCE(claim.lease, CASE WHEN claim.start THEN t.run_lease
										  ELSE t.lease END) AS lease
		  INTO qu
		  FROM claimq.queue t WHERE t.name OPERATOR(pg_catalog.=) claim.queue;
		IF NOT FOUND THEN
			PERFORM claimq.check_queue_name(claim.queue);
			RAISE EXCEPTION 'queue "%" does not exist', claim.queue
				USING ERRCODE = '42704';
		END IF;
		IF qu.paused OR (NOT qu.fair AND qu.max_in_flight OPERATOR(pg_catalog.<=) 0
						 AND qu.rate_limit OPERATOR(pg_catalog.<=) 0) THEN
			RETURN;
		END IF;
		IF qu.fair AND qu.max_in_flight OPERATOR(pg_catalog.<=) 0
		   AND qu.rate_limit OPERATOR(pg_catalog.<=) 0 THEN
			/* A fair queue shares the batch between its tenants. */
			RETURN QUERY
			SELECT f.job_id, f.token, f.payload, f.attempts, f.priority,
				   f.enqueued_at, f.expires_at, f.headers
			  FROM claimq.claim_fair(qu.queue_id, lim, now_, qu.lease, claim.worker,
									 claim.start, token_base) f
			 ORDER BY f.priority DESC, f.run_at, f.job_id;
			RETURN;
		END IF;

		/*
		 * The queue-wide limits (src/limits.c, as without the preload):
		 * take turns on the queue's row, then count the jobs in flight and
		 * refill the bucket kept in the row, with a snapshot that sees the
		 * previous holder's claims.  The lock is an update, so that under
		 * REPEATABLE READ a claim whose snapshot predates the previous
		 * holder's commit fails to serialize.
		 */
		UPDATE claimq.queue t SET rate_at = t.rate_at
		 WHERE t.queue_id OPERATOR(pg_catalog.=) qu.queue_id;
		flow_at := pg_catalog.clock_timestamp();
		SELECT (SELECT pg_catalog.count(*) FROM claimq.job j
				 WHERE j.expires_at IS NOT NULL
				   AND j.queue_id OPERATOR(pg_catalog.=) t.queue_id),
			   t.rate_tokens, t.rate_at
		  INTO in_flight, row_tokens, row_at
		  FROM claimq.queue t WHERE t.queue_id OPERATOR(pg_catalog.=) qu.queue_id;
		IF NOT FOUND THEN
			RETURN;				/* dropped meanwhile */
		END IF;
		IF qu.max_in_flight OPERATOR(pg_catalog.>) 0 THEN
			lim := GREATEST(0, LEAST(lim,
				qu.max_in_flight OPERATOR(pg_catalog.-) in_flight));
		END IF;
		IF qu.rate_limit OPERATOR(pg_catalog.>) 0 THEN
			/*
			 * The period in microseconds: its days and time, leaving out a
			 * month part (a month has no fixed length).
			 */
			period := pg_catalog.date_part('epoch', qu.rate_period OPERATOR(pg_catalog.-)
				pg_catalog.make_interval(months => ((pg_catalog.date_part('year', qu.rate_period)
					OPERATOR(pg_catalog.*) 12) OPERATOR(pg_catalog.+)
					pg_catalog.date_part('month', qu.rate_period))::integer))
				OPERATOR(pg_catalog.*) 1000000;
			IF period OPERATOR(pg_catalog.<=) 0 OR period OPERATOR(pg_catalog.>) 86400000000 THEN
				RAISE EXCEPTION 'rate_period of queue "%" cannot be used', claim.queue
					USING ERRCODE = '55000',
						  DETAIL = 'Counted in days and time, leaving out its month part, it is not greater than zero and at most 1 day.',
						  HINT = 'Set it again with claimq.alter_queue, in days, hours, minutes or seconds.';
			END IF;
			/* Full without a record of the bucket, else refilled to now. */
			IF row_at IS NULL THEN
				row_tokens := qu.rate_limit;
			ELSE
				row_tokens := LEAST(qu.rate_limit::float8,
					COALESCE(row_tokens, 0) OPERATOR(pg_catalog.+)
					(GREATEST(pg_catalog.date_part('epoch',
						flow_at OPERATOR(pg_catalog.-) row_at) OPERATOR(pg_catalog.*) 1000000, 0)
					 OPERATOR(pg_catalog.*) (qu.rate_limit::float8 OPERATOR(pg_catalog./) period)));
			END IF;
			lim := GREATEST(0, LEAST(lim::float8,
				pg_catalog.floor(row_tokens)))::integer;
		END IF;
		IF lim OPERATOR(pg_catalog.=) 0 THEN
			RETURN;
		END IF;
		limited := true;
		IF qu.fair THEN
			RETURN QUERY
			SELECT f.job_id, f.token, f.payload, f.attempts, f.priority,
				   f.enqueued_at, f.expires_at, f.headers
			  FROM claimq.claim_fair(qu.queue_id, lim, now_, qu.lease, claim.worker,
									 claim.start, token_base) f
			 ORDER BY f.priority DESC, f.run_at, f.job_id;
			GET DIAGNOSTICS n = ROW_COUNT;
			EXIT;
		END IF;
	END LOOP;

	/* The bucket kept in the row spends one token per job handed out. */
	IF limited AND n OPERATOR(pg_catalog.>) 0 THEN
		IF qu.rate_limit OPERATOR(pg_catalog.>) 0 THEN
			UPDATE claimq.queue t
			   SET rate_tokens = row_tokens OPERATOR(pg_catalog.-) n, rate_at = flow_at
			 WHERE t.queue_id OPERATOR(pg_catalog.=) qu.queue_id;
		END IF;
	END IF;
END
