-- Trace context (contract 0.5): a job's headers, given to enqueue,
-- enqueue_many and create_schedule, returned by claim, status and wait_for
-- as their last column and shown by the jobs view; what is refused
-- (22023, changing nothing); replace takes the call's headers; a job keeps
-- them through retries, snooze, release, reclaim and retry_dead; a
-- dependent has its own; alter_schedule changes and clears a schedule's.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(56);

SELECT claimq.create_queue('hdr', max_attempts => 3, retry_base => '0', retry_max => '0',
						   keep_dead => '1 day', keep_done => '1 day');
SELECT claimq.create_queue('hdr_fair', fair => true);

-- A W3C trace context, as a producer's library writes it.
SELECT '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=1"}' AS tc \gset

--
-- Given and returned
--
SELECT claimq.enqueue('hdr', '{"n": 1}', headers => :'tc') AS h1 \gset
SELECT claimq.enqueue('hdr', '{"n": 2}') AS h2 \gset
SELECT claimq.enqueue('hdr', '{"n": 3}', headers => '{}') AS h3 \gset
SELECT results_eq(
	format($$SELECT headers FROM claimq.jobs WHERE job_id IN (%s, %s, %s) ORDER BY job_id$$, :h1, :h2, :h3),
	format($$VALUES (%L::jsonb), (NULL::jsonb), ('{}'::jsonb)$$, :'tc'),
	'the jobs view shows each job''s headers as given: an object, none, an empty object');
SELECT is((SELECT attname FROM pg_attribute
			WHERE attrelid = 'claimq.jobs'::regclass AND attnum > 0
			ORDER BY attnum DESC LIMIT 1)::text, 'headers',
	'headers is the last column of the jobs view');

CREATE TEMP TABLE claimed AS SELECT * FROM claimq.claim('hdr', 3);
SELECT is((SELECT array_agg(a.attname::text ORDER BY a.attnum)
			 FROM pg_attribute a
			WHERE a.attrelid = 'pg_temp.claimed'::regclass AND a.attnum > 0),
	'{job_id,token,payload,attempts,priority,enqueued_at,expires_at,headers}'::text[],
	'claim returns headers as its last column');
SELECT results_eq($$SELECT job_id, headers FROM claimed ORDER BY job_id$$,
	format($$VALUES (%s::bigint, %L::jsonb), (%s, NULL), (%s, '{}')$$, :h1, :'tc', :h2, :h3),
	'claim returns each job''s headers');
SELECT results_eq(
	format($$SELECT job_id, state, headers FROM claimq.status(ARRAY[%s, %s, -1]::bigint[])$$, :h1, :h2),
	format($$VALUES (%s::bigint, 'claimed'::text, %L::jsonb), (%s, 'claimed', NULL), (-1, NULL, NULL)$$,
		   :h1, :'tc', :h2),
	'status returns each job''s headers as its last column, NULL for a job that does not exist');
SELECT results_eq(
	format($$SELECT job_id, headers FROM claimq.wait_for(ARRAY[%s]::bigint[], '0')$$, :h1),
	format($$VALUES (%s::bigint, %L::jsonb)$$, :h1, :'tc'),
	'wait_for returns the job''s headers as its last column');

--
-- Refused, and nothing changes
--
SELECT count(*) AS jobs_before FROM claimq.job \gset
SELECT throws_ok($$SELECT claimq.enqueue('hdr', '{}', headers => '["a"]')$$, '22023',
	'headers must be a JSON object', 'headers that are an array: 22023');
SELECT throws_ok($$SELECT claimq.enqueue('hdr', '{}', headers => '"traceparent"')$$, '22023',
	'headers must be a JSON object', 'headers that are a string: 22023');
SELECT throws_ok($$SELECT claimq.enqueue('hdr', '{}', headers => 'null')$$, '22023',
	'headers must be a JSON object', 'headers that are JSON null: 22023');
SELECT throws_ok($$SELECT claimq.enqueue('hdr', '{}', headers => '{"a": 1}')$$, '22023',
	'the values of headers must be strings', 'a number as a value: 22023');
SELECT throws_ok($$SELECT claimq.enqueue('hdr', '{}', headers => '{"a": "b", "c": {"d": "e"}}')$$, '22023',
	'the values of headers must be strings', 'an object as a value: 22023');
SELECT throws_ok($$SELECT claimq.enqueue('hdr', '{}', headers => '{"a": null}')$$, '22023',
	'the values of headers must be strings', 'JSON null as a value: 22023');
SELECT throws_ok($$SELECT claimq.enqueue('hdr', '{}', headers => '{"a": ["x"]}')$$, '22023',
	'the values of headers must be strings', 'an array of strings as a value: 22023');
-- {"k": "xxx..."} is 9 bytes as text beside its value.
SELECT throws_ok(format($$SELECT claimq.enqueue('hdr', '{}', headers => %L)$$,
						jsonb_build_object('k', repeat('x', 8192 - 8))),
	'22023', 'headers must be at most 8192 bytes long as text',
	'headers of 8,193 bytes as text: 22023');
SELECT is(octet_length(jsonb_build_object('k', repeat('x', 8192 - 9))::text), 8192,
	'(the next headers are 8,192 bytes as text)');
SELECT lives_ok(format($$SELECT claimq.enqueue('hdr', '{}', headers => %L)$$,
					   jsonb_build_object('k', repeat('x', 8192 - 9))),
	'headers of 8,192 bytes as text are taken');
SELECT throws_ok($$SELECT claimq.enqueue_many('hdr', ARRAY['{}', '{}']::jsonb[],
											   headers => ARRAY['{}']::jsonb[])$$,
	'22023', 'headers must have as many elements as payloads',
	'enqueue_many with fewer headers than payloads: 22023');
SELECT throws_ok($$SELECT claimq.enqueue_many('hdr', ARRAY['{}', '{}']::jsonb[],
											   headers => ARRAY['{}', '{"a": 2}']::jsonb[])$$,
	'22023', 'the values of each of headers must be strings',
	'enqueue_many with one bad element of headers: 22023');
SELECT throws_ok($$SELECT claimq.enqueue_many('hdr', ARRAY['{}', '{}']::jsonb[],
											   headers => ARRAY[['{}'], ['{}']]::jsonb[])$$,
	'22023', NULL, 'enqueue_many with headers of two dimensions: 22023');
SELECT is((SELECT count(*) FROM claimq.job), :jobs_before + 1::bigint,
	'of all those calls only the one with headers of 8,192 bytes enqueued a job');

--
-- enqueue_many: one element per payload, NULL elements none
--
SELECT array_agg(id ORDER BY n) AS many FROM claimq.enqueue_many('hdr',
	ARRAY['{"m": 1}', '{"m": 2}', '{"m": 3}']::jsonb[],
	headers => ARRAY['{"traceparent": "a"}', NULL, '{"traceparent": "c"}']::jsonb[])
	WITH ORDINALITY AS e(id, n) \gset
SELECT results_eq(format($$SELECT payload, headers FROM claimq.jobs WHERE job_id = ANY (%L::bigint[]) ORDER BY job_id$$, :'many'),
	$$VALUES ('{"m": 1}'::jsonb, '{"traceparent": "a"}'::jsonb), ('{"m": 2}', NULL), ('{"m": 3}', '{"traceparent": "c"}')$$,
	'enqueue_many gives each job its element of headers, none for a NULL element');
SELECT is_empty($$SELECT FROM claimq.jobs j JOIN unnest(ARRAY(SELECT claimq.enqueue_many('hdr',
	ARRAY['{}', '{}']::jsonb[])))  AS u(id) ON j.job_id = u.id WHERE j.headers IS NOT NULL$$,
	'enqueue_many without headers: no job has any');

--
-- Dedup keys: keep leaves the live job's headers, replace takes the call's
--
SELECT claimq.enqueue('hdr', '{"v": 1}', dedup_key => 'k1', run_at => now() + '1 hour',
					  headers => '{"traceparent": "first"}') AS k1 \gset
SELECT is(claimq.enqueue('hdr', '{"v": 2}', dedup_key => 'k1', headers => '{"traceparent": "second"}'),
	:k1::bigint, 'a second enqueue with the key returns the live job');
SELECT is((SELECT headers FROM claimq.jobs WHERE job_id = :k1), '{"traceparent": "first"}'::jsonb,
	'on_duplicate keep: the live job keeps its headers');
SELECT is(claimq.enqueue('hdr', '{"v": 3}', dedup_key => 'k1', run_at => now() + '1 hour',
						 on_duplicate => 'replace', headers => '{"traceparent": "third"}'),
	:k1::bigint, 'replace returns the live job');
SELECT results_eq(format($$SELECT payload, headers FROM claimq.jobs WHERE job_id = %s$$, :k1),
	$$VALUES ('{"v": 3}'::jsonb, '{"traceparent": "third"}'::jsonb)$$,
	'on_duplicate replace: the pending job takes the call''s payload and headers');
SELECT claimq.enqueue('hdr', '{"v": 4}', dedup_key => 'k1', run_at => now() + '1 hour',
					  on_duplicate => 'replace') = :k1 AS replaced;
SELECT is((SELECT headers FROM claimq.jobs WHERE job_id = :k1), NULL::jsonb,
	'replace by a call without headers leaves the job none');
SELECT throws_ok($$SELECT claimq.enqueue('hdr', '{"v": 5}', dedup_key => 'k1',
										  on_duplicate => 'replace', headers => '{"a": []}')$$,
	'22023', 'the values of headers must be strings', 'replace with bad headers: 22023');
SELECT results_eq(format($$SELECT payload, headers FROM claimq.jobs WHERE job_id = %s$$, :k1),
	$$VALUES ('{"v": 4}'::jsonb, NULL::jsonb)$$,
	'and the pending job is as it was');
SELECT claimq.enqueue_many('hdr', ARRAY['{"v": 6}']::jsonb[], dedup_keys => ARRAY['k1'],
						   on_duplicate => 'replace', run_at => now() + '1 hour',
						   headers => ARRAY['{"traceparent": "sixth"}']::jsonb[]) = :k1 AS replaced;
SELECT is((SELECT headers FROM claimq.jobs WHERE job_id = :k1), '{"traceparent": "sixth"}'::jsonb,
	'enqueue_many''s replace takes the element''s headers');

--
-- A job keeps its headers through retries, snooze, release, reclaim and
-- retry_dead
--
SELECT claimq.create_queue('hdr_life', max_attempts => 2, retry_base => '0', retry_max => '0',
						   keep_dead => '1 day');
SELECT claimq.enqueue('hdr_life', '{}', headers => :'tc') AS life \gset
CREATE FUNCTION pg_temp.take(lease interval DEFAULT '1 minute')
RETURNS TABLE (job_id bigint, token bigint, headers jsonb) LANGUAGE sql AS $$
	SELECT c.job_id, c.token, c.headers FROM claimq.claim('hdr_life', 1, lease => lease) c
$$;
SELECT token AS t, headers AS h FROM pg_temp.take() \gset
SELECT is(:'h'::jsonb, :'tc'::jsonb, 'the first claim returns the job''s headers');
SELECT ok(claimq.fail(:life, :t, 'first failure'), 'the first attempt fails, to be retried');
SELECT token AS t, headers AS h FROM pg_temp.take() \gset
SELECT is(:'h'::jsonb, :'tc'::jsonb, 'a retried job is claimed with its headers');
SELECT ok(claimq.snooze(:life, :t, '0'), 'snooze it');
SELECT token AS t, headers AS h FROM pg_temp.take() \gset
SELECT is(:'h'::jsonb, :'tc'::jsonb, 'a snoozed job is claimed with its headers');
SELECT ok(claimq.release(:life, :t), 'release it');
SELECT token AS t, headers AS h FROM pg_temp.take('1 millisecond') \gset
SELECT is(:'h'::jsonb, :'tc'::jsonb, 'a released job is claimed with its headers');
SELECT pg_sleep(0.01);
SELECT is((SELECT released FROM claimq.reclaim('hdr_life')), 1::bigint,
	'its lease of a millisecond expired: reclaimed');
SELECT token AS t, headers AS h FROM claimq.claim('hdr_life', 1, start => true) \gset
SELECT is(:'h'::jsonb, :'tc'::jsonb, 'a reclaimed job is claimed with its headers');
SELECT ok(claimq.fail(:life, :t, 'last failure'), 'its last attempt fails');
SELECT results_eq(format($$SELECT state, headers FROM claimq.jobs WHERE job_id = %s$$, :life),
	format($$VALUES ('dead'::text, %L::jsonb)$$, :'tc'), 'a dead job keeps its headers');
SELECT is(claimq.retry_dead('hdr_life', ARRAY[:life]::bigint[]), 1::bigint, 'retry_dead');
SELECT is((SELECT headers FROM pg_temp.take()), :'tc'::jsonb, 'a job retry_dead put back is claimed with its headers');

--
-- Workflows: a dependent has its own headers
--
SELECT claimq.enqueue('hdr', '{"after": true}', after => ARRAY[:h2]::bigint[],
					  headers => '{"traceparent": "dependent"}') AS dep \gset
SELECT claimq.enqueue('hdr', '{"after": true}', after => ARRAY[:h2]::bigint[]) AS dep2 \gset
SELECT ok(claimq.complete(job_id, token), 'the job both run after completes')
  FROM claimed WHERE job_id = :h2;
-- Its dependents are judged at the statement's end (at commit otherwise).
SET CONSTRAINTS claimq.job_finish_judge IMMEDIATE;
SELECT results_eq(format($$SELECT state, headers FROM claimq.jobs WHERE job_id IN (%s, %s) ORDER BY job_id$$, :dep, :dep2),
	$$VALUES ('pending'::text, '{"traceparent": "dependent"}'::jsonb), ('pending', NULL)$$,
	'each dependent is pending with its own headers, none where it was given none');

--
-- A fair queue's claim returns them too
--
SELECT claimq.enqueue('hdr_fair', '{}', group_key => 'a', headers => '{"traceparent": "fa"}') > 0
	   AND claimq.enqueue('hdr_fair', '{}', group_key => 'b') > 0 AS enqueued;
SELECT results_eq($$SELECT headers FROM claimq.claim('hdr_fair', 2) ORDER BY job_id$$,
	$$VALUES ('{"traceparent": "fa"}'::jsonb), (NULL)$$,
	'a fair queue''s claim returns each job''s headers');

--
-- Schedules give each job their headers
--
SELECT claimq.create_schedule('hdr_every', 'hdr', '@every 1 minute', '{"s": 1}',
							  headers => :'tc');
SELECT is((SELECT headers FROM claimq.schedules WHERE schedule = 'hdr_every'), :'tc'::jsonb,
	'the schedules view shows a schedule''s headers');
UPDATE claimq.schedule SET next_run_at = now() - interval '1 second' WHERE name = 'hdr_every';
SELECT is(claimq.fire_schedules(), 1::bigint, 'the schedule fires once');
SELECT is((SELECT headers FROM claimq.jobs WHERE payload = '{"s": 1}'), :'tc'::jsonb,
	'the job it enqueued has its headers');
SELECT claimq.alter_schedule('hdr_every', priority => 1);
SELECT is((SELECT headers FROM claimq.schedules WHERE schedule = 'hdr_every'), :'tc'::jsonb,
	'alter_schedule without headers keeps them');
SELECT throws_ok($$SELECT claimq.alter_schedule('hdr_every', headers => '[]')$$, '22023',
	'headers must be a JSON object', 'alter_schedule with headers that are not an object: 22023');
SELECT throws_ok($$SELECT claimq.create_schedule('hdr_bad', 'hdr', '@every 1 minute',
												  headers => '{"a": true}')$$, '22023',
	'the values of headers must be strings', 'create_schedule with a value that is not a string: 22023');
SELECT claimq.alter_schedule('hdr_every', headers => '{}');
SELECT is((SELECT headers FROM claimq.schedules WHERE schedule = 'hdr_every'), NULL::jsonb,
	'alter_schedule with headers => ''{}'' clears them');
UPDATE claimq.schedule SET next_run_at = now() - interval '1 second' WHERE name = 'hdr_every';
SELECT is(claimq.fire_schedules(), 1::bigint, 'the schedule fires again');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE payload = '{"s": 1}' AND headers IS NULL), 1::bigint,
	'the job it enqueued then has none');
SELECT claimq.create_schedule('hdr_empty', 'hdr', '@every 1 minute', '{"s": 2}', headers => '{}');
SELECT is((SELECT headers FROM claimq.schedules WHERE schedule = 'hdr_empty'), NULL::jsonb,
	'create_schedule with headers => ''{}'': the schedule has none');

SELECT * FROM finish();
ROLLBACK;
