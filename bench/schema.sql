-- Benchmark objects: the plain-SQL baseline table, the floor table, the
-- loaders, and the claimq and PgQ queues.  Run once in the bench database,
-- and once in the portable edition's database (bench_portable), where
-- claimq-portable.sql has created schema claimq before (psql -v portable=1):
-- the same objects in both, so that both editions load and measure alike.

\if :{?portable}
\else
CREATE EXTENSION claimq;
\endif
CREATE EXTENSION pgq;

CREATE SCHEMA bench;

\ir baseline_schema.sql

CREATE SEQUENCE bench.oracle_seq AS bigint;

-- The HOT-claim layout prototype (hot_lease.sql): claimq.job's columns,
-- no index on a column a claim changes, room on each page for the claimed
-- versions, and a lease row per claim call found by expiry.
CREATE TABLE bench.hjob (LIKE bench.job INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
	WITH (fillfactor = 50);
ALTER TABLE bench.hjob ADD PRIMARY KEY (job_id);
CREATE INDEX ON bench.hjob (queue_id, priority DESC, run_at, job_id)
	WHERE finished_at IS NULL;
CREATE UNIQUE INDEX ON bench.hjob (queue_id, dedup_key)
	WHERE dedup_key IS NOT NULL AND finished_at IS NULL;
CREATE INDEX ON bench.hjob (queue_id, finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE bench.hlease (
	expires_at	timestamptz NOT NULL,
	job_ids		bigint[] NOT NULL
);
CREATE INDEX ON bench.hlease (expires_at);


-- The ceiling of a fair claim (tenant_range.sql, tenant_pick.sql): the
-- baseline's table with a tenant per job, its jobs taken by one range of
-- the claim's index or each from its own tenant's index.
CREATE TABLE bench.tjob (LIKE bench.job INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE bench.tjob ADD PRIMARY KEY (job_id), ADD COLUMN group_key text;
CREATE INDEX ON bench.tjob (queue_id, priority DESC, run_at, job_id)
	WHERE state = 'pending';
CREATE INDEX ON bench.tjob (queue_id, group_key, run_at, job_id)
	WHERE state = 'pending';
CREATE INDEX ON bench.tjob (expires_at) WHERE expires_at IS NOT NULL;

-- The write-only floor: a small row per job and nothing else.
CREATE TABLE bench.floor (
	id			bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	payload		jsonb NOT NULL
);

-- Every method carries the same payload.
CREATE FUNCTION bench.payload(i bigint) RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$ SELECT jsonb_build_object('task', 'send_email', 'user_id', i, 'template', 'welcome') $$;

-- Jobs of the baseline's table, or of the HOT-claim prototype's, which has
-- the same columns; the backlog test also loads scheduled and dead jobs
-- and jobs of another queue, as it does for claimq.
CREATE FUNCTION bench.load_jobs(n bigint, state text DEFAULT 'pending',
								run_at timestamptz DEFAULT NULL,
								queue_id int DEFAULT 1,
								tab regclass DEFAULT 'bench.job') RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
	EXECUTE format($i$
	INSERT INTO %s (queue_id, state, run_at, enqueued_at, finished_at,
					attempts, last_error, payload)
	SELECT $1, $2, coalesce($3, clock_timestamp()), clock_timestamp(),
		   CASE WHEN $2 = 'dead' THEN clock_timestamp() END,
		   CASE WHEN $2 = 'dead' THEN 5 ELSE 0 END,
		   CASE WHEN $2 = 'dead' THEN 'bench: loaded dead' END,
		   bench.payload(i)
	  FROM generate_series(1, $4) i$i$, tab)
	USING queue_id, state, run_at, n;
END
$$;

-- Rows the write-only floor has inserted so far.
CREATE FUNCTION bench.floor_ids() RETURNS bigint
LANGUAGE sql
AS $$
	SELECT coalesce(s.last_value, 0) FROM pg_sequences s
	 WHERE s.schemaname = 'bench' AND s.sequencename = 'floor_id_seq';
$$;

-- claimq jobs: enqueue_many is not what the matrix measures, and loading
-- through it costs minutes over a full run, so the loader writes the very
-- rows enqueue_many would write (pending, ready now, priority 0) straight
-- into claimq.job.  The backlog test also loads scheduled and dead jobs.
CREATE FUNCTION bench.load_claimq(queue text, n bigint,
								  state text DEFAULT 'pending',
								  run_at timestamptz DEFAULT NULL) RETURNS void
LANGUAGE sql
AS $$
	INSERT INTO claimq.job (queue_id, state, run_at, enqueued_at, finished_at,
							attempts, last_error, payload)
	SELECT q.queue_id, load_claimq.state,
		   coalesce(load_claimq.run_at, clock_timestamp()), clock_timestamp(),
		   CASE WHEN load_claimq.state = 'dead' THEN clock_timestamp() END,
		   CASE WHEN load_claimq.state = 'dead' THEN q.max_attempts ELSE 0 END,
		   CASE WHEN load_claimq.state = 'dead' THEN 'bench: loaded dead' END,
		   bench.payload(i)
	  FROM claimq.queue q, generate_series(1, n) i
	 WHERE q.name = load_claimq.queue;
$$;

-- PgQ: a fresh queue with one consumer, then n events, ticked every
-- `batch` events so that each batch the consumer gets holds `batch` events.
-- Each chunk and each tick is its own transaction.
CREATE PROCEDURE bench.load_pgq(n bigint, batch int)
LANGUAGE plpgsql
AS $$
DECLARE
	done bigint := 0;
	k int;
BEGIN
	PERFORM pgq.set_queue_config('bench', 'ticker_max_count', '1');
	PERFORM pgq.set_queue_config('bench', 'ticker_max_lag', '1 hour');
	PERFORM pgq.set_queue_config('bench', 'ticker_idle_period', '1 hour');
	COMMIT;
	WHILE done < n LOOP
		k := least(batch, n - done);
		PERFORM pgq.insert_event('bench', 'job', bench.payload(done + i)::text)
		  FROM generate_series(1, k) i;
		COMMIT;
		IF pgq.ticker('bench') IS NULL THEN
			RAISE EXCEPTION 'pgq ticker made no tick after % events', k;
		END IF;
		COMMIT;
		done := done + k;
	END LOOP;
END
$$;

CREATE FUNCTION bench.reset_pgq() RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
	t regclass;
BEGIN
	IF EXISTS (SELECT 1 FROM pgq.queue WHERE queue_name = 'bench') THEN
		PERFORM pgq.drop_queue('bench', true);
	END IF;
	PERFORM pgq.create_queue('bench');
	PERFORM pgq.register_consumer('bench', 'worker');
	-- The first tick recorded the event sequence before its first nextval;
	-- draw that value now so that every later tick's count is exact.
	PERFORM nextval(queue_event_seq) FROM pgq.queue WHERE queue_name = 'bench';
	FOR t IN
		SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = 'pgq' AND c.relkind = 'r'
	LOOP
		EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', t);
	END LOOP;
END
$$;

-- Events the consumer has finished: the event sequence at its last tick.
CREATE FUNCTION bench.pgq_consumed() RETURNS bigint
LANGUAGE sql
AS $$
	SELECT t.tick_event_seq
	  FROM pgq.subscription s
	  JOIN pgq.queue q ON q.queue_id = s.sub_queue AND q.queue_name = 'bench'
	  JOIN pgq.tick t ON t.tick_queue = s.sub_queue AND t.tick_id = s.sub_last_tick;
$$;

-- Table plus index size of each method's storage.
CREATE FUNCTION bench.method_size(method text) RETURNS bigint
LANGUAGE sql
AS $$
	SELECT CASE
		WHEN method LIKE 'baseline%' OR method = 'oracle' THEN pg_total_relation_size('bench.job')
		WHEN method LIKE 'claimq%' OR method LIKE 'portable%'
			THEN pg_total_relation_size('claimq.job')
				+ coalesce(pg_total_relation_size(to_regclass('claimq.lease')), 0)
		WHEN method = 'floor' THEN pg_total_relation_size('bench.floor')
		WHEN method = 'hot' THEN pg_total_relation_size('bench.hjob')
			+ pg_total_relation_size('bench.hlease')
		WHEN method = 'pgq' THEN (
			SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)
			  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			 WHERE n.nspname = 'pgq' AND c.relkind = 'r'
			   AND (c.relname LIKE 'event\_' || (SELECT queue_id FROM pgq.queue WHERE queue_name = 'bench') || '%'
					OR c.relname IN ('tick', 'subscription')))
	END;
$$;

-- Autovacuum stays on for the server but off for the tables measured: each
-- run starts after an explicit VACUUM, and nothing vacuums during a run
-- (the sustained run turns it back on for claimq.job).
ALTER TABLE bench.job SET (autovacuum_enabled = false);
ALTER TABLE bench.floor SET (autovacuum_enabled = false);
ALTER TABLE bench.hjob SET (autovacuum_enabled = false);
ALTER TABLE bench.hlease SET (autovacuum_enabled = false);
ALTER TABLE claimq.job SET (autovacuum_enabled = false);

SELECT claimq.create_queue('bench');
SELECT bench.reset_pgq();
