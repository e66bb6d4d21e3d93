-- floor: one batched INSERT and one batched DELETE of a small row per job.
BEGIN;
INSERT INTO bench.floor (payload)
SELECT bench.payload(i) FROM generate_series(1, :batch) i;
DELETE FROM bench.floor WHERE id = ANY (ARRAY(
	SELECT f.id FROM bench.floor f ORDER BY f.id LIMIT :batch FOR UPDATE SKIP LOCKED));
COMMIT;
