-- Upgrades: install version 0.1, fill it with queues, jobs in every state
-- and key claims, update step by step to the current version, and check
-- that nothing was lost, that claims and key claims made before the
-- update still hold with their tokens, that duties granted before it
-- cover the new functions, and that the new API works.
--
-- This library serves only the schema of its own version (an older one
-- gets 55000 until ALTER EXTENSION claimq UPDATE), so the older versions
-- are filled the way their own library would have left them: with rows
-- written directly, tokens drawn from their sequence.
-- edition: c only: it updates the C edition's extension step by step from 0.1, with the C library
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on
\pset pager off
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
BEGIN;
DROP EXTENSION IF EXISTS claimq;
CREATE EXTENSION claimq VERSION '0.1';
SELECT plan(45);

SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'claimq'), '0.1',
	'version 0.1 is installed');
SELECT throws_ok($$SELECT claimq.enqueue('nowhere', '{}')$$, '55000',
	'extension "claimq" is at version 0.1, but its library needs version 0.8',
	'the library refuses to work on an older schema, with a clear error');

-- Fill it: ready, scheduled, claimed, running, dead and done jobs, a paused
-- queue with a dedup key, and key claims.
SELECT claimq.create_queue('up_a', keep_done => '1 day', max_attempts => 1);
SELECT claimq.create_queue('up_b');
SELECT claimq.pause_queue('up_b');
CREATE TEMP TABLE held AS
SELECT n, nextval('claimq.token_seq') AS token
  FROM generate_series(1, 2) n;
INSERT INTO claimq.job (queue_id, state, run_at, enqueued_at, expires_at, claimed_at,
						finished_at, attempts, token, dedup_key, payload)
SELECT q.queue_id, v.state, now() + v.run_in, now(),
	   CASE WHEN v.state IN ('claimed', 'running') THEN now() + interval '1 hour' END,
	   CASE WHEN v.state IN ('claimed', 'running') THEN now() END,
	   CASE WHEN v.state IN ('dead', 'done') THEN now() END,
	   v.attempts, h.token, v.dedup_key, jsonb_build_object('n', v.n)
  FROM (VALUES (1, 'up_a', 'claimed', interval '0', 0, NULL::text),
			   (2, 'up_a', 'running', '0', 1, NULL),
			   (3, 'up_a', 'pending', '0', 0, NULL),
			   (4, 'up_a', 'pending', '0', 0, NULL),
			   (5, 'up_a', 'pending', '1 day', 0, NULL),
			   (6, 'up_a', 'dead', '0', 1, NULL),
			   (7, 'up_a', 'done', '0', 1, NULL),
			   (8, 'up_b', 'pending', '0', 0, 'k')) AS v(n, queue, state, run_in, attempts, dedup_key)
  JOIN claimq.queue q ON q.name = v.queue
  LEFT JOIN held h ON h.n = v.n
 ORDER BY v.n;
-- One of up_a's jobs, scheduled for tomorrow, at another priority.
UPDATE claimq.job SET priority = 2 WHERE payload->>'n' = '5';
INSERT INTO claimq.key_claim
SELECT 'up_scope', k, nextval('claimq.token_seq'), now() + interval '1 hour'
  FROM unnest(ARRAY['x', 'y']) k;
ALTER TABLE held ADD COLUMN job_id bigint;
UPDATE held h SET job_id = j.job_id FROM claimq.job j WHERE j.token = h.token;

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
SELECT is(claimq.node_of(5 * 281474976710656 + 17), 5, 'node_of reads the high bits');
SELECT is((SELECT seqmax FROM pg_sequence WHERE seqrelid = 'claimq.job_id_seq'::regclass),
	281474976710655::bigint, 'job ids from the sequence stay below 2^48');
SELECT ok(NOT has_function_privilege('public', 'claimq.node_of(bigint)', 'EXECUTE'),
	'PUBLIC cannot execute the new function');

ALTER EXTENSION claimq UPDATE TO '0.3';
SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'claimq'), '0.3',
	'ALTER EXTENSION claimq UPDATE TO 0.3 brings it to 0.3');
SELECT is((SELECT seqcache FROM pg_sequence WHERE seqrelid = 'claimq.token_seq'::regclass),
	65536::bigint, 'tokens are drawn from a per-backend cache');

-- Duties granted under 0.3 (grant_duty is SQL, so it runs on the old schema).
CREATE ROLE regress_claimq_up_producer;
CREATE ROLE regress_claimq_up_worker;
CREATE ROLE regress_claimq_up_admin;
SELECT claimq.grant_duty('regress_claimq_up_producer', 'produce');
SELECT claimq.grant_duty('regress_claimq_up_worker', 'work');
SELECT claimq.grant_duty('regress_claimq_up_admin', 'administer');

-- Through 0.5, where observe exists, to the current version (0.6 creates metrics() anew).
ALTER EXTENSION claimq UPDATE TO '0.5';
CREATE ROLE regress_claimq_up_observer;
SELECT claimq.grant_duty('regress_claimq_up_observer', 'observe');
CREATE TEMP TABLE init_privs_before AS
SELECT count(*) AS n FROM pg_init_privs i
 WHERE i.initprivs::text ~ 'regress_claimq_up';

-- The update to 0.8 makes state and max_attempts of domains in place of
-- claimq.job's CHECK constraints, without writing the table anew.
ALTER EXTENSION claimq UPDATE TO '0.7';
SELECT pg_relation_filenode('claimq.job') AS job_file_0_7 \gset

ALTER EXTENSION claimq UPDATE;

SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'claimq'), '0.8',
	'ALTER EXTENSION claimq UPDATE brings it to 0.8');
SELECT is(pg_relation_filenode('claimq.job'), :job_file_0_7::oid,
	'the update to 0.8 rewrites no job: claimq.job keeps its file');
SELECT results_eq($$SELECT atttypid::regtype::text FROM pg_attribute
					 WHERE attrelid = 'claimq.job'::regclass
					   AND attname IN ('state', 'max_attempts') ORDER BY attname$$,
	$$VALUES ('claimq.job_max_attempts'), ('claimq.job_state')$$,
	'state and max_attempts are of their domains');
SELECT is((SELECT count(*) FROM pg_constraint
			WHERE contypid IN ('claimq.job_state'::regtype, 'claimq.job_max_attempts'::regtype)
			  AND convalidated),
	2::bigint, 'the domains'' rules are validated');
SELECT throws_ok($$UPDATE claimq.job SET state = 'lost' WHERE state = 'pending'$$,
	'23514', NULL, 'an unknown state is refused after the update: 23514');
SELECT throws_ok($$UPDATE claimq.job SET max_attempts = 0 WHERE state = 'pending'$$,
	'23514', NULL, 'max_attempts 0 is refused after the update: 23514');
SELECT results_eq($$SELECT name, prioritized FROM claimq.queue ORDER BY name$$,
	$$VALUES ('up_a', true), ('up_b', false)$$,
	'the update marks the queue that has a job at a priority other than 0, and only it');
SELECT bag_eq($$SELECT job_id, token, run_at, enqueued_at, expires_at, claimed_at, finished_at,
					   queue_id, priority, attempts, state, worker, dedup_key, last_error, payload
				  FROM claimq.job$$,
	$$SELECT * FROM jobs_before$$,
	'every job is kept, column for column, token for token');
SELECT is((SELECT count(*) FROM claimq.job
			WHERE max_attempts IS NULL AND group_key IS NULL AND result IS NULL),
	8::bigint, 'the new columns start empty: each job follows its queue''s max_attempts');
SELECT bag_eq($$SELECT queue_id, name, lease, run_lease, max_attempts, retry_base, retry_max,
					   keep_done, keep_dead, notify, paused, created_at
				  FROM claimq.queue$$,
	'SELECT * FROM queues_before',
	'every queue is kept');
SELECT is((SELECT count(*) FROM claimq.queue
			WHERE group_limit IS NULL AND NOT group_fifo AND max_in_flight IS NULL
			  AND rate_limit IS NULL AND rate_period = '1 second'),
	(SELECT count(*) FROM queues_before), 'every queue starts without limits');
SELECT is((SELECT count(*) FROM claimq.job WHERE held), 0::bigint, 'no job is held');
SELECT bag_eq('SELECT * FROM claimq.key_claim', 'SELECT * FROM keys_before',
	'every key claim is kept');

-- The claims made before the update still hold.
SELECT ok((SELECT claimq.complete(job_id, token) FROM held WHERE n = 1),
	'a job claimed under 0.1 completes with its token');
SELECT is((SELECT string_agg(o.outcome || '/' || o.state, ',')
			 FROM held h, claimq.fail(ARRAY[h.job_id], ARRAY[h.token], 'x') o WHERE h.n = 2),
	'ok/dead', 'a job started under 0.1 fails with its token, dead after its queue''s one attempt');
SELECT is((SELECT string_agg(outcome, ',') FROM claimq.release_keys('up_scope',
			 ARRAY['x', 'y'], (SELECT array_agg(token ORDER BY key) FROM keys_before))),
	'ok,ok', 'key claims made under 0.1 are released with their token');
SELECT is(claimq.enqueue('up_b', '{}', dedup_key => 'k'),
	(SELECT job_id FROM jobs_before WHERE dedup_key = 'k'),
	'a live dedup key from 0.1 still dedups');
SELECT is((SELECT count(*) FROM claimq.claim('up_a', 10)), 2::bigint,
	'the queue works on: its two ready jobs are claimed');
SELECT throws_ok($$SELECT claimq.create_queue('up_c', lease => '-10 months 302 days')$$,
	'22023', 'lease must be greater than zero and at most 7 days',
	'queue settings are judged by timestamp arithmetic after the update');

-- What 0.4 adds, on the jobs of 0.1.
SELECT is((SELECT outcome || '/' || state FROM claimq.cancel(
			 ARRAY[(SELECT job_id FROM jobs_before WHERE payload->>'n' = '5')])),
	'ok/cancelled', 'a scheduled job from 0.1 is cancelled');
SELECT is((SELECT state FROM claimq.status(ARRAY[(SELECT job_id FROM jobs_before
													WHERE payload->>'n' = '7')])),
	'done', 'status shows a done job from 0.1');
SELECT is((SELECT count(*) FROM claimq.queue_stats WHERE cancelled = 1), 1::bigint,
	'queue_stats counts the cancelled job');

-- Duties granted before the update cover the new and the recreated
-- functions, and those grants stay user grants that pg_dump keeps.
SELECT ok(has_function_privilege('regress_claimq_up_producer',
		'claimq.enqueue(text,jsonb,timestamptz,integer,text,integer,text,text,bigint[],text,jsonb)', 'EXECUTE')
		  AND has_function_privilege('regress_claimq_up_producer', 'claimq.cancel(bigint[],text)', 'EXECUTE')
		  AND has_function_privilege('regress_claimq_up_producer', 'claimq.status(bigint[],text)', 'EXECUTE')
		  AND NOT has_function_privilege('regress_claimq_up_producer',
				'claimq.snooze(bigint[],bigint[],interval,text)', 'EXECUTE'),
	'the producer keeps enqueue and gets cancel and status, not snooze');
SELECT ok(has_function_privilege('regress_claimq_up_worker',
		'claimq.complete(bigint[],bigint[],jsonb[],text)', 'EXECUTE')
		  AND has_function_privilege('regress_claimq_up_worker', 'claimq.snooze(bigint,bigint,interval,text)', 'EXECUTE')
		  AND has_function_privilege('regress_claimq_up_worker', 'claimq.wait_for(bigint[],interval,text)', 'EXECUTE')
		  AND NOT has_function_privilege('regress_claimq_up_worker', 'claimq.cancel(bigint[],text)', 'EXECUTE'),
	'the worker keeps complete and gets snooze and wait_for, not cancel');
SELECT ok(has_function_privilege('regress_claimq_up_admin', 'claimq.retry_dead(text,bigint[])', 'EXECUTE')
		  AND has_function_privilege('regress_claimq_up_admin', 'claimq.cancel(bigint[],text)', 'EXECUTE')
		  AND has_table_privilege('regress_claimq_up_admin', 'claimq.queue_stats', 'SELECT')
		  AND has_table_privilege('regress_claimq_up_admin', 'claimq.counters', 'SELECT')
		  AND has_function_privilege('regress_claimq_up_admin',
				'claimq.create_schedule(text,text,text,jsonb,text,integer,text,jsonb)', 'EXECUTE')
		  AND has_table_privilege('regress_claimq_up_admin', 'claimq.schedules', 'SELECT')
		  AND has_function_privilege('regress_claimq_up_admin',
				'claimq.create_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean)', 'EXECUTE')
		  AND has_function_privilege('regress_claimq_up_admin',
				'claimq.alter_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean)', 'EXECUTE')
		  AND has_function_privilege('regress_claimq_up_admin',
				'claimq.set_group_weight(text,text,real)', 'EXECUTE')
		  AND has_table_privilege('regress_claimq_up_admin', 'claimq.group_stats', 'SELECT'),
	'the administrator keeps the recreated functions and views and gets cancel, schedules and group_stats');
SELECT ok(has_function_privilege('regress_claimq_up_producer', 'claimq.node_of(bigint)', 'EXECUTE')
		  AND has_function_privilege('regress_claimq_up_worker', 'claimq.node_of(bigint)', 'EXECUTE'),
	'the producer and the worker get node_of');
SELECT ok((SELECT bool_and(has_function_privilege(r, 'claimq.dependencies(bigint[],text)', 'EXECUTE'))
			 FROM unnest(ARRAY['regress_claimq_up_producer', 'regress_claimq_up_worker',
							   'regress_claimq_up_admin']) r)
		  AND NOT has_function_privilege('regress_claimq_up_observer', 'claimq.dependencies(bigint[],text)', 'EXECUTE'),
	'the producer, the worker and the administrator get dependencies, the observer not');
SELECT ok(NOT has_table_privilege('regress_claimq_up_worker', 'claimq.group_stats', 'SELECT')
		  AND NOT has_function_privilege('regress_claimq_up_worker',
				'claimq.create_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean)', 'EXECUTE'),
	'the worker gets neither');
SELECT is((SELECT count(*) FROM pg_init_privs i WHERE i.initprivs::text ~ 'regress_claimq_up'),
	(SELECT n FROM init_privs_before),
	'no grant to a user is recorded as an initial privilege of the extension');
SELECT ok(has_function_privilege('regress_claimq_up_observer', 'claimq.metrics()', 'EXECUTE')
		  AND has_function_privilege('regress_claimq_up_admin', 'claimq.metrics()', 'EXECUTE')
		  AND NOT has_function_privilege('regress_claimq_up_worker', 'claimq.metrics()', 'EXECUTE'),
	'the new metrics() keeps the grants of the old one');
SELECT ok((SELECT bool_and(has_function_privilege(r, 'claimq.version()', 'EXECUTE')
						 AND has_function_privilege(r, 'claimq.edition()', 'EXECUTE'))
			 FROM unnest(ARRAY['regress_claimq_up_producer', 'regress_claimq_up_worker',
							   'regress_claimq_up_admin', 'regress_claimq_up_observer']) r),
	'every duty''s role gets version() and edition()');
SELECT ok(has_function_privilege('regress_claimq_up_admin', 'claimq.maintain()', 'EXECUTE')
		  AND NOT has_function_privilege('regress_claimq_up_producer', 'claimq.maintain()', 'EXECUTE')
		  AND NOT has_function_privilege('regress_claimq_up_worker', 'claimq.maintain()', 'EXECUTE')
		  AND NOT has_function_privilege('regress_claimq_up_observer', 'claimq.maintain()', 'EXECUTE'),
	'the administrator gets maintain(), no other duty does');
SELECT is(ARRAY(SELECT tgname::text FROM pg_trigger
				 WHERE tgrelid = 'claimq.job'::regclass ORDER BY tgname),
	'{job_census_guard}',
	'the census''s guard is on the job table');
SELECT throws_ok('SELECT claimq.census_recount()', '25001', NULL,
	'a recount in a transaction that wrote is refused (it would count its own rows)');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
				 WHERE p.pronamespace = 'claimq'::regnamespace
				   AND (p.proname ~ '_0_[0-9_]*[0-9]$' OR p.proname = 'upgrade_copy_grants')),
	'{}'::text[], 'nothing of the update''s scaffolding is left');
SELECT ok(NOT has_function_privilege('public', 'claimq.wait_for(bigint[],interval,text)', 'EXECUTE')
		  AND NOT has_table_privilege('public', 'claimq.jobs', 'SELECT'),
	'PUBLIC gets nothing new');

SELECT * FROM finish();
ROLLBACK;
