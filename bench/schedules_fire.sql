-- One call of fire_schedules for bench/schedules.sql, with its schedules
-- due since :due before this minute (NULL: none due), rolled back.
BEGIN;
UPDATE claimq.schedule
   SET next_run_at = COALESCE(date_trunc('minute', now()) - :due::interval,
							  now() + interval '1 year')
 WHERE name LIKE 'schedules\_bench\_%';
\timing on
SELECT claimq.fire_schedules(10000);
\timing off
ROLLBACK;
