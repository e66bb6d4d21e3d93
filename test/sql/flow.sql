-- Flow control: group_limit, group_fifo, max_in_flight, rate_limit and
-- group_stats; what frees a slot and what keeps it; every refusal.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(82);

-- The free jobs of each group of a queue (pending and not held, or in
-- flight), for checking the invariant the claim relies on.
CREATE FUNCTION pg_temp.free_jobs(q text)
RETURNS TABLE(group_key text, free bigint) LANGUAGE sql AS $$
	SELECT j.group_key, count(*) FILTER (WHERE NOT j.held)
	  FROM claimq.job j JOIN claimq.queue u USING (queue_id)
	 WHERE u.name = q AND j.group_key IS NOT NULL
	   AND j.state IN ('pending', 'claimed', 'running')
	 GROUP BY j.group_key ORDER BY j.group_key
$$;

-- Claim everything claimable, returning the job ids (in claim order).
CREATE FUNCTION pg_temp.take(q text, n integer DEFAULT 100, st boolean DEFAULT false)
RETURNS TABLE(job_id bigint, token bigint) LANGUAGE sql AS $$
	SELECT c.job_id, c.token FROM claimq.claim(q, n, start => st) c
$$;

--
-- Refusals: a limit is 1 to 1,000,000; rate_period greater than zero and
-- at most a day; NULL where a value is required.
--
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', group_limit => 0)$$,
	'22023', NULL, 'create_queue: group_limit 0 is refused (NULL means no limit)');
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', group_limit => 1000001)$$,
	'22023', 'group_limit must be between 1 and 1000000', 'group_limit above 1,000,000');
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', max_in_flight => -1)$$,
	'22023', 'max_in_flight must be between 1 and 1000000', 'negative max_in_flight');
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', rate_limit => 0)$$,
	'22023', 'rate_limit must be between 1 and 1000000', 'rate_limit 0 on create');
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', rate_limit => 5, rate_period => '0')$$,
	'22023', 'rate_period must be greater than zero and at most 1 day', 'rate_period 0');
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', rate_period => '25 hours')$$,
	'22023', 'rate_period must be greater than zero and at most 1 day', 'rate_period over a day');
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', rate_period => '-10 months 302 days')$$,
	'22023', NULL, 'rate_period judged by timestamp arithmetic: -10 months 302 days is refused');
-- A month has no fixed length, and the bucket counts a period in days and
-- time: a month part is refused, whatever the rest adds up to.
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', rate_limit => 1, rate_period => '1 mon -30 days')$$,
	'22023', 'rate_period must not have a month part', 'rate_period 1 mon -30 days is refused');
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', rate_limit => 1, rate_period => '1 mon -29 days 23 hours')$$,
	'22023', 'rate_period must not have a month part', 'rate_period with a month part of a day is refused too');
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', group_fifo => NULL)$$,
	'22004', NULL, 'create_queue: group_fifo NULL');
SELECT throws_ok($$SELECT claimq.create_queue('fl_bad', rate_period => NULL)$$,
	'22004', NULL, 'create_queue: rate_period NULL');
SELECT is((SELECT count(*) FROM claimq.queue WHERE name = 'fl_bad'), 0::bigint,
	'no refused call created a queue');

SELECT claimq.create_queue('fl_alter');
SELECT throws_ok($$SELECT claimq.alter_queue('fl_alter', group_limit => -1)$$,
	'22023', NULL, 'alter_queue: a negative limit');
SELECT throws_ok($$SELECT claimq.alter_queue('fl_alter', rate_period => '2 days')$$,
	'22023', NULL, 'alter_queue: rate_period over a day');
SELECT throws_ok($$SELECT claimq.alter_queue('fl_alter', rate_period => '-1 mon 31 days')$$,
	'22023', 'rate_period must not have a month part', 'alter_queue: rate_period with a month part');
SELECT claimq.alter_queue('fl_alter', group_limit => 3, max_in_flight => 7,
						  rate_limit => 9, rate_period => '1 minute');
SELECT results_eq($$SELECT group_limit, group_fifo, max_in_flight, rate_limit, rate_period
					  FROM claimq.queue WHERE name = 'fl_alter'$$,
	$$VALUES (3, false, 7, 9, '1 minute'::interval)$$, 'alter_queue sets each option');
SELECT claimq.alter_queue('fl_alter', lease => '1 minute');
SELECT results_eq($$SELECT group_limit, max_in_flight, rate_limit FROM claimq.queue WHERE name = 'fl_alter'$$,
	$$VALUES (3, 7, 9)$$, 'NULL leaves each as it is');
SELECT claimq.alter_queue('fl_alter', group_limit => 0, max_in_flight => 0, rate_limit => 0);
SELECT results_eq($$SELECT group_limit, max_in_flight, rate_limit FROM claimq.queue WHERE name = 'fl_alter'$$,
	$$VALUES (NULL::integer, NULL::integer, NULL::integer)$$, '0 removes each limit');

--
-- group_limit: at most that many jobs of one group claimed or running.
--
SELECT claimq.create_queue('fl_g', group_limit => 2, lease => '1 hour');
SELECT claimq.enqueue_many('fl_g', array_fill('{}'::jsonb, ARRAY[8]),
						   group_keys => '{a,a,a,a,b,b,NULL,NULL}') IS NOT NULL;
SELECT results_eq($$SELECT * FROM pg_temp.free_jobs('fl_g')$$,
	$$VALUES ('a'::text, 2::bigint), ('b', 2)$$,
	'enqueue leaves at most group_limit jobs of a group free');
CREATE TEMP TABLE t1 AS SELECT * FROM pg_temp.take('fl_g');
SELECT is((SELECT count(*) FROM t1), 6::bigint,
	'a claim takes two of a, two of b and both jobs without a group');
SELECT results_eq($$SELECT group_key, count(*) FROM claimq.job
					 WHERE job_id IN (SELECT job_id FROM t1) GROUP BY 1 ORDER BY 1$$,
	$$VALUES ('a'::text, 2::bigint), ('b', 2), (NULL, 2)$$, 'per group: 2, 2, and the ungrouped 2');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_g')), 0::bigint,
	'a saturated group gives nothing more');
SELECT results_eq($$SELECT group_key, ready, in_flight, blocked FROM claimq.group_stats
					 WHERE queue = 'fl_g' ORDER BY 2 DESC$$,
	$$VALUES ('a'::text, 2::bigint, 2::bigint, true), ('b', 0, 2, false)$$,
	'group_stats: a is blocked with 2 ready and 2 in flight; b has nothing ready');

-- complete frees a slot, in the same transaction
SELECT is((SELECT outcome FROM claimq.complete(ARRAY(SELECT job_id FROM t1 t JOIN claimq.job j USING (job_id) WHERE j.group_key = 'a' ORDER BY 1 LIMIT 1),
											   ARRAY(SELECT t.token FROM t1 t JOIN claimq.job j USING (job_id) WHERE j.group_key = 'a' ORDER BY 1 LIMIT 1))),
	'ok', 'complete one job of a');
SELECT results_eq($$SELECT * FROM pg_temp.free_jobs('fl_g')$$,
	$$VALUES ('a'::text, 2::bigint), ('b', 2)$$, 'a has a free pending job again');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_g')), 1::bigint, 'the next claim takes exactly one job of a');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_g')), 0::bigint, 'and then nothing');

-- a batch completed in one call frees the slots of all its groups
SELECT claimq.create_queue('fl_gb', group_limit => 1, lease => '1 hour');
SELECT claimq.enqueue_many('fl_gb', array_fill('{}'::jsonb, ARRAY[4]),
						   group_keys => '{gx,gx,gy,gy}') IS NOT NULL;
CREATE TEMP TABLE tb AS SELECT * FROM pg_temp.take('fl_gb');
SELECT results_eq($$SELECT outcome, count(*) FROM claimq.complete(ARRAY(SELECT job_id FROM tb ORDER BY 1),
																  ARRAY(SELECT token FROM tb ORDER BY job_id))
					 GROUP BY 1$$,
	$$VALUES ('ok'::text, 2::bigint)$$, 'complete the first job of gx and of gy in one call');
SELECT results_eq($$SELECT * FROM pg_temp.free_jobs('fl_gb')$$,
	$$VALUES ('gx'::text, 1::bigint), ('gy', 1)$$, 'the second job of gx and of gy is free');

-- release and an expired claim keep the slot; the job is free and claimable
SELECT job_id AS rj, token AS rt FROM claimq.job WHERE group_key = 'a' AND state = 'claimed' ORDER BY job_id LIMIT 1 \gset
SELECT is(claimq.release(:rj, :rt), true, 'release a job of a');
SELECT results_eq($$SELECT * FROM pg_temp.free_jobs('fl_g')$$,
	$$VALUES ('a'::text, 2::bigint), ('b', 2)$$, 'a released job keeps its slot');
SELECT is((SELECT job_id FROM pg_temp.take('fl_g')), :rj::bigint, 'the released job is claimed again, nothing else');

-- fail with attempts left: pending later; a ready held job takes the slot
SELECT job_id AS fj, token AS ft FROM claimq.job WHERE job_id = :rj \gset
SELECT is((SELECT state FROM claimq.fail(ARRAY[:fj]::bigint[], ARRAY[:ft]::bigint[], 'boom', retry_in => '1 hour')),
	'pending', 'fail with a retry an hour away');
SELECT results_eq(format('SELECT held FROM claimq.job WHERE job_id = %s', :fj), $$VALUES (true)$$,
	'the retrying job is held: the ready job behind it takes its place');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_g')), 1::bigint, 'one ready job of a is claimed in its place');
SELECT results_eq($$SELECT * FROM pg_temp.free_jobs('fl_g')$$,
	$$VALUES ('a'::text, 2::bigint), ('b', 2)$$, 'still at most two free jobs of a');

-- cancel and a permanent failure free a slot each
SELECT job_id AS cj FROM claimq.job WHERE group_key = 'b' AND state = 'claimed' ORDER BY job_id LIMIT 1 \gset
SELECT claimq.enqueue('fl_g', '{}', group_key => 'b') AS b3 \gset
SELECT results_eq(format('SELECT held FROM claimq.job WHERE job_id = %s', :b3), $$VALUES (true)$$,
	'a third job of b is held while b is saturated');
SELECT is((SELECT outcome FROM claimq.cancel(ARRAY[:cj]::bigint[])), 'ok', 'cancel a claimed job of b');
SELECT results_eq(format('SELECT held FROM claimq.job WHERE job_id = %s', :b3), $$VALUES (false)$$,
	'cancel freed its slot: the held job of b is free');
SELECT job_id AS dj, token AS dt FROM claimq.job WHERE group_key = 'b' AND state = 'claimed' ORDER BY job_id LIMIT 1 \gset
SELECT claimq.enqueue('fl_g', '{}', group_key => 'b') AS b4 \gset
SELECT is((SELECT state FROM claimq.fail(ARRAY[:dj]::bigint[], ARRAY[:dt]::bigint[], permanent => true)),
	'dead', 'a permanent failure');
SELECT results_eq(format('SELECT held FROM claimq.job WHERE job_id = %s', :b4), $$VALUES (false)$$,
	'a dead job frees its slot');

-- reclaim: an expired running job that dies frees its slot
SELECT claimq.create_queue('fl_r', group_limit => 1, max_attempts => 1, lease => '1 hour');
SELECT claimq.enqueue_many('fl_r', array_fill('{}'::jsonb, ARRAY[2]), group_keys => '{r,r}') IS NOT NULL;
SELECT job_id AS xj FROM pg_temp.take('fl_r', 10, true) \gset
UPDATE claimq.job SET expires_at = now() - interval '1 second' WHERE job_id = :xj;
SELECT results_eq($$SELECT released, retried, dead FROM claimq.reclaim('fl_r')$$,
	$$VALUES (0::bigint, 0::bigint, 1::bigint)$$, 'reclaim: the expired running job is dead (one attempt)');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_r')), 1::bigint, 'its slot is free: the next job is claimed');

-- snooze: pending later, and the slot goes to the ready job behind it
SELECT claimq.create_queue('fl_s', group_limit => 1, lease => '1 hour');
SELECT claimq.enqueue_many('fl_s', array_fill('{}'::jsonb, ARRAY[2]), group_keys => '{s,s}') IS NOT NULL;
SELECT job_id AS sj, token AS st FROM pg_temp.take('fl_s') \gset
SELECT is(claimq.snooze(:sj, :st, '1 hour'), true, 'snooze the claimed job for an hour');
SELECT isnt((SELECT job_id FROM pg_temp.take('fl_s')), :sj::bigint, 'the other job of s is claimed meanwhile');

-- a job without a group is never held
SELECT claimq.enqueue('fl_s', '{}') AS nj \gset
SELECT is((SELECT job_id FROM pg_temp.take('fl_s')), :nj::bigint, 'a job without a group is claimed as on any queue');

--
-- group_fifo: one at a time per group, lowest id first, even when that
-- job waits for a retry.
--
SELECT claimq.create_queue('fl_f', group_fifo => true, lease => '1 hour');
SELECT claimq.enqueue_many('fl_f', array_fill('{}'::jsonb, ARRAY[6]),
						   group_keys => '{x,y,x,y,x,y}') IS NOT NULL;
SELECT min(job_id) FILTER (WHERE group_key = 'x') AS fx, min(job_id) FILTER (WHERE group_key = 'y') AS fy
  FROM claimq.job j JOIN claimq.queue q USING (queue_id) WHERE q.name = 'fl_f' \gset
SELECT results_eq($$SELECT job_id FROM pg_temp.take('fl_f') ORDER BY 1$$,
	format('VALUES (%s::bigint), (%s)', :fx, :fy), 'FIFO: one job per group, each its lowest id');
SELECT is((SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id)
			WHERE q.name = 'fl_f' AND j.state = 'claimed'), 2::bigint, 'two claimed, one per group');
SELECT job_id AS x1, token AS x1t FROM claimq.job j WHERE group_key = 'x' AND state = 'claimed' \gset
SELECT is((SELECT state FROM claimq.fail(ARRAY[:x1]::bigint[], ARRAY[:x1t]::bigint[], 'later', retry_in => '1 hour')),
	'pending', 'fail the head of x with a retry an hour away');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_f')), 0::bigint,
	'the group waits for its retrying head: nothing of x is claimed');
SELECT results_eq($$SELECT ready, in_flight, blocked FROM claimq.group_stats WHERE queue = 'fl_f' AND group_key = 'x'$$,
	$$VALUES (2::bigint, 0::bigint, true)$$, 'group_stats: x is blocked behind its head');
-- Make the retry due by hand (an edit in plain SQL, which a claim floor
-- may pass over for a moment: look from the head of the queue).
SET LOCAL claimq.claim_floors = off;
UPDATE claimq.job SET run_at = now() WHERE job_id = :x1;
SELECT is((SELECT job_id FROM pg_temp.take('fl_f')), :x1::bigint, 'when the retry is due the head runs again');
SELECT token AS x1t FROM claimq.job WHERE job_id = :x1 \gset
SELECT is(claimq.complete(:x1, :x1t), true, 'complete the head');
SELECT min(job_id) AS x2 FROM claimq.job WHERE group_key = 'x' AND state = 'pending' \gset
SELECT is((SELECT job_id FROM pg_temp.take('fl_f')), :x2::bigint, 'the next of x by id is claimed');

-- retry_dead of an earlier job makes it the group's next
SELECT claimq.create_queue('fl_d', group_fifo => true, lease => '1 hour');
SELECT claimq.enqueue_many('fl_d', array_fill('{}'::jsonb, ARRAY[3]), group_keys => '{d,d,d}') IS NOT NULL;
SELECT job_id AS d1, token AS d1t FROM pg_temp.take('fl_d') \gset
SELECT is((SELECT state FROM claimq.fail(ARRAY[:d1]::bigint[], ARRAY[:d1t]::bigint[], permanent => true)), 'dead',
	'the head of d dies');
SELECT is(claimq.retry_dead('fl_d'), 1::bigint, 'retry_dead redrives it');
SELECT is((SELECT job_id FROM pg_temp.take('fl_d')), :d1::bigint, 'it is the group''s next again, before the later ones');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_d')), 0::bigint, 'and the only one in flight');

-- A group's cap, the one rule of C and SQL: group_fifo means 1.
SELECT results_eq($$SELECT claimq.group_cap(l, f)
					  FROM (VALUES (1, NULL::integer, false), (2, 3, false), (3, 3, true),
								   (4, NULL, true)) v(n, l, f) ORDER BY n$$,
	$$VALUES (NULL::integer), (3), (1), (1)$$,
	'group_cap: none without limits, else group_limit, and 1 with group_fifo whatever group_limit says');

--
-- alter_queue re-decides the held jobs of every group.
--
SELECT claimq.create_queue('fl_a', lease => '1 hour');
SELECT claimq.enqueue_many('fl_a', array_fill('{}'::jsonb, ARRAY[6]), group_keys => '{k,k,k,k,l,l}') IS NOT NULL;
SELECT is((SELECT count(*) FROM pg_temp.take('fl_a', 2)), 2::bigint, 'two jobs of k claimed before any limit');
SELECT claimq.alter_queue('fl_a', group_limit => 3);
SELECT results_eq($$SELECT * FROM pg_temp.free_jobs('fl_a')$$,
	$$VALUES ('k'::text, 3::bigint), ('l', 2)$$, 'a new group_limit holds the pending jobs beyond it');
SELECT claimq.alter_queue('fl_a', group_limit => 2);
SELECT results_eq($$SELECT * FROM pg_temp.free_jobs('fl_a')$$,
	$$VALUES ('k'::text, 2::bigint), ('l', 2)$$, 'a lower limit holds more (the two in flight stay)');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_a')), 2::bigint, 'then only l''s two can be claimed');
SELECT claimq.alter_queue('fl_a', group_fifo => true);
SELECT results_eq($$SELECT * FROM pg_temp.free_jobs('fl_a')$$,
	$$VALUES ('k'::text, 2::bigint), ('l', 2)$$, 'FIFO on top: the jobs in flight stay, nothing pending is free');
SELECT claimq.alter_queue('fl_a', group_limit => 0, group_fifo => false);
SELECT is((SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id) WHERE q.name = 'fl_a' AND j.held),
	0::bigint, 'removing the limits frees every job');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_a')), 2::bigint, 'and the rest of k is claimed');

-- purge and drop leave no group rows behind
SELECT claimq.enqueue('fl_g', '{}', group_key => 'purged') IS NOT NULL;
SELECT cmp_ok(claimq.purge_queue('fl_g'), '>', 0::bigint, 'purge the pending jobs of fl_g');
SELECT is((SELECT count(*) FROM claimq.job_group g JOIN claimq.queue q USING (queue_id)
			WHERE q.name = 'fl_g' AND g.group_key = 'purged'), 0::bigint, 'a purged group has no row left');
SELECT claimq.drop_queue('fl_a', force => true);
SELECT is((SELECT count(*) FROM claimq.job_group g WHERE NOT EXISTS (SELECT 1 FROM claimq.queue q WHERE q.queue_id = g.queue_id)),
	0::bigint, 'drop_queue removes its groups'' rows');

--
-- max_in_flight and rate_limit
--
SELECT claimq.create_queue('fl_m', max_in_flight => 3, lease => '1 hour');
SELECT claimq.enqueue_many('fl_m', array_fill('{}'::jsonb, ARRAY[10])) IS NOT NULL;
CREATE TEMP TABLE tm AS SELECT * FROM pg_temp.take('fl_m', 10);
SELECT is((SELECT count(*) FROM tm), 3::bigint, 'max_in_flight 3: a claim of 10 gets 3');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_m', 10, true)), 0::bigint, 'then none');
SELECT is(claimq.complete((SELECT job_id FROM tm ORDER BY 1 LIMIT 1), (SELECT token FROM tm ORDER BY 1 LIMIT 1)), true,
	'complete one');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_m', 10, true)), 1::bigint, 'a slot is free: one more, started');

SELECT claimq.create_queue('fl_rate', rate_limit => 4, rate_period => '1 hour');
SELECT claimq.enqueue_many('fl_rate', array_fill('{}'::jsonb, ARRAY[10])) IS NOT NULL;
SELECT is((SELECT count(*) FROM pg_temp.take('fl_rate', 3)), 3::bigint, 'a full bucket of 4: 3 claimed');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_rate', 10)), 1::bigint, 'then the last token');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_rate', 10)), 0::bigint, 'then none until it refills');
SELECT claimq.alter_queue('fl_rate', rate_limit => 2);
SELECT is((SELECT count(*) FROM pg_temp.take('fl_rate', 10)), 2::bigint, 'a new rate: a new, full bucket of 2');

-- A queue row that holds a month part from an earlier release: the bucket
-- counts its days and time only, and refuses to hand out with a clean
-- error unless they are greater than zero and at most a day (never a
-- bucket that fills backwards, nor the claim's own SQL failing).
SELECT claimq.create_queue('fl_legacy', rate_limit => 2, rate_period => '1 hour');
SELECT claimq.enqueue_many('fl_legacy', array_fill('{}'::jsonb, ARRAY[3])) IS NOT NULL;
UPDATE claimq.queue SET rate_period = '1 mon -30 days' WHERE name = 'fl_legacy';
SELECT throws_ok($$SELECT * FROM claimq.claim('fl_legacy')$$,
	'55000', 'rate_period of queue "fl_legacy" cannot be used',
	'a stored rate_period of 1 mon -30 days: the claim is refused cleanly');
SELECT throws_ok($$SELECT * FROM claimq.claim('fl_legacy', wait => '10 seconds')$$,
	'55000', 'rate_period of queue "fl_legacy" cannot be used',
	'and a waiting claim too, at once');
UPDATE claimq.queue SET rate_period = '-1 mon 31 days' WHERE name = 'fl_legacy';
SELECT throws_ok($$SELECT * FROM claimq.claim('fl_legacy')$$,
	'55000', 'rate_period of queue "fl_legacy" cannot be used',
	'a stored -1 mon 31 days (31 days counted in days) is refused');
SELECT is((SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id)
			WHERE q.name = 'fl_legacy' AND j.state = 'pending'), 3::bigint,
	'the refused claims took nothing');
SELECT claimq.alter_queue('fl_legacy', rate_period => '1 hour');
SELECT is((SELECT count(*) FROM pg_temp.take('fl_legacy', 10)), 2::bigint,
	'alter_queue mends it: a full bucket of 2');

SELECT * FROM finish();
ROLLBACK;
