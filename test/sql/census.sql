-- The census: jobs per queue and state, kept as changes commit, so that
-- metrics() reads counts instead of passing over the job table.  Every
-- statement here commits on its own (the census holds committed changes
-- only); the extensions are dropped at the end, as the other tests, which
-- roll theirs back, expect.
-- edition: c only: the census is kept in shared memory (the portable edition has none; queue_stats and metrics() count from the job table)
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(71);

-- Where the census and the job table disagree (no row: they agree).
\i test/census_wrong.sql

SELECT claimq.create_queue('cs', keep_done => '1 day', max_attempts => 2,
						   retry_base => '1 hour');
SELECT claimq.create_queue('cs2');
SELECT count(*) FROM claimq.enqueue_many('cs', array_fill('{}'::jsonb, ARRAY[20]));

-- A new server knows nothing until the reclaimer (here: the call) counts.
SELECT ok(claimq.census_recount(), 'a recount makes the census valid');
SELECT ok((SELECT valid FROM census_valid), 'census() says so');
SELECT results_eq($$SELECT pending, claimed FROM claimq.census()
					 WHERE queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'cs')$$,
	$$VALUES (20::bigint, 0::bigint)$$, 'the recount found the 20 pending jobs');

-- Every transition, each committed on its own.
SELECT count(*) FROM claimq.enqueue_many('cs', array_fill('{}'::jsonb, ARRAY[5]),
										 run_at => now() + interval '1 hour');
SELECT results_eq($$SELECT pending FROM claimq.census()
					 WHERE queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'cs')$$,
	$$VALUES (25::bigint)$$, 'enqueue: counted as it commits');
SELECT claimq.enqueue('cs', '{}', dedup_key => 'k');
SELECT claimq.enqueue('cs', '{}', dedup_key => 'k');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint,
	'an enqueue that its dedup key turns away counts nothing');
CREATE TEMP TABLE c1 AS SELECT job_id, token FROM claimq.claim('cs', 6);
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'claim');
SELECT count(*) FROM claimq.start(ARRAY(SELECT job_id FROM c1 ORDER BY job_id LIMIT 4),
								  ARRAY(SELECT token FROM c1 ORDER BY job_id LIMIT 4));
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'start');
SELECT count(*) FROM claimq.extend(ARRAY(SELECT job_id FROM c1), ARRAY(SELECT token FROM c1));
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'extend');
SELECT count(*) FROM claimq.complete(ARRAY(SELECT job_id FROM c1 ORDER BY job_id LIMIT 1),
									 ARRAY(SELECT token FROM c1 ORDER BY job_id LIMIT 1));
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'complete, job kept as done');
SELECT count(*) FROM claimq.fail(ARRAY(SELECT job_id FROM c1 ORDER BY job_id OFFSET 1 LIMIT 1),
								 ARRAY(SELECT token FROM c1 ORDER BY job_id OFFSET 1 LIMIT 1), 'x');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'fail, retried');
SELECT count(*) FROM claimq.fail(ARRAY(SELECT job_id FROM c1 ORDER BY job_id OFFSET 2 LIMIT 1),
								 ARRAY(SELECT token FROM c1 ORDER BY job_id OFFSET 2 LIMIT 1), 'x',
								 permanent => true);
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'fail, dead');
SELECT count(*) FROM claimq.snooze(ARRAY(SELECT job_id FROM c1 ORDER BY job_id OFFSET 3 LIMIT 1),
								   ARRAY(SELECT token FROM c1 ORDER BY job_id OFFSET 3 LIMIT 1), '1 hour');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'snooze');
SELECT count(*) FROM claimq.release(ARRAY(SELECT job_id FROM c1 ORDER BY job_id OFFSET 4 LIMIT 1),
									ARRAY(SELECT token FROM c1 ORDER BY job_id OFFSET 4 LIMIT 1));
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'release');
SELECT count(*) FROM claimq.cancel(ARRAY(SELECT job_id FROM c1 ORDER BY job_id OFFSET 5 LIMIT 1));
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'cancel of a claimed job');
SELECT count(*) FROM claimq.cancel(ARRAY(SELECT max(job_id) FROM claimq.job WHERE state = 'pending'));
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'cancel of a pending job');
-- The other ways out of claimed and running: each statement tells the
-- state a job left, which an update's RETURNING does not show.
CREATE TEMP TABLE c3 AS SELECT job_id, token, row_number() OVER (ORDER BY job_id) AS n
  FROM claimq.claim('cs', 5);
SELECT claimq.complete(job_id, token) FROM c3 WHERE n = 1;
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'complete of a claimed job');
SELECT claimq.fail(job_id, token, 'x') FROM c3 WHERE n = 2;
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'fail of a claimed job, retried');
SELECT claimq.fail(job_id, token, 'x', permanent => true) FROM c3 WHERE n = 3;
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'fail of a claimed job, dead');
SELECT claimq.snooze(job_id, token, '1 hour') FROM c3 WHERE n = 4;
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'snooze of a claimed job');
SELECT claimq.start(job_id, token) FROM c3 WHERE n = 5;
SELECT claimq.start(job_id, token) FROM c3 WHERE n = 5;
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'start, and start again of a running job');
SELECT count(*) FROM claimq.cancel(ARRAY(SELECT job_id FROM c3 WHERE n = 5));
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'cancel of a running job');
SELECT claimq.create_queue('csx');
SELECT count(*) FROM claimq.enqueue_many('csx', array_fill('{}'::jsonb, ARRAY[4]));
SELECT count(*) FROM claimq.claim('csx', 1, start => true);
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'claim with start');
SELECT claimq.complete(job_id, token) FROM claimq.claim('csx', 1);
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'complete, job deleted');
SELECT count(*) FROM claimq.claim('csx', 1, worker => 'w');
SELECT claimq.release_worker('csx', 'w');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'release_worker');
SELECT claimq.purge_queue('csx');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'purge_queue');
SELECT claimq.create_schedule('cs-every', 'csx', '* * * * *');
UPDATE claimq.schedule SET next_run_at = now() - interval '1 minute' WHERE name = 'cs-every';
SELECT claimq.fire_schedules();
SELECT claimq.drop_schedule('cs-every');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'a schedule firing');
SELECT claimq.drop_queue('csx', force => true);
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'drop_queue of a queue with a running job');
SELECT ok((SELECT valid FROM census_valid), 'all of it through the ledger: the census stays valid');
CREATE TEMP TABLE c2 AS SELECT job_id, token FROM claimq.claim('cs', 2, lease => '1 second');
SELECT count(*) FROM claimq.start(ARRAY(SELECT min(job_id) FROM c2), ARRAY(SELECT token FROM c2 ORDER BY job_id LIMIT 1),
								  lease => '1 second');
SELECT pg_sleep(1.1);
SELECT count(*) FROM claimq.reclaim('cs');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'reclaim of a claimed and a running job');
SELECT claimq.retry_dead('cs');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'retry_dead');
UPDATE claimq.job SET finished_at = now() - interval '2 days'
 WHERE state = 'done' AND queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'cs');
SELECT claimq.prune();
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'prune');
SELECT results_eq($$SELECT done FROM claimq.census()
					 WHERE queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'cs')$$,
	$$VALUES (0::bigint)$$, 'the pruned done job is gone from the census');

-- A transaction that changed jobs sees them in metrics(), as in
-- queue_stats: the census, which holds committed changes, is not used.
BEGIN;
SELECT count(*) FROM claimq.enqueue_many('cs2', array_fill('{}'::jsonb, ARRAY[3]));
SELECT ok(NOT (SELECT valid FROM census_valid), 'not valid for a transaction that enqueued');
SELECT ok(strpos(claimq.metrics(), 'claimq_jobs{queue="cs2",state="ready"} 3') > 0,
	'its metrics() counts its own jobs');
ROLLBACK;
SELECT ok((SELECT valid FROM census_valid), 'valid again after it');

-- What is rolled back counts nothing.
BEGIN;
SELECT count(*) FROM claimq.enqueue_many('cs2', array_fill('{}'::jsonb, ARRAY[7]));
ROLLBACK;
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'a rolled back enqueue');
BEGIN;
SELECT count(*) FROM claimq.enqueue_many('cs2', array_fill('{}'::jsonb, ARRAY[2]));
SAVEPOINT a;
SELECT count(*) FROM claimq.enqueue_many('cs2', array_fill('{}'::jsonb, ARRAY[3]));
SAVEPOINT b;
SELECT count(*) FROM claimq.claim('cs2', 5);
ROLLBACK TO a;
SAVEPOINT c;
SELECT count(*) FROM claimq.enqueue_many('cs2', array_fill('{}'::jsonb, ARRAY[4]));
RELEASE c;
COMMIT;
SELECT results_eq($$SELECT pending, claimed FROM claimq.census()
					 WHERE queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'cs2')$$,
	$$VALUES (6::bigint, 0::bigint)$$,
	'savepoints: what a rolled back one did is dropped, a released one''s kept');
DO $$
BEGIN
	PERFORM claimq.enqueue('cs2', '{}');
	BEGIN
		PERFORM claimq.enqueue('cs2', '{}');
		PERFORM 1 / 0;
	EXCEPTION WHEN division_by_zero THEN
		NULL;
	END;
END
$$;
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint,
	'an exception block rolls back its own enqueue and keeps the one before');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'after all of that, census and table agree');

-- A prepared transaction's changes are decided by another session: the
-- census is unknown, and no recount makes it valid, until none is left.
BEGIN;
SELECT claimq.enqueue('cs2', '{}');
PREPARE TRANSACTION 'census';
SELECT ok(NOT (SELECT valid FROM census_valid), 'PREPARE TRANSACTION makes the census unknown');
SELECT ok(NOT claimq.census_recount(), 'no recount while a transaction is prepared');
COMMIT PREPARED 'census';
SELECT ok(claimq.census_recount(), 'a recount once it is committed');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'which counts its job');

-- metrics(): queue_stats's figures, read without passing over the job
-- table.  Two priorities, jobs due now and later, held jobs of a limited
-- group, jobs in flight and expired.
SELECT claimq.create_queue('cs3', group_limit => 1);
SELECT count(*) FROM claimq.enqueue_many('cs3', array_fill('{}'::jsonb, ARRAY[1000]));
SELECT count(*) FROM claimq.enqueue_many('cs3', array_fill('{}'::jsonb, ARRAY[3]), priority => 5,
										 run_at => now() + interval '1 hour');
SELECT count(*) FROM claimq.enqueue_many('cs3', array_fill('{}'::jsonb, ARRAY[4]), group_keys => '{g,g,g,h}');
SELECT count(*) FROM claimq.enqueue_many('cs3', array_fill('{}'::jsonb, ARRAY[2]), group_keys => '{g,g}',
										 run_at => now() + interval '1 hour');
SELECT count(*) FROM claimq.claim('cs3', 3, lease => '1 second');
SELECT pg_sleep(1.1);
CREATE TEMP TABLE figures AS
SELECT s.queue, s.paused, s.ready, s.scheduled, s.claimed, s.running, s.expired, s.dead, s.done,
	   s.cancelled, s.oldest_ready_age IS NULL AS no_ready, s.oldest_claim_age IS NULL AS no_claim
  FROM claimq.queue_stats s;
SELECT results_eq($$SELECT queue, paused, ready, scheduled, claimed, running, expired, dead, done,
						   cancelled, oldest_ready_age IS NULL, oldest_claim_age IS NULL
					  FROM claimq.scrape_stats() ORDER BY queue$$,
	$$SELECT * FROM figures ORDER BY queue$$,
	'scrape_stats() has queue_stats''s counts');
SELECT ok((SELECT s.oldest_ready_age BETWEEN q.oldest_ready_age AND q.oldest_ready_age + interval '5 seconds'
				  AND s.oldest_claim_age BETWEEN q.oldest_claim_age AND q.oldest_claim_age + interval '5 seconds'
			 FROM claimq.scrape_stats() s JOIN claimq.queue_stats q USING (queue) WHERE queue = 'cs3'),
	'and its ages');
SELECT is((SELECT scheduled FROM figures WHERE queue = 'cs3'), 5::bigint,
	'the test has jobs due later, both free and held');

-- The job table's reads during one scrape: none sequential, and a few
-- index entries, not the 1,000 ready jobs.  (The view, for contrast,
-- reads them all.)
CREATE TEMP TABLE reads AS
SELECT seq_scan, seq_tup_read, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = 'claimq.job'::regclass;
SELECT length(claimq.metrics()) > 0;
SELECT results_eq($$SELECT t.seq_scan - r.seq_scan, t.seq_tup_read - r.seq_tup_read,
						   t.idx_tup_fetch - r.idx_tup_fetch < 50
					  FROM pg_stat_xact_user_tables t, reads r WHERE t.relid = 'claimq.job'::regclass$$,
	$$VALUES (0::bigint, 0::bigint, true)$$,
	'a scrape reads the job table through its indexes, a few rows');
SELECT ok((SELECT t.seq_tup_read - r.seq_tup_read + t.idx_tup_fetch - r.idx_tup_fetch >= 1000
			 FROM (SELECT count(*) FROM claimq.queue_stats) v,
				  pg_stat_xact_user_tables t, reads r WHERE t.relid = 'claimq.job'::regclass),
	'(where queue_stats reads every job)');

-- TRUNCATE makes the census unknown until a recount.
CREATE TEMP TABLE kept AS SELECT * FROM claimq.job;
TRUNCATE claimq.job;
SELECT ok(NOT (SELECT valid FROM census_valid), 'TRUNCATE makes the census unknown');
SELECT ok(strpos(claimq.metrics(), 'claimq_jobs{queue="cs3",state="ready"} 0') > 0,
	'metrics() then reads queue_stats');
INSERT INTO claimq.job SELECT * FROM kept;
DROP TABLE kept;	-- its after_failed is of claimq's domain
SELECT ok(claimq.census_recount(), 'a recount');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'agrees with the table again');

-- Under session_replication_role = replica (some restores) the census
-- counts as ever, and the guard fires too.
SET session_replication_role = replica;
SELECT count(*) FROM claimq.enqueue_many('cs3', array_fill('{}'::jsonb, ARRAY[2]));
RESET session_replication_role;
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint,
	'under session_replication_role = replica the census counts');
SET session_replication_role = replica;
DELETE FROM claimq.job WHERE job_id = (SELECT max(job_id) FROM claimq.job);
RESET session_replication_role;
SELECT ok(NOT (SELECT valid FROM census_valid), 'and a plain write makes it unknown');
SELECT ok(claimq.census_recount(), 'a recount');

-- A write that is not claimq's own makes the census unknown once it
-- commits; an update that sets neither state nor queue does not.
UPDATE claimq.job SET payload = '{"x": 1}' WHERE queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'cs3');
SELECT ok((SELECT valid FROM census_valid), 'an update of the payload leaves the census valid');
UPDATE claimq.job SET state = 'dead', finished_at = now()
 WHERE job_id = (SELECT min(job_id) FROM claimq.job WHERE state = 'pending');
SELECT ok(NOT (SELECT valid FROM census_valid), 'an update of the state in plain SQL makes it unknown');
SELECT ok(claimq.census_recount(), 'a recount');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'agrees with the table');
INSERT INTO claimq.job (job_id, queue_id, state, run_at, enqueued_at, payload)
SELECT nextval('claimq.job_id_seq'), queue_id, 'pending', now(), now(), '{}'
  FROM claimq.queue WHERE name = 'cs3';
SELECT ok(NOT (SELECT valid FROM census_valid), 'so does an insert');
SELECT ok(claimq.census_recount(), 'a recount');
DELETE FROM claimq.job WHERE job_id = (SELECT max(job_id) FROM claimq.job);
SELECT ok(NOT (SELECT valid FROM census_valid), 'and a delete');
SELECT ok(claimq.census_recount(), 'a recount');
-- A statement of claimq's own inside a plain one does not hide the plain
-- write.
DELETE FROM claimq.job WHERE job_id IN (SELECT * FROM claimq.enqueue_many('cs3', array_fill('{}'::jsonb, ARRAY[2])));
SELECT ok(NOT (SELECT valid FROM census_valid), 'a plain delete of jobs claimq enqueued in the same statement');
SELECT ok(claimq.census_recount(), 'a recount');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'agrees with the table');

-- Writes with the guard disabled are not seen; census_recount() counts
-- again even when the census is valid.
ALTER TABLE claimq.job DISABLE TRIGGER job_census_guard;
INSERT INTO claimq.job (job_id, queue_id, state, run_at, enqueued_at, payload)
SELECT nextval('claimq.job_id_seq'), queue_id, 'pending', now(), now(), '{}'
  FROM claimq.queue WHERE name = 'cs3';
ALTER TABLE claimq.job ENABLE ALWAYS TRIGGER job_census_guard;
SELECT is((SELECT count(*) FROM census_wrong), 1::bigint,
	'with the guard disabled a job went uncounted');
SELECT ok(claimq.census_recount(), 'census_recount() counts again');
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'and sees it');

-- drop_queue takes its jobs out of the census.
SELECT claimq.drop_queue('cs', force => true);
SELECT claimq.drop_queue('cs2', force => true);
SELECT claimq.drop_queue('cs3', force => true);
SELECT is((SELECT count(*) FROM census_wrong), 0::bigint, 'drop_queue');
SELECT is((SELECT count(*) FROM claimq.census() WHERE queue_id <> 0
			  AND (pending, claimed, running, done, dead, cancelled) <> (0, 0, 0, 0, 0, 0)),
	0::bigint, 'nothing left counted');

SELECT * FROM finish();
DROP VIEW census_wrong, census_valid;
DROP EXTENSION claimq;
DROP EXTENSION pgtap;
