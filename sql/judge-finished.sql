-- The judgement of the jobs waiting on finished jobs, written once for the
-- install script and the update that creates it.
/*
 * Judge the jobs waiting on the listed jobs, which have finished or been
 * removed unfinished (a removed job counts as cancelled, or, if it
 * finished before, as its final_state), and those that their judgement
 * cancels in turn; given sets, only the jobs of those sets count the
 * listed jobs off (sql/after-elsewhere.sql).  On a distributed install,
 * the jobs of other shards that wait on them are told, after the commit
 * (claimq.tell_watchers).  See the section's head.
 */
CREATE FUNCTION claimq.judge_finished(job_ids bigint[], sets bigint[] DEFAULT NULL)
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
	 * id order; the passes then take no lock they do not hold, but for a
	 * job that an enqueue after one of them committed between the look
	 * and its lock (see the section's head).
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
-- @c
		-- Not for a job heard of (sets): its watchers are another matter.
		IF sets IS NULL AND claimq.node_role() OPERATOR(pg_catalog.<>) 'single' THEN
			PERFORM claimq.tell_watchers(finished);
		END IF;
-- @end
		ready := claimq.count_dependents(finished, -1, sets);
		sets := NULL;
		EXIT WHEN ready IS NULL;

		/*
		 * Judge those with none left, by the states of their sets' jobs now
		 * (a new snapshot: it sees what the count waited for): pending if
		 * every one ended done or after_failed is run, else cancelled.
		 */
		PERFORM claimq.ledger_begin();
		WITH verdict AS (
			SELECT e.set_id,
				   pg_catalog.bool_and(COALESCE(a.state, e.final_state)
									   IS NOT DISTINCT FROM 'done') AS all_done
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
							'queue_id', g.queue_id, 'to_state', g.state, 'n', g.n,
							'groups', g.groups))
				  FROM (SELECT x.queue_id, x.state, pg_catalog.count(*) AS n,
							   pg_catalog.array_agg(DISTINCT x.group_key)
								 FILTER (WHERE x.held) AS groups
						  FROM judged x GROUP BY x.queue_id, x.state) g),
			   (SELECT pg_catalog.array_agg(x.job_id) FROM judged x
				 WHERE x.state OPERATOR(pg_catalog.=) 'cancelled' AND x.dependents)
		  INTO moves, finished;

		/* Tell the ledger, one move per queue and state. */
		PERFORM claimq.ledger_note((x OPERATOR(pg_catalog.->>) 'queue_id')::integer,
								   x OPERATOR(pg_catalog.->>) 'to_state', '{waiting}',
								   ARRAY[(x OPERATOR(pg_catalog.->>) 'n')::bigint])
		   FROM pg_catalog.jsonb_array_elements(COALESCE(moves, '[]')) AS x;
		PERFORM claimq.ledger_end();

		/* Jobs made pending in limited groups go in held, then are synced. */
		FOR m IN SELECT (x OPERATOR(pg_catalog.->>) 'queue_id')::integer AS queue_id,
						ARRAY(SELECT pg_catalog.jsonb_array_elements_text(x OPERATOR(pg_catalog.->) 'groups')) AS groups
				   FROM pg_catalog.jsonb_array_elements(COALESCE(moves, '[]')) AS x
				  WHERE pg_catalog.jsonb_typeof(x OPERATOR(pg_catalog.->) 'groups') OPERATOR(pg_catalog.=) 'array'
				  ORDER BY 1 LOOP
			PERFORM claimq.sync_groups(m.queue_id, m.groups);
		END LOOP;
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.judge_finished(bigint[],bigint[]) IS
'private: the listed jobs finished or were removed: count them off their waiting dependents (of the sets given, or any), and judge each that has none left (pending, or cancelled, whose own dependents are judged in turn)';
