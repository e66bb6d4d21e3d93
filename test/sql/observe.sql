-- Observing: queue_latency's percentiles, metrics() in the Prometheus text
-- format, and the observe duty, which reads the figures and nothing else.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(35);

SELECT claimq.create_queue('ob');
SELECT claimq.reset_counters();
SELECT is((SELECT count(*) FROM claimq.queue_latency), 0::bigint, 'no samples after a reset');
SELECT is((SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
			 FROM pg_attribute WHERE attrelid = 'claimq.queue_latency'::regclass AND attnum > 0),
	'queue text, samples bigint, wait_p50 interval, wait_p90 interval, wait_p99 interval, run_p50 interval, run_p90 interval, run_p99 interval',
	'queue_latency has the documented columns, in order');

-- Nine jobs ready for 1 second and one for 100 seconds: p50 and p90 are
-- about a second, p99 about 100 seconds, each within 10%.  (A job is ready
-- from its run_at or its enqueue, whichever is later: both are set back.)
SELECT count(*) FROM claimq.enqueue_many('ob', array_fill('{}'::jsonb, ARRAY[10]));
UPDATE claimq.job j
   SET run_at = t.ready, enqueued_at = t.ready
  FROM (SELECT job_id, clock_timestamp() - CASE WHEN row_number() OVER (ORDER BY job_id) = 10
												THEN interval '100 seconds' ELSE interval '1 second' END AS ready
		  FROM claimq.job WHERE queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'ob')) t
 WHERE j.job_id = t.job_id;
SELECT is((SELECT count(*) FROM claimq.claim('ob', 10, start => true)), 10::bigint, 'claim and start them');
SELECT CASE WHEN claimq.edition() = 'c' THEN results_eq($$SELECT samples,
						   wait_p50 BETWEEN interval '0.9 s' AND interval '1.15 s',
						   wait_p90 BETWEEN interval '0.9 s' AND interval '1.15 s',
						   wait_p99 BETWEEN interval '90 s' AND interval '110.1 s',
						   run_p50 IS NULL
					  FROM claimq.queue_latency WHERE queue = 'ob'$$,
	$$VALUES (10::bigint, true, true, true, true)$$,
	'wait percentiles by nearest rank, within 10%; no run sample yet')
	ELSE skip('C edition only: latency histograms are kept in shared memory') END;
SELECT CASE WHEN claimq.edition() = 'c' THEN is((SELECT sum(samples) FROM claimq.latency_histogram() WHERE queue = 'ob' AND kind = 'wait'),
	10::numeric, 'latency_histogram holds the ten wait samples')
	ELSE skip('C edition only: latency histograms are kept in shared memory') END;
SELECT pg_sleep(0.2);
SELECT is((SELECT count(*) FROM claimq.job j, LATERAL claimq.complete(j.job_id, j.token) c
			WHERE j.queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'ob') AND c),
	10::bigint, 'complete them after 0.2 seconds');
SELECT CASE WHEN claimq.edition() = 'c' THEN ok((SELECT run_p50 BETWEEN interval '0.18 s' AND interval '2 s'
				  AND run_p99 BETWEEN interval '0.18 s' AND interval '2 s'
			 FROM claimq.queue_latency WHERE queue = 'ob'),
	'run percentiles: from start to complete')
	ELSE skip('C edition only: latency histograms are kept in shared memory') END;

-- metrics()
SELECT claimq.enqueue('ob', '{}') > 0;
CREATE TEMP TABLE m AS SELECT claimq.metrics() AS text;
SELECT ok((SELECT text ~ E'(^|\\n)# HELP claimq_jobs [^\\n]+\\n# TYPE claimq_jobs gauge\\n' FROM m),
	'every family has HELP and TYPE: claimq_jobs');
SELECT CASE WHEN claimq.edition() = 'c'
	THEN is((SELECT count(*) FROM regexp_matches((SELECT text FROM m), '# TYPE ([a-z_]+) ', 'g')),
		19::bigint, 'nineteen families: jobs, two ages, ten counters, two summaries, the flow row path and slots, a fair queue''s tenants'' handed jobs and weights')
	-- The portable edition leaves the counters' and summaries' families out.
	ELSE is((SELECT count(*) FROM regexp_matches((SELECT text FROM m), '# TYPE ([a-z_]+) ', 'g')),
		5::bigint, 'five families: jobs, two ages, a fair queue''s tenants'' handed jobs and weights (no counters or summaries in the portable edition)') END;
SELECT ok((SELECT position(format(E'claimq_jobs{queue="ob",state="ready"} %s\n', ready) IN text) > 0
			 FROM m, claimq.queue_stats WHERE queue = 'ob'),
	'claimq_jobs matches queue_stats');
SELECT CASE WHEN claimq.edition() = 'c' THEN ok((SELECT position(E'claimq_completed_total{queue="ob"} 10\n' IN text) > 0 FROM m),
	'the completed counter')
	ELSE skip('C edition only: counters are kept in shared memory') END;
SELECT CASE WHEN claimq.edition() = 'c' THEN ok((SELECT position(E'claimq_wait_seconds_count{queue="ob"} 10\n' IN text) > 0 FROM m),
	'the wait summary''s count')
	ELSE skip('C edition only: latency histograms are kept in shared memory') END;
SELECT CASE WHEN claimq.edition() = 'c' THEN ok((SELECT text ~ E'claimq_wait_seconds\\{queue="ob",quantile="0.99"\\} (9[0-9]|10[0-9]|110)\\.' FROM m),
	'the wait summary''s p99, in seconds')
	ELSE skip('C edition only: latency histograms are kept in shared memory') END;
SELECT CASE WHEN claimq.edition() = 'c' THEN ok((SELECT text ~ E'claimq_run_seconds_count\\{queue="ob"\\} 10\\n' FROM m), 'the run summary''s count')
	ELSE skip('C edition only: latency histograms are kept in shared memory') END;
SELECT ok((SELECT text !~ E'[^\\n]\\Z' FROM m), 'the text ends with a newline');

-- Flow control: a limited queue that holds a flow slot is not on the row
-- path; the server's slots are for the administer duty only (below).
SELECT claimq.create_queue('oblim', max_in_flight => 5);
SELECT claimq.enqueue('oblim', '{}') > 0;
SELECT count(*) FROM claimq.claim('oblim');
SELECT CASE WHEN claimq.edition() = 'c'
	THEN ok(position(E'\nclaimq_flow_row_path{queue="oblim"} 0\n' IN claimq.metrics()) > 0,
		'a limited queue holding a flow slot is not on the row path')
	ELSE ok(position('claimq_flow' IN claimq.metrics()) = 0,
		'the portable edition leaves flow control''s families out') END;
SELECT CASE WHEN claimq.edition() = 'c'
	THEN ok(claimq.metrics() ~ E'\nclaimq_flow_slots\\{state="held"\\} [1-9][0-9]*\nclaimq_flow_slots\\{state="free"\\} [0-9]+\n',
		'the server''s flow slots, the one this transaction reserved held')
	ELSE skip('C edition only: flow slots are kept in shared memory') END;

-- The release and the edition.
-- (The portable edition has no control file: pg_tle's extension has the
-- version it was registered with, and the plain script none.)
SELECT is(claimq.version(),
	COALESCE((SELECT default_version FROM pg_available_extensions WHERE name = 'claimq'),
			 (SELECT extversion FROM pg_extension WHERE extname = 'claimq'),
			 substring(claimq.version() FROM '^[0-9]+\.[0-9]+(?:\.[0-9]+)?$')),
	'version() is the control file''s default_version');
SELECT is(claimq.edition(),
	CASE WHEN (SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
				WHERE p.oid = 'claimq.edition()'::regprocedure) = 'c' THEN 'c' ELSE 'portable' END,
	'edition() is c, or portable where claimq''s functions are not C');

-- The observe duty: the figures, nothing else.
CREATE ROLE regress_claimq_observer;
SELECT claimq.grant_duty('regress_claimq_observer', 'observe');
SET LOCAL ROLE regress_claimq_observer;
SELECT lives_ok('SELECT * FROM claimq.queue_stats', 'observe reads queue_stats');
SELECT lives_ok('SELECT * FROM claimq.counters', 'observe reads counters');
SELECT lives_ok('SELECT * FROM claimq.queue_latency', 'observe reads queue_latency');
SELECT lives_ok('SELECT * FROM claimq.schedules', 'observe reads schedules');
SELECT lives_ok('SELECT * FROM claimq.group_stats', 'observe reads group_stats');
SELECT lives_ok('SELECT * FROM claimq.reclaimer_status', 'observe reads reclaimer_status');
SELECT lives_ok('SELECT claimq.metrics()', 'observe calls metrics()');
SELECT CASE WHEN claimq.edition() = 'c'
	THEN ok(position(E'\nclaimq_flow_row_path{queue="oblim"} 0\n' IN claimq.metrics()) > 0,
		'observe sees the row path')
	ELSE skip('C edition only: flow slots are kept in shared memory') END;
SELECT ok(position('claimq_flow_slots' IN claimq.metrics()) = 0,
	'observe does not see the server''s flow slots');
SELECT throws_ok('SELECT * FROM claimq.jobs', '42501', NULL, 'observe cannot read jobs');
SELECT throws_ok($$SELECT * FROM claimq.claim('ob')$$, '42501', NULL, 'observe cannot claim');
SELECT throws_ok($$SELECT claimq.enqueue('ob', '{}')$$, '42501', NULL, 'observe cannot enqueue');
SELECT throws_ok('SELECT claimq.reset_counters()', '42501', NULL, 'observe cannot reset the counters');
SELECT lives_ok('SELECT claimq.version()', 'observe calls version()');
SELECT lives_ok('SELECT claimq.edition()', 'observe calls edition()');
SELECT throws_ok('SELECT * FROM claimq.maintain()', '42501', NULL, 'observe cannot call maintain()');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
