-- A pgbench worker: claim one job, complete it, and record the completion
-- in the results table in the same statement (so only a complete() that
-- returned true is recorded).  When the queue is empty, pause a little.
--
--   pgbench -n -M extended -f claim-complete.sql -D queue=jobs -D worker=pgbench \
--           -c 4 -j 2 -T 10 DBNAME
--
-- Use -M extended (or simple with literal values): the :variables travel as
-- parameters.  -M prepared needs a pooler that keeps prepared statements
-- across transactions.  Expects a table app.job_results (job_id bigint,
-- worker text) that the role may insert into.
SELECT coalesce(max(c.job_id), 0) AS job_id, coalesce(max(c.token), 0) AS token
  FROM claimq.claim(:queue, 1, worker => :worker) AS c
\gset
\if :job_id = 0
\sleep 20 ms
\else
INSERT INTO app.job_results (job_id, worker)
SELECT :job_id::bigint, :worker
 WHERE claimq.complete(:job_id::bigint, :token::bigint);
\endif
