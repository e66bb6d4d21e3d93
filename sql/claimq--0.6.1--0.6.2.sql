/* claimq--0.6.1--0.6.2.sql: the ledger (the census fed by claimq's own paths, a statement-level guard against other writers), flow control's rules written once, copy_grants */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.6.2'" to load this file. \quit

/*------------------------------------------------------------------------
 * 1. The ledger
 *-----------------------------------------------------------------------*/

/*
 * The census is fed by the ledger; one statement-level trigger, the
 * guard, replaces the three row and statement triggers of 0.6.
 */
DROP TRIGGER job_census_rows ON claimq.job;
DROP TRIGGER job_census_state ON claimq.job;
DROP TRIGGER job_census_truncate ON claimq.job;

CREATE TRIGGER job_census_guard
	AFTER INSERT OR UPDATE OF state, queue_id OR DELETE OR TRUNCATE ON claimq.job
	FOR EACH STATEMENT EXECUTE FUNCTION claimq.job_census();
ALTER TABLE claimq.job ENABLE ALWAYS TRIGGER job_census_guard;

COMMENT ON FUNCTION claimq.job_census() IS
'private: the census''s guard on claimq.job, which makes the census unknown after writes that are not claimq''s own';

CREATE FUNCTION claimq.ledger_begin()
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_ledger_begin';

COMMENT ON FUNCTION claimq.ledger_begin() IS
'private: the statements that follow, until ledger_end(), are claimq''s own writes of jobs';

CREATE FUNCTION claimq.ledger_end(queue_id integer, to_state text,
								  from_states text[], counts bigint[])
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_ledger_end';

COMMENT ON FUNCTION claimq.ledger_end(integer,text,text[],bigint[]) IS
'private: counts[i] jobs of the queue went from from_states[i] to to_state (NULL: deleted); ends the scope of ledger_begin()';

REVOKE ALL ON FUNCTION claimq.ledger_begin() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.ledger_end(integer,text,text[],bigint[]) FROM PUBLIC;

/* The SQL-language functions that move jobs report to the ledger. */
CREATE OR REPLACE FUNCTION claimq.drop_queue(queue text, force boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	held bigint;
	states text[];
	counts bigint[];
BEGIN
	IF force IS NULL THEN
		RAISE EXCEPTION 'argument "force" must not be null'
			USING ERRCODE = '22004';
	END IF;
	PERFORM claimq.check_queue_name(queue);
	PERFORM claimq.lock_producers(queue);
	q := claimq.lock_queue(queue);
	/*
	 * Without force, delete only jobs nobody holds.  A claim in progress
	 * makes the DELETE wait for it and then skip the job it claimed; the
	 * count that follows, with a fresh snapshot, finds every held job.
	 */
	PERFORM claimq.ledger_begin();
	WITH gone AS (
		DELETE FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND (force OR j.state OPERATOR(pg_catalog.<>) ALL ('{claimed,running}'::text[]))
		RETURNING j.state)
	SELECT pg_catalog.array_agg(g.state), pg_catalog.array_agg(g.n)
	  INTO states, counts
	  FROM (SELECT d.state, pg_catalog.count(*) AS n FROM gone d GROUP BY d.state) g;
	IF NOT force THEN
		SELECT pg_catalog.count(*) INTO held FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id;
		IF held OPERATOR(pg_catalog.>) 0 THEN
			RAISE EXCEPTION 'cannot drop queue "%" while it has claimed or running jobs', queue
				USING ERRCODE = '55006',
					  DETAIL = pg_catalog.format('%s jobs are claimed or running.', held),
					  HINT = 'Wait for them to settle, or pass force => true.';
		END IF;
		SELECT pg_catalog.count(*) INTO held FROM claimq.schedule s
		 WHERE s.queue_id OPERATOR(pg_catalog.=) q.queue_id;
		IF held OPERATOR(pg_catalog.>) 0 THEN
			RAISE EXCEPTION 'cannot drop queue "%" while schedules feed it', queue
				USING ERRCODE = '2BP01',
					  DETAIL = pg_catalog.format('%s schedules enqueue into it.', held),
					  HINT = 'Drop them first, or pass force => true.';
		END IF;
	END IF;
	DELETE FROM claimq.schedule s WHERE s.queue_id OPERATOR(pg_catalog.=) q.queue_id;
	DELETE FROM claimq.queue t WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id;
	PERFORM claimq.ledger_end(q.queue_id, NULL, COALESCE(states, '{}'),
							  COALESCE(counts, '{}'));
END
$$;

CREATE OR REPLACE FUNCTION claimq.purge_queue(queue text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue := claimq.lock_queue(queue);
	n bigint;
	groups text[];
BEGIN
	PERFORM claimq.ledger_begin();
	WITH purged AS (
		DELETE FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.state OPERATOR(pg_catalog.=) 'pending'
		RETURNING j.group_key)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(DISTINCT p.group_key) FILTER (WHERE p.group_key IS NOT NULL)
	  INTO n, groups
	  FROM purged p;
	PERFORM claimq.ledger_end(q.queue_id, NULL, '{pending}', ARRAY[n]);
	IF groups IS NOT NULL THEN
		PERFORM claimq.sync_groups(q.queue_id, groups);
	END IF;
	RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION claimq.retry_dead(queue text, job_ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	n bigint;
	groups text[];
BEGIN
	PERFORM claimq.check_queue_name(queue);
	/* No enqueue may add a live key while this looks for live keys. */
	PERFORM claimq.lock_producers(queue);
	q := claimq.lock_queue(queue);
	PERFORM claimq.ledger_begin();
	/*
	 * A dead job whose dedup key a live job has taken again stays dead:
	 * redriving it would make two live jobs with one key.  Of several dead
	 * jobs with one key, only the oldest is redriven.
	 */
	WITH redriven AS (
		UPDATE claimq.job j
		   SET state = 'pending', attempts = 0, run_at = pg_catalog.clock_timestamp(),
			   finished_at = NULL, expires_at = NULL,
			   held = (j.group_key IS NOT NULL
					   AND (q.group_limit IS NOT NULL OR q.group_fifo))
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.state OPERATOR(pg_catalog.=) 'dead'
		   AND (job_ids IS NULL OR j.job_id OPERATOR(pg_catalog.=) ANY (job_ids))
		   AND (j.dedup_key IS NULL OR (
				NOT EXISTS (SELECT 1 FROM claimq.job l
							 WHERE l.queue_id OPERATOR(pg_catalog.=) j.queue_id
							   AND l.dedup_key OPERATOR(pg_catalog.=) j.dedup_key
							   AND l.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[]))
				AND NOT EXISTS (SELECT 1 FROM claimq.job o
								 WHERE o.queue_id OPERATOR(pg_catalog.=) j.queue_id
								   AND o.dedup_key OPERATOR(pg_catalog.=) j.dedup_key
								   AND o.state OPERATOR(pg_catalog.=) 'dead'
								   AND o.job_id OPERATOR(pg_catalog.<) j.job_id
								   AND (job_ids IS NULL OR o.job_id OPERATOR(pg_catalog.=) ANY (job_ids)))))
		RETURNING j.group_key)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(DISTINCT r.group_key) FILTER (WHERE r.group_key IS NOT NULL)
	  INTO n, groups
	  FROM redriven r;
	PERFORM claimq.ledger_end(q.queue_id, 'pending', '{dead}', ARRAY[n]);
	IF groups IS NOT NULL THEN
		PERFORM claimq.sync_groups(q.queue_id, groups);
	END IF;
	RETURN n;
END
$$;

/*------------------------------------------------------------------------
 * 2. Flow control's rules, copy_grants
 *-----------------------------------------------------------------------*/
