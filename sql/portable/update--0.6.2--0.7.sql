/*
 * sql/portable/update--0.6.2--0.7.sql: the portable editions' part of the
 * update from 0.6.2 to 0.7, included at the end of
 * sql/claimq--0.6.2--0.7.sql (a comment in the C edition's update, whose
 * functions below are C and did not change their declarations).  The
 * functions whose portable bodies changed for workflows (finishes judge
 * dependents; the ledger knows the waiting state; reclaim to dead judges,
 * prune keeps jobs that jobs run after), and version(), are replaced, each
 * keeping its grants.
 */

ALTER FUNCTION claimq.cancel(bigint[]) RENAME TO cancel_0_6_2;

CREATE FUNCTION claimq.cancel(job_ids bigint[])
RETURNS TABLE(job_id bigint, outcome text, state text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_cancel';

COMMENT ON FUNCTION claimq.cancel(bigint[]) IS
'cancel waiting, pending, claimed or running jobs; their holders'' tokens then get the outcome cancelled';

REVOKE ALL ON FUNCTION claimq.cancel(bigint[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.cancel_0_6_2(bigint[])'::regprocedure,
						  'claimq.cancel(bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.cancel_0_6_2(bigint[]);

ALTER FUNCTION claimq.complete(bigint[], bigint[], jsonb[]) RENAME TO complete_0_6_2;

CREATE FUNCTION claimq.complete(job_ids bigint[], tokens bigint[],
								results jsonb[] DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete';

COMMENT ON FUNCTION claimq.complete(bigint[],bigint[],jsonb[]) IS
'finish claimed or running jobs: deleted, or kept as done (with its result) on a keep_done queue';

REVOKE ALL ON FUNCTION claimq.complete(bigint[], bigint[], jsonb[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.complete_0_6_2(bigint[], bigint[], jsonb[])'::regprocedure,
						  'claimq.complete(bigint[], bigint[], jsonb[])'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.complete_0_6_2(bigint[], bigint[], jsonb[]);

ALTER FUNCTION claimq.complete(bigint, bigint, jsonb) RENAME TO complete_0_6_2;

CREATE FUNCTION claimq.complete(job_id bigint, token bigint,
								result jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete_one';

COMMENT ON FUNCTION claimq.complete(bigint,bigint,jsonb) IS
'complete one job; true if the token still held it';

REVOKE ALL ON FUNCTION claimq.complete(bigint, bigint, jsonb) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.complete_0_6_2(bigint, bigint, jsonb)'::regprocedure,
						  'claimq.complete(bigint, bigint, jsonb)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.complete_0_6_2(bigint, bigint, jsonb);

ALTER FUNCTION claimq.fail(bigint[], bigint[], text, interval, boolean) RENAME TO fail_0_6_2;

CREATE FUNCTION claimq.fail(job_ids bigint[], tokens bigint[],
							error text DEFAULT NULL,
							retry_in interval DEFAULT NULL,
							permanent boolean DEFAULT false)
RETURNS TABLE(job_id bigint, outcome text, state text, run_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fail';

COMMENT ON FUNCTION claimq.fail(bigint[],bigint[],text,interval,boolean) IS
'record a failed attempt: pending again after a backoff while attempts are left, else dead';

REVOKE ALL ON FUNCTION claimq.fail(bigint[], bigint[], text, interval, boolean) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.fail_0_6_2(bigint[], bigint[], text, interval, boolean)'::regprocedure,
						  'claimq.fail(bigint[], bigint[], text, interval, boolean)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.fail_0_6_2(bigint[], bigint[], text, interval, boolean);

ALTER FUNCTION claimq.fail(bigint, bigint, text, interval, boolean) RENAME TO fail_0_6_2;

CREATE FUNCTION claimq.fail(job_id bigint, token bigint,
							error text DEFAULT NULL,
							retry_in interval DEFAULT NULL,
							permanent boolean DEFAULT false)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fail_one';

COMMENT ON FUNCTION claimq.fail(bigint,bigint,text,interval,boolean) IS
'fail one job; true if the token still held it';

REVOKE ALL ON FUNCTION claimq.fail(bigint, bigint, text, interval, boolean) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.fail_0_6_2(bigint, bigint, text, interval, boolean)'::regprocedure,
						  'claimq.fail(bigint, bigint, text, interval, boolean)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.fail_0_6_2(bigint, bigint, text, interval, boolean);

ALTER FUNCTION claimq.ledger_end(integer, text, text[], bigint[]) RENAME TO ledger_end_0_6_2;

CREATE FUNCTION claimq.ledger_end(queue_id integer, to_state text,
								  from_states text[], counts bigint[])
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_ledger_end';

COMMENT ON FUNCTION claimq.ledger_end(integer,text,text[],bigint[]) IS
'private: counts[i] jobs of the queue went from from_states[i] to to_state (NULL: deleted); ends the scope of ledger_begin()';

REVOKE ALL ON FUNCTION claimq.ledger_end(integer, text, text[], bigint[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.ledger_end_0_6_2(integer, text, text[], bigint[])'::regprocedure,
						  'claimq.ledger_end(integer, text, text[], bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.ledger_end_0_6_2(integer, text, text[], bigint[]);

ALTER FUNCTION claimq.version() RENAME TO version_0_6_2;

CREATE FUNCTION claimq.version()
RETURNS text
LANGUAGE c STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_version';

COMMENT ON FUNCTION claimq.version() IS
'the release of claimq whose schema the library serves';

REVOKE ALL ON FUNCTION claimq.version() FROM PUBLIC;

SELECT claimq.copy_grants('claimq.version_0_6_2()'::regprocedure,
						  'claimq.version()'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.version_0_6_2();

/*
 * metrics() has lines for one edition or the other in its body: the update
 * above created the C edition's, which gives way to this edition's.
 */
ALTER FUNCTION claimq.metrics() RENAME TO metrics_0_7_c;

CREATE FUNCTION claimq.metrics()
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	-- Each source is read once; the counts come from the census.
	stats jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(s) ORDER BY s.queue), '[]')
					  FROM claimq.scrape_stats() s);
-- @c
	counts jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(c) ORDER BY c.queue), '[]')
					   FROM claimq.counters() c WHERE c.queue IS NOT NULL);
	lats jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(l) ORDER BY l.queue), '[]')
					 FROM claimq.queue_latency() l);
-- @end
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
				  CROSS JOIN pg_catalog.unnest('{ready,scheduled,claimed,running,expired,dead,done,cancelled,waiting}'::text[])
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
-- @portable
	-- No counters or latency summaries: no shared memory (DESIGN.md,
	-- Editions), so their families are left out.
-- @end
-- @c
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
-- @end
	RETURN out;
END
$$;

COMMENT ON FUNCTION claimq.metrics() IS
'the current database''s queue figures in the Prometheus text exposition format';

REVOKE ALL ON FUNCTION claimq.metrics() FROM PUBLIC;

SELECT claimq.copy_grants('claimq.metrics_0_7_c()'::regprocedure,
						  'claimq.metrics()'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.metrics_0_7_c();

/* The private helpers of reclaim() and prune(). */
ALTER FUNCTION claimq.reclaim_expired(text, integer) RENAME TO reclaim_expired_0_6_2;
ALTER FUNCTION claimq.prune_finished(integer) RENAME TO prune_finished_0_6_2;

-- @include portable/private-recover.sql

REVOKE ALL ON FUNCTION claimq.reclaim_expired(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.prune_finished(integer) FROM PUBLIC;
DROP FUNCTION claimq.reclaim_expired_0_6_2(text, integer);
DROP FUNCTION claimq.prune_finished_0_6_2(integer);
