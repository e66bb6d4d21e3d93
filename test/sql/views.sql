-- Observing: the queue_stats and jobs views.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(37);

-- The columns of a relation, in order, with their types.
CREATE FUNCTION pg_temp.columns(rel regclass)
RETURNS TABLE(name name, type text) LANGUAGE sql AS $$
	SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
	 WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped ORDER BY attnum
$$;

--
-- queue_stats
--
SELECT results_eq($$SELECT * FROM pg_temp.columns('claimq.queue_stats')$$,
	$$VALUES ('queue'::name, 'text'), ('paused', 'boolean'), ('ready', 'bigint'),
			 ('scheduled', 'bigint'), ('claimed', 'bigint'), ('running', 'bigint'),
			 ('expired', 'bigint'), ('dead', 'bigint'), ('done', 'bigint'),
			 ('oldest_ready_age', 'interval'), ('oldest_claim_age', 'interval'),
			 ('cancelled', 'bigint'), ('waiting', 'bigint')$$,
	'queue_stats has the documented columns, in order');

SELECT lives_ok($$SELECT claimq.create_queue('vw', keep_done => '1 day', max_attempts => 1)$$,
	'create queue vw');
SELECT results_eq($$SELECT * FROM claimq.queue_stats WHERE queue = 'vw'$$,
	$$VALUES ('vw'::text, false, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint,
			  0::bigint, 0::bigint, NULL::interval, NULL::interval, 0::bigint, 0::bigint)$$,
	'a queue with no jobs: zeros and no ages');

-- Ready since 1 hour and since 10 minutes; scheduled in an hour; the oldest
-- job of all (5 hours) gets claimed and must not count as ready.
SELECT lives_ok($$
	SELECT claimq.enqueue('vw', jsonb_build_object('l', l), run_at => clock_timestamp() + r,
						  priority => p)
	  FROM (VALUES ('c_old', interval '-5 hours', 9), ('r1', '-1 hour', 0),
				   ('r2', '-10 minutes', 0), ('s1', '1 hour', 0),
				   ('c1', '-1 minute', 8), ('c2', '-1 minute', 7),
				   ('x1', '-1 minute', 6), ('x2', '-1 minute', 5),
				   ('d1', '-1 minute', 4), ('d2', '-1 minute', 3)) v(l, r, p)
	 ORDER BY p DESC$$, 'enqueue ten jobs');
-- c_old, c1: claimed (c_old expires); c2 running; x1 running expired;
-- x2: claimed then completed (done); d1 dead; d2 claimed with a long lease
SELECT is((SELECT count(*) FROM claimq.claim('vw', max_jobs => 1, lease => '1 millisecond')), 1::bigint,
	'claim c_old with a short lease');
SELECT is((SELECT count(*) FROM claimq.claim('vw', max_jobs => 1)), 1::bigint, 'claim c1');
SELECT is((SELECT count(*) FROM claimq.claim('vw', max_jobs => 1, start => true)), 1::bigint,
	'claim and start c2');
SELECT is((SELECT count(*) FROM claimq.claim('vw', max_jobs => 1, start => true,
											 lease => '1 millisecond')), 1::bigint,
	'claim and start x1 with a short lease');
SELECT ok(claimq.complete(job_id, token), 'claim and complete x2') FROM claimq.claim('vw');
SELECT ok(claimq.fail(job_id, token, 'bad'), 'claim and fail d1 (dead)') FROM claimq.claim('vw');
SELECT is((SELECT count(*) FROM claimq.claim('vw', lease => '1 hour')), 1::bigint, 'claim d2');
SELECT results_eq($$SELECT j.payload->>'l', j.state FROM claimq.jobs j WHERE queue = 'vw'
					 ORDER BY j.payload->>'l'$$,
	$$VALUES ('c1', 'claimed'), ('c2', 'running'), ('c_old', 'claimed'), ('d1', 'dead'),
			 ('d2', 'claimed'), ('r1', 'pending'), ('r2', 'pending'), ('s1', 'pending'),
			 ('x1', 'running'), ('x2', 'done')$$,
	'the jobs are in the intended states');
SELECT pg_sleep(0.01);
SELECT results_eq($$SELECT queue, paused, ready, scheduled, claimed, running, expired, dead, done,
						   cancelled
					  FROM claimq.queue_stats WHERE queue = 'vw'$$,
	$$VALUES ('vw'::text, false, 2::bigint, 1::bigint, 3::bigint, 2::bigint, 2::bigint,
			  1::bigint, 1::bigint, 0::bigint)$$,
	'queue_stats counts each state; expired is the subset of claimed and running past their lease');
SELECT ok(oldest_ready_age BETWEEN '1 hour' AND '1 hour 5 minutes',
	'oldest_ready_age is the age of the oldest ready job, not of the older claimed one')
  FROM claimq.queue_stats WHERE queue = 'vw';
SELECT ok(oldest_claim_age BETWEEN '0' AND '5 minutes',
	'oldest_claim_age is the age of the oldest claim')
  FROM claimq.queue_stats WHERE queue = 'vw';
SELECT ok(oldest_claim_age > '0', 'and it grows with the wall clock')
  FROM claimq.queue_stats WHERE queue = 'vw';

SELECT lives_ok($$SELECT claimq.pause_queue('vw')$$, 'pause vw');
SELECT is((SELECT paused FROM claimq.queue_stats WHERE queue = 'vw'), true,
	'queue_stats shows the queue paused');
SELECT lives_ok($$SELECT claimq.create_queue('vw_empty')$$, 'create queue vw_empty');
SELECT results_eq($$SELECT queue FROM claimq.queue_stats WHERE queue LIKE 'vw%' ORDER BY queue$$,
	ARRAY['vw', 'vw_empty'], 'queue_stats has a row for every queue');
SELECT lives_ok($$SELECT claimq.purge_queue('vw')$$, 'purge vw');
SELECT results_eq($$SELECT ready, scheduled, oldest_ready_age FROM claimq.queue_stats WHERE queue = 'vw'$$,
	$$VALUES (0::bigint, 0::bigint, NULL::interval)$$,
	'no ready job: oldest_ready_age is NULL');

--
-- jobs
--
SELECT results_eq($$SELECT * FROM pg_temp.columns('claimq.jobs')$$,
	$$VALUES ('job_id'::name, 'bigint'), ('queue', 'text'), ('state', 'text'),
			 ('payload', 'jsonb'), ('priority', 'integer'),
			 ('run_at', 'timestamp with time zone'), ('attempts', 'integer'),
			 ('worker', 'text'), ('expires_at', 'timestamp with time zone'),
			 ('enqueued_at', 'timestamp with time zone'), ('dedup_key', 'text'),
			 ('last_error', 'text'), ('group_key', 'text'), ('max_attempts', 'integer'),
			 ('finished_at', 'timestamp with time zone'), ('result', 'jsonb'),
			 ('after_count', 'integer'), ('after_failed', 'text'), ('headers', 'jsonb')$$,
	'jobs has the documented columns, in order');
SELECT lives_ok($$SELECT claimq.create_queue('vw_jobs')$$, 'create queue vw_jobs');
SELECT clock_timestamp() AS t0 \gset
SELECT claimq.enqueue('vw_jobs', '{"x": [1, 2]}', run_at => '2020-02-02 02:02:02+00',
					  priority => 3, dedup_key => 'key', max_attempts => 7,
					  group_key => 'g') AS j \gset
SELECT clock_timestamp() AS t1 \gset
SELECT results_eq(format($$SELECT job_id, queue, state, payload, priority, run_at, attempts,
								  worker, expires_at, enqueued_at BETWEEN %L AND %L, dedup_key,
								  last_error, group_key, max_attempts, finished_at, result
							 FROM claimq.jobs WHERE job_id = %s$$, :'t0', :'t1', :j),
	format($$VALUES (%s::bigint, 'vw_jobs'::text, 'pending'::text, '{"x": [1, 2]}'::jsonb, 3,
					 '2020-02-02 02:02:02+00'::timestamptz, 0, NULL::text, NULL::timestamptz,
					 true, 'key'::text, NULL::text, 'g'::text, 7, NULL::timestamptz,
					 NULL::jsonb)$$, :j),
	'jobs shows a pending job');
SELECT expires_at AS e FROM claimq.claim('vw_jobs', worker => 'w-1', start => true) \gset
SELECT results_eq(format('SELECT state, attempts, worker, expires_at FROM claimq.jobs WHERE job_id = %s', :j),
	format($$VALUES ('running'::text, 1, 'w-1'::text, %L::timestamptz)$$, :'e'),
	'jobs shows a running job with its worker and expiry');
SELECT ok(claimq.fail(:j, token, 'went wrong', retry_in => '0'), 'fail it')
  FROM claimq.job WHERE job_id = :j;
SELECT results_eq(format('SELECT state, attempts, worker, expires_at, last_error FROM claimq.jobs WHERE job_id = %s', :j),
	$$VALUES ('pending'::text, 1, 'w-1'::text, NULL::timestamptz, 'went wrong'::text)$$,
	'jobs shows a retried job with its last error and the worker that last claimed it');
SELECT is((SELECT count(*) FROM claimq.claim('vw_jobs', worker => 'w-2')), 1::bigint,
	'claim it again with another worker');
SELECT is((SELECT worker FROM claimq.jobs WHERE job_id = :j), 'w-2',
	'jobs shows the new worker');
SELECT ok(claimq.release(:j, token), 'release it') FROM claimq.job WHERE job_id = :j;
SELECT is((SELECT worker FROM claimq.jobs WHERE job_id = :j), 'w-2',
	'after release, jobs still shows the worker that last claimed it');
SELECT is((SELECT cancelled FROM claimq.queue_stats WHERE queue = 'vw_jobs'), 0::bigint,
	'nothing cancelled yet');
SELECT is((SELECT outcome FROM claimq.cancel(ARRAY[:j]::bigint[])), 'ok', 'cancel it');
SELECT results_eq(format('SELECT state, finished_at IS NOT NULL FROM claimq.jobs WHERE job_id = %s', :j),
	$$VALUES ('cancelled'::text, true)$$, 'jobs shows it cancelled, with the time it finished');
SELECT results_eq($$SELECT ready, cancelled FROM claimq.queue_stats WHERE queue = 'vw_jobs'$$,
	$$VALUES (0::bigint, 1::bigint)$$, 'queue_stats counts it as cancelled, not ready');

--
-- schedules
--
SELECT results_eq($$SELECT * FROM pg_temp.columns('claimq.schedules')$$,
	$$VALUES ('schedule'::name, 'text'), ('queue', 'text'), ('cron', 'text'),
			 ('time_zone', 'text'), ('payload', 'jsonb'), ('priority', 'integer'),
			 ('missed', 'text'), ('enabled', 'boolean'),
			 ('next_run_at', 'timestamp with time zone'),
			 ('last_run_at', 'timestamp with time zone'), ('last_job_id', 'bigint'),
			 ('headers', 'jsonb')$$,
	'schedules has the documented columns, in order');

SELECT * FROM finish();
ROLLBACK;
