/* claimq--0.5--0.6.sql: the census (jobs per queue and state kept as they commit), so that metrics() does not pass over the job table; the queue-name rule and the producer lock in C only */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.6'" to load this file. \quit

/*
 * One place for the queue-name rule and for the producer lock's key: the
 * C side (src/common.c).  The private helpers that applied them in SQL
 * call it now, and so do the tables' CHECK constraints.
 */
CREATE FUNCTION claimq.valid_name(name text)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_valid_name';

COMMENT ON FUNCTION claimq.valid_name(text) IS
'private: whether a text is a valid queue or schedule name (1 to 63 letters, digits, "_", "-", ".")';

REVOKE ALL ON FUNCTION claimq.valid_name(text) FROM PUBLIC;

ALTER TABLE claimq.queue
	DROP CONSTRAINT queue_name_check,
	ADD CONSTRAINT queue_name_check CHECK (claimq.valid_name(name));
ALTER TABLE claimq.schedule
	DROP CONSTRAINT schedule_name_check,
	ADD CONSTRAINT schedule_name_check CHECK (claimq.valid_name(name));

DROP FUNCTION claimq.check_queue_name(text);

CREATE FUNCTION claimq.check_queue_name(queue text)
RETURNS void
LANGUAGE c IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_check_queue_name';

COMMENT ON FUNCTION claimq.check_queue_name(text) IS
'private: raise 22004 or 22023 unless queue is a valid queue name';

REVOKE ALL ON FUNCTION claimq.check_queue_name(text) FROM PUBLIC;

DROP FUNCTION claimq.lock_producers(text);

CREATE FUNCTION claimq.lock_producers(queue text)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_lock_producers';

COMMENT ON FUNCTION claimq.lock_producers(text) IS
'private: take a queue''s producer lock exclusive until the end of the transaction, waiting for enqueues in progress and holding new ones back';

REVOKE ALL ON FUNCTION claimq.lock_producers(text) FROM PUBLIC;

/*
 * The census's triggers (src/census.c): every row written to claimq.job
 * notes +1 for its new state and -1 for its old one, per queue; the
 * notes reach shared memory when the transaction commits.  Updates that
 * set neither the state nor the queue (extend, the held flag) fire
 * nothing.  TRUNCATE, which fires no row trigger, makes the counts unknown
 * until the reclaimer counts again.
 */
CREATE FUNCTION claimq.job_census()
RETURNS trigger
LANGUAGE C
AS 'MODULE_PATHNAME', 'claimq_job_census';
-- No SET search_path (the one claimq function without it): it runs no
-- SQL and resolves no name, and a SET clause would cost every row.

COMMENT ON FUNCTION claimq.job_census() IS
'private: the census''s trigger on claimq.job';

REVOKE ALL ON FUNCTION claimq.job_census() FROM PUBLIC;

CREATE TRIGGER job_census_rows
	AFTER INSERT OR DELETE ON claimq.job
	FOR EACH ROW EXECUTE FUNCTION claimq.job_census();

-- No WHEN clause: each statement would parse and compile it again, which
-- costs more than the few rows that keep their state.
CREATE TRIGGER job_census_state
	AFTER UPDATE OF state, queue_id ON claimq.job
	FOR EACH ROW EXECUTE FUNCTION claimq.job_census();

CREATE TRIGGER job_census_truncate
	AFTER TRUNCATE ON claimq.job
	FOR EACH STATEMENT EXECUTE FUNCTION claimq.job_census();

-- Also under session_replication_role = replica (logical replication's
-- apply, some restores): a write the census does not see would leave it
-- valid and wrong.
ALTER TABLE claimq.job ENABLE ALWAYS TRIGGER job_census_rows;
ALTER TABLE claimq.job ENABLE ALWAYS TRIGGER job_census_state;
ALTER TABLE claimq.job ENABLE ALWAYS TRIGGER job_census_truncate;

/*
 * The current database's counts per queue and state as committed; a row
 * with queue_id 0 says that they are valid (none: metrics reads
 * queue_stats instead).
 */
CREATE FUNCTION claimq.census(OUT queue_id integer, OUT pending bigint,
							  OUT claimed bigint, OUT running bigint,
							  OUT done bigint, OUT dead bigint,
							  OUT cancelled bigint)
RETURNS SETOF record
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_census';

COMMENT ON FUNCTION claimq.census() IS
'private: the jobs per queue and state that the census has counted, and whether the counts are valid (queue_id 0)';

REVOKE ALL ON FUNCTION claimq.census() FROM PUBLIC;

/*
 * Count again now, as the reclaimer does after a start or whenever the
 * counts became unknown; true if they are valid afterwards.
 */
CREATE FUNCTION claimq.census_recount()
RETURNS boolean
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_census_recount';

COMMENT ON FUNCTION claimq.census_recount() IS
'private: count the jobs per queue and state again, as the reclaimer does after a start; true if the counts are valid';

REVOKE ALL ON FUNCTION claimq.census_recount() FROM PUBLIC;

/*
 * queue_stats's rows for metrics(), without a pass over the job table:
 * the counts per state from the census, and what depends on the time
 * read from the indexes in bounded steps.  Scheduled jobs (pending, due
 * later) are the tail of each priority's run_at order in the claim's
 * index (one probe per distinct priority) and, for held jobs, the tail of
 * each group's due order (one probe per group with a lock row); the
 * oldest ready job is the head of those orders; expired leases and the
 * oldest claim are read from the jobs in flight only.  Without a valid
 * census (no preload, a standby, before the reclaimer's first count, a
 * prepared transaction) the rows are queue_stats's own.  The counts are
 * those committed when the scrape reads them; a change committed in the
 * middle of a scrape can show in one figure and not yet in another.
 */
CREATE FUNCTION claimq.scrape_stats()
RETURNS SETOF claimq.queue_stats
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	census jsonb := (SELECT pg_catalog.jsonb_object_agg(c.queue_id, pg_catalog.to_jsonb(c))
					   FROM claimq.census() c);
	now timestamptz := pg_catalog.clock_timestamp();
	q record;
	n jsonb;
	f record;
	h record;
	l record;
	scheduled bigint;
	r claimq.queue_stats;
BEGIN
	IF census IS NULL OR NOT census OPERATOR(pg_catalog.?) '0' THEN
		RETURN QUERY SELECT * FROM claimq.queue_stats;
		RETURN;
	END IF;
	FOR q IN SELECT t.queue_id, t.name, t.paused FROM claimq.queue t ORDER BY t.name LOOP
		n := COALESCE(census OPERATOR(pg_catalog.->) q.queue_id::text, '{}');

		-- Free pending jobs: per priority, a skip through the claim's index.
		WITH RECURSIVE p(priority) AS (
			(SELECT j.priority FROM claimq.job j
			  WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
				AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
			  ORDER BY j.priority DESC LIMIT 1)
			UNION ALL
			SELECT (SELECT j.priority FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
					   AND j.priority OPERATOR(pg_catalog.<) p.priority
					 ORDER BY j.priority DESC LIMIT 1)
			  FROM p WHERE p.priority IS NOT NULL)
		SELECT COALESCE(pg_catalog.sum(s.later), 0) AS later,
			   pg_catalog.min(s.first) FILTER (WHERE s.first OPERATOR(pg_catalog.<=) now) AS first
		  INTO f
		  FROM p CROSS JOIN LATERAL (
			SELECT (SELECT pg_catalog.count(*) FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
					   AND j.priority OPERATOR(pg_catalog.=) p.priority
					   AND j.run_at OPERATOR(pg_catalog.>) now) AS later,
				   (SELECT j.run_at FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
					   AND j.priority OPERATOR(pg_catalog.=) p.priority
					 ORDER BY j.run_at LIMIT 1) AS first) s
		 WHERE p.priority IS NOT NULL;

		-- Held jobs: per group of a limited queue, its due order.
		SELECT COALESCE(pg_catalog.sum(s.later), 0) AS later,
			   pg_catalog.min(s.first) AS first
		  INTO h
		  FROM claimq.job_group g CROSS JOIN LATERAL (
			SELECT (SELECT pg_catalog.count(*) FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) g.queue_id
					   AND j.group_key OPERATOR(pg_catalog.=) g.group_key
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND j.held
					   AND j.run_at OPERATOR(pg_catalog.>) now) AS later,
				   (SELECT j.run_at FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) g.queue_id
					   AND j.group_key OPERATOR(pg_catalog.=) g.group_key
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND j.held
					   AND j.run_at OPERATOR(pg_catalog.<=) now
					 ORDER BY j.run_at LIMIT 1) AS first) s
		 WHERE g.queue_id OPERATOR(pg_catalog.=) q.queue_id;

		-- Jobs in flight, through the lease index.
		SELECT pg_catalog.count(*) FILTER (WHERE j.expires_at OPERATOR(pg_catalog.<) now) AS expired,
			   pg_catalog.min(j.claimed_at) AS first
		  INTO l
		  FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.expires_at IS NOT NULL;

		scheduled := f.later OPERATOR(pg_catalog.+) h.later;
		r.queue := q.name;
		r.paused := q.paused;
		r.ready := GREATEST(COALESCE((n OPERATOR(pg_catalog.->>) 'pending')::bigint, 0)
							OPERATOR(pg_catalog.-) scheduled, 0);
		r.scheduled := scheduled;
		r.claimed := COALESCE((n OPERATOR(pg_catalog.->>) 'claimed')::bigint, 0);
		r.running := COALESCE((n OPERATOR(pg_catalog.->>) 'running')::bigint, 0);
		r.expired := l.expired;
		r.dead := COALESCE((n OPERATOR(pg_catalog.->>) 'dead')::bigint, 0);
		r.done := COALESCE((n OPERATOR(pg_catalog.->>) 'done')::bigint, 0);
		r.oldest_ready_age := now OPERATOR(pg_catalog.-) LEAST(f.first, h.first);
		r.oldest_claim_age := now OPERATOR(pg_catalog.-) l.first;
		r.cancelled := COALESCE((n OPERATOR(pg_catalog.->>) 'cancelled')::bigint, 0);
		RETURN NEXT r;
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.scrape_stats() IS
'private: queue_stats''s rows from the census and bounded reads of the indexes, for metrics()';

REVOKE ALL ON FUNCTION claimq.scrape_stats() FROM PUBLIC;

/*
 * Functions whose body changes are created anew beside the old ones and
 * given the old ones' grants; then the old ones are dropped.  A GRANT run
 * by an extension script is recorded as an initial privilege, which
 * pg_dump leaves out, so the object's initial privileges are put back as
 * they were.  (The helper of the updates to 0.4 and 0.5; it is dropped
 * again at the end, as there, so that no scaffolding stays behind.)
 */
CREATE FUNCTION claimq.upgrade_copy_grants(old_oid oid, new_oid oid,
										   catalog regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	acl aclitem[];
	owner oid;
	target text;
	saved aclitem[];
	had_initprivs boolean;
	a record;
BEGIN
	IF catalog OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass THEN
		SELECT p.proacl, p.proowner INTO acl, owner
		  FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) old_oid;
		target := 'FUNCTION ' OPERATOR(pg_catalog.||) new_oid::regprocedure::text;
	ELSE
		SELECT c.relacl, c.relowner INTO acl, owner
		  FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) old_oid;
		target := 'TABLE ' OPERATOR(pg_catalog.||) new_oid::regclass::text;
	END IF;
	SELECT i.initprivs INTO saved FROM pg_catalog.pg_init_privs i
	 WHERE i.objoid OPERATOR(pg_catalog.=) new_oid
	   AND i.classoid OPERATOR(pg_catalog.=) catalog
	   AND i.objsubid OPERATOR(pg_catalog.=) 0;
	had_initprivs := FOUND;
	FOR a IN SELECT x.grantee, x.privilege_type, x.is_grantable
			   FROM pg_catalog.aclexplode(acl) x
			  WHERE x.grantee OPERATOR(pg_catalog.<>) owner LOOP
		EXECUTE pg_catalog.format('GRANT %s ON %s TO %s%s', a.privilege_type, target,
			CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
				 ELSE a.grantee::regrole::text END,
			CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
	END LOOP;
	IF had_initprivs THEN
		UPDATE pg_catalog.pg_init_privs i SET initprivs = saved
		 WHERE i.objoid OPERATOR(pg_catalog.=) new_oid
		   AND i.classoid OPERATOR(pg_catalog.=) catalog
		   AND i.objsubid OPERATOR(pg_catalog.=) 0;
	ELSE
		DELETE FROM pg_catalog.pg_init_privs i
		 WHERE i.objoid OPERATOR(pg_catalog.=) new_oid
		   AND i.classoid OPERATOR(pg_catalog.=) catalog
		   AND i.objsubid OPERATOR(pg_catalog.=) 0;
	END IF;
END
$$;

/* node_of reads the node number with the C side's shift (src/common.c). */
ALTER FUNCTION claimq.node_of(bigint) RENAME TO node_of_0_5;

CREATE FUNCTION claimq.node_of(job_id bigint)
RETURNS integer
LANGUAGE c IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_node_of';

COMMENT ON FUNCTION claimq.node_of(bigint) IS
'the node number (claimq.node_id of the server that issued it) in a job id';

REVOKE ALL ON FUNCTION claimq.node_of(bigint) FROM PUBLIC;

SELECT claimq.upgrade_copy_grants('claimq.node_of_0_5(bigint)'::regprocedure,
								  'claimq.node_of(bigint)'::regprocedure,
								  'pg_catalog.pg_proc');

DROP FUNCTION claimq.node_of_0_5(bigint);

/* metrics() reads scrape_stats() instead of queue_stats. */
ALTER FUNCTION claimq.metrics() RENAME TO metrics_0_5;

CREATE FUNCTION claimq.metrics()
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	-- Each source is read once; the counts come from the census.
	stats jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(s) ORDER BY s.queue), '[]')
					  FROM claimq.scrape_stats() s);
	counts jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(c) ORDER BY c.queue), '[]')
					   FROM claimq.counters() c WHERE c.queue IS NOT NULL);
	lats jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(l) ORDER BY l.queue), '[]')
					 FROM claimq.queue_latency() l);
	family constant text := E'# HELP %1$s %2$s\n# TYPE %1$s %3$s\n';
	out text;
	f record;
BEGIN
	-- Families with HELP and TYPE, then their samples, one per line; label
	-- values are queue names, which contain nothing that needs escaping.
	out := pg_catalog.format(family, 'claimq_jobs',
							 'Jobs per queue and state (expired: claimed or running jobs past their lease).',
							 'gauge')
		OPERATOR(pg_catalog.||)
		COALESCE((SELECT pg_catalog.string_agg(
					pg_catalog.format(E'claimq_jobs{queue="%s",state="%s"} %s\n',
									  e.x OPERATOR(pg_catalog.->>) 'queue', v.state,
									  e.x OPERATOR(pg_catalog.->>) v.state),
					'' ORDER BY e.n, v.n)
				  FROM pg_catalog.jsonb_array_elements(stats) WITH ORDINALITY AS e(x, n)
				  CROSS JOIN pg_catalog.unnest('{ready,scheduled,claimed,running,expired,dead,done,cancelled}'::text[])
							 WITH ORDINALITY AS v(state, n)), '');
	FOR f IN SELECT * FROM (VALUES
		('oldest_ready_age', 'Age of the oldest ready job per queue (0 if none).'),
		('oldest_claim_age', 'Age of the oldest claim of a claimed or running job per queue (0 if none).')) AS v(name, help)
	LOOP
		out := out OPERATOR(pg_catalog.||)
			pg_catalog.format(family, 'claimq_' OPERATOR(pg_catalog.||) f.name OPERATOR(pg_catalog.||) '_seconds', f.help, 'gauge')
			OPERATOR(pg_catalog.||)
			COALESCE((SELECT pg_catalog.string_agg(
						pg_catalog.format(E'claimq_%s_seconds{queue="%s"} %s\n', f.name,
										  e.x OPERATOR(pg_catalog.->>) 'queue',
										  COALESCE(pg_catalog.date_part('epoch',
												(e.x OPERATOR(pg_catalog.->>) f.name)::interval), 0)),
						'' ORDER BY e.n)
					  FROM pg_catalog.jsonb_array_elements(stats) WITH ORDINALITY AS e(x, n)), '');
	END LOOP;
	FOR f IN SELECT * FROM pg_catalog.unnest('{claimed,started,completed,failed,released,reclaimed,dead,stale,cancelled,snoozed}'::text[]) AS v(name)
	LOOP
		out := out OPERATOR(pg_catalog.||)
			pg_catalog.format(family, 'claimq_' OPERATOR(pg_catalog.||) f.name OPERATOR(pg_catalog.||) '_total',
							  pg_catalog.format('Jobs %s per queue since server start or reset_counters().',
												CASE f.name WHEN 'stale' THEN 'refused as stale' ELSE f.name END),
							  'counter')
			OPERATOR(pg_catalog.||)
			COALESCE((SELECT pg_catalog.string_agg(
						pg_catalog.format(E'claimq_%s_total{queue="%s"} %s\n', f.name,
										  e.x OPERATOR(pg_catalog.->>) 'queue', e.x OPERATOR(pg_catalog.->>) f.name),
						'' ORDER BY e.n)
					  FROM pg_catalog.jsonb_array_elements(counts) WITH ORDINALITY AS e(x, n)), '');
	END LOOP;
	FOR f IN SELECT * FROM (VALUES
		('wait', 'Time from a job becoming ready to its claim, per queue.', 'samples'),
		('run', 'Time from a job''s start to its complete or fail, per queue.', 'run_samples')) AS v(name, help, count)
	LOOP
		out := out OPERATOR(pg_catalog.||)
			pg_catalog.format(family, 'claimq_' OPERATOR(pg_catalog.||) f.name OPERATOR(pg_catalog.||) '_seconds', f.help, 'summary')
			OPERATOR(pg_catalog.||)
			COALESCE((SELECT pg_catalog.string_agg(
						pg_catalog.format(E'claimq_%1$s_seconds{queue="%2$s",quantile="0.5"} %3$s\n'
										  'claimq_%1$s_seconds{queue="%2$s",quantile="0.9"} %4$s\n'
										  'claimq_%1$s_seconds{queue="%2$s",quantile="0.99"} %5$s\n'
										  'claimq_%1$s_seconds_sum{queue="%2$s"} %6$s\n'
										  'claimq_%1$s_seconds_count{queue="%2$s"} %7$s\n',
										  f.name, e.x OPERATOR(pg_catalog.->>) 'queue',
										  COALESCE(pg_catalog.date_part('epoch', (e.x OPERATOR(pg_catalog.->>) (f.name OPERATOR(pg_catalog.||) '_p50'))::interval), 0),
										  COALESCE(pg_catalog.date_part('epoch', (e.x OPERATOR(pg_catalog.->>) (f.name OPERATOR(pg_catalog.||) '_p90'))::interval), 0),
										  COALESCE(pg_catalog.date_part('epoch', (e.x OPERATOR(pg_catalog.->>) (f.name OPERATOR(pg_catalog.||) '_p99'))::interval), 0),
										  e.x OPERATOR(pg_catalog.->>) (f.name OPERATOR(pg_catalog.||) '_sum'),
										  e.x OPERATOR(pg_catalog.->>) f.count),
						'' ORDER BY e.n)
					  FROM pg_catalog.jsonb_array_elements(lats) WITH ORDINALITY AS e(x, n)), '');
	END LOOP;
	RETURN out;
END
$$;

COMMENT ON FUNCTION claimq.metrics() IS
'the current database''s queue figures in the Prometheus text exposition format';

REVOKE ALL ON FUNCTION claimq.metrics() FROM PUBLIC;

SELECT claimq.upgrade_copy_grants('claimq.metrics_0_5()'::regprocedure,
								  'claimq.metrics()'::regprocedure,
								  'pg_catalog.pg_proc');

DROP FUNCTION claimq.metrics_0_5();

DROP FUNCTION claimq.upgrade_copy_grants(oid, oid, regclass);
