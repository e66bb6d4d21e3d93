/* claimq--0.6.2--0.7.sql: workflows (jobs that run after other jobs: the waiting state, enqueue's after and after_failed, dependencies()) */

-- @extension
\echo Use "ALTER EXTENSION claimq UPDATE TO '0.7'" to load this file. \quit
-- @end
-- @include portable/update--0.6.2--0.7-begin.sql

/*------------------------------------------------------------------------
 * 0. copy_grants leaves pg_init_privs alone where it may not write them
 *    (the portable edition's updates, run by the role that installed it)
 *-----------------------------------------------------------------------*/

ALTER FUNCTION claimq.copy_grants(oid, oid, regclass) RENAME TO copy_grants_0_6_2;

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
	/*
	 * Only a superuser may write pg_init_privs.  The portable edition's
	 * updates run as the role that installed it: as a plain script its
	 * GRANTs record no initial privileges anyway; through pg_tle they do,
	 * and stay (docs/operations.md says what that means for pg_dump).
	 */
	IF NOT pg_catalog.has_table_privilege('pg_catalog.pg_init_privs', 'UPDATE') THEN
		RETURN;
	END IF;
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

DROP FUNCTION claimq.copy_grants_0_6_2(oid, oid, regclass);

/*------------------------------------------------------------------------
 * 1. Jobs: the waiting state and what a job runs after
 *-----------------------------------------------------------------------*/

/*
 * after_failed's domain (see claimq.sql) gets its rule once the column
 * exists: adding a column of a domain with a rule rewrites the table, and
 * adding the rule to the domain of a column of NULLs only reads it.
 */
CREATE DOMAIN claimq.after_failed_rule AS text;

COMMENT ON DOMAIN claimq.after_failed_rule IS
'private: cancel or run, the after_failed of a job that runs after others';

REVOKE ALL ON DOMAIN claimq.after_failed_rule FROM PUBLIC;

ALTER TABLE claimq.job
	ADD COLUMN after_set bigint,
	ADD COLUMN after_count integer NOT NULL DEFAULT 0,
	ADD COLUMN after_failed claimq.after_failed_rule,
	ADD COLUMN dependents boolean NOT NULL DEFAULT false;

ALTER DOMAIN claimq.after_failed_rule ADD CONSTRAINT after_failed_rule_check
	CHECK (VALUE OPERATOR(pg_catalog.=) ANY ('{cancel,run}'::text[]));

ALTER TABLE claimq.job DROP CONSTRAINT job_state_check;
ALTER TABLE claimq.job ADD CONSTRAINT job_state_check CHECK (state OPERATOR(pg_catalog.=) ANY
		('{pending,claimed,running,dead,done,cancelled,waiting}'::text[]));

/* A waiting job holds its dedup key. */
DROP INDEX claimq.job_dedup_idx;
CREATE UNIQUE INDEX job_dedup_idx ON claimq.job (queue_id, dedup_key)
	WHERE dedup_key IS NOT NULL
	  AND state OPERATOR(pg_catalog.=) ANY ('{waiting,pending,claimed,running}'::text[]);

CREATE INDEX job_after_set_idx ON claimq.job (after_set)
	WHERE after_set IS NOT NULL;

CREATE SEQUENCE claimq.after_set_seq AS bigint;

CREATE TABLE claimq.job_after (
	set_id			bigint NOT NULL,
	position		integer NOT NULL,
	after_id		bigint NOT NULL,
	CONSTRAINT job_after_pkey PRIMARY KEY (set_id, position)
);

CREATE INDEX job_after_after_idx ON claimq.job_after (after_id);

-- @extension
SELECT pg_catalog.pg_extension_config_dump('claimq.job_after', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.after_set_seq', '');
-- @end

REVOKE ALL ON TABLE claimq.job_after FROM PUBLIC;
REVOKE ALL ON SEQUENCE claimq.after_set_seq FROM PUBLIC;

/*------------------------------------------------------------------------
 * 2. Workflows' private helpers, and dependencies()
 *-----------------------------------------------------------------------*/

CREATE FUNCTION claimq.ledger_end_moves(moves jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	first boolean := true;
	m record;
BEGIN
	FOR m IN SELECT (x OPERATOR(pg_catalog.->>) 'queue_id')::integer AS queue_id,
					x OPERATOR(pg_catalog.->>) 'to_state' AS to_state,
					ARRAY(SELECT pg_catalog.jsonb_array_elements_text(x OPERATOR(pg_catalog.->) 'from_states')) AS from_states,
					ARRAY(SELECT pg_catalog.jsonb_array_elements_text(x OPERATOR(pg_catalog.->) 'counts'))::bigint[] AS counts
			   FROM pg_catalog.jsonb_array_elements(COALESCE(moves, '[]')) AS x LOOP
		IF NOT first THEN
			PERFORM claimq.ledger_begin();
		END IF;
		first := false;
		PERFORM claimq.ledger_end(m.queue_id, m.to_state, m.from_states, m.counts);
	END LOOP;
	IF first THEN
		PERFORM claimq.ledger_end(0, NULL, '{}', '{}');
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.ledger_end_moves(jsonb) IS
'private: end the scope of the last ledger_begin() with several moves (objects queue_id, to_state, from_states, counts), one ledger_end() each';

REVOKE ALL ON FUNCTION claimq.ledger_end_moves(jsonb) FROM PUBLIC;

CREATE FUNCTION claimq.link_after(after bigint[], OUT set_id bigint,
								  OUT unfinished integer, OUT all_done boolean)
RETURNS record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	ids bigint[];
	found bigint;
	unknown bigint;
BEGIN
	IF pg_catalog.array_ndims(after) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'after must be a one-dimensional array'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.cardinality(after) OPERATOR(pg_catalog.>) 100000 THEN
		RAISE EXCEPTION 'after must have at most 100000 elements'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_position(after, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'after must not contain null elements'
			USING ERRCODE = '22004';
	END IF;
	SELECT pg_catalog.array_agg(a.id ORDER BY a.first) INTO ids
	  FROM (SELECT u.id, pg_catalog.min(u.ord) AS first
			  FROM pg_catalog.unnest(after) WITH ORDINALITY AS u(id, ord)
			 GROUP BY u.id) a;

	/*
	 * Write a new version of every listed job, locked in id order.  A finish
	 * or redrive of one of them that commits after this waits for it and
	 * then reads this set; one whose snapshot is older than this set cannot
	 * read it, and its update of the job fails with a serialization failure
	 * (REPEATABLE READ and SERIALIZABLE) rather than missing it.
	 */
	WITH listed AS MATERIALIZED (
		SELECT j.job_id FROM claimq.job j
		 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (ids)
		 ORDER BY j.job_id
		 FOR NO KEY UPDATE OF j),
	marked AS (
		UPDATE claimq.job j SET dependents = true
		  FROM listed l
		 WHERE j.job_id OPERATOR(pg_catalog.=) l.job_id
		RETURNING j.state)
	SELECT pg_catalog.count(*),
		   pg_catalog.count(*) FILTER (WHERE m.state OPERATOR(pg_catalog.<>) ALL ('{done,dead,cancelled}'::text[])),
		   COALESCE(pg_catalog.bool_and(m.state OPERATOR(pg_catalog.=) 'done')
					FILTER (WHERE m.state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[])), true)
	  INTO found, unfinished, all_done
	  FROM marked m;
	IF found OPERATOR(pg_catalog.<) pg_catalog.cardinality(ids) THEN
		SELECT u.id INTO unknown
		  FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, ord)
		 WHERE NOT EXISTS (SELECT 1 FROM claimq.job j
							WHERE j.job_id OPERATOR(pg_catalog.=) u.id)
		 ORDER BY u.ord LIMIT 1;
		RAISE EXCEPTION 'job % in "after" does not exist', unknown
			USING ERRCODE = '23503',
				  HINT = 'A job that completed in a queue that keeps nothing no longer exists: enqueue a workflow''s jobs in one transaction, or keep done jobs.';
	END IF;

	set_id := pg_catalog.nextval('claimq.after_set_seq'::pg_catalog.regclass);
	INSERT INTO claimq.job_after (set_id, position, after_id)
	SELECT link_after.set_id, u.ord, u.id
	  FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, ord);
END
$$;

COMMENT ON FUNCTION claimq.link_after(bigint[]) IS
'private: check, lock and record an enqueue''s "after" list as a set; returns it, how many of its jobs are unfinished, and whether the finished ones all ended done';

REVOKE ALL ON FUNCTION claimq.link_after(bigint[]) FROM PUBLIC;

CREATE FUNCTION claimq.count_dependents(job_ids bigint[], delta integer)
RETURNS bigint[]
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
	WITH hit AS (
		SELECT e.set_id, pg_catalog.count(*)::integer AS n
		  FROM claimq.job_after e
		 WHERE e.after_id OPERATOR(pg_catalog.=) ANY (job_ids)
		 GROUP BY e.set_id),
	locked AS MATERIALIZED (
		SELECT w.job_id, h.n
		  FROM claimq.job w
		  JOIN hit h ON h.set_id OPERATOR(pg_catalog.=) w.after_set
		 WHERE w.state OPERATOR(pg_catalog.=) 'waiting'
		 ORDER BY w.job_id
		 FOR UPDATE OF w),
	counted AS (
		UPDATE claimq.job j
		   SET after_count = j.after_count OPERATOR(pg_catalog.+) (delta OPERATOR(pg_catalog.*) l.n)
		  FROM locked l
		 WHERE j.job_id OPERATOR(pg_catalog.=) l.job_id
		   AND j.state OPERATOR(pg_catalog.=) 'waiting'
		RETURNING j.job_id, j.after_count)
	SELECT pg_catalog.array_agg(c.job_id) FROM counted c
	 WHERE c.after_count OPERATOR(pg_catalog.<=) 0;
$$;

COMMENT ON FUNCTION claimq.count_dependents(bigint[],integer) IS
'private: the jobs waiting on the listed jobs count them off (delta -1) or on again (delta 1), under their row locks; returns those with none left to wait for';

REVOKE ALL ON FUNCTION claimq.count_dependents(bigint[], integer) FROM PUBLIC;

CREATE FUNCTION claimq.judge_dependents(job_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	finished bigint[] := job_ids;
	ready bigint[];
	moves jsonb;
	m record;
BEGIN
	/*
	 * Each pass below locks the jobs it counts off in id order, but a
	 * cascade's second pass comes after its first: two cascades that cross
	 * would each hold what the other's next pass needs.  So if a job this
	 * call counts off may be cancelled (after_failed cancel) and has
	 * dependents, first lock every waiting job the cascade can reach, in
	 * id order; the passes then take no lock they do not hold.
	 */
	IF EXISTS (SELECT 1 FROM claimq.job_after e
				 JOIN claimq.job w ON w.after_set OPERATOR(pg_catalog.=) e.set_id
				WHERE e.after_id OPERATOR(pg_catalog.=) ANY (job_ids)
				  AND w.state OPERATOR(pg_catalog.=) 'waiting'
				  AND w.dependents
				  AND w.after_failed OPERATOR(pg_catalog.=) 'cancel') THEN
		PERFORM FROM claimq.job w
		 WHERE w.job_id OPERATOR(pg_catalog.=) ANY (ARRAY(
				WITH RECURSIVE reach(job_id, cascades) AS (
					SELECT w.job_id,
						   w.dependents AND w.after_failed OPERATOR(pg_catalog.=) 'cancel'
					  FROM claimq.job_after e
					  JOIN claimq.job w ON w.after_set OPERATOR(pg_catalog.=) e.set_id
					 WHERE e.after_id OPERATOR(pg_catalog.=) ANY (job_ids)
					   AND w.state OPERATOR(pg_catalog.=) 'waiting'
					UNION
					SELECT w.job_id,
						   w.dependents AND w.after_failed OPERATOR(pg_catalog.=) 'cancel'
					  FROM reach r
					  JOIN claimq.job_after e ON e.after_id OPERATOR(pg_catalog.=) r.job_id
					  JOIN claimq.job w ON w.after_set OPERATOR(pg_catalog.=) e.set_id
					 WHERE r.cascades
					   AND w.state OPERATOR(pg_catalog.=) 'waiting')
				SELECT r.job_id FROM reach r))
		   AND w.state OPERATOR(pg_catalog.=) 'waiting'
		 ORDER BY w.job_id
		   FOR UPDATE OF w;
	END IF;

	WHILE pg_catalog.cardinality(finished) OPERATOR(pg_catalog.>) 0 LOOP
		/* Count the finished jobs off, under each waiting job's lock. */
		ready := claimq.count_dependents(finished, -1);
		EXIT WHEN ready IS NULL;

		/*
		 * Judge those with none left, by the states of their sets' jobs now
		 * (a new snapshot: it sees what the count waited for): pending if
		 * every one ended done or after_failed is run, else cancelled.
		 */
		PERFORM claimq.ledger_begin();
		WITH verdict AS (
			SELECT e.set_id,
				   pg_catalog.bool_and(a.state IS NOT DISTINCT FROM 'done') AS all_done
			  FROM claimq.job_after e
			  LEFT JOIN claimq.job a ON a.job_id OPERATOR(pg_catalog.=) e.after_id
			 WHERE e.set_id OPERATOR(pg_catalog.=) ANY (ARRAY(
					SELECT DISTINCT w.after_set FROM claimq.job w
					 WHERE w.job_id OPERATOR(pg_catalog.=) ANY (ready)))
			 GROUP BY e.set_id),
		judged AS (
			UPDATE claimq.job j
			   SET state = CASE WHEN v.all_done OR j.after_failed OPERATOR(pg_catalog.=) 'run'
							THEN 'pending' ELSE 'cancelled' END,
				   run_at = CASE WHEN v.all_done OR j.after_failed OPERATOR(pg_catalog.=) 'run'
							THEN GREATEST(j.run_at, pg_catalog.clock_timestamp())
							ELSE j.run_at END,
				   finished_at = CASE WHEN v.all_done OR j.after_failed OPERATOR(pg_catalog.=) 'run'
								 THEN NULL ELSE pg_catalog.clock_timestamp() END,
				   held = (v.all_done OR j.after_failed OPERATOR(pg_catalog.=) 'run')
						  AND j.group_key IS NOT NULL
						  AND (q.group_limit IS NOT NULL OR q.group_fifo)
			  FROM verdict v, claimq.queue q
			 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (ready)
			   AND j.after_set OPERATOR(pg_catalog.=) v.set_id
			   AND j.state OPERATOR(pg_catalog.=) 'waiting'
			   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
			RETURNING j.job_id, j.queue_id, j.state, j.group_key, j.held,
					  j.dependents)
		SELECT (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
							'queue_id', g.queue_id, 'to_state', g.state,
							'from_states', '{waiting}'::text[], 'counts', ARRAY[g.n],
							'groups', g.groups))
				  FROM (SELECT x.queue_id, x.state, pg_catalog.count(*) AS n,
							   pg_catalog.array_agg(DISTINCT x.group_key)
								 FILTER (WHERE x.held) AS groups
						  FROM judged x GROUP BY x.queue_id, x.state) g),
			   (SELECT pg_catalog.array_agg(x.job_id) FROM judged x
				 WHERE x.state OPERATOR(pg_catalog.=) 'cancelled' AND x.dependents)
		  INTO moves, finished;

		/* Tell the ledger, one move per queue and state. */
		PERFORM claimq.ledger_end_moves(moves);

		/* Jobs made pending in limited groups go in held, then are synced. */
		FOR m IN SELECT (x OPERATOR(pg_catalog.->>) 'queue_id')::integer AS queue_id,
						ARRAY(SELECT pg_catalog.jsonb_array_elements_text(x OPERATOR(pg_catalog.->) 'groups')) AS groups
				   FROM pg_catalog.jsonb_array_elements(COALESCE(moves, '[]')) AS x
				  WHERE pg_catalog.jsonb_typeof(x OPERATOR(pg_catalog.->) 'groups') OPERATOR(pg_catalog.=) 'array' LOOP
			PERFORM claimq.sync_groups(m.queue_id, m.groups);
		END LOOP;
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.judge_dependents(bigint[]) IS
'private: the listed jobs finished or were removed: count them off their waiting dependents, and judge each that has none left (pending, or cancelled, whose own dependents are judged in turn)';

REVOKE ALL ON FUNCTION claimq.judge_dependents(bigint[]) FROM PUBLIC;

CREATE FUNCTION claimq.forget_after(set_ids bigint[], job_ids bigint[])
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
	DELETE FROM claimq.job_after e
	 WHERE e.set_id OPERATOR(pg_catalog.=) ANY (ARRAY(
			SELECT s.id FROM pg_catalog.unnest(set_ids) AS s(id)
			UNION
			SELECT d.set_id FROM claimq.job_after d
			 WHERE d.after_id OPERATOR(pg_catalog.=) ANY (job_ids)))
	   AND NOT EXISTS (SELECT 1 FROM claimq.job j
						WHERE j.after_set OPERATOR(pg_catalog.=) e.set_id);
$$;

COMMENT ON FUNCTION claimq.forget_after(bigint[],bigint[]) IS
'private: delete the sets of jobs to run after that no job names any more, among those listed and those that named the deleted jobs';

REVOKE ALL ON FUNCTION claimq.forget_after(bigint[], bigint[]) FROM PUBLIC;

CREATE FUNCTION claimq.prune_after(max_jobs integer)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	now timestamptz := pg_catalog.clock_timestamp();
	due bigint[];
	moves jsonb;
	gone bigint[];
	sets bigint[];
BEGIN
	due := ARRAY(
		SELECT j.job_id FROM claimq.job j
		 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT f.job_id
				  FROM claimq.queue q
				 CROSS JOIN LATERAL (
					SELECT f.job_id FROM claimq.job f
					 WHERE f.queue_id OPERATOR(pg_catalog.=) q.queue_id
					   AND f.state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[])
					   AND f.dependents
					   AND f.finished_at OPERATOR(pg_catalog.<) (now OPERATOR(pg_catalog.-)
							CASE WHEN f.state OPERATOR(pg_catalog.=) 'done'
								 THEN q.keep_done ELSE q.keep_dead END)
					 LIMIT max_jobs) f
				 LIMIT max_jobs))
		   AND j.finished_at IS NOT NULL
		   FOR UPDATE SKIP LOCKED);
	IF pg_catalog.cardinality(due) OPERATOR(pg_catalog.=) 0 THEN
		RETURN 0;
	END IF;

	PERFORM claimq.ledger_begin();
	WITH pruned AS (
		DELETE FROM claimq.job j
		 WHERE j.job_id OPERATOR(pg_catalog.=) ANY (due)
		   AND NOT EXISTS (
				SELECT 1 FROM claimq.job_after e
				  JOIN claimq.job w ON w.after_set OPERATOR(pg_catalog.=) e.set_id
				 WHERE e.after_id OPERATOR(pg_catalog.=) j.job_id
				   AND w.state OPERATOR(pg_catalog.<>) ALL ('{done,dead,cancelled}'::text[]))
		RETURNING j.job_id, j.queue_id, j.state, j.after_set)
	SELECT (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
						'queue_id', g.queue_id, 'to_state', NULL,
						'from_states', g.states, 'counts', g.counts))
			  FROM (SELECT c.queue_id, pg_catalog.array_agg(c.state) AS states,
						   pg_catalog.array_agg(c.n) AS counts
					  FROM (SELECT p.queue_id, p.state, pg_catalog.count(*) AS n
							  FROM pruned p GROUP BY p.queue_id, p.state) c
					 GROUP BY c.queue_id) g),
		   (SELECT pg_catalog.array_agg(p.job_id) FROM pruned p),
		   (SELECT pg_catalog.array_agg(DISTINCT p.after_set) FROM pruned p
			 WHERE p.after_set IS NOT NULL)
	  INTO moves, gone, sets;
	PERFORM claimq.ledger_end_moves(moves);
	IF gone IS NOT NULL THEN
		PERFORM claimq.forget_after(COALESCE(sets, '{}'), gone);
	END IF;
	RETURN COALESCE(pg_catalog.cardinality(gone), 0);
END
$$;

COMMENT ON FUNCTION claimq.prune_after(integer) IS
'private: delete up to max_jobs finished jobs that jobs ran after, once every job after them is finished or removed and their queue''s keep_done / keep_dead has passed';

REVOKE ALL ON FUNCTION claimq.prune_after(integer) FROM PUBLIC;

CREATE FUNCTION claimq.dependencies(job_ids bigint[])
RETURNS TABLE(job_id bigint, after_id bigint, state text, result jsonb,
			  last_error text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
	/* The job_ids rule of cancel, status and wait_for (src/common.c). */
	IF dependencies.job_ids IS NULL THEN
		RAISE EXCEPTION 'argument "job_ids" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.array_ndims(dependencies.job_ids) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'job_ids must be a one-dimensional array'
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_position(dependencies.job_ids, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'job_ids must not contain null elements'
			USING ERRCODE = '22004';
	END IF;
	IF pg_catalog.cardinality(dependencies.job_ids) OPERATOR(pg_catalog.>) 10000 THEN
		RAISE EXCEPTION 'at most 10000 job ids can be given in one call'
			USING ERRCODE = '22023';
	END IF;
	RETURN QUERY
	SELECT i.job_id, e.after_id, a.state,
		   CASE WHEN a.state OPERATOR(pg_catalog.=) 'done' THEN a.result END,
		   CASE WHEN a.state OPERATOR(pg_catalog.=) 'dead' THEN a.last_error END
	  FROM ROWS FROM (pg_catalog.unnest(dependencies.job_ids))
		   WITH ORDINALITY AS i(job_id, ord)
	  JOIN claimq.job w ON w.job_id OPERATOR(pg_catalog.=) i.job_id
	  JOIN claimq.job_after e ON e.set_id OPERATOR(pg_catalog.=) w.after_set
	  LEFT JOIN claimq.job a ON a.job_id OPERATOR(pg_catalog.=) e.after_id
	 ORDER BY i.ord, e.position;
END
$$;

COMMENT ON FUNCTION claimq.dependencies(bigint[]) IS
'for each listed job, one row per job it runs after, in order of first appearance: that job''s state, its result if done, its last error if dead (NULL if it no longer exists)';

REVOKE ALL ON FUNCTION claimq.dependencies(bigint[]) FROM PUBLIC;

/* Every role that may ask for status may ask for dependencies. */
SELECT claimq.copy_grants('claimq.status(bigint[])'::regprocedure,
						  'claimq.dependencies(bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');

/*------------------------------------------------------------------------
 * 3. enqueue and enqueue_many take after and after_failed
 *-----------------------------------------------------------------------*/

CREATE FUNCTION claimq.enqueue(
	queue text,
	payload jsonb,
	run_at timestamptz DEFAULT NULL,
	priority integer DEFAULT 0,
	dedup_key text DEFAULT NULL,
	max_attempts integer DEFAULT NULL,
	on_duplicate text DEFAULT 'keep',
	group_key text DEFAULT NULL,
	after bigint[] DEFAULT NULL,
	after_failed text DEFAULT 'cancel')
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_enqueue';

COMMENT ON FUNCTION claimq.enqueue(text,jsonb,timestamp with time zone,integer,text,integer,text,text,bigint[],text) IS
'add a job (waiting, with after, until the jobs listed finish); with a dedup_key that a live job holds, return that job''s id instead (and with on_duplicate => ''replace'', update it while it is pending or waiting)';

REVOKE ALL ON FUNCTION claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text)'::regprocedure,
						  'claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text);

CREATE FUNCTION claimq.enqueue_many(
	queue text,
	payloads jsonb[],
	run_at timestamptz DEFAULT NULL,
	priority integer DEFAULT 0,
	dedup_keys text[] DEFAULT NULL,
	max_attempts integer DEFAULT NULL,
	on_duplicate text DEFAULT 'keep',
	group_keys text[] DEFAULT NULL,
	after bigint[] DEFAULT NULL,
	after_failed text DEFAULT 'cancel')
RETURNS SETOF bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_enqueue_many';

COMMENT ON FUNCTION claimq.enqueue_many(text,jsonb[],timestamp with time zone,integer,text[],integer,text,text[],bigint[],text) IS
'add one job per payload in one statement (all after the same jobs, with after); returns the ids in input order';

REVOKE ALL ON FUNCTION claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[])'::regprocedure,
						  'claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[]);

/*------------------------------------------------------------------------
 * 4. Queues and recovery: purge_queue, drop_queue and retry_dead judge,
 *    and reopen, the jobs waiting on the jobs they remove or redrive
 *-----------------------------------------------------------------------*/

ALTER FUNCTION claimq.drop_queue(text, boolean) RENAME TO drop_queue_0_6_2;

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
	removed bigint[];
	sets bigint[];
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
		RETURNING j.state, j.job_id, j.dependents, j.after_set)
	SELECT pg_catalog.array_agg(g.state), pg_catalog.array_agg(g.n),
		   (SELECT pg_catalog.array_agg(d.job_id) FROM gone d WHERE d.dependents),
		   (SELECT pg_catalog.array_agg(DISTINCT d.after_set) FROM gone d
			 WHERE d.after_set IS NOT NULL)
	  INTO states, counts, removed, sets
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
		/*
		 * Jobs of other queues waiting on its jobs.  An enqueue after one of
		 * them that the DELETE waited for has committed: this statement's
		 * snapshot sees it.
		 */
		SELECT pg_catalog.count(DISTINCT w.job_id) INTO held
		  FROM claimq.job_after e
		  JOIN claimq.job w ON w.after_set OPERATOR(pg_catalog.=) e.set_id
		 WHERE e.after_id OPERATOR(pg_catalog.=) ANY (removed)
		   AND w.state OPERATOR(pg_catalog.=) 'waiting'
		   AND w.queue_id OPERATOR(pg_catalog.<>) q.queue_id;
		IF held OPERATOR(pg_catalog.>) 0 THEN
			RAISE EXCEPTION 'cannot drop queue "%" while jobs of other queues wait on its jobs', queue
				USING ERRCODE = '2BP01',
					  DETAIL = pg_catalog.format('%s jobs of other queues wait on jobs of this queue.', held),
					  HINT = 'Cancel them or let them be judged first, or pass force => true.';
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
	/* Jobs of other queues waiting on its jobs count them as cancelled. */
	IF removed IS NOT NULL THEN
		PERFORM claimq.judge_dependents(removed);
	END IF;
	IF removed IS NOT NULL OR sets IS NOT NULL THEN
		PERFORM claimq.forget_after(COALESCE(sets, '{}'), COALESCE(removed, '{}'));
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.drop_queue(text,boolean) IS
'drop a queue and all its jobs; refuses (55006) while jobs are claimed or running, and (2BP01) while jobs of other queues wait on its jobs or schedules feed it, unless force (which drops the schedules too and counts its jobs as cancelled for the jobs waiting on them)';

REVOKE ALL ON FUNCTION claimq.drop_queue(text, boolean) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.drop_queue_0_6_2(text, boolean)'::regprocedure,
						  'claimq.drop_queue(text, boolean)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.drop_queue_0_6_2(text, boolean);

ALTER FUNCTION claimq.purge_queue(text) RENAME TO purge_queue_0_6_2;

CREATE FUNCTION claimq.purge_queue(queue text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue := claimq.lock_queue(queue);
	n bigint;
	waiting bigint;
	groups text[];
	removed bigint[];
	sets bigint[];
BEGIN
	PERFORM claimq.ledger_begin();
	WITH purged AS (
		DELETE FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,waiting}'::text[])
		RETURNING j.group_key, j.state, j.job_id, j.dependents, j.after_set)
	SELECT pg_catalog.count(*),
		   pg_catalog.count(*) FILTER (WHERE p.state OPERATOR(pg_catalog.=) 'waiting'),
		   pg_catalog.array_agg(DISTINCT p.group_key) FILTER (WHERE p.group_key IS NOT NULL),
		   pg_catalog.array_agg(p.job_id) FILTER (WHERE p.dependents),
		   pg_catalog.array_agg(DISTINCT p.after_set) FILTER (WHERE p.after_set IS NOT NULL)
	  INTO n, waiting, groups, removed, sets
	  FROM purged p;
	PERFORM claimq.ledger_end(q.queue_id, NULL, '{pending,waiting}',
							  ARRAY[n OPERATOR(pg_catalog.-) waiting, waiting]);
	IF groups IS NOT NULL THEN
		PERFORM claimq.sync_groups(q.queue_id, groups);
	END IF;
	/* Jobs waiting on the jobs purged count them as cancelled. */
	IF removed IS NOT NULL THEN
		PERFORM claimq.judge_dependents(removed);
	END IF;
	IF removed IS NOT NULL OR sets IS NOT NULL THEN
		PERFORM claimq.forget_after(COALESCE(sets, '{}'), COALESCE(removed, '{}'));
	END IF;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.purge_queue(text) IS
'delete a queue''s pending jobs (ready and scheduled) and waiting jobs; returns how many';

REVOKE ALL ON FUNCTION claimq.purge_queue(text) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.purge_queue_0_6_2(text)'::regprocedure,
						  'claimq.purge_queue(text)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.purge_queue_0_6_2(text);

ALTER FUNCTION claimq.retry_dead(text, bigint[]) RENAME TO retry_dead_0_6_2;

CREATE FUNCTION claimq.retry_dead(queue text, job_ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	n bigint;
	groups text[];
	redriven_after bigint[];
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
		RETURNING j.group_key, j.job_id, j.dependents)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(DISTINCT r.group_key) FILTER (WHERE r.group_key IS NOT NULL),
		   pg_catalog.array_agg(r.job_id) FILTER (WHERE r.dependents)
	  INTO n, groups, redriven_after
	  FROM redriven r;
	PERFORM claimq.ledger_end(q.queue_id, 'pending', '{dead}', ARRAY[n]);
	IF groups IS NOT NULL THEN
		PERFORM claimq.sync_groups(q.queue_id, groups);
	END IF;
	/* Jobs still waiting on them wait for them again. */
	IF redriven_after IS NOT NULL THEN
		PERFORM claimq.count_dependents(redriven_after, 1);
	END IF;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.retry_dead(text,bigint[]) IS
'redrive dead jobs (all of a queue''s, or those listed) to pending with attempts reset; returns how many';

REVOKE ALL ON FUNCTION claimq.retry_dead(text, bigint[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.retry_dead_0_6_2(text, bigint[])'::regprocedure,
						  'claimq.retry_dead(text, bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.retry_dead_0_6_2(text, bigint[]);

ALTER FUNCTION claimq.duty_functions(text) RENAME TO duty_functions_0_6_2;

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
				   '"claimq.dependencies(bigint[])",'
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
				'"claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text)",'
				'"claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text)",'
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

SELECT claimq.copy_grants('claimq.duty_functions_0_6_2(text)'::regprocedure,
						  'claimq.duty_functions(text)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.duty_functions_0_6_2(text);

ALTER FUNCTION claimq.metrics() RENAME TO metrics_0_6_2;

CREATE FUNCTION claimq.metrics()
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	-- Each source is read once; the counts come from the census.
	stats jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(s) ORDER BY s.queue), '[]')
					  FROM claimq.scrape_stats() s);
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
				  CROSS JOIN pg_catalog.unnest('{ready,scheduled,claimed,running,expired,dead,done,cancelled,waiting}'::text[])
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

SELECT claimq.copy_grants('claimq.metrics_0_6_2()'::regprocedure,
						  'claimq.metrics()'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.metrics_0_6_2();

/*------------------------------------------------------------------------
 * 5. Observing: waiting in the census, queue_stats and metrics; after_count
 *    and after_failed in jobs
 *-----------------------------------------------------------------------*/

DROP FUNCTION claimq.census();

CREATE FUNCTION claimq.census(OUT queue_id integer, OUT pending bigint,
							  OUT claimed bigint, OUT running bigint,
							  OUT done bigint, OUT dead bigint,
							  OUT cancelled bigint, OUT waiting bigint)
RETURNS SETOF record
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_census';

COMMENT ON FUNCTION claimq.census() IS
'private: the jobs per queue and state that the census has counted, and whether the counts are valid (queue_id 0)';

REVOKE ALL ON FUNCTION claimq.census() FROM PUBLIC;

ALTER VIEW claimq.queue_stats RENAME TO queue_stats_0_6_2;
ALTER VIEW claimq.jobs RENAME TO jobs_0_6_2;
ALTER FUNCTION claimq.scrape_stats() RENAME TO scrape_stats_0_6_2;

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
	   COALESCE(s.cancelled, 0) AS cancelled,
	   COALESCE(s.waiting, 0) AS waiting
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
		   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'waiting') AS waiting,
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
'per queue: jobs by state (waiting: until the jobs they run after finish), expired claims, and the age of the oldest ready job and of the oldest claim';

REVOKE ALL ON TABLE claimq.queue_stats FROM PUBLIC;

SELECT claimq.copy_grants('claimq.queue_stats_0_6_2'::regclass, 'claimq.queue_stats'::regclass,
						  'pg_catalog.pg_class');

CREATE VIEW claimq.jobs AS
SELECT j.job_id, q.name AS queue, j.state, j.payload, j.priority, j.run_at,
	   j.attempts, j.worker, j.expires_at, j.enqueued_at, j.dedup_key,
	   j.last_error, j.group_key, j.max_attempts, j.finished_at, j.result,
	   j.after_count, j.after_failed::text AS after_failed
  FROM claimq.job j
  JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id;

COMMENT ON VIEW claimq.jobs IS
'every job of every queue, for inspection';

REVOKE ALL ON TABLE claimq.jobs FROM PUBLIC;

SELECT claimq.copy_grants('claimq.jobs_0_6_2'::regclass, 'claimq.jobs'::regclass,
						  'pg_catalog.pg_class');

CREATE FUNCTION claimq.scrape_stats()
RETURNS SETOF claimq.queue_stats
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	census jsonb := (SELECT pg_catalog.jsonb_object_agg(c.queue_id, pg_catalog.to_jsonb(c))
					   FROM claimq.census() c);
	now timestamptz := pg_catalog.clock_timestamp();
	q record;
	n jsonb;
	f record;
	h record;
	l record;
	scheduled bigint;
	r claimq.queue_stats;
BEGIN
	IF census IS NULL OR NOT census OPERATOR(pg_catalog.?) '0' THEN
		RETURN QUERY SELECT * FROM claimq.queue_stats;
		RETURN;
	END IF;
	FOR q IN SELECT t.queue_id, t.name, t.paused FROM claimq.queue t ORDER BY t.name LOOP
		n := COALESCE(census OPERATOR(pg_catalog.->) q.queue_id::text, '{}');

		-- Free pending jobs: per priority, a skip through the claim's index.
		WITH RECURSIVE p(priority) AS (
			(SELECT j.priority FROM claimq.job j
			  WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
				AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
			  ORDER BY j.priority DESC LIMIT 1)
			UNION ALL
			SELECT (SELECT j.priority FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
					   AND j.priority OPERATOR(pg_catalog.<) p.priority
					 ORDER BY j.priority DESC LIMIT 1)
			  FROM p WHERE p.priority IS NOT NULL)
		SELECT COALESCE(pg_catalog.sum(s.later), 0) AS later,
			   pg_catalog.min(s.first) FILTER (WHERE s.first OPERATOR(pg_catalog.<=) now) AS first
		  INTO f
		  FROM p CROSS JOIN LATERAL (
			SELECT (SELECT pg_catalog.count(*) FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
					   AND j.priority OPERATOR(pg_catalog.=) p.priority
					   AND j.run_at OPERATOR(pg_catalog.>) now) AS later,
				   (SELECT j.run_at FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held
					   AND j.priority OPERATOR(pg_catalog.=) p.priority
					 ORDER BY j.run_at LIMIT 1) AS first) s
		 WHERE p.priority IS NOT NULL;

		-- Held jobs: per group of a limited queue, its due order.
		SELECT COALESCE(pg_catalog.sum(s.later), 0) AS later,
			   pg_catalog.min(s.first) AS first
		  INTO h
		  FROM claimq.job_group g CROSS JOIN LATERAL (
			SELECT (SELECT pg_catalog.count(*) FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) g.queue_id
					   AND j.group_key OPERATOR(pg_catalog.=) g.group_key
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND j.held
					   AND j.run_at OPERATOR(pg_catalog.>) now) AS later,
				   (SELECT j.run_at FROM claimq.job j
					 WHERE j.queue_id OPERATOR(pg_catalog.=) g.queue_id
					   AND j.group_key OPERATOR(pg_catalog.=) g.group_key
					   AND j.state OPERATOR(pg_catalog.=) 'pending' AND j.held
					   AND j.run_at OPERATOR(pg_catalog.<=) now
					 ORDER BY j.run_at LIMIT 1) AS first) s
		 WHERE g.queue_id OPERATOR(pg_catalog.=) q.queue_id;

		-- Jobs in flight, through the lease index.
		SELECT pg_catalog.count(*) FILTER (WHERE j.expires_at OPERATOR(pg_catalog.<) now) AS expired,
			   pg_catalog.min(j.claimed_at) AS first
		  INTO l
		  FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.expires_at IS NOT NULL;

		scheduled := f.later OPERATOR(pg_catalog.+) h.later;
		r.queue := q.name;
		r.paused := q.paused;
		r.ready := GREATEST(COALESCE((n OPERATOR(pg_catalog.->>) 'pending')::bigint, 0)
							OPERATOR(pg_catalog.-) scheduled, 0);
		r.scheduled := scheduled;
		r.claimed := COALESCE((n OPERATOR(pg_catalog.->>) 'claimed')::bigint, 0);
		r.running := COALESCE((n OPERATOR(pg_catalog.->>) 'running')::bigint, 0);
		r.expired := l.expired;
		r.dead := COALESCE((n OPERATOR(pg_catalog.->>) 'dead')::bigint, 0);
		r.done := COALESCE((n OPERATOR(pg_catalog.->>) 'done')::bigint, 0);
		r.oldest_ready_age := now OPERATOR(pg_catalog.-) LEAST(f.first, h.first);
		r.oldest_claim_age := now OPERATOR(pg_catalog.-) l.first;
		r.cancelled := COALESCE((n OPERATOR(pg_catalog.->>) 'cancelled')::bigint, 0);
		r.waiting := COALESCE((n OPERATOR(pg_catalog.->>) 'waiting')::bigint, 0);
		RETURN NEXT r;
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.scrape_stats() IS
'private: queue_stats''s rows from the census and bounded reads of the indexes, for metrics()';

REVOKE ALL ON FUNCTION claimq.scrape_stats() FROM PUBLIC;

DROP FUNCTION claimq.scrape_stats_0_6_2();
DROP VIEW claimq.queue_stats_0_6_2;
DROP VIEW claimq.jobs_0_6_2;

/*------------------------------------------------------------------------
 * 6. Comments that changed
 *-----------------------------------------------------------------------*/

COMMENT ON FUNCTION claimq.cancel(bigint[]) IS
'cancel waiting, pending, claimed or running jobs; their holders'' tokens then get the outcome cancelled';

COMMENT ON FUNCTION claimq.grant_duty(regrole,text) IS
'grant a role one duty: produce (enqueue, cancel, status, dependencies, dedup keys), work (claim and settle jobs, status, dedup keys), administer (queues, schedules, recovery, views) or observe (read the figures and metrics only)';

/*------------------------------------------------------------------------
 * 7. The portable edition's own changes (a comment in the C edition)
 *-----------------------------------------------------------------------*/

-- @include portable/update--0.6.2--0.7.sql
