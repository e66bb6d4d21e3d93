-- Schedules' cost, in either edition (docs/performance.md, "Schedules in
-- PL/pgSQL"): claimq.cron_next over 10,000 cases (20 expressions, 5 time
-- zones, 100 instants 52 hours apart), then fire_schedules over 100
-- schedules (minutely, missed => 'all') with 10 occurrences due each
-- (1,000 jobs), with 1 each (100 jobs, a normal pass) and with none; each
-- three times, in transactions that roll back.  Run it with psql in a
-- database with claimq and no queue named schedules_bench, where no
-- reclaimer fires schedules:
--
--   psql -X -f bench/schedules.sql
--
-- It prints each call's time (\timing); the figures are the minimum and
-- mean of three runs.
\set QUIET on
\pset footer off
CREATE TEMP TABLE cron_cases AS
SELECT e.cron, z.zone,
	   timestamptz '2026-01-01 00:00 UTC' + i * interval '52 hours 17 minutes 13 seconds' AS after
  FROM unnest(ARRAY['* * * * *', '*/5 * * * *', '0 * * * *', '30 2 * * *', '0 0 1 * *',
					'15 9 * * mon-fri', '0 12 1,15 * *', '0 0 29 2 *', '*/10 8-18 * * 1-5',
					'0 3 * jan,jul sun', '@hourly', '@daily', '@weekly', '@monthly', '@yearly',
					'@every 90 seconds', '@every 1 day', '0 0 13 * fri', '5,35 */2 * * *',
					'0 0 * * 0']) AS e(cron),
	   unnest(ARRAY['UTC', 'Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe',
					'Asia/Kolkata']) AS z(zone),
	   generate_series(1, 100) AS i;
SELECT claimq.create_queue('schedules_bench');
SELECT count(claimq.create_schedule('schedules_bench_' || i, 'schedules_bench',
									'* * * * *', '{}', 'Europe/Berlin', 0, 'all'))
  FROM generate_series(1, 100) AS i;
\timing on
\echo cron_next, 10,000 cases
SELECT count(claimq.cron_next(c.cron, c.zone, c.after, timestamptz '2025-12-31 23:59:59 UTC')) FROM cron_cases c;
SELECT count(claimq.cron_next(c.cron, c.zone, c.after, timestamptz '2025-12-31 23:59:59 UTC')) FROM cron_cases c;
SELECT count(claimq.cron_next(c.cron, c.zone, c.after, timestamptz '2025-12-31 23:59:59 UTC')) FROM cron_cases c;
\timing off
\echo fire_schedules, 1,000 jobs
\set due '''9 minutes'''
\ir schedules_fire.sql
\ir schedules_fire.sql
\ir schedules_fire.sql
\echo fire_schedules, 100 jobs
\set due '''0 minutes'''
\ir schedules_fire.sql
\ir schedules_fire.sql
\ir schedules_fire.sql
\echo fire_schedules, none due
\set due NULL
\ir schedules_fire.sql
\ir schedules_fire.sql
\ir schedules_fire.sql
SELECT claimq.drop_queue('schedules_bench', force => true);
