-- The ceiling of a fair claim, by range: the baseline's lease flow on
-- bench.tjob (jobs of many tenants), the queue's oldest jobs by one range
-- of its index; the DELETE is a second transaction.
WITH c AS (
	UPDATE bench.tjob j
	   SET state = 'claimed', token = (SELECT nextval('bench.token_seq')),
		   claimed_at = now(), expires_at = now() + interval '30 seconds'
	 WHERE j.job_id = ANY (ARRAY(
			SELECT k.job_id FROM bench.tjob k
			 WHERE k.queue_id = 1 AND k.state = 'pending' AND k.run_at <= now()
			 ORDER BY k.priority DESC, k.run_at, k.job_id
			 LIMIT :batch
			 FOR UPDATE SKIP LOCKED))
	RETURNING j.job_id
)
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids FROM c \gset
DELETE FROM bench.tjob WHERE job_id = ANY (:ids::bigint[]);
