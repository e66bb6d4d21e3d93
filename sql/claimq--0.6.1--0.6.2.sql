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
