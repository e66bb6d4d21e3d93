-- Schedules: the cron parser and the next occurrence (leap days, short
-- months, day names, the day-of-month / day-of-week rule, both daylight
-- saving changes in America/New_York and Europe/Berlin, @every across a
-- change), and create, alter, drop and fire with every missed policy.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(114);

--
-- The next occurrence: expression, zone, instant, expected
--
SELECT is(claimq.cron_next(c, z, a::timestamptz, NULLIF(an, '')::timestamptz), e::timestamptz,
		  format('%s in %s after %s', c, z, a))
  FROM (VALUES
	('*/15 * * * *', 'UTC', '2026-01-01 00:07:00+00', '', '2026-01-01 00:15:00+00'),
	('*/15 * * * *', 'UTC', '2026-01-01 00:15:00+00', '', '2026-01-01 00:30:00+00'),
	('0 9 * * mon-fri', 'UTC', '2026-01-02 09:00:00+00', '', '2026-01-05 09:00:00+00'),
	('0 9 * * MON-Fri', 'UTC', '2026-01-02 08:59:59+00', '', '2026-01-02 09:00:00+00'),
	('0 0 29 2 *', 'UTC', '2026-01-01 00:00:00+00', '', '2028-02-29 00:00:00+00'),
	('0 12 31 * *', 'UTC', '2026-04-01 00:00:00+00', '', '2026-05-31 12:00:00+00'),
	('0 0 1 jan,jul *', 'UTC', '2026-01-01 00:00:00+00', '', '2026-07-01 00:00:00+00'),
	('5 4 * * sat-sun', 'UTC', '2026-01-05 00:00:00+00', '', '2026-01-10 04:05:00+00'),
	('5 4 * * 7', 'UTC', '2026-01-05 00:00:00+00', '', '2026-01-11 04:05:00+00'),
	('1-10/3,40 * * * *', 'UTC', '2026-01-01 00:07:00+00', '', '2026-01-01 00:10:00+00'),
	('1-10/3,40 * * * *', 'UTC', '2026-01-01 00:10:00+00', '', '2026-01-01 00:40:00+00'),
	('50/5 * * * *', 'UTC', '2026-01-01 00:56:00+00', '', '2026-01-01 01:50:00+00'),
	-- Both day fields restricted: either matches (Friday 2 January comes
	-- before the 13th); a "*"-led one keeps the other's rule.
	('0 0 13 * fri', 'UTC', '2026-01-01 00:00:00+00', '', '2026-01-02 00:00:00+00'),
	('0 0 13 * *', 'UTC', '2026-01-01 00:00:00+00', '', '2026-01-13 00:00:00+00'),
	('0 0 * * fri', 'UTC', '2026-01-03 00:00:00+00', '', '2026-01-09 00:00:00+00'),
	('0 0 */2 * mon', 'UTC', '2026-01-01 00:00:00+00', '', '2026-01-05 00:00:00+00'),
	-- "*,5" starts with "*": the day of week alone decides (Monday the 5th).
	('0 0 *,5 * mon', 'UTC', '2026-01-01 00:00:00+00', '', '2026-01-05 00:00:00+00'),
	('@yearly', 'UTC', '2026-06-01 00:00:00+00', '', '2027-01-01 00:00:00+00'),
	('@monthly', 'UTC', '2026-01-31 00:00:00+00', '', '2026-02-01 00:00:00+00'),
	('@weekly', 'UTC', '2026-01-01 00:00:00+00', '', '2026-01-04 00:00:00+00'),
	('@daily', 'UTC', '2026-01-01 00:00:00+00', '', '2026-01-02 00:00:00+00'),
	('@hourly', 'UTC', '2026-01-01 00:00:00+00', '', '2026-01-01 01:00:00+00'),
	-- New York springs forward on 8 March 2026 at 02:00 EST (07:00 UTC):
	-- 02:30 does not exist and fires at 03:00 EDT, the end of the gap.
	('30 2 * * *', 'America/New_York', '2026-03-08 05:00:00+00', '', '2026-03-08 07:00:00+00'),
	('30 2 * * *', 'America/New_York', '2026-03-08 07:00:00+00', '', '2026-03-09 06:30:00+00'),
	('0 3 * * *', 'America/New_York', '2026-03-08 05:00:00+00', '', '2026-03-08 07:00:00+00'),
	-- ... and falls back on 1 November at 02:00 EDT (06:00 UTC): 01:30
	-- fires once, at its first instance, unless the hour field is "*".
	('30 1 * * *', 'America/New_York', '2026-11-01 04:00:00+00', '', '2026-11-01 05:30:00+00'),
	('30 1 * * *', 'America/New_York', '2026-11-01 05:30:00+00', '', '2026-11-02 06:30:00+00'),
	('30 * * * *', 'America/New_York', '2026-11-01 05:30:00+00', '', '2026-11-01 06:30:00+00'),
	('@hourly', 'America/New_York', '2026-11-01 05:00:00+00', '', '2026-11-01 06:00:00+00'),
	('@hourly', 'America/New_York', '2026-11-01 06:00:00+00', '', '2026-11-01 07:00:00+00'),
	-- Berlin springs forward on 29 March 2026 at 02:00 CET (01:00 UTC):
	-- 02:00, 02:20 and 02:40 merge into one occurrence at 03:00 CEST.
	('*/20 2 * * *', 'Europe/Berlin', '2026-03-29 00:30:00+00', '', '2026-03-29 01:00:00+00'),
	('*/20 2 * * *', 'Europe/Berlin', '2026-03-29 01:00:00+00', '', '2026-03-30 00:00:00+00'),
	-- ... and falls back on 25 October at 03:00 CEST (01:00 UTC).
	('0 2 * * *', 'Europe/Berlin', '2026-10-24 23:00:00+00', '', '2026-10-25 00:00:00+00'),
	('0 2 * * *', 'Europe/Berlin', '2026-10-25 00:00:00+00', '', '2026-10-26 01:00:00+00'),
	('0 * * * *', 'Europe/Berlin', '2026-10-25 00:00:00+00', '', '2026-10-25 01:00:00+00'),
	-- @every counts from its anchor, in the zone: a day is a calendar day.
	('@every 90 minutes', 'UTC', '2026-01-01 02:00:00+00', '2026-01-01 00:00:00+00', '2026-01-01 03:00:00+00'),
	('@every 1 day', 'America/New_York', '2026-03-07 17:00:00+00', '2026-03-07 17:00:00+00', '2026-03-08 16:00:00+00'),
	('@every 1 month', 'UTC', '2026-02-01 00:00:00+00', '2026-01-31 10:00:00+00', '2026-02-28 10:00:00+00'),
	('@every 1 month', 'UTC', '2026-02-28 10:00:00+00', '2026-01-31 10:00:00+00', '2026-03-31 10:00:00+00')
  ) AS t(c, z, a, an, e);
SELECT is(claimq.cron_next('0 0 31 2 *', 'UTC', '2026-01-01'), NULL,
	'an expression that never matches has no next occurrence');

-- Errors name the field.
SELECT throws_ok(format('SELECT claimq.cron_next(%L, ''UTC'', now())', c), '22023',
		  format('invalid cron expression "%s": bad %s field', c, f), format('%s: bad %s', c, f))
  FROM (VALUES ('61 * * * *', 'minute'), ('* 24 * * *', 'hour'), ('* * 0 * *', 'day of month'),
			   ('* * * 13 *', 'month'), ('* * * * 8', 'day of week'), ('* * * *', 'day of week'),
			   ('x * * * *', 'minute'), ('5-1 * * * *', 'minute'), ('*/0 * * * *', 'minute'),
			   ('* * * foo *', 'month'), ('@every 0.5 seconds', '@every'),
			   ('@every soon', '@every'), ('@fortnightly', 'macro')) AS t(c, f);
SELECT throws_ok($$SELECT claimq.cron_next('* * * * *', 'Mars/Olympus', now())$$, '22023',
	'time zone "Mars/Olympus" not recognized', 'an unknown time zone: 22023');

--
-- create, alter, drop
--
SELECT claimq.create_queue('sq');

-- An expression that never fires is refused when set: with the day of
-- week "*", some listed month must have a listed day (February has 29);
-- with both day fields restricted, cron's "either" rule always matches.
SELECT throws_ok(format('SELECT claimq.create_schedule(''never'', ''sq'', %L)', c), '22023',
		  format('cron expression "%s" never matches', c), format('create_schedule refuses %s', c))
  FROM (VALUES ('0 0 31 2 *'), ('0 0 30 2 *'), ('0 0 31 4,6,9,11 *'),
			   ('0 0 30-31 feb *'), ('0 0 31 2-4/2 */2')) AS t(c);
SELECT lives_ok($$SELECT claimq.create_schedule('leap', 'sq', '0 0 29 2 *')$$,
	'29 February exists: accepted');
SELECT lives_ok($$SELECT claimq.create_schedule('either', 'sq', '0 0 31 2 1')$$,
	'31 February or a Monday in February: accepted');
SELECT throws_ok($$SELECT claimq.alter_schedule('leap', cron => '0 0 31 4,6,9,11 *')$$, '22023',
	'cron expression "0 0 31 4,6,9,11 *" never matches', 'alter_schedule refuses it too');
SELECT is((SELECT cron FROM claimq.schedule WHERE name = 'leap'), '0 0 29 2 *',
	'and changes nothing');

-- @every with parts of mixed signs is refused: such a step is not the
-- same, or not forward, at every point of the calendar.
SELECT throws_ok(format('SELECT claimq.create_schedule(''mixed'', ''sq'', %L)', c), '22023',
		  format('invalid cron expression "%s": bad @every field', c), format('create_schedule refuses %s', c))
  FROM (VALUES ('@every 1 mon -29 days'), ('@every 1 day -23 hours -59 minutes'),
			   ('@every -1 day 25 hours'), ('@every 1 mon -1 second')) AS t(c);
SELECT throws_ok($$SELECT claimq.alter_schedule('leap', cron => '@every 1 mon -29 days')$$, '22023',
	'invalid cron expression "@every 1 mon -29 days": bad @every field', 'alter_schedule refuses it too');
SELECT lives_ok($$SELECT claimq.alter_schedule('either', cron => '@every 1 mon 2 days 3 hours')$$,
	'@every with parts of one sign: accepted');
SELECT is((SELECT count(*) FROM claimq.schedule WHERE name IN ('never', 'mixed')), 0::bigint,
	'no refused call created a schedule');
SELECT claimq.drop_schedule('leap');
SELECT claimq.drop_schedule('either');
SELECT lives_ok($$SELECT claimq.create_schedule('every5', 'sq', '*/5 * * * *',
												payload => '{"report": "x"}', priority => 3)$$,
	'create a schedule');
SELECT results_eq($$SELECT schedule, queue, cron, time_zone, payload, priority, missed, enabled,
						   next_run_at > now() AND next_run_at <= clock_timestamp() + interval '5 minutes'
						   AND extract(epoch FROM next_run_at)::bigint % 300 = 0,
						   last_run_at, last_job_id
					  FROM claimq.schedules$$,
	$$VALUES ('every5'::text, 'sq'::text, '*/5 * * * *'::text, 'UTC'::text, '{"report": "x"}'::jsonb,
			  3, 'once'::text, true, true, NULL::timestamptz, NULL::bigint)$$,
	'the schedules view shows it, due at the next five-minute mark');
SELECT throws_ok($$SELECT claimq.create_schedule('every5', 'sq', '@daily')$$, '42710',
	'schedule "every5" already exists', 'the same name again: 42710');
SELECT throws_ok($$SELECT claimq.create_schedule('s2', 'nosuch', '@daily')$$, '42704', NULL,
	'an unknown queue: 42704');
SELECT throws_ok($$SELECT claimq.create_schedule('bad name', 'sq', '@daily')$$, '22023', NULL,
	'a bad schedule name: 22023');
SELECT throws_ok($$SELECT claimq.create_schedule('s2', 'sq', '@daily', missed => 'some')$$, '22023',
	'missed must be "skip", "once" or "all"', 'an unknown missed policy: 22023');
SELECT throws_ok($$SELECT claimq.create_schedule('s2', 'sq', '61 * * * *')$$, '22023', NULL,
	'a bad expression: 22023');
SELECT throws_ok($$SELECT claimq.create_schedule('s2', 'sq', NULL)$$, '22004', NULL,
	'a NULL expression: 22004');
SELECT is((SELECT count(*) FROM claimq.schedules), 1::bigint, 'no bad call made a schedule');

SELECT lives_ok($$SELECT claimq.alter_schedule('every5', cron => '0 * * * *', time_zone => 'Europe/Berlin')$$,
	'alter its expression and zone');
SELECT ok((SELECT next_run_at > now() AND next_run_at <= clock_timestamp() + interval '1 hour'
				 AND extract(minute FROM next_run_at) = 0 AND extract(second FROM next_run_at) = 0
			 FROM claimq.schedules WHERE schedule = 'every5'),
	'next_run_at is recomputed from the moment of the call: the next full hour');
SELECT throws_ok($$SELECT claimq.alter_schedule('nosuch', enabled => false)$$, '42704', NULL,
	'alter an unknown schedule: 42704');

-- drop_queue: held jobs first (55006), then schedules (2BP01); force
-- drops the schedules too.
SELECT throws_ok($$SELECT claimq.drop_queue('sq')$$, '2BP01',
	'cannot drop queue "sq" while schedules feed it', 'drop_queue refuses while a schedule feeds the queue');
SELECT claimq.enqueue('sq', '{}') > 0;
SELECT count(*) FROM claimq.claim('sq');
SELECT throws_ok($$SELECT claimq.drop_queue('sq')$$, '55006', NULL,
	'claimed jobs take precedence: 55006');
SELECT lives_ok($$SELECT claimq.drop_queue('sq', force => true)$$, 'force drops it');
SELECT is((SELECT count(*) FROM claimq.schedule), 0::bigint, 'and its schedules with it');

--
-- fire_schedules
--
SELECT claimq.create_queue('fq');
SELECT claimq.create_schedule('one', 'fq', '@every 10 minutes', payload => '{"k": 1}', priority => 2);
-- Set it 125 minutes ago: occurrences 1 to 12 are due, the 13th is 5
-- minutes ahead.
UPDATE claimq.schedule SET anchor = clock_timestamp() - interval '125 minutes' WHERE name = 'one'
RETURNING anchor AS a \gset
CREATE TEMP TABLE marks AS
SELECT :'a'::timestamptz + k * interval '10 minutes' AS m FROM generate_series(1, 12) k;
-- One occurrence due: it fires, however late.
UPDATE claimq.schedule SET next_run_at = (SELECT max(m) FROM marks) WHERE name = 'one'
RETURNING next_run_at AS due \gset
SELECT is(claimq.fire_schedules(), 1::bigint, 'one due occurrence: one job');
SELECT results_eq($$SELECT payload, priority, run_at, state FROM claimq.jobs WHERE queue = 'fq'$$,
	format($$VALUES ('{"k": 1}'::jsonb, 2, %L::timestamptz, 'pending'::text)$$, :'due'),
	'the job has the payload and priority, and run_at at the occurrence');
SELECT results_eq($$SELECT last_run_at, last_job_id = (SELECT max(job_id) FROM claimq.job),
						   next_run_at$$ || ' FROM claimq.schedules WHERE schedule = ''one''',
	format($$VALUES (%L::timestamptz, true, %L::timestamptz + interval '10 minutes')$$, :'due', :'due'),
	'the schedule moves on: last_run_at, last_job_id, and next_run_at to the next occurrence');
SELECT is(claimq.fire_schedules(), 0::bigint, 'nothing more is due');

-- Twelve occurrences due: the missed policies.
SELECT claimq.purge_queue('fq');
UPDATE claimq.schedule SET missed = 'skip', next_run_at = (SELECT min(m) FROM marks) WHERE name = 'one';
SELECT is(claimq.fire_schedules(), 0::bigint, 'skip: none of the missed occurrences is enqueued');
SELECT ok((SELECT next_run_at > clock_timestamp() FROM claimq.schedules WHERE schedule = 'one'),
	'and next_run_at moves past now');
UPDATE claimq.schedule SET missed = 'once', next_run_at = (SELECT min(m) FROM marks) WHERE name = 'one';
SELECT is(claimq.fire_schedules(), 1::bigint, 'once: one job');
SELECT is((SELECT run_at FROM claimq.jobs WHERE queue = 'fq'), (SELECT max(m) FROM marks),
	'for the latest occurrence');
SELECT claimq.purge_queue('fq');
UPDATE claimq.schedule SET missed = 'all', next_run_at = (SELECT min(m) FROM marks) WHERE name = 'one';
SELECT is(claimq.fire_schedules(max_jobs => 5), 5::bigint, 'all, at most 5 per call: 5 jobs');
SELECT ok((SELECT catch_up_to IS NOT NULL FROM claimq.schedule WHERE name = 'one'),
	'the schedule remembers where the policy reached');
SELECT is(claimq.fire_schedules(max_jobs => 5), 5::bigint, 'the next call: 5 more');
SELECT is(claimq.fire_schedules(max_jobs => 5), 2::bigint, 'and the last 2');
SELECT is(ARRAY(SELECT run_at FROM claimq.jobs WHERE queue = 'fq' ORDER BY job_id),
	ARRAY(SELECT m FROM marks ORDER BY m),
	'all: one job per missed occurrence, none twice, oldest first');
SELECT ok((SELECT catch_up_to IS NULL AND next_run_at > clock_timestamp()
			 FROM claimq.schedule WHERE name = 'one'),
	'then the schedule is caught up');

-- Disabled schedules do not fire; enabling applies the policy to what
-- came due meanwhile.
SELECT claimq.purge_queue('fq');
SELECT claimq.alter_schedule('one', enabled => false, missed => 'once');
UPDATE claimq.schedule SET next_run_at = (SELECT min(m) FROM marks) WHERE name = 'one';
SELECT is(claimq.fire_schedules(), 0::bigint, 'a disabled schedule does not fire');
SELECT claimq.alter_schedule('one', enabled => true);
SELECT is(claimq.fire_schedules(), 1::bigint, 'enabled again, once: one job for what came due');
SELECT throws_ok('SELECT claimq.fire_schedules(0)', '22023', NULL, 'max_jobs 0: 22023');
SELECT throws_ok('SELECT claimq.fire_schedules(10001)', '22023', NULL, 'max_jobs 10001: 22023');

SELECT lives_ok($$SELECT claimq.drop_schedule('one')$$, 'drop the schedule');
SELECT throws_ok($$SELECT claimq.drop_schedule('one')$$, '42704', 'schedule "one" does not exist',
	'drop it again: 42704');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'fq'), 1::bigint,
	'the jobs it enqueued stay');

-- A stored @every whose calendar interval no longer moves forward (valid
-- when it was set) stops only itself: the other schedules fire.
SELECT claimq.create_schedule('other', 'fq', '@every 1 hour');
UPDATE claimq.schedule SET next_run_at = clock_timestamp() - interval '1 minute',
						   anchor = clock_timestamp() - interval '61 minutes'
 WHERE name = 'other';
INSERT INTO claimq.schedule (name, queue_id, cron, time_zone, payload, priority, missed,
							 anchor, next_run_at)
SELECT 'stuck', queue_id, '@every 1 month -31 days', 'UTC', '{}', 0, 'once',
	   '2026-12-01 00:00+00', clock_timestamp() - interval '1 minute'
  FROM claimq.queue WHERE name = 'fq';
SELECT is(claimq.fire_schedules(), 2::bigint,
	'a stored @every that does not move forward fires what is due and stops only itself');
SELECT results_eq($$SELECT name, next_run_at IS NULL FROM claimq.schedule
					 WHERE name IN ('other', 'stuck') ORDER BY name$$,
	$$VALUES ('other'::text, false), ('stuck', true)$$,
	'the other schedule moves on; the stuck one has no next occurrence');

-- A month of minutes missed, once: one job, for the latest minute.
SELECT claimq.create_schedule('minutely', 'fq', '* * * * *', missed => 'once');
UPDATE claimq.schedule SET next_run_at = date_trunc('minute', clock_timestamp()) - interval '30 days'
 WHERE name = 'minutely';
SELECT is(claimq.fire_schedules(), 1::bigint, 'once, a month of minutes missed: one job');
SELECT ok((SELECT run_at > clock_timestamp() - interval '2 minutes' AND run_at <= clock_timestamp()
				  AND extract(second FROM run_at) = 0
			 FROM claimq.jobs WHERE job_id = (SELECT last_job_id FROM claimq.schedules
											   WHERE schedule = 'minutely')),
	'for the latest minute');
SELECT ok((SELECT next_run_at > clock_timestamp() AND next_run_at <= clock_timestamp() + interval '1 minute'
			 FROM claimq.schedules WHERE schedule = 'minutely'),
	'and the schedule moves on to the next minute');

-- Three days of minutes missed, all: the latest 1,000 only, oldest first.
SELECT claimq.purge_queue('fq');
SELECT claimq.alter_schedule('minutely', missed => 'all');
UPDATE claimq.schedule SET next_run_at = date_trunc('minute', clock_timestamp()) - interval '3 days'
 WHERE name = 'minutely';
SELECT is(claimq.fire_schedules(max_jobs => 10000), 1000::bigint,
	'all, 4,320 minutes missed: 1,000 jobs');
SELECT results_eq($$SELECT count(DISTINCT run_at), max(run_at) - min(run_at),
						   max(run_at) > clock_timestamp() - interval '2 minutes',
						   array_agg(run_at ORDER BY job_id) = array_agg(run_at ORDER BY run_at)
					  FROM claimq.jobs WHERE queue = 'fq'$$,
	$$VALUES (1000::bigint, interval '999 minutes', true, true)$$,
	'the latest 1,000 minutes, each once, oldest first');

SELECT * FROM finish();
ROLLBACK;
