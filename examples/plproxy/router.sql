/*
 * router.sql: the claimq API on a PL/Proxy router over several claimq shards.
 *
 * Run it as a superuser in the router database (a plain database, not one
 * with claimq installed), after
 *
 *     CREATE EXTENSION plproxy;
 *     CREATE SERVER claimq_shards FOREIGN DATA WRAPPER plproxy OPTIONS (
 *         modular_mapping '1',
 *         p0 'host=... port=... dbname=...',   -- the shard with claimq.node_id = 0
 *         p1 '...',                            -- claimq.node_id = 1
 *         p2 '...');                           -- claimq.node_id = 2
 *     CREATE USER MAPPING FOR PUBLIC SERVER claimq_shards OPTIONS (user '...');
 *
 * Partition pN must be the server whose claimq.node_id is N: a job id
 * carries the node number of the server that issued it (claimq.node_of),
 * and every call about a job is sent to partition node_of(job_id).
 *
 * Two schemas:
 *   claimq_shard  PL/Proxy functions that run one claimq call on one shard
 *                 (first argument: the shard number);
 *   claimq        the API clients call, with the same names, arguments and
 *                 results as on a claimq server.
 */

CREATE SCHEMA claimq_shard;
CREATE SCHEMA claimq;
REVOKE ALL ON SCHEMA claimq_shard FROM PUBLIC;
REVOKE ALL ON SCHEMA claimq FROM PUBLIC;

/* ---------------------------------------------------------------------------
 * Per-shard calls.  Each runs in its own transaction on the shard
 * (PL/Proxy runs remote calls in autocommit mode).
 * ------------------------------------------------------------------------ */

CREATE FUNCTION claimq_shard.node_id(shard integer)
RETURNS integer AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT pg_catalog.current_setting('claimq.node_id')::integer;
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.create_queue(shard integer, queue text, lease interval,
	run_lease interval, max_attempts integer, retry_base interval, retry_max interval,
	keep_done interval, keep_dead interval, notify boolean)
RETURNS void AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT claimq.create_queue($2, $3, $4, $5, $6, $7, $8, $9, $10);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.drop_queue(shard integer, queue text, force boolean)
RETURNS void AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT claimq.drop_queue($2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.pause_queue(shard integer, queue text)
RETURNS void AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT claimq.pause_queue($2);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.resume_queue(shard integer, queue text)
RETURNS void AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT claimq.resume_queue($2);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.purge_queue(shard integer, queue text)
RETURNS bigint AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT claimq.purge_queue($2);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.release_worker(shard integer, queue text, worker text)
RETURNS bigint AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT claimq.release_worker($2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.enqueue_many(shard integer, queue text, payloads jsonb[],
	run_at timestamptz, priority integer, dedup_keys text[])
RETURNS SETOF bigint AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT claimq.enqueue_many($2, $3, $4, $5, $6);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.claim(shard integer, queue text, max_jobs integer,
	lease interval, worker text, start boolean)
RETURNS TABLE(job_id bigint, token bigint, payload jsonb, attempts integer,
			  priority integer, enqueued_at timestamptz, expires_at timestamptz) AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT c.job_id, c.token, c.payload, c.attempts, c.priority, c.enqueued_at, c.expires_at
	  FROM claimq.claim($2, $3, $4, $5, $6, '0') c;
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.start(shard integer, job_ids bigint[], tokens bigint[], lease interval)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz) AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT r.job_id, r.outcome, r.expires_at FROM claimq.start($2, $3, $4) r;
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.extend(shard integer, job_ids bigint[], tokens bigint[], lease interval)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz) AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT r.job_id, r.outcome, r.expires_at FROM claimq.extend($2, $3, $4) r;
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.complete(shard integer, job_ids bigint[], tokens bigint[])
RETURNS TABLE(job_id bigint, outcome text) AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT r.job_id, r.outcome FROM claimq.complete($2, $3) r;
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.release(shard integer, job_ids bigint[], tokens bigint[])
RETURNS TABLE(job_id bigint, outcome text) AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT r.job_id, r.outcome FROM claimq.release($2, $3) r;
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq_shard.fail(shard integer, job_ids bigint[], tokens bigint[],
	error text, retry_in interval, permanent boolean)
RETURNS TABLE(job_id bigint, outcome text, state text, run_at timestamptz) AS $$
	CLUSTER 'claimq_shards';
	RUN ON shard;
	SELECT r.job_id, r.outcome, r.state, r.run_at FROM claimq.fail($2, $3, $4, $5, $6) r;
$$ LANGUAGE plproxy;

/* ---------------------------------------------------------------------------
 * Routing helpers.
 * ------------------------------------------------------------------------ */

-- The number of shards: the pN options of the claimq_shards server.
CREATE FUNCTION claimq_shard.count()
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT count(*)::integer
	  FROM pg_catalog.pg_foreign_server s,
		   LATERAL pg_catalog.pg_options_to_table(s.srvoptions) o
	 WHERE s.srvname = 'claimq_shards' AND o.option_name ~ '^p[0-9]+$'
$$;

-- The shard that issued a job: the node number in its id.
CREATE FUNCTION claimq.node_of(job_id bigint)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF job_id IS NULL THEN
		RAISE EXCEPTION 'argument "job_id" must not be null' USING ERRCODE = '22004';
	END IF;
	RETURN (job_id >> 48)::integer;
END
$$;

-- The shard for a dedup key: a hash of the key; no key: a random shard.
CREATE FUNCTION claimq_shard.for_key(dedup_key text, shards integer)
RETURNS integer
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT CASE WHEN dedup_key IS NULL THEN floor(random() * shards)::integer
				ELSE abs(hashtext(dedup_key)::bigint % shards)::integer END
$$;

-- Checks that partition N of the cluster is the server with claimq.node_id
-- N, for every N; returns one row per shard, raises if one does not match.
CREATE FUNCTION claimq.check_shards()
RETURNS TABLE(shard integer, node_id integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n integer := claimq_shard.count();
BEGIN
	IF n = 0 THEN
		RAISE EXCEPTION 'server "claimq_shards" lists no partitions';
	END IF;
	FOR i IN 0 .. n - 1 LOOP
		shard := i;
		node_id := claimq_shard.node_id(i);
		IF node_id IS DISTINCT FROM i THEN
			RAISE EXCEPTION 'partition p% has claimq.node_id %, expected %', i, node_id, i;
		END IF;
		RETURN NEXT;
	END LOOP;
END
$$;

-- Checks the (job_ids, tokens) pair of a settle call like a claimq server does.
CREATE FUNCTION claimq_shard.check_pairs(job_ids bigint[], tokens bigint[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF job_ids IS NULL THEN
		RAISE EXCEPTION 'argument "job_ids" must not be null' USING ERRCODE = '22004';
	ELSIF tokens IS NULL THEN
		RAISE EXCEPTION 'argument "tokens" must not be null' USING ERRCODE = '22004';
	ELSIF array_ndims(job_ids) > 1 OR array_ndims(tokens) > 1 THEN
		RAISE EXCEPTION 'arrays must be one-dimensional' USING ERRCODE = '22023';
	ELSIF cardinality(job_ids) <> cardinality(tokens) THEN
		RAISE EXCEPTION 'arrays "job_ids" and "tokens" must have the same length'
			USING ERRCODE = '22023';
	ELSIF cardinality(job_ids) > 10000 THEN
		RAISE EXCEPTION 'at most 10000 jobs per call' USING ERRCODE = '22023';
	ELSIF array_position(job_ids, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'array "job_ids" must not contain nulls' USING ERRCODE = '22004';
	ELSIF array_position(tokens, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'array "tokens" must not contain nulls' USING ERRCODE = '22004';
	END IF;
END
$$;

-- For settle calls: the positions (1-based, ascending) of the jobs of one shard.
CREATE FUNCTION claimq_shard.positions(job_ids bigint[], shard integer)
RETURNS integer[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT array_agg(i ORDER BY i)
	  FROM generate_subscripts(job_ids, 1) i
	 WHERE (job_ids[i] >> 48) = shard
$$;

-- The elements of an array at the given positions.
CREATE FUNCTION claimq_shard.pick(a anyarray, pos integer[])
RETURNS anyarray
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT array_agg(a[p.i] ORDER BY p.k) FROM unnest(pos) WITH ORDINALITY p(i, k)
$$;

/* ---------------------------------------------------------------------------
 * The API.  Queue administration goes to every shard, one after another;
 * it stops at the first shard that raises, and the shards before it keep
 * what they did (each shard commits its own call).
 * ------------------------------------------------------------------------ */

CREATE FUNCTION claimq.create_queue(
	queue text,
	lease interval DEFAULT '30 seconds',
	run_lease interval DEFAULT '5 minutes',
	max_attempts integer DEFAULT 5,
	retry_base interval DEFAULT '1 second',
	retry_max interval DEFAULT '1 hour',
	keep_done interval DEFAULT '0',
	keep_dead interval DEFAULT '14 days',
	notify boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		PERFORM claimq_shard.create_queue(s, queue, lease, run_lease, max_attempts,
										  retry_base, retry_max, keep_done, keep_dead, notify);
	END LOOP;
END
$$;

CREATE FUNCTION claimq.drop_queue(queue text, force boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		PERFORM claimq_shard.drop_queue(s, queue, force);
	END LOOP;
END
$$;

CREATE FUNCTION claimq.pause_queue(queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		PERFORM claimq_shard.pause_queue(s, queue);
	END LOOP;
END
$$;

CREATE FUNCTION claimq.resume_queue(queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		PERFORM claimq_shard.resume_queue(s, queue);
	END LOOP;
END
$$;

CREATE FUNCTION claimq.purge_queue(queue text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	total bigint := 0;
BEGIN
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		total := total + claimq_shard.purge_queue(s, queue);
	END LOOP;
	RETURN total;
END
$$;

/* Producing. */

-- One job: to the shard its dedup key hashes to (so the key stays unique
-- across shards), or to a random shard when it has no key.
CREATE FUNCTION claimq.enqueue(queue text, payload jsonb, run_at timestamptz DEFAULT NULL,
							   priority integer DEFAULT 0, dedup_key text DEFAULT NULL)
RETURNS bigint AS $$
	CLUSTER 'claimq_shards';
	RUN ON claimq_shard.for_key(dedup_key, claimq_shard.count());
	SELECT claimq.enqueue($1, $2, $3, $4, $5);
$$ LANGUAGE plproxy;

-- Many jobs: without keys all go to one random shard in one call (atomic);
-- with keys each goes to its key's shard (jobs with a NULL key go with the
-- first shard used), one call per shard.  Ids come back in input order.
CREATE FUNCTION claimq.enqueue_many(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
									priority integer DEFAULT 0, dedup_keys text[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n integer := claimq_shard.count();
	shard_of integer[];
	ids bigint[];
	pos integer[];
	k integer;
	id bigint;
	nullshard integer;
BEGIN
	IF payloads IS NULL THEN
		RAISE EXCEPTION 'argument "payloads" must not be null' USING ERRCODE = '22004';
	END IF;
	IF dedup_keys IS NULL THEN
		RETURN QUERY SELECT * FROM claimq_shard.enqueue_many(
			claimq_shard.for_key(NULL, n), queue, payloads, run_at, priority, NULL);
		RETURN;
	END IF;
	IF cardinality(dedup_keys) <> cardinality(payloads) OR array_ndims(payloads) > 1
	   OR array_ndims(dedup_keys) > 1 THEN
		RAISE EXCEPTION 'arrays "payloads" and "dedup_keys" must be one-dimensional and of the same length'
			USING ERRCODE = '22023';
	END IF;
	nullshard := claimq_shard.for_key(NULL, n);
	SELECT array_agg(COALESCE(claimq_shard.for_key(dedup_keys[i], n), nullshard) ORDER BY i)
	  INTO shard_of FROM generate_subscripts(payloads, 1) i;
	ids := array_fill(NULL::bigint, ARRAY[cardinality(payloads)]);
	FOR s IN 0 .. n - 1 LOOP
		SELECT array_agg(i ORDER BY i) INTO pos
		  FROM generate_subscripts(shard_of, 1) i WHERE shard_of[i] = s;
		CONTINUE WHEN pos IS NULL;
		k := 0;
		FOR id IN SELECT * FROM claimq_shard.enqueue_many(
			s, queue, claimq_shard.pick(payloads, pos), run_at, priority,
			claimq_shard.pick(dedup_keys, pos))
		LOOP
			k := k + 1;
			ids[pos[k]] := id;
		END LOOP;
	END LOOP;
	RETURN QUERY SELECT ids[i] FROM generate_subscripts(ids, 1) i ORDER BY i;
END
$$;

/* Working. */

-- Claims from one shard: tries the shards in turn, from a random one, and
-- returns the first non-empty batch.  A shard that cannot be reached is
-- skipped with a warning; only if none can be reached does the call fail.
-- With wait > 0 it polls every shard (every 100 ms) until jobs come or the
-- wait ends.
CREATE FUNCTION claimq.claim(queue text, max_jobs integer DEFAULT 1, lease interval DEFAULT NULL,
							 worker text DEFAULT NULL, start boolean DEFAULT false,
							 wait interval DEFAULT '0')
RETURNS TABLE(job_id bigint, token bigint, payload jsonb, attempts integer,
			  priority integer, enqueued_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n integer := claimq_shard.count();
	first integer := floor(random() * n)::integer;
	deadline timestamptz;
	s integer;
	got bigint;
	down integer;
	msg text;
	code text;
BEGIN
	IF wait IS NULL THEN
		RAISE EXCEPTION 'argument "wait" must not be null' USING ERRCODE = '22004';
	ELSIF wait < '0' OR wait > '7 days' THEN
		RAISE EXCEPTION 'wait must be between 0 and 7 days' USING ERRCODE = '22023';
	END IF;
	deadline := clock_timestamp() + wait;
	LOOP
		down := 0;
		FOR i IN 0 .. n - 1 LOOP
			s := (first + i) % n;
			BEGIN
				-- PL/Proxy reads the shard's whole result before it returns
				-- a row, so an error here has added no row.
				RETURN QUERY SELECT * FROM claimq_shard.claim(s, queue, max_jobs, lease, worker, start);
				GET DIAGNOSTICS got = ROW_COUNT;
			EXCEPTION
				WHEN connection_exception OR admin_shutdown OR crash_shutdown
					 OR cannot_connect_now OR internal_error THEN
				-- an unreachable, stopping or recovering shard (errors
				-- about the call itself, e.g. 42704 or 22023, are raised)
				GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE;
				RAISE WARNING 'shard % skipped (%): %', s, code, msg;
				down := down + 1;
				got := 0;
			END;
			IF got > 0 THEN
				RETURN;
			END IF;
		END LOOP;
		IF down = n THEN
			RAISE EXCEPTION 'no shard of cluster "claimq_shards" can be reached: %', msg
				USING ERRCODE = 'connection_failure';
		END IF;
		EXIT WHEN clock_timestamp() >= deadline;
		PERFORM pg_sleep(least(0.1, extract(epoch FROM deadline - clock_timestamp())));
	END LOOP;
END
$$;

-- Releases the worker's claimed, not started jobs on every shard.
CREATE FUNCTION claimq.release_worker(queue text, worker text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	total bigint := 0;
BEGIN
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		total := total + claimq_shard.release_worker(s, queue, worker);
	END LOOP;
	RETURN total;
END
$$;

/*
 * Settle calls: each pair goes to the shard that issued the job.  The array
 * forms send one call per shard involved and return one row per input pair,
 * in input order.  A job id whose node is not a shard of the cluster gets
 * outcome 'missing'.
 */

CREATE FUNCTION claimq.complete(job_ids bigint[], tokens bigint[])
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	outs text[];
	pos integer[];
	r record;
	k integer;
BEGIN
	PERFORM claimq_shard.check_pairs(job_ids, tokens);
	outs := array_fill('missing'::text, ARRAY[cardinality(job_ids)]);
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		pos := claimq_shard.positions(job_ids, s);
		CONTINUE WHEN pos IS NULL;
		k := 0;
		FOR r IN SELECT * FROM claimq_shard.complete(s, claimq_shard.pick(job_ids, pos),
													 claimq_shard.pick(tokens, pos)) LOOP
			k := k + 1;
			outs[pos[k]] := r.outcome;
		END LOOP;
	END LOOP;
	RETURN QUERY SELECT job_ids[i], outs[i] FROM generate_subscripts(job_ids, 1) i ORDER BY i;
END
$$;

CREATE FUNCTION claimq.release(job_ids bigint[], tokens bigint[])
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	outs text[];
	pos integer[];
	r record;
	k integer;
BEGIN
	PERFORM claimq_shard.check_pairs(job_ids, tokens);
	outs := array_fill('missing'::text, ARRAY[cardinality(job_ids)]);
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		pos := claimq_shard.positions(job_ids, s);
		CONTINUE WHEN pos IS NULL;
		k := 0;
		FOR r IN SELECT * FROM claimq_shard.release(s, claimq_shard.pick(job_ids, pos),
													claimq_shard.pick(tokens, pos)) LOOP
			k := k + 1;
			outs[pos[k]] := r.outcome;
		END LOOP;
	END LOOP;
	RETURN QUERY SELECT job_ids[i], outs[i] FROM generate_subscripts(job_ids, 1) i ORDER BY i;
END
$$;

CREATE FUNCTION claimq.start(job_ids bigint[], tokens bigint[], lease interval DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	outs text[];
	exps timestamptz[];
	pos integer[];
	r record;
	k integer;
BEGIN
	PERFORM claimq_shard.check_pairs(job_ids, tokens);
	outs := array_fill('missing'::text, ARRAY[cardinality(job_ids)]);
	exps := array_fill(NULL::timestamptz, ARRAY[cardinality(job_ids)]);
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		pos := claimq_shard.positions(job_ids, s);
		CONTINUE WHEN pos IS NULL;
		k := 0;
		FOR r IN SELECT * FROM claimq_shard.start(s, claimq_shard.pick(job_ids, pos),
												  claimq_shard.pick(tokens, pos), lease) LOOP
			k := k + 1;
			outs[pos[k]] := r.outcome;
			exps[pos[k]] := r.expires_at;
		END LOOP;
	END LOOP;
	RETURN QUERY SELECT job_ids[i], outs[i], exps[i] FROM generate_subscripts(job_ids, 1) i ORDER BY i;
END
$$;

CREATE FUNCTION claimq.extend(job_ids bigint[], tokens bigint[], lease interval DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	outs text[];
	exps timestamptz[];
	pos integer[];
	r record;
	k integer;
BEGIN
	PERFORM claimq_shard.check_pairs(job_ids, tokens);
	outs := array_fill('missing'::text, ARRAY[cardinality(job_ids)]);
	exps := array_fill(NULL::timestamptz, ARRAY[cardinality(job_ids)]);
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		pos := claimq_shard.positions(job_ids, s);
		CONTINUE WHEN pos IS NULL;
		k := 0;
		FOR r IN SELECT * FROM claimq_shard.extend(s, claimq_shard.pick(job_ids, pos),
												   claimq_shard.pick(tokens, pos), lease) LOOP
			k := k + 1;
			outs[pos[k]] := r.outcome;
			exps[pos[k]] := r.expires_at;
		END LOOP;
	END LOOP;
	RETURN QUERY SELECT job_ids[i], outs[i], exps[i] FROM generate_subscripts(job_ids, 1) i ORDER BY i;
END
$$;

CREATE FUNCTION claimq.fail(job_ids bigint[], tokens bigint[], error text DEFAULT NULL,
							retry_in interval DEFAULT NULL, permanent boolean DEFAULT false)
RETURNS TABLE(job_id bigint, outcome text, state text, run_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	outs text[];
	states text[];
	runs timestamptz[];
	pos integer[];
	r record;
	k integer;
BEGIN
	PERFORM claimq_shard.check_pairs(job_ids, tokens);
	outs := array_fill('missing'::text, ARRAY[cardinality(job_ids)]);
	states := array_fill(NULL::text, ARRAY[cardinality(job_ids)]);
	runs := array_fill(NULL::timestamptz, ARRAY[cardinality(job_ids)]);
	FOR s IN 0 .. claimq_shard.count() - 1 LOOP
		pos := claimq_shard.positions(job_ids, s);
		CONTINUE WHEN pos IS NULL;
		k := 0;
		FOR r IN SELECT * FROM claimq_shard.fail(s, claimq_shard.pick(job_ids, pos),
												 claimq_shard.pick(tokens, pos),
												 error, retry_in, permanent) LOOP
			k := k + 1;
			outs[pos[k]] := r.outcome;
			states[pos[k]] := r.state;
			runs[pos[k]] := r.run_at;
		END LOOP;
	END LOOP;
	RETURN QUERY SELECT job_ids[i], outs[i], states[i], runs[i]
				   FROM generate_subscripts(job_ids, 1) i ORDER BY i;
END
$$;

-- Scalar forms: straight to the issuing shard, true iff outcome ok.
CREATE FUNCTION claimq.complete(job_id bigint, token bigint)
RETURNS boolean AS $$
	CLUSTER 'claimq_shards';
	RUN ON claimq.node_of(job_id);
	SELECT claimq.complete($1, $2);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq.release(job_id bigint, token bigint)
RETURNS boolean AS $$
	CLUSTER 'claimq_shards';
	RUN ON claimq.node_of(job_id);
	SELECT claimq.release($1, $2);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq.start(job_id bigint, token bigint, lease interval DEFAULT NULL)
RETURNS boolean AS $$
	CLUSTER 'claimq_shards';
	RUN ON claimq.node_of(job_id);
	SELECT claimq.start($1, $2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq.extend(job_id bigint, token bigint, lease interval DEFAULT NULL)
RETURNS boolean AS $$
	CLUSTER 'claimq_shards';
	RUN ON claimq.node_of(job_id);
	SELECT claimq.extend($1, $2, $3);
$$ LANGUAGE plproxy;

CREATE FUNCTION claimq.fail(job_id bigint, token bigint, error text DEFAULT NULL,
							retry_in interval DEFAULT NULL, permanent boolean DEFAULT false)
RETURNS boolean AS $$
	CLUSTER 'claimq_shards';
	RUN ON claimq.node_of(job_id);
	SELECT claimq.fail($1, $2, $3, $4, $5);
$$ LANGUAGE plproxy;

/* Observing. */

-- Per shard: every shard's queue_stats rows, with the shard's node number.
CREATE FUNCTION claimq.shard_stats()
RETURNS TABLE(node integer, queue text, paused boolean, ready bigint, scheduled bigint,
			  claimed bigint, running bigint, expired bigint, dead bigint, done bigint,
			  oldest_ready_age interval, oldest_claim_age interval) AS $$
	CLUSTER 'claimq_shards';
	RUN ON ALL;
	SELECT pg_catalog.current_setting('claimq.node_id')::integer AS node,
		   s.queue, s.paused, s.ready, s.scheduled, s.claimed, s.running, s.expired,
		   s.dead, s.done, s.oldest_ready_age, s.oldest_claim_age
	  FROM claimq.queue_stats s;
$$ LANGUAGE plproxy;

-- Summed over the shards (ages: the largest).  Each shard answers at its
-- own moment, so the sum is not a snapshot of the cluster.
CREATE VIEW claimq.queue_stats AS
SELECT queue, bool_or(paused) AS paused,
	   sum(ready)::bigint AS ready, sum(scheduled)::bigint AS scheduled,
	   sum(claimed)::bigint AS claimed, sum(running)::bigint AS running,
	   sum(expired)::bigint AS expired, sum(dead)::bigint AS dead, sum(done)::bigint AS done,
	   max(oldest_ready_age) AS oldest_ready_age, max(oldest_claim_age) AS oldest_claim_age
  FROM claimq.shard_stats()
 GROUP BY queue;
