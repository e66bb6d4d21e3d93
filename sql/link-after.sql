-- An enqueue's "after" list, written once for the install script and the
-- update that replaces it.
/*
 * Record an enqueue's "after" list: each job once, in order of first
 * appearance, as a new set.  Raises 22023 for more than 100,000 ids, 22004
 * for a NULL element and 23503 for the first id (in input order) of no
 * existing job; locks the listed jobs until the transaction ends.  On a
 * distributed install a job not in the queue's shards is looked for after
 * the commit (sql/after-elsewhere.sql): it counts as unfinished until its
 * state is heard.
 * Returns the set, how many of its jobs are unfinished, and whether the
 * finished ones all ended done.
 */
CREATE FUNCTION claimq.link_after(after bigint[], OUT set_id bigint,
								  OUT unfinished integer, OUT all_done boolean)
RETURNS record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	ids bigint[];
	found bigint[];
	unknown bigint;
-- @c
	elsewhere bigint[];
-- @end
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
		RETURNING j.job_id, j.state)
	SELECT pg_catalog.array_agg(m.job_id),
		   pg_catalog.count(*) FILTER (WHERE m.state OPERATOR(pg_catalog.<>) ALL ('{done,dead,cancelled}'::text[])),
		   COALESCE(pg_catalog.bool_and(m.state OPERATOR(pg_catalog.=) 'done')
					FILTER (WHERE m.state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[])), true)
	  INTO found, unfinished, all_done
	  FROM marked m;
	IF COALESCE(pg_catalog.cardinality(found), 0) OPERATOR(pg_catalog.<) pg_catalog.cardinality(ids) THEN
-- @c
		IF claimq.node_role() OPERATOR(pg_catalog.<>) 'single' THEN
			-- The ids the lock above did not find, whatever commits since.
			elsewhere := ARRAY(
				SELECT u.id FROM pg_catalog.unnest(ids) AS u(id)
				 WHERE u.id OPERATOR(pg_catalog.<>) ALL (COALESCE(found, '{}')));
			unfinished := unfinished OPERATOR(pg_catalog.+) pg_catalog.cardinality(elsewhere);
		END IF;
	END IF;
	IF elsewhere IS NULL
	   AND COALESCE(pg_catalog.cardinality(found), 0) OPERATOR(pg_catalog.<) pg_catalog.cardinality(ids) THEN
-- @end
		SELECT u.id INTO unknown
		  FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, ord)
		 WHERE u.id OPERATOR(pg_catalog.<>) ALL (COALESCE(found, '{}'))
		 ORDER BY u.ord LIMIT 1;
		RAISE EXCEPTION 'job % in "after" does not exist', unknown
			USING ERRCODE = '23503',
				  HINT = 'A job that completed in a queue that keeps nothing no longer exists: enqueue a workflow''s jobs in one transaction, or keep done jobs.';
	END IF;

	-- With the node's bits, as a job id: a shard moved to another node
	-- keeps sets of both nodes (claimq.job_id_base).
	set_id := claimq.job_id_base() OPERATOR(pg_catalog.+)
		pg_catalog.nextval('claimq.after_set_seq'::pg_catalog.regclass);
	INSERT INTO claimq.job_after (set_id, position, after_id)
	SELECT link_after.set_id, u.ord, u.id
	  FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, ord);
-- @c
	IF elsewhere IS NOT NULL THEN
		UPDATE claimq.job_after e SET remote = true
		 WHERE e.set_id OPERATOR(pg_catalog.=) link_after.set_id
		   AND e.after_id OPERATOR(pg_catalog.=) ANY (elsewhere);
		INSERT INTO claimq.after_mail (queue, job_id, set_id)
		SELECT claimq.routed_queue(), u.id, link_after.set_id
		  FROM pg_catalog.unnest(elsewhere) AS u(id);
	END IF;
-- @end
END
$$;

COMMENT ON FUNCTION claimq.link_after(bigint[]) IS
'private: check, lock and record an enqueue''s "after" list as a set; returns it, how many of its jobs are unfinished, and whether the finished ones all ended done';
