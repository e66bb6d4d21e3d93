-- metrics() and the stats it reads, written once for the install script
-- and the update that replaces them.

/*
 * queue_stats's rows for metrics(), without a pass over the job table:
 * the counts per state from the census, and what depends on the time
 * read from the indexes in bounded steps.  Scheduled jobs (pending, due
 * later) are the tail of each priority's run_at order in the claim's
 * index (one probe per distinct priority) and, for held jobs, the tail of
 * each group's due order (one probe per group with a lock row); the
 * oldest ready job is the head of those orders; expired leases and the
 * oldest claim are read from the jobs in flight only.  Without a valid
 * census (no preload, a standby, before the reclaimer's first count, a
 * prepared transaction) the rows are queue_stats's own.  The counts are
 * those committed when the scrape reads them; a change committed in the
 * middle of a scrape can show in one figure and not yet in another.
 */
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
-- @c
	-- A node of a distributed install: the queues of its own shards.
	IF claimq.node_role() OPERATOR(pg_catalog.<>) 'single' THEN
		RETURN QUERY SELECT * FROM claimq.node_queue_stats();
		RETURN;
	END IF;
-- @end
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

CREATE FUNCTION claimq.metrics()
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	-- Each source is read once; the counts come from the census.
	stats jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(s) ORDER BY s.queue), '[]')
					  FROM claimq.scrape_stats() s);
-- @c
	counts jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(c) ORDER BY c.queue), '[]')
					   FROM claimq.counters() c WHERE c.queue IS NOT NULL);
	lats jsonb := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(l) ORDER BY l.queue), '[]')
					 FROM claimq.queue_latency() l);
	paths jsonb := '[]';
	slots record;
	role text := claimq.node_role();
-- @end
	family constant text := E'# HELP %1$s %2$s\n# TYPE %1$s %3$s\n';
	fair jsonb := '[]';
	out text;
	f record;
BEGIN
-- @c
	-- A distributed install's coordinator: every worker's figures
	-- (sql/distribute.sql).  A node of it has no flow paths yet.
	IF role OPERATOR(pg_catalog.=) 'coordinator' THEN
		RETURN claimq.cluster_metrics();
	ELSIF role OPERATOR(pg_catalog.=) 'single' THEN
		paths := (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('queue', q.name, 'row_path', p.row_path::integer)
														  ORDER BY q.name), '[]')
					FROM claimq.flow_row_paths(ARRAY(SELECT t.queue_id FROM claimq.queue t
													  WHERE t.max_in_flight OPERATOR(pg_catalog.>) 0
														 OR t.rate_limit OPERATOR(pg_catalog.>) 0)) p
					JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) p.queue_id);
	END IF;
-- @end
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
-- @portable
	-- No counters or latency summaries: no shared memory (DESIGN.md,
	-- Editions), so their families are left out.
-- @end
-- @c
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
	-- Flow control (DESIGN.md, Flow control): the limited queues on the row
	-- path, and the server's slots for the administer duty only.
	out := out OPERATOR(pg_catalog.||)
		pg_catalog.format(family, 'claimq_flow_row_path',
						  '1 while the queue''s claims take turns on its row for want of a flow slot (claimq.flow_slots), per queue with max_in_flight or rate_limit.',
						  'gauge')
		OPERATOR(pg_catalog.||)
		COALESCE((SELECT pg_catalog.string_agg(
					pg_catalog.format(E'claimq_flow_row_path{queue="%s"} %s\n',
									  e.x OPERATOR(pg_catalog.->>) 'queue', e.x OPERATOR(pg_catalog.->>) 'row_path'),
					'' ORDER BY e.n)
				  FROM pg_catalog.jsonb_array_elements(paths) WITH ORDINALITY AS e(x, n)), '');
	SELECT * INTO slots FROM claimq.flow_slots();
	IF FOUND THEN
		out := out OPERATOR(pg_catalog.||)
			pg_catalog.format(family, 'claimq_flow_slots',
							  'The server''s flow slots: held by a limited queue, or free (empty, or holding a bucket that can be given to another queue).',
							  'gauge')
			OPERATOR(pg_catalog.||)
			pg_catalog.format(E'claimq_flow_slots{state="held"} %s\nclaimq_flow_slots{state="free"} %s\n',
							  slots.held, slots.free);
	END IF;
-- @end
	-- Fair queues (fair-share.sql): each tenant's jobs handed out since it
	-- last had none live (its share's row and its charges, and what shared
	-- memory holds in the C edition with the preload), and its weight;
	-- the tenant of jobs without a group key has the label keyless="1".
	-- None without a share (a distributed install's node has none, and
	-- its queue table is no table of its own).
	IF EXISTS (SELECT FROM claimq.fair_share) THEN
		fair := (WITH kept AS MATERIALIZED (
					SELECT h.queue_id, h.group_key, h.handed FROM claimq.fair_handed() h)
				 SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
									'labels', pg_catalog.format('queue="%s",%s', q.name,
										CASE WHEN t.group_key IS NULL THEN 'keyless="1"'
											 ELSE pg_catalog.format('group_key="%s"',
												pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
													t.group_key, E'\\', E'\\\\'), '"', E'\\"'), E'\n', E'\\n'))
										END),
									'handed', t.handed, 'weight', t.weight)
								 ORDER BY q.name, t.group_key NULLS FIRST), '[]')
				   FROM (SELECT s.queue_id, s.group_key,
								pg_catalog.sum(s.handed) OPERATOR(pg_catalog.+) COALESCE((
									SELECT pg_catalog.sum(d.jobs) FROM claimq.fair_charge d
									 WHERE d.queue_id OPERATOR(pg_catalog.=) s.queue_id
									   AND d.group_key IS NOT DISTINCT FROM s.group_key), 0)
								OPERATOR(pg_catalog.+) COALESCE((
									SELECT pg_catalog.sum(m.handed) FROM kept m
									 WHERE m.queue_id OPERATOR(pg_catalog.=) s.queue_id
									   AND m.group_key IS NOT DISTINCT FROM s.group_key), 0) AS handed,
								COALESCE((SELECT w.weight FROM claimq.group_weight w
										   WHERE w.queue_id OPERATOR(pg_catalog.=) s.queue_id
											 AND w.group_key IS NOT DISTINCT FROM s.group_key), 1) AS weight
						   FROM claimq.fair_share s
						  GROUP BY s.queue_id, s.group_key) t
				   JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) t.queue_id);
	END IF;
	FOR f IN SELECT * FROM (VALUES
		('fair_handed_total', 'handed', 'counter',
		 'Jobs a fair queue handed to a tenant since the tenant last had no live job.'),
		('fair_weight', 'weight', 'gauge',
		 'A fair queue''s tenant''s weight (set_group_weight), per tenant with live jobs.')) AS v(name, key, type, help)
	LOOP
		out := out OPERATOR(pg_catalog.||)
			pg_catalog.format(family, 'claimq_' OPERATOR(pg_catalog.||) f.name, f.help, f.type)
			OPERATOR(pg_catalog.||)
			COALESCE((SELECT pg_catalog.string_agg(
						pg_catalog.format(E'claimq_%s{%s} %s\n', f.name,
										  e.x OPERATOR(pg_catalog.->>) 'labels',
										  e.x OPERATOR(pg_catalog.->>) f.key),
						'' ORDER BY e.n)
					  FROM pg_catalog.jsonb_array_elements(fair) WITH ORDINALITY AS e(x, n)), '');
	END LOOP;
	RETURN out;
END
$$;

COMMENT ON FUNCTION claimq.metrics() IS
'the current database''s queue figures in the Prometheus text exposition format';
