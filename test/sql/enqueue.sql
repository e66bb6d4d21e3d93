-- Producing: enqueue and enqueue_many, run_at, priority, dedup keys, and
-- the NOTIFY of a notify queue.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(67);

SELECT lives_ok($$SELECT claimq.create_queue('enq', keep_done => '1 day',
	max_attempts => 2)$$, 'create queue enq');
SELECT lives_ok($$SELECT claimq.create_queue('enq_other')$$, 'create queue enq_other');

--
-- enqueue
--
-- run_at defaults to the wall clock at the call, not the transaction start.
SELECT pg_sleep(0.02);
SELECT clock_timestamp() AS t0 \gset
SELECT claimq.enqueue('enq', '{"n": 1}') AS e1 \gset
SELECT clock_timestamp() AS t1 \gset
SELECT ok(:e1 > 0, 'enqueue returns a job id');
SELECT results_eq(
	format($$SELECT queue, state, payload, priority, attempts, worker, expires_at,
				   dedup_key, last_error
			  FROM claimq.jobs WHERE job_id = %s$$, :e1),
	$$VALUES ('enq'::text, 'pending'::text, '{"n": 1}'::jsonb, 0, 0, NULL::text,
			  NULL::timestamptz, NULL::text, NULL::text)$$,
	'a new job is pending with priority 0, no attempts and no claim');
SELECT ok(run_at BETWEEN :'t0' AND :'t1', 'run_at NULL means the wall clock at the call')
  FROM claimq.jobs WHERE job_id = :e1;
SELECT ok(run_at > now(), 'run_at is later than the transaction start')
  FROM claimq.jobs WHERE job_id = :e1;
SELECT ok(enqueued_at BETWEEN :'t0' AND :'t1', 'enqueued_at is the wall clock at the call')
  FROM claimq.jobs WHERE job_id = :e1;
SELECT ok(claimq.enqueue('enq', '{"n": 2}') > :e1, 'job ids increase');

SELECT claimq.enqueue('enq', '[1, "two", null]', run_at => '2000-01-01 00:00:00+00',
					  priority => -7) AS e3 \gset
SELECT results_eq(format('SELECT payload, run_at, priority FROM claimq.jobs WHERE job_id = %s', :e3),
	$$VALUES ('[1, "two", null]'::jsonb, '2000-01-01 00:00:00+00'::timestamptz, -7)$$,
	'enqueue stores a past run_at and a negative priority as given');
SELECT claimq.enqueue('enq', '"scalar"', run_at => clock_timestamp() + '1 hour',
					  priority => 2147483647) AS e4 \gset
SELECT results_eq(format('SELECT payload, priority, run_at > clock_timestamp() + interval ''50 minutes'' FROM claimq.jobs WHERE job_id = %s', :e4),
	$$VALUES ('"scalar"'::jsonb, 2147483647, true)$$,
	'enqueue stores a future run_at and the largest priority');
SELECT is((SELECT scheduled FROM claimq.queue_stats WHERE queue = 'enq'), 1::bigint,
	'a job with a future run_at is scheduled');
SELECT is(claimq.enqueue('enq', 'null') > 0, true, 'a JSON null payload is accepted');

SELECT throws_ok($$SELECT claimq.enqueue('enq', NULL)$$, '22004', NULL,
	'enqueue with a NULL payload raises 22004');
SELECT throws_ok($$SELECT claimq.enqueue('enq', '{}', priority => NULL)$$, '22004', NULL,
	'enqueue with a NULL priority raises 22004');
SELECT throws_ok($$SELECT claimq.enqueue('enq_nosuch', '{}')$$, '42704', NULL,
	'enqueue into an unknown queue raises 42704');
SELECT throws_ok($$SELECT claimq.enqueue('bad/name', '{}')$$, '22023', NULL,
	'enqueue with a bad queue name raises 22023');
SELECT throws_ok($$SELECT claimq.enqueue(NULL, '{}')$$, '22004', NULL,
	'enqueue with a NULL queue raises 22004');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'enq'), 5::bigint,
	'refused enqueue calls added nothing');

--
-- Dedup keys
--
SELECT claimq.enqueue('enq', '{"k": 1}', dedup_key => 'k1') AS k1 \gset
SELECT is(claimq.enqueue('enq', '{"k": 2}', dedup_key => 'k1'), :k1::bigint,
	'a pending job''s dedup key returns that job''s id');
SELECT is(claimq.enqueue('enq', '{"k": 3}', run_at => clock_timestamp() + '1 day',
						 priority => 9, dedup_key => 'k1'),
	:k1::bigint, 'the key wins whatever the other arguments');
SELECT results_eq(format('SELECT payload, priority, dedup_key FROM claimq.jobs WHERE job_id = %s', :k1),
	$$VALUES ('{"k": 1}'::jsonb, 0, 'k1'::text)$$,
	'a dedup hit leaves the live job as it was');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE dedup_key = 'k1'), 1::bigint,
	'a dedup hit adds no job');
SELECT isnt(claimq.enqueue('enq', '{}', dedup_key => 'k2'), :k1::bigint,
	'another key makes another job');
SELECT isnt(claimq.enqueue('enq', '{}', dedup_key => 'K1'), :k1::bigint,
	'dedup keys are case-sensitive');
SELECT isnt(claimq.enqueue('enq_other', '{}', dedup_key => 'k1'), :k1::bigint,
	'dedup keys are per queue');
SELECT isnt(claimq.enqueue('enq', '{}'), claimq.enqueue('enq', '{}'),
	'jobs without a key never dedup');

-- The key is held while the job is claimed or running ...
SELECT job_id AS kc, token AS kct FROM claimq.claim('enq', max_jobs => 10000)
 WHERE job_id = :k1 \gset
SELECT is(:kc::bigint, :k1::bigint, 'claim the keyed job (with every other ready job)');
SELECT is(claimq.enqueue('enq', '{}', dedup_key => 'k1'), :k1::bigint,
	'a claimed job holds its key');
SELECT ok(claimq.start(:k1, :kct), 'start the keyed job');
SELECT is(claimq.enqueue('enq', '{}', dedup_key => 'k1'), :k1::bigint,
	'a running job holds its key');
SELECT results_eq(format('SELECT outcome, state FROM claimq.fail(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], retry_in => ''0'')', :k1, :kct),
	$$VALUES ('ok'::text, 'pending'::text)$$, 'fail the keyed job with a retry left');
SELECT is(claimq.enqueue('enq', '{}', dedup_key => 'k1'), :k1::bigint,
	'a job waiting for its retry holds its key');
-- ... and freed once it is done ...
SELECT job_id AS kc, token AS kct FROM claimq.claim('enq', max_jobs => 10000)
 WHERE job_id = :k1 \gset
SELECT ok(claimq.complete(:k1, :kct), 'complete the keyed job (kept as done)');
SELECT is((SELECT state FROM claimq.jobs WHERE job_id = :k1), 'done', 'the job is done');
SELECT claimq.enqueue('enq', '{"k": "again"}', dedup_key => 'k1') AS k1b \gset
SELECT isnt(:k1b::bigint, :k1::bigint, 'a done job''s key is free again');
-- ... or dead ...
SELECT job_id AS kc, token AS kct FROM claimq.claim('enq', max_jobs => 10000)
 WHERE job_id = :k1b \gset
SELECT ok(claimq.fail(:k1b, :kct, permanent => true), 'fail the new keyed job for good');
SELECT is((SELECT state FROM claimq.jobs WHERE job_id = :k1b), 'dead', 'the job is dead');
SELECT claimq.enqueue('enq', '{}', dedup_key => 'k1') AS k1c \gset
SELECT ok(:k1c::bigint NOT IN (:k1, :k1b), 'a dead job''s key is free again');
-- ... or deleted by complete.
SELECT claimq.enqueue('enq_other', '{}', dedup_key => 'k9') AS k9 \gset
SELECT job_id AS kc, token AS kct FROM claimq.claim('enq_other', max_jobs => 10000)
 WHERE job_id = :k9 \gset
SELECT ok(claimq.complete(:k9, :kct), 'complete a keyed job (deleted)');
SELECT isnt(claimq.enqueue('enq_other', '{}', dedup_key => 'k9'), :k9::bigint,
	'a completed job''s key is free again');
-- release puts the job back with its key.
SELECT claimq.enqueue('enq_other', '{}', dedup_key => 'k8') AS k8 \gset
SELECT job_id AS kc, token AS kct FROM claimq.claim('enq_other', max_jobs => 10000)
 WHERE job_id = :k8 \gset
SELECT ok(claimq.release(:k8, :kct), 'release a keyed job');
SELECT is(claimq.enqueue('enq_other', '{}', dedup_key => 'k8'), :k8::bigint,
	'a released job holds its key');

--
-- enqueue_many
--
CREATE TEMP TABLE fifty AS
SELECT e.job_id, e.ord
  FROM claimq.enqueue_many('enq_other',
		   ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series(1, 50) i))
	   WITH ORDINALITY AS e(job_id, ord);
SELECT results_eq(
	$$SELECT j.payload->>'i' FROM fifty f JOIN claimq.jobs j USING (job_id) ORDER BY f.ord$$,
	$$SELECT i::text FROM generate_series(1, 50) i$$,
	'enqueue_many returns the ids in input order');
SELECT is((SELECT count(DISTINCT payload->>'i') FROM claimq.jobs
			WHERE queue = 'enq_other' AND payload ? 'i'), 50::bigint,
	'enqueue_many added one job per payload');
SELECT is((SELECT count(*) FROM claimq.enqueue_many('enq_other', '{}'::jsonb[])), 0::bigint,
	'enqueue_many with no payloads returns no rows');
CREATE TEMP TABLE two AS
SELECT claimq.enqueue_many('enq_other', ARRAY['{"m": 1}', '{"m": 2}']::jsonb[],
						   run_at => '2001-02-03 04:05:06+00', priority => 5) AS job_id;
SELECT results_eq(
	$$SELECT payload, priority, run_at, state FROM claimq.jobs
	   WHERE job_id IN (SELECT job_id FROM two) ORDER BY payload->>'m'$$,
	$$VALUES ('{"m": 1}'::jsonb, 5, '2001-02-03 04:05:06+00'::timestamptz, 'pending'::text),
			 ('{"m": 2}'::jsonb, 5, '2001-02-03 04:05:06+00'::timestamptz, 'pending'::text)$$,
	'enqueue_many applies run_at and priority to every job');
SELECT clock_timestamp() AS t0 \gset
SELECT claimq.enqueue_many('enq_other', ARRAY['{"r": 1}']::jsonb[]) AS r1 \gset
SELECT ok(run_at BETWEEN :'t0' AND clock_timestamp(),
	'enqueue_many run_at NULL means the wall clock at the call')
  FROM claimq.jobs WHERE job_id = :r1;

-- dedup keys, within one call and against live jobs
SELECT claimq.enqueue('enq_other', '{}', dedup_key => 'live') AS live \gset
CREATE TEMP TABLE many AS
SELECT e.job_id, e.ord
  FROM claimq.enqueue_many('enq_other',
		   ARRAY['{"d": 1}', '{"d": 2}', '{"d": 3}', '{"d": 4}', '{"d": 5}',
				 '{"d": 6}', '{"d": 7}']::jsonb[],
		   dedup_keys => ARRAY['a', 'b', 'a', NULL, NULL, 'live', 'b'])
	   WITH ORDINALITY AS e(job_id, ord);
SELECT is((SELECT count(*) FROM many), 7::bigint, 'one id per payload, duplicates included');
SELECT is((SELECT count(DISTINCT job_id) FROM many), 5::bigint,
	'four new jobs plus the live one');
SELECT results_eq($$SELECT m.ord, j.payload FROM many m JOIN claimq.jobs j USING (job_id)
					 WHERE m.ord IN (1, 2, 4, 5) ORDER BY m.ord$$,
	$$VALUES (1::bigint, '{"d": 1}'::jsonb), (2, '{"d": 2}'), (4, '{"d": 4}'), (5, '{"d": 5}')$$,
	'the first payload of each key, and each keyless payload, made a job');
SELECT is((SELECT job_id FROM many WHERE ord = 3), (SELECT job_id FROM many WHERE ord = 1),
	'a key repeated within one call returns the first job''s id');
SELECT is((SELECT job_id FROM many WHERE ord = 7), (SELECT job_id FROM many WHERE ord = 2),
	'so does another repeated key');
SELECT isnt((SELECT job_id FROM many WHERE ord = 4), (SELECT job_id FROM many WHERE ord = 5),
	'NULL keys never dedup');
SELECT is((SELECT job_id FROM many WHERE ord = 6), :live::bigint,
	'a key a live job holds returns that job''s id');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE payload IN ('{"d": 3}', '{"d": 6}', '{"d": 7}')),
	0::bigint, 'payloads deduplicated away were not stored');

SELECT throws_ok(c, e, NULL, d)
  FROM (VALUES
	($$SELECT claimq.enqueue_many('enq_other', NULL)$$, '22004',
	 'enqueue_many with NULL payloads raises 22004'),
	($$SELECT claimq.enqueue_many('enq_other', ARRAY['{}', NULL]::jsonb[])$$, '22004',
	 'enqueue_many with a NULL payload element raises 22004'),
	($$SELECT claimq.enqueue_many('enq_other', ARRAY[['{}'], ['{}']]::jsonb[])$$, '22023',
	 'enqueue_many with a two-dimensional payload array raises 22023'),
	($$SELECT claimq.enqueue_many('enq_other', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY['x'])$$,
	 '22023', 'enqueue_many with fewer dedup keys than payloads raises 22023'),
	($$SELECT claimq.enqueue_many('enq_other', ARRAY['{}']::jsonb[], dedup_keys => ARRAY['x', 'y'])$$,
	 '22023', 'enqueue_many with more dedup keys than payloads raises 22023'),
	($$SELECT claimq.enqueue_many('enq_other', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY[['x'], ['y']])$$,
	 '22023', 'enqueue_many with two-dimensional dedup keys raises 22023'),
	($$SELECT claimq.enqueue_many('enq_other', ARRAY['{}']::jsonb[], priority => NULL)$$,
	 '22004', 'enqueue_many with a NULL priority raises 22004'),
	($$SELECT claimq.enqueue_many('enq_nosuch', ARRAY['{}']::jsonb[])$$, '42704',
	 'enqueue_many into an unknown queue raises 42704'),
	($$SELECT claimq.enqueue_many('enq_nosuch', '{}'::jsonb[])$$, '42704',
	 'enqueue_many of nothing into an unknown queue raises 42704'),
	($$SELECT claimq.enqueue_many('', ARRAY['{}']::jsonb[])$$, '22023',
	 'enqueue_many with a bad queue name raises 22023'),
	($$SELECT claimq.enqueue_many(NULL, ARRAY['{}']::jsonb[])$$, '22004',
	 'enqueue_many with a NULL queue raises 22004')) t(c, e, d);
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'enq_other' AND payload = '{}'),
	4::bigint, 'refused enqueue_many calls added nothing');

SELECT * FROM finish();
ROLLBACK;

--
-- NOTIFY claimq, '<queue>' on commit, once per queue per transaction.  This
-- needs commits, so the queues here are committed, and dropped at the end
-- (with the extension, if this file created it).  psql prints the sender's
-- pid, which varies: the output goes through sed.
--
SELECT NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'claimq') AS own_claimq \gset
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT claimq.create_queue('enq_notify', notify => true);
SELECT claimq.create_queue('enq_notify2', notify => true);
SELECT claimq.create_queue('enq_quiet');
LISTEN claimq;
\o | sed -e 's/PID [0-9][0-9]*/PID N/'
-- one notification for several enqueues of one queue in one transaction
BEGIN;
SELECT claimq.enqueue('enq_notify', '{}') > 0 AS enqueued;
SELECT claimq.enqueue('enq_notify', '{}') > 0 AS enqueued;
SELECT count(*) FROM claimq.enqueue_many('enq_notify', ARRAY['{}', '{}']::jsonb[]);
SELECT 'before commit';
COMMIT;
SELECT 'after commit';
-- a single enqueue, outside an explicit transaction
SELECT claimq.enqueue('enq_notify', '{}') > 0 AS enqueued;
-- one notification per queue
BEGIN;
SELECT claimq.enqueue('enq_notify2', '{}') > 0 AS enqueued;
SELECT claimq.enqueue('enq_notify', '{}') > 0 AS enqueued;
SELECT claimq.enqueue('enq_notify2', '{}') > 0 AS enqueued;
COMMIT;
-- nothing from a queue without notify
SELECT claimq.enqueue('enq_quiet', '{}') > 0 AS enqueued;
SELECT count(*) FROM claimq.enqueue_many('enq_quiet', ARRAY['{}']::jsonb[]);
-- nothing from a rolled back transaction
BEGIN;
SELECT claimq.enqueue('enq_notify', '{}') > 0 AS enqueued;
ROLLBACK;
-- notify can be turned on later
SELECT claimq.alter_queue('enq_quiet', notify => true);
SELECT claimq.enqueue('enq_quiet', '{}') > 0 AS enqueued;
SELECT 'end';
\o
UNLISTEN claimq;
\if :own_claimq
DROP EXTENSION claimq;
\else
SELECT claimq.drop_queue(q, force => true)
  FROM unnest(ARRAY['enq_notify', 'enq_notify2', 'enq_quiet']) q;
\endif
