-- sustained run, consumers of the hand-written queue: claim up to :batch
-- jobs (baseline_lease.sql's statement), then delete them in a second
-- transaction; with none ready, pause 10 ms instead of waiting for a
-- notification as claimq's claim does.
WITH c AS (
	UPDATE bench.job j
	   SET state = 'claimed', token = (SELECT nextval('bench.token_seq')),
		   worker = NULL, claimed_at = now(), expires_at = now() + interval '30 seconds'
	 WHERE j.job_id = ANY (ARRAY(
			SELECT k.job_id FROM bench.job k
			 WHERE k.queue_id = 1 AND k.state = 'pending' AND k.run_at <= now()
			 ORDER BY k.priority DESC, k.run_at, k.job_id
			 LIMIT :batch
			 FOR UPDATE SKIP LOCKED))
	RETURNING j.job_id, j.token, j.payload
)
SELECT count(*) AS n, coalesce(array_agg(job_id)::text, '{}') AS ids FROM c \gset
\if :n = 0
\sleep 10 ms
\else
DELETE FROM bench.job WHERE job_id = ANY (:ids::bigint[]);
\endif
