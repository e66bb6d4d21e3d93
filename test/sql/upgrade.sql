-- Upgrades: install version 0.1, fill it with queues, jobs in every state
-- and key claims, update to the current version, and check that nothing
-- was lost and that both the old claims and the new API work.
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on
\pset pager off
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
BEGIN;
DROP EXTENSION IF EXISTS claimq;
CREATE EXTENSION claimq VERSION '0.1';
SELECT plan(23);

SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'claimq'), '0.1',
	'version 0.1 is installed');

-- Fill it: ready, scheduled, claimed, running, dead and done jobs, a paused
-- queue with a dedup key, and key claims.
SELECT claimq.create_queue('up_a', keep_done => '1 day', max_attempts => 1);
SELECT claimq.create_queue('up_b');
SELECT claimq.pause_queue('up_b');
SELECT count(*) FROM claimq.enqueue_many('up_a', array_fill('{"n": 1}'::jsonb, ARRAY[6]));
SELECT claimq.enqueue('up_a', '{"later": true}', run_at => now() + interval '1 day') > 0;
SELECT claimq.enqueue('up_b', '{}', dedup_key => 'k') > 0;
CREATE TEMP TABLE held AS
	SELECT job_id, token, row_number() OVER (ORDER BY job_id) AS n
	  FROM claimq.claim('up_a', 4);
SELECT claimq.start(job_id, token) FROM held WHERE n = 2;
SELECT claimq.complete(job_id, token) FROM held WHERE n = 3;
SELECT claimq.fail(job_id, token, 'broken', permanent => true) FROM held WHERE n = 4;
CREATE TEMP TABLE key_tokens AS
	SELECT key, token FROM claimq.claim_keys('up_scope', ARRAY['x', 'y'], '1 hour');

CREATE TEMP TABLE jobs_before AS SELECT * FROM claimq.job;
CREATE TEMP TABLE queues_before AS SELECT * FROM claimq.queue;
CREATE TEMP TABLE keys_before AS SELECT * FROM claimq.key_claim;
SELECT is((SELECT string_agg(state || ':' || n, ',' ORDER BY state)
			 FROM (SELECT state, count(*) AS n FROM claimq.job GROUP BY state) s),
	'claimed:1,dead:1,done:1,pending:4,running:1',
	'jobs in every state before the update');

ALTER EXTENSION claimq UPDATE TO '0.2';

SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'claimq'), '0.2',
	'ALTER EXTENSION claimq UPDATE TO 0.2 brings it to 0.2');
SELECT bag_eq('SELECT * FROM claimq.job', 'SELECT * FROM jobs_before',
	'every job is kept, column for column');
SELECT bag_eq('SELECT * FROM claimq.queue', 'SELECT * FROM queues_before',
	'every queue is kept');
SELECT bag_eq('SELECT * FROM claimq.key_claim', 'SELECT * FROM keys_before',
	'every key claim is kept');

-- The claims made before the update still hold.
SELECT ok((SELECT claimq.complete(job_id, token) FROM held WHERE n = 1),
	'a job claimed under 0.1 completes with its token');
SELECT ok((SELECT claimq.complete(job_id, token) FROM held WHERE n = 2),
	'a job started under 0.1 completes with its token');
SELECT is((SELECT string_agg(outcome, ',') FROM claimq.release_keys('up_scope',
			 ARRAY['x', 'y'], (SELECT array_agg(token) FROM key_tokens))),
	'ok,ok', 'key claims made under 0.1 are released with their token');
SELECT is(claimq.enqueue('up_b', '{}', dedup_key => 'k'),
	(SELECT job_id FROM jobs_before WHERE dedup_key = 'k'),
	'a live dedup key from 0.1 still dedups');

-- What 0.2 adds: job ids with the node number, and node_of().
SELECT is(claimq.node_of(claimq.enqueue('up_a', '{}')), 0,
	'new jobs carry node 0 (claimq.node_id is not set)');
SELECT is(claimq.node_of(5 * 281474976710656 + 17), 5, 'node_of reads the high bits');
SELECT throws_ok('SELECT claimq.node_of(NULL)', '22004', NULL,
	'node_of(NULL) raises 22004');
SELECT is((SELECT seqmax FROM pg_sequence WHERE seqrelid = 'claimq.job_id_seq'::regclass),
	281474976710655::bigint, 'job ids from the sequence stay below 2^48');
SELECT ok(NOT has_function_privilege('public', 'claimq.node_of(bigint)', 'EXECUTE'),
	'PUBLIC cannot execute the new function');

-- 0.2 to 0.3, with claims and a key claim made under 0.2 held across it.
CREATE TEMP TABLE held2 AS
	SELECT job_id, token, row_number() OVER (ORDER BY job_id) AS n
	  FROM claimq.claim('up_a', 10);
SELECT is((SELECT count(*) FROM held2), 3::bigint,
	'the queue works on: the two ready jobs left and the new one are claimed');
SELECT claimq.start(job_id, token) FROM held2 WHERE n = 1;
CREATE TEMP TABLE key_tokens2 AS
	SELECT key, token FROM claimq.claim_keys('up_scope', ARRAY['z'], '1 hour');
DELETE FROM jobs_before;
INSERT INTO jobs_before SELECT * FROM claimq.job;
DELETE FROM keys_before;
INSERT INTO keys_before SELECT * FROM claimq.key_claim;

ALTER EXTENSION claimq UPDATE;

SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'claimq'), '0.3',
	'ALTER EXTENSION claimq UPDATE brings it to 0.3');
SELECT bag_eq('SELECT * FROM claimq.job', 'SELECT * FROM jobs_before',
	'every job is kept across the update to 0.3, token for token');
SELECT bag_eq('SELECT * FROM claimq.key_claim', 'SELECT * FROM keys_before',
	'every key claim is kept across the update to 0.3');
SELECT is(ARRAY(SELECT o.outcome FROM held2 h,
				LATERAL claimq.complete(ARRAY[h.job_id], ARRAY[h.token]) o ORDER BY h.n),
	'{ok,ok,ok}', 'jobs claimed and started under 0.2 complete with their tokens');
SELECT is((SELECT string_agg(outcome, ',') FROM claimq.release_keys('up_scope',
			 ARRAY['z'], (SELECT array_agg(token) FROM key_tokens2))),
	'ok', 'a key claim made under 0.2 is released with its token');
SELECT is((SELECT seqcache FROM pg_sequence WHERE seqrelid = 'claimq.token_seq'::regclass),
	65536::bigint, 'tokens are drawn from a per-backend cache');
SELECT throws_ok($$SELECT claimq.create_queue('up_c', lease => '-10 months 302 days')$$,
	'22023', 'lease must be greater than zero and at most 7 days',
	'queue settings are judged by timestamp arithmetic after the update');

SELECT * FROM finish();
ROLLBACK;
