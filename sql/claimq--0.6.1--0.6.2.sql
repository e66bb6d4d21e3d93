/* claimq--0.6.1--0.6.2.sql: the ledger (the census fed by claimq's own paths, a statement-level guard against other writers), flow control's rules written once, copy_grants */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.6.2'" to load this file. \quit

/*------------------------------------------------------------------------
 * 1. The ledger
 *-----------------------------------------------------------------------*/

/*------------------------------------------------------------------------
 * 2. Flow control's rules, copy_grants
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
