-- write-only floor: one batched INSERT of n small rows, then a DELETE of
-- exactly those rows by primary key, in one transaction.  No search, no
-- row lock skipped, no claim: the least a durable queue can write per job.
BEGIN;
WITH i AS (
	INSERT INTO bench.floor (payload)
	SELECT bench.payload(g) FROM generate_series(1, :batch) g
	RETURNING id
)
SELECT array_agg(id)::text AS ids FROM i \gset
DELETE FROM bench.floor WHERE id = ANY (:ids::bigint[]);
COMMIT;
