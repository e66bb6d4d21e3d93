-- oracle, lease flow: the baseline's very UPDATE and DELETE, on the same
-- table, but a sequence hands each transaction its own range of ids, so it
-- never searches, never skips another client's locked rows and never steps
-- over dead index entries.  What the baseline's writes cost without its
-- search: a ceiling for any design that keeps the baseline's row layout.
SELECT nextval('bench.oracle_seq') AS k \gset
\set lo :k * :batch
\set hi (:k + 1) * :batch
WITH c AS (
	UPDATE bench.job j
	   SET state = 'claimed', token = (SELECT nextval('bench.token_seq')),
		   worker = NULL, claimed_at = now(), expires_at = now() + interval '30 seconds'
	 WHERE j.job_id >= :lo::bigint AND j.job_id < :hi::bigint
	   AND j.state = 'pending'
	RETURNING j.job_id, j.token, j.payload
)
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids FROM c \gset
DELETE FROM bench.job WHERE job_id = ANY (:ids::bigint[]);
