/* claimq--0.3--0.4.sql: job control (cancel, snooze, per-job attempts, debounce, results, status, wait_for) and schedules */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.4'" to load this file. \quit

/*
 * Functions and views whose signature, result or body changes are created
 * anew beside the old ones, given the old ones' grants, and then the old
 * ones are dropped.  This helper copies the grants of one object to
 * another.  A GRANT run by an extension script is recorded as the object's
 * initial privilege, which pg_dump leaves out of a dump; the copied grants
 * were made by users (with grant_duty), so the object's initial privileges
 * are put back as they were, and pg_dump keeps the grants.
 */
CREATE FUNCTION claimq.upgrade_copy_grants(old_oid oid, new_oid oid,
										   catalog regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	acl aclitem[];
	owner oid;
	target text;
	saved aclitem[];
	had_initprivs boolean;
	a record;
BEGIN
	IF catalog OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass THEN
		SELECT p.proacl, p.proowner INTO acl, owner
		  FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) old_oid;
		target := 'FUNCTION ' OPERATOR(pg_catalog.||) new_oid::regprocedure::text;
	ELSE
		SELECT c.relacl, c.relowner INTO acl, owner
		  FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) old_oid;
		target := 'TABLE ' OPERATOR(pg_catalog.||) new_oid::regclass::text;
	END IF;
	SELECT i.initprivs INTO saved FROM pg_catalog.pg_init_privs i
	 WHERE i.objoid OPERATOR(pg_catalog.=) new_oid
	   AND i.classoid OPERATOR(pg_catalog.=) catalog
	   AND i.objsubid OPERATOR(pg_catalog.=) 0;
	had_initprivs := FOUND;
	FOR a IN SELECT x.grantee, x.privilege_type, x.is_grantable
			   FROM pg_catalog.aclexplode(acl) x
			  WHERE x.grantee OPERATOR(pg_catalog.<>) owner LOOP
		EXECUTE pg_catalog.format('GRANT %s ON %s TO %s%s', a.privilege_type, target,
			CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
				 ELSE a.grantee::regrole::text END,
			CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
	END LOOP;
	IF had_initprivs THEN
		UPDATE pg_catalog.pg_init_privs i SET initprivs = saved
		 WHERE i.objoid OPERATOR(pg_catalog.=) new_oid
		   AND i.classoid OPERATOR(pg_catalog.=) catalog
		   AND i.objsubid OPERATOR(pg_catalog.=) 0;
	ELSE
		DELETE FROM pg_catalog.pg_init_privs i
		 WHERE i.objoid OPERATOR(pg_catalog.=) new_oid
		   AND i.classoid OPERATOR(pg_catalog.=) catalog
		   AND i.objsubid OPERATOR(pg_catalog.=) 0;
	END IF;
END
$$;

REVOKE ALL ON FUNCTION claimq.upgrade_copy_grants(oid, oid, regclass) FROM PUBLIC;

/*
 * Jobs: the cancelled state, a per-job max_attempts (NULL: the queue's),
 * a group key, and the result a keep_done queue keeps.  Adding columns
 * without a default rewrites nothing.
 */
ALTER TABLE claimq.job
	ADD COLUMN max_attempts integer,
	ADD COLUMN group_key text,
	ADD COLUMN result jsonb,
	ADD COLUMN started_at timestamptz,
	DROP CONSTRAINT job_state_check,
	ADD CONSTRAINT job_state_check CHECK (state OPERATOR(pg_catalog.=) ANY
		('{pending,claimed,running,dead,done,cancelled}'::text[])),
	ADD CONSTRAINT job_max_attempts_check
		CHECK (max_attempts OPERATOR(pg_catalog.>=) 1
			   AND max_attempts OPERATOR(pg_catalog.<=) 1000);

/* Cancelled jobs are kept and pruned like dead ones. */
DROP INDEX claimq.job_finished_idx;
CREATE INDEX job_finished_idx ON claimq.job (queue_id, state, finished_at)
	WHERE state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[]);

/*
 * Private: the SQL-language transitions tell the C side what they did, so
 * that waiting claims and wait_for are woken and claim floors lowered when
 * the transaction commits.
 */
CREATE FUNCTION claimq.note_change(queue_id integer, made_pending boolean,
								   finished boolean)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_note_change';

COMMENT ON FUNCTION claimq.note_change(integer, boolean, boolean) IS
'private: at commit, wake claims waiting on the queue (made_pending) or wait_for calls (finished)';

REVOKE ALL ON FUNCTION claimq.note_change(integer, boolean, boolean) FROM PUBLIC;

/*
 * Producing: per-job attempts, debounce and group keys.
 */
CREATE FUNCTION claimq.enqueue(
	queue text,
	payload jsonb,
	run_at timestamptz DEFAULT NULL,
	priority integer DEFAULT 0,
	dedup_key text DEFAULT NULL,
	max_attempts integer DEFAULT NULL,
	on_duplicate text DEFAULT 'keep',
	group_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_enqueue';

COMMENT ON FUNCTION claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text) IS
'add a job; with a dedup_key that a live job holds, return that job''s id instead (and with on_duplicate => ''replace'', update it while it is pending)';

REVOKE ALL ON FUNCTION claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text) FROM PUBLIC;

CREATE FUNCTION claimq.enqueue_many(
	queue text,
	payloads jsonb[],
	run_at timestamptz DEFAULT NULL,
	priority integer DEFAULT 0,
	dedup_keys text[] DEFAULT NULL,
	max_attempts integer DEFAULT NULL,
	on_duplicate text DEFAULT 'keep',
	group_keys text[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_enqueue_many';

COMMENT ON FUNCTION claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[]) IS
'add one job per payload in one statement; returns the ids in input order';

REVOKE ALL ON FUNCTION claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[]) FROM PUBLIC;

SELECT claimq.upgrade_copy_grants(
	'claimq.enqueue(text, jsonb, timestamptz, integer, text)'::regprocedure,
	'claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text)'::regprocedure,
	'pg_catalog.pg_proc');
SELECT claimq.upgrade_copy_grants(
	'claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[])'::regprocedure,
	'claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[])'::regprocedure,
	'pg_catalog.pg_proc');

/*
 * Working: results on complete, and snooze.
 */
CREATE FUNCTION claimq.complete(job_ids bigint[], tokens bigint[],
								results jsonb[] DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete';

COMMENT ON FUNCTION claimq.complete(bigint[], bigint[], jsonb[]) IS
'finish claimed or running jobs: deleted, or kept as done (with its result) on a keep_done queue';

REVOKE ALL ON FUNCTION claimq.complete(bigint[], bigint[], jsonb[]) FROM PUBLIC;

CREATE FUNCTION claimq.complete(job_id bigint, token bigint,
								result jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete_one';

COMMENT ON FUNCTION claimq.complete(bigint, bigint, jsonb) IS
'complete one job; true if the token still held it';

REVOKE ALL ON FUNCTION claimq.complete(bigint, bigint, jsonb) FROM PUBLIC;

SELECT claimq.upgrade_copy_grants(
	'claimq.complete(bigint[], bigint[])'::regprocedure,
	'claimq.complete(bigint[], bigint[], jsonb[])'::regprocedure,
	'pg_catalog.pg_proc');
SELECT claimq.upgrade_copy_grants(
	'claimq.complete(bigint, bigint)'::regprocedure,
	'claimq.complete(bigint, bigint, jsonb)'::regprocedure,
	'pg_catalog.pg_proc');

CREATE FUNCTION claimq.snooze(job_ids bigint[], tokens bigint[],
							  delay interval)
RETURNS TABLE(job_id bigint, outcome text, run_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_snooze';

COMMENT ON FUNCTION claimq.snooze(bigint[], bigint[], interval) IS
'put claimed or running jobs back to pending after delay, giving back an attempt that start counted';

REVOKE ALL ON FUNCTION claimq.snooze(bigint[], bigint[], interval) FROM PUBLIC;

CREATE FUNCTION claimq.snooze(job_id bigint, token bigint, delay interval)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_snooze_one';

COMMENT ON FUNCTION claimq.snooze(bigint, bigint, interval) IS
'snooze one job; true if the token still held it';

REVOKE ALL ON FUNCTION claimq.snooze(bigint, bigint, interval) FROM PUBLIC;

/*
 * Job control: cancel, status, wait_for.
 */
CREATE FUNCTION claimq.cancel(job_ids bigint[])
RETURNS TABLE(job_id bigint, outcome text, state text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_cancel';

COMMENT ON FUNCTION claimq.cancel(bigint[]) IS
'cancel pending, claimed or running jobs; their holders'' tokens then get the outcome cancelled';

REVOKE ALL ON FUNCTION claimq.cancel(bigint[]) FROM PUBLIC;

CREATE FUNCTION claimq.status(job_ids bigint[])
RETURNS TABLE(job_id bigint, queue text, state text, attempts integer,
			  run_at timestamptz, finished_at timestamptz, last_error text,
			  result jsonb)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_status';

COMMENT ON FUNCTION claimq.status(bigint[]) IS
'the state of each listed job, in input order; every column but job_id NULL for a job that no longer exists';

REVOKE ALL ON FUNCTION claimq.status(bigint[]) FROM PUBLIC;

CREATE FUNCTION claimq.wait_for(job_ids bigint[], timeout interval)
RETURNS TABLE(job_id bigint, queue text, state text, attempts integer,
			  run_at timestamptz, finished_at timestamptz, last_error text,
			  result jsonb)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_wait_for';

COMMENT ON FUNCTION claimq.wait_for(bigint[], interval) IS
'wait until every listed job is done, dead, cancelled or gone, or timeout passes; then return their status';

REVOKE ALL ON FUNCTION claimq.wait_for(bigint[], interval) FROM PUBLIC;

/* Roles that hold a duty get its new functions. */
SELECT claimq.upgrade_copy_grants(
	'claimq.enqueue(text, jsonb, timestamptz, integer, text)'::regprocedure,
	f, 'pg_catalog.pg_proc')
  FROM pg_catalog.unnest(ARRAY[
	'claimq.cancel(bigint[])'::regprocedure,
	'claimq.status(bigint[])'::regprocedure,
	'claimq.wait_for(bigint[], interval)'::regprocedure]) f;
SELECT claimq.upgrade_copy_grants(
	'claimq.claim(text, integer, interval, text, boolean, interval)'::regprocedure,
	f, 'pg_catalog.pg_proc')
  FROM pg_catalog.unnest(ARRAY[
	'claimq.snooze(bigint[], bigint[], interval)'::regprocedure,
	'claimq.snooze(bigint, bigint, interval)'::regprocedure,
	'claimq.status(bigint[])'::regprocedure,
	'claimq.wait_for(bigint[], interval)'::regprocedure]) f;
SELECT claimq.upgrade_copy_grants(
	'claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean)'::regprocedure,
	f, 'pg_catalog.pg_proc')
  FROM pg_catalog.unnest(ARRAY[
	'claimq.cancel(bigint[])'::regprocedure,
	'claimq.status(bigint[])'::regprocedure,
	'claimq.wait_for(bigint[], interval)'::regprocedure]) f;

DROP FUNCTION claimq.enqueue(text, jsonb, timestamptz, integer, text);
DROP FUNCTION claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[]);
DROP FUNCTION claimq.complete(bigint[], bigint[]);
DROP FUNCTION claimq.complete(bigint, bigint);

/*
 * Schedules: one row per schedule, keeping the next occurrence not yet
 * enqueued.  The C side (schedule.c, cron.c) parses the expressions and
 * fires the occurrences.
 */
CREATE TABLE claimq.schedule (
	name			text NOT NULL,
	queue_id		integer NOT NULL,
	cron			text NOT NULL,
	time_zone		text NOT NULL,
	payload			jsonb NOT NULL,
	priority		integer NOT NULL,
	missed			text NOT NULL,
	enabled			boolean NOT NULL DEFAULT true,
	anchor			timestamptz NOT NULL,	-- when cron or time_zone was set
	next_run_at		timestamptz,			-- NULL: no occurrence any more
	last_run_at		timestamptz,
	last_job_id		bigint,
	catch_up_to		timestamptz,			-- "all" cut short by max_jobs
	created_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT schedule_pkey PRIMARY KEY (name),
	CONSTRAINT schedule_queue_fkey FOREIGN KEY (queue_id)
		REFERENCES claimq.queue (queue_id),
	CONSTRAINT schedule_name_check
		CHECK (name OPERATOR(pg_catalog.~) '^[A-Za-z0-9_.-]{1,63}$'),
	CONSTRAINT schedule_missed_check CHECK (missed OPERATOR(pg_catalog.=) ANY
		('{skip,once,all}'::text[]))
);

CREATE INDEX schedule_due_idx ON claimq.schedule (next_run_at) WHERE enabled;
CREATE INDEX schedule_queue_idx ON claimq.schedule (queue_id);

SELECT pg_catalog.pg_extension_config_dump('claimq.schedule', '');

REVOKE ALL ON TABLE claimq.schedule FROM PUBLIC;

CREATE FUNCTION claimq.create_schedule(
	schedule text,
	queue text,
	cron text,
	payload jsonb DEFAULT '{}',
	time_zone text DEFAULT 'UTC',
	priority integer DEFAULT 0,
	missed text DEFAULT 'once')
RETURNS void
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_create_schedule';

COMMENT ON FUNCTION claimq.create_schedule(text, text, text, jsonb, text, integer, text) IS
'enqueue a job into queue whenever cron matches in time_zone; raises 42710 if the schedule exists';

REVOKE ALL ON FUNCTION claimq.create_schedule(text, text, text, jsonb, text, integer, text) FROM PUBLIC;

CREATE FUNCTION claimq.alter_schedule(
	schedule text,
	queue text DEFAULT NULL,
	cron text DEFAULT NULL,
	payload jsonb DEFAULT NULL,
	time_zone text DEFAULT NULL,
	priority integer DEFAULT NULL,
	missed text DEFAULT NULL,
	enabled boolean DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_alter_schedule';

COMMENT ON FUNCTION claimq.alter_schedule(text, text, text, jsonb, text, integer, text, boolean) IS
'change a schedule; a NULL option stays as it is, a new cron or time_zone counts from now';

REVOKE ALL ON FUNCTION claimq.alter_schedule(text, text, text, jsonb, text, integer, text, boolean) FROM PUBLIC;

CREATE FUNCTION claimq.drop_schedule(schedule text)
RETURNS void
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_drop_schedule';

COMMENT ON FUNCTION claimq.drop_schedule(text) IS
'drop a schedule; jobs it enqueued stay';

REVOKE ALL ON FUNCTION claimq.drop_schedule(text) FROM PUBLIC;

CREATE FUNCTION claimq.fire_schedules(max_jobs integer DEFAULT 1000)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fire_schedules';

COMMENT ON FUNCTION claimq.fire_schedules(integer) IS
'enqueue the due occurrences of every enabled schedule, up to max_jobs; returns how many (the reclaimer calls it on every pass)';

REVOKE ALL ON FUNCTION claimq.fire_schedules(integer) FROM PUBLIC;

CREATE FUNCTION claimq.cron_next(cron text, time_zone text, after timestamptz,
								 anchor timestamptz DEFAULT NULL)
RETURNS timestamptz
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_cron_next';

COMMENT ON FUNCTION claimq.cron_next(text, text, timestamptz, timestamptz) IS
'private: the first occurrence of cron in time_zone after after (for @every, counted from anchor); NULL if none';

REVOKE ALL ON FUNCTION claimq.cron_next(text, text, timestamptz, timestamptz) FROM PUBLIC;

CREATE VIEW claimq.schedules AS
SELECT s.name AS schedule, q.name AS queue, s.cron, s.time_zone, s.payload,
	   s.priority, s.missed, s.enabled, s.next_run_at, s.last_run_at,
	   s.last_job_id
  FROM claimq.schedule s
  JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) s.queue_id;

COMMENT ON VIEW claimq.schedules IS
'every schedule, with its next occurrence and the last job it enqueued';

REVOKE ALL ON TABLE claimq.schedules FROM PUBLIC;

SELECT claimq.upgrade_copy_grants(
	'claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean)'::regprocedure,
	f, 'pg_catalog.pg_proc')
  FROM pg_catalog.unnest(ARRAY[
	'claimq.create_schedule(text, text, text, jsonb, text, integer, text)'::regprocedure,
	'claimq.alter_schedule(text, text, text, jsonb, text, integer, text, boolean)'::regprocedure,
	'claimq.drop_schedule(text)'::regprocedure,
	'claimq.fire_schedules(integer)'::regprocedure]) f;
SELECT claimq.upgrade_copy_grants('claimq.queue_stats'::regclass, 'claimq.schedules'::regclass,
								  'pg_catalog.pg_class');

/*
 * Queue administration and recovery that make jobs pending or remove them
 * now say so (claimq.note_change), so that waiting claims and wait_for
 * wake at once and no claim floor delays the jobs.
 */
ALTER FUNCTION claimq.resume_queue(text) RENAME TO resume_queue_0_3;
ALTER FUNCTION claimq.retry_dead(text, bigint[]) RENAME TO retry_dead_0_3;
ALTER FUNCTION claimq.purge_queue(text) RENAME TO purge_queue_0_3;
ALTER FUNCTION claimq.drop_queue(text, boolean) RENAME TO drop_queue_0_3;

CREATE FUNCTION claimq.resume_queue(queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue := claimq.lock_queue(queue);
BEGIN
	UPDATE claimq.queue t SET paused = false
	 WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id;
	IF q.paused THEN
		PERFORM claimq.note_change(q.queue_id, true, false);
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.resume_queue(text) IS
'let a paused queue hand out jobs again';

REVOKE ALL ON FUNCTION claimq.resume_queue(text) FROM PUBLIC;

CREATE FUNCTION claimq.retry_dead(queue text, job_ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	n bigint;
BEGIN
	PERFORM claimq.check_queue_name(queue);
	/* No enqueue may add a live key while this looks for live keys. */
	PERFORM claimq.lock_producers(queue);
	q := claimq.lock_queue(queue);
	/*
	 * A dead job whose dedup key a live job has taken again stays dead:
	 * redriving it would make two live jobs with one key.  Of several dead
	 * jobs with one key, only the oldest is redriven.
	 */
	UPDATE claimq.job j
	   SET state = 'pending', attempts = 0, run_at = pg_catalog.clock_timestamp(),
		   finished_at = NULL, expires_at = NULL
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
							   AND (job_ids IS NULL OR o.job_id OPERATOR(pg_catalog.=) ANY (job_ids)))));
	GET DIAGNOSTICS n = ROW_COUNT;
	IF n OPERATOR(pg_catalog.>) 0 THEN
		PERFORM claimq.note_change(q.queue_id, true, false);
	END IF;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.retry_dead(text, bigint[]) IS
'redrive dead jobs (all of a queue''s, or those listed) to pending with attempts reset; returns how many';

REVOKE ALL ON FUNCTION claimq.retry_dead(text, bigint[]) FROM PUBLIC;

CREATE FUNCTION claimq.purge_queue(queue text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue := claimq.lock_queue(queue);
	n bigint;
BEGIN
	DELETE FROM claimq.job j
	 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
	   AND j.state OPERATOR(pg_catalog.=) 'pending';
	GET DIAGNOSTICS n = ROW_COUNT;
	IF n OPERATOR(pg_catalog.>) 0 THEN
		PERFORM claimq.note_change(q.queue_id, false, true);
	END IF;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.purge_queue(text) IS
'delete a queue''s pending jobs (ready and scheduled); returns how many';

REVOKE ALL ON FUNCTION claimq.purge_queue(text) FROM PUBLIC;

CREATE FUNCTION claimq.drop_queue(queue text, force boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	held bigint;
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
	DELETE FROM claimq.job j
	 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
	   AND (force OR j.state OPERATOR(pg_catalog.<>) ALL ('{claimed,running}'::text[]));
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
	PERFORM claimq.note_change(q.queue_id, false, true);
END
$$;

COMMENT ON FUNCTION claimq.drop_queue(text, boolean) IS
'drop a queue and all its jobs; refuses (55006) while jobs are claimed or running, and (2BP01) while schedules feed it, unless force (which drops the schedules too)';

REVOKE ALL ON FUNCTION claimq.drop_queue(text, boolean) FROM PUBLIC;

SELECT claimq.upgrade_copy_grants(v.o::oid, v.n::oid, 'pg_catalog.pg_proc')
  FROM (VALUES ('claimq.resume_queue_0_3(text)'::regprocedure, 'claimq.resume_queue(text)'::regprocedure),
			   ('claimq.retry_dead_0_3(text, bigint[])', 'claimq.retry_dead(text, bigint[])'),
			   ('claimq.purge_queue_0_3(text)', 'claimq.purge_queue(text)'),
			   ('claimq.drop_queue_0_3(text, boolean)', 'claimq.drop_queue(text, boolean)')) AS v(o, n);

DROP FUNCTION claimq.resume_queue_0_3(text);
DROP FUNCTION claimq.retry_dead_0_3(text, bigint[]);
DROP FUNCTION claimq.purge_queue_0_3(text);
DROP FUNCTION claimq.drop_queue_0_3(text, boolean);

/*
 * Observing: cancelled jobs in queue_stats, the new columns in jobs, and
 * the cancelled and snoozed counters.
 */
ALTER VIEW claimq.queue_stats RENAME TO queue_stats_0_3;
ALTER VIEW claimq.jobs RENAME TO jobs_0_3;
ALTER VIEW claimq.counters RENAME TO counters_0_3;
ALTER FUNCTION claimq.counters() RENAME TO counters_0_3;

CREATE VIEW claimq.queue_stats AS
SELECT q.name AS queue,
	   q.paused,
	   COALESCE(s.ready, 0) AS ready,
	   COALESCE(s.scheduled, 0) AS scheduled,
	   COALESCE(s.claimed, 0) AS claimed,
	   COALESCE(s.running, 0) AS running,
	   COALESCE(s.expired, 0) AS expired,
	   COALESCE(s.dead, 0) AS dead,
	   COALESCE(s.done, 0) AS done,
	   s.oldest_ready_age,
	   s.oldest_claim_age,
	   COALESCE(s.cancelled, 0) AS cancelled
  FROM claimq.queue q
  LEFT JOIN (
	SELECT j.queue_id,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'pending'
										 AND j.run_at OPERATOR(pg_catalog.<=) c.now) AS ready,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'pending'
										 AND j.run_at OPERATOR(pg_catalog.>) c.now) AS scheduled,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'claimed') AS claimed,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'running') AS running,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
										 AND j.expires_at OPERATOR(pg_catalog.<) c.now) AS expired,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'dead') AS dead,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'done') AS done,
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'cancelled') AS cancelled,
		   c.now OPERATOR(pg_catalog.-) pg_catalog.min(j.run_at)
			 FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'pending'
					   AND j.run_at OPERATOR(pg_catalog.<=) c.now) AS oldest_ready_age,
		   c.now OPERATOR(pg_catalog.-) pg_catalog.min(j.claimed_at)
			 FILTER (WHERE j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])) AS oldest_claim_age
	  FROM claimq.job j
	 CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) c
	 GROUP BY j.queue_id, c.now
  ) s ON s.queue_id OPERATOR(pg_catalog.=) q.queue_id;

COMMENT ON VIEW claimq.queue_stats IS
'per queue: jobs by state, expired claims, and the age of the oldest ready job and of the oldest claim';

REVOKE ALL ON TABLE claimq.queue_stats FROM PUBLIC;

CREATE VIEW claimq.jobs AS
SELECT j.job_id, q.name AS queue, j.state, j.payload, j.priority, j.run_at,
	   j.attempts, j.worker, j.expires_at, j.enqueued_at, j.dedup_key,
	   j.last_error, j.group_key, j.max_attempts, j.finished_at, j.result
  FROM claimq.job j
  JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id;

COMMENT ON VIEW claimq.jobs IS
'every job of every queue, for inspection';

REVOKE ALL ON TABLE claimq.jobs FROM PUBLIC;

CREATE FUNCTION claimq.counters()
RETURNS TABLE(database text, queue text, claimed bigint, started bigint,
			  completed bigint, failed bigint, released bigint,
			  reclaimed bigint, dead bigint, stale bigint,
			  cancelled bigint, snoozed bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_counters';

COMMENT ON FUNCTION claimq.counters() IS
'cumulative counts per database and queue since server start or reset_counters(), from shared memory (empty without the preload)';

REVOKE ALL ON FUNCTION claimq.counters() FROM PUBLIC;

CREATE VIEW claimq.counters AS SELECT * FROM claimq.counters();

COMMENT ON VIEW claimq.counters IS
'cumulative counts per database and queue; see claimq.counters()';

REVOKE ALL ON TABLE claimq.counters FROM PUBLIC;

SELECT claimq.upgrade_copy_grants('claimq.counters_0_3()'::regprocedure,
								  'claimq.counters()'::regprocedure,
								  'pg_catalog.pg_proc');
SELECT claimq.upgrade_copy_grants(v.o, v.n, 'pg_catalog.pg_class')
  FROM (VALUES ('claimq.queue_stats_0_3'::regclass::oid, 'claimq.queue_stats'::regclass::oid),
			   ('claimq.jobs_0_3'::regclass::oid, 'claimq.jobs'::regclass::oid),
			   ('claimq.counters_0_3'::regclass::oid, 'claimq.counters'::regclass::oid)) AS v(o, n);

DROP VIEW claimq.queue_stats_0_3;
DROP VIEW claimq.jobs_0_3;
DROP VIEW claimq.counters_0_3;
DROP FUNCTION claimq.counters_0_3();

/*
 * Latency percentiles per queue, from shared memory (counters.c), and the
 * current database's figures in the Prometheus text format.
 */
CREATE FUNCTION claimq.queue_latency()
RETURNS TABLE(queue text, samples bigint,
			  wait_p50 interval, wait_p90 interval, wait_p99 interval,
			  run_p50 interval, run_p90 interval, run_p99 interval,
			  wait_sum float8, run_samples bigint, run_sum float8)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_queue_latency';

COMMENT ON FUNCTION claimq.queue_latency() IS
'per queue of this database: wait (ready to claim) and run (start to complete or fail) percentiles since server start or reset_counters(), within 10% (empty without the preload)';

REVOKE ALL ON FUNCTION claimq.queue_latency() FROM PUBLIC;

CREATE FUNCTION claimq.latency_histogram()
RETURNS TABLE(queue text, kind text, bucket integer, upper float8, samples bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_latency_histogram';

COMMENT ON FUNCTION claimq.latency_histogram() IS
'private: the non-empty buckets of this database''s wait and run histograms (upper bound in seconds), for percentiles over an interval';

REVOKE ALL ON FUNCTION claimq.latency_histogram() FROM PUBLIC;

CREATE VIEW claimq.queue_latency AS
SELECT l.queue, l.samples, l.wait_p50, l.wait_p90, l.wait_p99,
	   l.run_p50, l.run_p90, l.run_p99
  FROM claimq.queue_latency() l;

COMMENT ON VIEW claimq.queue_latency IS
'wait and run percentiles per queue; see claimq.queue_latency()';

REVOKE ALL ON TABLE claimq.queue_latency FROM PUBLIC;

CREATE FUNCTION claimq.metrics()
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	-- Each source is read once: queue_stats passes over the job table.
	stats jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(s) ORDER BY s.queue), '[]')
					  FROM claimq.queue_stats s);
	counts jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(c) ORDER BY c.queue), '[]')
					   FROM claimq.counters() c WHERE c.queue IS NOT NULL);
	lats jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(l) ORDER BY l.queue), '[]')
					 FROM claimq.queue_latency() l);
	family constant text := E'# HELP %1$s %2$s\n# TYPE %1$s %3$s\n';
	out text;
	f record;
BEGIN
	-- Families with HELP and TYPE, then their samples, one per line; label
	-- values are queue names, which contain nothing that needs escaping.
	out := pg_catalog.format(family, 'claimq_jobs',
							 'Jobs per queue and state (expired: claimed or running jobs past their lease).',
							 'gauge')
		OPERATOR(pg_catalog.||)
		COALESCE((SELECT pg_catalog.string_agg(
					pg_catalog.format(E'claimq_jobs{queue="%s",state="%s"} %s\n',
									  e.x OPERATOR(pg_catalog.->>) 'queue', v.state,
									  e.x OPERATOR(pg_catalog.->>) v.state),
					'' ORDER BY e.n, v.n)
				  FROM pg_catalog.jsonb_array_elements(stats) WITH ORDINALITY AS e(x, n)
				  CROSS JOIN pg_catalog.unnest('{ready,scheduled,claimed,running,expired,dead,done,cancelled}'::text[])
							 WITH ORDINALITY AS v(state, n)), '');
	FOR f IN SELECT * FROM (VALUES
		('oldest_ready_age', 'Age of the oldest ready job per queue (0 if none).'),
		('oldest_claim_age', 'Age of the oldest claim of a claimed or running job per queue (0 if none).')) AS v(name, help)
	LOOP
		out := out OPERATOR(pg_catalog.||)
			pg_catalog.format(family, 'claimq_' OPERATOR(pg_catalog.||) f.name OPERATOR(pg_catalog.||) '_seconds', f.help, 'gauge')
			OPERATOR(pg_catalog.||)
			COALESCE((SELECT pg_catalog.string_agg(
						pg_catalog.format(E'claimq_%s_seconds{queue="%s"} %s\n', f.name,
										  e.x OPERATOR(pg_catalog.->>) 'queue',
										  COALESCE(pg_catalog.date_part('epoch',
												(e.x OPERATOR(pg_catalog.->>) f.name)::interval), 0)),
						'' ORDER BY e.n)
					  FROM pg_catalog.jsonb_array_elements(stats) WITH ORDINALITY AS e(x, n)), '');
	END LOOP;
	FOR f IN SELECT * FROM pg_catalog.unnest('{claimed,started,completed,failed,released,reclaimed,dead,stale,cancelled,snoozed}'::text[]) AS v(name)
	LOOP
		out := out OPERATOR(pg_catalog.||)
			pg_catalog.format(family, 'claimq_' OPERATOR(pg_catalog.||) f.name OPERATOR(pg_catalog.||) '_total',
							  pg_catalog.format('Jobs %s per queue since server start or reset_counters().',
												CASE f.name WHEN 'stale' THEN 'refused as stale' ELSE f.name END),
							  'counter')
			OPERATOR(pg_catalog.||)
			COALESCE((SELECT pg_catalog.string_agg(
						pg_catalog.format(E'claimq_%s_total{queue="%s"} %s\n', f.name,
										  e.x OPERATOR(pg_catalog.->>) 'queue', e.x OPERATOR(pg_catalog.->>) f.name),
						'' ORDER BY e.n)
					  FROM pg_catalog.jsonb_array_elements(counts) WITH ORDINALITY AS e(x, n)), '');
	END LOOP;
	FOR f IN SELECT * FROM (VALUES
		('wait', 'Time from a job becoming ready to its claim, per queue.', 'samples'),
		('run', 'Time from a job''s start to its complete or fail, per queue.', 'run_samples')) AS v(name, help, count)
	LOOP
		out := out OPERATOR(pg_catalog.||)
			pg_catalog.format(family, 'claimq_' OPERATOR(pg_catalog.||) f.name OPERATOR(pg_catalog.||) '_seconds', f.help, 'summary')
			OPERATOR(pg_catalog.||)
			COALESCE((SELECT pg_catalog.string_agg(
						pg_catalog.format(E'claimq_%1$s_seconds{queue="%2$s",quantile="0.5"} %3$s\n'
										  'claimq_%1$s_seconds{queue="%2$s",quantile="0.9"} %4$s\n'
										  'claimq_%1$s_seconds{queue="%2$s",quantile="0.99"} %5$s\n'
										  'claimq_%1$s_seconds_sum{queue="%2$s"} %6$s\n'
										  'claimq_%1$s_seconds_count{queue="%2$s"} %7$s\n',
										  f.name, e.x OPERATOR(pg_catalog.->>) 'queue',
										  COALESCE(pg_catalog.date_part('epoch', (e.x OPERATOR(pg_catalog.->>) (f.name OPERATOR(pg_catalog.||) '_p50'))::interval), 0),
										  COALESCE(pg_catalog.date_part('epoch', (e.x OPERATOR(pg_catalog.->>) (f.name OPERATOR(pg_catalog.||) '_p90'))::interval), 0),
										  COALESCE(pg_catalog.date_part('epoch', (e.x OPERATOR(pg_catalog.->>) (f.name OPERATOR(pg_catalog.||) '_p99'))::interval), 0),
										  e.x OPERATOR(pg_catalog.->>) (f.name OPERATOR(pg_catalog.||) '_sum'),
										  e.x OPERATOR(pg_catalog.->>) f.count),
						'' ORDER BY e.n)
					  FROM pg_catalog.jsonb_array_elements(lats) WITH ORDINALITY AS e(x, n)), '');
	END LOOP;
	RETURN out;
END
$$;

COMMENT ON FUNCTION claimq.metrics() IS
'the current database''s queue figures in the Prometheus text exposition format';

REVOKE ALL ON FUNCTION claimq.metrics() FROM PUBLIC;

SELECT claimq.upgrade_copy_grants(
	'claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean)'::regprocedure,
	f, 'pg_catalog.pg_proc')
  FROM pg_catalog.unnest(ARRAY[
	'claimq.queue_latency()'::regprocedure,
	'claimq.metrics()'::regprocedure]) f;
SELECT claimq.upgrade_copy_grants('claimq.queue_stats'::regclass, 'claimq.queue_latency'::regclass,
								  'pg_catalog.pg_class');

/*
 * Duties: cancel for produce and administer, snooze for work, status and
 * wait_for for all three; a fourth, observe, reads the figures and
 * changes nothing (administer includes it).
 */
DROP FUNCTION claimq.duty_functions(text);

CREATE FUNCTION claimq.duty_functions(duty text)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	keys text[] := '{"claimq.claim_keys(text, text[], interval)",'
				   '"claimq.release_keys(text, text[], bigint[])"}';
	look text[] := '{"claimq.status(bigint[])",'
				   '"claimq.wait_for(bigint[], interval)"}';
	observe text[] := '{"claimq.counters()",'
					  '"claimq.queue_latency()",'
					  '"claimq.reclaimer_status()",'
					  '"claimq.metrics()"}';
BEGIN
	CASE duty
		WHEN 'observe' THEN
			RETURN observe;
		WHEN 'produce' THEN
			RETURN keys OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) '{'
				'"claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text)",'
				'"claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[])",'
				'"claimq.cancel(bigint[])"}'::text[];
		WHEN 'work' THEN
			RETURN keys OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) '{'
				'"claimq.claim(text, integer, interval, text, boolean, interval)",'
				'"claimq.start(bigint[], bigint[], interval)",'
				'"claimq.start(bigint, bigint, interval)",'
				'"claimq.extend(bigint[], bigint[], interval)",'
				'"claimq.extend(bigint, bigint, interval)",'
				'"claimq.complete(bigint[], bigint[], jsonb[])",'
				'"claimq.complete(bigint, bigint, jsonb)",'
				'"claimq.fail(bigint[], bigint[], text, interval, boolean)",'
				'"claimq.fail(bigint, bigint, text, interval, boolean)",'
				'"claimq.release(bigint[], bigint[])",'
				'"claimq.release(bigint, bigint)",'
				'"claimq.snooze(bigint[], bigint[], interval)",'
				'"claimq.snooze(bigint, bigint, interval)",'
				'"claimq.release_worker(text, text)"}'::text[];
		WHEN 'administer' THEN
			RETURN look OPERATOR(pg_catalog.||) observe OPERATOR(pg_catalog.||) '{'
				'"claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean)",'
				'"claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean)",'
				'"claimq.drop_queue(text, boolean)",'
				'"claimq.pause_queue(text)",'
				'"claimq.resume_queue(text)",'
				'"claimq.purge_queue(text)",'
				'"claimq.cancel(bigint[])",'
				'"claimq.create_schedule(text, text, text, jsonb, text, integer, text)",'
				'"claimq.alter_schedule(text, text, text, jsonb, text, integer, text, boolean)",'
				'"claimq.drop_schedule(text)",'
				'"claimq.fire_schedules(integer)",'
				'"claimq.reclaim(text, integer)",'
				'"claimq.retry_dead(text, bigint[])",'
				'"claimq.prune(integer)",'
				'"claimq.reset_counters()"}'::text[];
		ELSE
			RAISE EXCEPTION 'unknown duty "%"', duty
				USING ERRCODE = '22023',
					  HINT = 'The duties are produce, work, administer and observe.';
	END CASE;
END
$$;

COMMENT ON FUNCTION claimq.duty_functions(text) IS
'private: the functions that make up a duty';

REVOKE ALL ON FUNCTION claimq.duty_functions(text) FROM PUBLIC;

/* Administer reads the schedules view too. */
DROP FUNCTION claimq.set_duty(regrole, text, boolean);

CREATE FUNCTION claimq.set_duty(role regrole, duty text, grant_it boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	verb text := CASE WHEN grant_it THEN 'GRANT %s ON %s TO %s'
				 ELSE 'REVOKE %s ON %s FROM %s' END;
	fn text;
BEGIN
	IF role IS NULL OR duty IS NULL THEN
		RAISE EXCEPTION 'role and duty must not be null' USING ERRCODE = '22004';
	END IF;
	IF grant_it THEN
		EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA claimq TO %s', role);
	END IF;
	FOREACH fn IN ARRAY claimq.duty_functions(duty) LOOP
		EXECUTE pg_catalog.format(verb, 'EXECUTE', 'FUNCTION ' OPERATOR(pg_catalog.||) fn, role);
	END LOOP;
	IF duty OPERATOR(pg_catalog.=) ANY ('{administer,observe}'::text[]) THEN
		EXECUTE pg_catalog.format(verb, 'SELECT',
								  'claimq.queue_stats, claimq.counters, claimq.queue_latency, claimq.reclaimer_status, claimq.schedules',
								  role);
	END IF;
	IF duty OPERATOR(pg_catalog.=) 'administer' THEN
		EXECUTE pg_catalog.format(verb, 'SELECT', 'claimq.jobs', role);
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.set_duty(regrole, text, boolean) IS
'private: grant or revoke the privileges that make up a duty';

REVOKE ALL ON FUNCTION claimq.set_duty(regrole, text, boolean) FROM PUBLIC;

COMMENT ON FUNCTION claimq.grant_duty(regrole, text) IS
'grant a role one duty: produce (enqueue, cancel, status, dedup keys), work (claim and settle jobs, status, dedup keys), administer (queues, schedules, recovery, views) or observe (read the figures and metrics only)';

DROP FUNCTION claimq.upgrade_copy_grants(oid, oid, regclass);
