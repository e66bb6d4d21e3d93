/*
 * sql/queue-stats.sql: the queue_stats view, included by sql/claimq.sql
 * and by the update to 0.8 (which makes it again once state is of its
 * domain).
 */
CREATE VIEW claimq.queue_stats AS
SELECT q.name AS queue,
	   q.paused,
	   COALESCE(s.ready, 0) AS ready,
	   COALESCE(s.scheduled, 0) AS scheduled,
	   COALESCE(s.claimed, 0) AS claimed,
	   COALESCE(s.running, 0) AS running,
	   COALESCE(s.expired, 0) AS expired,
	   COALESCE(s.dead, 0) AS dead,
	   COALESCE(s.done, 0) AS done,
	   s.oldest_ready_age,
	   s.oldest_claim_age,
	   COALESCE(s.cancelled, 0) AS cancelled,
	   COALESCE(s.waiting, 0) AS waiting
  FROM claimq.queue q
  LEFT JOIN (
	SELECT j.queue_id,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'pending'
										 AND j.run_at OPERATOR(pg_catalog.<=) c.now) AS ready,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'pending'
										 AND j.run_at OPERATOR(pg_catalog.>) c.now) AS scheduled,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'claimed') AS claimed,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'running') AS running,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
										 AND j.expires_at OPERATOR(pg_catalog.<) c.now) AS expired,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'dead') AS dead,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'done') AS done,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'cancelled') AS cancelled,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'waiting') AS waiting,
		   c.now OPERATOR(pg_catalog.-) pg_catalog.min(j.run_at)
			 FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'pending'
					   AND j.run_at OPERATOR(pg_catalog.<=) c.now) AS oldest_ready_age,
		   c.now OPERATOR(pg_catalog.-) pg_catalog.min(j.claimed_at)
			 FILTER (WHERE j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])) AS oldest_claim_age
	  FROM claimq.job j
	 CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) c
	 GROUP BY j.queue_id, c.now
  ) s ON s.queue_id OPERATOR(pg_catalog.=) q.queue_id;

COMMENT ON VIEW claimq.queue_stats IS
'per queue: jobs by state (waiting: until the jobs they run after finish), expired claims, and the age of the oldest ready job and of the oldest claim';
