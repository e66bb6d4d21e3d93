-- Recovering: reclaim puts expired claims back.  Expired claimed jobs go
-- back to pending with no attempt counted; expired running jobs are a
-- failed attempt (retry with backoff, or dead).
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(44);

-- Jobs by label, with their state before reclaim.
CREATE TEMP TABLE h(label text PRIMARY KEY, job_id bigint, token bigint,
					run_at timestamptz);
CREATE FUNCTION pg_temp.take(q text, l text, lease interval, start boolean DEFAULT false)
RETURNS bigint LANGUAGE sql AS $$
	INSERT INTO pg_temp.h
	SELECT l, c.job_id, c.token, j.run_at
	  FROM claimq.claim(q, 1, lease, NULL, start) c
	  JOIN claimq.job j USING (job_id)
	RETURNING job_id
$$;
CREATE FUNCTION pg_temp.jid(l text) RETURNS bigint LANGUAGE sql AS
$$ SELECT job_id FROM pg_temp.h WHERE label = l $$;
-- state, attempts, last_error and whether run_at is unchanged
CREATE FUNCTION pg_temp.now_(l text)
RETURNS TABLE(state text, attempts int, last_error text, same_run_at boolean,
			  expires_at timestamptz)
LANGUAGE sql AS $$
	SELECT j.state, j.attempts, j.last_error, j.run_at = h.run_at, j.expires_at
	  FROM claimq.jobs j JOIN pg_temp.h h USING (job_id) WHERE h.label = l
$$;

SELECT lives_ok($$SELECT claimq.create_queue('rcl', max_attempts => 2,
	retry_base => '10 seconds', retry_max => '1 minute')$$, 'create queue rcl');
SELECT lives_ok($$SELECT claimq.create_queue('rcl_other')$$, 'create queue rcl_other');
SELECT lives_ok($$SELECT claimq.enqueue(q, '{}', run_at => clock_timestamp() - interval '1 hour')
					FROM unnest(ARRAY['rcl', 'rcl', 'rcl', 'rcl', 'rcl', 'rcl_other']) q$$,
	'enqueue five jobs into rcl and one into rcl_other, ready for an hour');
-- A job with one attempt used, claimed first (priority 1), to be dead after
-- an expired run.
SELECT lives_ok($$SELECT claimq.enqueue('rcl', '{}', priority => 1)$$,
	'enqueue a job of priority 1 into rcl');
SELECT lives_ok($$SELECT claimq.fail(c.job_id, c.token, 'earlier', retry_in => '0')
					FROM claimq.claim('rcl') c$$, 'use up one attempt of it');

SELECT is((SELECT count(*) FROM claimq.reclaim('rcl') WHERE released = 0 AND retried = 0 AND dead = 0),
	1::bigint, 'reclaim of a queue with nothing expired: one row of zeros');
SELECT results_eq($$SELECT * FROM claimq.reclaim('rcl')$$,
	$$VALUES ('rcl'::text, 0::bigint, 0::bigint, 0::bigint)$$,
	'that row names the queue');
SELECT is_empty($$SELECT * FROM claimq.reclaim() WHERE queue LIKE 'rcl%'$$,
	'reclaim of every queue with nothing expired: no rows');

-- last_attempt: running on its last attempt; claimed, running: short leases;
-- held: a long lease; other: another queue.
SELECT ok(pg_temp.take('rcl', 'last_attempt', '1 millisecond', true) > 0
		  AND pg_temp.take('rcl', 'claimed', '1 millisecond') > 0
		  AND pg_temp.take('rcl', 'running', '1 millisecond', true) > 0
		  AND pg_temp.take('rcl', 'held', '1 hour') > 0
		  AND pg_temp.take('rcl', 'held_running', '1 hour', true) > 0
		  AND pg_temp.take('rcl_other', 'other', '1 millisecond') > 0,
	'claim six jobs');
SELECT results_eq($$SELECT state, attempts FROM pg_temp.now_('last_attempt')$$,
	$$VALUES ('running', 2)$$, 'the oldest job runs its last attempt');
SELECT pg_sleep(0.01);
SELECT is((SELECT expired FROM claimq.queue_stats WHERE queue = 'rcl'), 3::bigint,
	'three claims of rcl have expired');

SELECT clock_timestamp() AS t0 \gset
SELECT results_eq($$SELECT * FROM claimq.reclaim('rcl')$$,
	$$VALUES ('rcl'::text, 1::bigint, 1::bigint, 1::bigint)$$,
	'reclaim of rcl: one released, one retried, one dead');
SELECT clock_timestamp() AS t1 \gset
SELECT results_eq($$SELECT * FROM pg_temp.now_('claimed')$$,
	$$VALUES ('pending', 0, NULL::text, true, NULL::timestamptz)$$,
	'an expired claimed job is pending again, no attempt counted, run_at unchanged');
SELECT results_eq($$SELECT state, attempts, last_error, expires_at FROM pg_temp.now_('running')$$,
	$$VALUES ('pending', 1, 'lease expired', NULL::timestamptz)$$,
	'an expired running job is pending again, its attempt counted once, last_error set');
SELECT ok(j.run_at BETWEEN :'t0'::timestamptz + '8 seconds' AND :'t1'::timestamptz + '10 seconds',
	'and is retried after the backoff')
  FROM claimq.jobs j WHERE j.job_id = pg_temp.jid('running');
SELECT results_eq($$SELECT state, attempts, last_error, expires_at FROM pg_temp.now_('last_attempt')$$,
	$$VALUES ('dead', 2, 'lease expired', NULL::timestamptz)$$,
	'an expired running job on its last attempt is dead');
SELECT results_eq($$SELECT l, s.state, s.attempts, s.same_run_at
					  FROM unnest(ARRAY['held', 'held_running', 'other']) l,
						   pg_temp.now_(l) s$$,
	$$VALUES ('held', 'claimed', 0, true), ('held_running', 'running', 1, true),
			 ('other', 'claimed', 0, true)$$,
	'claims not expired, and other queues, are untouched');
SELECT results_eq($$SELECT * FROM claimq.reclaim('rcl')$$,
	$$VALUES ('rcl'::text, 0::bigint, 0::bigint, 0::bigint)$$,
	'a second reclaim finds nothing');
SELECT is((SELECT job_id FROM claimq.claim('rcl')), pg_temp.jid('claimed'),
	'the released job can be claimed again');

-- reclaim() of every queue: one row per queue with anything reclaimed
SELECT ok(pg_temp.take('rcl', 'again', '1 millisecond') > 0, 'claim another job of rcl');
SELECT pg_sleep(0.01);
SELECT bag_eq($$SELECT * FROM claimq.reclaim() WHERE queue LIKE 'rcl%'$$,
	$$VALUES ('rcl'::text, 1::bigint, 0::bigint, 0::bigint),
			 ('rcl_other', 1, 0, 0)$$,
	'reclaim() returns a row per queue it reclaimed from');
SELECT results_eq($$SELECT * FROM claimq.reclaim(NULL)$$,
	$$SELECT NULL::text, NULL::bigint, NULL::bigint, NULL::bigint WHERE false$$,
	'reclaim(NULL) finds nothing left');

-- max_jobs
SELECT lives_ok($$SELECT claimq.create_queue('rcl_many')$$, 'create queue rcl_many');
SELECT lives_ok($$SELECT claimq.enqueue_many('rcl_many', ARRAY(SELECT '{}'::jsonb
	FROM generate_series(1, 5)))$$, 'enqueue five jobs');
SELECT is((SELECT count(*) FROM claimq.claim('rcl_many', max_jobs => 5, lease => '1 millisecond')),
	5::bigint, 'claim them with a 1 ms lease');
SELECT pg_sleep(0.01);
SELECT results_eq($$SELECT * FROM claimq.reclaim('rcl_many', max_jobs => 2)$$,
	$$VALUES ('rcl_many'::text, 2::bigint, 0::bigint, 0::bigint)$$,
	'reclaim with max_jobs => 2 reclaims two');
SELECT results_eq($$SELECT * FROM claimq.reclaim('rcl_many', 2)$$,
	$$VALUES ('rcl_many'::text, 2::bigint, 0::bigint, 0::bigint)$$, 'two more');
SELECT results_eq($$SELECT * FROM claimq.reclaim('rcl_many', 2)$$,
	$$VALUES ('rcl_many'::text, 1::bigint, 0::bigint, 0::bigint)$$, 'the last one');
SELECT is((SELECT ready FROM claimq.queue_stats WHERE queue = 'rcl_many'), 5::bigint,
	'all five are ready again');

-- Retry settings as large as create_queue takes must not make reclaim fail
-- (which would strand the expired claims of every queue): either
-- create_queue refuses them with 22023, or reclaim copes.
CREATE FUNCTION pg_temp.huge_retry_reclaim() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r record;
BEGIN
	BEGIN
		PERFORM claimq.create_queue('rcl_huge', retry_base => '100000000 years',
									retry_max => '100000000 years');
	EXCEPTION WHEN invalid_parameter_value THEN
		RETURN 'refused';
	END;
	PERFORM claimq.enqueue(q, '{}') FROM unnest(ARRAY['rcl_huge', 'rcl_many']) q;
	PERFORM claimq.claim(q, lease => '1 millisecond', start => s)
	   FROM (VALUES ('rcl_huge', true), ('rcl_many', false)) v(q, s);
	PERFORM pg_sleep(0.01);
	SELECT count(*) FILTER (WHERE queue = 'rcl_huge' AND retried = 1) AS huge,
		   count(*) FILTER (WHERE queue = 'rcl_many' AND released = 1) AS many
	  INTO r FROM claimq.reclaim();
	RETURN format('reclaimed %s %s', r.huge, r.many);
EXCEPTION WHEN OTHERS THEN
	RETURN 'error ' || SQLSTATE || ': ' || SQLERRM;
END
$$;
SELECT matches(pg_temp.huge_retry_reclaim(), '^(refused|reclaimed 1 1)$',
	'a queue with huge retry settings is refused, or reclaim of it and of other queues works');

SELECT lives_ok($$SELECT * FROM claimq.reclaim('rcl', 10000)$$,
	'reclaim with max_jobs => 10000 is allowed');
SELECT throws_ok(c, e, NULL, c || ' raises ' || e)
  FROM (VALUES ('SELECT * FROM claimq.reclaim(''rcl'', 0)', '22023'),
			   ('SELECT * FROM claimq.reclaim(''rcl'', -1)', '22023'),
			   ('SELECT * FROM claimq.reclaim(NULL, 0)', '22023'),
			   ('SELECT * FROM claimq.reclaim(''rcl'', 10001)', '22023'),
			   ('SELECT * FROM claimq.reclaim(NULL, 2147483647)', '22023'),
			   ('SELECT * FROM claimq.reclaim(''rcl'', NULL)', '22004'),
			   ('SELECT * FROM claimq.reclaim(''rcl_nosuch'')', '42704'),
			   ('SELECT * FROM claimq.reclaim(''bad name'')', '22023')) v(c, e);

--
-- maintain(): the reclaimer's steps once, one row per step, in order.
--
SELECT lives_ok($$SELECT * FROM claimq.maintain()$$, 'maintain() runs');
SELECT results_eq($$SELECT * FROM claimq.maintain()$$,
	$$VALUES ('reclaim'::text, 0::bigint), ('fire_schedules', 0), ('prune', 0), ('sweep_keys', 0)$$,
	'with nothing to do, maintain() still returns its four steps, in order');
-- One of each: an expired claim, a due schedule, a done job past its
-- retention, an expired key claim.
DO $$
BEGIN
	PERFORM claimq.create_queue('rcl_m', keep_done => '1 second');
	PERFORM claimq.enqueue('rcl_m', '{}') FROM generate_series(1, 2);
	PERFORM claimq.complete(c.job_id, c.token) FROM claimq.claim('rcl_m') c;
	UPDATE claimq.job SET finished_at = finished_at - interval '1 minute'
	 WHERE state = 'done'
	   AND queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'rcl_m');
	PERFORM claimq.claim('rcl_m', lease => '1 millisecond');
	PERFORM claimq.create_schedule('rcl_m_every', 'rcl_m', '@every 10 minutes');
	UPDATE claimq.schedule SET next_run_at = clock_timestamp() - interval '1 minute'
	 WHERE name = 'rcl_m_every';
	PERFORM claimq.claim_keys('rcl_m', '{k}', '1 millisecond');
	PERFORM pg_sleep(0.01);
END
$$;
SELECT results_eq($$SELECT * FROM claimq.maintain()$$,
	$$VALUES ('reclaim'::text, 1::bigint), ('fire_schedules', 1), ('prune', 1), ('sweep_keys', 1)$$,
	'maintain() reclaims, fires, prunes and sweeps one of each');
SELECT results_eq($$SELECT state, count(*) FROM claimq.jobs WHERE queue = 'rcl_m' GROUP BY state$$,
	$$VALUES ('pending'::text, 2::bigint)$$,
	'the expired claim is pending again, the schedule''s job enqueued, the done job gone');
SELECT is((SELECT count(*) FROM claimq.key_claim), 0::bigint, 'the expired key claim is gone');

SELECT * FROM finish();
ROLLBACK;
