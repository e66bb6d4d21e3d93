-- Failing and retrying: attempts, backoff with jitter, retry_in, permanent
-- failures, exhaustion, and retry_dead.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(83);

-- Claim the one ready job of queue q and fail it: returns the fail row
-- and the wall clock just before and after the call.
CREATE FUNCTION pg_temp.claim_fail(q text, start boolean DEFAULT false,
								   error text DEFAULT NULL, retry_in interval DEFAULT NULL,
								   permanent boolean DEFAULT false)
RETURNS TABLE(job_id bigint, outcome text, state text, run_at timestamptz,
			  t0 timestamptz, t1 timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	c record;
	f record;
BEGIN
	SELECT * INTO STRICT c FROM claimq.claim(q, start => start);
	t0 := clock_timestamp();
	SELECT * INTO STRICT f
	  FROM claimq.fail(ARRAY[c.job_id], ARRAY[c.token], error, retry_in, permanent);
	t1 := clock_timestamp();
	job_id := f.job_id;
	outcome := f.outcome;
	state := f.state;
	run_at := f.run_at;
	RETURN NEXT;
END
$$;
-- Enqueue a job into q and fail it n - 1 times with retry_in => 0, so that
-- it is ready with n - 1 attempts counted.  Returns its id.
CREATE FUNCTION pg_temp.with_attempts(q text, n int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	id bigint := claimq.enqueue(q, jsonb_build_object('attempts', n - 1));
	c record;
BEGIN
	FOR i IN 1 .. n - 1 LOOP
		SELECT * INTO STRICT c FROM claimq.claim(q);
		IF c.job_id <> id THEN
			RAISE EXCEPTION 'claimed job % instead of %', c.job_id, id;
		END IF;
		PERFORM claimq.fail(c.job_id, c.token, 'try ' || i, '0');
	END LOOP;
	RETURN id;
END
$$;

SELECT lives_ok($$SELECT claimq.create_queue('rty', max_attempts => 10,
	retry_base => '10 seconds', retry_max => '35 seconds')$$, 'create queue rty');

--
-- Attempts
--
SELECT lives_ok($$SELECT claimq.enqueue('rty', '{}')$$, 'enqueue a job');
CREATE TEMP TABLE f1 AS SELECT * FROM pg_temp.claim_fail('rty', error => 'first');
SELECT results_eq($$SELECT outcome, state FROM f1$$, $$VALUES ('ok', 'pending')$$,
	'fail of a claimed job with attempts left: pending again');
SELECT results_eq($$SELECT j.state, j.attempts, j.last_error, j.run_at = f1.run_at, j.expires_at
					  FROM claimq.jobs j JOIN f1 USING (job_id)$$,
	$$VALUES ('pending', 1, 'first', true, NULL::timestamptz)$$,
	'failing a claimed job counts the attempt and keeps the error');
SELECT lives_ok($$SELECT claimq.enqueue('rty', '{}')$$, 'enqueue another job');
CREATE TEMP TABLE f2 AS SELECT * FROM pg_temp.claim_fail('rty', start => true);
SELECT results_eq($$SELECT j.state, j.attempts FROM claimq.jobs j JOIN f2 USING (job_id)$$,
	$$VALUES ('pending', 1)$$,
	'failing a running job counts no second attempt');

--
-- Backoff: retry_base * 2^(attempts - 1), capped at retry_max, less up to 20%.
--
SELECT ok(run_at BETWEEN t0 + '8 seconds' AND t1 + '10 seconds',
	'after attempt 1 the retry is 8 to 10 seconds away')
  FROM f1;
SELECT ok(run_at BETWEEN t0 + '8 seconds' AND t1 + '10 seconds',
	'the same after a started attempt 1')
  FROM f2;
SELECT ok(pg_temp.with_attempts('rty', 2) > 0, 'a job with 1 attempt used');
SELECT ok(f.run_at BETWEEN f.t0 + '16 seconds' AND f.t1 + '20 seconds',
	'after attempt 2 the retry is 16 to 20 seconds away')
  FROM pg_temp.claim_fail('rty') f;
SELECT ok(pg_temp.with_attempts('rty', 3) > 0, 'a job with 2 attempts used');
SELECT ok(f.run_at BETWEEN f.t0 + '28 seconds' AND f.t1 + '35 seconds',
	'after attempt 3 the backoff (40 s) is capped at retry_max (35 s)')
  FROM pg_temp.claim_fail('rty') f;
SELECT ok(pg_temp.with_attempts('rty', 6) > 0, 'a job with 5 attempts used');
SELECT ok(f.run_at BETWEEN f.t0 + '28 seconds' AND f.t1 + '35 seconds',
	'and stays capped after attempt 6')
  FROM pg_temp.claim_fail('rty') f;
SELECT is((SELECT attempts FROM claimq.jobs WHERE payload = '{"attempts": 5}'), 6,
	'that job has six attempts counted');

-- jitter: one call, one clock, twenty different retry times
SELECT lives_ok($$SELECT claimq.create_queue('rty_jitter', retry_base => '100 seconds')$$,
	'create queue rty_jitter');
SELECT lives_ok($$SELECT claimq.enqueue_many('rty_jitter', ARRAY(SELECT '{}'::jsonb
	FROM generate_series(1, 20)))$$, 'enqueue 20 jobs');
CREATE TEMP TABLE j20 AS SELECT * FROM claimq.claim('rty_jitter', max_jobs => 20);
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE jf AS
SELECT * FROM claimq.fail(ARRAY(SELECT job_id FROM j20), ARRAY(SELECT token FROM j20));
SELECT clock_timestamp() AS t1 \gset
SELECT is((SELECT count(*) FROM jf WHERE outcome = 'ok' AND state = 'pending'), 20::bigint,
	'fail 20 jobs in one call');
SELECT ok(bool_and(run_at BETWEEN :'t0'::timestamptz + '80 seconds'
							 AND :'t1'::timestamptz + '100 seconds'),
	'every retry is 80 to 100 seconds away')
  FROM jf;
SELECT cmp_ok((SELECT count(DISTINCT run_at) FROM jf), '>', 1::bigint,
	'retries of one batch are spread by jitter');
SELECT cmp_ok((SELECT max(run_at) - min(run_at) FROM jf), '<=', '20 seconds'::interval,
	'by at most 20% of the backoff');

-- retry_in: exact, no jitter
SELECT lives_ok($$SELECT claimq.enqueue_many('rty_jitter', ARRAY(SELECT '{}'::jsonb
	FROM generate_series(1, 5)))$$, 'enqueue 5 jobs');
CREATE TEMP TABLE j5 AS SELECT * FROM claimq.claim('rty_jitter', max_jobs => 5);
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE jr AS
SELECT * FROM claimq.fail(ARRAY(SELECT job_id FROM j5), ARRAY(SELECT token FROM j5),
						  retry_in => '42 seconds');
SELECT clock_timestamp() AS t1 \gset
SELECT is((SELECT count(DISTINCT run_at) FROM jr), 1::bigint,
	'retry_in: every job of the call gets the same run_at');
SELECT ok(bool_and(run_at BETWEEN :'t0'::timestamptz + '42 seconds'
							 AND :'t1'::timestamptz + '42 seconds'),
	'retry_in: run_at is exactly now plus retry_in')
  FROM jr;
SELECT results_eq($$SELECT run_at FROM claimq.jobs WHERE job_id IN (SELECT job_id FROM jr)$$,
	$$SELECT run_at FROM jr$$, 'the jobs view shows the run_at fail returned');
SELECT lives_ok($$SELECT claimq.enqueue('rty_jitter', '{"now": true}')$$, 'enqueue a job');
SELECT ok(run_at BETWEEN t0 AND t1, 'retry_in => 0 retries at once')
  FROM pg_temp.claim_fail('rty_jitter', retry_in => '0');
SELECT is((SELECT count(*) FROM claimq.claim('rty_jitter')), 1::bigint,
	'so the job can be claimed again right away');

-- retry_base 0 retries at once; retry_max below retry_base caps every retry
SELECT lives_ok($$SELECT claimq.create_queue('rty_zero', retry_base => '0')$$,
	'create queue rty_zero');
SELECT lives_ok($$SELECT claimq.enqueue('rty_zero', '{}')$$, 'enqueue a job');
SELECT ok(run_at BETWEEN t0 AND t1, 'retry_base 0: the retry is at once')
  FROM pg_temp.claim_fail('rty_zero');
SELECT lives_ok($$SELECT claimq.create_queue('rty_cap', retry_base => '1 hour',
	retry_max => '10 seconds')$$, 'create queue rty_cap');
SELECT lives_ok($$SELECT claimq.enqueue('rty_cap', '{}')$$, 'enqueue a job');
SELECT ok(run_at BETWEEN t0 + '8 seconds' AND t1 + '10 seconds',
	'retry_max below retry_base: the first retry is capped too')
  FROM pg_temp.claim_fail('rty_cap');

-- Retry settings as large as create_queue takes must not make fail error
-- out: either create_queue refuses them with 22023, or fail copes.
CREATE FUNCTION pg_temp.huge_retry_fail() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	f record;
BEGIN
	BEGIN
		PERFORM claimq.create_queue('rty_huge', retry_base => '100000000 years',
									retry_max => '100000000 years');
	EXCEPTION WHEN invalid_parameter_value THEN
		RETURN 'refused';
	END;
	PERFORM claimq.enqueue('rty_huge', '{}');
	SELECT * INTO STRICT f FROM pg_temp.claim_fail('rty_huge');
	RETURN f.outcome || ' ' || f.state;
EXCEPTION WHEN OTHERS THEN
	RETURN 'error ' || SQLSTATE || ': ' || SQLERRM;
END
$$;
SELECT matches(pg_temp.huge_retry_fail(), '^(refused|ok pending)$',
	'a queue with huge retry settings is refused, or fail on it works');

--
-- Dead: permanent, or out of attempts
--
SELECT lives_ok($$SELECT claimq.create_queue('rty_dead', max_attempts => 3,
	retry_base => '1 hour')$$, 'create queue rty_dead');
SELECT lives_ok($$SELECT claimq.enqueue('rty_dead', '{"p": 1}')$$, 'enqueue a job');
SELECT results_eq($$SELECT outcome, state, run_at FROM pg_temp.claim_fail('rty_dead',
						error => 'fatal', permanent => true)$$,
	$$VALUES ('ok', 'dead', NULL::timestamptz)$$,
	'permanent => true: dead at once, with no run_at returned');
SELECT results_eq($$SELECT state, attempts, last_error, expires_at FROM claimq.jobs
					 WHERE payload = '{"p": 1}'$$,
	$$VALUES ('dead', 1, 'fatal', NULL::timestamptz)$$,
	'the dead job counts the attempt and keeps the error');
SELECT lives_ok($$SELECT claimq.enqueue('rty_dead', '{"p": 2}')$$, 'enqueue a job');
SELECT results_eq($$SELECT state FROM pg_temp.claim_fail('rty_dead', start => true,
						permanent => true)$$,
	ARRAY['dead'], 'permanent => true from running: dead');
SELECT is((SELECT attempts FROM claimq.jobs WHERE payload = '{"p": 2}'), 1,
	'with one attempt counted');

SELECT ok(pg_temp.with_attempts('rty_dead', 3) > 0, 'a job with two attempts used');
SELECT results_eq($$SELECT outcome, state, run_at FROM pg_temp.claim_fail('rty_dead',
						error => 'third strike')$$,
	$$VALUES ('ok', 'dead', NULL::timestamptz)$$,
	'failing the last attempt makes the job dead');
SELECT results_eq($$SELECT state, attempts, last_error FROM claimq.jobs
					 WHERE payload = '{"attempts": 2}' AND queue = 'rty_dead'$$,
	$$VALUES ('dead', 3, 'third strike')$$,
	'the exhausted job keeps its attempts and the last error');
SELECT ok(pg_temp.with_attempts('rty_dead', 3) > 0, 'another job with two attempts used');
SELECT ok(claimq.start(job_id, token), 'claim and start its last attempt')
  FROM claimq.claim('rty_dead');
SELECT results_eq($$SELECT j.state, j.attempts, j.last_error
					  FROM claimq.jobs j
					 WHERE j.queue = 'rty_dead' AND j.state = 'running'$$,
	$$VALUES ('running', 3, 'try 2')$$, 'the running job is on its third attempt');
SELECT results_eq($$SELECT f.state FROM claimq.jobs j,
						LATERAL claimq.fail(ARRAY[j.job_id], ARRAY[(SELECT token FROM claimq.job WHERE job_id = j.job_id)]) f
					 WHERE j.queue = 'rty_dead' AND j.state = 'running'$$,
	ARRAY['dead'], 'failing a running last attempt makes the job dead');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'rty_dead'
			 AND payload = '{"attempts": 2}' AND state = 'dead' AND last_error IS NULL),
	1::bigint, 'a NULL error clears last_error');

SELECT lives_ok($$SELECT claimq.create_queue('rty_one', max_attempts => 1)$$,
	'create queue rty_one (max_attempts 1)');
SELECT lives_ok($$SELECT claimq.enqueue('rty_one', '{}')$$, 'enqueue a job');
SELECT results_eq($$SELECT state FROM pg_temp.claim_fail('rty_one')$$, ARRAY['dead'],
	'max_attempts 1: the first failure is the last');
SELECT lives_ok($$SELECT claimq.enqueue('rty_one', '{}')$$, 'enqueue a job');
SELECT results_eq($$SELECT state, run_at FROM pg_temp.claim_fail('rty_one', retry_in => '1 second')$$,
	$$VALUES ('dead'::text, NULL::timestamptz)$$,
	'retry_in does not bring back a job with no attempts left');
SELECT lives_ok($$SELECT claimq.enqueue('rty', '{"permanent": "retry_in"}')$$, 'enqueue a job');
SELECT results_eq($$SELECT state, run_at FROM pg_temp.claim_fail('rty', retry_in => '1 second',
						permanent => true)$$,
	$$VALUES ('dead'::text, NULL::timestamptz)$$,
	'permanent => true wins over retry_in');

--
-- retry_dead
--
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'rty_dead' AND state = 'dead'),
	4::bigint, 'rty_dead has four dead jobs');
SELECT is(claimq.retry_dead('rty_dead', ARRAY[-1]::bigint[]), 0::bigint,
	'retry_dead of ids that are not dead jobs of the queue: 0');
SELECT is(claimq.retry_dead('rty_dead', ARRAY(SELECT job_id FROM claimq.jobs WHERE queue = 'rty_one')),
	0::bigint, 'retry_dead does not touch another queue''s dead jobs');
SELECT is(claimq.retry_dead('rty_dead', '{}'), 0::bigint, 'retry_dead of no ids: 0');
SELECT throws_ok(format($$SELECT claimq.retry_dead('rty_dead', ARRAY[NULL, %s]::bigint[])$$,
		(SELECT min(job_id) FROM claimq.jobs WHERE queue = 'rty_dead' AND state = 'dead')),
	'22004', 'job_ids must not contain null elements',
	'retry_dead refuses NULL among job_ids (22004)');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'rty_dead' AND state = 'dead'),
	4::bigint, 'and redrives nothing, not even the id beside the NULL');
SELECT clock_timestamp() AS t0 \gset
SELECT is(claimq.retry_dead('rty_dead', ARRAY(SELECT job_id FROM claimq.jobs
												WHERE queue = 'rty_dead' AND payload = '{"p": 1}')),
	1::bigint, 'retry_dead of one listed job: 1');
SELECT results_eq(format($$SELECT state, attempts, expires_at, run_at BETWEEN %L AND clock_timestamp()
							 FROM claimq.jobs WHERE queue = 'rty_dead' AND payload = '{"p": 1}'$$, :'t0'),
	$$VALUES ('pending', 0, NULL::timestamptz, true)$$,
	'the redriven job is pending now with its attempts reset');
SELECT is(claimq.retry_dead('rty_dead'), 3::bigint, 'retry_dead of the whole queue: the other three');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'rty_dead' AND state = 'pending'
			 AND attempts = 0), 4::bigint, 'every job of the queue is pending with no attempts');
SELECT is(claimq.retry_dead('rty_dead'), 0::bigint, 'nothing left to redrive');
SELECT is((SELECT count(*) FROM claimq.claim('rty_dead', max_jobs => 10)), 4::bigint,
	'redriven jobs can be claimed');
SELECT is((SELECT dead FROM claimq.queue_stats WHERE queue = 'rty_one'), 2::bigint,
	'the other queue''s dead jobs are still dead');

-- dedup keys: a dead job whose key a live job holds stays dead
SELECT lives_ok($$SELECT claimq.create_queue('rty_key', max_attempts => 1)$$,
	'create queue rty_key');
CREATE FUNCTION pg_temp.dead_with_key(k text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	id bigint := claimq.enqueue('rty_key', jsonb_build_object('k', k), dedup_key => k);
	c record;
BEGIN
	SELECT * INTO STRICT c FROM claimq.claim('rty_key');
	PERFORM claimq.fail(c.job_id, c.token, permanent => true);
	RETURN id;
END
$$;
SELECT pg_temp.dead_with_key('k1') AS dk1 \gset
SELECT pg_temp.dead_with_key('k2') AS dk2 \gset
SELECT pg_temp.dead_with_key('k2') AS dk2b \gset
SELECT pg_temp.dead_with_key('k3') AS dk3 \gset
SELECT isnt(:dk2::bigint, :dk2b::bigint, 'two dead jobs with key k2');
SELECT claimq.enqueue('rty_key', '{"live": 1}', dedup_key => 'k1') AS live1 \gset
SELECT is(claimq.retry_dead('rty_key', ARRAY[:dk1]::bigint[]), 0::bigint,
	'retry_dead skips a dead job whose key a live job holds');
SELECT is((SELECT state FROM claimq.jobs WHERE job_id = :dk1), 'dead', 'that job stays dead');
SELECT is(claimq.retry_dead('rty_key'), 2::bigint,
	'retry_dead of the queue redrives k3 and one of the two k2 jobs');
SELECT results_eq(format($$SELECT job_id, state FROM claimq.jobs WHERE job_id IN (%s, %s, %s, %s)
							ORDER BY job_id$$, :dk1, :dk2, :dk2b, :dk3),
	format($$VALUES (%s::bigint, 'dead'::text), (%s, 'pending'), (%s, 'dead'), (%s, 'pending')$$,
		   :dk1, :dk2, :dk2b, :dk3),
	'the older k2 job is redriven, the newer one stays dead');
SELECT is(claimq.enqueue('rty_key', '{}', dedup_key => 'k2'), :dk2::bigint,
	'the redriven job holds its key again');
SELECT ok(claimq.complete(job_id, token), 'complete the live k1 job')
  FROM claimq.claim('rty_key', max_jobs => 10) WHERE job_id = :live1;
SELECT is(claimq.retry_dead('rty_key', ARRAY[:dk1]::bigint[]), 1::bigint,
	'once the key is free, the dead job can be redriven');

SELECT throws_ok(c, e, NULL, c || ' raises ' || e)
  FROM (VALUES ('SELECT claimq.retry_dead(''rty_nosuch'')', '42704'),
			   ('SELECT claimq.retry_dead(''bad name'')', '22023'),
			   ('SELECT claimq.retry_dead(NULL)', '22004'),
			   ('SELECT claimq.retry_dead(NULL, ''{1}'')', '22004')) v(c, e);

SELECT * FROM finish();
ROLLBACK;
