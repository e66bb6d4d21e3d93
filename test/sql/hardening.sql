-- Least privilege and hostile callers.  PUBLIC may execute nothing; each
-- duty (grant_duty) gives a role exactly its functions and nothing else, and
-- no duty can touch queue rows except through them; a caller's search_path
-- full of look-alike functions, operators and tables runs no code of the
-- caller's in any claimq call; CREATE EXTENSION does not move into a claimq
-- schema that somebody else created.  Everything happens in one transaction
-- that is rolled back, roles included.
-- install: extension only: it finds claimq's objects through the extension's membership (pg_depend); the plain script installs no extension
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(367);

-- The functions and relations that belong to the extension.
CREATE TEMP VIEW hard_functions AS
SELECT p.oid, p.oid::regprocedure::text AS name, p.proacl
  FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
 WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
   AND d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'claimq');
CREATE TEMP VIEW hard_relations AS
SELECT c.oid, c.oid::regclass::text AS name, c.relkind
  FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
 WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'e'
   AND d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'claimq');

--
-- PUBLIC, function by function: the lists name every offender
--
SELECT cmp_ok((SELECT count(*) FROM hard_functions), '>=', 30::bigint,
	'the extension''s functions are found through pg_depend');
SELECT is(ARRAY(SELECT name FROM hard_functions
				 WHERE has_function_privilege('public', oid, 'EXECUTE')
				 ORDER BY name COLLATE "C"),
	'{}'::text[], 'PUBLIC can execute none of them (has_function_privilege)');
SELECT is(ARRAY(SELECT f.name FROM hard_functions f
				 WHERE f.proacl IS NULL
					OR EXISTS (SELECT FROM aclexplode(f.proacl) a
								WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
				 ORDER BY f.name COLLATE "C"),
	'{}'::text[], 'no function''s ACL (aclexplode) grants EXECUTE to PUBLIC');

--
-- The duties: four roles, one with no duty and one per duty
--
CREATE ROLE regress_claimq_hard_nobody;
CREATE ROLE regress_claimq_hard_producer;
CREATE ROLE regress_claimq_hard_worker;
CREATE ROLE regress_claimq_hard_admin;
-- The role without a duty may use the schema: it still gets nothing.
GRANT USAGE ON SCHEMA claimq TO regress_claimq_hard_nobody;
SELECT lives_ok($$SELECT claimq.grant_duty('regress_claimq_hard_producer', 'produce')$$,
	'grant the produce duty');
SELECT lives_ok($$SELECT claimq.grant_duty('regress_claimq_hard_worker', 'work')$$,
	'grant the work duty');
SELECT lives_ok($$SELECT claimq.grant_duty('regress_claimq_hard_admin', 'administer')$$,
	'grant the administer duty');

-- Exactly these functions, per duty.
SELECT is(ARRAY(SELECT name FROM hard_functions
				 WHERE has_function_privilege(r, oid, 'EXECUTE') ORDER BY name COLLATE "C"),
		  want, format('%s may execute exactly its duty''s functions', r))
  FROM (VALUES
	('regress_claimq_hard_nobody', '{}'::text[]),
	('regress_claimq_hard_producer', ARRAY[
		'claimq.cancel(bigint[],text)',
		'claimq.claim_keys(text,text[],interval)',
		'claimq.dependencies(bigint[],text)',
		'claimq.edition()',
		'claimq.enqueue(text,jsonb,timestamp with time zone,integer,text,integer,text,text,bigint[],text,jsonb)',
		'claimq.enqueue_many(text,jsonb[],timestamp with time zone,integer,text[],integer,text,text[],bigint[],text,jsonb[])',
		'claimq.node_of(bigint)',
		'claimq.release_keys(text,text[],bigint[])',
		'claimq.status(bigint[],text)',
		'claimq.version()',
		'claimq.wait_for(bigint[],interval,text)']),
	('regress_claimq_hard_worker', ARRAY[
		'claimq.claim(text,integer,interval,text,boolean,interval)',
		'claimq.claim_keys(text,text[],interval)',
		'claimq.complete(bigint,bigint,jsonb,text)',
		'claimq.complete(bigint[],bigint[],jsonb[],text)',
		'claimq.dependencies(bigint[],text)',
		'claimq.edition()',
		'claimq.extend(bigint,bigint,interval,text)',
		'claimq.extend(bigint[],bigint[],interval,text)',
		'claimq.fail(bigint,bigint,text,interval,boolean,text)',
		'claimq.fail(bigint[],bigint[],text,interval,boolean,text)',
		'claimq.node_of(bigint)',
		'claimq.release(bigint,bigint,text)',
		'claimq.release(bigint[],bigint[],text)',
		'claimq.release_keys(text,text[],bigint[])',
		'claimq.release_worker(text,text)',
		'claimq.snooze(bigint,bigint,interval,text)',
		'claimq.snooze(bigint[],bigint[],interval,text)',
		'claimq.start(bigint,bigint,interval,text)',
		'claimq.start(bigint[],bigint[],interval,text)',
		'claimq.status(bigint[],text)',
		'claimq.version()',
		'claimq.wait_for(bigint[],interval,text)']),
	-- cluster_queue_stats(), distribute() and update_distributed() are the C
	-- edition's alone (Citus).
	('regress_claimq_hard_admin', ARRAY(SELECT f FROM pg_catalog.unnest(
		CASE WHEN claimq.edition() = 'c' THEN ARRAY['claimq.cluster_queue_stats()', 'claimq.distribute(integer)', 'claimq.update_distributed()'] ELSE '{}' END || ARRAY[
		'claimq.alter_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean)',
		'claimq.alter_schedule(text,text,text,jsonb,text,integer,text,boolean,jsonb)',
		'claimq.cancel(bigint[],text)',
		'claimq.counters()',
		'claimq.create_queue(text,interval,interval,integer,interval,interval,interval,interval,boolean,integer,boolean,integer,integer,interval,boolean)',
		'claimq.create_schedule(text,text,text,jsonb,text,integer,text,jsonb)',
		'claimq.dependencies(bigint[],text)',
		'claimq.drop_queue(text,boolean)',
		'claimq.drop_schedule(text)',
		'claimq.edition()',
		'claimq.fire_schedules(integer)',
		'claimq.maintain()',
		'claimq.metrics()',
		'claimq.node_of(bigint)',
		'claimq.pause_queue(text)',
		'claimq.prune(integer)',
		'claimq.purge_queue(text)',
		'claimq.queue_latency()',
		'claimq.reclaim(text,integer)',
		'claimq.reclaimer_status()',
		'claimq.reset_counters()',
		'claimq.resume_queue(text)',
		'claimq.retry_dead(text,bigint[])',
		'claimq.set_group_weight(text,text,real)',
		'claimq.status(bigint[],text)',
		'claimq.version()',
		'claimq.wait_for(bigint[],interval,text)']) f ORDER BY f COLLATE "C"))) AS d(r, want)
 ORDER BY r COLLATE "C";

-- No privilege on any table or sequence; administer reads the four views.
SELECT is(ARRAY(SELECT rel.name || ':' || p
				  FROM hard_relations rel,
					   unnest(CASE WHEN rel.relkind = 'S' THEN '{USAGE,SELECT,UPDATE}'::text[]
								   ELSE '{SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER}' END) p
				 WHERE CASE WHEN rel.relkind = 'S' THEN has_sequence_privilege(r, rel.oid, p)
							ELSE has_table_privilege(r, rel.oid, p) END
				 ORDER BY (rel.name || ':' || p) COLLATE "C"),
		  want, format('%s has exactly the relation privileges of its duty', r))
  FROM (VALUES
	('regress_claimq_hard_nobody', '{}'::text[]),
	('regress_claimq_hard_producer', '{}'),
	('regress_claimq_hard_worker', '{}'),
	('regress_claimq_hard_admin', '{claimq.counters:SELECT,claimq.group_stats:SELECT,claimq.jobs:SELECT,claimq.queue_latency:SELECT,claimq.queue_stats:SELECT,claimq.reclaimer_status:SELECT,claimq.schedules:SELECT}')) AS d(r, want)
 ORDER BY r COLLATE "C";
SELECT ok(NOT has_schema_privilege(r, 'claimq', 'CREATE'),
		  format('%s cannot create objects in schema claimq', r))
  FROM unnest(ARRAY['regress_claimq_hard_nobody', 'regress_claimq_hard_producer',
					'regress_claimq_hard_worker', 'regress_claimq_hard_admin']) r;

-- Run q as role r, discarding its rows; an error undoes the role switch
-- with the subtransaction of the caller (lives_ok, throws_ok).
CREATE FUNCTION pg_temp.run_as(r text, q text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('SET LOCAL ROLE %I', r);
	EXECUTE q;
	RESET ROLE;
END
$$;
-- The rows of query q run as role r, each as jsonb.
CREATE FUNCTION pg_temp.query_as(r text, q text) RETURNS SETOF jsonb LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('SET LOCAL ROLE %I', r);
	RETURN QUERY EXECUTE format('SELECT to_jsonb(t) FROM (%s) t', q);
	RESET ROLE;
END
$$;

-- Queues for the calls below: hq_idle stays empty, hq gets real work.
SELECT claimq.create_queue('hq_idle');
SELECT claimq.create_queue('hq');

-- Every call, with the duties that may make it.  A role with one of them
-- must succeed; every other role must get 42501.  Calls with unknown jobs
-- or tokens are enough here: the privilege check comes before anything.
CREATE TEMP TABLE hard_calls(ord serial, duties text[], call text);
INSERT INTO hard_calls(duties, call) VALUES
	-- produce
	('{produce}', $$SELECT claimq.enqueue('hq_idle', '{}', run_at => 'infinity')$$),
	('{produce}', $$SELECT * FROM claimq.enqueue_many('hq_idle', ARRAY['{}']::jsonb[], run_at => 'infinity')$$),
	('{produce,work}', $$SELECT * FROM claimq.claim_keys('hard', ARRAY['k'], '1 minute')$$),
	('{produce,work}', $$SELECT * FROM claimq.release_keys('hard', ARRAY['k'], ARRAY[0]::bigint[])$$),
	-- work
	('{work}', $$SELECT * FROM claimq.claim('hq_idle', 10, worker => 'matrix')$$),
	('{work}', $$SELECT * FROM claimq.start(ARRAY[0]::bigint[], ARRAY[0]::bigint[])$$),
	('{work}', $$SELECT claimq.start(0::bigint, 0::bigint)$$),
	('{work}', $$SELECT * FROM claimq.extend(ARRAY[0]::bigint[], ARRAY[0]::bigint[])$$),
	('{work}', $$SELECT claimq.extend(0::bigint, 0::bigint)$$),
	('{work}', $$SELECT * FROM claimq.complete(ARRAY[0]::bigint[], ARRAY[0]::bigint[])$$),
	('{work}', $$SELECT claimq.complete(0::bigint, 0::bigint)$$),
	('{work}', $$SELECT * FROM claimq.fail(ARRAY[0]::bigint[], ARRAY[0]::bigint[], 'boom')$$),
	('{work}', $$SELECT claimq.fail(0::bigint, 0::bigint, 'boom')$$),
	('{work}', $$SELECT * FROM claimq.release(ARRAY[0]::bigint[], ARRAY[0]::bigint[])$$),
	('{work}', $$SELECT claimq.release(0::bigint, 0::bigint)$$),
	('{work}', $$SELECT claimq.release_worker('hq_idle', 'matrix')$$),
	('{work}', $$SELECT * FROM claimq.snooze(ARRAY[0]::bigint[], ARRAY[0]::bigint[], '1 second')$$),
	('{work}', $$SELECT claimq.snooze(0::bigint, 0::bigint, '1 second')$$),
	-- job control
	('{produce,administer}', $$SELECT * FROM claimq.cancel(ARRAY[0]::bigint[])$$),
	('{produce,work,administer}', $$SELECT * FROM claimq.status(ARRAY[0]::bigint[])$$),
	('{produce,work,administer}', $$SELECT * FROM claimq.wait_for(ARRAY[0]::bigint[], '0')$$),
	-- administer
	('{administer}', $$SELECT claimq.create_queue('hq_made')$$),
	('{administer}', $$SELECT claimq.alter_queue('hq_made', lease => '1 minute')$$),
	('{administer}', $$SELECT claimq.pause_queue('hq_made')$$),
	('{administer}', $$SELECT claimq.resume_queue('hq_made')$$),
	('{administer}', $$SELECT claimq.purge_queue('hq_made')$$),
	('{administer}', $$SELECT * FROM claimq.reclaim('hq_made')$$),
	('{administer}', $$SELECT claimq.retry_dead('hq_made')$$),
	('{administer}', $$SELECT claimq.prune()$$),
	('{administer}', $$SELECT * FROM claimq.counters()$$),
	('{administer}', $$SELECT claimq.reset_counters()$$),
	('{administer}', $$SELECT * FROM claimq.reclaimer_status()$$),
	('{administer}', $$SELECT claimq.create_schedule('hs_made', 'hq_made', '@daily')$$),
	('{administer}', $$SELECT claimq.alter_schedule('hs_made', enabled => false)$$),
	('{administer}', $$SELECT claimq.fire_schedules()$$),
	('{administer}', $$SELECT * FROM claimq.schedules$$),
	('{administer}', $$SELECT claimq.drop_schedule('hs_made')$$),
	('{administer}', $$SELECT claimq.drop_queue('hq_made')$$),
	('{administer}', $$SELECT * FROM claimq.queue_stats$$),
	('{administer}', $$SELECT * FROM claimq.jobs$$),
	('{administer}', $$SELECT * FROM claimq.counters$$),
	('{administer}', $$SELECT * FROM claimq.reclaimer_status$$),
	-- nobody: handing out duties, the private helpers, the rows themselves
	('{}', $$SELECT claimq.grant_duty(current_user::regrole, 'administer')$$),
	('{}', $$SELECT claimq.revoke_duty('regress_claimq_hard_worker', 'work')$$),
	('{}', $$SELECT claimq.duty_functions('work')$$),
	('{}', $$SELECT claimq.check_queue_name('hq')$$),
	('{}', $$SELECT claimq.lock_queue('hq')$$),
	('{}', $$SELECT claimq.ledger_wake(1, true, true)$$),
	('{}', $$SELECT claimq.ledger_note(1, NULL, '{pending}', '{1}')$$),
	('{}', $$SELECT claimq.ledger_end()$$),
	('{}', $$SELECT claimq.cron_next('@daily', 'UTC', now())$$),
	('{}', $$SELECT * FROM claimq.latency_histogram()$$),
	('{}', $$SELECT * FROM claimq.schedule$$),
	('{}', $$SELECT * FROM claimq.job$$),
	('{}', $$INSERT INTO claimq.job (run_at, enqueued_at, queue_id, state, payload) SELECT now(), now(), 1, 'pending', '{}'$$),
	('{}', $$UPDATE claimq.job SET state = 'dead'$$),
	('{}', $$DELETE FROM claimq.job$$),
	('{}', $$TRUNCATE claimq.job$$),
	('{}', $$SELECT * FROM claimq.queue$$),
	('{}', $$INSERT INTO claimq.queue (name, lease, run_lease, max_attempts, retry_base, retry_max, keep_done, keep_dead, notify) VALUES ('evil', '1s', '1s', 1, '1s', '1s', '0', '0', false)$$),
	('{}', $$UPDATE claimq.queue SET paused = true$$),
	('{}', $$DELETE FROM claimq.queue$$),
	('{}', $$INSERT INTO claimq.key_claim VALUES ('hard', 'k', 1, 'infinity')$$),
	('{}', $$DELETE FROM claimq.key_claim$$),
	('{}', $$SELECT nextval('claimq.token_seq')$$),
	('{}', $$SELECT setval('claimq.token_seq', 1)$$),
	('{}', $$SELECT setval('claimq.job_id_seq', 1)$$);

SELECT CASE WHEN d.duty = ANY (c.duties)
			THEN lives_ok(format('SELECT pg_temp.run_as(%L, %L)', d.r, c.call),
						  format('%s may: %s', d.duty, c.call))
			ELSE throws_ok(format('SELECT pg_temp.run_as(%L, %L)', d.r, c.call), '42501', NULL,
						   format('%s gets 42501: %s', d.duty, c.call)) END
  FROM hard_calls c,
	   (VALUES (1, 'regress_claimq_hard_nobody', 'no duty'),
			   (2, 'regress_claimq_hard_producer', 'produce'),
			   (3, 'regress_claimq_hard_worker', 'work'),
			   (4, 'regress_claimq_hard_admin', 'administer')) AS d(n, r, duty)
 ORDER BY c.ord, d.n;
SELECT is(current_user::text, session_user::text, 'the session is back to its own role');
SELECT is((SELECT count(*) FROM claimq.jobs WHERE queue = 'hq_idle'), 2::bigint,
	'the producer''s two jobs are there, nobody else changed a row');
SELECT ok(NOT EXISTS (SELECT FROM claimq.queue WHERE name IN ('hq_made', 'evil')),
	'the administrator''s queue is gone again, the direct insert never happened');

--
-- A real round as the duty roles: the producer enqueues, the worker claims,
-- starts, extends, completes, fails and releases with its tokens, the
-- administrator watches.
--
SELECT ids[1] AS a, ids[2] AS b, ids[3] AS c
  FROM (SELECT array_agg(r->>'id') AS ids
		  FROM pg_temp.query_as('regress_claimq_hard_producer',
				$$SELECT claimq.enqueue_many('hq', ARRAY['{"n":1}', '{"n":2}', '{"n":3}']::jsonb[]) AS id$$) r) s \gset
SELECT max(r->>'token') FILTER (WHERE r->>'job_id' = :'a') AS ta,
	   max(r->>'token') FILTER (WHERE r->>'job_id' = :'b') AS tb,
	   max(r->>'token') FILTER (WHERE r->>'job_id' = :'c') AS tc,
	   count(*) AS nclaimed
  FROM pg_temp.query_as('regress_claimq_hard_worker',
		$$SELECT * FROM claimq.claim('hq', 3, worker => 'hard-w1')$$) r \gset
SELECT is(:nclaimed::bigint, 3::bigint, 'the worker claims the producer''s three jobs');
SELECT is(ARRAY(SELECT r->>'outcome' FROM pg_temp.query_as('regress_claimq_hard_worker',
		format('SELECT * FROM claimq.start(ARRAY[%s, %s]::bigint[], ARRAY[%s, %s]::bigint[])', :a, :b, :ta, :tb)) r),
	'{ok,ok}', 'the worker starts two of them');
SELECT is(ARRAY(SELECT r->>'outcome' FROM pg_temp.query_as('regress_claimq_hard_worker',
		format('SELECT * FROM claimq.extend(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], ''1 hour'')', :a, :ta)) r),
	'{ok}', 'the worker extends one');
SELECT is(ARRAY(SELECT r->>'outcome' FROM pg_temp.query_as('regress_claimq_hard_worker',
		format('SELECT * FROM claimq.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])', :a, :ta)) r),
	'{ok}', 'the worker completes it');
SELECT is(ARRAY(SELECT (r->>'outcome') || ':' || (r->>'state') FROM pg_temp.query_as('regress_claimq_hard_worker',
		format('SELECT * FROM claimq.fail(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], ''boom'', ''1 hour'')', :b, :tb)) r),
	'{ok:pending}', 'the worker fails the other started one');
SELECT is(ARRAY(SELECT r->>'outcome' FROM pg_temp.query_as('regress_claimq_hard_worker',
		format('SELECT * FROM claimq.release(ARRAY[%s, %s]::bigint[], ARRAY[%s, %s]::bigint[])', :b, :c, :tb, :tc)) r),
	'{stale,ok}', 'the worker releases the unstarted one; the failed one is not its any more');
SELECT is(ARRAY(SELECT r->>'outcome' FROM pg_temp.query_as('regress_claimq_hard_worker',
		format('SELECT * FROM claimq.complete(ARRAY[%s, %s]::bigint[], ARRAY[%s, %s]::bigint[])', :a, :c, :ta, :tc)) r),
	'{missing,stale}', 'old tokens settle nothing');
SELECT is(ARRAY(SELECT (r->>'released')::bigint FROM pg_temp.query_as('regress_claimq_hard_worker', $$
		SELECT claimq.release_worker('hq', 'hard-w1') AS released FROM claimq.claim('hq', worker => 'hard-w1')$$) r),
	'{1}'::bigint[], 'the worker claims again and releases everything it holds at shutdown');
SELECT is(ARRAY(SELECT format('%s/%s/%s/%s/%s', r->>'ready', r->>'scheduled', r->>'claimed', r->>'running', r->>'dead')
		  FROM pg_temp.query_as('regress_claimq_hard_admin',
			$$SELECT * FROM claimq.queue_stats WHERE queue = 'hq'$$) r),
	'{1/1/0/0/0}', 'the administrator sees one ready and one scheduled job');
SELECT is(ARRAY(SELECT r->>'last_error' FROM pg_temp.query_as('regress_claimq_hard_admin',
		format('SELECT * FROM claimq.jobs WHERE job_id = %s', :b)) r),
	'{boom}', 'and the error of the failed one');

-- revoke_duty takes the duty back.
SELECT lives_ok($$SELECT claimq.revoke_duty('regress_claimq_hard_worker', 'work')$$,
	'revoke the work duty');
SELECT throws_ok(format('SELECT pg_temp.run_as(%L, %L)', 'regress_claimq_hard_worker',
		$$SELECT * FROM claimq.claim('hq')$$), '42501', NULL,
	'the worker without its duty gets 42501 from claim');
SELECT is(ARRAY(SELECT name FROM hard_functions
				 WHERE has_function_privilege('regress_claimq_hard_worker', oid, 'EXECUTE')),
	'{}'::text[], 'and may execute no function at all');
SELECT lives_ok($$SELECT claimq.grant_duty('regress_claimq_hard_worker', 'work')$$,
	'grant the work duty again');

--
-- A hostile search_path.  An unprivileged role makes a schema of
-- look-alikes: now(), clock_timestamp(), nextval(), unnest(), the =, < and
-- <= operators, and tables job, queue and key_claim, each recording that it
-- was used.  Every claimq call then runs with that schema first on the
-- search_path; nothing may be recorded.  Temporary views job, queue and
-- key_claim do the same for the pg_temp that a pinned search_path ends in.
--
CREATE ROLE regress_claimq_hard_attacker;
DO $$BEGIN
	EXECUTE format('GRANT CREATE ON DATABASE %I TO regress_claimq_hard_attacker',
				   current_database());
END$$;
SET LOCAL ROLE regress_claimq_hard_attacker;
CREATE SCHEMA hard_attacker;
CREATE TABLE hard_attacker.calls(what text, by_user name DEFAULT current_user);
GRANT USAGE ON SCHEMA hard_attacker TO PUBLIC;
GRANT INSERT ON hard_attacker.calls TO PUBLIC;
CREATE FUNCTION hard_attacker.spy(w text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO hard_attacker.calls(what) VALUES (w);
	RETURN true;
END
$$;
CREATE FUNCTION hard_attacker.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('now()');
	RETURN pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 day';
END
$$;
CREATE FUNCTION hard_attacker.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('clock_timestamp()');
	RETURN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) interval '1 day';
END
$$;
CREATE FUNCTION hard_attacker.nextval(regclass) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('nextval(regclass)');
	RETURN 1;
END
$$;
CREATE FUNCTION hard_attacker.nextval(text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('nextval(text)');
	RETURN 1;
END
$$;
CREATE FUNCTION hard_attacker.unnest(anyarray) RETURNS SETOF anyelement LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('unnest(anyarray)');
	RETURN QUERY SELECT * FROM pg_catalog.unnest($1);
END
$$;
CREATE FUNCTION hard_attacker.eq_bigint(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('= (bigint, bigint)');
	RETURN $1 OPERATOR(pg_catalog.=) $2;
END
$$;
CREATE FUNCTION hard_attacker.eq_int(integer, integer) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('= (integer, integer)');
	RETURN $1 OPERATOR(pg_catalog.=) $2;
END
$$;
CREATE FUNCTION hard_attacker.eq_text(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('= (text, text)');
	RETURN $1 OPERATOR(pg_catalog.=) $2;
END
$$;
CREATE FUNCTION hard_attacker.lt_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('< (timestamptz, timestamptz)');
	RETURN $1 OPERATOR(pg_catalog.<) $2;
END
$$;
CREATE FUNCTION hard_attacker.le_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM hard_attacker.spy('<= (timestamptz, timestamptz)');
	RETURN $1 OPERATOR(pg_catalog.<=) $2;
END
$$;
CREATE OPERATOR hard_attacker.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hard_attacker.eq_bigint);
CREATE OPERATOR hard_attacker.= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = hard_attacker.eq_int);
CREATE OPERATOR hard_attacker.= (LEFTARG = text, RIGHTARG = text, FUNCTION = hard_attacker.eq_text);
CREATE OPERATOR hard_attacker.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hard_attacker.lt_ts);
CREATE OPERATOR hard_attacker.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hard_attacker.le_ts);
CREATE VIEW hard_attacker.job AS
SELECT 1::bigint AS job_id, 1::bigint AS token, 1 AS queue_id, 'pending'::text AS state,
	   '{}'::jsonb AS payload, pg_catalog.now() AS run_at, pg_catalog.now() AS expires_at
 WHERE hard_attacker.spy('table job');
CREATE VIEW hard_attacker.queue AS
SELECT 1 AS queue_id, 'hh'::text AS name, false AS paused
 WHERE hard_attacker.spy('table queue');
CREATE VIEW hard_attacker.key_claim AS
SELECT 'hard'::text AS scope, 'k'::text AS key, 1::bigint AS token
 WHERE hard_attacker.spy('table key_claim');
GRANT SELECT ON hard_attacker.job, hard_attacker.queue, hard_attacker.key_claim TO PUBLIC;
RESET ROLE;
CREATE TEMP VIEW job AS SELECT * FROM claimq.job WHERE hard_attacker.spy('pg_temp.job');
CREATE TEMP VIEW queue AS SELECT * FROM claimq.queue WHERE hard_attacker.spy('pg_temp.queue');
CREATE TEMP VIEW key_claim AS SELECT * FROM claimq.key_claim WHERE hard_attacker.spy('pg_temp.key_claim');

-- The rows of each call made under the hostile search_path, by step.  The
-- wrapper itself uses no operator and only qualified names.
CREATE TEMP TABLE hostile_out(ord serial, step text, r jsonb);
CREATE FUNCTION pg_temp.hostile(step text, q text) RETURNS void LANGUAGE plpgsql
SET search_path = hard_attacker, pg_catalog, public AS $$
BEGIN
	EXECUTE pg_catalog.format(
		'INSERT INTO pg_temp.hostile_out(step, r) SELECT %L, pg_catalog.to_jsonb(t) FROM (%s) t',
		step, q);
END
$$;
-- The value of key k in the rows of step s, in order.
CREATE FUNCTION pg_temp.got(s text, k text) RETURNS text[] LANGUAGE sql AS $$
	SELECT COALESCE(array_agg(r->>k ORDER BY ord), '{}') FROM pg_temp.hostile_out WHERE step = s
$$;

-- The traps work: unqualified names in the caller's own SQL reach them.
-- (With pg_temp left out of the search_path, relations are looked up there
-- first: the temporary views are the traps for unqualified table names.)
SELECT lives_ok($q$SELECT pg_temp.hostile('trap', $$
	SELECT now() AS a, clock_timestamp() AS b, nextval('claimq.token_seq'::regclass) AS c,
		   nextval('claimq.token_seq') AS c2, (SELECT count(*) FROM unnest(ARRAY[1, 2])) AS d,
		   1::bigint = 1::bigint AS e, 1 = 1 AS f, 'a'::text = 'a'::text AS g,
		   now() < now() AS h, now() <= now() AS i,
		   (SELECT count(*) FROM job) AS j, (SELECT count(*) FROM queue) AS k,
		   (SELECT count(*) FROM key_claim) AS l,
		   (SELECT count(*) FROM hard_attacker.job) AS m,
		   (SELECT count(*) FROM hard_attacker.queue) AS n,
		   (SELECT count(*) FROM hard_attacker.key_claim) AS o$$)$q$,
	'the look-alikes can be called');
SELECT is(ARRAY(SELECT what FROM hard_attacker.calls GROUP BY what ORDER BY what COLLATE "C"),
	'{"< (timestamptz, timestamptz)","<= (timestamptz, timestamptz)","= (bigint, bigint)","= (integer, integer)","= (text, text)",clock_timestamp(),"nextval(regclass)","nextval(text)",now(),pg_temp.job,pg_temp.key_claim,pg_temp.queue,"table job","table key_claim","table queue","unnest(anyarray)"}',
	'the caller''s own query reaches every trap');
DELETE FROM hard_attacker.calls;

-- Every claimq call, under the hostile search_path.
SELECT lives_ok(format($f$SELECT pg_temp.hostile(%L, %L)$f$, step, call), 'hostile search_path: ' || step)
  FROM (VALUES
	(1, 'create_queue', $$SELECT claimq.create_queue('hh', max_attempts => 2) AS x$$),
	(2, 'create_queue 2', $$SELECT claimq.create_queue('hh2') AS x$$),
	(3, 'alter_queue', $$SELECT claimq.alter_queue('hh', retry_base => '1 hour') AS x$$),
	(4, 'pause_queue', $$SELECT claimq.pause_queue('hh') AS x$$),
	(5, 'resume_queue', $$SELECT claimq.resume_queue('hh') AS x$$),
	(6, 'enqueue', $$SELECT claimq.enqueue('hh', '{"n":1}', priority => 1, dedup_key => 'one') AS id$$),
	(7, 'enqueue dedup', $$SELECT claimq.enqueue('hh', '{"n":1}', priority => 1, dedup_key => 'one') AS id$$),
	(8, 'enqueue_many', $$SELECT * FROM claimq.enqueue_many('hh', ARRAY['{"n":2}', '{"n":3}', '{"n":4}', '{"n":5}', '{"n":6}']::jsonb[], dedup_keys => ARRAY['two', 'three', NULL, NULL, NULL]) AS id$$),
	(9, 'enqueue scheduled', $$SELECT claimq.enqueue('hh2', '{}', run_at => 'infinity') AS id$$),
	(10, 'purge_queue', $$SELECT claimq.purge_queue('hh2') AS n$$),
	(11, 'claim', $$SELECT * FROM claimq.claim('hh', 4, worker => 'hw', lease => '1 hour')$$),
	(12, 'claim start', $$SELECT * FROM claimq.claim('hh', 1, worker => 'hw2', start => true, lease => '1 millisecond')$$)
  ) AS s(n, step, call)
 ORDER BY n;
SELECT is(pg_temp.got('enqueue', 'id') || pg_temp.got('enqueue dedup', 'id'),
	ARRAY[(pg_temp.got('enqueue', 'id'))[1], (pg_temp.got('enqueue', 'id'))[1]],
	'enqueue with a dedup key returns the live job''s id again');
SELECT is(pg_temp.got('purge_queue', 'n'), '{1}', 'purge_queue deletes the scheduled job');
SELECT is(cardinality(pg_temp.got('claim', 'job_id')), 4, 'claim takes four jobs');
SELECT is(pg_temp.got('claim', 'job_id'),
	pg_temp.got('enqueue', 'id') || (pg_temp.got('enqueue_many', 'id'))[1:3],
	'the priority job first, then by id');
SELECT is(cardinality(pg_temp.got('claim start', 'job_id')), 1, 'claim with start takes the last one');
SELECT (pg_temp.got('claim', 'job_id'))[1] AS h1, (pg_temp.got('claim', 'token'))[1] AS t1,
	   (pg_temp.got('claim', 'job_id'))[2] AS h2, (pg_temp.got('claim', 'token'))[2] AS t2,
	   (pg_temp.got('claim', 'job_id'))[3] AS h3, (pg_temp.got('claim', 'token'))[3] AS t3,
	   (pg_temp.got('claim', 'job_id'))[4] AS h4, (pg_temp.got('claim', 'token'))[4] AS t4
\gset
SELECT pg_sleep(0.01);
SELECT lives_ok(format($f$SELECT pg_temp.hostile(%L, %L)$f$, step, call), 'hostile search_path: ' || step)
  FROM (VALUES
	(1, 'start', format('SELECT * FROM claimq.start(''{%s,%s}''::bigint[], ''{%s,%s}''::bigint[])', :h1, :h2, :t1, :t2)),
	(2, 'start one', format('SELECT claimq.start(%s::bigint, %s::bigint) AS ok', :h3, :t3)),
	(3, 'extend', format('SELECT * FROM claimq.extend(''{%s}''::bigint[], ''{%s}''::bigint[], ''1 hour'')', :h1, :t1)),
	(4, 'extend one', format('SELECT claimq.extend(%s::bigint, %s::bigint) AS ok', :h2, :t2)),
	(5, 'complete', format('SELECT * FROM claimq.complete(''{%s}''::bigint[], ''{%s}''::bigint[])', :h1, :t1)),
	(6, 'fail', format('SELECT * FROM claimq.fail(''{%s}''::bigint[], ''{%s}''::bigint[], ''boom'')', :h2, :t2)),
	(7, 'fail one', format('SELECT claimq.fail(%s::bigint, %s::bigint, ''boom'', permanent => true) AS ok', :h3, :t3)),
	(8, 'release', format('SELECT * FROM claimq.release(''{%s,%s}''::bigint[], ''{%s,%s}''::bigint[])', :h4, :h1, :t4, :t1)),
	(9, 'complete one', format('SELECT claimq.complete(%s::bigint, %s::bigint) AS ok', :h2, :t2)),
	(10, 'release one', format('SELECT claimq.release(%s::bigint, %s::bigint) AS ok', :h4, :t4)),
	(11, 'reclaim', 'SELECT * FROM claimq.reclaim(''hh'')'),
	(12, 'claim again', 'SELECT * FROM claimq.claim(''hh'', 10, worker => ''hw3'')'),
	(13, 'release_worker', 'SELECT claimq.release_worker(''hh'', ''hw3'') AS n'),
	(14, 'retry_dead', 'SELECT claimq.retry_dead(''hh'') AS n'),
	(15, 'claim_keys', 'SELECT * FROM claimq.claim_keys(''hard'', ARRAY[''k1'', ''k2''], ''1 hour'')'),
	(16, 'claim_keys again', 'SELECT * FROM claimq.claim_keys(''hard'', ARRAY[''k1'', ''k3''], ''1 hour'')'),
	(17, 'queue_stats', 'SELECT * FROM claimq.queue_stats WHERE queue OPERATOR(pg_catalog.=) ''hh'''),
	(18, 'jobs', 'SELECT * FROM claimq.jobs'),
	(19, 'counters', 'SELECT * FROM claimq.counters()'),
	(20, 'reclaimer_status', 'SELECT * FROM claimq.reclaimer_status()'),
	(21, 'prune', 'SELECT claimq.prune() AS n'),
	(22, 'drop_queue', 'SELECT claimq.drop_queue(''hh2'') AS x')
  ) AS s(n, step, call)
 ORDER BY n;
SELECT lives_ok(format($f$SELECT pg_temp.hostile(%L, %L)$f$, 'release_keys',
		format('SELECT * FROM claimq.release_keys(''hard'', ARRAY[''k1'', ''k2'', ''k3''], ''{%s,%s,0}''::bigint[])',
			   (pg_temp.got('claim_keys', 'token'))[1], (pg_temp.got('claim_keys', 'token'))[1])),
	'hostile search_path: release_keys');
SELECT lives_ok($f$SELECT pg_temp.hostile('drop_queue force', 'SELECT claimq.drop_queue(''hh'', force => true) AS x')$f$,
	'hostile search_path: drop_queue force');

SELECT is(ARRAY(SELECT format('%s as %s, %s times', what, by_user, count(*))
				  FROM hard_attacker.calls GROUP BY what, by_user ORDER BY what COLLATE "C", by_user),
	'{}'::text[], 'no look-alike was called by any claimq call');
SELECT is(pg_temp.got('start', 'outcome'), '{ok,ok}', 'start: ok');
SELECT is(pg_temp.got('start one', 'ok'), '{true}', 'start one: ok');
SELECT is(pg_temp.got('extend', 'outcome'), '{ok}', 'extend: ok');
SELECT is(pg_temp.got('extend one', 'ok'), '{true}', 'extend one: ok');
SELECT is(pg_temp.got('complete', 'outcome'), '{ok}', 'complete: ok');
SELECT is(pg_temp.got('fail', 'outcome') || pg_temp.got('fail', 'state'), '{ok,pending}',
	'fail: pending again');
SELECT is(pg_temp.got('fail one', 'ok'), '{true}', 'fail one: ok');
SELECT is(pg_temp.got('release', 'outcome'), '{ok,missing}', 'release: ok, and missing for the completed job');
SELECT is(pg_temp.got('complete one', 'ok'), '{false}', 'complete one of a failed job: refused');
SELECT is(pg_temp.got('release one', 'ok'), '{false}', 'release one of a released job: refused');
SELECT is(pg_temp.got('reclaim', 'queue') || pg_temp.got('reclaim', 'retried'), '{hh,1}',
	'reclaim: the expired running job is retried');
SELECT is(pg_temp.got('release_worker', 'n'), ARRAY[cardinality(pg_temp.got('claim again', 'job_id'))::text],
	'release_worker releases what the worker claimed');
SELECT is(pg_temp.got('retry_dead', 'n'), '{1}', 'retry_dead redrives the dead job');
SELECT is(pg_temp.got('claim_keys', 'key') || pg_temp.got('claim_keys again', 'key'), '{k1,k2,k3}',
	'claim_keys: each key is won once');
SELECT is(pg_temp.got('release_keys', 'outcome'), '{ok,ok,stale}', 'release_keys: ok, ok, stale');
SELECT is(cardinality(pg_temp.got('queue_stats', 'queue')), 1, 'queue_stats can be read');
SELECT ok(NOT EXISTS (SELECT FROM claimq.queue WHERE name IN ('hh', 'hh2')), 'both queues are dropped');
SELECT is(ARRAY(SELECT format('%s as %s, %s times', what, by_user, count(*))
				  FROM hard_attacker.calls GROUP BY what, by_user ORDER BY what COLLATE "C", by_user),
	'{}'::text[], 'still nothing recorded');

--
-- CREATE EXTENSION must not adopt a claimq schema that another role made
-- (that role could then rename it, or add objects to it, under the
-- extension's feet).  The extension is dropped here and the transaction
-- rolled back at the end, so the other tests are not disturbed.
--
DROP VIEW pg_temp.job, pg_temp.queue, pg_temp.key_claim;
DROP EXTENSION claimq;
DROP SCHEMA IF EXISTS claimq;
SET LOCAL ROLE regress_claimq_hard_attacker;
CREATE SCHEMA claimq;
RESET ROLE;
SELECT throws_ok('CREATE EXTENSION claimq', NULL, NULL,
	'CREATE EXTENSION refuses a claimq schema owned by another role');
SELECT ok(NOT EXISTS (SELECT FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
					   WHERE e.extname = 'claimq'
						 AND n.nspowner = 'regress_claimq_hard_attacker'::regrole),
	'no claimq extension lives in a schema the attacker owns');

SELECT * FROM finish();
ROLLBACK;
