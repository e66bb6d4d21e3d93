-- HOT-claim layout prototype, lease flow: a job table layout in which
-- claims write no index entry, in plain SQL (claimq ported it into its C
-- edition, measured it under sustained load and did not keep it: see
-- docs/performance.md, "The layout decided (0.8)").  No index
-- of bench.hjob names a column a claim changes (state, token, worker,
-- claimed_at, expires_at), and the table keeps room on each page
-- (fillfactor 50), so the claiming UPDATE is a
-- heap-only update: no new index entry, and only the changed bytes go to
-- WAL.  Expired claims are found through one row per claim call in
-- bench.hlease, indexed by expiry.  Not counted here: deleting that lease
-- row once it expires (one per call, in the background).
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
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids FROM c \gset
DELETE FROM bench.hjob WHERE job_id = ANY (:ids::bigint[]);
