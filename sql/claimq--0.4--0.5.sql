/* claimq--0.4--0.5.sql: flow control (group limits, FIFO groups, max_in_flight, rate limits, group_stats) */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.5'" to load this file. \quit

/*
 * Functions and views whose signature or result changes are created anew
 * beside the old ones and given the old ones' grants; then the old ones
 * are dropped.  A GRANT run by an extension script is recorded as an
 * initial privilege, which pg_dump leaves out, so the object's initial
 * privileges are put back as they were.  (The same helper as in the
 * update to 0.4; it is dropped again at the end.)
 */
CREATE FUNCTION claimq.upgrade_copy_grants(old_oid oid, new_oid oid,
										   catalog regclass)
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

REVOKE ALL ON FUNCTION claimq.upgrade_copy_grants(oid, oid, regclass) FROM PUBLIC;

/*
 * Queues: the flow control options (NULL: no limit) and the rate limit's
 * token bucket (tokens left at rate_at), kept in the queue's row and
 * changed only by claims under the row's lock.
 */
ALTER TABLE claimq.queue
	ADD COLUMN group_limit integer,
	ADD COLUMN group_fifo boolean NOT NULL DEFAULT false,
	ADD COLUMN max_in_flight integer,
	ADD COLUMN rate_limit integer,
	ADD COLUMN rate_period interval NOT NULL DEFAULT '1 second',
	ADD COLUMN rate_tokens double precision,
	ADD COLUMN rate_at timestamptz;

/*
 * Jobs: a pending job of a group that its queue's group limits hold back
 * is "held", and out of the claim's index, so that a claim never steps
 * over the jobs of blocked or saturated groups.  Which of a group's
 * pending jobs are held is decided under the group's lock by
 * claimq.sync_groups (src/flow.c says when it runs).  Adding a column with
 * a constant default rewrites nothing.
 */
ALTER TABLE claimq.job ADD COLUMN held boolean NOT NULL DEFAULT false;

DROP INDEX claimq.job_ready_idx;
CREATE INDEX job_ready_idx ON claimq.job
	(queue_id, priority DESC, run_at, job_id)
	WHERE state OPERATOR(pg_catalog.=) 'pending' AND NOT held;

/*
 * The lease index leads with the queue, so that a claim of a queue with
 * max_in_flight counts that queue's jobs in flight and no other's.  The
 * reclaimer, which looks for expired leases of every queue, reads all of
 * it, as many entries as jobs are claimed or running.
 */
DROP INDEX claimq.job_lease_idx;
CREATE INDEX job_lease_idx ON claimq.job (queue_id, expires_at)
	WHERE expires_at IS NOT NULL;

/*
 * A group's live jobs, the free ones (in flight, or pending and not held)
 * first, in id order: the group's FIFO order and its slot count.  Only
 * jobs with a group key are in it.
 */
CREATE INDEX job_group_idx ON claimq.job (queue_id, group_key, held, job_id)
	WHERE group_key IS NOT NULL
	  AND state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[]);

/* A group's pending jobs in the order of group_limit: due first. */
CREATE INDEX job_group_due_idx ON claimq.job (queue_id, group_key, run_at, job_id)
	WHERE group_key IS NOT NULL AND state OPERATOR(pg_catalog.=) 'pending';

/*
 * One row per group with live jobs in a queue with group limits: the
 * group's lock.  Whoever changes which of the group's jobs are held, or
 * adds jobs to it, updates the row first, so that they take turns and a
 * REPEATABLE READ transaction that missed another's change fails to
 * serialize instead of counting from an old snapshot.
 */
CREATE TABLE claimq.job_group (
	queue_id		integer NOT NULL,
	group_key		text NOT NULL,
	changes			bigint NOT NULL DEFAULT 0,
	CONSTRAINT job_group_pkey PRIMARY KEY (queue_id, group_key),
	CONSTRAINT job_group_queue_fkey FOREIGN KEY (queue_id)
		REFERENCES claimq.queue (queue_id) ON DELETE CASCADE
);

REVOKE ALL ON TABLE claimq.job_group FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('claimq.job_group', '');

/*
 * Bring the held jobs of the groups listed in line with the queue's group
 * limits.  For each group, in key order, under its lock: the free jobs
 * (in flight, or pending and not held) are counted; if there are more
 * than the limit (it was lowered), the last pending ones are held; if
 * fewer, the first held ones are freed; and while a held job comes before
 * a free pending one in the group's order (job id with group_fifo,
 * otherwise due time then id), the two change places.  Rows another
 * transaction holds are left as they are: a claim in progress makes its
 * job in flight, which is free anyway.  Returns the earliest run_at of
 * the jobs it freed (NULL if none), for the caller to wake claims with.
 *
 * Counting runs in a statement after the lock, so under READ COMMITTED it
 * sees every change committed by the group's previous holder.
 */
CREATE FUNCTION claimq.sync_groups(queue_id integer, group_keys text[])
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q record;
	lim integer;
	g text;
	free integer;
	n integer;
	freed_at timestamptz;
	first_freed timestamptz;
	h record;
	u record;
BEGIN
	SELECT t.group_limit, t.group_fifo INTO q FROM claimq.queue t
	 WHERE t.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id;
	IF NOT FOUND OR (q.group_limit IS NULL AND NOT q.group_fifo) THEN
		RETURN NULL;
	END IF;
	lim := CASE WHEN q.group_fifo THEN 1 ELSE q.group_limit END;

	FOR g IN SELECT DISTINCT k.k COLLATE "C" FROM pg_catalog.unnest(group_keys) AS k(k)
			  WHERE k.k IS NOT NULL ORDER BY 1 LOOP
		INSERT INTO claimq.job_group AS x (queue_id, group_key)
		VALUES (sync_groups.queue_id, g)
		ON CONFLICT ON CONSTRAINT job_group_pkey
		DO UPDATE SET changes = x.changes OPERATOR(pg_catalog.+) 1;

		SELECT pg_catalog.count(*) INTO free FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
		   AND j.group_key OPERATOR(pg_catalog.=) g AND NOT j.held
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[]);

		IF free OPERATOR(pg_catalog.=) 0 AND NOT EXISTS (
			SELECT 1 FROM claimq.job j
			 WHERE j.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
			   AND j.group_key OPERATOR(pg_catalog.=) g
			   AND j.state OPERATOR(pg_catalog.=) 'pending') THEN
			DELETE FROM claimq.job_group x
			 WHERE x.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
			   AND x.group_key OPERATOR(pg_catalog.=) g;
			CONTINUE;
		END IF;

		IF free OPERATOR(pg_catalog.>) lim THEN
			UPDATE claimq.job j SET held = true
			 WHERE j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
				SELECT p.ctid FROM claimq.job p
				 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
				   AND p.group_key OPERATOR(pg_catalog.=) g AND NOT p.held
				   AND p.state OPERATOR(pg_catalog.=) 'pending'
				 ORDER BY CASE WHEN q.group_fifo THEN NULL ELSE p.run_at END DESC,
						  p.job_id DESC
				 LIMIT free OPERATOR(pg_catalog.-) lim
				 FOR UPDATE SKIP LOCKED));
			GET DIAGNOSTICS n = ROW_COUNT;
			free := free OPERATOR(pg_catalog.-) n;
		ELSIF free OPERATOR(pg_catalog.<) lim THEN
			IF q.group_fifo THEN
				WITH f AS (
					UPDATE claimq.job j SET held = false
					 WHERE j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
						SELECT p.ctid FROM claimq.job p
						 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
						   AND p.group_key OPERATOR(pg_catalog.=) g AND p.held
						   AND p.state OPERATOR(pg_catalog.=) 'pending'
						 ORDER BY p.job_id
						 LIMIT lim OPERATOR(pg_catalog.-) free
						 FOR UPDATE SKIP LOCKED))
					RETURNING j.run_at)
				SELECT pg_catalog.min(f.run_at) INTO freed_at FROM f;
			ELSE
				WITH f AS (
					UPDATE claimq.job j SET held = false
					 WHERE j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
						SELECT p.ctid FROM claimq.job p
						 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
						   AND p.group_key OPERATOR(pg_catalog.=) g AND p.held
						   AND p.state OPERATOR(pg_catalog.=) 'pending'
						 ORDER BY p.run_at, p.job_id
						 LIMIT lim OPERATOR(pg_catalog.-) free
						 FOR UPDATE SKIP LOCKED))
					RETURNING j.run_at)
				SELECT pg_catalog.min(f.run_at) INTO freed_at FROM f;
			END IF;
			first_freed := LEAST(first_freed, freed_at);
		END IF;

		/* A held job before a free pending one: they change places. */
		FOR i IN 1 .. lim LOOP
			IF q.group_fifo THEN
				SELECT p.ctid, p.job_id, p.run_at INTO h FROM claimq.job p
				 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
				   AND p.group_key OPERATOR(pg_catalog.=) g AND p.held
				   AND p.state OPERATOR(pg_catalog.=) 'pending'
				 ORDER BY p.job_id LIMIT 1;
			ELSE
				SELECT p.ctid, p.job_id, p.run_at INTO h FROM claimq.job p
				 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
				   AND p.group_key OPERATOR(pg_catalog.=) g AND p.held
				   AND p.state OPERATOR(pg_catalog.=) 'pending'
				 ORDER BY p.run_at, p.job_id LIMIT 1;
			END IF;
			EXIT WHEN h.ctid IS NULL;
			SELECT p.ctid, p.job_id, p.run_at INTO u FROM claimq.job p
			 WHERE p.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id
			   AND p.group_key OPERATOR(pg_catalog.=) g AND NOT p.held
			   AND p.state OPERATOR(pg_catalog.=) 'pending'
			   AND (p.job_id OPERATOR(pg_catalog.>) h.job_id
					OR NOT q.group_fifo)
			   AND (q.group_fifo OR p.run_at OPERATOR(pg_catalog.>) h.run_at
					OR (p.run_at OPERATOR(pg_catalog.=) h.run_at
						AND p.job_id OPERATOR(pg_catalog.>) h.job_id))
			 ORDER BY CASE WHEN q.group_fifo THEN NULL ELSE p.run_at END DESC,
					  p.job_id DESC
			 LIMIT 1
			 FOR UPDATE SKIP LOCKED;
			EXIT WHEN u.ctid IS NULL;
			UPDATE claimq.job j SET held = true WHERE j.ctid OPERATOR(pg_catalog.=) u.ctid;
			UPDATE claimq.job j SET held = false WHERE j.ctid OPERATOR(pg_catalog.=) h.ctid;
			first_freed := LEAST(first_freed, h.run_at);
		END LOOP;
	END LOOP;
	RETURN first_freed;
END
$$;

COMMENT ON FUNCTION claimq.sync_groups(integer, text[]) IS
'private: under each group''s lock, hold or free the groups'' pending jobs so that no more are free than the queue''s group limit allows, first in the group''s order; returns the earliest run_at it freed';

REVOKE ALL ON FUNCTION claimq.sync_groups(integer, text[]) FROM PUBLIC;

/*
 * Queue administration: create_queue and alter_queue take the flow
 * control options.  The new forms replace the old ones (with their
 * grants), so that no call is ambiguous between the two.
 */
CREATE FUNCTION claimq.check_flow_settings(
	group_limit integer, max_in_flight integer, rate_limit integer,
	rate_period interval)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_check_flow_settings';

COMMENT ON FUNCTION claimq.check_flow_settings(integer, integer, integer, interval) IS
'private: raise 22023 unless the flow control options are within the contract''s limits';

REVOKE ALL ON FUNCTION claimq.check_flow_settings(integer, integer, integer, interval) FROM PUBLIC;

ALTER FUNCTION claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean)
	RENAME TO create_queue_0_4;
ALTER FUNCTION claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean)
	RENAME TO alter_queue_0_4;

CREATE FUNCTION claimq.create_queue(
	queue text,
	lease interval DEFAULT '30 seconds',
	run_lease interval DEFAULT '5 minutes',
	max_attempts integer DEFAULT 5,
	retry_base interval DEFAULT '1 second',
	retry_max interval DEFAULT '1 hour',
	keep_done interval DEFAULT '0',
	keep_dead interval DEFAULT '14 days',
	notify boolean DEFAULT false,
	group_limit integer DEFAULT NULL,
	group_fifo boolean DEFAULT false,
	max_in_flight integer DEFAULT NULL,
	rate_limit integer DEFAULT NULL,
	rate_period interval DEFAULT '1 second')
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM claimq.check_queue_name(queue);
	IF lease IS NULL OR run_lease IS NULL OR max_attempts IS NULL
	   OR retry_base IS NULL OR retry_max IS NULL OR keep_done IS NULL
	   OR keep_dead IS NULL OR notify IS NULL OR group_fifo IS NULL
	   OR rate_period IS NULL THEN
		RAISE EXCEPTION 'queue settings must not be null'
			USING ERRCODE = '22004',
				  HINT = 'Omit a setting to take its default; a limit may be NULL (no limit).';
	END IF;
	PERFORM claimq.check_queue_settings(lease, run_lease, max_attempts,
										retry_base, retry_max,
										keep_done, keep_dead);
	PERFORM claimq.check_flow_settings(group_limit, max_in_flight,
									   rate_limit, rate_period);
	INSERT INTO claimq.queue AS q
		(name, lease, run_lease, max_attempts, retry_base, retry_max,
		 keep_done, keep_dead, notify, group_limit, group_fifo,
		 max_in_flight, rate_limit, rate_period)
	VALUES (queue, lease, run_lease, max_attempts, retry_base, retry_max,
			keep_done, keep_dead, notify, group_limit, group_fifo,
			max_in_flight, rate_limit, rate_period)
	ON CONFLICT (name) DO NOTHING;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" already exists', queue
			USING ERRCODE = '42710';
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval) IS
'create a queue; raises 42710 if it exists';

REVOKE ALL ON FUNCTION claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval) FROM PUBLIC;

/*
 * A change of group_limit or group_fifo re-decides which pending jobs of
 * the queue's groups are held.  Enqueues wait (the producer lock), and so
 * does every transaction that is changing one of the queue's grouped live
 * jobs (their row locks): one that changed a job before could not know of
 * the new limits, and one that changes a job after sees them.
 */
CREATE FUNCTION claimq.alter_queue(
	queue text,
	lease interval DEFAULT NULL,
	run_lease interval DEFAULT NULL,
	max_attempts integer DEFAULT NULL,
	retry_base interval DEFAULT NULL,
	retry_max interval DEFAULT NULL,
	keep_done interval DEFAULT NULL,
	keep_dead interval DEFAULT NULL,
	notify boolean DEFAULT NULL,
	group_limit integer DEFAULT NULL,
	group_fifo boolean DEFAULT NULL,
	max_in_flight integer DEFAULT NULL,
	rate_limit integer DEFAULT NULL,
	rate_period interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	old claimq.queue;
BEGIN
	PERFORM claimq.check_queue_name(queue);
	/* 0 removes a limit. */
	PERFORM claimq.check_flow_settings(
		NULLIF(alter_queue.group_limit, 0), NULLIF(alter_queue.max_in_flight, 0),
		NULLIF(alter_queue.rate_limit, 0), alter_queue.rate_period);
	IF alter_queue.group_limit IS NOT NULL OR alter_queue.group_fifo IS NOT NULL THEN
		PERFORM claimq.lock_producers(queue);
	END IF;
	q := claimq.lock_queue(queue);
	old := q;
	q.lease := COALESCE(lease, q.lease);
	q.run_lease := COALESCE(run_lease, q.run_lease);
	q.max_attempts := COALESCE(max_attempts, q.max_attempts);
	q.retry_base := COALESCE(retry_base, q.retry_base);
	q.retry_max := COALESCE(retry_max, q.retry_max);
	q.keep_done := COALESCE(keep_done, q.keep_done);
	q.keep_dead := COALESCE(keep_dead, q.keep_dead);
	q.notify := COALESCE(notify, q.notify);
	IF alter_queue.group_limit IS NOT NULL THEN
		q.group_limit := NULLIF(alter_queue.group_limit, 0);
	END IF;
	q.group_fifo := COALESCE(alter_queue.group_fifo, q.group_fifo);
	IF alter_queue.max_in_flight IS NOT NULL THEN
		q.max_in_flight := NULLIF(alter_queue.max_in_flight, 0);
	END IF;
	IF alter_queue.rate_limit IS NOT NULL THEN
		q.rate_limit := NULLIF(alter_queue.rate_limit, 0);
	END IF;
	q.rate_period := COALESCE(alter_queue.rate_period, q.rate_period);
	IF (q.rate_limit, q.rate_period) IS DISTINCT FROM (old.rate_limit, old.rate_period) THEN
		/* A new bucket, full. */
		q.rate_tokens := NULL;
		q.rate_at := NULL;
	END IF;
	PERFORM claimq.check_queue_settings(q.lease, q.run_lease, q.max_attempts,
										q.retry_base, q.retry_max,
										q.keep_done, q.keep_dead);
	UPDATE claimq.queue t
	   SET lease = q.lease, run_lease = q.run_lease,
		   max_attempts = q.max_attempts, retry_base = q.retry_base,
		   retry_max = q.retry_max, keep_done = q.keep_done,
		   keep_dead = q.keep_dead, notify = q.notify,
		   group_limit = q.group_limit, group_fifo = q.group_fifo,
		   max_in_flight = q.max_in_flight, rate_limit = q.rate_limit,
		   rate_period = q.rate_period, rate_tokens = q.rate_tokens,
		   rate_at = q.rate_at
	 WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id;

	IF (q.group_limit, q.group_fifo) IS DISTINCT FROM (old.group_limit, old.group_fifo) THEN
		PERFORM 1 FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.group_key IS NOT NULL
		   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[])
		   FOR UPDATE OF j;
		UPDATE claimq.job j
		   SET held = (q.group_limit IS NOT NULL OR q.group_fifo)
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.group_key IS NOT NULL
		   AND j.state OPERATOR(pg_catalog.=) 'pending'
		   AND j.held OPERATOR(pg_catalog.<>) (q.group_limit IS NOT NULL OR q.group_fifo);
		IF q.group_limit IS NULL AND NOT q.group_fifo THEN
			DELETE FROM claimq.job_group x
			 WHERE x.queue_id OPERATOR(pg_catalog.=) q.queue_id;
		ELSE
			PERFORM claimq.sync_groups(q.queue_id, ARRAY(
				SELECT DISTINCT j.group_key FROM claimq.job j
				 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
				   AND j.group_key IS NOT NULL
				   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[])));
		END IF;
		PERFORM claimq.note_change(q.queue_id, true, false);
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval) IS
'change a queue''s settings; a NULL setting stays as it is, and a limit of 0 is removed';

REVOKE ALL ON FUNCTION claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval) FROM PUBLIC;

/*
 * Recovery and purging keep the groups' held jobs in line: a redriven
 * dead job of a limited group comes back held and takes its turn (with
 * group_fifo, by its id: before the jobs enqueued after it); a purge can
 * leave a group with nothing live.
 */
ALTER FUNCTION claimq.retry_dead(text, bigint[]) RENAME TO retry_dead_0_4;
ALTER FUNCTION claimq.purge_queue(text) RENAME TO purge_queue_0_4;

CREATE FUNCTION claimq.retry_dead(queue text, job_ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	n bigint;
	groups text[];
BEGIN
	PERFORM claimq.check_queue_name(queue);
	/* No enqueue may add a live key while this looks for live keys. */
	PERFORM claimq.lock_producers(queue);
	q := claimq.lock_queue(queue);
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
		RETURNING j.group_key)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(DISTINCT r.group_key) FILTER (WHERE r.group_key IS NOT NULL)
	  INTO n, groups
	  FROM redriven r;
	IF groups IS NOT NULL THEN
		PERFORM claimq.sync_groups(q.queue_id, groups);
	END IF;
	IF n OPERATOR(pg_catalog.>) 0 THEN
		PERFORM claimq.note_change(q.queue_id, true, false);
	END IF;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.retry_dead(text, bigint[]) IS
'redrive dead jobs (all of a queue''s, or those listed) to pending with attempts reset; returns how many';

REVOKE ALL ON FUNCTION claimq.retry_dead(text, bigint[]) FROM PUBLIC;

CREATE FUNCTION claimq.purge_queue(queue text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue := claimq.lock_queue(queue);
	n bigint;
	groups text[];
BEGIN
	WITH purged AS (
		DELETE FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.state OPERATOR(pg_catalog.=) 'pending'
		RETURNING j.group_key)
	SELECT pg_catalog.count(*),
		   pg_catalog.array_agg(DISTINCT p.group_key) FILTER (WHERE p.group_key IS NOT NULL)
	  INTO n, groups
	  FROM purged p;
	IF groups IS NOT NULL THEN
		PERFORM claimq.sync_groups(q.queue_id, groups);
	END IF;
	IF n OPERATOR(pg_catalog.>) 0 THEN
		PERFORM claimq.note_change(q.queue_id, false, true);
	END IF;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.purge_queue(text) IS
'delete a queue''s pending jobs (ready and scheduled); returns how many';

REVOKE ALL ON FUNCTION claimq.purge_queue(text) FROM PUBLIC;

SELECT claimq.upgrade_copy_grants(v.o::oid, v.n::oid, 'pg_catalog.pg_proc')
  FROM (VALUES ('claimq.create_queue_0_4(text, interval, interval, integer, interval, interval, interval, interval, boolean)'::regprocedure,
				'claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval)'::regprocedure),
			   ('claimq.alter_queue_0_4(text, interval, interval, integer, interval, interval, interval, interval, boolean)',
				'claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval)'),
			   ('claimq.retry_dead_0_4(text, bigint[])', 'claimq.retry_dead(text, bigint[])'),
			   ('claimq.purge_queue_0_4(text)', 'claimq.purge_queue(text)')) AS v(o, n);

DROP FUNCTION claimq.create_queue_0_4(text, interval, interval, integer, interval, interval, interval, interval, boolean);
DROP FUNCTION claimq.alter_queue_0_4(text, interval, interval, integer, interval, interval, interval, interval, boolean);
DROP FUNCTION claimq.retry_dead_0_4(text, bigint[]);
DROP FUNCTION claimq.purge_queue_0_4(text);

/*
 * Observing: per group with live jobs, its ready jobs, its jobs in flight,
 * and whether the queue's limits keep every one of its ready jobs back.
 */
CREATE VIEW claimq.group_stats AS
SELECT q.name AS queue,
	   j.group_key,
	   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'pending'
									 AND j.run_at OPERATOR(pg_catalog.<=) c.now) AS ready,
	   pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])) AS in_flight,
	   COALESCE(pg_catalog.bool_or(j.state OPERATOR(pg_catalog.=) 'pending'
								   AND j.run_at OPERATOR(pg_catalog.<=) c.now), false)
	   AND NOT COALESCE(pg_catalog.bool_or(j.state OPERATOR(pg_catalog.=) 'pending'
										   AND j.run_at OPERATOR(pg_catalog.<=) c.now
										   AND NOT j.held), false) AS blocked
  FROM claimq.job j
  JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id
 CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) c
 WHERE j.group_key IS NOT NULL
   AND j.state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[])
 GROUP BY q.name, j.group_key;

COMMENT ON VIEW claimq.group_stats IS
'per group with live jobs: ready jobs, jobs claimed or running, and whether the queue''s limits hold all its ready jobs back';

REVOKE ALL ON TABLE claimq.group_stats FROM PUBLIC;

SELECT claimq.upgrade_copy_grants('claimq.queue_stats'::regclass, 'claimq.group_stats'::regclass,
								  'pg_catalog.pg_class');

/*
 * The duties: create_queue and alter_queue have new signatures, and
 * administer and observe read group_stats.
 */
DROP FUNCTION claimq.duty_functions(text);

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
				   '"claimq.node_of(bigint)"}';
	observe text[] := '{"claimq.counters()",'
					  '"claimq.queue_latency()",'
					  '"claimq.reclaimer_status()",'
					  '"claimq.metrics()"}';
BEGIN
	CASE duty
		WHEN 'observe' THEN
			RETURN observe;
		WHEN 'produce' THEN
			RETURN keys OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) '{'
				'"claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text)",'
				'"claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[])",'
				'"claimq.cancel(bigint[])"}'::text[];
		WHEN 'work' THEN
			RETURN keys OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) '{'
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
			RETURN look OPERATOR(pg_catalog.||) observe OPERATOR(pg_catalog.||) '{'
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

DROP FUNCTION claimq.set_duty(regrole, text, boolean);

CREATE FUNCTION claimq.set_duty(role regrole, duty text, grant_it boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	verb text := CASE WHEN grant_it THEN 'GRANT %s ON %s TO %s'
				 ELSE 'REVOKE %s ON %s FROM %s' END;
	fn text;
BEGIN
	IF role IS NULL OR duty IS NULL THEN
		RAISE EXCEPTION 'role and duty must not be null' USING ERRCODE = '22004';
	END IF;
	IF grant_it THEN
		EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA claimq TO %s', role);
	END IF;
	FOREACH fn IN ARRAY claimq.duty_functions(duty) LOOP
		EXECUTE pg_catalog.format(verb, 'EXECUTE', 'FUNCTION ' OPERATOR(pg_catalog.||) fn, role);
	END LOOP;
	IF duty OPERATOR(pg_catalog.=) ANY ('{administer,observe}'::text[]) THEN
		EXECUTE pg_catalog.format(verb, 'SELECT',
								  'claimq.queue_stats, claimq.counters, claimq.queue_latency, claimq.reclaimer_status, claimq.schedules, claimq.group_stats',
								  role);
	END IF;
	IF duty OPERATOR(pg_catalog.=) 'administer' THEN
		EXECUTE pg_catalog.format(verb, 'SELECT', 'claimq.jobs', role);
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.set_duty(regrole, text, boolean) IS
'private: grant or revoke the privileges that make up a duty';

REVOKE ALL ON FUNCTION claimq.set_duty(regrole, text, boolean) FROM PUBLIC;

/*
 * node_of, which reads the node number out of a job id (for a router), was
 * in no duty: it joins status and wait_for in produce, work and
 * administer, and the roles that hold status get it.
 */
SELECT claimq.upgrade_copy_grants('claimq.status(bigint[])'::regprocedure,
								  'claimq.node_of(bigint)'::regprocedure,
								  'pg_catalog.pg_proc');

DROP FUNCTION claimq.upgrade_copy_grants(oid, oid, regclass);
