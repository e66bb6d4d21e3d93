-- Working: start, extend, complete, fail and release, in their array and
-- scalar forms; the fence (ok, stale, started, missing); input order and
-- duplicates; array checks; expired and reclaimed claims; release_worker.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(185);

-- Claims made by the tests, by label.  'nope' is a job that never existed.
CREATE TEMP TABLE h(label text PRIMARY KEY, job_id bigint NOT NULL, token bigint NOT NULL);
INSERT INTO h VALUES ('nope', -1, 1);
-- Claim one job of queue q and remember it as label l.
CREATE FUNCTION pg_temp.take(q text, l text, lease interval DEFAULT NULL,
							 start boolean DEFAULT false, worker text DEFAULT NULL)
RETURNS bigint LANGUAGE sql AS $$
	INSERT INTO pg_temp.h
	SELECT l, c.job_id, c.token FROM claimq.claim(q, 1, lease, worker, start) c
	RETURNING job_id
$$;
-- Remember job j under label l with token t.
CREATE FUNCTION pg_temp.keep(l text, j bigint, t bigint)
RETURNS void LANGUAGE sql AS $$ INSERT INTO pg_temp.h VALUES (l, j, t) $$;
CREATE FUNCTION pg_temp.jid(l text) RETURNS bigint LANGUAGE sql AS
$$ SELECT job_id FROM pg_temp.h WHERE label = l $$;
CREATE FUNCTION pg_temp.tok(l text) RETURNS bigint LANGUAGE sql AS
$$ SELECT token FROM pg_temp.h WHERE label = l $$;
-- The job ids and tokens of labels, in order.
CREATE FUNCTION pg_temp.ids(VARIADIC l text[]) RETURNS bigint[] LANGUAGE sql AS $$
	SELECT COALESCE(array_agg(h.job_id ORDER BY u.ord), '{}')
	  FROM unnest(l) WITH ORDINALITY u(label, ord) LEFT JOIN pg_temp.h USING (label)
$$;
CREATE FUNCTION pg_temp.toks(VARIADIC l text[]) RETURNS bigint[] LANGUAGE sql AS $$
	SELECT COALESCE(array_agg(h.token ORDER BY u.ord), '{}')
	  FROM unnest(l) WITH ORDINALITY u(label, ord) LEFT JOIN pg_temp.h USING (label)
$$;
-- The rows (job_id, outcome) expected for labels and outcomes.
CREATE FUNCTION pg_temp.expect(l text[], o text[])
RETURNS TABLE(job_id bigint, outcome text) LANGUAGE sql AS $$
	SELECT * FROM unnest(pg_temp.ids(VARIADIC l), o)
$$;
CREATE FUNCTION pg_temp.state(l text) RETURNS text LANGUAGE sql AS
$$ SELECT state FROM claimq.jobs WHERE job_id = pg_temp.jid(l) $$;
CREATE FUNCTION pg_temp.attempts(l text) RETURNS int LANGUAGE sql AS
$$ SELECT attempts FROM claimq.jobs WHERE job_id = pg_temp.jid(l) $$;
CREATE FUNCTION pg_temp.expires(l text) RETURNS timestamptz LANGUAGE sql AS
$$ SELECT expires_at FROM claimq.jobs WHERE job_id = pg_temp.jid(l) $$;

SELECT lives_ok($$SELECT claimq.create_queue('stl', lease => '30 seconds',
	run_lease => '5 minutes')$$, 'create queue stl');
SELECT lives_ok($$SELECT claimq.create_queue('stl_keep', keep_done => '1 day')$$,
	'create queue stl_keep (keeps done jobs)');
SELECT lives_ok($$SELECT claimq.enqueue_many(q, ARRAY(SELECT jsonb_build_object('i', i)
	FROM generate_series(1, 40) i)) FROM unnest(ARRAY['stl', 'stl_keep']) q$$,
	'enqueue 40 jobs into each');
SELECT lives_ok($$SELECT claimq.enqueue('stl', '{}') FROM generate_series(1, 2)$$,
	'enqueue two more');

-- a pending job that nobody claimed: 'idle', with a made-up token
SELECT pg_temp.keep('idle', max(job_id), 1) FROM claimq.jobs WHERE queue = 'stl';

--
-- start
--
SELECT ok(pg_temp.take('stl', 'a') > 0 AND pg_temp.take('stl', 'b') > 0,
	'claim jobs a and b');
SELECT pg_temp.keep('a_bad', pg_temp.jid('a'), pg_temp.tok('b'));
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE r AS
SELECT * FROM claimq.start(pg_temp.ids('b', 'nope', 'a_bad', 'a', 'idle'),
						   pg_temp.toks('b', 'nope', 'a_bad', 'a', 'idle'))
	   WITH ORDINALITY AS s(job_id, outcome, expires_at, ord);
SELECT clock_timestamp() AS t1 \gset
SELECT results_eq($$SELECT job_id, outcome FROM r ORDER BY ord$$,
	$$SELECT * FROM pg_temp.expect('{b,nope,a_bad,a,idle}', '{ok,missing,stale,ok,stale}')$$,
	'start: one outcome per pair, in input order');
SELECT ok(bool_and(expires_at BETWEEN :'t0'::timestamptz + '5 minutes'
								  AND :'t1'::timestamptz + '5 minutes'),
	'start: the new expiry is the wall clock plus the queue''s run_lease')
  FROM r WHERE outcome = 'ok';
SELECT is((SELECT count(*) FROM r WHERE outcome <> 'ok' AND expires_at IS NULL), 3::bigint,
	'start: expires_at is NULL for the pairs that were not ok');
SELECT results_eq($$SELECT pg_temp.state(l), pg_temp.attempts(l)
					  FROM unnest(ARRAY['a', 'b', 'idle']) l$$,
	$$VALUES ('running', 1), ('running', 1), ('pending', 0)$$,
	'start made a and b running and counted their attempts; the rest unchanged');
SELECT is(pg_temp.expires('a'), (SELECT expires_at FROM r WHERE outcome = 'ok' AND job_id = pg_temp.jid('a')),
	'start: the expiry returned is the one stored');
-- start again under the same token
SELECT clock_timestamp() AS t0 \gset
SELECT results_eq($$SELECT outcome FROM claimq.start(pg_temp.ids('a'), pg_temp.toks('a'),
														lease => '1 hour')$$,
	ARRAY['ok'], 'start of a running job under its token is ok');
SELECT ok(pg_temp.expires('a') BETWEEN :'t0'::timestamptz + '1 hour' AND clock_timestamp() + '1 hour',
	'start with a lease renews the lease by that much');
SELECT is(pg_temp.attempts('a'), 1, 'a second start counts no second attempt');
-- scalar start
SELECT ok(pg_temp.take('stl', 'c') > 0, 'claim job c');
SELECT is(claimq.start(pg_temp.jid('c'), pg_temp.tok('c')), true, 'scalar start: true when ok');
SELECT is(claimq.start(pg_temp.jid('c'), pg_temp.tok('b')), false, 'scalar start: false when stale');
SELECT is(claimq.start(-1::bigint, 1::bigint), false, 'scalar start: false when missing');
SELECT is(claimq.start(pg_temp.jid('idle'), pg_temp.tok('idle')), false,
	'scalar start: false for a pending job');
SELECT is(pg_temp.state('idle'), 'pending', 'the pending job stays pending');
SELECT is(claimq.start(pg_temp.jid('c'), pg_temp.tok('c'), lease => NULL), true,
	'scalar start with lease => NULL');

--
-- extend
--
SELECT ok(pg_temp.take('stl', 'd') > 0, 'claim job d (claimed, not started)');
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE x AS
SELECT * FROM claimq.extend(pg_temp.ids('d', 'a', 'nope', 'idle', 'a_bad'),
							pg_temp.toks('d', 'a', 'nope', 'idle', 'a_bad'))
	   WITH ORDINALITY AS s(job_id, outcome, expires_at, ord);
SELECT clock_timestamp() AS t1 \gset
SELECT results_eq($$SELECT job_id, outcome FROM x ORDER BY ord$$,
	$$SELECT * FROM pg_temp.expect('{d,a,nope,idle,a_bad}', '{ok,ok,missing,stale,stale}')$$,
	'extend: one outcome per pair, in input order');
SELECT ok(expires_at BETWEEN :'t0'::timestamptz + '30 seconds' AND :'t1'::timestamptz + '30 seconds',
	'extend of a claimed job: now plus the queue''s lease')
  FROM x WHERE ord = 1;
SELECT ok(expires_at BETWEEN :'t0'::timestamptz + '5 minutes' AND :'t1'::timestamptz + '5 minutes',
	'extend of a running job: now plus the queue''s run_lease')
  FROM x WHERE ord = 2;
SELECT is((SELECT count(*) FROM x WHERE outcome <> 'ok' AND expires_at IS NULL), 3::bigint,
	'extend: expires_at is NULL for the pairs that were not ok');
SELECT results_eq($$SELECT pg_temp.state(l), pg_temp.attempts(l) FROM unnest(ARRAY['d', 'a']) l$$,
	$$VALUES ('claimed', 0), ('running', 1)$$,
	'extend changes neither state nor attempts');
SELECT clock_timestamp() AS t0 \gset
SELECT results_eq($$SELECT outcome FROM claimq.extend(pg_temp.ids('d', 'a'), pg_temp.toks('d', 'a'),
														 lease => '7 days')$$,
	ARRAY['ok', 'ok'], 'extend with a lease');
SELECT ok(pg_temp.expires('d') >= :'t0'::timestamptz + '7 days'
		  AND pg_temp.expires('a') >= :'t0'::timestamptz + '7 days',
	'extend with a lease renews by that lease');
SELECT is(claimq.extend(pg_temp.jid('d'), pg_temp.tok('d'), '1 second'), true,
	'scalar extend: true when ok');
SELECT ok(pg_temp.expires('d') < :'t0'::timestamptz + '1 day',
	'extend can shorten a lease too: the new expiry is from now');
SELECT is(claimq.extend(pg_temp.jid('d'), pg_temp.tok('a')), false, 'scalar extend: false when stale');
SELECT is(claimq.extend(-1::bigint, 1::bigint), false, 'scalar extend: false when missing');

--
-- complete
--
SELECT ok(pg_temp.take('stl', 'e') > 0, 'claim job e');
SELECT pg_temp.keep('b_bad', pg_temp.jid('b'), pg_temp.tok('c'));
SELECT results_eq($$SELECT job_id, outcome
					  FROM claimq.complete(pg_temp.ids('nope', 'a', 'd', 'e', 'b_bad', 'idle'),
										   pg_temp.toks('nope', 'a', 'd', 'e', 'b_bad', 'idle'))$$,
	$$SELECT * FROM pg_temp.expect('{nope,a,d,e,b_bad,idle}', '{missing,ok,ok,ok,stale,stale}')$$,
	'complete: one outcome per pair, in input order');
SELECT is((SELECT count(*) FROM claimq.job WHERE job_id = ANY (pg_temp.ids('a', 'd', 'e'))),
	0::bigint, 'complete deleted the running job and the claimed ones');
SELECT is(pg_temp.state('idle'), 'pending', 'complete left the pending job alone');
SELECT results_eq($$SELECT outcome FROM claimq.complete(pg_temp.ids('a'), pg_temp.toks('a'))$$,
	ARRAY['missing'], 'complete of a deleted job: missing');
SELECT is(claimq.complete(pg_temp.jid('c'), pg_temp.tok('c')), true, 'scalar complete: true when ok');
SELECT is(claimq.complete(pg_temp.jid('c'), pg_temp.tok('c')), false,
	'scalar complete: false the second time');
SELECT is(claimq.complete(pg_temp.jid('b'), pg_temp.tok('d')), false,
	'scalar complete: false when stale');
SELECT is(pg_temp.state('b'), 'running', 'a stale complete left the job as it was');
-- keep_done
SELECT ok(pg_temp.take('stl_keep', 'k1') > 0 AND pg_temp.take('stl_keep', 'k2', start => true) > 0,
	'claim k1 and claim and start k2 on the keep_done queue');
SELECT results_eq($$SELECT outcome FROM claimq.complete(pg_temp.ids('k1', 'k2'), pg_temp.toks('k1', 'k2'))$$,
	ARRAY['ok', 'ok'], 'complete on a keep_done queue');
SELECT results_eq($$SELECT state, attempts, expires_at FROM claimq.jobs
					 WHERE job_id = ANY (pg_temp.ids('k1', 'k2')) ORDER BY attempts$$,
	$$VALUES ('done', 0, NULL::timestamptz), ('done', 1, NULL)$$,
	'completed jobs are kept as done; completing a claimed job counts no attempt');
SELECT results_eq($$SELECT outcome FROM claimq.complete(pg_temp.ids('k1'), pg_temp.toks('k1'))$$,
	ARRAY['stale'], 'complete of a done job: stale');
SELECT is((SELECT done FROM claimq.queue_stats WHERE queue = 'stl_keep'), 2::bigint,
	'queue_stats counts the done jobs');
SELECT ok(pg_temp.take('stl_keep', 'k3') > 0 AND pg_temp.take('stl', 'm2') > 0,
	'claim k3 on the keep_done queue and m2 on another');
SELECT results_eq($$SELECT outcome FROM claimq.complete(pg_temp.ids('k3', 'm2'), pg_temp.toks('k3', 'm2'))$$,
	ARRAY['ok', 'ok'], 'one complete call across a keep_done queue and another');
SELECT results_eq($$SELECT state::text FROM claimq.job WHERE job_id = ANY (pg_temp.ids('k3', 'm2'))$$,
	ARRAY['done'], 'each job settled as its own queue says: kept as done, deleted');

--
-- fail (the backoff and dead paths are in retry.sql)
--
SELECT ok(pg_temp.take('stl', 'f') > 0 AND pg_temp.take('stl', 'g', start => true) > 0,
	'claim f, claim and start g');
CREATE TEMP TABLE fl AS
SELECT * FROM claimq.fail(pg_temp.ids('f', 'nope', 'g', 'b_bad', 'idle'),
						  pg_temp.toks('f', 'nope', 'g', 'b_bad', 'idle'), 'oops')
	   WITH ORDINALITY AS s(job_id, outcome, state, run_at, ord);
SELECT results_eq($$SELECT job_id, outcome FROM fl ORDER BY ord$$,
	$$SELECT * FROM pg_temp.expect('{f,nope,g,b_bad,idle}', '{ok,missing,ok,stale,stale}')$$,
	'fail: one outcome per pair, in input order');
SELECT results_eq($$SELECT state, run_at > now() FROM fl ORDER BY ord$$,
	$$VALUES ('pending', true), (NULL, NULL), ('pending', true), (NULL, NULL), (NULL, NULL)$$,
	'fail: state and run_at for ok pairs, NULL for the others');
SELECT results_eq($$SELECT pg_temp.state(l), pg_temp.attempts(l), last_error
					  FROM unnest(ARRAY['f', 'g']) l
					  JOIN claimq.jobs j ON j.job_id = pg_temp.jid(l)$$,
	$$VALUES ('pending', 1, 'oops'), ('pending', 1, 'oops')$$,
	'failed jobs are pending again, with one attempt and the error');
SELECT ok(pg_temp.take('stl', 'h') > 0, 'claim h');
SELECT is(claimq.fail(pg_temp.jid('h'), pg_temp.tok('h')), true, 'scalar fail: true when ok');
SELECT is(claimq.fail(pg_temp.jid('h'), pg_temp.tok('h')), false,
	'scalar fail: false the second time (the job is pending)');
SELECT is(claimq.fail(-1::bigint, 1::bigint, 'x', '1 second', true), false,
	'scalar fail: false when missing');

--
-- release
--
SELECT ok(pg_temp.take('stl', 'i') > 0 AND pg_temp.take('stl', 'j') > 0
		  AND pg_temp.take('stl', 'l', start => true) > 0,
	'claim i and j, claim and start l');
SELECT pg_temp.keep('l_bad', pg_temp.jid('l'), pg_temp.tok('i'));
CREATE TEMP TABLE before_release AS
SELECT job_id, run_at, attempts, priority FROM claimq.jobs WHERE job_id = ANY (pg_temp.ids('i', 'j'));
SELECT results_eq($$SELECT job_id, outcome
					  FROM claimq.release(pg_temp.ids('j', 'l', 'nope', 'l_bad', 'idle', 'i'),
										  pg_temp.toks('j', 'l', 'nope', 'l_bad', 'idle', 'i'))$$,
	$$SELECT * FROM pg_temp.expect('{j,l,nope,l_bad,idle,i}', '{ok,started,missing,stale,stale,ok}')$$,
	'release: one outcome per pair, in input order; a started job reports started');
SELECT results_eq($$SELECT state, expires_at FROM claimq.jobs
					 WHERE job_id = ANY (pg_temp.ids('i', 'j')) ORDER BY job_id$$,
	$$VALUES ('pending', NULL::timestamptz), ('pending', NULL)$$,
	'released jobs are pending with no expiry');
SELECT results_eq($$SELECT job_id, run_at, attempts, priority FROM claimq.jobs
					 WHERE job_id = ANY (pg_temp.ids('i', 'j')) ORDER BY job_id$$,
	$$SELECT * FROM before_release ORDER BY job_id$$,
	'release keeps run_at, attempts and priority');
SELECT is(pg_temp.state('l'), 'running', 'release left the running job alone');
SELECT results_eq($$SELECT outcome FROM claimq.release(pg_temp.ids('i'), pg_temp.toks('i'))$$,
	ARRAY['stale'], 'release of a released job: stale');
SELECT is(claimq.release(pg_temp.jid('l'), pg_temp.tok('l')), false,
	'scalar release: false for a started job');
SELECT ok(pg_temp.take('stl', 'm') > 0, 'claim m');
SELECT is(claimq.release(pg_temp.jid('m'), pg_temp.tok('m')), true, 'scalar release: true when ok');
SELECT is(claimq.release(pg_temp.jid('m'), pg_temp.tok('m')), false,
	'scalar release: false the second time');
SELECT is(claimq.release(-1::bigint, 1::bigint), false, 'scalar release: false when missing');

--
-- Duplicate pairs: one row each, the job settled once.
--
SELECT ok(pg_temp.take('stl', 'n') > 0, 'claim n');
SELECT results_eq($$SELECT job_id, outcome FROM claimq.start(pg_temp.ids('n', 'n'), pg_temp.toks('n', 'n'))$$,
	$$SELECT * FROM pg_temp.expect('{n,n}', '{ok,ok}')$$,
	'start with a pair given twice: a row for each, both ok');
SELECT is(pg_temp.attempts('n'), 1, 'the attempt was counted once');
SELECT results_eq($$SELECT job_id, outcome FROM claimq.extend(pg_temp.ids('n', 'n'), pg_temp.toks('n', 'n'))$$,
	$$SELECT * FROM pg_temp.expect('{n,n}', '{ok,ok}')$$,
	'extend with a pair given twice: a row for each, both ok');
SELECT pg_temp.keep('n_bad', pg_temp.jid('n'), pg_temp.tok('m'));
SELECT results_eq($$SELECT job_id, outcome FROM claimq.extend(pg_temp.ids('n_bad', 'n', 'n_bad'),
																pg_temp.toks('n_bad', 'n', 'n_bad'))$$,
	$$SELECT * FROM pg_temp.expect('{n_bad,n,n_bad}', '{stale,ok,stale}')$$,
	'one job with a good and a bad token: each pair gets its own outcome');
CREATE TEMP TABLE dup AS
SELECT * FROM claimq.complete(pg_temp.ids('n', 'n'), pg_temp.toks('n', 'n'))
	   WITH ORDINALITY AS s(job_id, outcome, ord);
SELECT results_eq($$SELECT job_id, outcome FROM dup ORDER BY ord$$,
	$$SELECT * FROM pg_temp.expect('{n,n}', '{ok,ok}')$$,
	'complete with a pair given twice: a row for each, both ok');
SELECT is((SELECT count(*) FROM claimq.job WHERE job_id = pg_temp.jid('n')), 0::bigint,
	'the job is completed');
SELECT ok(pg_temp.take('stl', 'o') > 0, 'claim o');
CREATE TEMP TABLE dup2 AS
SELECT * FROM claimq.release(pg_temp.ids('o', 'o'), pg_temp.toks('o', 'o'))
	   WITH ORDINALITY AS s(job_id, outcome, ord);
SELECT results_eq($$SELECT job_id, outcome FROM dup2 ORDER BY ord$$,
	$$SELECT * FROM pg_temp.expect('{o,o}', '{ok,ok}')$$,
	'release with a pair given twice: a row for each, both ok');
SELECT is(pg_temp.state('o'), 'pending', 'the job is released');

--
-- Array checks
--
SELECT is_empty(format('SELECT * FROM claimq.%s(''{}''::bigint[], ''{}''::bigint[])', f),
	f || ' with empty arrays returns no rows')
  FROM unnest(ARRAY['start', 'extend', 'complete', 'fail', 'release']) f;
SELECT throws_ok(format('SELECT * FROM claimq.%s(%s)', f, a), e, NULL,
	format('%s(%s) raises %s', f, a, e))
  FROM unnest(ARRAY['start', 'extend', 'complete', 'fail', 'release']) f,
	   (VALUES ('''{1,2}''::bigint[], ''{1}''::bigint[]', '22023'),
			   ('''{1}''::bigint[], ''{1,2}''::bigint[]', '22023'),
			   ('''{}''::bigint[], ''{1}''::bigint[]', '22023'),
			   ('''{{1},{2}}''::bigint[], ''{{1},{2}}''::bigint[]', '22023'),
			   ('''{1,NULL}''::bigint[], ''{1,2}''::bigint[]', '22004'),
			   ('''{1,2}''::bigint[], ''{NULL,2}''::bigint[]', '22004'),
			   ('NULL::bigint[], ''{1}''::bigint[]', '22004'),
			   ('''{1}''::bigint[], NULL::bigint[]', '22004'),
			   ('ARRAY(SELECT g FROM generate_series(1, 10001) g), ARRAY(SELECT g FROM generate_series(1, 10001) g)', '22023')) v(a, e);
SELECT is((SELECT count(*) FILTER (WHERE outcome = 'missing')
			 FROM claimq.complete(ARRAY(SELECT -g FROM generate_series(1, 10000) g),
								  ARRAY(SELECT g FROM generate_series(1, 10000) g))),
	10000::bigint, '10000 pairs in one call are allowed');
SELECT throws_ok(format('SELECT claimq.%s(%s)', f, a), '22004', NULL,
	format('scalar %s(%s) raises 22004', f, a))
  FROM unnest(ARRAY['start', 'extend', 'complete', 'fail', 'release']) f,
	   unnest(ARRAY['NULL::bigint, 1::bigint', '1::bigint, NULL::bigint']) a;
SELECT throws_ok(c, e, NULL, c || ' raises ' || e)
  FROM (VALUES
	('SELECT * FROM claimq.start(''{1}''::bigint[], ''{1}''::bigint[], lease => ''0'')', '22023'),
	('SELECT * FROM claimq.start(''{1}''::bigint[], ''{1}''::bigint[], lease => ''7 days 1 second'')', '22023'),
	('SELECT claimq.start(1::bigint, 1::bigint, lease => ''-1 second'')', '22023'),
	('SELECT * FROM claimq.extend(''{1}''::bigint[], ''{1}''::bigint[], lease => ''0'')', '22023'),
	('SELECT * FROM claimq.extend(''{1}''::bigint[], ''{1}''::bigint[], lease => ''8 days'')', '22023'),
	('SELECT claimq.extend(1::bigint, 1::bigint, lease => ''0'')', '22023'),
	('SELECT * FROM claimq.fail(''{1}''::bigint[], ''{1}''::bigint[], retry_in => ''-1 second'')', '22023'),
	('SELECT claimq.fail(1::bigint, 1::bigint, retry_in => ''-1 second'')', '22023'),
	('SELECT claimq.fail(1::bigint, 1::bigint, retry_in => ''101 years'')', '22023'),
	('SELECT claimq.fail(1::bigint, 1::bigint, retry_in => ''-10 months 302 days'')', '22023'),
	('SELECT claimq.extend(1::bigint, 1::bigint, lease => ''-10 months 302 days'')', '22023'),
	('SELECT * FROM claimq.fail(''{1}''::bigint[], ''{1}''::bigint[], permanent => NULL)', '22004'),
	('SELECT claimq.fail(1::bigint, 1::bigint, permanent => NULL)', '22004')) v(c, e);
SELECT is(pg_temp.state('b'), 'running', 'no refused call touched a job');

--
-- Expired but not reclaimed: the token still works.
--
SELECT lives_ok($$SELECT claimq.create_queue('stl_exp')$$, 'create queue stl_exp');
SELECT lives_ok($$SELECT claimq.enqueue_many('stl_exp', ARRAY(SELECT '{}'::jsonb
	FROM generate_series(1, 4)))$$, 'enqueue four jobs');
SELECT ok(pg_temp.take('stl_exp', 'p1', lease => '1 millisecond') > 0
		  AND pg_temp.take('stl_exp', 'p2', lease => '1 millisecond') > 0
		  AND pg_temp.take('stl_exp', 'p3', lease => '1 millisecond') > 0
		  AND pg_temp.take('stl_exp', 'p4', lease => '1 millisecond') > 0,
	'claim them with a 1 ms lease');
SELECT pg_sleep(0.01);
SELECT ok(pg_temp.expires('p1') < clock_timestamp(), 'their leases have expired');
SELECT is(claimq.extend(pg_temp.jid('p1'), pg_temp.tok('p1')), true, 'extend of an expired claim is ok');
SELECT ok(pg_temp.expires('p1') > clock_timestamp(), 'and renews its lease');
SELECT is(claimq.start(pg_temp.jid('p2'), pg_temp.tok('p2'), '1 millisecond'), true,
	'start of an expired claim is ok');
SELECT pg_sleep(0.01);
SELECT is(claimq.complete(pg_temp.jid('p2'), pg_temp.tok('p2')), true,
	'complete of an expired running job is ok');
SELECT is(claimq.fail(pg_temp.jid('p3'), pg_temp.tok('p3')), true, 'fail of an expired claim is ok');
SELECT is(claimq.release(pg_temp.jid('p4'), pg_temp.tok('p4')), true, 'release of an expired claim is ok');

--
-- Reclaimed, then claimed again: the old token is stale.
--
SELECT lives_ok($$SELECT claimq.create_queue('stl_re')$$, 'create queue stl_re');
SELECT lives_ok($$SELECT claimq.enqueue('stl_re', '{}')$$, 'enqueue a job');
SELECT ok(pg_temp.take('stl_re', 'p5', lease => '1 millisecond') > 0, 'claim it with a 1 ms lease');
SELECT pg_sleep(0.01);
SELECT is((SELECT released FROM claimq.reclaim('stl_re')), 1::bigint, 'reclaim the expired claim');
SELECT is(pg_temp.state('p5'), 'pending', 'the job is pending again');
SELECT results_eq($$SELECT outcome FROM claimq.extend(pg_temp.ids('p5'), pg_temp.toks('p5'))$$,
	ARRAY['stale'], 'a reclaimed job''s old token is stale before any new claim');
SELECT is(pg_temp.take('stl_re', 'p5new'), pg_temp.jid('p5'), 'claim the job again');
SELECT results_eq($$SELECT op || ' ' || outcome FROM (
		SELECT 'start' AS op, outcome FROM claimq.start(pg_temp.ids('p5'), pg_temp.toks('p5'))
		UNION ALL
		SELECT 'extend', outcome FROM claimq.extend(pg_temp.ids('p5'), pg_temp.toks('p5'))
		UNION ALL
		SELECT 'complete', outcome FROM claimq.complete(pg_temp.ids('p5'), pg_temp.toks('p5'))
		UNION ALL
		SELECT 'fail', outcome FROM claimq.fail(pg_temp.ids('p5'), pg_temp.toks('p5'))
		UNION ALL
		SELECT 'release', outcome FROM claimq.release(pg_temp.ids('p5'), pg_temp.toks('p5'))) s$$,
	ARRAY['start stale', 'extend stale', 'complete stale', 'fail stale', 'release stale'],
	'every call with the old token is stale once the job is claimed again');
SELECT results_eq($$SELECT state, attempts FROM claimq.jobs WHERE job_id = pg_temp.jid('p5')$$,
	$$VALUES ('claimed', 0)$$, 'the new claim is untouched');
SELECT is(claimq.complete(pg_temp.jid('p5new'), pg_temp.tok('p5new')), true,
	'the new token completes the job');

--
-- release_worker: releases the claimed, not started jobs of one worker.
--
SELECT lives_ok($$SELECT claimq.create_queue('stl_rw')$$, 'create queue stl_rw');
SELECT lives_ok($$SELECT claimq.enqueue_many(q, ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)))
					FROM unnest(ARRAY['stl_rw', 'stl_keep']) q$$, 'enqueue jobs');
SELECT ok(pg_temp.take('stl_rw', 'w1', worker => 'wA') > 0
		  AND pg_temp.take('stl_rw', 'w2', worker => 'wA') > 0
		  AND pg_temp.take('stl_rw', 'w3', worker => 'wA', start => true) > 0
		  AND pg_temp.take('stl_rw', 'w4', worker => 'wB') > 0
		  AND pg_temp.take('stl_keep', 'w5', worker => 'wA') > 0,
	'claim jobs for workers wA and wB');
SELECT is(claimq.release_worker('stl_rw', 'wA'), 2::bigint,
	'release_worker returns how many jobs it released');
SELECT results_eq($$SELECT pg_temp.state(l) FROM unnest(ARRAY['w1', 'w2', 'w3', 'w4', 'w5']) l$$,
	ARRAY['pending', 'pending', 'running', 'claimed', 'claimed'],
	'only the worker''s claimed jobs in that queue were released');
SELECT results_eq($$SELECT outcome FROM claimq.complete(pg_temp.ids('w1'), pg_temp.toks('w1'))$$,
	ARRAY['stale'], 'a job released by release_worker has a stale token');
SELECT is((SELECT attempts FROM claimq.jobs WHERE job_id = pg_temp.jid('w1')), 0,
	'release_worker counts no attempt');
SELECT is((SELECT worker FROM claimq.jobs WHERE job_id = pg_temp.jid('w1')), 'wA',
	'the jobs view still shows the worker that last claimed the job');
SELECT is(claimq.release_worker('stl_rw', 'wA'), 0::bigint, 'nothing left to release for wA');
SELECT is(claimq.release_worker('stl_rw', 'nobody'), 0::bigint, 'an unknown worker releases nothing');
SELECT throws_ok(c, e, NULL, c || ' raises ' || e)
  FROM (VALUES ('SELECT claimq.release_worker(''stl_rw'', NULL)', '22004'),
			   ('SELECT claimq.release_worker(''stl_nosuch'', ''wA'')', '42704')) v(c, e);

SELECT * FROM finish();
ROLLBACK;
