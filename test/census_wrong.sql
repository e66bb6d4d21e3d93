-- The census against the job table, for every suite that compares them
-- (pg_regress includes it with \i, the TAP tests read it): census_wrong has
-- a row for each queue and state whose count in claimq.census() differs
-- from claimq.job's (no row: they agree), over every state that either
-- has, so that a state added to one and not the other shows; census_valid
-- says whether the census is valid for the caller.
CREATE VIEW census_wrong AS
WITH c AS (SELECT c.queue_id, s.state, s.n::bigint AS n
			 FROM claimq.census() c,
				  LATERAL jsonb_each_text(to_jsonb(c) - 'queue_id') s(state, n)
			WHERE c.queue_id <> 0),
	 a AS (SELECT j.queue_id, j.state, count(*) AS n
			 FROM claimq.job j GROUP BY j.queue_id, j.state)
SELECT queue_id, state, c.n AS census, a.n AS counted
  FROM c FULL JOIN a USING (queue_id, state)
 WHERE COALESCE(c.n, 0) <> COALESCE(a.n, 0);
CREATE VIEW census_valid AS
SELECT EXISTS (SELECT 1 FROM claimq.census() WHERE queue_id = 0) AS valid;
