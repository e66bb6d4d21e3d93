-- Distribution on Citus (the C edition; src/shard.c), written once for
-- the install script and the update that creates it.

/*
 * The queue column of a distributed install's queue-keyed tables takes
 * this as its default: the queue the call's statements are routed to.
 */
CREATE FUNCTION claimq.routed_queue()
RETURNS text
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_routed_queue';

COMMENT ON FUNCTION claimq.routed_queue() IS
'private: on a distributed install, the queue the call''s statements are routed to (the default of the tables'' queue column)';

/*
 * A PL/pgSQL call of one queue (claimq.lock_queue() calls it) routes its
 * statements to the queue's shards, as claimq's C calls do.
 */
CREATE FUNCTION claimq.route_to(queue text)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_route_to';

COMMENT ON FUNCTION claimq.route_to(text) IS
'private: on a distributed install, run the call''s statements that follow against the queue''s shards (0A000 on a node without them)';

/*
 * The shard of claimq.queue that the call's statements are routed to
 * (a finish's, in claimq.job_finish), and a route to the shards colocated
 * with one (judge_finishes judges a transaction's finishes shard by shard).
 */
CREATE FUNCTION claimq.routed_shard()
RETURNS bigint
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_routed_shard';

COMMENT ON FUNCTION claimq.routed_shard() IS
'private: on a distributed install, the shard of claimq.queue that the call''s statements are routed to';

CREATE FUNCTION claimq.route_to_shard(shard bigint)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_route_to_shard';

COMMENT ON FUNCTION claimq.route_to_shard(bigint) IS
'private: on a distributed install, run the call''s statements that follow against the shards colocated with shard';

/*
 * dependencies() not delegated on a distributed install (sql/job-calls.sql
 * calls it there): each listed job's, on its queue's node.
 */
CREATE FUNCTION claimq.dependencies_everywhere(job_ids bigint[], queue text)
RETURNS TABLE(job_id bigint, after_id bigint, state text, result jsonb,
			  last_error text)
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_dependencies_everywhere';

COMMENT ON FUNCTION claimq.dependencies_everywhere(bigint[],text) IS
'private: on a distributed install, dependencies() not delegated to the jobs'' queue''s node: each job''s (of queue, if given), on its queue''s node';

/*
 * NULL, but volatile: the planner hook puts it in place of a NULL queue
 * (src/shard.c), so that Citus does not delegate the call.
 */
CREATE FUNCTION claimq.no_queue()
RETURNS text
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_no_queue';

COMMENT ON FUNCTION claimq.no_queue() IS
'private: NULL, not delegated by Citus: the queue of a call given none on a distributed install';

/*
 * What this node is: single (not distributed), coordinator or worker.
 */
CREATE FUNCTION claimq.node_role()
RETURNS text
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_node_role';

COMMENT ON FUNCTION claimq.node_role() IS
'private: single (not distributed), coordinator or worker';

/*
 * queue_stats's rows for the queues this node holds (on a single server,
 * the view's): what scrape_stats() reads without the census, so that a
 * worker's metrics() show its own queues.
 */
CREATE FUNCTION claimq.node_queue_stats()
RETURNS SETOF claimq.queue_stats
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_node_queue_stats';

COMMENT ON FUNCTION claimq.node_queue_stats() IS
'private: queue_stats''s rows for the queues this node holds';

/*
 * metrics() on a distributed install's coordinator: every worker's
 * metrics(), each sample labelled with its node, the families merged, and
 * claimq_node_up per worker (0, and no samples, for a worker that does not
 * answer within five seconds).
 */
CREATE FUNCTION claimq.cluster_metrics()
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	w record;
	node text;
	line text;
	name text;
	names text[] := '{}';
	heads jsonb := '{}';
	samples jsonb := '{}';
	up text := '';
	out text;
BEGIN
	PERFORM pg_catalog.set_config('citus.node_connection_timeout', '5000', true);
	FOR w IN SELECT r.nodename, r.nodeport, r.success, r.result
			   FROM pg_catalog.run_command_on_workers('SELECT claimq.metrics()') r
			  ORDER BY r.nodename, r.nodeport LOOP
		node := w.nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) w.nodeport;
		up := up OPERATOR(pg_catalog.||)
			pg_catalog.format(E'claimq_node_up{node="%s"} %s\n', node,
							  CASE WHEN w.success THEN 1 ELSE 0 END);
		CONTINUE WHEN NOT w.success;
		FOREACH line IN ARRAY pg_catalog.string_to_array(pg_catalog.rtrim(w.result, E'\n'), E'\n') LOOP
			IF line LIKE '# %' THEN
				name := pg_catalog.split_part(line, ' ', 3);
				IF NOT name OPERATOR(pg_catalog.=) ANY (names) THEN
					names := names OPERATOR(pg_catalog.||) name;
				END IF;
				IF pg_catalog.strpos(COALESCE(heads OPERATOR(pg_catalog.->>) name, ''), line) OPERATOR(pg_catalog.=) 0 THEN
					heads := heads OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(name,
						COALESCE(heads OPERATOR(pg_catalog.->>) name, '') OPERATOR(pg_catalog.||) line OPERATOR(pg_catalog.||) E'\n');
				END IF;
			ELSE
				line := CASE WHEN pg_catalog.strpos(line, '{') OPERATOR(pg_catalog.>) 0
						THEN pg_catalog.regexp_replace(line, '^([^{]*)\{', '\1{node="' OPERATOR(pg_catalog.||) node OPERATOR(pg_catalog.||) '",')
						ELSE pg_catalog.regexp_replace(line, '^(\S+) ', '\1{node="' OPERATOR(pg_catalog.||) node OPERATOR(pg_catalog.||) '"} ') END;
				samples := samples OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(name,
					COALESCE(samples OPERATOR(pg_catalog.->>) name, '') OPERATOR(pg_catalog.||) line OPERATOR(pg_catalog.||) E'\n');
			END IF;
		END LOOP;
	END LOOP;
	out := E'# HELP claimq_node_up 1 if the worker answered this scrape, 0 if not (its queues'' figures are left out).\n'
		'# TYPE claimq_node_up gauge\n' OPERATOR(pg_catalog.||) up;
	FOREACH name IN ARRAY names LOOP
		out := out OPERATOR(pg_catalog.||) (heads OPERATOR(pg_catalog.->>) name)
			OPERATOR(pg_catalog.||) COALESCE(samples OPERATOR(pg_catalog.->>) name, '');
	END LOOP;
	RETURN out;
END
$$;

COMMENT ON FUNCTION claimq.cluster_metrics() IS
'private: metrics() of a distributed install''s coordinator: every worker''s, labelled by node, and claimq_node_up';

/*
 * queue_stats of a distributed install's coordinator (distribute_layout
 * makes the view read it there): every worker's node_queue_stats(), each
 * asked within five seconds; a worker that does not answer is left out,
 * with a WARNING that names it.  In the observe duty, as the functions of
 * the other views are: a view's reader calls its functions.
 */
CREATE FUNCTION claimq.cluster_queue_stats()
RETURNS SETOF claimq.queue_stats
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	w record;
BEGIN
	IF claimq.node_role() OPERATOR(pg_catalog.<>) 'coordinator' THEN
		RETURN;
	END IF;
	PERFORM pg_catalog.set_config('citus.node_connection_timeout', '5000', true);
	FOR w IN SELECT r.nodename, r.nodeport, r.success, r.result
			   FROM pg_catalog.run_command_on_workers(
						'SELECT COALESCE(pg_catalog.json_agg(s), ''[]'') FROM claimq.node_queue_stats() s') r
			  ORDER BY r.nodename, r.nodeport LOOP
		IF NOT w.success THEN
			RAISE WARNING 'claimq: worker %:% did not answer; its queues are left out of queue_stats',
				w.nodename, w.nodeport
				USING DETAIL = w.result;
			CONTINUE;
		END IF;
		RETURN QUERY SELECT * FROM pg_catalog.json_populate_recordset(NULL::claimq.queue_stats,
																	   w.result::pg_catalog.json);
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.cluster_queue_stats() IS
'queue_stats of a distributed install''s coordinator: every worker''s queues; a worker that does not answer is left out, with a WARNING';

/*
 * One node's part of distribute(), run on the coordinator and on every
 * worker before any table is distributed (Citus does not carry the DDL
 * of an extension's tables to the workers; each has the extension as its
 * install script made it).  Each queue-keyed table gets the queue's name,
 * the column Citus distributes it by, and keys that include it after the
 * columns claimq's statements look rows up by (a job by its id); the keys
 * between tables go (Citus keeps none across colocated shards by this
 * layout's columns).  A node's queue ids carry its Citus group in bits 24
 * to 30, so that queues created on two workers never share an id, also
 * after a move puts them on one, and the node registers a token epoch of
 * its own (claimq.node_epoch()).  A node that has the layout keeps it.
 */
CREATE FUNCTION claimq.distribute_layout()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	node integer := (SELECT g.groupid FROM pg_catalog.pg_dist_local_group g);
	first_id integer;
	view regclass;
	def text;
	grantee regrole;
BEGIN
	IF EXISTS (SELECT FROM pg_catalog.pg_attribute a
				WHERE a.attrelid OPERATOR(pg_catalog.=) 'claimq.job'::pg_catalog.regclass
				  AND a.attname OPERATOR(pg_catalog.=) 'queue'
				  AND NOT a.attisdropped) THEN
		RETURN;
	END IF;
	IF node OPERATOR(pg_catalog.>) 127 THEN
		RAISE EXCEPTION 'claimq distributes over Citus groups 0 to 127, and this node is in group %', node
			USING ERRCODE = '55000';
	END IF;
	PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
	ALTER TABLE claimq.schedule DROP CONSTRAINT schedule_queue_fkey;
	ALTER TABLE claimq.job_group DROP CONSTRAINT job_group_queue_fkey;
	-- Fair queues are not distributed (create_queue and alter_queue
	-- refuse them there): their shares stay each node's own, and the
	-- weights, which group_stats shows, become a reference table.
	ALTER TABLE claimq.group_weight DROP CONSTRAINT group_weight_queue_fkey;
	ALTER TABLE claimq.fair_share DROP CONSTRAINT fair_share_queue_fkey;
	ALTER TABLE claimq.queue
		DROP CONSTRAINT queue_pkey,
		ADD CONSTRAINT queue_pkey PRIMARY KEY (queue_id, name);
	ALTER TABLE claimq.job
		ADD COLUMN queue text NOT NULL,
		DROP CONSTRAINT job_pkey,
		ADD CONSTRAINT job_pkey PRIMARY KEY (job_id, queue);
	DROP INDEX claimq.job_dedup_idx;
	CREATE UNIQUE INDEX job_dedup_idx ON claimq.job (queue_id, dedup_key, queue)
		WHERE dedup_key IS NOT NULL
		  AND state OPERATOR(pg_catalog.=) ANY ('{waiting,pending,claimed,running}'::text[]);
	ALTER TABLE claimq.job_group
		ADD COLUMN queue text NOT NULL,
		DROP CONSTRAINT job_group_pkey,
		ADD CONSTRAINT job_group_pkey PRIMARY KEY (queue_id, group_key, queue);
	ALTER TABLE claimq.job_after
		ADD COLUMN queue text NOT NULL,
		DROP CONSTRAINT job_after_pkey,
		ADD CONSTRAINT job_after_pkey PRIMARY KEY (set_id, position, queue);
	ALTER TABLE claimq.schedule
		ADD COLUMN queue text NOT NULL,
		DROP CONSTRAINT schedule_pkey,
		ADD CONSTRAINT schedule_pkey PRIMARY KEY (name, queue);
	-- Set apart from ADD COLUMN, which would evaluate a default that is
	-- not volatile once, outside any call.
	ALTER TABLE claimq.job ALTER COLUMN queue SET DEFAULT claimq.routed_queue();
	ALTER TABLE claimq.job_group ALTER COLUMN queue SET DEFAULT claimq.routed_queue();
	ALTER TABLE claimq.job_after ALTER COLUMN queue SET DEFAULT claimq.routed_queue();
	ALTER TABLE claimq.schedule ALTER COLUMN queue SET DEFAULT claimq.routed_queue();
	-- A transaction's finishes are judged at its commit shard by shard
	-- (judge_finishes), each where its queue's shards are.
	ALTER TABLE claimq.job_finish ADD COLUMN shard bigint;
	ALTER TABLE claimq.job_finish
		ALTER COLUMN shard SET DEFAULT claimq.routed_shard(),
		ALTER COLUMN shard SET NOT NULL;
	-- The views that join a queue to its jobs or schedules join them by
	-- the queue's name too, which Citus needs to join shard by shard.
	FOR view IN SELECT v::pg_catalog.regclass
				  FROM pg_catalog.unnest(ARRAY['claimq.jobs', 'claimq.group_stats',
											   'claimq.schedules']) v LOOP
		def := pg_catalog.pg_get_viewdef(view);
		def := pg_catalog.replace(def, '(q.queue_id = j.queue_id)',
								  '((q.queue_id = j.queue_id) AND (q.name = j.queue))');
		def := pg_catalog.replace(def, '(q.queue_id = s.queue_id)',
								  '((q.queue_id = s.queue_id) AND (q.name = s.queue))');
		IF def NOT LIKE '%q.name = _.queue%' THEN
			RAISE EXCEPTION 'view % has no join of a queue that distribute() knows', view;
		END IF;
		-- claimq's own view, replaced in place: its grants and its
		-- membership in the extension stay.  (The install script itself
		-- replaces nothing: test/sql/security.sql.)
		EXECUTE pg_catalog.format('CREATE %s VIEW %s AS %s', 'OR REPLACE', view, def);
	END LOOP;
	-- The coordinator's queue_stats asks every worker for its queues and
	-- goes on without one that does not answer (where Citus's query over
	-- the shards would fail).
	IF node OPERATOR(pg_catalog.=) 0 THEN
		EXECUTE pg_catalog.format('CREATE %s VIEW claimq.queue_stats AS SELECT * FROM claimq.cluster_queue_stats()',
								  'OR REPLACE');
		-- Who may read the view now calls the function (the observe duty
		-- grants it to those given the duty from now on).
		FOR grantee IN SELECT DISTINCT g.grantee::pg_catalog.regrole
						 FROM pg_catalog.pg_class c,
							  LATERAL pg_catalog.aclexplode(c.relacl) g
						WHERE c.oid OPERATOR(pg_catalog.=) 'claimq.queue_stats'::pg_catalog.regclass
						  AND g.privilege_type OPERATOR(pg_catalog.=) 'SELECT'
						  AND g.grantee OPERATOR(pg_catalog.<>) c.relowner LOOP
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION claimq.cluster_queue_stats() TO %s',
									  grantee);
		END LOOP;
	END IF;
	-- A new lifetime's epoch, congruent to the node's group (node_epoch):
	-- every backend forgets the epoch it kept (src/token.c).
	TRUNCATE claimq.lifetime;
	PERFORM claimq.lifetime_epoch();
	IF node OPERATOR(pg_catalog.>) 0 THEN
		first_id := node OPERATOR(pg_catalog.*) 16777216;
		EXECUTE pg_catalog.format('ALTER SEQUENCE claimq.queue_id_seq'
								  ' MINVALUE %s MAXVALUE %s START %s RESTART %s',
								  first_id,
								  first_id OPERATOR(pg_catalog.+) 16777215,
								  first_id OPERATOR(pg_catalog.+) 1,
								  first_id OPERATOR(pg_catalog.+) 1);
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.distribute_layout() IS
'private: one node''s part of distribute(), the tables'' queue column and keys and the node''s range of queue ids';

/*
 * The calls Citus delegates to the node that holds their queue, by their
 * argument "queue" (claimq.distribute() takes them in this order).
 */
CREATE FUNCTION claimq.distributed_calls()
RETURNS SETOF regprocedure
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT f::pg_catalog.regprocedure FROM pg_catalog.unnest(ARRAY[
	'claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval, boolean)',
	'claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text, jsonb)',
	'claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text, jsonb[])',
	'claimq.claim(text, integer, interval, text, boolean, interval)',
	'claimq.start(bigint[], bigint[], interval, text)',
	'claimq.start(bigint, bigint, interval, text)',
	'claimq.extend(bigint[], bigint[], interval, text)',
	'claimq.extend(bigint, bigint, interval, text)',
	'claimq.complete(bigint[], bigint[], jsonb[], text)',
	'claimq.complete(bigint, bigint, jsonb, text)',
	'claimq.fail(bigint[], bigint[], text, interval, boolean, text)',
	'claimq.fail(bigint, bigint, text, interval, boolean, text)',
	'claimq.release(bigint[], bigint[], text)',
	'claimq.release(bigint, bigint, text)',
	'claimq.snooze(bigint[], bigint[], interval, text)',
	'claimq.snooze(bigint, bigint, interval, text)',
	'claimq.cancel(bigint[], text)',
	'claimq.status(bigint[], text)',
	'claimq.wait_for(bigint[], interval, text)',
	'claimq.check_in_queue(text, bigint[])',
	'claimq.reclaim(text, integer)',
	'claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval, boolean)',
	'claimq.drop_queue(text, boolean)',
	'claimq.pause_queue(text)',
	'claimq.resume_queue(text)',
	'claimq.purge_queue(text)',
	'claimq.retry_dead(text, bigint[])',
	'claimq.dependencies(bigint[], text)',
	'claimq.create_schedule(text, text, text, jsonb, text, integer, text, jsonb)',
	'claimq.at_schedule(text, text, boolean, text, text, jsonb, text, integer, text, boolean, jsonb)',
	'claimq.watch_after(text, bigint, text, bigint)',
	'claimq.hear_after(text, bigint, text, bigint)']) f
$$;

COMMENT ON FUNCTION claimq.distributed_calls() IS
'private: the calls that distribute() has Citus delegate to the node that holds their queue';

/*
 * Have Citus delegate claimq's calls, each to the node that holds its
 * queue (or scope): by distribute(), and again by update_distributed(),
 * since an update replaces the functions it changes.
 */
CREATE FUNCTION claimq.distribute_calls()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	call regprocedure;
BEGIN
	FOR call IN SELECT c FROM claimq.distributed_calls() c LOOP
		PERFORM pg_catalog.create_distributed_function(call, 'queue',
													   colocate_with => 'claimq.queue',
													   force_delegation => true);
	END LOOP;
	-- The key claims' calls, by their scope.
	PERFORM pg_catalog.create_distributed_function('claimq.claim_keys(text, text[], interval)',
												   'scope', colocate_with => 'claimq.key_claim',
												   force_delegation => true);
	PERFORM pg_catalog.create_distributed_function('claimq.release_keys(text, text[], bigint[])',
												   'scope', colocate_with => 'claimq.key_claim',
												   force_delegation => true);
END
$$;

COMMENT ON FUNCTION claimq.distribute_calls() IS
'private: have Citus delegate each of claimq''s calls to the node that holds its queue or scope';

/*
 * One node's part of update_distributed(): its shards of claimq's
 * distributed tables made like their tables again, by name (an update's
 * ALTER EXTENSION changes the tables on every node, but not their shards):
 * a column the table has and the shard lacks is added, in the table's
 * order, with its type, default and NOT NULL; one the shard has and the
 * table lost is dropped; an index of the table the shard lacks (named
 * as Citus names a shard's, with the shard's id appended) is made.
 * Returns what it changed, one line per change.
 */
CREATE FUNCTION claimq.update_shards()
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	sh record;
	col record;
	idx record;
	ddl text;
BEGIN
	PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
	PERFORM pg_catalog.set_config('citus.enable_manual_changes_to_shards', 'on', true);
	-- Shards and their indexes are hidden from pg_class otherwise.
	PERFORM pg_catalog.set_config('citus.override_table_visibility', 'off', true);
	FOR sh IN
		SELECT p.logicalrelid AS rel, d.shardid,
			   pg_catalog.format('%I.%I', n.nspname,
								 c.relname OPERATOR(pg_catalog.||) '_'
								 OPERATOR(pg_catalog.||) d.shardid)::pg_catalog.regclass AS shard
		  FROM pg_catalog.pg_dist_partition p
		  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) p.logicalrelid
		  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
		  JOIN pg_catalog.pg_dist_shard d ON d.logicalrelid OPERATOR(pg_catalog.=) p.logicalrelid
		  JOIN pg_catalog.pg_dist_placement l ON l.shardid OPERATOR(pg_catalog.=) d.shardid
		 WHERE n.nspname OPERATOR(pg_catalog.=) 'claimq'
		   AND l.groupid OPERATOR(pg_catalog.=) (SELECT g.groupid FROM pg_catalog.pg_dist_local_group g)
		 ORDER BY d.shardid
	LOOP
		FOR col IN
			SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type,
				   a.attnotnull, pg_catalog.pg_get_expr(e.adbin, e.adrelid) AS def
			  FROM pg_catalog.pg_attribute a
			  LEFT JOIN pg_catalog.pg_attrdef e
				ON e.adrelid OPERATOR(pg_catalog.=) a.attrelid AND e.adnum OPERATOR(pg_catalog.=) a.attnum
			 WHERE a.attrelid OPERATOR(pg_catalog.=) sh.rel
			   AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
			   AND NOT EXISTS (SELECT FROM pg_catalog.pg_attribute b
								WHERE b.attrelid OPERATOR(pg_catalog.=) sh.shard
								  AND b.attname OPERATOR(pg_catalog.=) a.attname
								  AND NOT b.attisdropped)
			 ORDER BY a.attnum
		LOOP
			ddl := pg_catalog.format('ALTER TABLE %s ADD COLUMN %I %s', sh.shard, col.attname, col.type);
			IF col.def IS NOT NULL THEN
				ddl := ddl OPERATOR(pg_catalog.||) ' DEFAULT ' OPERATOR(pg_catalog.||) col.def;
			END IF;
			IF col.attnotnull THEN
				ddl := ddl OPERATOR(pg_catalog.||) ' NOT NULL';
			END IF;
			EXECUTE ddl;
			RETURN NEXT ddl;
		END LOOP;
		FOR col IN
			SELECT b.attname FROM pg_catalog.pg_attribute b
			 WHERE b.attrelid OPERATOR(pg_catalog.=) sh.shard
			   AND b.attnum OPERATOR(pg_catalog.>) 0 AND NOT b.attisdropped
			   AND NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a
								WHERE a.attrelid OPERATOR(pg_catalog.=) sh.rel
								  AND a.attname OPERATOR(pg_catalog.=) b.attname
								  AND NOT a.attisdropped)
			 ORDER BY b.attnum
		LOOP
			ddl := pg_catalog.format('ALTER TABLE %s DROP COLUMN %I', sh.shard, col.attname);
			EXECUTE ddl;
			RETURN NEXT ddl;
		END LOOP;
		FOR idx IN
			SELECT x.indexrelid, ic.relname
			  FROM pg_catalog.pg_index x
			  JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) x.indexrelid
			 WHERE x.indrelid OPERATOR(pg_catalog.=) sh.rel
			   AND NOT EXISTS (SELECT FROM pg_catalog.pg_index y
								JOIN pg_catalog.pg_class yc ON yc.oid OPERATOR(pg_catalog.=) y.indexrelid
								WHERE y.indrelid OPERATOR(pg_catalog.=) sh.shard
								  AND yc.relname OPERATOR(pg_catalog.=)
									  (ic.relname OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) sh.shardid))
			 ORDER BY ic.relname
		LOOP
			ddl := pg_catalog.pg_get_indexdef(idx.indexrelid);
			ddl := pg_catalog.replace(ddl, pg_catalog.format(' INDEX %I ON ', idx.relname),
									  pg_catalog.format(' INDEX %I ON ', idx.relname OPERATOR(pg_catalog.||) '_'
														OPERATOR(pg_catalog.||) sh.shardid));
			ddl := pg_catalog.replace(ddl, pg_catalog.format(' ON %s ', sh.rel::text),
									  pg_catalog.format(' ON %s ', sh.shard::text));
			EXECUTE ddl;
			RETURN NEXT ddl;
		END LOOP;
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.update_shards() IS
'private: one node''s part of update_distributed(): its shards made like their tables again (columns and indexes, by name); returns the changes';

/*
 * After ALTER EXTENSION claimq UPDATE on the coordinator (which Citus
 * runs on every worker), the rest of a distributed install's update: the
 * shards made like their tables on every node, and the calls delegated
 * again.  Returns what it changed.
 */
CREATE FUNCTION claimq.update_distributed()
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	r record;
	failed text;
BEGIN
	IF claimq.node_role() OPERATOR(pg_catalog.<>) 'coordinator' THEN
		RAISE EXCEPTION 'claimq.update_distributed() runs on the coordinator of a distributed install'
			USING ERRCODE = '55000',
				  HINT = 'A single server is updated by ALTER EXTENSION claimq UPDATE alone.';
	END IF;
	SELECT pg_catalog.string_agg(w.nodename OPERATOR(pg_catalog.||) ':'
								 OPERATOR(pg_catalog.||) w.nodeport
								 OPERATOR(pg_catalog.||) ': '
								 OPERATOR(pg_catalog.||) w.result, '; ')
	  INTO failed
	  FROM pg_catalog.run_command_on_workers(
			   $c$SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'claimq'$c$) w
	 WHERE NOT w.success OR w.result OPERATOR(pg_catalog.<>)
		   (SELECT e.extversion FROM pg_catalog.pg_extension e
			 WHERE e.extname OPERATOR(pg_catalog.=) 'claimq');
	IF failed IS NOT NULL THEN
		RAISE EXCEPTION 'claimq is not at this version on every worker: %', failed
			USING ERRCODE = '55000',
				  HINT = 'Run ALTER EXTENSION claimq UPDATE on the coordinator, with every worker up, first.';
	END IF;
	RETURN QUERY SELECT u FROM claimq.update_shards() u;
	FOR r IN
		SELECT w.nodename, w.nodeport, w.success, w.result
		  FROM pg_catalog.run_command_on_workers(
				   'SELECT pg_catalog.string_agg(u, E''\n'') FROM claimq.update_shards() u') w
	LOOP
		IF NOT r.success THEN
			RAISE EXCEPTION 'claimq''s shards failed to update on %:%: %', r.nodename, r.nodeport, r.result
				USING ERRCODE = '55000',
					  HINT = 'Run claimq.update_distributed() again once every worker answers: a shard that is updated stays so.';
		END IF;
		IF r.result OPERATOR(pg_catalog.<>) '' THEN
			RETURN QUERY SELECT r.nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) r.nodeport
							   OPERATOR(pg_catalog.||) ': ' OPERATOR(pg_catalog.||) l
						   FROM pg_catalog.regexp_split_to_table(r.result, E'\n') l;
		END IF;
	END LOOP;
	PERFORM claimq.distribute_calls();
END
$$;

COMMENT ON FUNCTION claimq.update_distributed() IS
'on the coordinator of a distributed install, after ALTER EXTENSION claimq UPDATE: the shards made like their tables on every node and the calls delegated again; returns the changes';

CREATE FUNCTION claimq.distribute(shard_count integer DEFAULT 32)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	failed text;
BEGIN
	IF shard_count IS NULL OR shard_count OPERATOR(pg_catalog.<) 1
	   OR shard_count OPERATOR(pg_catalog.>) 64000 THEN
		RAISE EXCEPTION 'shard_count must be from 1 to 64000'
			USING ERRCODE = '22023';
	END IF;
	PERFORM FROM pg_catalog.pg_extension e
	  WHERE e.extname OPERATOR(pg_catalog.=) 'citus';
	IF NOT FOUND THEN
		RAISE EXCEPTION 'claimq.distribute() needs Citus'
			USING ERRCODE = '55000',
				  HINT = 'Preload citus and claimq on the coordinator and every worker, CREATE EXTENSION citus, and add the workers first.';
	END IF;
	IF (SELECT g.groupid FROM pg_catalog.pg_dist_local_group g) OPERATOR(pg_catalog.<>) 0 THEN
		RAISE EXCEPTION 'claimq.distribute() runs on the coordinator'
			USING ERRCODE = '55000';
	END IF;
	IF EXISTS (SELECT FROM pg_catalog.pg_dist_partition p
				WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'claimq.job'::pg_catalog.regclass) THEN
		RAISE EXCEPTION 'claimq is distributed already'
			USING ERRCODE = '55000';
	END IF;
	IF EXISTS (SELECT FROM claimq.queue) OR EXISTS (SELECT FROM claimq.key_claim) THEN
		RAISE EXCEPTION 'claimq.distribute() runs before any queue or key claim exists'
			USING ERRCODE = '55000',
				  HINT = 'Distribute a new install, then create its queues.';
	END IF;

	PERFORM claimq.distribute_layout();
	SELECT pg_catalog.string_agg(r.nodename OPERATOR(pg_catalog.||) ':'
								 OPERATOR(pg_catalog.||) r.nodeport
								 OPERATOR(pg_catalog.||) ': '
								 OPERATOR(pg_catalog.||) r.result, '; ')
	  INTO failed
	  FROM pg_catalog.run_command_on_workers('SELECT claimq.distribute_layout()') r
	 WHERE NOT r.success;
	IF failed IS NOT NULL THEN
		RAISE EXCEPTION 'claimq''s layout failed on a worker: %', failed
			USING ERRCODE = '55000',
				  HINT = 'Run claimq.distribute() again once every worker answers: a node that has the layout keeps it.';
	END IF;

	-- The census's guard is a statement trigger of claimq.job and its shards.
	PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
	PERFORM pg_catalog.create_distributed_table('claimq.queue', 'name',
												shard_count => shard_count);
	PERFORM pg_catalog.create_distributed_table('claimq.job', 'queue',
												colocate_with => 'claimq.queue');
	PERFORM pg_catalog.create_distributed_table('claimq.job_group', 'queue',
												colocate_with => 'claimq.queue');
	PERFORM pg_catalog.create_distributed_table('claimq.job_after', 'queue',
												colocate_with => 'claimq.queue');
	PERFORM pg_catalog.create_distributed_table('claimq.schedule', 'queue',
												colocate_with => 'claimq.queue');
	PERFORM pg_catalog.create_distributed_table('claimq.after_mail', 'queue',
												colocate_with => 'claimq.queue');
	PERFORM pg_catalog.create_distributed_table('claimq.job_watcher', 'queue',
												colocate_with => 'claimq.queue');
	PERFORM pg_catalog.create_reference_table('claimq.group_weight');
	PERFORM pg_catalog.create_distributed_table('claimq.key_claim', 'scope',
												shard_count => shard_count,
												colocate_with => 'none');
	PERFORM claimq.distribute_calls();
END
$$;

COMMENT ON FUNCTION claimq.distribute(integer) IS
'on a Citus coordinator, before any queue exists: distribute claimq''s tables by queue and have Citus delegate each call to the node that holds its queue';

-- @include after-elsewhere.sql

REVOKE ALL ON FUNCTION claimq.routed_queue() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.no_queue() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.route_to(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.dependencies_everywhere(bigint[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.routed_shard() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.route_to_shard(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.node_role() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.node_queue_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.cluster_metrics() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.cluster_queue_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.distribute_layout() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.distributed_calls() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.distribute(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.distribute_calls() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.update_shards() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.update_distributed() FROM PUBLIC;
