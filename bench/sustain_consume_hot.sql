-- sustained run, consumers of the write-less layout: hot_lease.sql's claim
-- (a heap-only update, and one lease row per call), then delete the jobs
-- in a second transaction; with none ready, pause 10 ms.
WITH c AS (
	UPDATE bench.hjob j
	   SET state = 'claimed', token = (SELECT nextval('bench.token_seq')),
		   worker = NULL, claimed_at = now(), expires_at = now() + interval '30 seconds'
	 WHERE j.ctid = ANY (ARRAY(
			SELECT k.ctid FROM bench.hjob k
			 WHERE k.queue_id = 1 AND k.finished_at IS NULL AND k.state = 'pending'
			   AND k.run_at <= now()
			 ORDER BY k.priority DESC, k.run_at, k.job_id
			 LIMIT :batch
			 FOR UPDATE SKIP LOCKED))
	RETURNING j.job_id
), l AS (
	INSERT INTO bench.hlease (expires_at, job_ids)
	SELECT now() + interval '30 seconds', array_agg(c.job_id) FROM c HAVING count(*) > 0
)
SELECT count(*) AS n, coalesce(array_agg(job_id)::text, '{}') AS ids FROM c \gset
\if :n = 0
\sleep 10 ms
\else
DELETE FROM bench.hjob WHERE job_id = ANY (:ids::bigint[]);
\endif
