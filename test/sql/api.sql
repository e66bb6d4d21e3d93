-- The SQL API's shape: every documented function with its argument names
-- and types, how many arguments have defaults, and its result type.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(215);

CREATE TEMP TABLE api(sig text, args text, ndefaults int, result text);
INSERT INTO api VALUES
('claimq.create_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean)',
 'queue text, lease interval, run_lease interval, max_attempts integer, retry_base interval, retry_max interval, keep_done interval, keep_dead interval, notify boolean, group_limit integer, group_fifo boolean, max_in_flight integer, rate_limit integer, rate_period interval, fair boolean',
 14, 'void'),
('claimq.alter_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean)',
 'queue text, lease interval, run_lease interval, max_attempts integer, retry_base interval, retry_max interval, keep_done interval, keep_dead interval, notify boolean, group_limit integer, group_fifo boolean, max_in_flight integer, rate_limit integer, rate_period interval, fair boolean',
 14, 'void'),
('claimq.drop_queue(text,boolean)', 'queue text, force boolean', 1, 'void'),
('claimq.set_group_weight(text,text,real)', 'queue text, group_key text, weight real', 0, 'void'),
('claimq.pause_queue(text)', 'queue text', 0, NULL),
('claimq.resume_queue(text)', 'queue text', 0, NULL),
('claimq.purge_queue(text)', 'queue text', 0, 'bigint'),
('claimq.enqueue(text,jsonb,timestamptz,integer,text,integer,text,text,bigint[],text,jsonb)',
 'queue text, payload jsonb, run_at timestamp with time zone, priority integer, dedup_key text, max_attempts integer, on_duplicate text, group_key text, after bigint[], after_failed text, headers jsonb',
 9, 'bigint'),
('claimq.enqueue_many(text,jsonb[],timestamptz,integer,text[],integer,text,text[],bigint[],text,jsonb[])',
 'queue text, payloads jsonb[], run_at timestamp with time zone, priority integer, dedup_keys text[], max_attempts integer, on_duplicate text, group_keys text[], after bigint[], after_failed text, headers jsonb[]',
 9, 'SETOF bigint'),
('claimq.claim(text,integer,interval,text,boolean,interval)',
 'queue text, max_jobs integer, lease interval, worker text, start boolean, wait interval',
 5, 'TABLE(job_id bigint, token bigint, payload jsonb, attempts integer, priority integer, enqueued_at timestamp with time zone, expires_at timestamp with time zone, headers jsonb)'),
('claimq.start(bigint[],bigint[],interval,text)', 'job_ids bigint[], tokens bigint[], lease interval, queue text',
 2, 'TABLE(job_id bigint, outcome text, expires_at timestamp with time zone)'),
('claimq.extend(bigint[],bigint[],interval,text)', 'job_ids bigint[], tokens bigint[], lease interval, queue text',
 2, 'TABLE(job_id bigint, outcome text, expires_at timestamp with time zone)'),
('claimq.complete(bigint[],bigint[],jsonb[],text)', 'job_ids bigint[], tokens bigint[], results jsonb[], queue text',
 2, 'TABLE(job_id bigint, outcome text)'),
('claimq.fail(bigint[],bigint[],text,interval,boolean,text)',
 'job_ids bigint[], tokens bigint[], error text, retry_in interval, permanent boolean, queue text',
 4, 'TABLE(job_id bigint, outcome text, state text, run_at timestamp with time zone)'),
('claimq.release(bigint[],bigint[],text)', 'job_ids bigint[], tokens bigint[], queue text',
 1, 'TABLE(job_id bigint, outcome text)'),
('claimq.start(bigint,bigint,interval,text)', 'job_id bigint, token bigint, lease interval, queue text', 2, 'boolean'),
('claimq.extend(bigint,bigint,interval,text)', 'job_id bigint, token bigint, lease interval, queue text', 2, 'boolean'),
('claimq.complete(bigint,bigint,jsonb,text)', 'job_id bigint, token bigint, result jsonb, queue text', 2, 'boolean'),
('claimq.fail(bigint,bigint,text,interval,boolean,text)',
 'job_id bigint, token bigint, error text, retry_in interval, permanent boolean, queue text', 4, 'boolean'),
('claimq.release(bigint,bigint,text)', 'job_id bigint, token bigint, queue text', 1, 'boolean'),
('claimq.release_worker(text,text)', 'queue text, worker text', 0, 'bigint'),
('claimq.reclaim(text,integer)', 'queue text, max_jobs integer',
 2, 'TABLE(queue text, released bigint, retried bigint, dead bigint)'),
('claimq.retry_dead(text,bigint[])', 'queue text, job_ids bigint[]', 1, 'bigint'),
('claimq.snooze(bigint[],bigint[],interval,text)', 'job_ids bigint[], tokens bigint[], delay interval, queue text',
 1, 'TABLE(job_id bigint, outcome text, run_at timestamp with time zone)'),
('claimq.snooze(bigint,bigint,interval,text)', 'job_id bigint, token bigint, delay interval, queue text', 1, 'boolean'),
('claimq.cancel(bigint[],text)', 'job_ids bigint[], queue text', 1, 'TABLE(job_id bigint, outcome text, state text)'),
('claimq.status(bigint[],text)', 'job_ids bigint[], queue text', 1,
 'TABLE(job_id bigint, queue text, state text, attempts integer, run_at timestamp with time zone, finished_at timestamp with time zone, last_error text, result jsonb, headers jsonb)'),
('claimq.wait_for(bigint[],interval,text)', 'job_ids bigint[], timeout interval, queue text', 1,
 'TABLE(job_id bigint, queue text, state text, attempts integer, run_at timestamp with time zone, finished_at timestamp with time zone, last_error text, result jsonb, headers jsonb)'),
('claimq.dependencies(bigint[],text)', 'job_ids bigint[], queue text', 1,
 'TABLE(job_id bigint, after_id bigint, state text, result jsonb, last_error text)'),
('claimq.create_schedule(text,text,text,jsonb,text,integer,text,jsonb)',
 'schedule text, queue text, cron text, payload jsonb, time_zone text, priority integer, missed text, headers jsonb',
 5, 'void'),
('claimq.alter_schedule(text,text,text,jsonb,text,integer,text,boolean,jsonb)',
 'schedule text, queue text, cron text, payload jsonb, time_zone text, priority integer, missed text, enabled boolean, headers jsonb',
 8, 'void'),
('claimq.drop_schedule(text)', 'schedule text', 0, 'void'),
('claimq.fire_schedules(integer)', 'max_jobs integer', 1, 'bigint');

SELECT ok(to_regprocedure(sig) IS NOT NULL, sig || ' exists') FROM api;
SELECT is(pg_get_function_identity_arguments(to_regprocedure(sig)), args,
	sig || ': argument names and types')
  FROM api;
SELECT is(p.pronargdefaults::int, a.ndefaults, a.sig || ': ' || a.ndefaults || ' default(s)')
  FROM api a LEFT JOIN pg_proc p ON p.oid = to_regprocedure(a.sig);
SELECT is(pg_get_function_result(to_regprocedure(sig)), result, sig || ' returns ' || result)
  FROM api WHERE result IS NOT NULL;
SELECT ok(NOT p.proisstrict, a.sig || ' is not strict: NULL arguments get a clear error')
  FROM api a JOIN pg_proc p ON p.oid = to_regprocedure(a.sig);
SELECT ok(p.provolatile = 'v', a.sig || ' is volatile')
  FROM api a JOIN pg_proc p ON p.oid = to_regprocedure(a.sig);

-- The documented defaults that do not depend on how intervals are printed.
SELECT is(pg_get_expr(p.proargdefaults, 0), d, s || ' defaults')
  FROM (VALUES
	('claimq.drop_queue(text,boolean)', 'false'),
	('claimq.enqueue(text,jsonb,timestamptz,integer,text,integer,text,text,bigint[],text,jsonb)', 'NULL::timestamp with time zone, 0, NULL::text, NULL::integer, ''keep''::text, NULL::text, NULL::bigint[], ''cancel''::text, NULL::jsonb'),
	('claimq.enqueue_many(text,jsonb[],timestamptz,integer,text[],integer,text,text[],bigint[],text,jsonb[])', 'NULL::timestamp with time zone, 0, NULL::text[], NULL::integer, ''keep''::text, NULL::text[], NULL::bigint[], ''cancel''::text, NULL::jsonb[]'),
	('claimq.complete(bigint[],bigint[],jsonb[],text)', 'NULL::jsonb[], NULL::text'),
	('claimq.complete(bigint,bigint,jsonb,text)', 'NULL::jsonb, NULL::text'),
	('claimq.create_schedule(text,text,text,jsonb,text,integer,text,jsonb)', '''{}''::jsonb, ''UTC''::text, 0, ''once''::text, NULL::jsonb'),
	('claimq.alter_schedule(text,text,text,jsonb,text,integer,text,boolean,jsonb)', 'NULL::text, NULL::text, NULL::jsonb, NULL::text, NULL::integer, NULL::text, NULL::boolean, NULL::jsonb'),
	('claimq.fire_schedules(integer)', '1000'),
	('claimq.start(bigint[],bigint[],interval,text)', 'NULL::interval, NULL::text'),
	('claimq.extend(bigint[],bigint[],interval,text)', 'NULL::interval, NULL::text'),
	('claimq.fail(bigint[],bigint[],text,interval,boolean,text)', 'NULL::text, NULL::interval, false, NULL::text'),
	('claimq.start(bigint,bigint,interval,text)', 'NULL::interval, NULL::text'),
	('claimq.extend(bigint,bigint,interval,text)', 'NULL::interval, NULL::text'),
	('claimq.fail(bigint,bigint,text,interval,boolean,text)', 'NULL::text, NULL::interval, false, NULL::text'),
	('claimq.reclaim(text,integer)', 'NULL::text, 10000'),
	('claimq.retry_dead(text,bigint[])', 'NULL::bigint[]')) v(s, d)
  LEFT JOIN pg_proc p ON p.oid = to_regprocedure(v.s);
SELECT is(pg_get_expr(p.proargdefaults, 0) ~ 'NULL::interval, NULL::interval, NULL::integer, NULL::interval, NULL::interval, NULL::interval, NULL::interval, NULL::boolean, NULL::integer, NULL::boolean, NULL::integer, NULL::integer, NULL::interval',
	true, 'alter_queue: every option defaults to NULL')
  FROM pg_proc p WHERE p.oid = to_regprocedure('claimq.alter_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean)');
SELECT claimq.create_queue('api_defaults') IS NULL AS created \gset
SELECT is((SELECT ARRAY[group_limit::text, group_fifo::text, max_in_flight::text, rate_limit::text,
						(rate_period = '1 second')::text]
			  FROM claimq.queue WHERE name = 'api_defaults'),
	'{NULL,false,NULL,NULL,true}'::text[],
	'create_queue: no limits by default, a rate_period of one second');
SELECT is(pg_get_expr(p.proargdefaults, 0) ~ '^1, NULL::interval, NULL::text, false, ',
	true, 'claim: max_jobs 1, lease NULL, worker NULL, start false')
  FROM pg_proc p WHERE p.oid = to_regprocedure('claimq.claim(text,integer,interval,text,boolean,interval)');

SELECT * FROM finish();
ROLLBACK;
