-- sustained run, the write-less layout's reclaimer (once a second): every
-- lease row that has run out goes, and those of its jobs still claimed
-- under it go back to pending (a heap-only update too).  This is the
-- layout's cost that hot_lease.sql leaves out of the matrix.
WITH d AS (
	DELETE FROM bench.hlease WHERE expires_at < now() RETURNING job_ids
)
UPDATE bench.hjob
   SET state = 'pending', token = NULL, worker = NULL, claimed_at = NULL, expires_at = NULL
 WHERE job_id IN (SELECT unnest(d.job_ids) FROM d)
   AND expires_at < now() AND state = ANY ('{claimed,running}'::text[]);
