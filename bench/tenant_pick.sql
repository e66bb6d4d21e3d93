-- The ceiling of a fair claim, by tenant: as tenant_range.sql, but each
-- job the first of its own tenant (a probe of the tenants' index per job),
-- :batch consecutive tenants of :tenants from a random one: the choice of
-- tenants costs nothing here, as if their times were in shared memory.
\set r random(0, :tenants - 1)
WITH c AS (
	UPDATE bench.tjob j
	   SET state = 'claimed', token = (SELECT nextval('bench.token_seq')),
		   claimed_at = now(), expires_at = now() + interval '30 seconds'
	 WHERE j.job_id = ANY (ARRAY(
			SELECT s.job_id FROM generate_series(0, :batch - 1) i CROSS JOIN LATERAL (
				SELECT k.job_id FROM bench.tjob k
				 WHERE k.queue_id = 1 AND k.group_key = 't' || ((:r + i) % :tenants)
				   AND k.state = 'pending' AND k.run_at <= now()
				 ORDER BY k.run_at, k.job_id
				 LIMIT 1
				 FOR UPDATE SKIP LOCKED) s))
	RETURNING j.job_id
)
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids FROM c \gset
DELETE FROM bench.tjob WHERE job_id = ANY (:ids::bigint[]);
