-- Privileges and hardening: PUBLIC gets nothing, every function pins its
-- search_path and is commented, tables and sequences are dumped, and a role
-- without grants is refused with 42501.
-- install: extension only: it finds claimq's objects through the extension's membership (pg_depend); the plain script installs no extension
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(66);

-- The functions and relations that belong to the extension.
CREATE TEMP VIEW ext_functions AS
SELECT p.oid, p.oid::regprocedure::text AS name, p.proacl, p.proconfig
  FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
 WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
   AND d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'claimq');
CREATE TEMP VIEW ext_relations AS
SELECT c.oid, c.oid::regclass::text AS name, c.relkind, c.relacl
  FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
 WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'e'
   AND d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'claimq');

SELECT cmp_ok((SELECT count(*) FROM ext_functions), '>=', 25::bigint,
	'the extension has its functions');

-- Every function is in a duty, or is marked private and in none; only the
-- two that hand duties out (the superuser's) are neither.
SELECT is(ARRAY(
	SELECT f.name FROM ext_functions f
	 WHERE EXISTS (SELECT 1 FROM unnest('{produce,work,administer,observe}'::text[]) d,
						 unnest(claimq.duty_functions(d)) x
				   WHERE x::regprocedure = f.oid)
		 = (coalesce(obj_description(f.oid, 'pg_proc'), '') ~ '^private( \(portable edition\))?:')
	 ORDER BY 1),
	'{"claimq.grant_duty(regrole,text)","claimq.revoke_duty(regrole,text)"}'::text[],
	'every function is in a duty or marked private, never both (grant_duty and revoke_duty aside)');
SELECT is(ARRAY(SELECT name FROM ext_relations WHERE relkind IN ('r', 'v', 'S') ORDER BY name)
		  @> ARRAY['claimq.job', 'claimq.job_id_seq', 'claimq.jobs', 'claimq.queue',
				   'claimq.queue_id_seq', 'claimq.queue_stats', 'claimq.token_seq'],
	true, 'the extension has its tables, views and sequences');

--
-- PUBLIC gets nothing
--
SELECT is(ARRAY(SELECT name FROM ext_functions
				 WHERE has_function_privilege('public', oid, 'EXECUTE') ORDER BY name),
	'{}'::text[], 'PUBLIC may execute no claimq function');
SELECT is(ARRAY(SELECT name FROM ext_functions f
				 WHERE f.proacl IS NULL
					OR EXISTS (SELECT FROM aclexplode(f.proacl) a WHERE a.grantee = 0)
				 ORDER BY name),
	'{}'::text[], 'no claimq function has an ACL entry for PUBLIC');
SELECT is(ARRAY(SELECT name FROM ext_relations
				 WHERE CASE WHEN relkind IN ('r', 'v', 'm', 'p', 'f')
							THEN has_table_privilege('public', oid,
									'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
								 OR has_any_column_privilege('public', oid,
									'SELECT, INSERT, UPDATE, REFERENCES') END
				 ORDER BY name),
	'{}'::text[], 'PUBLIC has no privilege on any claimq table or view');
SELECT is(ARRAY(SELECT name FROM ext_relations
				 WHERE CASE WHEN relkind = 'S'
							THEN has_sequence_privilege('public', oid, 'USAGE, SELECT, UPDATE') END
				 ORDER BY name),
	'{}'::text[], 'PUBLIC has no privilege on any claimq sequence');
SELECT is(ARRAY(SELECT name FROM ext_relations r
				 WHERE r.relacl IS NULL
					OR EXISTS (SELECT FROM aclexplode(r.relacl) a WHERE a.grantee = 0)
				 ORDER BY name),
	'{}'::text[], 'no claimq relation has an ACL entry for PUBLIC');
SELECT is(ARRAY(SELECT t.oid::regtype::text FROM pg_type t
				 WHERE t.typnamespace = 'claimq'::regnamespace AND t.typtype = 'd'
				   AND (t.typacl IS NULL OR has_type_privilege('public', t.oid, 'USAGE'))
				 ORDER BY 1),
	'{}'::text[], 'PUBLIC may use no claimq domain');
SELECT ok(NOT has_schema_privilege('public', 'claimq', 'USAGE'),
	'PUBLIC has no USAGE on schema claimq');
SELECT ok(NOT has_schema_privilege('public', 'claimq', 'CREATE'),
	'PUBLIC has no CREATE on schema claimq');

--
-- Hardening
--
-- The census's trigger is the one exception: a SET clause would cost
-- every statement that writes jobs, and it resolves no name through the
-- search path (its one statement, after a write that is not claimq's own,
-- is schema-qualified).
SELECT is(ARRAY(SELECT name FROM ext_functions
				 WHERE (proconfig IS NULL
						OR NOT proconfig @> ARRAY['search_path=pg_catalog, pg_temp'])
				   AND name <> 'claimq.job_census()'
				 ORDER BY name),
	'{}'::text[], 'every claimq function pins search_path to pg_catalog, pg_temp');
SELECT CASE WHEN claimq.edition() = 'c' THEN is((SELECT l.lanname = 'c'
			 FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
			WHERE p.oid = 'claimq.job_census()'::regprocedure),
	true, 'the exception is the C trigger function')
	ELSE skip('C edition only: the census''s trigger (the portable edition keeps no census)') END;
SELECT is(ARRAY(SELECT name FROM ext_functions
				 WHERE obj_description(oid, 'pg_proc') IS NULL ORDER BY name),
	'{}'::text[], 'every claimq function has a comment');
SELECT is(ARRAY(SELECT name FROM ext_relations
				 WHERE relkind = 'v' AND obj_description(oid, 'pg_class') IS NULL ORDER BY name),
	'{}'::text[], 'every claimq view has a comment');
SELECT is(ARRAY(SELECT name FROM ext_relations
				 WHERE relkind IN ('r', 'S') AND name <> 'claimq.lifetime'
				   AND oid <> ALL ((SELECT extconfig FROM pg_extension WHERE extname = 'claimq')::oid[])
				 ORDER BY name),
	'{}'::text[], 'every claimq table and sequence is registered with pg_extension_config_dump, but the unlogged marker of the server lifetime (a restore is a new one)');
SELECT ok((SELECT extconfig @> ARRAY['claimq.queue'::regclass, 'claimq.job'::regclass]::oid[]
			 FROM pg_extension WHERE extname = 'claimq'),
	'the queue and job tables are among them');
SELECT ok(NOT extrelocatable, 'the extension is not relocatable')
  FROM pg_extension WHERE extname = 'claimq';
SELECT is((SELECT n.nspname::text FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
			WHERE e.extname = 'claimq'), 'claimq', 'the extension lives in schema claimq');

-- The install and update scripts: no CREATE OR REPLACE, no IF NOT EXISTS,
-- a psql guard.
CREATE TEMP TABLE script AS
SELECT string_agg(pg_read_file(d || '/' || f), E'\n' ORDER BY f) AS body,
	   count(*) AS n,
	   count(*) FILTER (WHERE pg_read_file(d || '/' || f) ~ '\\echo [^\n]*\\quit') AS guarded
  FROM (SELECT (SELECT setting FROM pg_config WHERE name = 'SHAREDIR') || '/extension' AS d) x,
	   pg_ls_dir((SELECT setting FROM pg_config WHERE name = 'SHAREDIR') || '/extension') f
 WHERE f ~ '^claimq--.*\.sql$';
SELECT CASE WHEN claimq.edition() = 'c' THEN ok(body !~* 'create\s+or\s+replace', 'the install script has no CREATE OR REPLACE')
	ELSE skip('C edition only: its install scripts are files in the server''s extension directory') END
  FROM script;
SELECT CASE WHEN claimq.edition() = 'c' THEN ok(body !~* 'if\s+not\s+exists', 'the install script has no IF NOT EXISTS')
	ELSE skip('C edition only: its install scripts are files in the server''s extension directory') END
  FROM script;
SELECT CASE WHEN claimq.edition() = 'c' THEN ok(n >= 2 AND guarded = n, 'the install script refuses to run from psql')
	ELSE skip('C edition only: its install scripts are files in the server''s extension directory') END
  FROM script;

--
-- A role without grants is refused with 42501
--
CREATE ROLE regress_claimq_nobody;
CREATE ROLE regress_claimq_usage;
GRANT USAGE ON SCHEMA claimq TO regress_claimq_usage;
SELECT lives_ok($$SELECT claimq.create_queue('sec')$$, 'create queue sec');
SELECT claimq.enqueue('sec', '{}') AS sec_job \gset
SELECT ok(:sec_job > 0, 'enqueue a job');
-- Run q as role r; an error rolls the role back with the subtransaction.
CREATE FUNCTION pg_temp.as_role(r text, q text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('SET LOCAL ROLE %I', r);
	EXECUTE q;
	RESET ROLE;
END
$$;
SELECT throws_ok(format('SELECT pg_temp.as_role(%L, %L)', r, c), '42501', NULL,
	format('%s: %s raises 42501', r, c))
  FROM unnest(ARRAY['regress_claimq_nobody', 'regress_claimq_usage']) r,
	   unnest(ARRAY[
		'SELECT * FROM claimq.claim(''sec'')',
		'SELECT claimq.enqueue(''sec'', ''{}'')',
		'SELECT claimq.enqueue_many(''sec'', ARRAY[''{}''::jsonb])',
		'SELECT claimq.create_queue(''sec_x'')',
		'SELECT claimq.alter_queue(''sec'', lease => ''1 minute'')',
		'SELECT claimq.drop_queue(''sec'', force => true)',
		'SELECT claimq.pause_queue(''sec'')',
		'SELECT claimq.purge_queue(''sec'')',
		'SELECT * FROM claimq.complete(ARRAY[1]::bigint[], ARRAY[1]::bigint[])',
		'SELECT claimq.complete(1::bigint, 1::bigint)',
		'SELECT claimq.release_worker(''sec'', ''w'')',
		'SELECT * FROM claimq.reclaim()',
		'SELECT claimq.retry_dead(''sec'')',
		'SELECT * FROM claimq.job',
		'SELECT * FROM claimq.queue',
		'SELECT * FROM claimq.queue_stats',
		'SELECT * FROM claimq.jobs',
		'UPDATE claimq.job SET state = ''dead''',
		'DELETE FROM claimq.queue',
		'SELECT nextval(''claimq.token_seq'')']) c;
SELECT is(current_user::text, session_user::text, 'the session is back to its own role');
SELECT results_eq(format('SELECT state FROM claimq.jobs WHERE job_id = %s', :sec_job),
	ARRAY['pending'], 'the refused calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
