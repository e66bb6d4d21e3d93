-- The group_stats view, written once for the install script and the
-- update that changes it (and makes it again once state is of its
-- domain).

CREATE VIEW claimq.group_stats AS
SELECT q.name AS queue,
	   j.group_key,
	   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'pending'
									 AND j.run_at OPERATOR(pg_catalog.<=) c.now) AS ready,
	   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])) AS in_flight,
	   COALESCE(pg_catalog.bool_or(j.state OPERATOR(pg_catalog.=) 'pending'
								   AND j.run_at OPERATOR(pg_catalog.<=) c.now), false)
	   AND NOT COALESCE(pg_catalog.bool_or(j.state OPERATOR(pg_catalog.=) 'pending'
										   AND j.run_at OPERATOR(pg_catalog.<=) c.now
										   AND NOT j.held), false) AS blocked,
	   COALESCE((SELECT w.weight FROM claimq.group_weight w
				  WHERE w.queue_id OPERATOR(pg_catalog.=) q.queue_id
					AND w.group_key OPERATOR(pg_catalog.=) j.group_key),
				1::real) AS weight
  FROM claimq.job j
  JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id
 CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) c
 WHERE j.group_key IS NOT NULL
   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[])
 GROUP BY q.queue_id, q.name, j.group_key;

COMMENT ON VIEW claimq.group_stats IS
'per group with live jobs: ready jobs, jobs claimed or running, whether the queue''s limits hold all its ready jobs back, and its weight in a fair queue';
