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
 * behind the priority's own (claimq.fair_level.v, the least start of the
 * tenants that claims there found backlogged): a tenant that had nothing
 * ready earns no credit, and one seen for the first time starts there.
 *
 * In the C edition with the preload, shared memory keeps these times for
 * a queue whose jobs are all at priority 0 (src/fair.c) and its claims
 * neither read nor write these tables' times (they are read when shared
 * memory loads a queue's tenants, after a start for one).  What follows
 * is the share kept in the tables: the portable edition's, a server's
 * without the preload, and a queue's with priorities or whose tenants do
 * not fit in shared memory.
 *
 * Claims never wait for each other here, and never skip a tenant because
 * another claim is serving it.  A claim reads the virtual times as its
 * snapshot shows them, without locking, and charges what it handed out:
 * into a tenant's row where it can lock it (FOR NO KEY UPDATE SKIP
 * LOCKED), and as a row of claimq.fair_charge where another open claim
 * holds it.  A tenant's virtual time is its row's plus its charges; the
 * next claim that serves or passes the tenant and can lock its row folds
 * them into it.  What a claim charges shows to the others when it
 * commits, so the share drifts only by what the claims open at once hand
 * out (the contract's M x C), however long they stay open.
 *
 * A tenant's row lives while it has live jobs at that priority, and a
 * priority's rows while a tenant's does: an enqueue makes sure of both and
 * holds them FOR KEY SHARE until it commits (fair_join), so that
 * fair_forget, which removes the rows of tenants with no live job, never
 * removes one that an enqueue is about to need.  Every other way to
 * pending starts from a live job, except retry_dead, which joins too.
 * Claims lock and update only rows that exist (FOR NO KEY UPDATE, which an
 * enqueue's KEY SHARE does not block, and SKIP LOCKED), and add rows only
 * to tables with neither a unique key nor a foreign key (charges, a
 * priority's time), so that they never wait for an enqueue, nor for
 * another claim.
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
	handed			bigint NOT NULL DEFAULT 0,	-- jobs claimed, charges folded in
	CONSTRAINT fair_share_key UNIQUE NULLS NOT DISTINCT (queue_id, priority, group_key)
);

/* A priority's tenants in order of virtual time, the unserved first. */
CREATE INDEX fair_share_vt_idx ON claimq.fair_share
	(queue_id, priority, (COALESCE(vt, '-Infinity'::double precision)));

/*
 * A priority's virtual time is the largest v of its rows: a claim moves it
 * on in a row it can lock, or in a row of its own where other open claims
 * hold them all (fair_forget removes the rows behind, and those of a
 * dropped queue's priorities).  No foreign key: a claim's new row must not
 * wait for a transaction that changes the queue's row.
 */
CREATE TABLE claimq.fair_level (
	queue_id		integer NOT NULL,
	priority		integer NOT NULL,
	v				double precision NOT NULL
);

CREATE INDEX fair_level_v_idx ON claimq.fair_level (queue_id, priority, v);

/*
 * What claims handed out to a tenant whose row another open claim held:
 * added to the row's virtual time by the next claim that locks it.
 */
CREATE TABLE claimq.fair_charge (
	queue_id		integer NOT NULL,
	priority		integer NOT NULL,
	group_key		text,			-- NULL: the jobs without a group key
	jobs			integer NOT NULL,
	amount			double precision NOT NULL	-- jobs / weight
);

CREATE INDEX fair_charge_key_idx ON claimq.fair_charge (queue_id, priority, group_key);

/*
 * With the preload, the C edition keeps the shares in shared memory
 * (src/fair.c) and these tables hold them as the last claims without it
 * left them.  fair_changed(), the statement trigger of
 * claimq.group_weight, has the claims read the tenants' weights again
 * once the transaction commits; fair_handed() is what shared memory holds
 * of each tenant's jobs handed out, which metrics() adds to the tables'.
 */
CREATE FUNCTION claimq.fair_changed()
RETURNS trigger
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fair_changed';

COMMENT ON FUNCTION claimq.fair_changed() IS
'private: the trigger of claimq.group_weight that has fair queues'' claims read their tenants'' weights again';

-- @c
CREATE TRIGGER group_weight_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON claimq.group_weight
	FOR EACH STATEMENT EXECUTE FUNCTION claimq.fair_changed();

ALTER TABLE claimq.group_weight ENABLE ALWAYS TRIGGER group_weight_changed;
-- @end

CREATE FUNCTION claimq.fair_handed(OUT queue_id integer, OUT priority integer,
								   OUT group_key text, OUT handed bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fair_handed';

COMMENT ON FUNCTION claimq.fair_handed() IS
'private: the jobs handed to each tenant of this database''s fair queues that shared memory holds';

-- @extension
SELECT pg_catalog.pg_extension_config_dump('claimq.group_weight', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.fair_share', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.fair_level', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.fair_charge', '');
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
 * fair_joined(queue_id, priority, group_keys): the C edition with the
 * preload adds these tenants to the queue's set in shared memory
 * (src/fair.c); elsewhere it does nothing.
 */
CREATE FUNCTION claimq.fair_joined(queue_id integer, priority integer,
								   group_keys text[])
RETURNS void
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fair_joined';

COMMENT ON FUNCTION claimq.fair_joined(integer,integer,text[]) IS
'private: add a fair queue''s tenants to the shares kept in shared memory';

/*
 * fair_join(queue_id, priority, group_keys): the enqueue of jobs of these
 * tenants at this priority into a fair queue.  Each tenant's row exists
 * and is held FOR KEY SHARE until the caller's transaction ends (which
 * neither claims nor other enqueues wait for), and is in the shares kept
 * in shared memory (fair_joined).
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
	/*
	 * The priority's rows first (one of its own if it has none: they have
	 * no unique key, so nothing to wait for), then the tenants'.
	 */
	PERFORM FROM claimq.fair_level l
	 WHERE l.queue_id OPERATOR(pg_catalog.=) fair_join.queue_id
	   AND l.priority OPERATOR(pg_catalog.=) fair_join.priority
	   FOR KEY SHARE OF l;
	IF NOT FOUND THEN
		INSERT INTO claimq.fair_level (queue_id, priority, v)
		VALUES (fair_join.queue_id, fair_join.priority, 0);
	END IF;
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
	PERFORM claimq.fair_joined(fair_join.queue_id, fair_join.priority,
							   fair_join.group_keys);
END
$$;

COMMENT ON FUNCTION claimq.fair_join(integer,integer,text[]) IS
'private: make sure of the rows of a fair queue''s tenants at a priority and hold them until the transaction ends';

/*
 * fair_forget(max_rows) returns integer: removes the rows of tenants with
 * no live job at that priority any more, their charges, the rows of
 * priorities with no tenant left and a priority's rows behind its
 * largest, up to max_rows of each; how many tenants' rows it removed.
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
	/* Charges left on tenants forgotten (folded or not, they are moot). */
	DELETE FROM claimq.fair_charge d
	 WHERE d.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
		SELECT x.ctid FROM claimq.fair_charge x
		 WHERE NOT EXISTS (
			SELECT FROM claimq.fair_share s
			 WHERE s.queue_id OPERATOR(pg_catalog.=) x.queue_id
			   AND s.priority OPERATOR(pg_catalog.=) x.priority
			   AND s.group_key IS NOT DISTINCT FROM x.group_key)
		 LIMIT fair_forget.max_rows));
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
	/* A priority's rows behind its largest. */
	DELETE FROM claimq.fair_level l
	 WHERE l.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
		SELECT x.ctid FROM claimq.fair_level x
		 WHERE x.v OPERATOR(pg_catalog.<) (
			SELECT pg_catalog.max(y.v) FROM claimq.fair_level y
			 WHERE y.queue_id OPERATOR(pg_catalog.=) x.queue_id
			   AND y.priority OPERATOR(pg_catalog.=) x.priority)
		 LIMIT fair_forget.max_rows
		   FOR UPDATE OF x SKIP LOCKED));
	RETURN gone;
END
$$;

COMMENT ON FUNCTION claimq.fair_forget(integer) IS
'private: forget the shares of tenants with no live job';

/*
 * charge_fair(queue_id, priority, v, keys, weights, taken, stale): a claim
 * at this priority, whose virtual time was v, handed taken[i] jobs to the
 * tenant keys[i] of weight weights[i], and saw charges on the tenants
 * stale.  Each of their rows that no other open claim holds is locked
 * until the transaction ends and moves past what it got, with the charges
 * others left on it folded in; the others get a charge of their own.
 * Never waits.
 */
CREATE FUNCTION claimq.charge_fair(queue_id integer, priority integer,
	v double precision, keys text[], weights double precision[],
	taken integer[], stale text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	mine tid[];
	mine_keys text[];
	keyless tid;
	served text[];
BEGIN
	served := ARRAY(SELECT c.k FROM ROWS FROM (pg_catalog.unnest(keys), pg_catalog.unnest(taken)) c(k, t)
					 WHERE c.t OPERATOR(pg_catalog.>) 0
					 UNION
					SELECT k FROM pg_catalog.unnest(stale) k);
	IF pg_catalog.cardinality(served) OPERATOR(pg_catalog.=) 0 THEN
		RETURN;
	END IF;
	/* Through the key's index: the keyed tenants, then the keyless one. */
	SELECT pg_catalog.array_agg(x.ctid), pg_catalog.array_agg(x.group_key)
	  INTO mine, mine_keys
	  FROM (SELECT s.ctid, s.group_key FROM claimq.fair_share s
			 WHERE s.queue_id OPERATOR(pg_catalog.=) charge_fair.queue_id
			   AND s.priority OPERATOR(pg_catalog.=) charge_fair.priority
			   AND s.group_key OPERATOR(pg_catalog.=) ANY (served)
			   FOR NO KEY UPDATE OF s SKIP LOCKED) x;
	IF pg_catalog.array_position(served, NULL) IS NOT NULL THEN
		SELECT x.ctid INTO keyless
		  FROM (SELECT s.ctid FROM claimq.fair_share s
				 WHERE s.queue_id OPERATOR(pg_catalog.=) charge_fair.queue_id
				   AND s.priority OPERATOR(pg_catalog.=) charge_fair.priority
				   AND s.group_key IS NULL
				   FOR NO KEY UPDATE OF s SKIP LOCKED) x;
		IF keyless IS NOT NULL THEN
			mine := COALESCE(mine, '{}') OPERATOR(pg_catalog.||) keyless;
			mine_keys := COALESCE(mine_keys, '{}') OPERATOR(pg_catalog.||) NULL::text;
		END IF;
	END IF;
	WITH folded AS (
		DELETE FROM claimq.fair_charge d
		 WHERE d.queue_id OPERATOR(pg_catalog.=) charge_fair.queue_id
		   AND d.priority OPERATOR(pg_catalog.=) charge_fair.priority
		   AND (d.group_key OPERATOR(pg_catalog.=) ANY (mine_keys)
				OR (d.group_key IS NULL AND keyless IS NOT NULL))
		RETURNING d.group_key AS k, d.jobs, d.amount)
	UPDATE claimq.fair_share s
	   SET vt = GREATEST(COALESCE(s.vt, charge_fair.v) OPERATOR(pg_catalog.+) COALESCE(f.amount, 0),
						 charge_fair.v)
				OPERATOR(pg_catalog.+) COALESCE(c.t OPERATOR(pg_catalog./) c.w, 0),
		   handed = s.handed OPERATOR(pg_catalog.+) COALESCE(c.t, 0) OPERATOR(pg_catalog.+) COALESCE(f.jobs, 0)
	  FROM ROWS FROM (pg_catalog.unnest(mine), pg_catalog.unnest(mine_keys)) m(r, k)
	  LEFT JOIN (SELECT x.k, pg_catalog.sum(x.amount) AS amount, pg_catalog.sum(x.jobs) AS jobs
				   FROM folded x GROUP BY x.k) f ON f.k IS NOT DISTINCT FROM m.k
	  LEFT JOIN ROWS FROM (pg_catalog.unnest(keys), pg_catalog.unnest(weights), pg_catalog.unnest(taken)) c(k, w, t)
		ON c.k IS NOT DISTINCT FROM m.k AND c.t OPERATOR(pg_catalog.>) 0
	 WHERE s.ctid OPERATOR(pg_catalog.=) m.r;
	INSERT INTO claimq.fair_charge (queue_id, priority, group_key, jobs, amount)
	SELECT charge_fair.queue_id, charge_fair.priority, c.k, c.t, c.t OPERATOR(pg_catalog./) c.w
	  FROM ROWS FROM (pg_catalog.unnest(keys), pg_catalog.unnest(weights), pg_catalog.unnest(taken)) c(k, w, t)
	 WHERE c.t OPERATOR(pg_catalog.>) 0
	   AND pg_catalog.array_position(mine_keys, c.k) IS NULL;
END
$$;

COMMENT ON FUNCTION claimq.charge_fair(integer,integer,double precision,text[],double precision[],integer[],text[]) IS
'private: charge a fair queue''s tenants for the jobs a claim handed them';

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
			   expires_at timestamptz, headers jsonb, run_at timestamptz)
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
	chunk integer;
	got integer;
	top double precision;
	bound double precision;
	filling boolean;
	lo double precision;
	hi double precision;
	reached double precision;
	more_keys text[];
	more_stale text[];
	stale text[] := '{}';
	rounds integer;
	more_starts double precision[];
	more_weights double precision[];
	fetched bigint;
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
		/* Its first job by run_at (in the claim's index order) is ready. */
		CONTINUE WHEN (SELECT j.run_at FROM claimq.job j
						WHERE j.queue_id OPERATOR(pg_catalog.=) qid
						  AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
						  AND j.priority OPERATOR(pg_catalog.=) p
						ORDER BY j.run_at LIMIT 1) OPERATOR(pg_catalog.>) claim_fair.now;

		SELECT pg_catalog.max(l.v) INTO v FROM claimq.fair_level l
		 WHERE l.queue_id OPERATOR(pg_catalog.=) qid
		   AND l.priority OPERATOR(pg_catalog.=) p;
		v := COALESCE(v, 0);
		top := v;

		/*
		 * Rounds at this priority while its tenants have jobs to give,
		 * then, work-conserving, one in the queue's usual order for what
		 * their first jobs did not fill (other claims took them meanwhile):
		 * every round's jobs are charged to their tenants.
		 */
		filling := false;
		LOOP
			EXIT WHEN remaining OPERATOR(pg_catalog.<=) 0;
			chunk := LEAST(remaining, 100);
			IF NOT filling THEN
				/*
				 * The chunk tenants with a ready job here of least virtual
				 * time as committed (their rows' and their charges'), whether
				 * or not another claim is serving them.  Their rows come in
				 * order of the rows' own times (the unserved first), which
				 * charges only add to: the first chunk of them, then those
				 * whose row's time is below the chunk-th least time seen
				 * (while that is above the priority's time, below which no
				 * tenant starts), until there is none, in four rounds at
				 * most.  The claim folds the charges it saw into the rows it
				 * can lock (charge_fair), so that few stay behind.
				 */
				keys := '{}';
				starts := '{}';
				weights := '{}';
				stale := '{}';
				rounds := 0;
				lo := '-Infinity';
				hi := 'Infinity';
				LOOP
					SELECT pg_catalog.array_agg(c.group_key),
						   pg_catalog.array_agg(GREATEST(COALESCE(c.vt, v) OPERATOR(pg_catalog.+)
														 COALESCE(c.charged, 0), v)),
						   pg_catalog.array_agg(c.w), pg_catalog.count(*), pg_catalog.max(c.r),
						   pg_catalog.array_agg(c.group_key) FILTER (WHERE c.charged IS NOT NULL)
					  INTO more_keys, more_starts, more_weights, fetched, reached, more_stale
					  FROM (SELECT s.group_key, s.vt, COALESCE(s.vt, '-Infinity'::double precision) AS r,
								   CASE WHEN s.group_key IS NULL THEN (
										SELECT pg_catalog.sum(d.amount) FROM claimq.fair_charge d
										 WHERE d.queue_id OPERATOR(pg_catalog.=) qid
										   AND d.priority OPERATOR(pg_catalog.=) p
										   AND d.group_key IS NULL)
									   ELSE (
										SELECT pg_catalog.sum(d.amount) FROM claimq.fair_charge d
										 WHERE d.queue_id OPERATOR(pg_catalog.=) qid
										   AND d.priority OPERATOR(pg_catalog.=) p
										   AND d.group_key OPERATOR(pg_catalog.=) s.group_key)
									   END AS charged,
								   COALESCE(CASE WHEN s.group_key IS NULL THEN (
												SELECT w.weight FROM claimq.group_weight w
												 WHERE w.queue_id OPERATOR(pg_catalog.=) qid
												   AND w.group_key IS NULL)
											 ELSE (
												SELECT w.weight FROM claimq.group_weight w
												 WHERE w.queue_id OPERATOR(pg_catalog.=) qid
												   AND w.group_key OPERATOR(pg_catalog.=) s.group_key)
											 END, 1)::double precision AS w
							  FROM claimq.fair_share s
							 WHERE s.queue_id OPERATOR(pg_catalog.=) qid
							   AND s.priority OPERATOR(pg_catalog.=) p
							   AND COALESCE(s.vt, '-Infinity'::double precision) OPERATOR(pg_catalog.>=) lo
							   AND COALESCE(s.vt, '-Infinity'::double precision) OPERATOR(pg_catalog.<) hi
							   AND pg_catalog.array_position(keys, s.group_key) IS NULL
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
							 ORDER BY COALESCE(s.vt, '-Infinity'::double precision)
							 LIMIT chunk) c;
					EXIT WHEN fetched OPERATOR(pg_catalog.=) 0;
					keys := keys OPERATOR(pg_catalog.||) more_keys;
					starts := starts OPERATOR(pg_catalog.||) more_starts;
					weights := weights OPERATOR(pg_catalog.||) more_weights;
					stale := stale OPERATOR(pg_catalog.||) COALESCE(more_stale, '{}');
					rounds := rounds OPERATOR(pg_catalog.+) 1;
					EXIT WHEN fetched OPERATOR(pg_catalog.<) chunk OR rounds OPERATOR(pg_catalog.=) 4;
					lo := reached;
					hi := (SELECT x FROM pg_catalog.unnest(starts) x
							ORDER BY x OFFSET chunk OPERATOR(pg_catalog.-) 1 LIMIT 1);
					/* No tenant starts below the priority's own time. */
					EXIT WHEN GREATEST(lo, v) OPERATOR(pg_catalog.>=) hi;
				END LOOP;
				IF pg_catalog.cardinality(keys) OPERATOR(pg_catalog.=) 0 THEN
					keys := NULL;
				ELSE
					SELECT pg_catalog.array_agg(c.k ORDER BY c.s, c.k NULLS FIRST),
						   pg_catalog.array_agg(c.s ORDER BY c.s, c.k NULLS FIRST),
						   pg_catalog.array_agg(c.w ORDER BY c.s, c.k NULLS FIRST)
					  INTO keys, starts, weights
					  FROM (SELECT c.k, c.s, c.w
							  FROM ROWS FROM (pg_catalog.unnest(keys), pg_catalog.unnest(starts),
											  pg_catalog.unnest(weights)) c(k, s, w)
							 ORDER BY c.s, c.k NULLS FIRST
							 LIMIT chunk) c;
				END IF;
				filling := keys IS NULL;
			END IF;
			IF NOT filling THEN
				/* The least start of the tenants backlogged here. */
				top := GREATEST(top, starts[1]);
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

				SELECT pg_catalog.array_agg((SELECT pg_catalog.count(*)::integer
											   FROM pg_catalog.unnest(owner) o
											  WHERE o OPERATOR(pg_catalog.=) t.i)
											ORDER BY t.i)
				  INTO taken
				  FROM pg_catalog.generate_series(1, pg_catalog.cardinality(keys)) t(i);
			ELSE
				SELECT pg_catalog.array_agg(x.ctid), pg_catalog.array_agg(x.group_key)
				  INTO picked, keys
				  FROM (SELECT j.ctid, j.group_key FROM claimq.job j
						 WHERE j.queue_id OPERATOR(pg_catalog.=) qid
						   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
						   AND j.priority OPERATOR(pg_catalog.=) p
						   AND j.run_at OPERATOR(pg_catalog.<=) claim_fair.now
						 ORDER BY j.run_at, j.job_id
						 LIMIT remaining
						   FOR UPDATE OF j SKIP LOCKED) x;
				EXIT WHEN picked IS NULL;
				SELECT pg_catalog.array_agg(c.k ORDER BY c.k NULLS FIRST),
					   pg_catalog.array_agg(COALESCE((SELECT w.weight FROM claimq.group_weight w
													   WHERE w.queue_id OPERATOR(pg_catalog.=) qid
														 AND w.group_key IS NOT DISTINCT FROM c.k),
													 1)::double precision ORDER BY c.k NULLS FIRST),
					   pg_catalog.array_agg(c.n ORDER BY c.k NULLS FIRST)
				  INTO keys, weights, taken
				  FROM (SELECT k, pg_catalog.count(*)::integer AS n
						  FROM pg_catalog.unnest(keys) k GROUP BY k) c;
			END IF;

			/* Every row picked is claimed: this claim holds its lock. */
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
					  j.enqueued_at, j.expires_at, j.headers, j.run_at)
			SELECT * FROM upd;
			GET DIAGNOSTICS got = ROW_COUNT;
			remaining := remaining OPERATOR(pg_catalog.-) got;
			PERFORM claimq.charge_fair(qid, p, v, keys, weights, taken, stale);
			stale := '{}';
			EXIT WHEN filling;
			/* Every tenant backlogged here was seen: where they are now. */
			IF pg_catalog.cardinality(keys) OPERATOR(pg_catalog.<) chunk THEN
				SELECT GREATEST(top, pg_catalog.min(c.s OPERATOR(pg_catalog.+) (c.t OPERATOR(pg_catalog./) c.w)))
				  INTO top
				  FROM ROWS FROM (pg_catalog.unnest(starts), pg_catalog.unnest(weights),
								  pg_catalog.unnest(taken)) c(s, w, t);
			END IF;
			filling := got OPERATOR(pg_catalog.=) 0;
		END LOOP;

		/*
		 * The priority's virtual time: the least start of its backlogged
		 * tenants (after this claim where it saw them all), in a row this
		 * claim can lock or a new one.
		 */
		IF top OPERATOR(pg_catalog.>) v THEN
			UPDATE claimq.fair_level l SET v = GREATEST(l.v, top)
			 WHERE l.ctid OPERATOR(pg_catalog.=) (
				SELECT x.ctid FROM claimq.fair_level x
				 WHERE x.queue_id OPERATOR(pg_catalog.=) qid
				   AND x.priority OPERATOR(pg_catalog.=) p
				 ORDER BY x.v DESC LIMIT 1
				   FOR NO KEY UPDATE OF x SKIP LOCKED);
			IF NOT FOUND THEN
				INSERT INTO claimq.fair_level (queue_id, priority, v)
				VALUES (qid, p, top);
			END IF;
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
