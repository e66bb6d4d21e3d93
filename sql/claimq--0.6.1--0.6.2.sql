/* claimq--0.6.1--0.6.2.sql: copy_grants, flow control's rules written once, the ledger (the census fed by claimq's own paths, a statement-level guard against other writers), and version(), edition(), maintain() */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.6.2'" to load this file. \quit

/*------------------------------------------------------------------------
 * 1. copy_grants, flow control's rules
 *-----------------------------------------------------------------------*/

/*
 * For the update scripts: a function or view whose signature, result or
 * body changes is created anew beside the old one and given the old one's
 * grants with copy_grants; then the old one is dropped.  A GRANT run by an
 * extension script is recorded as the object's initial privilege, which
 * pg_dump leaves out of a dump; the grants copied were made by users (with
 * grant_duty), so the object's initial privileges are put back as they
 * were, and pg_dump keeps the grants.  (The updates to 0.4, 0.5 and 0.6
 * each had a copy of their own, upgrade_copy_grants, dropped at their end.)
 */
CREATE FUNCTION claimq.copy_grants(old_oid oid, new_oid oid, catalog regclass)
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

COMMENT ON FUNCTION claimq.copy_grants(oid,oid,regclass) IS
'private: for the update scripts, give new_oid the grants of old_oid (functions with catalog pg_proc, tables and views with pg_class) and leave its initial privileges as they were';

REVOKE ALL ON FUNCTION claimq.copy_grants(oid, oid, regclass) FROM PUBLIC;

/*
 * A group's cap, the rule that FIFO means a limit of 1, in one place:
 * group_cap, src/groups.c's rule for SQL, which sync_groups and the
 * reclaimer call.
 */
CREATE FUNCTION claimq.group_cap(group_limit integer, group_fifo boolean)
RETURNS integer
LANGUAGE c IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_group_cap';

COMMENT ON FUNCTION claimq.group_cap(integer,boolean) IS
'private: how many jobs of a group may be free at a time under a queue''s group_limit and group_fifo (1 with group_fifo); NULL if its groups are not limited';

REVOKE ALL ON FUNCTION claimq.group_cap(integer, boolean) FROM PUBLIC;

/* sync_groups takes its limit from group_cap. */
ALTER FUNCTION claimq.sync_groups(integer, text[]) RENAME TO sync_groups_0_6_1;

CREATE FUNCTION claimq.sync_groups(queue_id integer, group_keys text[])
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q record;
	lim integer;
	g text;
	free integer;
	n integer;
	freed_at timestamptz;
	first_freed timestamptz;
	h record;
	u record;
BEGIN
	SELECT t.group_fifo, claimq.group_cap(t.group_limit, t.group_fifo) AS cap
	  INTO q FROM claimq.queue t
	 WHERE t.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id;
	IF NOT FOUND OR q.cap IS NULL THEN
		RETURN NULL;
	END IF;
	lim := q.cap;

	FOR g IN SELECT DISTINCT k.k COLLATE "C" FROM pg_catalog.unnest(group_keys) AS k(k)
			  WHERE k.k IS NOT NULL ORDER BY 1 LOOP
		INSERT INTO claimq.job_group AS x (queue_id, group_key)
		VALUES (sync_groups.queue_id, g)
		ON CONFLICT ON CONSTRAINT job_group_pkey
		DO UPDATE SET changes = x.changes OPERATOR(pg_catalog.+) 1;

		SELECT pg_catalog.count(*) INTO free FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
		   AND j.group_key OPERATOR(pg_catalog.=) g AND NOT j.held
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[]);

		IF free OPERATOR(pg_catalog.=) 0 AND NOT EXISTS (
			SELECT 1 FROM claimq.job j
			 WHERE j.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
			   AND j.group_key OPERATOR(pg_catalog.=) g
			   AND j.state OPERATOR(pg_catalog.=) 'pending') THEN
			DELETE FROM claimq.job_group x
			 WHERE x.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
			   AND x.group_key OPERATOR(pg_catalog.=) g;
			CONTINUE;
		END IF;

		IF free OPERATOR(pg_catalog.>) lim THEN
			UPDATE claimq.job j SET held = true
			 WHERE j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT p.ctid FROM claimq.job p
				 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
				   AND p.group_key OPERATOR(pg_catalog.=) g AND NOT p.held
				   AND p.state OPERATOR(pg_catalog.=) 'pending'
				 ORDER BY CASE WHEN q.group_fifo THEN NULL ELSE p.run_at END DESC,
						  p.job_id DESC
				 LIMIT free OPERATOR(pg_catalog.-) lim
				 FOR UPDATE SKIP LOCKED));
			GET DIAGNOSTICS n = ROW_COUNT;
			free := free OPERATOR(pg_catalog.-) n;
		ELSIF free OPERATOR(pg_catalog.<) lim THEN
			IF q.group_fifo THEN
				WITH f AS (
					UPDATE claimq.job j SET held = false
					 WHERE j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
						SELECT p.ctid FROM claimq.job p
						 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
						   AND p.group_key OPERATOR(pg_catalog.=) g AND p.held
						   AND p.state OPERATOR(pg_catalog.=) 'pending'
						 ORDER BY p.job_id
						 LIMIT lim OPERATOR(pg_catalog.-) free
						 FOR UPDATE SKIP LOCKED))
					RETURNING j.run_at)
				SELECT pg_catalog.min(f.run_at) INTO freed_at FROM f;
			ELSE
				WITH f AS (
					UPDATE claimq.job j SET held = false
					 WHERE j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
						SELECT p.ctid FROM claimq.job p
						 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
						   AND p.group_key OPERATOR(pg_catalog.=) g AND p.held
						   AND p.state OPERATOR(pg_catalog.=) 'pending'
						 ORDER BY p.run_at, p.job_id
						 LIMIT lim OPERATOR(pg_catalog.-) free
						 FOR UPDATE SKIP LOCKED))
					RETURNING j.run_at)
				SELECT pg_catalog.min(f.run_at) INTO freed_at FROM f;
			END IF;
			first_freed := LEAST(first_freed, freed_at);
		END IF;

		/* A held job before a free pending one: they change places. */
		FOR i IN 1 .. lim LOOP
			IF q.group_fifo THEN
				SELECT p.ctid, p.job_id, p.run_at INTO h FROM claimq.job p
				 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
				   AND p.group_key OPERATOR(pg_catalog.=) g AND p.held
				   AND p.state OPERATOR(pg_catalog.=) 'pending'
				 ORDER BY p.job_id LIMIT 1;
			ELSE
				SELECT p.ctid, p.job_id, p.run_at INTO h FROM claimq.job p
				 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
				   AND p.group_key OPERATOR(pg_catalog.=) g AND p.held
				   AND p.state OPERATOR(pg_catalog.=) 'pending'
				 ORDER BY p.run_at, p.job_id LIMIT 1;
			END IF;
			EXIT WHEN h.ctid IS NULL;
			SELECT p.ctid, p.job_id, p.run_at INTO u FROM claimq.job p
			 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
			   AND p.group_key OPERATOR(pg_catalog.=) g AND NOT p.held
			   AND p.state OPERATOR(pg_catalog.=) 'pending'
			   AND (p.job_id OPERATOR(pg_catalog.>) h.job_id
					OR NOT q.group_fifo)
			   AND (q.group_fifo OR p.run_at OPERATOR(pg_catalog.>) h.run_at
					OR (p.run_at OPERATOR(pg_catalog.=) h.run_at
						AND p.job_id OPERATOR(pg_catalog.>) h.job_id))
			 ORDER BY CASE WHEN q.group_fifo THEN NULL ELSE p.run_at END DESC,
					  p.job_id DESC
			 LIMIT 1
			 FOR UPDATE SKIP LOCKED;
			EXIT WHEN u.ctid IS NULL;
			UPDATE claimq.job j SET held = true WHERE j.ctid OPERATOR(pg_catalog.=) u.ctid;
			UPDATE claimq.job j SET held = false WHERE j.ctid OPERATOR(pg_catalog.=) h.ctid;
			first_freed := LEAST(first_freed, h.run_at);
		END LOOP;
	END LOOP;
	RETURN first_freed;
END
$$;

COMMENT ON FUNCTION claimq.sync_groups(integer,text[]) IS
'private: under each group''s lock, hold or free the groups'' pending jobs so that no more are free than the queue''s group limit allows, first in the group''s order; returns the earliest run_at it freed';

REVOKE ALL ON FUNCTION claimq.sync_groups(integer, text[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.sync_groups_0_6_1(integer, text[])'::regprocedure,
						  'claimq.sync_groups(integer, text[])'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.sync_groups_0_6_1(integer, text[]);

/*------------------------------------------------------------------------
 * 2. The ledger
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
ALTER FUNCTION claimq.drop_queue(text, boolean) RENAME TO drop_queue_0_6_1;
CREATE FUNCTION claimq.drop_queue(queue text, force boolean DEFAULT false)
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

COMMENT ON FUNCTION claimq.drop_queue(text,boolean) IS
'drop a queue and all its jobs; refuses (55006) while jobs are claimed or running, and (2BP01) while schedules feed it, unless force (which drops the schedules too)';

REVOKE ALL ON FUNCTION claimq.drop_queue(text, boolean) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.drop_queue_0_6_1(text, boolean)'::regprocedure,
						  'claimq.drop_queue(text, boolean)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.drop_queue_0_6_1(text, boolean);

ALTER FUNCTION claimq.purge_queue(text) RENAME TO purge_queue_0_6_1;
CREATE FUNCTION claimq.purge_queue(queue text)
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

COMMENT ON FUNCTION claimq.purge_queue(text) IS
'delete a queue''s pending jobs (ready and scheduled); returns how many';

REVOKE ALL ON FUNCTION claimq.purge_queue(text) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.purge_queue_0_6_1(text)'::regprocedure,
						  'claimq.purge_queue(text)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.purge_queue_0_6_1(text);

ALTER FUNCTION claimq.retry_dead(text, bigint[]) RENAME TO retry_dead_0_6_1;
CREATE FUNCTION claimq.retry_dead(queue text, job_ids bigint[] DEFAULT NULL)
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

COMMENT ON FUNCTION claimq.retry_dead(text,bigint[]) IS
'redrive dead jobs (all of a queue''s, or those listed) to pending with attempts reset; returns how many';

REVOKE ALL ON FUNCTION claimq.retry_dead(text, bigint[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.retry_dead_0_6_1(text, bigint[])'::regprocedure,
						  'claimq.retry_dead(text, bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.retry_dead_0_6_1(text, bigint[]);

/*------------------------------------------------------------------------
 * 3. version(), edition(), maintain()
 *-----------------------------------------------------------------------*/

/*
 * maintain: the reclaimer's pass (reclaim, fire schedules, prune, sweep
 * key claims) once, in the caller's transaction, for a scheduler to call
 * where the reclaimer does not run.
 */
CREATE FUNCTION claimq.maintain()
RETURNS TABLE(step text, count bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_maintain';

COMMENT ON FUNCTION claimq.maintain() IS
'one pass of what the reclaimer does, in one transaction: one row per step (reclaim, fire_schedules, prune, sweep_keys), each of up to 10,000 jobs or key claims';

/*
 * The release and the edition, in every duty: what a client or the plain
 * script's update asks before it relies on anything else.
 */
CREATE FUNCTION claimq.version()
RETURNS text
LANGUAGE c STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_version';

COMMENT ON FUNCTION claimq.version() IS
'the release of claimq whose schema the library serves';

CREATE FUNCTION claimq.edition()
RETURNS text
LANGUAGE c STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_edition';

COMMENT ON FUNCTION claimq.edition() IS
'the edition of claimq installed: c (this one) or portable';

REVOKE ALL ON FUNCTION claimq.maintain() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.version() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.edition() FROM PUBLIC;

/* version() and edition() join every duty, maintain() administer. */
ALTER FUNCTION claimq.duty_functions(text) RENAME TO duty_functions_0_6_1;

CREATE FUNCTION claimq.duty_functions(duty text)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	keys text[] := '{"claimq.claim_keys(text, text[], interval)",'
				   '"claimq.release_keys(text, text[], bigint[])"}';
	look text[] := '{"claimq.status(bigint[])",'
				   '"claimq.wait_for(bigint[], interval)",'
				   '"claimq.node_of(bigint)"}';
	observe text[] := '{"claimq.counters()",'
					  '"claimq.queue_latency()",'
					  '"claimq.reclaimer_status()",'
					  '"claimq.metrics()"}';
	every text[] := '{"claimq.version()",'
					'"claimq.edition()"}';
BEGIN
	CASE duty
		WHEN 'observe' THEN
			RETURN every OPERATOR(pg_catalog.||) observe;
		WHEN 'produce' THEN
			RETURN every OPERATOR(pg_catalog.||) keys OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) '{'
				'"claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text)",'
				'"claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[])",'
				'"claimq.cancel(bigint[])"}'::text[];
		WHEN 'work' THEN
			RETURN every OPERATOR(pg_catalog.||) keys OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) '{'
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
			RETURN every OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) observe OPERATOR(pg_catalog.||) '{'
				'"claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval)",'
				'"claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval)",'
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
				'"claimq.maintain()",'
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

SELECT claimq.copy_grants('claimq.duty_functions_0_6_1(text)'::regprocedure,
						  'claimq.duty_functions(text)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.duty_functions_0_6_1(text);

/*
 * The roles that hold a duty get its new functions: those that may run a
 * function of that duty that no other duty has (enqueue for produce, claim
 * for work, create_queue for administer; counters for observe, which
 * administer includes).
 */
SELECT claimq.copy_grants(d.holder, f, 'pg_catalog.pg_proc')
  FROM pg_catalog.unnest(ARRAY[
	'claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text)'::regprocedure,
	'claimq.claim(text, integer, interval, text, boolean, interval)'::regprocedure,
	'claimq.counters()'::regprocedure]) AS d(holder)
 CROSS JOIN pg_catalog.unnest(ARRAY[
	'claimq.version()'::regprocedure,
	'claimq.edition()'::regprocedure]) AS f;

SELECT claimq.copy_grants(
	'claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval)'::regprocedure,
	'claimq.maintain()'::regprocedure,
	'pg_catalog.pg_proc');
