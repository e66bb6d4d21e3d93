-- retry_dead, written once for the install script and the update that
-- changes it.

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
	prios integer[];
	tenants text[];
BEGIN
	PERFORM claimq.check_queue_name(queue);
	IF EXISTS (SELECT FROM pg_catalog.unnest(job_ids) u(id) WHERE u.id IS NULL) THEN
		RAISE EXCEPTION 'job_ids must not contain null elements'
			USING ERRCODE = '22004';
	END IF;
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
		RETURNING j.group_key, j.job_id, j.dependents, j.priority)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(DISTINCT r.group_key) FILTER (WHERE r.group_key IS NOT NULL),
		   pg_catalog.array_agg(r.job_id) FILTER (WHERE r.dependents),
		   pg_catalog.array_agg(r.priority), pg_catalog.array_agg(r.group_key)
	  INTO n, groups, redriven_after, prios, tenants
	  FROM redriven r;
	/* A fair queue's tenants of the jobs live again (fair-share.sql). */
	IF q.fair THEN
		PERFORM claimq.fair_join(q.queue_id, t.p, pg_catalog.array_agg(DISTINCT t.k))
		   FROM ROWS FROM (pg_catalog.unnest(prios), pg_catalog.unnest(tenants)) t(p, k)
		  GROUP BY t.p;
	END IF;
	PERFORM claimq.ledger_note(q.queue_id, 'pending', '{dead}', ARRAY[n]);
	PERFORM claimq.ledger_end();
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
