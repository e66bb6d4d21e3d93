/*
 * fair-share.sql: fairness between a queue's tenants (contract 0.5), the
 * one text of the install script and of the update to 0.8, in both
 * editions.  A fair queue shares its claims between its tenants (its
 * group keys, and one more tenant for the jobs without one) by weight,
 * within each priority: start-time fair queuing.
 *
 * Each tenant has a virtual time at each priority where it has live jobs
 * (claimq.fair_share.vt): the start of its next job.  A claim takes, at
 * the highest priority with ready jobs, the tenants with a ready job in
 * order of virtual time, hands out the smallest tags (a tenant's k-th
 * next job is tagged vt + k / weight), and moves each served tenant's
 * virtual time past what it got.  A tenant's virtual time never falls
 * behind the priority's own (claimq.fair_level.v, the largest tag
 * handed out there): a tenant that had nothing ready earns no credit, and
 * one seen for the first time starts there.
 *
 * Claims never wait for each other here.  A claim locks the tenants'
 * rows it serves (FOR NO KEY UPDATE SKIP LOCKED) and skips a tenant whose
 * row another open claim holds; if the tenants it could lock have too few
 * ready jobs, it takes the rest in the queue's usual order (fairness
 * never makes a claim return fewer jobs).  So the share holds within the
 * contract's bound for claims whose transactions end soon after the
 * claim; a claim inside a long transaction holds its tenants' rows until
 * it ends, and the share may drift meanwhile (documented).
 *
 * A tenant's row lives while it has live jobs at that priority, and a
 * priority's row while a tenant's does: an enqueue makes sure of both and
 * holds them FOR KEY SHARE until it commits (fair_join), so that
 * fair_forget, which removes the rows of tenants with no live job, never
 * removes one that an enqueue is about to need.  Every other way to
 * pending starts from a live job, except retry_dead, which joins too.
 * Claims only lock and update rows that exist (FOR NO KEY UPDATE, which an
 * enqueue's KEY SHARE does not block), so that they never wait for an
 * enqueue, nor for another claim.
 */

CREATE TABLE claimq.group_weight (
	queue_id		integer NOT NULL
		CONSTRAINT group_weight_queue_fkey REFERENCES claimq.queue ON DELETE CASCADE,
	group_key		text,			-- NULL: the jobs without a group key
	weight			real NOT NULL,
	CONSTRAINT group_weight_key UNIQUE NULLS NOT DISTINCT (queue_id, group_key),
	CONSTRAINT group_weight_check
		CHECK (weight OPERATOR(pg_catalog.>=) 0.01::real
			   AND weight OPERATOR(pg_catalog.<=) 10000::real)
);

CREATE TABLE claimq.fair_share (
	queue_id		integer NOT NULL
		CONSTRAINT fair_share_queue_fkey REFERENCES claimq.queue ON DELETE CASCADE,
	priority		integer NOT NULL,
	group_key		text,			-- NULL: the jobs without a group key
	vt				double precision,	-- NULL: not served yet
	CONSTRAINT fair_share_key UNIQUE NULLS NOT DISTINCT (queue_id, priority, group_key)
);

/* A priority's tenants in order of virtual time, the unserved first. */
CREATE INDEX fair_share_vt_idx ON claimq.fair_share
	(queue_id, priority, vt NULLS FIRST);

CREATE TABLE claimq.fair_level (
	queue_id		integer NOT NULL
		CONSTRAINT fair_level_queue_fkey REFERENCES claimq.queue ON DELETE CASCADE,
	priority		integer NOT NULL,
	v				double precision NOT NULL,
	CONSTRAINT fair_level_pkey PRIMARY KEY (queue_id, priority)
);

-- @extension
SELECT pg_catalog.pg_extension_config_dump('claimq.group_weight', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.fair_share', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.fair_level', '');
-- @end

/*
 * check_fair(fair): a queue may be fair only on one server: a distributed
 * install (the queue column that distribute() adds to claimq.job) keeps
 * no shares.
 */
CREATE FUNCTION claimq.check_fair(fair boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF fair AND EXISTS (
		SELECT FROM pg_catalog.pg_attribute a
		 WHERE a.attrelid OPERATOR(pg_catalog.=) 'claimq.job'::pg_catalog.regclass
		   AND a.attname OPERATOR(pg_catalog.=) 'queue' AND NOT a.attisdropped) THEN
		RAISE EXCEPTION 'fair queues are not supported on a distributed install'
			USING ERRCODE = '0A000';
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.check_fair(boolean) IS
'private: refuse a fair queue on a distributed install (0A000)';

/*
 * fair_join(queue_id, priority, group_keys): the enqueue of jobs of these
 * tenants at this priority into a fair queue.  Each tenant's row exists
 * and is held FOR KEY SHARE until the caller's transaction ends (which
 * neither claims nor other enqueues wait for).
 */
CREATE FUNCTION claimq.fair_join(queue_id integer, priority integer,
	group_keys text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	wanted integer;
	held integer;
	held_keys text[];
	added integer;
BEGIN
	SELECT pg_catalog.count(DISTINCT k) OPERATOR(pg_catalog.+)
		   (pg_catalog.bool_or(k IS NULL))::integer
	  INTO wanted
	  FROM pg_catalog.unnest(fair_join.group_keys) k;
	/* The priority's row first, then the tenants', each as below. */
	LOOP
		PERFORM FROM claimq.fair_level l
		 WHERE l.queue_id OPERATOR(pg_catalog.=) fair_join.queue_id
		   AND l.priority OPERATOR(pg_catalog.=) fair_join.priority
		   FOR KEY SHARE OF l;
		EXIT WHEN FOUND;
		INSERT INTO claimq.fair_level (queue_id, priority, v)
		VALUES (fair_join.queue_id, fair_join.priority, 0)
		ON CONFLICT DO NOTHING;
		EXIT WHEN FOUND;
	END LOOP;
	LOOP
		held_keys := ARRAY(
			SELECT s.group_key FROM claimq.fair_share s
			 WHERE s.queue_id OPERATOR(pg_catalog.=) fair_join.queue_id
			   AND s.priority OPERATOR(pg_catalog.=) fair_join.priority
			   AND (s.group_key OPERATOR(pg_catalog.=) ANY (fair_join.group_keys)
					OR (s.group_key IS NULL
						AND pg_catalog.array_position(fair_join.group_keys, NULL) IS NOT NULL))
			   FOR KEY SHARE OF s);
		held := pg_catalog.cardinality(held_keys);
		EXIT WHEN held OPERATOR(pg_catalog.=) wanted;
		/*
		 * Only the missing ones, in key order: a row another transaction
		 * changes (a claim's vt) must not make this one wait on its
		 * unique index, and producers adding the same new tenants take
		 * them in one order.
		 */
		INSERT INTO claimq.fair_share (queue_id, priority, group_key)
		SELECT fair_join.queue_id, fair_join.priority, m.k
		  FROM (SELECT DISTINCT k FROM pg_catalog.unnest(fair_join.group_keys) k
				 WHERE pg_catalog.array_position(held_keys, k) IS NULL) m
		 ORDER BY m.k COLLATE "C" NULLS FIRST
		ON CONFLICT DO NOTHING;
		GET DIAGNOSTICS added = ROW_COUNT;
		/* A row another transaction added meanwhile is locked next time. */
		EXIT WHEN held OPERATOR(pg_catalog.+) added OPERATOR(pg_catalog.=) wanted;
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.fair_join(integer,integer,text[]) IS
'private: make sure of the rows of a fair queue''s tenants at a priority and hold them until the transaction ends';

/*
 * fair_forget(max_rows) returns integer: removes the rows of tenants with
 * no live job at that priority any more, and of priorities with no
 * tenant left, up to max_rows of each; how many tenants' rows it removed.
 * It locks the rows first (skipping any that an enqueue or a claim
 * holds), then judges them in a statement of its own: its snapshot sees
 * every enqueue that held a row before.
 */
CREATE FUNCTION claimq.fair_forget(max_rows integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	rows tid[];
	gone integer;
BEGIN
	/*
	 * Its judging statement needs a snapshot of its own, taken after its
	 * locks: under REPEATABLE READ it would judge by the transaction's.
	 */
	IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		RETURN 0;
	END IF;
	rows := ARRAY(
		SELECT s.ctid FROM claimq.fair_share s
		 WHERE NOT EXISTS (
			SELECT FROM claimq.job j
			 WHERE j.queue_id OPERATOR(pg_catalog.=) s.queue_id
			   AND j.priority OPERATOR(pg_catalog.=) s.priority
			   AND j.group_key IS NOT DISTINCT FROM s.group_key
			   AND j.state OPERATOR(pg_catalog.=) ANY
				   ('{waiting,pending,claimed,running}'::text[]))
		 LIMIT fair_forget.max_rows
		   FOR UPDATE OF s SKIP LOCKED);
	DELETE FROM claimq.fair_share s
	 WHERE s.ctid OPERATOR(pg_catalog.=) ANY (rows)
	   AND NOT EXISTS (
		SELECT FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) s.queue_id
		   AND j.priority OPERATOR(pg_catalog.=) s.priority
		   AND j.group_key IS NOT DISTINCT FROM s.group_key
		   AND j.state OPERATOR(pg_catalog.=) ANY
			   ('{waiting,pending,claimed,running}'::text[]));
	GET DIAGNOSTICS gone = ROW_COUNT;
	rows := ARRAY(
		SELECT x.ctid FROM claimq.fair_level x
		 WHERE NOT EXISTS (
			SELECT FROM claimq.fair_share s
			 WHERE s.queue_id OPERATOR(pg_catalog.=) x.queue_id
			   AND s.priority OPERATOR(pg_catalog.=) x.priority)
		 LIMIT fair_forget.max_rows
		   FOR UPDATE OF x SKIP LOCKED);
	DELETE FROM claimq.fair_level l
	 WHERE l.ctid OPERATOR(pg_catalog.=) ANY (rows)
	   AND NOT EXISTS (
		SELECT FROM claimq.fair_share s
		 WHERE s.queue_id OPERATOR(pg_catalog.=) l.queue_id
		   AND s.priority OPERATOR(pg_catalog.=) l.priority);
	RETURN gone;
END
$$;

COMMENT ON FUNCTION claimq.fair_forget(integer) IS
'private: forget the shares of tenants with no live job';

/*
 * claim_fair(queue_id, max_jobs, now, lease, worker, start, token_base):
 * the claim of a fair queue, for both editions' claim (which checked the
 * arguments and applied the queue-wide limits to max_jobs).  Returns the
 * jobs claimed, as claim's statement does, with each job's run_at.
 */
CREATE FUNCTION claimq.claim_fair(queue_id integer, max_jobs integer,
	now timestamptz, lease interval, worker text, start boolean,
	token_base bigint)
RETURNS TABLE (job_id bigint, token bigint, payload jsonb, attempts integer,
			   priority integer, enqueued_at timestamptz,
			   expires_at timestamptz, run_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	qid integer := claim_fair.queue_id;
	remaining integer := claim_fair.max_jobs;
	p integer;
	above integer;
	v double precision;
	keys text[];
	starts double precision[];
	weights double precision[];
	quotas integer[];
	taken integer[];
	picked tid[];
	owner integer[];
	nokey integer;
	tenant tid[];
	chunk integer;
	got integer;
	top double precision;
	bound double precision;
BEGIN
	LOOP
		EXIT WHEN remaining OPERATOR(pg_catalog.<=) 0;
		/* The next priority below "above" with pending jobs, highest first. */
		SELECT j.priority INTO p FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) qid
		   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
		   AND (above IS NULL OR j.priority OPERATOR(pg_catalog.<) above)
		 ORDER BY j.priority DESC LIMIT 1;
		EXIT WHEN NOT FOUND;
		above := p;
		CONTINUE WHEN NOT EXISTS (
			SELECT FROM claimq.job j
			 WHERE j.queue_id OPERATOR(pg_catalog.=) qid
			   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
			   AND j.priority OPERATOR(pg_catalog.=) p
			   AND j.run_at OPERATOR(pg_catalog.<=) claim_fair.now);

		SELECT l.v INTO v FROM claimq.fair_level l
		 WHERE l.queue_id OPERATOR(pg_catalog.=) qid
		   AND l.priority OPERATOR(pg_catalog.=) p;
		v := COALESCE(v, 0);
		top := v;

		/* Rounds at this priority while its tenants have jobs to give. */
		LOOP
			EXIT WHEN remaining OPERATOR(pg_catalog.<=) 0;
			chunk := LEAST(remaining, 100);
			/*
			 * The tenants with a ready job here, fewest virtual time first,
			 * whose rows no other claim holds: at most chunk of them.
			 */
			SELECT pg_catalog.array_agg(c.group_key ORDER BY c.vt NULLS FIRST, c.group_key NULLS FIRST),
				   pg_catalog.array_agg(GREATEST(c.vt, v) ORDER BY c.vt NULLS FIRST, c.group_key NULLS FIRST),
				   pg_catalog.array_agg(c.weight ORDER BY c.vt NULLS FIRST, c.group_key NULLS FIRST),
				   pg_catalog.array_agg(c.ctid ORDER BY c.vt NULLS FIRST, c.group_key NULLS FIRST)
			  INTO keys, starts, weights, tenant
			  FROM (SELECT s.group_key, s.vt, s.ctid,
						   COALESCE((SELECT w.weight FROM claimq.group_weight w
									  WHERE w.queue_id OPERATOR(pg_catalog.=) qid
										AND w.group_key IS NOT DISTINCT FROM s.group_key),
									1)::double precision AS weight
					  FROM claimq.fair_share s
					 WHERE s.queue_id OPERATOR(pg_catalog.=) qid
					   AND s.priority OPERATOR(pg_catalog.=) p
					   AND CASE WHEN s.group_key IS NULL THEN EXISTS (
							SELECT FROM claimq.job j
							 WHERE j.queue_id OPERATOR(pg_catalog.=) qid
							   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
							   AND j.priority OPERATOR(pg_catalog.=) p
							   AND j.run_at OPERATOR(pg_catalog.<=) claim_fair.now
							   AND j.group_key IS NULL)
						   ELSE EXISTS (
							SELECT FROM claimq.job j
							 WHERE j.queue_id OPERATOR(pg_catalog.=) qid
							   AND j.group_key OPERATOR(pg_catalog.=) s.group_key
							   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
							   AND j.priority OPERATOR(pg_catalog.=) p
							   AND j.run_at OPERATOR(pg_catalog.<=) claim_fair.now)
						   END
					 ORDER BY s.vt NULLS FIRST
					 LIMIT chunk
					   FOR NO KEY UPDATE OF s SKIP LOCKED) c;
			EXIT WHEN keys IS NULL;

			/*
			 * Each tenant's quota: its share of the chunk smallest tags,
			 * its k-th next job (from 0) tagged start + k / weight.  No tag
			 * beyond the latest start plus chunk / (the weights' sum) is
			 * needed (every tenant has at least its share of the chunk
			 * below it), so each tenant offers only its tags up to there.
			 */
			SELECT pg_catalog.max(c.s) OPERATOR(pg_catalog.+)
				   (chunk OPERATOR(pg_catalog./) pg_catalog.sum(c.w))
			  INTO bound
			  FROM ROWS FROM (pg_catalog.unnest(starts), pg_catalog.unnest(weights)) c(s, w);
			SELECT pg_catalog.array_agg(COALESCE(q.quota, 0) ORDER BY t.i)
			  INTO quotas
			  FROM pg_catalog.generate_series(1, pg_catalog.cardinality(keys)) t(i)
			  LEFT JOIN (
				SELECT x.i, pg_catalog.count(*)::integer AS quota
				  FROM (SELECT c.i
						  FROM ROWS FROM (pg_catalog.unnest(starts), pg_catalog.unnest(weights)) WITH ORDINALITY c(s, w, i)
						 CROSS JOIN pg_catalog.generate_series(0, LEAST((chunk OPERATOR(pg_catalog.-) 1)::double precision,
							pg_catalog.floor((bound OPERATOR(pg_catalog.-) c.s) OPERATOR(pg_catalog.*) c.w))::integer) k
						 ORDER BY c.s OPERATOR(pg_catalog.+) (k OPERATOR(pg_catalog./) c.w), c.i
						 LIMIT chunk) x
				 GROUP BY x.i) q ON q.i OPERATOR(pg_catalog.=) t.i;

			/* Each tenant's first jobs, as many as its quota. */
			SELECT pg_catalog.array_agg(x.ctid), pg_catalog.array_agg(x.i)
			  INTO picked, owner
			  FROM (
				SELECT j.ctid, c.i
				  FROM ROWS FROM (pg_catalog.unnest(keys), pg_catalog.unnest(quotas)) WITH ORDINALITY c(k, q, i)
				 CROSS JOIN LATERAL (
					SELECT j.ctid FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) qid
					   AND j.group_key OPERATOR(pg_catalog.=) c.k
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
					   AND j.priority OPERATOR(pg_catalog.=) p
					   AND j.run_at OPERATOR(pg_catalog.<=) claim_fair.now
					 ORDER BY j.run_at, j.job_id
					 LIMIT c.q
					   FOR UPDATE OF j SKIP LOCKED) j
				 WHERE c.q OPERATOR(pg_catalog.>) 0 AND c.k IS NOT NULL) x;
			picked := COALESCE(picked, '{}');
			owner := COALESCE(owner, '{}');
			nokey := pg_catalog.array_position(keys, NULL);
			IF nokey IS NOT NULL AND quotas[nokey] OPERATOR(pg_catalog.>) 0 THEN
				picked := picked OPERATOR(pg_catalog.||) ARRAY(
					SELECT j.ctid FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) qid
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
					   AND j.priority OPERATOR(pg_catalog.=) p
					   AND j.run_at OPERATOR(pg_catalog.<=) claim_fair.now
					   AND j.group_key IS NULL
					 ORDER BY j.run_at, j.job_id
					 LIMIT quotas[nokey]
					   FOR UPDATE OF j SKIP LOCKED);
				owner := owner OPERATOR(pg_catalog.||) pg_catalog.array_fill(nokey,
					ARRAY[pg_catalog.cardinality(picked) OPERATOR(pg_catalog.-)
						  pg_catalog.cardinality(owner)]);
			END IF;

			RETURN QUERY
			WITH upd AS (
			UPDATE claimq.job j
			   SET state = CASE WHEN claim_fair.start THEN 'running' ELSE 'claimed' END,
				   attempts = j.attempts OPERATOR(pg_catalog.+)
							  CASE WHEN claim_fair.start THEN 1 ELSE 0 END,
				   token = claim_fair.token_base OPERATOR(pg_catalog.+)
						   pg_catalog.nextval('claimq.token_seq'),
				   worker = claim_fair.worker, claimed_at = claim_fair.now,
				   expires_at = claim_fair.now OPERATOR(pg_catalog.+) claim_fair.lease,
				   started_at = CASE WHEN claim_fair.start THEN claim_fair.now END
			 WHERE j.ctid OPERATOR(pg_catalog.=) ANY (picked)
			RETURNING j.job_id, j.token, j.payload, j.attempts, j.priority,
					  j.enqueued_at, j.expires_at, j.run_at)
			SELECT * FROM upd;
			GET DIAGNOSTICS got = ROW_COUNT;

			/*
			 * Each served tenant's virtual time moves past what it got, from
			 * where it started.  Every row picked is claimed: this claim
			 * holds its lock.
			 */
			SELECT pg_catalog.array_agg((SELECT pg_catalog.count(*)::integer
										   FROM pg_catalog.unnest(owner) o
										  WHERE o OPERATOR(pg_catalog.=) t.i)
										ORDER BY t.i)
			  INTO taken
			  FROM pg_catalog.generate_series(1, pg_catalog.cardinality(keys)) t(i);
			UPDATE claimq.fair_share s
			   SET vt = c.s OPERATOR(pg_catalog.+) (c.t OPERATOR(pg_catalog./) c.w)
			  FROM ROWS FROM (pg_catalog.unnest(tenant), pg_catalog.unnest(starts),
							 pg_catalog.unnest(weights), pg_catalog.unnest(taken)) c(r, s, w, t)
			 WHERE s.ctid OPERATOR(pg_catalog.=) c.r AND c.t OPERATOR(pg_catalog.>) 0;
			SELECT GREATEST(top, pg_catalog.max(c.s OPERATOR(pg_catalog.+)
					((c.t OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog./) c.w)))
			  INTO top
			  FROM ROWS FROM (pg_catalog.unnest(starts), pg_catalog.unnest(weights),
							  pg_catalog.unnest(taken)) c(s, w, t)
			 WHERE c.t OPERATOR(pg_catalog.>) 0;
			remaining := remaining OPERATOR(pg_catalog.-) got;
			EXIT WHEN got OPERATOR(pg_catalog.=) 0;
		END LOOP;

		/*
		 * Work-conserving: what the tenants this claim could lock did not
		 * fill is taken in the queue's usual order (their shares are not
		 * moved: the drift of a claim held open).
		 */
		IF remaining OPERATOR(pg_catalog.>) 0 THEN
			RETURN QUERY
			WITH upd AS (
			UPDATE claimq.job j
			   SET state = CASE WHEN claim_fair.start THEN 'running' ELSE 'claimed' END,
				   attempts = j.attempts OPERATOR(pg_catalog.+)
							  CASE WHEN claim_fair.start THEN 1 ELSE 0 END,
				   token = claim_fair.token_base OPERATOR(pg_catalog.+)
						   pg_catalog.nextval('claimq.token_seq'),
				   worker = claim_fair.worker, claimed_at = claim_fair.now,
				   expires_at = claim_fair.now OPERATOR(pg_catalog.+) claim_fair.lease,
				   started_at = CASE WHEN claim_fair.start THEN claim_fair.now END
			 WHERE j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT x.ctid FROM claimq.job x
				 WHERE x.queue_id OPERATOR(pg_catalog.=) qid
				   AND x.state OPERATOR(pg_catalog.=) 'pending' AND NOT x.held
				   AND x.priority OPERATOR(pg_catalog.=) p
				   AND x.run_at OPERATOR(pg_catalog.<=) claim_fair.now
				 ORDER BY x.run_at, x.job_id
				 LIMIT remaining
				   FOR UPDATE OF x SKIP LOCKED))
			RETURNING j.job_id, j.token, j.payload, j.attempts, j.priority,
					  j.enqueued_at, j.expires_at, j.run_at)
			SELECT * FROM upd;
			GET DIAGNOSTICS got = ROW_COUNT;
			remaining := remaining OPERATOR(pg_catalog.-) got;
		END IF;

		/*
		 * The priority's virtual time: the largest tag handed out, kept
		 * by whichever claim holds its row (another claim that holds it
		 * keeps its own).
		 */
		IF top OPERATOR(pg_catalog.>) v THEN
			UPDATE claimq.fair_level l SET v = GREATEST(l.v, top)
			 WHERE l.ctid OPERATOR(pg_catalog.=) (
				SELECT x.ctid FROM claimq.fair_level x
				 WHERE x.queue_id OPERATOR(pg_catalog.=) qid
				   AND x.priority OPERATOR(pg_catalog.=) p
				   FOR NO KEY UPDATE OF x SKIP LOCKED);
		END IF;
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.claim_fair(integer,integer,timestamp with time zone,interval,text,boolean,bigint) IS
'private: the claim of a fair queue, its batch shared between its tenants by weight';

/*
 * set_group_weight(queue, group_key, weight): a tenant's weight in its
 * fair queue; NULL resets it to 1.  Kept while the queue exists.
 */
CREATE FUNCTION claimq.set_group_weight(queue text, group_key text, weight real)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	qid integer;
BEGIN
	PERFORM claimq.check_queue_name(queue);
	IF weight IS NOT NULL
	   AND NOT (weight OPERATOR(pg_catalog.>=) 0.01::real
				AND weight OPERATOR(pg_catalog.<=) 10000::real) THEN
		RAISE EXCEPTION 'weight must be between 0.01 and 10000'
			USING ERRCODE = '22023';
	END IF;
	SELECT q.queue_id INTO qid FROM claimq.queue q
	 WHERE q.name OPERATOR(pg_catalog.=) set_group_weight.queue
	   FOR KEY SHARE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" does not exist', queue
			USING ERRCODE = '42704';
	END IF;
	IF weight IS NULL THEN
		DELETE FROM claimq.group_weight w
		 WHERE w.queue_id OPERATOR(pg_catalog.=) qid
		   AND w.group_key IS NOT DISTINCT FROM set_group_weight.group_key;
	ELSE
		INSERT INTO claimq.group_weight AS w (queue_id, group_key, weight)
		VALUES (qid, set_group_weight.group_key, set_group_weight.weight)
		ON CONFLICT ON CONSTRAINT group_weight_key
		DO UPDATE SET weight = excluded.weight;
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.set_group_weight(text,text,real) IS
'set a tenant''s weight in a fair queue (0.01 to 10000; NULL resets it to 1; a NULL group_key names the jobs without one)';
