-- Queue administration: create, alter, drop, pause, resume and purge;
-- queue name rules; the bounds and NULL handling of every setting.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(189);

-- The settings of a queue, as stored.
CREATE FUNCTION pg_temp.settings(q text)
RETURNS TABLE(lease interval, run_lease interval, max_attempts int,
			  retry_base interval, retry_max interval, keep_done interval,
			  keep_dead interval, notify boolean, paused boolean)
LANGUAGE sql AS $$
	SELECT lease, run_lease, max_attempts, retry_base, retry_max, keep_done,
		   keep_dead, notify, paused
	  FROM claimq.queue WHERE name = q
$$;

-- The value of a one-value query, or its SQLSTATE if it fails: keeps an
-- unexpected error from aborting the rest of the file.
CREATE FUNCTION pg_temp.value_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	v text;
BEGIN
	EXECUTE q INTO v;
	RETURN v;
EXCEPTION WHEN OTHERS THEN
	RETURN 'error ' || SQLSTATE;
END
$$;

--
-- create_queue
--
SELECT lives_ok($$SELECT claimq.create_queue('adm_default')$$,
	'create_queue with every default');
SELECT results_eq($$SELECT * FROM pg_temp.settings('adm_default')$$,
	$$VALUES ('30 seconds'::interval, '5 minutes'::interval, 5,
			  '1 second'::interval, '1 hour'::interval, '0'::interval,
			  '14 days'::interval, false, false)$$,
	'create_queue stores the documented defaults');
SELECT lives_ok($$SELECT claimq.create_queue('adm_custom', lease => '10 seconds',
	run_lease => '2 minutes', max_attempts => 3, retry_base => '2 seconds',
	retry_max => '10 minutes', keep_done => '1 day', keep_dead => '3 days',
	notify => true)$$,
	'create_queue with every option named');
SELECT results_eq($$SELECT * FROM pg_temp.settings('adm_custom')$$,
	$$VALUES ('10 seconds'::interval, '2 minutes'::interval, 3,
			  '2 seconds'::interval, '10 minutes'::interval, '1 day'::interval,
			  '3 days'::interval, true, false)$$,
	'create_queue stores every option');
SELECT throws_ok($$SELECT claimq.create_queue('adm_default')$$, '42710', NULL,
	'create_queue of an existing queue raises 42710');
SELECT throws_ok($$SELECT claimq.create_queue('adm_default', lease => '1 minute')$$,
	'42710', NULL, 'create_queue of an existing queue with other settings raises 42710');
SELECT results_eq($$SELECT lease FROM pg_temp.settings('adm_default')$$,
	$$VALUES ('30 seconds'::interval)$$,
	'a refused create_queue leaves the existing queue as it was');

--
-- Queue names: 1 to 63 of [A-Za-z0-9_.-], case-sensitive.
--
SELECT lives_ok(format('SELECT claimq.create_queue(%L)', n), 'valid name: ' || d)
  FROM (VALUES ('a', 'one character'),
			   ('A.b-c_9', 'every allowed kind of character'),
			   (repeat('x', 63), '63 characters'),
			   ('...', 'dots only'),
			   ('Case', 'upper case'),
			   ('case', 'differs from another only in case')) v(n, d);
SELECT is((SELECT count(*) FROM claimq.queue WHERE lower(name) = 'case'), 2::bigint,
	'queue names are case-sensitive');
CREATE TEMP TABLE bad_names(n text, d text);
INSERT INTO bad_names
VALUES ('', 'empty'),
	   (repeat('x', 64), '64 characters'),
	   ('a b', 'space'),
	   ('a/b', 'slash'),
	   ('a"b', 'double quote'),
	   ('a''b', 'single quote'),
	   ('caf' || chr(233), 'non-ASCII letter'),
	   ('a' || chr(10), 'trailing newline'),
	   ('a;b', 'semicolon'),
	   ('a%', 'percent'),
	   ('a*', 'asterisk');
SELECT throws_ok(format('SELECT claimq.create_queue(%L)', n), '22023', NULL,
	'invalid name raises 22023: ' || d)
  FROM bad_names;
SELECT throws_ok($$SELECT claimq.create_queue(NULL)$$, '22004', NULL,
	'create_queue with a NULL name raises 22004');
SELECT is((SELECT count(*) FROM claimq.queue WHERE name IN (SELECT n FROM bad_names)),
	0::bigint, 'refused names created nothing');

--
-- Bounds of every setting, at create_queue.
--
SELECT lives_ok(format('SELECT claimq.create_queue(%L, %s => %L)',
					   'adm_ok_' || s || '_' || i, s, v),
	format('create_queue accepts %s => %s', s, v))
  FROM (VALUES (1, 'lease', '1 microsecond'),
			   (2, 'lease', '7 days'),
			   (3, 'lease', '168 hours'),
			   (4, 'run_lease', '1 microsecond'),
			   (5, 'run_lease', '7 days'),
			   (6, 'max_attempts', '1'),
			   (7, 'max_attempts', '1000000'),
			   (8, 'retry_base', '0'),
			   (9, 'retry_max', '0'),
			   (10, 'keep_done', '0'),
			   (11, 'keep_done', '1 year'),
			   (12, 'keep_dead', '0'),
			   (13, 'notify', 'true')) t(i, s, v);
SELECT throws_ok(format('SELECT claimq.create_queue(%L, %s => %L)',
						'adm_bad_' || i, s, v), '22023', NULL,
	format('create_queue refuses %s => %s with 22023', s, v))
  FROM (VALUES (1, 'lease', '0'),
			   (2, 'lease', '-1 second'),
			   (3, 'lease', '7 days 00:00:00.000001'),
			   (4, 'lease', '1 month'),
			   (5, 'run_lease', '0'),
			   (6, 'run_lease', '-1 second'),
			   (7, 'run_lease', '8 days'),
			   (8, 'max_attempts', '0'),
			   (9, 'max_attempts', '-1'),
			   (10, 'retry_base', '-1 second'),
			   (11, 'retry_base', '-1 microsecond'),
			   (12, 'retry_max', '-1 second'),
			   (13, 'keep_done', '-1 second'),
			   (14, 'keep_dead', '-1 day'),
			   (15, 'lease', '-10 months 302 days'),
			   (16, 'retry_base', '101 years'),
			   (17, 'keep_dead', '-10 months 302 days')) t(i, s, v);
SELECT throws_ok(format('SELECT claimq.create_queue(%L, %s => NULL)',
						'adm_null_' || s, s), '22004', NULL,
	format('create_queue refuses %s => NULL with 22004', s))
  FROM unnest(ARRAY['lease', 'run_lease', 'max_attempts', 'retry_base',
					'retry_max', 'keep_done', 'keep_dead', 'notify']) s;
SELECT is((SELECT count(*) FROM claimq.queue
			WHERE name LIKE 'adm\_bad\_%' OR name LIKE 'adm\_null\_%'),
	0::bigint, 'refused settings created no queue');

--
-- alter_queue: NULL leaves a setting as it is; same bounds as create.
--
SELECT lives_ok($$SELECT claimq.create_queue('adm_alter')$$, 'create a queue to alter');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter')$$,
	'alter_queue with no options');
SELECT results_eq($$SELECT * FROM pg_temp.settings('adm_alter')$$,
	$$SELECT * FROM pg_temp.settings('adm_default')$$,
	'alter_queue with no options changes nothing');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', NULL, NULL, NULL, NULL,
	NULL, NULL, NULL, NULL)$$,
	'alter_queue with every option NULL');
SELECT results_eq($$SELECT * FROM pg_temp.settings('adm_alter')$$,
	$$SELECT * FROM pg_temp.settings('adm_default')$$,
	'alter_queue with every option NULL changes nothing');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', lease => '11 seconds')$$,
	'alter_queue lease');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', run_lease => '12 minutes')$$,
	'alter_queue run_lease');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', max_attempts => 13)$$,
	'alter_queue max_attempts');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', retry_base => '14 seconds')$$,
	'alter_queue retry_base');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', retry_max => '15 hours')$$,
	'alter_queue retry_max');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', keep_done => '16 days')$$,
	'alter_queue keep_done');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', keep_dead => '17 days')$$,
	'alter_queue keep_dead');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', notify => true)$$,
	'alter_queue notify');
SELECT results_eq($$SELECT * FROM pg_temp.settings('adm_alter')$$,
	$$VALUES ('11 seconds'::interval, '12 minutes'::interval, 13,
			  '14 seconds'::interval, '15 hours'::interval, '16 days'::interval,
			  '17 days'::interval, true, false)$$,
	'each alter_queue changed only its own setting');
SELECT lives_ok($$SELECT claimq.alter_queue('adm_alter', lease => '1 second',
	run_lease => '2 seconds', max_attempts => 1, retry_base => '0',
	retry_max => '0', keep_done => '0', keep_dead => '0', notify => false)$$,
	'alter_queue of every setting at once, at the lower bounds');
SELECT results_eq($$SELECT * FROM pg_temp.settings('adm_alter')$$,
	$$VALUES ('1 second'::interval, '2 seconds'::interval, 1,
			  '0'::interval, '0'::interval, '0'::interval,
			  '0'::interval, false, false)$$,
	'alter_queue changed every setting');
SELECT throws_ok(format('SELECT claimq.alter_queue(%L, %s => %L)', 'adm_alter', s, v),
	'22023', NULL, format('alter_queue refuses %s => %s with 22023', s, v))
  FROM (VALUES ('lease', '0'),
			   ('lease', '-1 second'),
			   ('lease', '7 days 1 second'),
			   ('run_lease', '0'),
			   ('run_lease', '-1 second'),
			   ('run_lease', '7 days 1 second'),
			   ('max_attempts', '0'),
			   ('retry_base', '-1 second'),
			   ('retry_max', '-1 second'),
			   ('keep_done', '-1 second'),
			   ('keep_dead', '-1 second')) t(s, v);
SELECT throws_ok($$SELECT claimq.alter_queue('adm_alter', lease => '1 minute',
	max_attempts => 0)$$, '22023', NULL,
	'alter_queue with one bad setting among good ones raises 22023');
SELECT results_eq($$SELECT * FROM pg_temp.settings('adm_alter')$$,
	$$VALUES ('1 second'::interval, '2 seconds'::interval, 1,
			  '0'::interval, '0'::interval, '0'::interval,
			  '0'::interval, false, false)$$,
	'refused alter_queue calls changed nothing');
SELECT throws_ok($$SELECT claimq.alter_queue('adm_nosuch', lease => '1 minute')$$,
	'42704', NULL, 'alter_queue of an unknown queue raises 42704');
SELECT throws_ok($$SELECT claimq.alter_queue('bad name', lease => '1 minute')$$,
	'22023', NULL, 'alter_queue with a bad queue name raises 22023');
SELECT throws_ok($$SELECT claimq.alter_queue(NULL, lease => '1 minute')$$,
	'22004', NULL, 'alter_queue with a NULL queue raises 22004');

--
-- pause_queue, resume_queue
--
SELECT lives_ok($$SELECT claimq.pause_queue('adm_default')$$, 'pause_queue');
SELECT is((SELECT paused FROM claimq.queue_stats WHERE queue = 'adm_default'), true,
	'queue_stats shows the queue paused');
SELECT lives_ok($$SELECT claimq.pause_queue('adm_default')$$,
	'pause_queue of a paused queue');
SELECT lives_ok($$SELECT claimq.resume_queue('adm_default')$$, 'resume_queue');
SELECT is((SELECT paused FROM claimq.queue_stats WHERE queue = 'adm_default'), false,
	'queue_stats shows the queue resumed');
SELECT lives_ok($$SELECT claimq.resume_queue('adm_default')$$,
	'resume_queue of a queue that is not paused');
SELECT is((SELECT paused FROM claimq.queue_stats WHERE queue = 'adm_default'), false,
	'the queue stays resumed');
SELECT throws_ok(format('SELECT claimq.%s(%s)', f, a), e, NULL,
	format('%s(%s) raises %s', f, a, e))
  FROM unnest(ARRAY['pause_queue', 'resume_queue', 'purge_queue']) f,
	   (VALUES ('''adm_nosuch''', '42704'),
			   ('''bad name''', '22023'),
			   ('NULL', '22004')) v(a, e);

--
-- purge_queue: deletes pending jobs (ready and scheduled) only.
--
SELECT lives_ok($$SELECT claimq.create_queue('adm_purge', keep_done => '1 day',
	max_attempts => 1)$$, 'create a queue to purge');
SELECT is(pg_temp.value_of($$SELECT claimq.purge_queue('adm_purge')$$), '0',
	'purge_queue of an empty queue returns 0');
SELECT ok(claimq.enqueue('adm_purge', jsonb_build_object('n', n),
						 run_at => CASE WHEN n > 4 THEN clock_timestamp() + '1 hour' END) > 0,
	'enqueue job ' || n)
  FROM generate_series(1, 6) n;
-- job 1 stays claimed, 2 goes running, 3 done, 4 dead; 5 and 6 are scheduled.
SELECT job_id AS p1, token AS pt1 FROM claimq.claim('adm_purge') \gset
SELECT job_id AS p2, token AS pt2 FROM claimq.claim('adm_purge', start => true) \gset
SELECT job_id AS p3, token AS pt3 FROM claimq.claim('adm_purge') \gset
SELECT job_id AS p4, token AS pt4 FROM claimq.claim('adm_purge') \gset
SELECT ok(claimq.complete(:p3, :pt3), 'complete job 3');
SELECT ok(claimq.fail(:p4, :pt4, 'boom'), 'fail job 4 for good');
SELECT lives_ok($$SELECT claimq.enqueue('adm_purge', '{"n": 7}')$$,
	'enqueue a ready job');
SELECT is(pg_temp.value_of($$SELECT claimq.purge_queue('adm_purge')$$), '3',
	'purge_queue returns the number of pending jobs deleted');
SELECT bag_eq($$SELECT state FROM claimq.jobs WHERE queue = 'adm_purge'$$,
	ARRAY['claimed', 'running', 'done', 'dead'],
	'purge_queue left claimed, running, done and dead jobs');

--
-- drop_queue
--
SELECT throws_ok($$SELECT claimq.drop_queue('adm_purge')$$, '55006', NULL,
	'drop_queue refuses a queue with claimed and running jobs (55006)');
SELECT ok(claimq.release(:p1, :pt1), 'release the claimed job');
SELECT throws_ok($$SELECT claimq.drop_queue('adm_purge')$$, '55006', NULL,
	'drop_queue refuses a queue with a running job (55006)');
CREATE FUNCTION pg_temp.error_detail(sql text) RETURNS text
LANGUAGE plpgsql AS $f$
DECLARE
	detail text;
BEGIN
	EXECUTE sql;
	RETURN NULL;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
	RETURN detail;
END
$f$;
SELECT is(pg_temp.error_detail($$SELECT claimq.drop_queue('adm_purge')$$),
	'1 job is claimed or running.', 'its detail counts the one job in the singular');
SELECT throws_ok($$SELECT claimq.drop_queue('adm_purge', force => false)$$, '55006',
	NULL, 'drop_queue with force => false refuses too');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'adm_purge'), 4::bigint,
	'refused drop_queue calls deleted nothing');
SELECT lives_ok($$SELECT claimq.create_queue('adm_drop')$$, 'create a queue with a claimed job');
SELECT lives_ok($$SELECT claimq.enqueue('adm_drop', '{}')$$, 'enqueue into it');
SELECT is((SELECT count(*) FROM claimq.claim('adm_drop')), 1::bigint,
	'claim its job');
SELECT throws_ok($$SELECT claimq.drop_queue('adm_drop')$$, '55006', NULL,
	'drop_queue refuses a queue with a claimed job (55006)');
SELECT lives_ok($$SELECT claimq.drop_queue('adm_purge', force => true)$$,
	'drop_queue with force => true drops a queue with a running job');
SELECT is((SELECT count(*) FROM claimq.queue WHERE name = 'adm_purge'), 0::bigint,
	'the forced drop removed the queue');
SELECT is((SELECT count(*) FROM claimq.job WHERE job_id IN (:p1, :p2, :p3, :p4)),
	0::bigint, 'the forced drop removed every job of the queue');
SELECT throws_ok($$SELECT claimq.enqueue('adm_purge', '{}')$$, '42704', NULL,
	'enqueue into a dropped queue raises 42704');
SELECT lives_ok($$SELECT claimq.create_queue('adm_purge')$$,
	'a dropped queue''s name can be used again');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'adm_purge'), 0::bigint,
	'the new queue of that name has no jobs');
SELECT lives_ok($$SELECT claimq.create_queue('adm_idle')$$, 'create a queue');
SELECT lives_ok($$SELECT claimq.enqueue('adm_idle', '{}')$$, 'enqueue a pending job');
SELECT lives_ok($$SELECT claimq.drop_queue('adm_idle')$$,
	'drop_queue drops a queue whose jobs are only pending');
SELECT is((SELECT count(*) FROM claimq.queue WHERE name = 'adm_idle'), 0::bigint,
	'the queue is gone');
SELECT throws_ok($$SELECT claimq.drop_queue('adm_idle')$$, '42704', NULL,
	'drop_queue of an unknown queue raises 42704');
SELECT throws_ok($$SELECT claimq.drop_queue('bad name')$$, '22023', NULL,
	'drop_queue with a bad queue name raises 22023');
SELECT throws_ok($$SELECT claimq.drop_queue(NULL)$$, '22004', NULL,
	'drop_queue with a NULL queue raises 22004');

-- drop_queue finds a queue's jobs of every state through indexes, not by
-- a pass over the whole job table (20,000 jobs of another queue here).
SELECT claimq.create_queue('adm_every', keep_done => '1 day', group_limit => 1);
SELECT claimq.enqueue('adm_every', '{}', priority => 10) AS e_claimed \gset
SELECT claimq.enqueue('adm_every', '{}', priority => 9) AS e_running \gset
SELECT claimq.enqueue('adm_every', '{}', priority => 8) AS e_done \gset
SELECT claimq.enqueue('adm_every', '{}', priority => 7, max_attempts => 1) AS e_dead \gset
SELECT claimq.enqueue('adm_every', '{}', priority => 6) AS e_cancelled \gset
SELECT claimq.enqueue('adm_every', '{}', group_key => 'g') AS e_free \gset
SELECT claimq.enqueue('adm_every', '{}', group_key => 'g') AS e_held \gset
SELECT claimq.enqueue('adm_every', '{}', after => ARRAY[:e_free]::bigint[]) AS e_waiting \gset
SELECT job_id = :e_claimed FROM claimq.claim('adm_every');
SELECT job_id = :e_running FROM claimq.claim('adm_every', start => true);
SELECT claimq.complete(job_id, token) FROM claimq.claim('adm_every');
SELECT claimq.fail(job_id, token, 'no') FROM claimq.claim('adm_every');
SELECT count(*) FROM claimq.cancel(ARRAY[:e_cancelled]::bigint[]);
SELECT is((SELECT string_agg(state || CASE WHEN held THEN ' held' ELSE '' END, ', ' ORDER BY job_id)
			 FROM claimq.job WHERE job_id BETWEEN :e_claimed AND :e_waiting),
	'claimed, running, done, dead, cancelled, pending, pending held, waiting',
	'a queue with a job in every state');
SELECT claimq.create_queue('adm_big');
SELECT count(*) FROM claimq.enqueue_many('adm_big', array_fill('{}'::jsonb, ARRAY[20000]));
ANALYZE claimq.job;
SELECT seq_scan AS seq_before FROM pg_stat_xact_user_tables
 WHERE relid = 'claimq.job'::regclass \gset
SELECT lives_ok($$SELECT claimq.drop_queue('adm_every', force => true)$$,
	'drop_queue with force => true drops it');
SELECT is((SELECT count(*) FROM claimq.job WHERE job_id BETWEEN :e_claimed AND :e_waiting),
	0::bigint, 'every one of its jobs is gone');
SELECT is((SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'claimq.job'::regclass),
	:seq_before::bigint, 'and drop_queue read no job table from end to end');
SELECT claimq.create_queue('adm_rest', keep_done => '1 day');
SELECT claimq.enqueue('adm_rest', '{}') AS r_done \gset
SELECT claimq.complete(job_id, token) FROM claimq.claim('adm_rest');
SELECT claimq.enqueue('adm_rest', '{}', after => ARRAY[:r_done]::bigint[]) > 0;
SELECT claimq.enqueue('adm_rest', '{}', run_at => now() + interval '1 hour') AS r_waiting_parent \gset
SELECT claimq.enqueue('adm_rest', '{}', after => ARRAY[:r_waiting_parent]::bigint[]) > 0;
SELECT seq_scan AS seq_before FROM pg_stat_xact_user_tables
 WHERE relid = 'claimq.job'::regclass \gset
SELECT lives_ok($$SELECT claimq.drop_queue('adm_rest')$$,
	'drop_queue drops a queue of pending, done and waiting jobs');
SELECT is((SELECT count(*) FROM claimq.job WHERE job_id >= :r_done), 0::bigint,
	'every one of its jobs is gone');
SELECT is((SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'claimq.job'::regclass),
	:seq_before::bigint, 'and this drop_queue read no job table from end to end either');
SELECT claimq.drop_queue('adm_big');
SELECT throws_ok($$SELECT claimq.drop_queue('adm_default', force => NULL)$$, '22004',
	NULL, 'drop_queue with force => NULL raises 22004');
SELECT is((SELECT count(*) FROM claimq.queue WHERE name = 'adm_default'), 1::bigint,
	'a refused drop_queue left the queue');

--
-- Queue name checks at every function that takes a queue.
--
SELECT throws_ok(format(c, q), e, NULL, format('%s: %s raises %s', f, d, e))
  FROM (VALUES ('enqueue', 'SELECT claimq.enqueue(%s, ''{}'')'),
			   ('enqueue_many', 'SELECT claimq.enqueue_many(%s, ARRAY[''{}''::jsonb])'),
			   ('claim', 'SELECT * FROM claimq.claim(%s)'),
			   ('reclaim', 'SELECT * FROM claimq.reclaim(%s)'),
			   ('release_worker', 'SELECT claimq.release_worker(%s, ''w'')'),
			   ('retry_dead', 'SELECT claimq.retry_dead(%s)')) f(f, c),
	   (VALUES ('''adm_nosuch''', 'unknown queue', '42704'),
			   ('''''', 'empty name', '22023'),
			   (quote_literal(repeat('y', 64)), '64-character name', '22023'),
			   ('''bad name''', 'bad name', '22023')) v(q, d, e);
SELECT throws_ok(format(c, 'NULL'), '22004', NULL, f || ': NULL queue raises 22004')
  FROM (VALUES ('enqueue', 'SELECT claimq.enqueue(%s, ''{}'')'),
			   ('enqueue_many', 'SELECT claimq.enqueue_many(%s, ARRAY[''{}''::jsonb])'),
			   ('claim', 'SELECT * FROM claimq.claim(%s)'),
			   ('release_worker', 'SELECT claimq.release_worker(%s, ''w'')'),
			   ('retry_dead', 'SELECT claimq.retry_dead(%s)')) f(f, c);
SELECT throws_ok($$SELECT claimq.enqueue('ADM_DEFAULT', '{}')$$, '42704', NULL,
	'queue lookup is case-sensitive');

SELECT * FROM finish();
ROLLBACK;
