-- The trailing "queue" argument of the calls about enqueued jobs (start,
-- extend, complete, fail, release, snooze in both forms, cancel, status,
-- wait_for, dependencies): given, each job found must be in that queue
-- (22023, and nothing changes), the queue must exist (42704) and its name
-- be valid (22023); NULL, or left out, checks nothing; a job that does not
-- exist is judged as without it.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(60);

SELECT lives_ok($$SELECT claimq.create_queue('jq_a'), claimq.create_queue('jq_b')$$,
	'create queues jq_a and jq_b');
SELECT lives_ok($$SELECT claimq.enqueue_many('jq_a', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 12))),
					   claimq.enqueue('jq_b', '{}')$$,
	'enqueue 12 jobs into jq_a, one into jq_b');

-- Every job of jq_a claimed, by label; b is jq_b's job, claimed.
CREATE TEMP TABLE h(label text PRIMARY KEY, job_id bigint, token bigint);
INSERT INTO h SELECT 'a' || row_number() OVER (ORDER BY c.job_id), c.job_id, c.token
  FROM claimq.claim('jq_a', 12) c;
INSERT INTO h SELECT 'b', c.job_id, c.token FROM claimq.claim('jq_b') c;
CREATE FUNCTION pg_temp.jid(l text) RETURNS bigint LANGUAGE sql AS
$$ SELECT job_id FROM pg_temp.h WHERE label = l $$;
CREATE FUNCTION pg_temp.tok(l text) RETURNS bigint LANGUAGE sql AS
$$ SELECT token FROM pg_temp.h WHERE label = l $$;
-- A fingerprint of both queues' jobs, to show that a refused call changed
-- nothing.
CREATE FUNCTION pg_temp.jobs() RETURNS text LANGUAGE sql AS $$
	SELECT string_agg(format('%s:%s:%s:%s:%s', job_id, state, attempts, expires_at, run_at), ','
					  ORDER BY job_id)
	  FROM claimq.jobs WHERE queue IN ('jq_a', 'jq_b')
$$;
SELECT is((SELECT count(*) FROM h), 13::bigint, 'thirteen jobs claimed');

-- 1. The right queue: the calls act as without it.
SELECT is((SELECT array_agg(outcome) FROM claimq.extend(ARRAY[pg_temp.jid('a1')], ARRAY[pg_temp.tok('a1')],
												 queue => 'jq_a')),
		  '{ok}', 'extend (array) in its queue: ok');
SELECT ok(claimq.extend(pg_temp.jid('a1'), pg_temp.tok('a1'), queue => 'jq_a'),
	'extend (scalar) in its queue');
SELECT ok(claimq.start(pg_temp.jid('a1'), pg_temp.tok('a1'), queue => 'jq_a'),
	'start (scalar) in its queue');
SELECT is((SELECT array_agg(outcome) FROM claimq.start(ARRAY[pg_temp.jid('a2')], ARRAY[pg_temp.tok('a2')],
												queue => 'jq_a')),
		  '{ok}', 'start (array) in its queue');
SELECT ok(claimq.complete(pg_temp.jid('a1'), pg_temp.tok('a1'), queue => 'jq_a'),
	'complete (scalar) in its queue');
SELECT is((SELECT array_agg(outcome ORDER BY job_id)
			 FROM claimq.complete(ARRAY[pg_temp.jid('a2'), pg_temp.jid('a9'), -1],
								  ARRAY[pg_temp.tok('a2'), pg_temp.tok('a9') + 1, 1], queue => 'jq_a')),
		  '{missing,ok,stale}',
		  'complete (array) in its queue, with a stale pair and a job that never was: ok, stale, missing');
SELECT ok(claimq.release(pg_temp.jid('a3'), pg_temp.tok('a3'), 'jq_a'),
	'release (scalar) in its queue, by position');
SELECT is((SELECT array_agg(outcome) FROM claimq.release(ARRAY[pg_temp.jid('a4')], ARRAY[pg_temp.tok('a4')],
												  'jq_a')),
		  '{ok}', 'release (array) in its queue, by position');
SELECT ok(claimq.fail(pg_temp.jid('a5'), pg_temp.tok('a5'), 'boom', queue => 'jq_a'),
	'fail (scalar) in its queue');
SELECT is((SELECT array_agg(outcome) FROM claimq.fail(ARRAY[pg_temp.jid('a6')], ARRAY[pg_temp.tok('a6')],
											   queue => 'jq_a')),
		  '{ok}', 'fail (array) in its queue');
SELECT ok(claimq.snooze(pg_temp.jid('a7'), pg_temp.tok('a7'), '1 hour', 'jq_a'),
	'snooze (scalar) in its queue');
SELECT is((SELECT array_agg(outcome) FROM claimq.snooze(ARRAY[pg_temp.jid('a8')], ARRAY[pg_temp.tok('a8')],
												 '1 hour', 'jq_a')),
		  '{ok}', 'snooze (array) in its queue');
SELECT is((SELECT array_agg(queue) FROM claimq.status(ARRAY[pg_temp.jid('a9'), -1], queue => 'jq_a')),
		  '{jq_a,NULL}', 'status in its queue, with a job that never was');
SELECT is((SELECT array_agg(state) FROM claimq.wait_for(ARRAY[pg_temp.jid('a9')], '0', 'jq_a')),
		  '{claimed}', 'wait_for in its queue');
SELECT is((SELECT count(*) FROM claimq.dependencies(ARRAY[pg_temp.jid('a9')], 'jq_a')),
		  0::bigint, 'dependencies in its queue');
SELECT is((SELECT array_agg(outcome) FROM claimq.cancel(ARRAY[pg_temp.jid('a10')], 'jq_a')),
		  '{ok}', 'cancel in its queue');

-- 2. A job in another queue: 22023, and nothing changes (in a job of
--    either queue).
SELECT pg_temp.jobs() AS before \gset
SELECT throws_ok(format('SELECT claimq.extend(%s, %s, queue => %L)', pg_temp.jid('a11'), pg_temp.tok('a11'), 'jq_b'),
	'22023', format('job %s is not in queue "jq_b"', pg_temp.jid('a11')), 'extend (scalar) in another queue: 22023');
SELECT throws_ok(format('SELECT * FROM claimq.extend(ARRAY[%s, %s], ARRAY[%s, %s], queue => %L)',
						pg_temp.jid('b'), pg_temp.jid('a11'), pg_temp.tok('b'), pg_temp.tok('a11'), 'jq_b'),
	'22023', format('job %s is not in queue "jq_b"', pg_temp.jid('a11')),
	'extend (array) with one job of the queue and one of another: 22023');
SELECT throws_ok(format('SELECT claimq.start(%s, %s, queue => %L)', pg_temp.jid('a11'), pg_temp.tok('a11'), 'jq_b'),
	'22023', NULL, 'start (scalar) in another queue');
SELECT throws_ok(format('SELECT * FROM claimq.start(ARRAY[%s], ARRAY[%s], queue => %L)',
						pg_temp.jid('a11'), pg_temp.tok('a11'), 'jq_b'),
	'22023', NULL, 'start (array) in another queue');
SELECT throws_ok(format('SELECT claimq.complete(%s, %s, queue => %L)', pg_temp.jid('a11'), pg_temp.tok('a11'), 'jq_b'),
	'22023', NULL, 'complete (scalar) in another queue');
SELECT throws_ok(format('SELECT * FROM claimq.complete(ARRAY[%s, %s], ARRAY[%s, %s], queue => %L)',
						pg_temp.jid('b'), pg_temp.jid('a11'), pg_temp.tok('b'), pg_temp.tok('a11'), 'jq_b'),
	'22023', NULL, 'complete (array) with one job of the queue and one of another');
SELECT throws_ok(format('SELECT * FROM claimq.complete(ARRAY[%s], ARRAY[%s], queue => %L)',
						pg_temp.jid('a11'), pg_temp.tok('a11') + 1, 'jq_b'),
	'22023', NULL, 'complete (array) of a stale pair in another queue: 22023, not stale');
SELECT throws_ok(format('SELECT claimq.release(%s, %s, %L)', pg_temp.jid('a11'), pg_temp.tok('a11'), 'jq_b'),
	'22023', NULL, 'release (scalar) in another queue');
SELECT throws_ok(format('SELECT * FROM claimq.release(ARRAY[%s], ARRAY[%s], %L)',
						pg_temp.jid('a11'), pg_temp.tok('a11'), 'jq_b'),
	'22023', NULL, 'release (array) in another queue');
SELECT throws_ok(format('SELECT claimq.fail(%s, %s, queue => %L)', pg_temp.jid('a11'), pg_temp.tok('a11'), 'jq_b'),
	'22023', NULL, 'fail (scalar) in another queue');
SELECT throws_ok(format('SELECT * FROM claimq.fail(ARRAY[%s], ARRAY[%s], queue => %L)',
						pg_temp.jid('a11'), pg_temp.tok('a11'), 'jq_b'),
	'22023', NULL, 'fail (array) in another queue');
SELECT throws_ok(format('SELECT claimq.snooze(%s, %s, %L, %L)', pg_temp.jid('a11'), pg_temp.tok('a11'), '1 hour', 'jq_b'),
	'22023', NULL, 'snooze (scalar) in another queue');
SELECT throws_ok(format('SELECT * FROM claimq.snooze(ARRAY[%s], ARRAY[%s], %L, %L)',
						pg_temp.jid('a11'), pg_temp.tok('a11'), '1 hour', 'jq_b'),
	'22023', NULL, 'snooze (array) in another queue');
SELECT throws_ok(format('SELECT * FROM claimq.cancel(ARRAY[%s, %s], %L)', pg_temp.jid('b'), pg_temp.jid('a11'), 'jq_b'),
	'22023', NULL, 'cancel of a job of the queue and one of another');
SELECT throws_ok(format('SELECT * FROM claimq.status(ARRAY[%s], %L)', pg_temp.jid('a11'), 'jq_b'),
	'22023', NULL, 'status in another queue');
SELECT throws_ok(format('SELECT * FROM claimq.wait_for(ARRAY[%s], %L, %L)', pg_temp.jid('a11'), '0', 'jq_b'),
	'22023', NULL, 'wait_for in another queue');
SELECT throws_ok(format('SELECT * FROM claimq.dependencies(ARRAY[%s], %L)', pg_temp.jid('a11'), 'jq_b'),
	'22023', NULL, 'dependencies in another queue');
SELECT is(pg_temp.jobs(), :'before', 'the refused calls changed no job');

-- 3. A queue that does not exist: 42704, whether jobs are found or not.
SELECT throws_ok(format('SELECT claimq.complete(%s, %s, queue => %L)', pg_temp.jid('a11'), pg_temp.tok('a11'), 'jq_none'),
	'42704', 'queue "jq_none" does not exist', 'complete (scalar) in a queue that does not exist: 42704');
SELECT throws_ok(format('SELECT * FROM claimq.complete(ARRAY[-1], ARRAY[1], queue => %L)', 'jq_none'),
	'42704', NULL, 'complete (array) of a missing job in a queue that does not exist: 42704');
SELECT throws_ok(format('SELECT * FROM claimq.status(ARRAY[-1], %L)', 'jq_none'),
	'42704', NULL, 'status of a missing job in a queue that does not exist: 42704');
SELECT throws_ok(format('SELECT * FROM claimq.cancel(ARRAY[%s], %L)', pg_temp.jid('a11'), 'jq_none'),
	'42704', NULL, 'cancel in a queue that does not exist: 42704');
SELECT throws_ok(format('SELECT * FROM claimq.dependencies(ARRAY[%s], %L)', pg_temp.jid('a11'), 'jq_none'),
	'42704', NULL, 'dependencies in a queue that does not exist: 42704');
SELECT is(pg_temp.jobs(), :'before', 'they changed no job either');

-- 4. An invalid name: 22023, even with no jobs.
SELECT throws_ok($$SELECT * FROM claimq.complete('{}'::bigint[], '{}'::bigint[], queue => 'no such')$$,
	'22023', 'invalid queue name "no such"', 'complete with an invalid queue name: 22023');
SELECT throws_ok($$SELECT claimq.release(1, 1, '')$$,
	'22023', NULL, 'release with an empty queue name: 22023');
SELECT throws_ok($$SELECT * FROM claimq.status('{}', repeat('q', 64))$$,
	'22023', NULL, 'status with a queue name too long: 22023');

-- 5. Empty arrays stay no-ops, in a queue that does not exist too.
SELECT is((SELECT count(*) FROM claimq.complete('{}'::bigint[], '{}'::bigint[], queue => 'jq_none')),
	0::bigint, 'complete of no pairs in a queue that does not exist: no rows');
SELECT is((SELECT count(*) FROM claimq.cancel('{}', 'jq_none')),
	0::bigint, 'cancel of no jobs: no rows');

-- 6. NULL, or left out: no check.
SELECT ok(claimq.extend(pg_temp.jid('a11'), pg_temp.tok('a11'), queue => NULL),
	'extend with queue NULL');
SELECT ok(claimq.extend(pg_temp.jid('a11'), pg_temp.tok('a11')),
	'extend without queue');
SELECT is((SELECT array_agg(outcome) FROM claimq.complete(ARRAY[pg_temp.jid('a11'), pg_temp.jid('b')],
	ARRAY[pg_temp.tok('a11'), pg_temp.tok('b')], queue => NULL)),
	'{ok,ok}', 'complete of jobs of two queues with queue NULL');
SELECT is((SELECT array_agg(queue ORDER BY queue) FROM claimq.status(ARRAY[pg_temp.jid('a9'), pg_temp.jid('a12')])),
	'{jq_a,jq_a}', 'status without queue');

-- 7. The right queue once more after a refusal (the id noted by the C
--    edition for a name is corrected, never trusted blindly): a queue
--    dropped and created again under the same name.
SELECT lives_ok($$SELECT claimq.drop_queue('jq_b', force => true)$$, 'drop jq_b');
SELECT lives_ok($$SELECT claimq.create_queue('jq_b')$$, 'create jq_b again');
INSERT INTO h SELECT 'b2', claimq.enqueue('jq_b', '{}'), 0;
UPDATE h SET token = c.token FROM claimq.claim('jq_b') c WHERE label = 'b2' AND c.job_id = h.job_id;
SELECT ok(claimq.extend(pg_temp.jid('b2'), pg_temp.tok('b2'), queue => 'jq_b'),
	'extend in the queue created again');
SELECT throws_ok(format('SELECT claimq.extend(%s, %s, queue => %L)', pg_temp.jid('b2'), pg_temp.tok('b2'), 'jq_a'),
	'22023', NULL, 'and refused in jq_a');
SELECT ok(claimq.complete(pg_temp.jid('b2'), pg_temp.tok('b2'), queue => 'jq_b'),
	'complete in the queue created again');

-- 8. Signatures: the argument comes last, with a default, in every form.
SELECT is((SELECT count(*) FROM pg_proc p
			WHERE p.pronamespace = 'claimq'::regnamespace
			  AND p.proname IN ('start', 'extend', 'complete', 'fail', 'release', 'snooze',
								'cancel', 'status', 'wait_for', 'dependencies')
			  AND p.proargnames[p.pronargs] = 'queue'
			  AND p.proargtypes[p.pronargs - 1] = 'text'::regtype
			  AND p.pronargdefaults >= 1),
	16::bigint, 'all sixteen forms end with queue text DEFAULT NULL');
SELECT is((SELECT count(*) FROM pg_proc p
			WHERE p.pronamespace = 'claimq'::regnamespace
			  AND p.proname IN ('start', 'extend', 'complete', 'fail', 'release', 'snooze',
								'cancel', 'status', 'wait_for', 'dependencies')),
	16::bigint, 'and no other forms remain');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'jq_a' AND state = 'claimed'),
	2::bigint, 'jq_a holds the two claims left (a9, a12)');

SELECT * FROM finish();
ROLLBACK;
