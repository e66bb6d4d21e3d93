-- Workflows: enqueue's after and after_failed, the waiting state, the
-- finish rules on every path that finishes or removes a job, cascading
-- cancel, retention for dependents, dependencies(), and every refusal.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(95);

-- A job's state, as status() reports it (NULL: no such job).
CREATE FUNCTION pg_temp.st(id bigint) RETURNS text LANGUAGE sql AS $$
	SELECT s.state FROM claimq.status(ARRAY[id]) s
$$;

-- Claim one job of the queue (with its token), started or not.
CREATE FUNCTION pg_temp.take(q text, st boolean DEFAULT false)
RETURNS TABLE(job_id bigint, token bigint) LANGUAGE sql AS $$
	SELECT c.job_id, c.token FROM claimq.claim(q, 1, start => st) c
$$;

SELECT claimq.create_queue('wf') IS NULL AS created \gset
SELECT claimq.create_queue('wf_other') IS NULL AS created \gset
SELECT claimq.create_queue('wf_kept', keep_done => '1 day') IS NULL AS created \gset

--
-- Refusals: each changes nothing.
--
SELECT claimq.enqueue('wf', '{"n": "a"}') AS a \gset
SELECT count(*) AS jobs_before FROM claimq.job \gset
SELECT count(*) AS sets_before FROM claimq.job_after \gset

SELECT throws_ok(format($$SELECT claimq.enqueue('wf', '{}', after => ARRAY[%s, NULL]::bigint[])$$, :a),
	'22004', NULL, 'after with a NULL element: 22004');
SELECT throws_ok($$SELECT claimq.enqueue('wf', '{}', after => array_fill(1::bigint, ARRAY[100001]))$$,
	'22023', NULL, 'after with more than 100,000 ids: 22023');
SELECT throws_ok(format($$SELECT claimq.enqueue('wf', '{}', after => ARRAY[%s, 9000000001, 9000000002])$$, :a),
	'23503', 'job 9000000001 in "after" does not exist',
	'an unknown id in after: 23503, naming the first unknown one in input order');
SELECT throws_ok(format($$SELECT claimq.enqueue_many('wf', ARRAY['{}', '{}']::jsonb[], after => ARRAY[9000000002, %s])$$, :a),
	'23503', 'job 9000000002 in "after" does not exist',
	'enqueue_many: the same rule');
SELECT throws_ok($$SELECT claimq.enqueue('wf', '{}', after_failed => NULL)$$,
	'22004', NULL, 'after_failed NULL: 22004, without after too');
SELECT throws_ok(format($$SELECT claimq.enqueue('wf', '{}', after => ARRAY[%s], after_failed => NULL)$$, :a),
	'22004', NULL, 'after_failed NULL with after: 22004');
SELECT throws_ok($$SELECT claimq.enqueue('wf', '{}', after_failed => 'skip')$$,
	'22023', NULL, 'after_failed other than cancel or run: 22023, even without after');
SELECT throws_ok($$SELECT claimq.enqueue_many('wf', ARRAY['{}']::jsonb[], after_failed => 'Run')$$,
	'22023', NULL, 'enqueue_many: after_failed is checked too');
SELECT is((SELECT count(*) FROM claimq.job), :jobs_before::bigint, 'no refused call added a job');
SELECT is((SELECT count(*) FROM claimq.job_after), :sets_before::bigint,
	'and none left a list of jobs to run after behind');

SELECT lives_ok($$SELECT claimq.enqueue('wf', '{}', after => '{}', after_failed => 'run')$$,
	'an empty after is no after');
SELECT is((SELECT state || '/' || after_count || '/' || coalesce(after_failed, '-')
			 FROM claimq.jobs WHERE queue = 'wf' ORDER BY job_id DESC LIMIT 1),
	'pending/0/-', 'a job without after is pending, after_count 0, after_failed NULL');
SELECT claimq.purge_queue('wf') IS NOT NULL AS purged \gset

--
-- Waiting, then pending when the last listed job is done.
--
SELECT claimq.enqueue('wf', '{"n": "a"}') AS a \gset
SELECT claimq.enqueue('wf', '{"n": "b"}') AS b \gset
SELECT claimq.enqueue('wf', '{"n": "c"}', after => ARRAY[:a, :b, :a]) AS c \gset
SELECT is(pg_temp.st(:c), 'waiting', 'a job enqueued after unfinished jobs waits');
SELECT results_eq(format($$SELECT after_count, after_failed FROM claimq.jobs WHERE job_id = %s$$, :c),
	$$VALUES (2, 'cancel'::text)$$, 'jobs: after_count counts each listed job once; after_failed defaults to cancel');
SELECT results_eq($$SELECT ready, waiting FROM claimq.queue_stats WHERE queue = 'wf'$$,
	$$VALUES (2::bigint, 1::bigint)$$, 'queue_stats: the waiting job is waiting, not ready');
CREATE TEMP TABLE took AS SELECT c.job_id, c.token FROM claimq.claim('wf', 10) c;
SELECT results_eq($$SELECT job_id FROM took ORDER BY job_id$$,
	format($$VALUES (%s::bigint), (%s)$$, :a, :b), 'a claim takes the listed jobs, never the waiting one');
SELECT count(*) AS released FROM claimq.release(ARRAY(SELECT job_id FROM took ORDER BY job_id),
												 ARRAY(SELECT token FROM took ORDER BY job_id)) \gset

SELECT * FROM pg_temp.take('wf', true) \gset ta_
SELECT is(:ta_job_id::bigint, :a::bigint, 'claim and start the first listed job');
SELECT ok(claimq.complete(:ta_job_id, :ta_token + 1) IS FALSE, 'a complete with a stale token is refused');
SELECT results_eq(format($$SELECT state, after_count FROM claimq.jobs WHERE job_id = %s$$, :c),
	$$VALUES ('waiting'::text, 2)$$, 'and unblocks nothing');
SELECT ok(claimq.complete(:ta_job_id, :ta_token, '{"r": 1}'), 'complete the first listed job');
SELECT results_eq(format($$SELECT state, after_count FROM claimq.jobs WHERE job_id = %s$$, :c),
	$$VALUES ('waiting'::text, 2)$$, 'its transaction judges its dependents at its commit: until then after_count lags');
-- The finishes so far are judged now, and from here on each call's at its
-- end, as SET CONSTRAINTS ... IMMEDIATE makes them (at the commit
-- otherwise): this test is one transaction.
SET CONSTRAINTS claimq.job_finish_judge IMMEDIATE;
SELECT results_eq(format($$SELECT state, after_count FROM claimq.jobs WHERE job_id = %s$$, :c),
	$$VALUES ('waiting'::text, 1)$$, 'the dependent counts it off and still waits');
SELECT results_eq(format($$SELECT state, result FROM claimq.status(ARRAY[%s])$$, :a),
	$$VALUES ('done'::text, '{"r": 1}'::jsonb)$$,
	'a job with a dependent is kept done with its result, though its queue keeps nothing');

SELECT * FROM pg_temp.take('wf') \gset tb_
SELECT clock_timestamp() AS before_b \gset
SELECT ok(claimq.complete(:tb_job_id, :tb_token), 'complete the last listed job, from claimed');
SELECT is(pg_temp.st(:c), 'pending', 'the dependent is pending in the same transaction');
SELECT ok((SELECT run_at >= :'before_b'::timestamptz FROM claimq.jobs WHERE job_id = :c),
	'its run_at is the moment it was unblocked');
SELECT results_eq($$SELECT ready, waiting FROM claimq.queue_stats WHERE queue = 'wf'$$,
	$$VALUES (1::bigint, 0::bigint)$$, 'queue_stats: ready now');
SELECT results_eq(format($$SELECT * FROM claimq.dependencies(ARRAY[%s])$$, :c),
	format($$VALUES (%s::bigint, %s::bigint, 'done'::text, '{"r": 1}'::jsonb, NULL::text),
					(%s, %s, 'done', NULL, NULL)$$, :c, :a, :c, :b),
	'dependencies: each listed job once, in order of first appearance, with its result');
SELECT * FROM pg_temp.take('wf') \gset tc_
SELECT is(:tc_job_id::bigint, :c::bigint, 'the dependent is claimed like any pending job');
SELECT ok(claimq.complete(:tc_job_id, :tc_token), 'complete it');
SELECT is(claimq.prune(), 2::bigint, 'prune removes the listed jobs once every job after them is finished or gone');
SELECT is((SELECT count(*) FROM claimq.job WHERE job_id IN (:a, :b, :c)), 0::bigint, 'all three are gone');
SELECT is((SELECT count(*) FROM claimq.job_after), :sets_before::bigint, 'and so is the list');

--
-- Already finished: judged at once.
--
SELECT claimq.enqueue('wf_kept', '{}') AS k1 \gset
SELECT * FROM pg_temp.take('wf_kept') \gset tk_
SELECT claimq.complete(:tk_job_id, :tk_token) AS ok \gset
SELECT claimq.enqueue('wf_kept', '{}', max_attempts => 1) AS k2 \gset
SELECT * FROM pg_temp.take('wf_kept', true) \gset tk_
SELECT claimq.fail(:tk_job_id, :tk_token, 'boom') AS ok \gset
SELECT is(pg_temp.st(:k2), 'dead', 'a dead job to run after');
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:k1]) AS d1 \gset
SELECT is(pg_temp.st(:d1), 'pending', 'after jobs all done already: pending at once');
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:k1, :k2], dedup_key => 'dk') AS d2 \gset
SELECT results_eq(format($$SELECT state, finished_at IS NOT NULL FROM claimq.status(ARRAY[%s])$$, :d2),
	$$VALUES ('cancelled'::text, true)$$, 'one of them dead: cancelled at once, finished');
SELECT isnt(claimq.enqueue('wf', '{}', dedup_key => 'dk'), :d2::bigint,
	'a job cancelled at once does not hold its dedup key');
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:k2], after_failed => 'run') AS d3 \gset
SELECT is(pg_temp.st(:d3), 'pending', 'with after_failed run: pending at once');
SELECT results_eq(format($$SELECT after_id, state, last_error FROM claimq.dependencies(ARRAY[%s, %s])$$, :d3, :k1),
	format($$VALUES (%s::bigint, 'dead'::text, 'boom'::text)$$, :k2),
	'dependencies: a dead job''s last_error; no rows for a job without after');
SELECT claimq.purge_queue('wf') IS NOT NULL AS purged \gset

--
-- Failure: fail without attempts left, permanent, and with attempts left.
--
SELECT claimq.enqueue('wf', '{}', max_attempts => 2) AS p \gset
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:p]) AS on_cancel \gset
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:p], after_failed => 'run') AS on_run \gset
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:on_cancel]) AS grandchild \gset
SELECT * FROM pg_temp.take('wf', true) \gset tp_
SELECT is(:tp_job_id::bigint, :p::bigint, 'claim the parent');
SELECT results_eq(format($$SELECT state FROM claimq.fail(ARRAY[%s], ARRAY[%s])$$, :tp_job_id, :tp_token),
	$$VALUES ('pending'::text)$$, 'a fail with attempts left is a retry');
SELECT is(pg_temp.st(:on_cancel), 'waiting', 'not a finish: the dependents still wait');
UPDATE claimq.job SET run_at = now() - interval '1 second' WHERE job_id = :p;
SELECT * FROM pg_temp.take('wf', true) \gset tp_
SELECT results_eq(format($$SELECT state FROM claimq.fail(ARRAY[%s], ARRAY[%s], 'no luck')$$, :tp_job_id, :tp_token),
	$$VALUES ('dead'::text)$$, 'the last attempt fails: dead');
SELECT results_eq(format($$SELECT job_id, state FROM claimq.status(ARRAY[%s, %s, %s])$$, :on_cancel, :on_run, :grandchild),
	format($$VALUES (%s::bigint, 'cancelled'::text), (%s, 'pending'), (%s, 'cancelled')$$, :on_cancel, :on_run, :grandchild),
	'after_failed cancel: cancelled, and its own dependent in turn; run: pending');
SELECT claimq.purge_queue('wf') IS NOT NULL AS purged \gset
SELECT claimq.enqueue('wf', '{}') AS p2 \gset
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:p2]) AS c2 \gset
SELECT * FROM pg_temp.take('wf') \gset tp_
SELECT results_eq(format($$SELECT state FROM claimq.fail(ARRAY[%s], ARRAY[%s], permanent => true)$$, :tp_job_id, :tp_token),
	$$VALUES ('dead'::text)$$, 'a permanent fail of a claimed job');
SELECT is(pg_temp.st(:c2), 'cancelled', 'finishes it: the dependent is cancelled');
SELECT claimq.purge_queue('wf') IS NOT NULL AS purged \gset

--
-- cancel: of a listed job, of a waiting job, and a chain.
--
SELECT claimq.enqueue('wf', '{}') AS x \gset
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:x]) AS y \gset
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:y]) AS z \gset
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:y], after_failed => 'run') AS zr \gset
SELECT results_eq(format($$SELECT outcome, state FROM claimq.cancel(ARRAY[%s])$$, :y),
	$$VALUES ('ok'::text, 'cancelled'::text)$$, 'cancel takes a waiting job to cancelled');
SELECT results_eq(format($$SELECT job_id, state FROM claimq.status(ARRAY[%s, %s, %s])$$, :x, :z, :zr),
	format($$VALUES (%s::bigint, 'pending'::text), (%s, 'cancelled'), (%s, 'pending')$$, :x, :z, :zr),
	'its dependents are judged; the job it waited on is untouched');
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:x]) AS y2 \gset
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:y2]) AS z2 \gset
SELECT results_eq(format($$SELECT job_id, outcome FROM claimq.cancel(ARRAY[%s])$$, :x),
	format($$VALUES (%s::bigint, 'ok'::text)$$, :x), 'cancel returns rows for the listed ids only');
SELECT results_eq(format($$SELECT job_id, state FROM claimq.status(ARRAY[%s, %s])$$, :y2, :z2),
	format($$VALUES (%s::bigint, 'cancelled'::text), (%s, 'cancelled')$$, :y2, :z2),
	'cancelling a listed job cascades down the chain in the same transaction');
SELECT claimq.purge_queue('wf') IS NOT NULL AS purged \gset

--
-- Reclaim to dead finishes too.
--
SELECT claimq.enqueue('wf', '{}', max_attempts => 1) AS r \gset
SELECT claimq.enqueue('wf', '{}', after => ARRAY[:r]) AS rc \gset
SELECT * FROM pg_temp.take('wf', true) \gset tr_
UPDATE claimq.job SET expires_at = clock_timestamp() - interval '1 second' WHERE job_id = :r;
SELECT results_eq($$SELECT dead FROM claimq.reclaim('wf')$$, $$VALUES (1::bigint)$$,
	'an expired last attempt is reclaimed to dead');
SELECT is(pg_temp.st(:rc), 'cancelled', 'and its dependent is judged: cancelled');
SELECT claimq.purge_queue('wf') IS NOT NULL AS purged \gset

--
-- Dedup and debounce with after.
--
SELECT claimq.enqueue('wf', '{}') AS q1 \gset
SELECT claimq.enqueue('wf', '{"v": 1}', after => ARRAY[:q1], dedup_key => 'w') AS w1 \gset
SELECT is(claimq.enqueue('wf', '{"v": 2}', dedup_key => 'w'), :w1::bigint,
	'a waiting job holds its dedup key');
SELECT throws_ok(format($$SELECT claimq.enqueue('wf', '{}', dedup_key => 'w', after => ARRAY[%s, 9000000003])$$, :q1),
	'23503', NULL, 'the after ids of a call whose key matches are still checked');
SELECT is(claimq.enqueue('wf', '{"v": 3}', dedup_key => 'w', on_duplicate => 'replace', after_failed => 'run'),
	:w1::bigint, 'replace returns the waiting job');
SELECT results_eq(format($$SELECT state, payload, after_count, after_failed FROM claimq.jobs WHERE job_id = %s$$, :w1),
	$$VALUES ('waiting'::text, '{"v": 3}'::jsonb, 1, 'cancel'::text)$$,
	'and replaces its payload, keeping its after and after_failed');
SELECT is((SELECT count(*) FROM claimq.job_after j
			WHERE j.set_id NOT IN (SELECT after_set FROM claimq.job WHERE after_set IS NOT NULL)), 0::bigint,
	'a call whose key matched leaves no list behind');
SELECT claimq.purge_queue('wf') IS NOT NULL AS purged \gset

--
-- A batch with a completion job: enqueue_many shares one list.
--
SELECT array_agg(id) AS batch FROM claimq.enqueue_many('wf', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[]) id \gset
SELECT claimq.enqueue('wf_other', '{"report": true}', after => :'batch', after_failed => 'run') AS report \gset
SELECT array_agg(id) AS fan FROM claimq.enqueue_many('wf_other', ARRAY['{}', '{}']::jsonb[], after => ARRAY[:report]) id \gset
SELECT is((SELECT count(*) FROM claimq.job_after j
			WHERE j.set_id = (SELECT after_set FROM claimq.job WHERE job_id = (:'fan'::bigint[])[1])), 1::bigint,
	'enqueue_many writes its list once, for all its jobs');
SELECT is((SELECT count(DISTINCT after_set) FROM claimq.job WHERE job_id = ANY (:'fan')), 1::bigint,
	'shared by both jobs');
SELECT * FROM pg_temp.take('wf', true) \gset t1_
SELECT ok(claimq.complete(:t1_job_id, :t1_token, '{"ok": true}'), 'the first of the batch completes');
SELECT * FROM pg_temp.take('wf', true) \gset t2_
SELECT claimq.fail(:t2_job_id, :t2_token, 'bad input', permanent => true) AS ok \gset
SELECT is(pg_temp.st(:report), 'waiting', 'the completion job waits for the third');
SELECT results_eq(format($$SELECT outcome FROM claimq.cancel(ARRAY[%s])$$, (:'batch'::bigint[])[3]),
	$$VALUES ('ok'::text)$$, 'the third is cancelled');
SELECT is(pg_temp.st(:report), 'pending', 'after_failed run: the completion job runs whatever the outcomes');
SELECT results_eq(format($$SELECT state, result IS NOT NULL, last_error FROM claimq.dependencies(ARRAY[%s])$$, :report),
	$$VALUES ('done'::text, true, NULL::text), ('dead', false, 'bad input'), ('cancelled', false, NULL)$$,
	'its handler reads the outcomes with dependencies');
SELECT is((SELECT array_agg(DISTINCT state) FROM claimq.status(:'fan')), '{waiting}'::text[],
	'the jobs after the completion job wait for it');

--
-- purge_queue and drop_queue.
--
SELECT is(claimq.purge_queue('wf_other'), 3::bigint, 'purge_queue deletes pending and waiting jobs');
SELECT claimq.enqueue('wf', '{}') AS u \gset
SELECT claimq.enqueue('wf_other', '{}', after => ARRAY[:u]) AS ud \gset
SELECT claimq.enqueue('wf_other', '{}', after => ARRAY[:u], after_failed => 'run') AS ur \gset
SELECT is(claimq.purge_queue('wf'), 1::bigint, 'purge the listed job');
SELECT results_eq(format($$SELECT job_id, state FROM claimq.status(ARRAY[%s, %s])$$, :ud, :ur),
	format($$VALUES (%s::bigint, 'cancelled'::text), (%s, 'pending')$$, :ud, :ur),
	'a purged job counts as cancelled for the jobs waiting on it');
SELECT results_eq(format($$SELECT after_id, state FROM claimq.dependencies(ARRAY[%s])$$, :ur),
	format($$VALUES (%s::bigint, NULL::text)$$, :u), 'dependencies: a job that no longer exists has no state');

SELECT claimq.create_queue('wf_drop') IS NULL AS created \gset
SELECT claimq.enqueue('wf_drop', '{}') AS v \gset
SELECT claimq.enqueue('wf_drop', '{}', after => ARRAY[:v]) AS v_same \gset
SELECT claimq.enqueue('wf_other', '{}', after => ARRAY[:v]) AS vd \gset
SELECT throws_ok($$SELECT claimq.drop_queue('wf_drop')$$, '2BP01', NULL,
	'drop_queue refuses while jobs of other queues wait on its jobs');
SELECT claimq.enqueue('wf_drop', '{}') AS v2 \gset
SELECT * FROM pg_temp.take('wf_drop') \gset tv_
SELECT throws_ok($$SELECT claimq.drop_queue('wf_drop')$$, '55006', NULL,
	'55006 takes precedence');
SELECT lives_ok($$SELECT claimq.drop_queue('wf_drop', force => true)$$, 'with force it drops');
SELECT is(pg_temp.st(:vd), 'cancelled', 'and the job of another queue waiting on it is cancelled');

-- drop_queue(..., force => true) of a queue whose job finished before:
-- that job was counted off when it finished, and now counts by its final
-- state (contract 0.5), never a second time.  W runs after A1 (in the
-- queue dropped) and A2; A1 finishes (done or dead), its queue is dropped,
-- then A2 completes.  Each step: W's state, its after_count, and how many
-- jobs of W's queue a claim takes.
CREATE FUNCTION pg_temp.drop_finished(rule text, a1_end text)
RETURNS TABLE(step text, state text, after_count integer, claimed bigint)
LANGUAGE plpgsql AS $$
DECLARE
	qa text := format('wf_drop_%s_%s', rule, a1_end);
	a1 bigint;
	a2 bigint;
	w bigint;
	t record;
BEGIN
	PERFORM claimq.create_queue(qa);
	PERFORM claimq.create_queue(qa || '_a2');
	PERFORM claimq.create_queue(qa || '_w');
	a1 := claimq.enqueue(qa, '{}');
	a2 := claimq.enqueue(qa || '_a2', '{}');
	w := claimq.enqueue(qa || '_w', '{}', after => ARRAY[a1, a2], after_failed => rule);
	SELECT c.job_id, c.token INTO t FROM claimq.claim(qa) c;
	IF a1_end = 'done' THEN
		PERFORM claimq.complete(t.job_id, t.token);
	ELSE
		PERFORM claimq.fail(t.job_id, t.token, permanent => true);
	END IF;
	RETURN QUERY SELECT 'finished', j.state, j.after_count, NULL::bigint
				   FROM claimq.jobs j WHERE j.job_id = w;
	PERFORM claimq.drop_queue(qa, force => true);
	RETURN QUERY SELECT 'dropped', j.state, j.after_count,
						(SELECT count(*) FROM claimq.claim(qa || '_w', 10))
				   FROM claimq.jobs j WHERE j.job_id = w;
	SELECT c.job_id, c.token INTO t FROM claimq.claim(qa || '_a2') c;
	PERFORM claimq.complete(t.job_id, t.token);
	RETURN QUERY SELECT 'a2 done', j.state, j.after_count, NULL::bigint
				   FROM claimq.jobs j WHERE j.job_id = w;
END
$$;
SELECT results_eq($$SELECT * FROM pg_temp.drop_finished('cancel', 'done')$$,
	$$VALUES ('finished', 'waiting', 1, NULL::bigint), ('dropped', 'waiting', 1, 0),
			 ('a2 done', 'pending', 0, NULL)$$,
	'drop_queue with force: a job done before counts as done, once (after_failed cancel)');
SELECT results_eq($$SELECT * FROM pg_temp.drop_finished('run', 'done')$$,
	$$VALUES ('finished', 'waiting', 1, NULL::bigint), ('dropped', 'waiting', 1, 0),
			 ('a2 done', 'pending', 0, NULL)$$,
	'drop_queue with force: a job done before counts as done, once (after_failed run)');
SELECT results_eq($$SELECT * FROM pg_temp.drop_finished('cancel', 'dead')$$,
	$$VALUES ('finished', 'waiting', 1, NULL::bigint), ('dropped', 'waiting', 1, 0),
			 ('a2 done', 'cancelled', 0, NULL)$$,
	'drop_queue with force: a job dead before counts as dead, once (after_failed cancel)');
SELECT results_eq($$SELECT * FROM pg_temp.drop_finished('run', 'dead')$$,
	$$VALUES ('finished', 'waiting', 1, NULL::bigint), ('dropped', 'waiting', 1, 0),
			 ('a2 done', 'pending', 0, NULL)$$,
	'drop_queue with force: a job dead before counts as dead, once (after_failed run)');

--
-- retry_dead: a redriven job is unfinished again for jobs still waiting.
--
SELECT claimq.enqueue('wf', '{}', max_attempts => 1) AS e1 \gset
SELECT claimq.enqueue('wf', '{}', run_at => now() + interval '1 hour') AS e2 \gset
SELECT claimq.enqueue('wf_other', '{}', after => ARRAY[:e1, :e2]) AS ed \gset
SELECT * FROM pg_temp.take('wf', true) \gset te_
SELECT claimq.fail(:te_job_id, :te_token, 'first try') AS ok \gset
SELECT results_eq(format($$SELECT state, after_count FROM claimq.jobs WHERE job_id = %s$$, :ed),
	$$VALUES ('waiting'::text, 1)$$, 'a dead listed job counts as finished');
SELECT is(claimq.retry_dead('wf', ARRAY[:e1]), 1::bigint, 'redrive it');
SELECT is((SELECT after_count FROM claimq.jobs WHERE job_id = :ed), 2,
	'the waiting job waits for it again');
SELECT * FROM pg_temp.take('wf') \gset te_
SELECT claimq.complete(:te_job_id, :te_token) AS ok \gset
UPDATE claimq.job SET run_at = now() WHERE job_id = :e2;
SELECT * FROM pg_temp.take('wf') \gset te_
SELECT claimq.complete(:te_job_id, :te_token) AS ok \gset
SELECT is(pg_temp.st(:ed), 'pending', 'judged by the outcomes at the second finish: all done, pending');

--
-- Groups: a job made pending takes its place under its group's limit.
--
SELECT claimq.create_queue('wf_fifo', group_fifo => true) IS NULL AS created \gset
SELECT claimq.enqueue('wf', '{}') AS gp \gset
SELECT claimq.enqueue('wf_fifo', '{}', group_key => 'g') AS g1 \gset
SELECT claimq.enqueue('wf_fifo', '{}', group_key => 'g', after => ARRAY[:gp]) AS g2 \gset
SELECT claimq.enqueue('wf_fifo', '{}', group_key => 'g') AS g3 \gset
SELECT results_eq($$SELECT ready, in_flight FROM claimq.group_stats WHERE queue = 'wf_fifo'$$,
	$$VALUES (2::bigint, 0::bigint)$$, 'a waiting job is not counted in group_stats');
SELECT * FROM pg_temp.take('wf_fifo') \gset tg_
SELECT is(:tg_job_id::bigint, :g1::bigint, 'the group''s first job');
SELECT claimq.complete(:tg_job_id, :tg_token) AS ok \gset
SELECT * FROM pg_temp.take('wf_fifo') \gset tg_
SELECT is(:tg_job_id::bigint, :g3::bigint, 'a waiting job is outside its group''s order: the next is after it');
SELECT * FROM pg_temp.take('wf') \gset tgp_
SELECT claimq.complete(:tgp_job_id, :tgp_token) AS ok \gset
SELECT is(pg_temp.st(:g2), 'pending', 'unblocked: pending');
SELECT is((SELECT count(*) FROM claimq.claim('wf_fifo', 10)), 0::bigint,
	'and held by its FIFO group while another job of it is in flight');
SELECT claimq.complete(:tg_job_id, :tg_token) AS ok \gset
SELECT results_eq($$SELECT job_id FROM claimq.claim('wf_fifo', 10)$$, format($$VALUES (%s::bigint)$$, :g2),
	'then it is the group''s next');

--
-- Several of a job's listed jobs finished by one call count off together.
--
SELECT claimq.purge_queue('wf') IS NOT NULL AS purged \gset
SELECT array_agg(id) AS three FROM claimq.enqueue_many('wf', ARRAY['{}', '{}', '{}']::jsonb[]) id \gset
SELECT claimq.enqueue('wf_other', '{}', after => :'three') AS all3 \gset
CREATE TEMP TABLE took2 AS SELECT c.job_id, c.token FROM claimq.claim('wf', 2) c;
SELECT is((SELECT count(*) FROM claimq.complete(ARRAY(SELECT job_id FROM took2 ORDER BY job_id),
												ARRAY(SELECT token FROM took2 ORDER BY job_id))
			WHERE outcome = 'ok'), 2::bigint, 'one call completes two of the three');
SELECT results_eq(format($$SELECT state, after_count FROM claimq.jobs WHERE job_id = %s$$, :all3),
	$$VALUES ('waiting'::text, 1)$$, 'the job after all three counts both off');

--
-- dependencies' refusals.
--
SELECT throws_ok($$SELECT * FROM claimq.dependencies(NULL)$$, '22004', NULL, 'dependencies(NULL): 22004');
SELECT throws_ok($$SELECT * FROM claimq.dependencies(ARRAY[1, NULL]::bigint[])$$, '22004', NULL,
	'dependencies with a NULL element: 22004');
SELECT throws_ok($$SELECT * FROM claimq.dependencies(array_fill(1::bigint, ARRAY[10001]))$$, '22023', NULL,
	'dependencies with more than 10,000 ids: 22023');
SELECT is((SELECT count(*) FROM claimq.dependencies('{}')), 0::bigint, 'dependencies of no jobs: no rows');

--
-- The table keeps after_failed to cancel or run itself (by its domain, so
-- that a claim does not load the rule), and the jobs view shows it as text.
--
SELECT throws_ok($$UPDATE claimq.job SET after_failed = 'skip' WHERE job_id = (SELECT min(job_id) FROM claimq.job)$$,
	'23514', NULL, 'claimq.job refuses an after_failed other than cancel or run: 23514');
SELECT is((SELECT format_type(atttypid, atttypmod) FROM pg_attribute
			WHERE attrelid = 'claimq.jobs'::regclass AND attname = 'after_failed'),
	'text', 'jobs: after_failed is text');

SELECT * FROM finish();
ROLLBACK;
