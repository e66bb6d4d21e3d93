/* claimq--0.1.sql: leased, fenced work queues */

\echo Use "CREATE EXTENSION claimq" to load this file. \quit

/*
 * CREATE EXTENSION uses a schema named claimq if one exists already.  One
 * that somebody else owns, or that already holds objects, could let its
 * owner replace what this script creates, so refuse it.
 */
DO $$
DECLARE
	nsp oid := (SELECT n.oid FROM pg_catalog.pg_namespace n
				 WHERE n.nspname OPERATOR(pg_catalog.=) 'claimq');
BEGIN
	IF (SELECT n.nspowner FROM pg_catalog.pg_namespace n
		 WHERE n.oid OPERATOR(pg_catalog.=) nsp)
	   OPERATOR(pg_catalog.<>) (SELECT r.oid FROM pg_catalog.pg_roles r
								 WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)
	   OR EXISTS (SELECT FROM pg_catalog.pg_class c
				   WHERE c.relnamespace OPERATOR(pg_catalog.=) nsp)
	   OR EXISTS (SELECT FROM pg_catalog.pg_proc p
				   WHERE p.pronamespace OPERATOR(pg_catalog.=) nsp)
	   OR EXISTS (SELECT FROM pg_catalog.pg_type t
				   WHERE t.typnamespace OPERATOR(pg_catalog.=) nsp)
	   OR EXISTS (SELECT FROM pg_catalog.pg_operator o
				   WHERE o.oprnamespace OPERATOR(pg_catalog.=) nsp)
	THEN
		RAISE EXCEPTION 'schema "claimq" already exists'
			USING ERRCODE = '42P06',
				  DETAIL = 'It is owned by another role or is not empty.',
				  HINT = 'Drop it, or let the role that installs claimq own it empty.';
	END IF;
END
$$;

/*
 * Every name and operator below is schema-qualified, and every function
 * pins search_path, so that nothing a caller puts on its search_path can
 * take part in a claimq call.  The functions run as the extension's owner
 * (SECURITY DEFINER): the tables grant nothing to anybody, so queue rows
 * change only through the functions, and PUBLIC may execute none of them.
 */

/*
 * Queues.  A queue's settings are read by every claim and settle call; the
 * name is the only way a caller refers to a queue, queue_id the only way a
 * job does.
 */
CREATE SEQUENCE claimq.queue_id_seq AS integer;

CREATE TABLE claimq.queue (
	queue_id		integer NOT NULL
		DEFAULT pg_catalog.nextval('claimq.queue_id_seq'::pg_catalog.regclass),
	name			text NOT NULL,
	lease			interval NOT NULL,
	run_lease		interval NOT NULL,
	max_attempts	integer NOT NULL,
	retry_base		interval NOT NULL,
	retry_max		interval NOT NULL,
	keep_done		interval NOT NULL,
	keep_dead		interval NOT NULL,
	notify			boolean NOT NULL,
	paused			boolean NOT NULL DEFAULT false,
	created_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT queue_pkey PRIMARY KEY (queue_id),
	CONSTRAINT queue_name_key UNIQUE (name),
	CONSTRAINT queue_name_check
		CHECK (name OPERATOR(pg_catalog.~) '^[A-Za-z0-9_.-]{1,63}$')
);

ALTER SEQUENCE claimq.queue_id_seq OWNED BY claimq.queue.queue_id;

/*
 * Jobs.  One table for every queue and state; the hot paths stay
 * O(batch) through partial indexes, each covering only the rows one path
 * looks for:
 *
 *	job_ready_idx	pending jobs by queue, priority, run_at, id: the claim
 *					walks it one priority at a time, taking only the range
 *					run_at <= now, so scheduled, claimed, dead and done rows
 *					and other queues' rows are never visited.
 *	job_lease_idx	claimed and running jobs by expiry: reclaim reads the
 *					expired head of it and nothing else.  Its predicate is
 *					expires_at IS NOT NULL, which job_lease_check makes the
 *					same as "claimed or running"; written on expires_at, it
 *					cannot tempt the planner into scanning every lease when a
 *					settle call looks jobs up by id and state.
 *	job_dedup_idx	the dedup key of live (pending, claimed, running) jobs,
 *					unique: this index is what makes dedup race-free.
 *	job_finished_idx done and dead jobs by queue and age, for retention
 *					and redrive.
 *
 * token is the fence: each claim stores a fresh one, and every later call
 * about the job must present it.
 */
CREATE SEQUENCE claimq.job_id_seq AS bigint;
-- Tokens add the timeline in bits 48 and up (see the C code): the sequence
-- stays below them.
CREATE SEQUENCE claimq.token_seq AS bigint MAXVALUE 281474976710655;

CREATE TABLE claimq.job (
	job_id			bigint NOT NULL
		DEFAULT pg_catalog.nextval('claimq.job_id_seq'::pg_catalog.regclass),
	token			bigint,
	run_at			timestamptz NOT NULL,
	enqueued_at		timestamptz NOT NULL,
	expires_at		timestamptz,
	claimed_at		timestamptz,
	finished_at		timestamptz,
	queue_id		integer NOT NULL,
	priority		integer NOT NULL DEFAULT 0,
	attempts		integer NOT NULL DEFAULT 0,
	state			text NOT NULL,
	worker			text,
	dedup_key		text,
	last_error		text,
	payload			jsonb NOT NULL,
	CONSTRAINT job_pkey PRIMARY KEY (job_id),
	CONSTRAINT job_state_check CHECK (state OPERATOR(pg_catalog.=) ANY
		('{pending,claimed,running,dead,done}'::text[])),
	CONSTRAINT job_lease_check CHECK ((expires_at IS NOT NULL) OPERATOR(pg_catalog.=)
		(state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])))
);

ALTER SEQUENCE claimq.job_id_seq OWNED BY claimq.job.job_id;

CREATE INDEX job_ready_idx ON claimq.job
	(queue_id, priority DESC, run_at, job_id)
	WHERE state OPERATOR(pg_catalog.=) 'pending';

CREATE INDEX job_lease_idx ON claimq.job (expires_at)
	WHERE expires_at IS NOT NULL;

CREATE UNIQUE INDEX job_dedup_idx ON claimq.job (queue_id, dedup_key)
	WHERE dedup_key IS NOT NULL
	  AND state OPERATOR(pg_catalog.=) ANY ('{pending,claimed,running}'::text[]);

CREATE INDEX job_finished_idx ON claimq.job (queue_id, state, finished_at)
	WHERE state OPERATOR(pg_catalog.=) ANY ('{done,dead}'::text[]);

/*
 * Dedup key claims: a key is held by its row until expires_at passes or
 * its winner deletes it.  The reclaimer sweeps expired rows; until then a
 * new claim takes an expired row over.
 */
CREATE TABLE claimq.key_claim (
	scope			text NOT NULL,
	key				text NOT NULL,
	token			bigint NOT NULL,
	expires_at		timestamptz NOT NULL,
	CONSTRAINT key_claim_pkey PRIMARY KEY (scope, key)
);

CREATE INDEX key_claim_expiry_idx ON claimq.key_claim (expires_at);

SELECT pg_catalog.pg_extension_config_dump('claimq.queue', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.key_claim', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.job', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.token_seq', '');

/*
 * Private helpers for the administration functions.
 */
CREATE FUNCTION claimq.check_queue_name(queue text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF queue IS NULL THEN
		RAISE EXCEPTION 'argument "queue" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF queue OPERATOR(pg_catalog.!~) '^[A-Za-z0-9_.-]{1,63}$' THEN
		RAISE EXCEPTION 'invalid queue name "%"', pg_catalog.left(queue, 64)
			USING ERRCODE = '22023',
				  DETAIL = 'A queue name is 1 to 63 characters, each a letter, a digit, "_", "-" or ".".';
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.check_queue_name(text) IS
'private: raise 22004 or 22023 unless queue is a valid queue name';

CREATE FUNCTION claimq.lock_queue(queue text)
RETURNS claimq.queue
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
BEGIN
	PERFORM claimq.check_queue_name(queue);
	SELECT * INTO q FROM claimq.queue t
	 WHERE t.name OPERATOR(pg_catalog.=) lock_queue.queue FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" does not exist', queue
			USING ERRCODE = '42704';
	END IF;
	RETURN q;
END
$$;

COMMENT ON FUNCTION claimq.lock_queue(text) IS
'private: lock a queue''s row and return it; raise 42704 if there is none';

CREATE FUNCTION claimq.lock_producers(queue text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT pg_catalog.pg_advisory_xact_lock(1668050289,
											pg_catalog.hashtext(queue COLLATE "C"))
$$;

COMMENT ON FUNCTION claimq.lock_producers(text) IS
'private: take a queue''s producer lock exclusive until the end of the transaction, waiting for enqueues in progress and holding new ones back';

CREATE FUNCTION claimq.check_queue_settings(
	lease interval, run_lease interval, max_attempts integer,
	retry_base interval, retry_max interval,
	keep_done interval, keep_dead interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF lease OPERATOR(pg_catalog.<=) '0'::interval
	   OR lease OPERATOR(pg_catalog.>) '7 days'::interval THEN
		RAISE EXCEPTION 'lease must be greater than zero and at most 7 days'
			USING ERRCODE = '22023';
	END IF;
	IF run_lease OPERATOR(pg_catalog.<=) '0'::interval
	   OR run_lease OPERATOR(pg_catalog.>) '7 days'::interval THEN
		RAISE EXCEPTION 'run_lease must be greater than zero and at most 7 days'
			USING ERRCODE = '22023';
	END IF;
	IF max_attempts OPERATOR(pg_catalog.<) 1 THEN
		RAISE EXCEPTION 'max_attempts must be at least 1'
			USING ERRCODE = '22023';
	END IF;
	IF retry_base OPERATOR(pg_catalog.<) '0'::interval
	   OR retry_base OPERATOR(pg_catalog.>) '100 years'::interval THEN
		RAISE EXCEPTION 'retry_base must be at least zero and at most 100 years'
			USING ERRCODE = '22023';
	END IF;
	IF retry_max OPERATOR(pg_catalog.<) '0'::interval
	   OR retry_max OPERATOR(pg_catalog.>) '100 years'::interval THEN
		RAISE EXCEPTION 'retry_max must be at least zero and at most 100 years'
			USING ERRCODE = '22023';
	END IF;
	IF keep_done OPERATOR(pg_catalog.<) '0'::interval
	   OR keep_done OPERATOR(pg_catalog.>) '100 years'::interval THEN
		RAISE EXCEPTION 'keep_done must be at least zero and at most 100 years'
			USING ERRCODE = '22023';
	END IF;
	IF keep_dead OPERATOR(pg_catalog.<) '0'::interval
	   OR keep_dead OPERATOR(pg_catalog.>) '100 years'::interval THEN
		RAISE EXCEPTION 'keep_dead must be at least zero and at most 100 years'
			USING ERRCODE = '22023';
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.check_queue_settings(interval, interval, integer, interval, interval, interval, interval) IS
'private: raise 22023 unless the queue settings are within the contract''s limits';

/*
 * Queue administration.
 */
CREATE FUNCTION claimq.create_queue(
	queue text,
	lease interval DEFAULT '30 seconds',
	run_lease interval DEFAULT '5 minutes',
	max_attempts integer DEFAULT 5,
	retry_base interval DEFAULT '1 second',
	retry_max interval DEFAULT '1 hour',
	keep_done interval DEFAULT '0',
	keep_dead interval DEFAULT '14 days',
	notify boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM claimq.check_queue_name(queue);
	IF lease IS NULL OR run_lease IS NULL OR max_attempts IS NULL
	   OR retry_base IS NULL OR retry_max IS NULL OR keep_done IS NULL
	   OR keep_dead IS NULL OR notify IS NULL THEN
		RAISE EXCEPTION 'queue settings must not be null'
			USING ERRCODE = '22004',
				  HINT = 'Omit a setting to take its default.';
	END IF;
	PERFORM claimq.check_queue_settings(lease, run_lease, max_attempts,
										retry_base, retry_max,
										keep_done, keep_dead);
	INSERT INTO claimq.queue AS q
		(name, lease, run_lease, max_attempts, retry_base, retry_max,
		 keep_done, keep_dead, notify)
	VALUES (queue, lease, run_lease, max_attempts, retry_base, retry_max,
			keep_done, keep_dead, notify)
	ON CONFLICT (name) DO NOTHING;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" already exists', queue
			USING ERRCODE = '42710';
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean) IS
'create a queue; raises 42710 if it exists';

CREATE FUNCTION claimq.alter_queue(
	queue text,
	lease interval DEFAULT NULL,
	run_lease interval DEFAULT NULL,
	max_attempts integer DEFAULT NULL,
	retry_base interval DEFAULT NULL,
	retry_max interval DEFAULT NULL,
	keep_done interval DEFAULT NULL,
	keep_dead interval DEFAULT NULL,
	notify boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue := claimq.lock_queue(queue);
BEGIN
	q.lease := COALESCE(lease, q.lease);
	q.run_lease := COALESCE(run_lease, q.run_lease);
	q.max_attempts := COALESCE(max_attempts, q.max_attempts);
	q.retry_base := COALESCE(retry_base, q.retry_base);
	q.retry_max := COALESCE(retry_max, q.retry_max);
	q.keep_done := COALESCE(keep_done, q.keep_done);
	q.keep_dead := COALESCE(keep_dead, q.keep_dead);
	q.notify := COALESCE(notify, q.notify);
	PERFORM claimq.check_queue_settings(q.lease, q.run_lease, q.max_attempts,
										q.retry_base, q.retry_max,
										q.keep_done, q.keep_dead);
	UPDATE claimq.queue t
	   SET lease = q.lease, run_lease = q.run_lease,
		   max_attempts = q.max_attempts, retry_base = q.retry_base,
		   retry_max = q.retry_max, keep_done = q.keep_done,
		   keep_dead = q.keep_dead, notify = q.notify
	 WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id;
END
$$;

COMMENT ON FUNCTION claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean) IS
'change a queue''s settings; a NULL setting stays as it is';

CREATE FUNCTION claimq.drop_queue(queue text, force boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	held bigint;
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
	DELETE FROM claimq.job j
	 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
	   AND (force OR j.state OPERATOR(pg_catalog.<>) ALL ('{claimed,running}'::text[]));
	IF NOT force THEN
		SELECT pg_catalog.count(*) INTO held FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id;
		IF held OPERATOR(pg_catalog.>) 0 THEN
			RAISE EXCEPTION 'cannot drop queue "%" while it has claimed or running jobs', queue
				USING ERRCODE = '55006',
					  DETAIL = pg_catalog.format('%s jobs are claimed or running.', held),
					  HINT = 'Wait for them to settle, or pass force => true.';
		END IF;
	END IF;
	DELETE FROM claimq.queue t WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id;
END
$$;

COMMENT ON FUNCTION claimq.drop_queue(text, boolean) IS
'drop a queue and all its jobs; refuses (55006) while jobs are claimed or running, unless force';

CREATE FUNCTION claimq.pause_queue(queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue := claimq.lock_queue(queue);
BEGIN
	UPDATE claimq.queue t SET paused = true
	 WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id;
END
$$;

COMMENT ON FUNCTION claimq.pause_queue(text) IS
'stop a queue from handing out jobs; claims already made are unaffected';

CREATE FUNCTION claimq.resume_queue(queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue := claimq.lock_queue(queue);
BEGIN
	UPDATE claimq.queue t SET paused = false
	 WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id;
END
$$;

COMMENT ON FUNCTION claimq.resume_queue(text) IS
'let a paused queue hand out jobs again';

CREATE FUNCTION claimq.purge_queue(queue text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue := claimq.lock_queue(queue);
	n bigint;
BEGIN
	DELETE FROM claimq.job j
	 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
	   AND j.state OPERATOR(pg_catalog.=) 'pending';
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.purge_queue(text) IS
'delete a queue''s pending jobs (ready and scheduled); returns how many';

/*
 * Producing.
 */
CREATE FUNCTION claimq.enqueue(
	queue text,
	payload jsonb,
	run_at timestamptz DEFAULT NULL,
	priority integer DEFAULT 0,
	dedup_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_enqueue';

COMMENT ON FUNCTION claimq.enqueue(text, jsonb, timestamptz, integer, text) IS
'add a job; with a dedup_key that a live job holds, return that job''s id instead';

CREATE FUNCTION claimq.enqueue_many(
	queue text,
	payloads jsonb[],
	run_at timestamptz DEFAULT NULL,
	priority integer DEFAULT 0,
	dedup_keys text[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_enqueue_many';

COMMENT ON FUNCTION claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[]) IS
'add one job per payload in one statement; returns the ids in input order';

/*
 * Working.
 */
CREATE FUNCTION claimq.claim(
	queue text,
	max_jobs integer DEFAULT 1,
	lease interval DEFAULT NULL,
	worker text DEFAULT NULL,
	start boolean DEFAULT false,
	wait interval DEFAULT '0')
RETURNS TABLE(job_id bigint, token bigint, payload jsonb, attempts integer,
			  priority integer, enqueued_at timestamptz,
			  expires_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_claim';

COMMENT ON FUNCTION claimq.claim(text, integer, interval, text, boolean, interval) IS
'claim up to max_jobs ready jobs, skipping rows other sessions hold; each comes with the token that fences later calls';

CREATE FUNCTION claimq.start(job_ids bigint[], tokens bigint[],
							 lease interval DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_start';

COMMENT ON FUNCTION claimq.start(bigint[], bigint[], interval) IS
'mark claimed jobs running, counting the attempt';

CREATE FUNCTION claimq.extend(job_ids bigint[], tokens bigint[],
							  lease interval DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_extend';

COMMENT ON FUNCTION claimq.extend(bigint[], bigint[], interval) IS
'renew the leases of claimed or running jobs from now';

CREATE FUNCTION claimq.complete(job_ids bigint[], tokens bigint[])
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete';

COMMENT ON FUNCTION claimq.complete(bigint[], bigint[]) IS
'finish claimed or running jobs: deleted, or kept as done on a keep_done queue';

CREATE FUNCTION claimq.fail(job_ids bigint[], tokens bigint[],
							error text DEFAULT NULL,
							retry_in interval DEFAULT NULL,
							permanent boolean DEFAULT false)
RETURNS TABLE(job_id bigint, outcome text, state text, run_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fail';

COMMENT ON FUNCTION claimq.fail(bigint[], bigint[], text, interval, boolean) IS
'record a failed attempt: pending again after a backoff while attempts are left, else dead';

CREATE FUNCTION claimq.release(job_ids bigint[], tokens bigint[])
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_release';

COMMENT ON FUNCTION claimq.release(bigint[], bigint[]) IS
'hand claimed, not started jobs back to the queue without counting an attempt';

CREATE FUNCTION claimq.start(job_id bigint, token bigint,
							 lease interval DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_start_one';

COMMENT ON FUNCTION claimq.start(bigint, bigint, interval) IS
'start one job; true if the token still held it';

CREATE FUNCTION claimq.extend(job_id bigint, token bigint,
							  lease interval DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_extend_one';

COMMENT ON FUNCTION claimq.extend(bigint, bigint, interval) IS
'extend one job''s lease; true if the token still held it';

CREATE FUNCTION claimq.complete(job_id bigint, token bigint)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete_one';

COMMENT ON FUNCTION claimq.complete(bigint, bigint) IS
'complete one job; true if the token still held it';

CREATE FUNCTION claimq.fail(job_id bigint, token bigint,
							error text DEFAULT NULL,
							retry_in interval DEFAULT NULL,
							permanent boolean DEFAULT false)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fail_one';

COMMENT ON FUNCTION claimq.fail(bigint, bigint, text, interval, boolean) IS
'fail one job; true if the token still held it';

CREATE FUNCTION claimq.release(job_id bigint, token bigint)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_release_one';

COMMENT ON FUNCTION claimq.release(bigint, bigint) IS
'release one claimed job; true if the token still held it and it was not started';

CREATE FUNCTION claimq.release_worker(queue text, worker text)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_release_worker';

COMMENT ON FUNCTION claimq.release_worker(text, text) IS
'release every claimed, not started job that worker holds in queue (graceful shutdown); returns how many';

/*
 * Recovering.
 */
CREATE FUNCTION claimq.reclaim(queue text DEFAULT NULL,
							   max_jobs integer DEFAULT 10000)
RETURNS TABLE(queue text, released bigint, retried bigint, dead bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_reclaim';

COMMENT ON FUNCTION claimq.reclaim(text, integer) IS
'put expired claims back: claimed -> pending with no attempt counted, running -> retry or dead';

CREATE FUNCTION claimq.prune(max_jobs integer DEFAULT 10000)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_prune';

COMMENT ON FUNCTION claimq.prune(integer) IS
'delete up to max_jobs done and dead jobs older than their queue''s keep_done / keep_dead, and as many expired key claims; the reclaimer does this on every pass';

CREATE FUNCTION claimq.retry_dead(queue text, job_ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
	n bigint;
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
	UPDATE claimq.job j
	   SET state = 'pending', attempts = 0, run_at = pg_catalog.clock_timestamp(),
		   finished_at = NULL, expires_at = NULL
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
							   AND (job_ids IS NULL OR o.job_id OPERATOR(pg_catalog.=) ANY (job_ids)))));
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.retry_dead(text, bigint[]) IS
'redrive dead jobs (all of a queue''s, or those listed) to pending with attempts reset; returns how many';

/*
 * Dedup claims.
 */
CREATE FUNCTION claimq.claim_keys(scope text, keys text[], ttl interval)
RETURNS TABLE(key text, token bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_claim_keys';

COMMENT ON FUNCTION claimq.claim_keys(text, text[], interval) IS
'claim dedup keys for ttl; returns only the keys this call won, each with the token that releases it';

CREATE FUNCTION claimq.release_keys(scope text, keys text[], tokens bigint[])
RETURNS TABLE(key text, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_release_keys';

COMMENT ON FUNCTION claimq.release_keys(text, text[], bigint[]) IS
'release keys held with the given tokens, never a key someone else holds; outcome ok, stale or missing per key';

/*
 * Observing.  Both views compare against the wall clock, as claims do.
 */
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
	   s.oldest_claim_age
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
'per queue: jobs by state, expired claims, and the age of the oldest ready job and of the oldest claim';

CREATE VIEW claimq.jobs AS
SELECT j.job_id, q.name AS queue, j.state, j.payload, j.priority, j.run_at,
	   j.attempts, j.worker, j.expires_at, j.enqueued_at, j.dedup_key,
	   j.last_error
  FROM claimq.job j
  JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id;

COMMENT ON VIEW claimq.jobs IS
'every job of every queue, for inspection';

CREATE FUNCTION claimq.counters()
RETURNS TABLE(database text, queue text, claimed bigint, started bigint,
			  completed bigint, failed bigint, released bigint,
			  reclaimed bigint, dead bigint, stale bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_counters';

COMMENT ON FUNCTION claimq.counters() IS
'cumulative counts per database and queue since server start or reset_counters(), from shared memory (empty without the preload)';

CREATE VIEW claimq.counters AS SELECT * FROM claimq.counters();

COMMENT ON VIEW claimq.counters IS
'cumulative counts per database and queue; see claimq.counters()';

CREATE FUNCTION claimq.reset_counters()
RETURNS void
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_reset_counters';

COMMENT ON FUNCTION claimq.reset_counters() IS
'set every counter of every database back to zero';

CREATE FUNCTION claimq.reclaimer_status()
RETURNS TABLE(database text, pid integer, last_run timestamptz,
			  last_reclaimed bigint, total_reclaimed bigint, last_error text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_reclaimer_status';

COMMENT ON FUNCTION claimq.reclaimer_status() IS
'one row per database the background reclaimer serves; without the preload, one row saying it is not running';

CREATE VIEW claimq.reclaimer_status AS SELECT * FROM claimq.reclaimer_status();

COMMENT ON VIEW claimq.reclaimer_status IS
'state of the background reclaimer per served database';

/*
 * Duties.  Each of the three duties is a fixed set of functions (and, to
 * administer, the views): grant_duty() grants exactly that set to a role,
 * revoke_duty() takes it back.  No duty includes any privilege on the
 * tables, so queue rows change only through the functions.  Only the
 * extension's owner (or a superuser) can call these two.
 */
CREATE FUNCTION claimq.duty_functions(duty text)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	keys text[] := '{"claimq.claim_keys(text, text[], interval)",'
				   '"claimq.release_keys(text, text[], bigint[])"}';
BEGIN
	CASE duty
		WHEN 'produce' THEN
			RETURN keys OPERATOR(pg_catalog.||) '{'
				'"claimq.enqueue(text, jsonb, timestamptz, integer, text)",'
				'"claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[])"}'::text[];
		WHEN 'work' THEN
			RETURN keys OPERATOR(pg_catalog.||) '{'
				'"claimq.claim(text, integer, interval, text, boolean, interval)",'
				'"claimq.start(bigint[], bigint[], interval)",'
				'"claimq.start(bigint, bigint, interval)",'
				'"claimq.extend(bigint[], bigint[], interval)",'
				'"claimq.extend(bigint, bigint, interval)",'
				'"claimq.complete(bigint[], bigint[])",'
				'"claimq.complete(bigint, bigint)",'
				'"claimq.fail(bigint[], bigint[], text, interval, boolean)",'
				'"claimq.fail(bigint, bigint, text, interval, boolean)",'
				'"claimq.release(bigint[], bigint[])",'
				'"claimq.release(bigint, bigint)",'
				'"claimq.release_worker(text, text)"}'::text[];
		WHEN 'administer' THEN
			RETURN '{'
				'"claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean)",'
				'"claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean)",'
				'"claimq.drop_queue(text, boolean)",'
				'"claimq.pause_queue(text)",'
				'"claimq.resume_queue(text)",'
				'"claimq.purge_queue(text)",'
				'"claimq.reclaim(text, integer)",'
				'"claimq.retry_dead(text, bigint[])",'
				'"claimq.prune(integer)",'
				'"claimq.counters()",'
				'"claimq.reset_counters()",'
				'"claimq.reclaimer_status()"}'::text[];
		ELSE
			RAISE EXCEPTION 'unknown duty "%"', duty
				USING ERRCODE = '22023',
					  HINT = 'The duties are produce, work and administer.';
	END CASE;
END
$$;

COMMENT ON FUNCTION claimq.duty_functions(text) IS
'private: the functions that make up a duty';

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
	IF duty OPERATOR(pg_catalog.=) 'administer' THEN
		EXECUTE pg_catalog.format(verb, 'SELECT',
								  'claimq.queue_stats, claimq.jobs, claimq.counters, claimq.reclaimer_status',
								  role);
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.set_duty(regrole, text, boolean) IS
'private: grant or revoke the privileges that make up a duty';

CREATE FUNCTION claimq.grant_duty(role regrole, duty text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT claimq.set_duty(role, duty, true) $$;

COMMENT ON FUNCTION claimq.grant_duty(regrole, text) IS
'grant a role one duty: produce (enqueue, dedup keys), work (claim and settle jobs, dedup keys) or administer (queues, recovery, views)';

CREATE FUNCTION claimq.revoke_duty(role regrole, duty text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT claimq.set_duty(role, duty, false) $$;

COMMENT ON FUNCTION claimq.revoke_duty(regrole, text) IS
'take a duty back from a role (schema USAGE stays, and grants nothing by itself)';

/*
 * PUBLIC gets nothing.  CREATE FUNCTION grants EXECUTE to PUBLIC by
 * default, so take it back from each function.
 */
REVOKE ALL ON ALL TABLES IN SCHEMA claimq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA claimq FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA claimq FROM PUBLIC;
REVOKE ALL ON SCHEMA claimq FROM PUBLIC;
