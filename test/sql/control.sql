-- Job control: cancel, snooze, per-job max_attempts, debounce
-- (on_duplicate => 'replace'), results, status and wait_for; every outcome
-- and every refusal.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(99);

SELECT claimq.create_queue('ctl', keep_done => '1 day', max_attempts => 5);
SELECT claimq.create_queue('ctl_plain');
SELECT claimq.reset_counters();

--
-- cancel
--
SELECT claimq.enqueue('ctl', '{"n": 1}', dedup_key => 'c1') AS p \gset
SELECT results_eq(format('SELECT job_id, outcome, state FROM claimq.cancel(ARRAY[%s]::bigint[])', :p),
	format($$VALUES (%s::bigint, 'ok'::text, 'cancelled'::text)$$, :p),
	'cancel a pending job: ok, cancelled');
SELECT results_eq(format('SELECT state::text, finished_at IS NOT NULL, expires_at FROM claimq.job WHERE job_id = %s', :p),
	$$VALUES ('cancelled'::text, true, NULL::timestamptz)$$,
	'the job is cancelled, with the time it finished');
SELECT isnt(claimq.enqueue('ctl', '{"n": 2}', dedup_key => 'c1'), :p::bigint,
	'its dedup key is free at once: the same key makes a new job');
SELECT results_eq(format('SELECT outcome, state FROM claimq.cancel(ARRAY[%s]::bigint[])', :p),
	$$VALUES ('finished'::text, 'cancelled'::text)$$,
	'cancelling it again: finished, cancelled');
SELECT is((SELECT count(*) FROM claimq.claim('ctl', 10) WHERE job_id = :p), 0::bigint,
	'a cancelled job is never claimed');
SELECT claimq.purge_queue('ctl');

-- A claimed job: its holder gets "cancelled" from every settle call, and
-- nothing changes; any other token gets "stale".
SELECT claimq.enqueue('ctl', '{"n": 3}') AS c \gset
SELECT token AS ct FROM claimq.claim('ctl') \gset
SELECT results_eq(format('SELECT outcome, state FROM claimq.cancel(ARRAY[%s]::bigint[])', :c),
	$$VALUES ('ok'::text, 'cancelled'::text)$$, 'cancel a claimed job');
CREATE TEMP TABLE ctl_before AS SELECT * FROM claimq.job WHERE job_id = :c;
SELECT is((SELECT outcome FROM claimq.start(ARRAY[:c]::bigint[], ARRAY[:ct]::bigint[])),
	'cancelled', 'start by the holder: cancelled');
SELECT is((SELECT outcome FROM claimq.extend(ARRAY[:c]::bigint[], ARRAY[:ct]::bigint[])),
	'cancelled', 'extend by the holder: cancelled');
SELECT is((SELECT outcome FROM claimq.complete(ARRAY[:c]::bigint[], ARRAY[:ct]::bigint[])),
	'cancelled', 'complete by the holder: cancelled');
SELECT is((SELECT outcome FROM claimq.fail(ARRAY[:c]::bigint[], ARRAY[:ct]::bigint[], 'x')),
	'cancelled', 'fail by the holder: cancelled');
SELECT is((SELECT outcome FROM claimq.release(ARRAY[:c]::bigint[], ARRAY[:ct]::bigint[])),
	'cancelled', 'release by the holder: cancelled');
SELECT is((SELECT outcome FROM claimq.snooze(ARRAY[:c]::bigint[], ARRAY[:ct]::bigint[], '1 minute')),
	'cancelled', 'snooze by the holder: cancelled');
SELECT is((SELECT outcome FROM claimq.complete(ARRAY[:c]::bigint[], ARRAY[:ct + 1]::bigint[])),
	'stale', 'complete with another token: stale');
SELECT ok(NOT claimq.complete(:c, :ct) AND NOT claimq.start(:c, :ct) AND NOT claimq.extend(:c, :ct)
		  AND NOT claimq.fail(:c, :ct) AND NOT claimq.release(:c, :ct)
		  AND NOT claimq.snooze(:c, :ct, '0'),
	'the scalar forms return false');
SELECT bag_eq(format('SELECT * FROM claimq.job WHERE job_id = %s', :c), 'SELECT * FROM ctl_before',
	'no settle call of the holder changed the cancelled job');

-- A running job, and one cancelled after its claim was released.
SELECT claimq.enqueue('ctl', '{"n": 4}') AS r \gset
SELECT token AS rt FROM claimq.claim('ctl', start => true) \gset
SELECT is((SELECT outcome FROM claimq.cancel(ARRAY[:r]::bigint[])), 'ok', 'cancel a running job');
SELECT is((SELECT outcome FROM claimq.complete(ARRAY[:r]::bigint[], ARRAY[:rt]::bigint[])),
	'cancelled', 'its holder''s complete: cancelled');
SELECT claimq.enqueue('ctl', '{"n": 5}') AS l \gset
SELECT token AS lt FROM claimq.claim('ctl') \gset
SELECT ok(claimq.release(:l, :lt), 'release a claim');
SELECT is((SELECT outcome FROM claimq.cancel(ARRAY[:l]::bigint[])), 'ok', 'cancel the job, now pending');
SELECT is((SELECT outcome FROM claimq.complete(ARRAY[:l]::bigint[], ARRAY[:lt]::bigint[])),
	'stale', 'the token of the released claim is stale, not cancelled');

-- Finished and missing jobs; input order, repeats.
SELECT claimq.enqueue('ctl', '{"n": 6}') AS d \gset
SELECT ok(claimq.complete(job_id, token), 'complete a job (kept as done)') FROM claimq.claim('ctl');
SELECT claimq.enqueue('ctl', '{"n": 7}', max_attempts => 1) AS x \gset
SELECT ok(claimq.fail(job_id, token, 'boom'), 'fail a job with one attempt (dead)') FROM claimq.claim('ctl');
SELECT results_eq(format('SELECT job_id, outcome, state FROM claimq.cancel(ARRAY[%s, %s, -1, %s, %s]::bigint[])',
						 :x, :d, :c, :x),
	format($$VALUES (%1$s::bigint, 'finished'::text, 'dead'::text),
					(%2$s, 'finished', 'done'), (-1, 'missing', NULL),
					(%3$s, 'finished', 'cancelled'), (%1$s, 'finished', 'dead')$$, :x, :d, :c),
	'done, dead and cancelled jobs are finished and left alone; unknown ids missing; input order');
SELECT is((SELECT count(*) FROM claimq.cancel('{}'::bigint[])), 0::bigint, 'an empty array cancels nothing');
SELECT throws_ok('SELECT * FROM claimq.cancel(NULL)', '22004', NULL, 'cancel(NULL): 22004');
SELECT throws_ok('SELECT * FROM claimq.cancel(ARRAY[1, NULL]::bigint[])', '22004', NULL,
	'a NULL id: 22004');
SELECT throws_ok('SELECT * FROM claimq.cancel(array_fill(1::bigint, ARRAY[10001]))', '22023', NULL,
	'more than 10,000 ids: 22023');
SELECT CASE WHEN claimq.edition() = 'c' THEN is((SELECT cancelled FROM claimq.counters WHERE queue = 'ctl'), 4::bigint,
	'the cancelled counter counts the four cancellations') ELSE skip('C edition only: counters live in shared memory') END;

-- Cancelled jobs are neither redriven nor reclaimed, and are pruned like
-- dead ones.
SELECT is(claimq.retry_dead('ctl'), 1::bigint, 'retry_dead redrives the dead job only');
SELECT is((SELECT count(*) FROM claimq.job WHERE state = 'cancelled'), 4::bigint,
	'the cancelled jobs stay cancelled');
SELECT claimq.alter_queue('ctl', keep_dead => '0');
SELECT cmp_ok(claimq.prune(), '>=', 4::bigint, 'prune removes cancelled jobs past keep_dead');
SELECT is((SELECT count(*) FROM claimq.job WHERE state = 'cancelled'), 0::bigint,
	'no cancelled job is left');
SELECT claimq.alter_queue('ctl', keep_dead => '14 days');
SELECT claimq.purge_queue('ctl');

--
-- snooze
--
SELECT claimq.enqueue('ctl', '{"n": 10}') AS s \gset
SELECT token AS st FROM claimq.claim('ctl') \gset
SELECT clock_timestamp() AS t0 \gset
SELECT results_eq(format($$SELECT job_id, outcome, run_at BETWEEN %L::timestamptz + '1 hour' AND clock_timestamp() + '1 hour'
							 FROM claimq.snooze(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], '1 hour')$$,
						 :'t0', :s, :st),
	format($$VALUES (%s::bigint, 'ok'::text, true)$$, :s),
	'snooze a claimed job for an hour: ok, with its new run_at');
SELECT results_eq(format('SELECT state::text, attempts, expires_at FROM claimq.job WHERE job_id = %s', :s),
	$$VALUES ('pending'::text, 0, NULL::timestamptz)$$, 'it is pending again, no attempt counted');
SELECT is((SELECT count(*) FROM claimq.claim('ctl')), 0::bigint, 'and not claimable before its run_at');
SELECT is((SELECT outcome FROM claimq.snooze(ARRAY[:s]::bigint[], ARRAY[:st]::bigint[], '0')),
	'stale', 'snoozing it again with the old token: stale');
SELECT is((SELECT outcome FROM claimq.snooze(ARRAY[-1]::bigint[], ARRAY[1]::bigint[], '0')),
	'missing', 'snoozing an unknown job: missing');
SELECT claimq.purge_queue('ctl');
-- A running job gives back the attempt start counted, however often it is
-- snoozed: a snooze never makes a job dead.
SELECT claimq.enqueue('ctl', '{"n": 11}', max_attempts => 1) AS s2 \gset
SELECT ok(claimq.snooze(job_id, token, '0'), 'claim with start and snooze')
  FROM claimq.claim('ctl', start => true);
SELECT ok(claimq.snooze(job_id, token, '0'), 'again')
  FROM claimq.claim('ctl', start => true);
SELECT ok(claimq.snooze(job_id, token, '0'), 'and a third time')
  FROM claimq.claim('ctl', start => true);
SELECT results_eq(format('SELECT state::text, attempts FROM claimq.job WHERE job_id = %s', :s2),
	$$VALUES ('pending'::text, 0)$$, 'still pending with no attempt counted');
SELECT CASE WHEN claimq.edition() = 'c' THEN is((SELECT snoozed FROM claimq.counters WHERE queue = 'ctl'), 4::bigint,
	'the snoozed counter counts the four snoozes') ELSE skip('C edition only: counters live in shared memory') END;
SELECT throws_ok(format($$SELECT claimq.snooze(%s, 1, NULL)$$, :s2), '22004', NULL, 'delay NULL: 22004');
SELECT throws_ok(format($$SELECT claimq.snooze(%s, 1, '-1 second')$$, :s2), '22023',
	'delay must be at least zero and at most 7 days', 'a negative delay: 22023');
SELECT throws_ok(format($$SELECT * FROM claimq.snooze(ARRAY[%s], ARRAY[1], '8 days')$$, :s2), '22023',
	NULL, 'a delay over 7 days: 22023');
SELECT throws_ok($$SELECT * FROM claimq.snooze(ARRAY[1, 2]::bigint[], ARRAY[1]::bigint[], '0')$$,
	'22023', NULL, 'mismatched arrays: 22023');
SELECT claimq.purge_queue('ctl');

--
-- Per-job max_attempts
--
SELECT claimq.enqueue('ctl', '{"n": 20}', max_attempts => 2) AS m \gset
SELECT is((SELECT state FROM claimq.claim('ctl', start => true) c,
				  LATERAL claimq.fail(ARRAY[c.job_id], ARRAY[c.token], 'x', retry_in => '0')),
	'pending', 'first of two attempts fails: pending again');
SELECT is((SELECT state FROM claimq.claim('ctl', start => true) c,
				  LATERAL claimq.fail(ARRAY[c.job_id], ARRAY[c.token], 'x', retry_in => '0')),
	'dead', 'second of two attempts fails: dead, though the queue allows five');
SELECT claimq.alter_queue('ctl_plain', max_attempts => 1);
SELECT claimq.enqueue_many('ctl_plain', ARRAY['{}', '{}']::jsonb[], max_attempts => 3);
SELECT is((SELECT string_agg(f.state, ',') FROM claimq.claim('ctl_plain', 2, start => true) c,
				  LATERAL claimq.fail(ARRAY[c.job_id], ARRAY[c.token], 'x', retry_in => '0') f),
	'pending,pending', 'enqueue_many''s max_attempts overrides the queue''s one attempt');
-- Reclaiming an expired running job judges it by the job's max_attempts.
SELECT claimq.purge_queue('ctl_plain');
SELECT claimq.alter_queue('ctl_plain', max_attempts => 5);
SELECT claimq.enqueue('ctl_plain', '{}', max_attempts => 1) AS e \gset
SELECT count(*) FROM claimq.claim('ctl_plain', start => true, lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT is((SELECT dead FROM claimq.reclaim('ctl_plain')), 1::bigint,
	'an expired running job with one attempt of its own is reclaimed dead');
SELECT is((SELECT max_attempts FROM claimq.jobs WHERE job_id = :e), 1, 'jobs shows its max_attempts');
SELECT throws_ok($$SELECT claimq.enqueue('ctl', '{}', max_attempts => 0)$$, '22023',
	'max_attempts must be between 1 and 1000', 'max_attempts 0: 22023');
SELECT throws_ok($$SELECT claimq.enqueue_many('ctl', ARRAY['{}']::jsonb[], max_attempts => 1001)$$,
	'22023', NULL, 'max_attempts 1001: 22023');
SELECT claimq.purge_queue('ctl');

--
-- Debounce
--
SELECT claimq.enqueue('ctl', '{"v": 1}', dedup_key => 'dk', priority => 1,
					  run_at => now() + interval '1 hour') AS k \gset
SELECT is(claimq.enqueue('ctl', '{"v": 2}', dedup_key => 'dk'), :k::bigint,
	'keep: the live job''s id');
SELECT is((SELECT payload->>'v' FROM claimq.job WHERE job_id = :k), '1', 'keep changes nothing');
SELECT is(claimq.enqueue('ctl', '{"v": 3}', dedup_key => 'dk', on_duplicate => 'replace',
						 priority => 7, max_attempts => 9), :k::bigint,
	'replace: the live job''s id');
SELECT results_eq(format($$SELECT payload->>'v', priority, run_at <= clock_timestamp(), max_attempts::integer
							 FROM claimq.job WHERE job_id = %s$$, :k),
	$$VALUES ('3'::text, 7, true, 9)$$,
	'replace gives the pending job the payload, priority, run_at (now) and max_attempts');
SELECT is((SELECT count(*) FROM claimq.job WHERE dedup_key = 'dk'), 1::bigint, 'still one job');
SELECT token AS kt FROM claimq.claim('ctl') \gset
SELECT is(claimq.enqueue('ctl', '{"v": 4}', dedup_key => 'dk', on_duplicate => 'replace'),
	:k::bigint, 'replace against a claimed job: its id');
SELECT results_eq(format($$SELECT payload->>'v', state::text FROM claimq.job WHERE job_id = %s$$, :k),
	$$VALUES ('3'::text, 'claimed'::text)$$, 'a claimed job is left alone');
SELECT ok(claimq.complete(:k, :kt), 'complete it');
CREATE TEMP TABLE em AS
SELECT e.id, e.n FROM claimq.enqueue_many('ctl', ARRAY['{"v": 5}', '{"v": 6}', '{"v": 7}']::jsonb[],
										  dedup_keys => ARRAY['r', 'q', 'r'],
										  on_duplicate => 'replace') WITH ORDINALITY AS e(id, n);
SELECT is(ARRAY(SELECT id FROM em ORDER BY n),
	ARRAY[(SELECT job_id FROM claimq.job WHERE dedup_key = 'r'),
		  (SELECT job_id FROM claimq.job WHERE dedup_key = 'q'),
		  (SELECT job_id FROM claimq.job WHERE dedup_key = 'r')],
	'enqueue_many with a repeated key returns the one job''s id for both');
SELECT is((SELECT payload->>'v' FROM claimq.job WHERE dedup_key = 'r' AND state = 'pending'), '7',
	'with replace the last element of a repeated key wins');
SELECT claimq.enqueue_many('ctl', ARRAY['{"v": 8}', '{"v": 9}']::jsonb[], dedup_keys => ARRAY['w', 'w']);
SELECT is((SELECT payload->>'v' FROM claimq.job WHERE dedup_key = 'w'), '8',
	'with keep the first element wins');
SELECT throws_ok($$SELECT claimq.enqueue('ctl', '{}', on_duplicate => 'merge')$$, '22023',
	'on_duplicate must be "keep" or "replace"', 'an unknown on_duplicate: 22023');
SELECT throws_ok($$SELECT claimq.enqueue_many('ctl', ARRAY['{}']::jsonb[], on_duplicate => NULL)$$,
	'22004', NULL, 'on_duplicate NULL: 22004');

--
-- Group keys are stored (flow control will use them)
--
CREATE TEMP TABLE gk AS
SELECT claimq.enqueue_many('ctl_plain', ARRAY['{}', '{}']::jsonb[], group_keys => ARRAY['a', NULL]) AS id;
SELECT is((SELECT string_agg(coalesce(group_key, '-'), ',' ORDER BY job_id) FROM claimq.job
			WHERE job_id IN (SELECT id FROM gk)),
	'a,-', 'enqueue_many stores each job''s group key');
SELECT throws_ok($$SELECT claimq.enqueue('ctl', '{}', group_key => repeat('g', 201))$$, '22023',
	'group_key must be at most 200 bytes long', 'a group key over 200 bytes: 22023');
CREATE TEMP TABLE long_keys (k text);
INSERT INTO long_keys VALUES (repeat('g', 5000));
SELECT throws_ok($$SELECT claimq.enqueue('ctl', '{}', group_key => k) FROM long_keys$$, '22023',
	'group_key must be at most 200 bytes long', 'a long group key stored compressed in a table: 22023');
SELECT throws_ok($$SELECT claimq.enqueue_many('ctl', ARRAY['{}', '{}']::jsonb[], group_keys => ARRAY['a'])$$,
	'22023', 'group_keys must have as many elements as payloads', 'group_keys of another length: 22023');
SELECT claimq.purge_queue('ctl');
SELECT claimq.purge_queue('ctl_plain');

--
-- Results and status
--
SELECT count(*) FROM claimq.enqueue_many('ctl', ARRAY['{}', '{}', '{}']::jsonb[]);
CREATE TEMP TABLE rc AS SELECT job_id, token, row_number() OVER (ORDER BY job_id) AS n
  FROM claimq.claim('ctl', 3);
SELECT is(ARRAY(SELECT o.outcome FROM claimq.complete(
				  (SELECT array_agg(job_id ORDER BY n) FROM rc WHERE n <= 2),
				  (SELECT array_agg(token ORDER BY n) FROM rc WHERE n <= 2),
				  ARRAY['{"sum": 42}', NULL]::jsonb[]) o),
	'{ok,ok}', 'complete two jobs with a result and a NULL result');
SELECT ok(claimq.complete(job_id, token, '"scalar"'), 'the scalar form takes a result')
  FROM rc WHERE n = 3;
SELECT results_eq($$SELECT s.job_id, s.queue, s.state, s.attempts, s.finished_at IS NOT NULL, s.last_error, s.result
					  FROM rc, LATERAL claimq.status(ARRAY[rc.job_id]) s ORDER BY rc.n$$,
	$$SELECT job_id, 'ctl'::text, 'done'::text, 0, true, NULL::text,
			 CASE n WHEN 1 THEN '{"sum": 42}'::jsonb WHEN 3 THEN '"scalar"' END
		FROM rc ORDER BY n$$,
	'status shows the kept results of a keep_done queue');
SELECT claimq.enqueue('ctl_plain', '{}') AS pl \gset
SELECT ok(claimq.complete(job_id, token, '{"lost": true}'), 'complete a job of a queue that keeps nothing')
  FROM claimq.claim('ctl_plain');
SELECT results_eq(format('SELECT * FROM claimq.status(ARRAY[%s, -5, %s]::bigint[])', :pl, :pl),
	format($$VALUES (%1$s::bigint, NULL::text, NULL::text, NULL::int, NULL::timestamptz,
					 NULL::timestamptz, NULL::text, NULL::jsonb, NULL::jsonb),
					(-5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
					(%1$s, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)$$, :pl),
	'a job that no longer exists has every column but job_id NULL, in input order, repeats too');
SELECT claimq.enqueue('ctl', '{}', run_at => '2030-01-01 00:00+00') AS sch \gset
SELECT results_eq(format('SELECT queue, state, attempts, run_at, finished_at FROM claimq.status(ARRAY[%s]::bigint[])', :sch),
	$$VALUES ('ctl'::text, 'pending'::text, 0, '2030-01-01 00:00+00'::timestamptz, NULL::timestamptz)$$,
	'status of a pending job');
SELECT throws_ok($$SELECT * FROM claimq.complete(ARRAY[1, 2]::bigint[], ARRAY[1, 2]::bigint[],
												 ARRAY['{}']::jsonb[])$$,
	'22023', 'results must be null or have as many elements as job_ids',
	'results of another length: 22023');
SELECT throws_ok('SELECT * FROM claimq.status(NULL)', '22004', NULL, 'status(NULL): 22004');
SELECT throws_ok('SELECT * FROM claimq.status(ARRAY[NULL]::bigint[])', '22004', NULL,
	'status of a NULL id: 22004');
SELECT throws_ok('SELECT * FROM claimq.status(array_fill(1::bigint, ARRAY[10001]))', '22023', NULL,
	'status of more than 10,000 ids: 22023');
SELECT is((SELECT count(*) FROM claimq.status('{}'::bigint[])), 0::bigint, 'status of no ids: no rows');

--
-- wait_for (the wake-up by another session's commit is in test/t/015)
--
SELECT results_eq(format('SELECT job_id, state FROM claimq.wait_for(ARRAY[%s, -1]::bigint[], ''1 hour'')',
						 (SELECT job_id FROM rc WHERE n = 1)),
	format($$VALUES (%s::bigint, 'done'::text), (-1, NULL)$$, (SELECT job_id FROM rc WHERE n = 1)),
	'wait_for returns at once when every job is finished or gone');
SELECT results_eq(format('SELECT state FROM claimq.wait_for(ARRAY[%s]::bigint[], ''0'')', :sch),
	$$VALUES ('pending'::text)$$, 'with timeout 0 it returns the current state at once');
SELECT clock_timestamp() AS w0 \gset
SELECT results_eq(format('SELECT state FROM claimq.wait_for(ARRAY[%s]::bigint[], ''200 milliseconds'')', :sch),
	$$VALUES ('pending'::text)$$, 'a job that does not finish: its state when the timeout passes');
SELECT ok(clock_timestamp() >= :'w0'::timestamptz + interval '200 milliseconds',
	'and only after the timeout');
SELECT throws_ok(format('SELECT * FROM claimq.wait_for(ARRAY[%s]::bigint[], NULL)', :sch), '22004', NULL,
	'timeout NULL: 22004');
SELECT throws_ok(format($$SELECT * FROM claimq.wait_for(ARRAY[%s]::bigint[], '-1 second')$$, :sch), '22023',
	'timeout must be at least zero and at most 7 days', 'a negative timeout: 22023');
SELECT throws_ok(format($$SELECT * FROM claimq.wait_for(ARRAY[%s]::bigint[], '7 days 1 second')$$, :sch),
	'22023', NULL, 'a timeout over 7 days: 22023');
SELECT throws_ok($$SELECT * FROM claimq.wait_for(NULL, '1 second')$$, '22004', NULL, 'wait_for(NULL): 22004');

-- Nothing bad input did changed anything.
SELECT is((SELECT count(*) FROM claimq.job WHERE queue_id =
			 (SELECT queue_id FROM claimq.queue WHERE name = 'ctl') AND state = 'pending'),
	1::bigint, 'only the scheduled job is pending in ctl');

--
-- claimq.job keeps a job's state and its own max_attempts to their rules
-- itself, whoever writes it (a superuser here): the columns' domains refuse
-- the rest with 23514, as the table's CHECK constraints did; the lease's
-- rule, across two columns, is the one CHECK left.
--
SELECT queue_id AS ctl FROM claimq.queue WHERE name = 'ctl' \gset
SELECT claimq.enqueue('ctl', '{"n": 30}') AS d \gset
SELECT is(ARRAY(SELECT format('%s %s', attname, atttypid::regtype) FROM pg_attribute
				 WHERE attrelid = 'claimq.job'::regclass
				   AND attname IN ('state', 'max_attempts') ORDER BY attnum),
	'{"state claimq.job_state","max_attempts claimq.job_max_attempts"}',
	'state and max_attempts are of their domains');
SELECT is(ARRAY(SELECT conname::text FROM pg_constraint
				 WHERE conrelid = 'claimq.job'::regclass AND contype = 'c'),
	'{job_lease_check}', 'the lease rule is claimq.job''s one CHECK constraint');
SELECT throws_ok(format($$INSERT INTO claimq.job (run_at, enqueued_at, queue_id, state, payload)
						  VALUES (now(), now(), %s, 'paused', '{}')$$, :ctl),
	'23514', NULL, 'an INSERT of a job in no known state: 23514');
SELECT throws_ok(format($$UPDATE claimq.job SET state = 'Pending' WHERE job_id = %s$$, :d),
	'23514', NULL, 'an UPDATE to no known state: 23514');
SELECT throws_ok(format($$INSERT INTO claimq.job (run_at, enqueued_at, queue_id, state, payload, max_attempts)
						  VALUES (now(), now(), %s, 'pending', '{}', 0)$$, :ctl),
	'23514', NULL, 'an INSERT of a job with max_attempts 0: 23514');
SELECT throws_ok(format($$UPDATE claimq.job SET max_attempts = 1001 WHERE job_id = %s$$, :d),
	'23514', NULL, 'an UPDATE to max_attempts 1001: 23514');
SELECT throws_ok(format($$UPDATE claimq.job SET state = 'claimed' WHERE job_id = %s$$, :d),
	'23514', NULL, 'a claimed job without a lease: 23514 (job_lease_check)');
SELECT lives_ok(format($$UPDATE claimq.job SET max_attempts = 1000 WHERE job_id = %s;
						 UPDATE claimq.job SET max_attempts = 1, state = 'cancelled' WHERE job_id = %s$$, :d, :d),
	'max_attempts 1000 and 1 and a known state are taken');
SELECT results_eq(format('SELECT state::text, max_attempts::integer FROM claimq.job WHERE job_id = %s', :d),
	$$VALUES ('cancelled'::text, 1)$$, 'as written');

SELECT * FROM finish();
ROLLBACK;
