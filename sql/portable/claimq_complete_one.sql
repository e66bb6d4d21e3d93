DECLARE
	in_queue_id integer;
	now_ timestamptz;
	qid integer;
	gkey text;
	judge_id bigint;
	forget_set bigint;
	settled boolean := false;
BEGIN
	-- @include check-primary.sql function=complete
	-- @include portable/check-settle-pair.sql function=complete
	-- @include portable/in-queue-id.sql function=complete

	/*
	 * As the array form: one DELETE while no queue keeps done jobs, and a
	 * job that jobs run after is kept done (src/settle.c, src/workflow.c).
	 */
	now_ := pg_catalog.clock_timestamp();
	DELETE FROM claimq.job j
	 WHERE j.job_id OPERATOR(pg_catalog.=) complete.job_id
	   AND j.token OPERATOR(pg_catalog.=) complete.token
	-- @include portable/in-queue.sql
	   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
	   AND NOT EXISTS (SELECT 1 FROM claimq.queue k
						WHERE k.keep_done OPERATOR(pg_catalog.>) '0'::interval)
	   AND NOT j.dependents
	RETURNING j.queue_id, j.group_key, j.after_set INTO qid, gkey, forget_set;
	IF NOT FOUND THEN
		/*
		 * Once more, with a new snapshot, if neither branch took the job: an
		 * enqueue after it may have committed dependents into it while the
		 * statement waited for its lock (src/settle.c, cq_complete_all_op).
		 */
		FOR pass IN 1..2 LOOP
			WITH del AS (
				DELETE FROM claimq.job j
				 USING claimq.queue q
				 WHERE j.job_id OPERATOR(pg_catalog.=) complete.job_id
				   AND j.token OPERATOR(pg_catalog.=) complete.token
	-- @include portable/in-queue.sql
				   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
				   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
				   AND q.keep_done OPERATOR(pg_catalog.<=) '0'::interval
				   AND NOT j.dependents
				RETURNING j.queue_id, j.group_key, NULL::bigint AS judge,
						  j.after_set AS forget
			), kept AS (
				UPDATE claimq.job j
				   SET state = 'done', finished_at = now_, expires_at = NULL,
					   result = complete.result
				  FROM claimq.queue q
				 WHERE j.job_id OPERATOR(pg_catalog.=) complete.job_id
				   AND j.token OPERATOR(pg_catalog.=) complete.token
	-- @include portable/in-queue.sql
				   AND j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])
				   AND q.queue_id OPERATOR(pg_catalog.=) j.queue_id
				   AND (j.dependents OR q.keep_done OPERATOR(pg_catalog.>) '0'::interval)
				RETURNING j.queue_id, j.group_key,
						  CASE WHEN j.dependents THEN j.job_id END AS judge,
						  NULL::bigint AS forget
			)
			SELECT s.queue_id, s.group_key, s.judge, s.forget INTO qid, gkey, judge_id, forget_set
			  FROM (SELECT * FROM del UNION ALL SELECT * FROM kept) s;
			settled := FOUND;
			EXIT WHEN settled;
		END LOOP;
		IF NOT settled THEN
			-- @include check-in-queue.sql function=complete ids=ARRAY[complete.job_id]
			RETURN false;
		END IF;
	END IF;
	IF gkey IS NOT NULL THEN
		PERFORM claimq.sync_groups(qid, ARRAY[gkey]);
	END IF;
	/* Workflows (src/workflow.c, cq_finishes_settle): judge, then forget. */
	IF judge_id IS NOT NULL THEN
		PERFORM claimq.judge_dependents(ARRAY[judge_id]);
	END IF;
	IF forget_set IS NOT NULL THEN
		PERFORM claimq.forget_after(ARRAY[forget_set], '{}');
	END IF;
	RETURN true;
END
