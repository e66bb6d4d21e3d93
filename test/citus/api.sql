-- claimq's API through the coordinator of a distributed install
-- (test/citus/run, section 10): each call as a client sends it, a
-- statement of its own, and the contract's outcomes and SQLSTATEs.
-- pgTAP's functions run on the coordinator: every look at claimq's tables
-- is a scalar subquery, never a FROM that Citus would push to a worker
-- with the function.  The caller sets :qa and :qb, queues on the two
-- workers.
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
SELECT plan(74);

-- Queues.
SELECT lives_ok($$SELECT claimq.create_queue('ca_lease', lease => '1 minute')$$,
	'create_queue through the coordinator');
SELECT throws_ok($$SELECT claimq.create_queue('ca_lease')$$, '42710', NULL,
	'create_queue of an existing queue: 42710');
SELECT throws_ok($$SELECT claimq.create_queue('bad name')$$, '22023', NULL,
	'create_queue with an invalid name: 22023');

-- Enqueue and claim.
SELECT claimq.enqueue(:'qa', '{"n": 1}') AS a1 \gset
SELECT ok(claimq.node_of(:a1) = (SELECT groupid FROM pg_dist_placement
	WHERE shardid = get_shard_id_for_distribution_column('claimq.queue', :'qa')),
	'a job id carries the group of the worker that holds its queue');
SELECT claimq.enqueue(:'qa', '{"n": 1}', dedup_key => 'k1') AS d1 \gset
SELECT is(claimq.enqueue(:'qa', '{"n": 2}', dedup_key => 'k1'), :d1::bigint,
	'a live dedup key returns the job that holds it');
SELECT throws_ok($$SELECT claimq.enqueue('ca_none', '{}')$$, '42704', NULL,
	'enqueue into a queue that does not exist: 42704');
SELECT throws_ok($$SELECT claimq.claim('ca_none')$$, '42704', NULL,
	'claim from a queue that does not exist: 42704');
SELECT throws_ok($$SELECT claimq.claim(NULL)$$, '22004', NULL,
	'claim(NULL): 22004, not delegated');
SELECT throws_ok(format($$SELECT claimq.claim(%L, 0)$$, :'qa'), '22023', NULL,
	'claim of 0 jobs: 22023');

SELECT job_id AS c1, token AS t1 FROM claimq.claim(:'qa', 1, lease => '1 minute') \gset
-- (The job may be older than a move of the queue's shards: the token
-- carries the group of the worker that holds the queue now.)
SELECT is((:t1::bigint >> 48) % 128, (SELECT groupid::bigint FROM pg_dist_placement
	WHERE shardid = get_shard_id_for_distribution_column('claimq.queue', :'qa')) % 128,
	'a token carries an epoch of its worker''s group modulo 128');

-- The settles, given the queue.
SELECT is((SELECT outcome FROM claimq.extend(ARRAY[:c1]::bigint[], ARRAY[:t1]::bigint[], '2 minutes', queue => :'qa')),
	'ok', 'extend with the queue: ok');
SELECT is(claimq.start(:c1, :t1, queue => :'qa'), true, 'start (scalar) with the queue');
SELECT is((SELECT outcome FROM claimq.complete(ARRAY[:c1]::bigint[], ARRAY[:t1 + 1]::bigint[], queue => :'qa')),
	'stale', 'complete with another token: stale');
SELECT is((SELECT outcome FROM claimq.fail(ARRAY[:c1]::bigint[], ARRAY[:t1]::bigint[], 'boom', queue => :'qa')),
	'ok', 'fail with the queue: ok (retried)');
SELECT is((SELECT state FROM claimq.status(ARRAY[:c1]::bigint[], queue => :'qa')),
	'pending', 'status with the queue: the failed job is pending again');
SELECT throws_ok(format($$SELECT * FROM claimq.complete(ARRAY[1]::bigint[], ARRAY[1, 2]::bigint[], queue => %L)$$, :'qa'),
	'22023', NULL, 'job_ids and tokens of different lengths: 22023');
SELECT throws_ok($$SELECT * FROM claimq.complete(ARRAY[1]::bigint[], ARRAY[1]::bigint[], queue => 'ca_none')$$,
	'42704', NULL, 'a settle naming a queue that does not exist: 42704');

-- Two jobs in each worker's queue, settled in one call without the queue.
SELECT claimq.enqueue(:'qb', '{"n": 3}') \gset
SELECT job_id AS a2, token AS ta2 FROM claimq.claim(:'qa', 1) \gset
SELECT job_id AS b2, token AS tb2 FROM claimq.claim(:'qb', 1) \gset
SELECT is((SELECT array_agg(outcome ORDER BY n) FROM claimq.release(
		ARRAY[:b2, 9, :a2]::bigint[], ARRAY[:tb2, 9, :ta2]::bigint[]) WITH ORDINALITY AS r(job_id, outcome, n)),
	'{ok,missing,ok}', 'release without the queue, over both workers: each outcome in the order given');
SELECT is((SELECT array_agg(state ORDER BY n) FROM claimq.status(ARRAY[:a2, :b2]::bigint[])
		WITH ORDINALITY AS r(job_id, queue, state, attempts, run_at, finished_at, last_error, result, n)),
	'{pending,pending}', 'status without the queue: both released jobs are pending');
SELECT job_id AS a3, token AS ta3 FROM claimq.claim(:'qa', 1) \gset
SELECT is(claimq.snooze(:a3, :ta3, '1 hour'), true, 'snooze (scalar) without the queue');
SELECT is((SELECT state FROM claimq.status(ARRAY[:a3]::bigint[], queue => :'qa')),
	'pending', 'the snoozed job is pending');
SELECT ok((SELECT run_at FROM claimq.status(ARRAY[:a3]::bigint[], queue => :'qa')) > now() + '50 minutes',
	'and due in an hour');
SELECT is((SELECT array_agg(outcome) FROM claimq.cancel(ARRAY[:a3]::bigint[], queue => :'qa')),
	'{ok}', 'cancel with the queue');
SELECT is((SELECT array_agg(outcome) FROM claimq.cancel(ARRAY[:a3]::bigint[])),
	'{finished}', 'cancel again, without the queue: finished');

-- A job named with another worker's queue is not on that worker: missing
-- there, and nothing changes.
SELECT job_id AS b3, token AS tb3 FROM claimq.claim(:'qb', 1) \gset
SELECT is((SELECT outcome FROM claimq.complete(ARRAY[:b3]::bigint[], ARRAY[:tb3]::bigint[], queue => :'qa')),
	'missing', 'complete naming the other worker''s queue: missing');
SELECT is((SELECT state FROM claimq.status(ARRAY[:b3]::bigint[], queue => :'qb')),
	'claimed', 'and the job is still claimed');
SELECT is(claimq.complete(:b3, :tb3, queue => :'qb'), true, 'complete (scalar) with its own queue');

-- wait_for and the views.
SELECT claimq.enqueue(:'qb', '{"n": 4}') AS b_last \gset
SELECT is((SELECT state FROM claimq.wait_for(ARRAY[:b_last]::bigint[], '10 milliseconds', queue => :'qb')),
	'pending', 'wait_for with the queue returns the state at its timeout');
SELECT is((SELECT array_agg(state ORDER BY n) FROM claimq.wait_for(ARRAY[:b_last, 1]::bigint[], '10 milliseconds')
		WITH ORDINALITY AS r(job_id, queue, state, attempts, run_at, finished_at, last_error, result, n)),
	'{pending,NULL}', 'wait_for without the queue: each job''s state at the timeout, in order');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE job_id = :b_last), 1::bigint,
	'the jobs view finds a job through the coordinator');

-- Dedup key claims, by scope on the worker that holds the scope's shard.
SELECT token AS kt FROM claimq.claim_keys('ca_scope', ARRAY['k1'], '1 minute') \gset
SELECT ok(:kt::bigint > 0, 'claim_keys through the coordinator wins a free key');
SELECT is((SELECT count(*) FROM claimq.claim_keys('ca_scope', ARRAY['k1'], '1 minute')),
	0::bigint, 'a held key is not won again');
SELECT is((SELECT array_agg(outcome) FROM claimq.release_keys('ca_scope', ARRAY['k1'], ARRAY[:kt + 1]::bigint[])),
	'{stale}', 'release_keys with another token: stale');
SELECT is((SELECT array_agg(outcome) FROM claimq.release_keys('ca_scope', ARRAY['k1'], ARRAY[:kt]::bigint[])),
	'{ok}', 'release_keys by the winner: ok');
SELECT throws_ok($$SELECT * FROM claimq.claim_keys(NULL, ARRAY['k1'], '1 minute')$$, '22004', NULL,
	'claim_keys with a NULL scope: 22004, not delegated');

-- Group limits: a group's jobs past its limit wait (sync_groups, in
-- PL/pgSQL, runs on the queue's shards like the C statements).
SELECT lives_ok($$SELECT claimq.create_queue('ca_groups', group_limit => 1)$$,
	'create_queue with a group limit');
SELECT claimq.enqueue('ca_groups', '{}', group_key => 'g1') AS g1 \gset
SELECT claimq.enqueue('ca_groups', '{}', group_key => 'g1') AS g2 \gset
SELECT claimq.enqueue('ca_groups', '{}', group_key => 'g2') AS g3 \gset
SELECT is((SELECT array_agg(job_id ORDER BY job_id) FROM claimq.claim('ca_groups', 5)),
	ARRAY[:g1, :g3]::bigint[], 'a claim takes one job of each group of limit 1');
-- The administration calls of one queue (written in PL/pgSQL) run on its
-- worker as statements of their own, as a client sends them; Citus does
-- not delegate one inside a PL/pgSQL block (pgTAP's), and there it fails.
SELECT claimq.alter_queue('ca_groups', group_limit => 2) \gset
SELECT is((SELECT array_agg(job_id) FROM claimq.claim('ca_groups', 5)),
	ARRAY[:g2]::bigint[], 'alter_queue raised the group limit on the queue''s worker: the held job is claimed');
SELECT in_flight AS g1_in_flight FROM claimq.group_stats WHERE queue = 'ca_groups' AND group_key = 'g1' \gset
SELECT is(:g1_in_flight::bigint, 2::bigint, 'group_stats through the coordinator');
SELECT throws_ok($$SELECT claimq.alter_queue('ca_groups', group_limit => 3)$$, '0A000', NULL,
	'alter_queue inside a PL/pgSQL block, not delegated: 0A000');
SELECT claimq.pause_queue('ca_groups') \gset
SELECT paused FROM claimq.queue_stats WHERE queue = 'ca_groups' \gset
SELECT is(:'paused'::boolean, true, 'pause_queue: the queue is paused');
SELECT claimq.resume_queue('ca_groups') \gset
SELECT paused FROM claimq.queue_stats WHERE queue = 'ca_groups' \gset
SELECT is(:'paused'::boolean, false, 'resume_queue: it is not');
SELECT lives_ok($$SELECT claimq.create_queue('ca_dead', max_attempts => 1)$$,
	'create_queue with one attempt');
SELECT claimq.enqueue('ca_dead', '{}') AS x1 \gset
SELECT job_id AS x1c, token AS x1t FROM claimq.claim('ca_dead', 1) \gset
SELECT is(claimq.fail(:x1c, :x1t, 'boom', queue => 'ca_dead'), true, 'fail its only attempt');
SELECT claimq.retry_dead('ca_dead') AS redriven \gset
SELECT is(:redriven::bigint, 1::bigint, 'retry_dead redrives the dead job');
SELECT claimq.purge_queue('ca_dead') AS purged \gset
SELECT is(:purged::bigint, 1::bigint, 'purge_queue deletes the pending job');
SELECT claimq.drop_queue('ca_dead') \gset
SELECT count(*) AS left_queues FROM claimq.queue_stats WHERE queue = 'ca_dead' \gset
SELECT is(:left_queues::bigint, 0::bigint, 'drop_queue: the queue is gone');

-- A workflow within one queue: the dependent runs after its jobs finish,
-- judged on the queue's worker at the finishing commit.
SELECT claimq.enqueue(:'qa', '{"w": 1}') AS w1 \gset
SELECT claimq.enqueue(:'qa', '{"w": 2}', after => ARRAY[:w1]::bigint[]) AS w2 \gset
SELECT is((SELECT state FROM claimq.status(ARRAY[:w2]::bigint[], queue => :'qa')),
	'waiting', 'a job enqueued after another waits');
SELECT is((SELECT claimq.node_of(j.after_set) FROM claimq.job j WHERE j.job_id = :w2),
	claimq.node_of(:w2), 'its set of jobs to run after carries its worker''s group, as its id does');
SELECT job_id AS w1c, token AS w1t FROM claimq.claim(:'qa', 10) WHERE job_id = :w1 \gset
SELECT is(claimq.complete(:w1c, :w1t), true, 'its job completes (without the queue)');
SELECT * FROM claimq.dependencies(ARRAY[:w2]::bigint[], :'qa') \gset dep_
SELECT is(:'dep_state'::text, 'done', 'dependencies with the queue: the job it ran after is done');
SELECT is((SELECT state FROM claimq.status(ARRAY[:w2]::bigint[], queue => :'qa')),
	'pending', 'and the dependent is ready');
SELECT is((SELECT count(*) FROM claimq.dependencies(ARRAY[:w2]::bigint[], :'qa')), 1::bigint,
	'dependencies with the queue in a subquery, not delegated: found on the queue''s worker');
SELECT is((SELECT count(*) FROM claimq.dependencies(ARRAY[:w2]::bigint[], :'qb')), 0::bigint,
	'dependencies naming another queue than the job''s, not delegated: no rows, as on that queue''s worker');
SELECT is((SELECT array_agg(after_id) FROM claimq.dependencies(ARRAY[1, :w2]::bigint[])),
	ARRAY[:w1]::bigint[], 'dependencies without the queue: the rows of the jobs that exist, found on their worker');

-- One transaction finishes jobs in two queues whose shards are two of
-- one worker's: at its commit each shard's dependents are judged, the
-- second's with statements planned for its own shard (a plan kept from
-- the first's would find none of them).
WITH c AS (SELECT 'ca_two_' || i AS name,
				  get_shard_id_for_distribution_column('claimq.queue', 'ca_two_' || i) AS shard
			 FROM generate_series(1, 64) i),
	 p AS (SELECT c.*, l.groupid FROM c JOIN pg_dist_placement l ON l.shardid = c.shard)
SELECT a.name AS tq1, b.name AS tq2 FROM p a JOIN p b ON a.groupid = b.groupid AND a.shard < b.shard
 ORDER BY a.name, b.name LIMIT 1 \gset
SELECT claimq.create_queue(:'tq1') \gset
SELECT claimq.create_queue(:'tq2') \gset
SELECT claimq.enqueue(:'tq1', '{}') AS t1p \gset
SELECT claimq.enqueue(:'tq1', '{}', after => ARRAY[:t1p]::bigint[]) AS t1d \gset
SELECT claimq.enqueue(:'tq2', '{}') AS t2p \gset
SELECT claimq.enqueue(:'tq2', '{}', after => ARRAY[:t2p]::bigint[]) AS t2d \gset
SELECT job_id AS t1c, token AS t1t FROM claimq.claim(:'tq1', 1) \gset
SELECT job_id AS t2c, token AS t2t FROM claimq.claim(:'tq2', 1) \gset
BEGIN;
SELECT outcome FROM claimq.complete(ARRAY[:t1c]::bigint[], ARRAY[:t1t]::bigint[], queue => :'tq1') \gset
SELECT outcome FROM claimq.complete(ARRAY[:t2c]::bigint[], ARRAY[:t2t]::bigint[], queue => :'tq2') \gset
COMMIT;
SELECT is((SELECT array_agg(state ORDER BY job_id) FROM claimq.status(ARRAY[:t1d, :t2d]::bigint[])),
	'{pending,pending}', 'jobs finished on two shards of one worker in one transaction: the dependents of both are ready');

-- Workflows across workers: a job of :'qa' runs after jobs of :'qb'.
-- The two workers exchange mail after their commits, handed on by their
-- reclaimers (sql/after-elsewhere.sql): each check waits for its event,
-- within a deadline that is part of what it states.
CREATE FUNCTION pg_temp.state_within(job bigint, q text, want text, secs integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	now_state text;
	deadline timestamptz := clock_timestamp() + make_interval(secs => secs);
BEGIN
	LOOP
		SELECT s.state INTO now_state FROM claimq.status(ARRAY[job], queue => q) s;
		EXIT WHEN now_state IS NOT DISTINCT FROM want OR clock_timestamp() > deadline;
		PERFORM pg_sleep(0.05);
	END LOOP;
	RETURN now_state;
END
$$;
-- Whether the query (a boolean) holds within secs seconds.
CREATE FUNCTION pg_temp.holds_within(query text, secs integer)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	deadline timestamptz := clock_timestamp() + make_interval(secs => secs);
	holds boolean;
BEGIN
	LOOP
		EXECUTE query INTO holds;
		IF holds THEN
			RETURN true;
		END IF;
		EXIT WHEN clock_timestamp() > deadline;
		PERFORM pg_sleep(0.05);
	END LOOP;
	RETURN false;
END
$$;
CREATE FUNCTION pg_temp.watched_within(job bigint, secs integer)
RETURNS boolean LANGUAGE sql AS $$
	SELECT pg_temp.holds_within(format(
		'SELECT count(*) > 0 FROM claimq.job_watcher w WHERE w.job_id = %s', job), secs)
$$;

SELECT claimq.enqueue(:'qb', '{"x": 1}') AS xb \gset
SELECT claimq.enqueue(:'qa', '{"x": 2}', after => ARRAY[:xb]::bigint[]) AS xa \gset
SELECT is((SELECT state FROM claimq.status(ARRAY[:xa]::bigint[], queue => :'qa')),
	'waiting', 'a job enqueued after a job of another worker''s queue is accepted, and waits');
SELECT ok(pg_temp.watched_within(:xb, 30),
	'within 30 s the job it runs after is watched on its own worker');
SELECT job_id AS xbc, token AS xbt FROM claimq.claim(:'qb', 10) WHERE job_id = :xb \gset
SELECT is(claimq.complete(:xbc, :xbt, queue => :'qb'), true, 'that job completes (its queue keeps nothing)');
SELECT is(pg_temp.state_within(:xa, :'qa', 'pending', 30), 'pending',
	'within 30 s of the commit the dependent on the other worker is ready');

-- A job of the other worker that finished before the look reaches it: its
-- state is heard at once; one that failed cancels its dependents, and the
-- cancellation reaches a job of the first worker after them in turn.
SELECT claimq.alter_queue(:'qb', keep_done => '1 hour', keep_dead => '1 hour') \gset
SELECT claimq.enqueue(:'qb', '{"y": 1}') AS yb \gset
SELECT job_id AS ybc, token AS ybt FROM claimq.claim(:'qb', 10) WHERE job_id = :yb \gset
SELECT claimq.complete(:ybc, :ybt, queue => :'qb') \gset
SELECT claimq.enqueue(:'qa', '{"y": 2}', after => ARRAY[:yb]::bigint[]) AS ya \gset
SELECT is(pg_temp.state_within(:ya, :'qa', 'pending', 30), 'pending',
	'after a job of another worker that is done already: ready within 30 s');
SELECT claimq.enqueue(:'qb', '{"z": 1}', max_attempts => 1) AS zb \gset
SELECT claimq.enqueue(:'qa', '{"z": 2}', after => ARRAY[:zb]::bigint[]) AS za \gset
SELECT claimq.enqueue(:'qb', '{"z": 3}', after => ARRAY[:za]::bigint[]) AS zc \gset
SELECT ok(pg_temp.watched_within(:zb, 30) AND pg_temp.watched_within(:za, 30),
	'each job is watched on its own worker within 30 s');
SELECT job_id AS zbc, token AS zbt FROM claimq.claim(:'qb', 10) WHERE job_id = :zb \gset
SELECT claimq.fail(:zbc, :zbt, 'boom', queue => :'qb') \gset
SELECT is(pg_temp.state_within(:zc, :'qb', 'cancelled', 30), 'cancelled',
	'a dead job cancels its dependent on the other worker, and that one its own back on the first, within 30 s');
SELECT is((SELECT state FROM claimq.status(ARRAY[:za]::bigint[], queue => :'qa')),
	'cancelled', 'the dependent between them is cancelled');
SELECT claimq.alter_queue(:'qb', keep_done => '0', keep_dead => '14 days') \gset

-- drop_queue of a queue whose job a set of another worker watches: 2BP01,
-- unless forced, and then the dependent hears it was removed unfinished.
WITH c AS (SELECT 'ca_drop_' || i AS name,
				  get_shard_id_for_distribution_column('claimq.queue', 'ca_drop_' || i) AS shard
			 FROM generate_series(1, 64) i)
SELECT c.name AS dq FROM c JOIN pg_dist_placement l ON l.shardid = c.shard
 WHERE l.groupid <> (SELECT groupid FROM pg_dist_placement
					  WHERE shardid = get_shard_id_for_distribution_column('claimq.queue', :'qa'))
 ORDER BY c.name LIMIT 1 \gset
SELECT claimq.create_queue(:'dq') \gset
SELECT claimq.enqueue(:'dq', '{"d": 1}') AS db \gset
SELECT claimq.enqueue(:'qa', '{"d": 2}', after => ARRAY[:db]::bigint[]) AS da \gset
SELECT ok(pg_temp.watched_within(:db, 30), 'a job of another worker''s queue is watched within 30 s');
-- (A statement of its own, as Citus delegates it; throws_ok's EXECUTE
-- in PL/pgSQL would not be.)
\set ON_ERROR_STOP 0
SELECT claimq.drop_queue(:'dq');
\set ON_ERROR_STOP 1
SELECT is(:'LAST_ERROR_SQLSTATE'::text, '2BP01',
	'drop_queue of its queue: 2BP01, a job of another worker waits on it');
SELECT claimq.drop_queue(:'dq', force => true) \gset
SELECT is(pg_temp.state_within(:da, :'qa', 'cancelled', 30), 'cancelled',
	'forced, the dependent on the other worker is cancelled within 30 s');

-- Across two shards of one worker: the same mail, handed on within the node.
SELECT claimq.enqueue(:'tq1', '{"s": 1}') AS sb \gset
SELECT claimq.enqueue(:'tq2', '{"s": 2}', after => ARRAY[:sb]::bigint[]) AS sa \gset
SELECT ok(pg_temp.watched_within(:sb, 30), 'a job of another shard of the same worker is watched within 30 s');
SELECT job_id AS sbc, token AS sbt FROM claimq.claim(:'tq1', 10) WHERE job_id = :sb \gset
SELECT claimq.complete(:sbc, :sbt, queue => :'tq1') \gset
SELECT is(pg_temp.state_within(:sa, :'tq2', 'pending', 30), 'pending',
	'and its dependent in the other shard is ready within 30 s of its completion');

-- A rate limit on a worker: its claims obey it, and that worker's
-- reclaimer records the bucket in the queue's row.
CREATE FUNCTION pg_temp.rate_recorded_within(q text, secs integer)
RETURNS boolean LANGUAGE sql AS $$
	SELECT pg_temp.holds_within(format(
		'SELECT r.rate_at IS NOT NULL FROM claimq.queue r WHERE r.name = %L', q), secs)
$$;
SELECT claimq.create_queue('ca_rate', rate_limit => 2, rate_period => '1 hour') \gset
SELECT count(*) AS rate_jobs FROM claimq.enqueue_many('ca_rate', ARRAY['{}', '{}', '{}', '{}']::jsonb[]) \gset
SELECT is((SELECT count(*) FROM claimq.claim('ca_rate', 4)), 2::bigint,
	'a claim of a queue limited to 2 jobs an hour gets 2');
SELECT is((SELECT count(*) FROM claimq.claim('ca_rate', 4)), 0::bigint, 'and the next gets none');
SELECT ok(pg_temp.rate_recorded_within('ca_rate', 30),
	'its worker''s reclaimer records the rate bucket in the queue''s row within 30 s');
SELECT claimq.create_queue('ca_flight', max_in_flight => 1) \gset
SELECT count(*) AS flight_jobs FROM claimq.enqueue_many('ca_flight', ARRAY['{}', '{}']::jsonb[]) \gset
SELECT is((SELECT count(*) FROM claimq.claim('ca_flight', 2)), 1::bigint,
	'a claim of a queue with max_in_flight 1 gets 1 job');
SELECT is((SELECT count(*) FROM claimq.claim('ca_flight', 2)), 0::bigint,
	'and none more while that one is claimed');

SELECT * FROM finish();
