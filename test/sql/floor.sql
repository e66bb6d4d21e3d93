-- Claim floors (src/floor.c): a claim starts past the jobs claims already
-- took, and every way a job becomes pending again moves the start back.
-- Each check below fails if the transition it names does not lower the
-- floor: the claim then starts past the job and returns a later one.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(14);

CREATE TEMP TABLE h(label text PRIMARY KEY, job_id bigint, token bigint);
-- Claim n jobs of queue q; remember them as l1, l2, ...; return their ids.
CREATE FUNCTION pg_temp.take(q text, n int, l text)
RETURNS bigint[] LANGUAGE sql AS $$
	WITH c AS (SELECT c.job_id, c.token, row_number() OVER () AS i
				 FROM claimq.claim(q, n) c),
		 k AS (INSERT INTO pg_temp.h SELECT l || c.i, c.job_id, c.token FROM c)
	SELECT array_agg(job_id ORDER BY i) FROM c
$$;
CREATE FUNCTION pg_temp.jid(l text) RETURNS bigint LANGUAGE sql AS
$$ SELECT job_id FROM pg_temp.h WHERE label = l $$;
CREATE FUNCTION pg_temp.tok(l text) RETURNS bigint LANGUAGE sql AS
$$ SELECT token FROM pg_temp.h WHERE label = l $$;

SELECT lives_ok($$SELECT claimq.create_queue('flr')$$, 'create queue flr');
SELECT is((SELECT count(*) FROM claimq.enqueue_many('flr', ARRAY(SELECT '{}'::jsonb
	FROM generate_series(1, 10)))), 10::bigint, 'enqueue ten jobs at one run_at');
SELECT is(pg_temp.take('flr', 3, 'a'), ARRAY[1, 2, 3]::bigint[], 'claim the first three');
SELECT is(pg_temp.take('flr', 2, 'b'), ARRAY[4, 5]::bigint[],
	'the next claim starts past them');

-- release
SELECT ok(claimq.release(pg_temp.jid('a1'), pg_temp.tok('a1')), 'release job 1');
SELECT is(pg_temp.take('flr', 1, 'c'), ARRAY[1]::bigint[],
	'the released job is claimed first again');

-- a claim rolled back to a savepoint
SAVEPOINT s;
SELECT is(pg_temp.take('flr', 2, 'd'), ARRAY[6, 7]::bigint[], 'claim 6 and 7 in a savepoint');
ROLLBACK TO SAVEPOINT s;
SELECT is(pg_temp.take('flr', 1, 'e'), ARRAY[6]::bigint[],
	'after the rollback to the savepoint job 6 is claimed first again');

-- A job made pending behind claimq's back (plain SQL) is seen once the
-- floor is older than a second.
UPDATE claimq.job SET state = 'pending', token = NULL, expires_at = NULL,
	   claimed_at = NULL
 WHERE job_id = 2;
SELECT pg_sleep(1.1);
SELECT is(pg_temp.take('flr', 1, 'g'), ARRAY[2]::bigint[],
	'a job made pending by plain SQL is claimed within a second');

-- enqueue with an earlier run_at
SELECT is(claimq.enqueue('flr', '{"early": true}', run_at => now() - interval '1 day'),
	11::bigint, 'enqueue a job due since yesterday');
SELECT is(pg_temp.take('flr', 1, 'f'), ARRAY[11]::bigint[], 'it is claimed first');

-- Priorities: a claim that ends in a higher priority than the lowest with
-- pending jobs leaves the floor alone, so the lower one's earlier jobs are
-- not skipped.
SELECT lives_ok($$SELECT claimq.create_queue('flr_prio')$$, 'create queue flr_prio');
SELECT claimq.enqueue('flr_prio', '{}', run_at => now() - interval '1 hour')
  FROM generate_series(1, 3);
SELECT claimq.enqueue('flr_prio', '{}', priority => 5) FROM generate_series(1, 2);
SELECT is(pg_temp.take('flr_prio', 1, 'p'), ARRAY[15]::bigint[],
	'claim one job of priority 5');
SELECT is(pg_temp.take('flr_prio', 10, 'q'), ARRAY[16, 12, 13, 14]::bigint[],
	'then the other, and every job of priority 0, though they are due earlier');

SELECT * FROM finish();
ROLLBACK;
