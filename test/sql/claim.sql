-- Working: claim.  Order, batch size, paused and scheduled jobs, leases,
-- start => true, tokens, workers and wait.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(77);

SELECT lives_ok($$SELECT claimq.create_queue('clm', lease => '30 seconds',
	run_lease => '5 minutes')$$, 'create queue clm');
SELECT lives_ok($$SELECT claimq.create_queue('clm_other')$$, 'create queue clm_other');

SELECT is_empty($$SELECT * FROM claimq.claim('clm')$$,
	'claim from an empty queue returns no rows');

--
-- Order: priority descending, then run_at, then job id.
--
CREATE TEMP TABLE lab(label text PRIMARY KEY, job_id bigint);
INSERT INTO lab
SELECT l, claimq.enqueue(q, jsonb_build_object('l', l), run_at => clock_timestamp() + r,
						 priority => p)
  FROM (VALUES ('A', 'clm', '-3 hours'::interval, 0),
			   ('B', 'clm', '-1 hour', 5),
			   ('C', 'clm', '-2 hours', 5),
			   ('E', 'clm', '-5 hours', -1),
			   ('F', 'clm', '1 hour', 5),
			   ('G', 'clm', '1 hour', 10),
			   ('O', 'clm_other', '-9 hours', 100)) v(l, q, r, p);
-- D: same priority and run_at as A, enqueued later.
INSERT INTO lab
SELECT 'D', claimq.enqueue('clm', '{"l": "D"}', run_at => j.run_at, priority => 0)
  FROM claimq.jobs j JOIN lab USING (job_id) WHERE lab.label = 'A';
SELECT ok((SELECT job_id FROM lab WHERE label = 'D') > (SELECT job_id FROM lab WHERE label = 'A')
		  AND (SELECT run_at FROM claimq.jobs j JOIN lab USING (job_id) WHERE label = 'D')
			= (SELECT run_at FROM claimq.jobs j JOIN lab USING (job_id) WHERE label = 'A'),
	'A and D differ only in their ids');

SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE c1 AS
SELECT * FROM claimq.claim('clm', max_jobs => 2, worker => 'w1')
	   WITH ORDINALITY AS o(job_id, token, payload, attempts, priority, enqueued_at,
							expires_at, ord);
SELECT clock_timestamp() AS t1 \gset
SELECT results_eq($$SELECT payload->>'l', priority, attempts FROM c1 ORDER BY ord$$,
	$$VALUES ('C', 5, 0), ('B', 5, 0)$$,
	'claim takes the highest priority first, earliest run_at first within it');
CREATE TEMP TABLE c2 AS
SELECT * FROM claimq.claim('clm', max_jobs => 10, worker => 'w2')
	   WITH ORDINALITY AS o(job_id, token, payload, attempts, priority, enqueued_at,
							expires_at, ord);
SELECT results_eq($$SELECT payload->>'l', priority FROM c2 ORDER BY ord$$,
	$$VALUES ('A', 0), ('D', 0), ('E', -1)$$,
	'then lower priorities; the lower id first at equal priority and run_at');
SELECT is_empty($$SELECT * FROM claimq.claim('clm', max_jobs => 10)$$,
	'scheduled jobs are not claimable, whatever their priority');
SELECT results_eq($$SELECT l.label, j.state FROM claimq.jobs j JOIN lab l USING (job_id)
					ORDER BY l.label$$,
	$$VALUES ('A', 'claimed'), ('B', 'claimed'), ('C', 'claimed'), ('D', 'claimed'),
			 ('E', 'claimed'), ('F', 'pending'), ('G', 'pending'), ('O', 'pending')$$,
	'claimed jobs are claimed; scheduled ones and other queues'' stay pending');

-- the columns of a claim
SELECT results_eq($$SELECT c.job_id, c.payload, c.priority, c.enqueued_at
					  FROM c1 c ORDER BY c.ord$$,
	$$SELECT j.job_id, j.payload, j.priority, j.enqueued_at
		FROM c1 c JOIN claimq.jobs j USING (job_id) ORDER BY c.ord$$,
	'claim returns the job''s id, payload, priority and enqueued_at');
SELECT ok(bool_and(expires_at BETWEEN :'t0'::timestamptz + '30 seconds'
								 AND :'t1'::timestamptz + '30 seconds'), 
	'expires_at is the wall clock at the claim plus the queue''s lease')
  FROM c1;
SELECT results_eq($$SELECT c.expires_at FROM c1 c ORDER BY c.ord$$,
	$$SELECT j.expires_at FROM c1 c JOIN claimq.jobs j USING (job_id) ORDER BY c.ord$$,
	'the jobs view shows the expiry claim returned');

-- tokens and workers
SELECT is((SELECT count(DISTINCT token) FROM c1 WHERE token IS NOT NULL), 2::bigint,
	'each job of a claim gets a token of its own');
SELECT is((SELECT count(DISTINCT token) FROM c2 WHERE token IS NOT NULL), 3::bigint,
	'so does each job of another claim');
SELECT is_empty($$SELECT token FROM c1 INTERSECT SELECT token FROM c2$$,
	'different claims get different tokens');
-- A client that mixes up two ids of one batch settles nothing.
SELECT is((SELECT outcome FROM claimq.complete(
			 ARRAY[(SELECT job_id FROM c2 WHERE payload->>'l' = 'D')],
			 ARRAY[(SELECT token FROM c2 WHERE payload->>'l' = 'A')])),
	'stale', 'a sibling''s token does not complete a job of the same claim');
SELECT results_eq($$SELECT l.label, j.worker FROM claimq.jobs j JOIN lab l USING (job_id)
					 WHERE j.state = 'claimed' ORDER BY l.label$$,
	$$VALUES ('A', 'w2'), ('B', 'w1'), ('C', 'w1'), ('D', 'w2'), ('E', 'w2')$$,
	'the worker of each claim is recorded');

-- a job claimed again gets a new token
SELECT job_id AS ja, token AS ta FROM c2 WHERE payload->>'l' = 'A' \gset
SELECT ok(claimq.release(:ja, :ta), 'release job A');
SELECT job_id AS ja2, token AS ta2, attempts AS aa2 FROM claimq.claim('clm') \gset
SELECT is(:ja2::bigint, :ja::bigint, 'claim job A again');
SELECT isnt(:ta2::bigint, :ta::bigint, 'a job claimed again gets a new token');
SELECT ok(:ta2::bigint NOT IN (SELECT token FROM c1 UNION ALL SELECT token FROM c2),
	'the new token is not that of any earlier claim');
SELECT is((SELECT worker FROM claimq.jobs WHERE job_id = :ja), NULL,
	'a claim without a worker records none');

--
-- max_jobs
--
SELECT lives_ok($$SELECT claimq.enqueue_many('clm_other',
	ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series(1, 5) i))$$,
	'enqueue five jobs');
SELECT is((SELECT count(*) FROM claimq.claim('clm_other')), 1::bigint,
	'max_jobs defaults to 1');
SELECT is((SELECT count(*) FROM claimq.claim('clm_other', max_jobs => 3)), 3::bigint,
	'claim takes max_jobs jobs when there are more');
SELECT is((SELECT count(*) FROM claimq.claim('clm_other', max_jobs => 10000)), 2::bigint,
	'claim takes what there is when there are fewer (max_jobs => 10000)');
SELECT throws_ok(format('SELECT * FROM claimq.claim(%L, max_jobs => %s)', 'clm_other', n),
	e, NULL, format('claim with max_jobs => %s raises %s', n, e))
  FROM (VALUES ('0', '22023'), ('-1', '22023'), ('10001', '22023'),
			   ('2147483647', '22023'), ('NULL', '22004')) v(n, e);

--
-- paused queues hand out nothing
--
SELECT lives_ok($$SELECT claimq.create_queue('clm_pause')$$, 'create queue clm_pause');
SELECT lives_ok($$SELECT claimq.enqueue('clm_pause', '{}')$$, 'enqueue a ready job');
SELECT lives_ok($$SELECT claimq.pause_queue('clm_pause')$$, 'pause the queue');
SELECT is_empty($$SELECT * FROM claimq.claim('clm_pause', max_jobs => 10)$$,
	'a paused queue hands out nothing');
SELECT is_empty($$SELECT * FROM claimq.claim('clm_pause', start => true)$$,
	'not with start => true either');
SELECT is_empty($$SELECT * FROM claimq.claim('clm_pause', wait => '20 milliseconds')$$,
	'nor after a wait');
SELECT lives_ok($$SELECT claimq.resume_queue('clm_pause')$$, 'resume the queue');
SELECT is((SELECT count(*) FROM claimq.claim('clm_pause')), 1::bigint,
	'a resumed queue hands its jobs out again');

--
-- lease, run_lease and start => true
--
SELECT lives_ok($$SELECT claimq.create_queue('clm_lease', lease => '30 seconds',
	run_lease => '5 minutes')$$, 'create queue clm_lease');
SELECT lives_ok($$SELECT claimq.enqueue_many('clm_lease', ARRAY(SELECT '{}'::jsonb
	FROM generate_series(1, 6)))$$, 'enqueue six jobs');
SELECT clock_timestamp() AS t0 \gset
SELECT expires_at AS e1, attempts AS a1 FROM claimq.claim('clm_lease', lease => '10 minutes') \gset
SELECT clock_timestamp() AS t1 \gset
SELECT ok(:'e1'::timestamptz BETWEEN :'t0'::timestamptz + '10 minutes'
								 AND :'t1'::timestamptz + '10 minutes',
	'lease overrides the queue''s lease');
SELECT is(:a1, 0, 'a claim without start counts no attempt');

SELECT clock_timestamp() AS t0 \gset
SELECT job_id AS s1, expires_at AS e1, attempts AS a1
  FROM claimq.claim('clm_lease', start => true) \gset
SELECT clock_timestamp() AS t1 \gset
SELECT ok(:'e1'::timestamptz BETWEEN :'t0'::timestamptz + '5 minutes'
								 AND :'t1'::timestamptz + '5 minutes',
	'start => true takes the queue''s run_lease');
SELECT is(:a1, 1, 'start => true counts the attempt in the returned row');
SELECT results_eq(format('SELECT state, attempts, expires_at FROM claimq.jobs WHERE job_id = %s', :s1),
	format($$VALUES ('running'::text, 1, %L::timestamptz)$$, :'e1'),
	'start => true makes the job running with the attempt counted');

SELECT clock_timestamp() AS t0 \gset
SELECT job_id AS s2, expires_at AS e1, attempts AS a1
  FROM claimq.claim('clm_lease', start => true, lease => '2 minutes') \gset
SELECT clock_timestamp() AS t1 \gset
SELECT ok(:'e1'::timestamptz BETWEEN :'t0'::timestamptz + '2 minutes'
								 AND :'t1'::timestamptz + '2 minutes',
	'start => true with a lease takes that lease');
SELECT is((SELECT state FROM claimq.jobs WHERE job_id = :s2), 'running',
	'that job is running too');

SELECT clock_timestamp() AS t0 \gset
SELECT expires_at AS e1 FROM claimq.claim('clm_lease', lease => '7 days') \gset
SELECT ok(:'e1'::timestamptz >= :'t0'::timestamptz + '7 days', 'a lease of 7 days is accepted');
SELECT clock_timestamp() AS t0 \gset
SELECT expires_at AS e1 FROM claimq.claim('clm_lease', lease => NULL) \gset
SELECT clock_timestamp() AS t1 \gset
SELECT ok(:'e1'::timestamptz BETWEEN :'t0'::timestamptz + '30 seconds'
								 AND :'t1'::timestamptz + '30 seconds',
	'lease => NULL takes the queue''s lease');

SELECT throws_ok(format('SELECT * FROM claimq.claim(%L, %s)', 'clm_lease', a), e, NULL,
	format('claim with %s raises %s', a, e))
  FROM (VALUES ('lease => ''0''', '22023'),
			   ('lease => ''-1 second''', '22023'),
			   ('lease => ''7 days 1 second''', '22023'),
			   ('lease => ''1 month''', '22023'),
			   ('lease => ''-10 months 302 days''', '22023'),
			   ('wait => ''-10 months 302 days''', '22023'),
			   ('start => true, lease => ''0''', '22023'),
			   ('wait => ''-1 second''', '22023'),
			   ('wait => ''7 days 1 second''', '22023'),
			   ('wait => NULL', '22004'),
			   ('start => NULL', '22004')) v(a, e);
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'clm_lease' AND state = 'pending'),
	1::bigint, 'refused claims took nothing');

--
-- wait
--
SELECT lives_ok($$SELECT claimq.create_queue('clm_wait')$$, 'create queue clm_wait');
SELECT clock_timestamp() AS t0 \gset
SELECT is_empty($$SELECT * FROM claimq.claim('clm_wait', wait => '200 milliseconds')$$,
	'claim with a wait on an empty queue returns no rows');
SELECT ok(clock_timestamp() - :'t0'::timestamptz BETWEEN '190 milliseconds' AND '30 seconds',
	'it returns after about the wait');
SELECT lives_ok($$SELECT claimq.enqueue('clm_wait', '{}')$$, 'enqueue a ready job');
SELECT clock_timestamp() AS t0 \gset
SELECT is((SELECT count(*) FROM claimq.claim('clm_wait', wait => '1 minute')), 1::bigint,
	'claim with a wait takes a ready job');
SELECT ok(clock_timestamp() - :'t0'::timestamptz < '30 seconds',
	'without waiting for the wait to pass');
SELECT is_empty($$SELECT * FROM claimq.claim('clm_wait', wait => '0')$$,
	'wait => 0 does not wait');

-- An error inside a waiting claim's try (here: no such queue) undoes what
-- the caller's own subtransaction did, and only that: the claim's own
-- subtransaction is rolled back before the error goes on.
CREATE TEMP TABLE clm_block (x integer);
DO $$
BEGIN
	BEGIN
		INSERT INTO clm_block VALUES (1);
		PERFORM * FROM claimq.claim('clm_no_such_queue', wait => '1 second');
	EXCEPTION WHEN undefined_object THEN
		INSERT INTO clm_block VALUES (2);
	END;
END
$$;
SELECT results_eq('SELECT x FROM clm_block'::text, 'VALUES (2)'::text,
	'the exception block''s insert is rolled back, the handler''s kept');
SELECT lives_ok('SELECT count(*) FROM claimq.claim(''clm_wait'', 1)',
	'and the transaction goes on');

--
-- A plain queue (every job at priority 0, not fair) is claimed through the
-- table's access methods: the claimed rows are in the indexes that name
-- them, tokens follow the claim's order, and a trigger of one's own on
-- UPDATE of claimq.job still fires (the claim is then a statement).
--
SELECT lives_ok($$SELECT claimq.create_queue('clm_plain')$$, 'create queue clm_plain');
SELECT is((SELECT count(*) FROM claimq.enqueue_many('clm_plain',
			ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[],
			group_keys => ARRAY['g', 'g', NULL, NULL])), 4::bigint,
	'enqueue four jobs, two of them in a group');
CREATE TEMP TABLE clm_plain_got AS
SELECT * FROM claimq.claim('clm_plain', 3, worker => 'w');
SELECT results_eq($$SELECT (payload->>'n')::integer FROM clm_plain_got ORDER BY token$$,
	ARRAY[1, 2, 3], 'the first three jobs, tokens in the claim''s order');
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT results_eq($$SELECT j.job_id FROM claimq.job j
					WHERE j.queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'clm_plain')
					  AND j.expires_at IS NOT NULL ORDER BY j.job_id$$,
	$$SELECT job_id FROM clm_plain_got ORDER BY job_id$$,
	'the claimed jobs are in the lease index, read by an index scan');
SELECT is((SELECT count(*) FROM claimq.job j
			WHERE j.queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'clm_plain')
			  AND j.group_key = 'g' AND j.state = ANY ('{pending,claimed,running}')),
	2::bigint, 'and the group''s, both claimed');
SELECT is((SELECT state FROM claimq.job j JOIN clm_plain_got g USING (job_id)
			WHERE (g.payload->>'n')::integer = 1), 'claimed'::claimq.job_state,
	'a claimed job is found by its id through the primary key');
RESET enable_seqscan;
RESET enable_bitmapscan;
CREATE TEMP TABLE clm_plain_seen (job_id bigint, state text);
-- The trigger runs as the role that claims (the extension's owner).
GRANT INSERT ON clm_plain_seen TO PUBLIC;
CREATE FUNCTION pg_temp.clm_plain_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO clm_plain_seen VALUES (NEW.job_id, NEW.state);
	RETURN NULL;
END
$$;
CREATE TRIGGER clm_plain_seen AFTER UPDATE ON claimq.job
	FOR EACH ROW EXECUTE FUNCTION pg_temp.clm_plain_seen();
CREATE TEMP TABLE clm_plain_last AS
SELECT job_id, 'running'::text AS state FROM claimq.claim('clm_plain', 5, start => true);
SELECT results_eq($$SELECT job_id, state FROM clm_plain_last$$,
	$$SELECT job_id, state FROM clm_plain_seen$$,
	'a trigger of one''s own on UPDATE of claimq.job sees the claimed row');
DROP TRIGGER clm_plain_seen ON claimq.job;

SELECT * FROM finish();
ROLLBACK;
