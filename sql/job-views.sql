/*
 * sql/job-views.sql: the views of jobs and schedules, included by
 * sql/claimq.sql and by the update to 0.8 (which adds their headers, and
 * makes them again once state and max_attempts are of their domains).
 * The jobs view shows the columns of claimq's domains as their base
 * types, after_failed too, so that a reader who makes a table of its rows
 * needs no use of the domains, which PUBLIC is not granted.
 */
CREATE VIEW claimq.jobs AS
SELECT j.job_id, q.name AS queue, j.state::text AS state, j.payload,
	   j.priority, j.run_at, j.attempts, j.worker, j.expires_at,
	   j.enqueued_at, j.dedup_key, j.last_error, j.group_key,
	   j.max_attempts::integer AS max_attempts, j.finished_at, j.result,
	   j.after_count, j.after_failed::text AS after_failed, j.headers
  FROM claimq.job j
  JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id;

COMMENT ON VIEW claimq.jobs IS
'every job of every queue, for inspection';

CREATE VIEW claimq.schedules AS
SELECT s.name AS schedule, q.name AS queue, s.cron, s.time_zone, s.payload,
	   s.priority, s.missed, s.enabled, s.next_run_at, s.last_run_at,
	   s.last_job_id, s.headers
  FROM claimq.schedule s
  JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) s.queue_id;

COMMENT ON VIEW claimq.schedules IS
'every schedule, with its next occurrence and the last job it enqueued';
