/*
 * claimq.sql: the current schema of claimq, the one place to read and
 * change it.  The Makefile builds the install script of the current version
 * (claimq--<default_version>.sql) from this file.  The scripts of earlier
 * versions and the update scripts between them stay as they were released;
 * test/t/022_fresh_vs_updated.pl checks that this file and the oldest
 * install script followed by every update give the same schema.  A change
 * here goes with an update script from the last release.
 *
 * The portable edition (SQL and PL/pgSQL only, for servers where claimq's
 * library cannot be installed) is built from this file too, by
 * sql/edition: each function declared LANGUAGE c here has its portable
 * body in sql/portable/, and lines "-- @c", "-- @portable" and
 * "-- @extension" open blocks that only some editions keep (see
 * sql/edition).
 *
 * Contents
 *   1. The schema: claimq's own, or none
 *   2. Queues, jobs, dedup key claims, schedules, group locks: sequences,
 *      tables, indexes
 *   3. Private helpers: checks, locks, the C side's notes
 *   4. Queues: create, alter, drop, pause, resume, purge
 *   5. Producing: enqueue, cancel, status
 *   6. Working: claim, start, extend, complete, fail, release, snooze
 *   7. Flow control: group limits; fairness between tenants
 *   8. Workflows: jobs that run after other jobs
 *   9. Dedup keys
 *  10. Schedules
 *  11. Recovery: reclaim, retry_dead, prune, maintain; version, edition
 *  12. Observing: counters, latency, the reclaimer, the census, the views
 *  13. Observing: metrics
 *  14. Duties, and copy_grants for the update scripts
 *  15. PUBLIC gets nothing
 */

-- @extension
\echo Use "CREATE EXTENSION claimq" to load this file. \quit
-- @end

/*------------------------------------------------------------------------
 * 1. The schema: claimq's own, or none
 *-----------------------------------------------------------------------*/

/*
 * CREATE EXTENSION uses a schema named claimq if one exists already.  One
 * that somebody else owns, or that already holds objects, could let its
 * owner replace what this script creates, so refuse it.
 */
-- @extension
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
-- @end
-- @script
CREATE SCHEMA claimq;
-- @end

/*------------------------------------------------------------------------
 * 2. Queues, jobs, dedup key claims, schedules, group locks
 *-----------------------------------------------------------------------*/

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

/*
 * The rule for queue and schedule names (src/common.c), which the tables'
 * CHECK constraints and every function that takes a name apply.
 */
CREATE FUNCTION claimq.valid_name(name text)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_valid_name';

COMMENT ON FUNCTION claimq.valid_name(text) IS
'private: whether a text is a valid queue or schedule name (1 to 63 letters, digits, "_", "-", ".")';

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
	-- Flow control: NULL (or false) is no limit.
	group_limit		integer,
	group_fifo		boolean NOT NULL DEFAULT false,
	max_in_flight	integer,
	rate_limit		integer,
	rate_period		interval NOT NULL DEFAULT '1 second',
	rate_tokens		double precision,	-- the bucket without the preload
	rate_at			timestamptz,
	fair			boolean NOT NULL DEFAULT false,	-- shares claims by tenant
	prioritized		boolean NOT NULL DEFAULT false,	-- a job at a priority but 0 (queue-changed.sql)
	CONSTRAINT queue_pkey PRIMARY KEY (queue_id),
	CONSTRAINT queue_name_key UNIQUE (name),
	CONSTRAINT queue_name_check
		CHECK (claimq.valid_name(name))
);

ALTER SEQUENCE claimq.queue_id_seq OWNED BY claimq.queue.queue_id;

/*
 * Jobs.  One table for every queue and state; the hot paths stay
 * O(batch) through partial indexes, each covering only the rows one path
 * looks for:
 *
 *	job_ready_idx	pending jobs that no group limit holds, by queue,
 *					priority, run_at, id: the claim walks it one priority at
 *					a time, taking only the range run_at <= now, so held,
 *					scheduled, claimed, dead and done rows and other queues'
 *					rows are never visited.
 *	job_lease_idx	claimed and running jobs by queue and expiry: reclaim
 *					reads the expired part of it.  Its predicate is
 *					expires_at IS NOT NULL, which job_lease_check makes the
 *					same as "claimed or running"; written on expires_at, it
 *					cannot tempt the planner into scanning every lease when a
 *					settle call looks jobs up by id and state.
 *	job_dedup_idx	the dedup key of live (waiting, pending, claimed,
 *					running) jobs, unique: this index is what makes dedup
 *					race-free.
 *	job_finished_idx done, dead and cancelled jobs by queue and age, for
 *					retention and redrive; and the jobs kept back other
 *					than by time (waiting, or held by their group's
 *					limit), so that every job of a queue is found through
 *					an index led by its queue (drop_queue).
 *	job_group_idx, job_group_due_idx  a group's live jobs, for its limit
 *					(a waiting job is in no group's count until it is
 *					pending).
 *	job_after_set_idx the jobs that run after others, by their set of
 *					jobs to run after (section 8).
 *
 * token is the fence: each claim stores a fresh one, and every later call
 * about the job must present it.
 */

CREATE SEQUENCE claimq.job_id_seq AS bigint MAXVALUE 281474976710655;
-- Tokens add their epoch in bits 48 and up (claimq.epoch below): the
-- sequence stays below them.  Each backend caches a range of them.
CREATE SEQUENCE claimq.token_seq AS bigint MAXVALUE 281474976710655 CACHE 65536;

/*
 * Token epochs (see src/token.c and claimq.lifetime_epoch).  A token is
 * the epoch of the server lifetime that handed it out, in bits 48 to 62,
 * plus a value of claimq.token_seq.  claimq.epoch registers the epochs
 * handed out, in both editions; a lifetime's epoch is one above every
 * epoch registered before it.  claimq.lifetime marks the lifetime whose
 * epoch is registered: it is unlogged, so every recovery (a crash-restart
 * or a promotion) empties it, and it records the server's start time and
 * its own OID, so that a clean restart, a restored or upgraded cluster and
 * a row that a restore or a move between editions copied into another
 * install's table find it out of date.  Neither has a key: the register
 * that a restore or a move copies in beside an install's own makes the
 * install's epoch no longer the highest, or one registered twice, and so
 * out of date too.
 */
CREATE TABLE claimq.epoch (
	epoch			integer NOT NULL,
	started_at		timestamptz NOT NULL,
	edition			text NOT NULL,
	registered_at	timestamptz NOT NULL,
	CONSTRAINT epoch_range CHECK (epoch OPERATOR(pg_catalog.>=) 0
								  AND epoch OPERATOR(pg_catalog.<=) 32767)
);

CREATE INDEX epoch_epoch_idx ON claimq.epoch (epoch);

CREATE UNLOGGED TABLE claimq.lifetime (
	epoch			integer NOT NULL,
	started_at		timestamptz NOT NULL,
	marker			oid NOT NULL,	/* claimq.lifetime's, when written */
	registered_by	xid8 NOT NULL
);

/*
 * What the failure of a job another one runs after does to it (section 8).
 * A domain rather than a CHECK of claimq.job: a table's CHECK constraints
 * are read back from the catalog and prepared by every statement that
 * writes a row of it, where a domain's rule is kept prepared in the
 * backend and applied only where a value is given to the column, so a
 * claim, which leaves the column alone, pays nothing for it.
 */
CREATE DOMAIN claimq.after_failed_rule AS text
	CONSTRAINT after_failed_rule_check
		CHECK (VALUE OPERATOR(pg_catalog.=) ANY ('{cancel,run}'::text[]));

COMMENT ON DOMAIN claimq.after_failed_rule IS
'private: cancel or run, the after_failed of a job that runs after others';

REVOKE ALL ON DOMAIN claimq.after_failed_rule FROM PUBLIC;

/*
 * A job's state and its own max_attempts, domains for the same reason: a
 * claim or a settle gives the state a value and pays for that one rule,
 * kept prepared, and not for the table's CHECK constraints, read back and
 * prepared again by each statement.  job_lease_check, which spans two
 * columns, is the one CHECK of claimq.job left.
 */
CREATE DOMAIN claimq.job_state AS text
	CONSTRAINT job_state_check CHECK (VALUE OPERATOR(pg_catalog.=) ANY
		('{pending,claimed,running,dead,done,cancelled,waiting}'::text[]));

COMMENT ON DOMAIN claimq.job_state IS
'private: the state of a job (pending, claimed, running, dead, done, cancelled, waiting)';

REVOKE ALL ON DOMAIN claimq.job_state FROM PUBLIC;

CREATE DOMAIN claimq.job_max_attempts AS integer
	CONSTRAINT job_max_attempts_check
		CHECK (VALUE OPERATOR(pg_catalog.>=) 1
			   AND VALUE OPERATOR(pg_catalog.<=) 1000);

COMMENT ON DOMAIN claimq.job_max_attempts IS
'private: 1 to 1000, the max_attempts a job has of its own (NULL: its queue''s)';

REVOKE ALL ON DOMAIN claimq.job_max_attempts FROM PUBLIC;

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
	state			claimq.job_state NOT NULL,
	worker			text,
	dedup_key		text,
	last_error		text,
	payload			jsonb NOT NULL,
	max_attempts	claimq.job_max_attempts,	-- NULL: the queue's
	group_key		text,
	result			jsonb,
	started_at		timestamptz,
	held			boolean NOT NULL DEFAULT false,	-- kept back by its group's limit
	-- Workflows: the jobs it runs after (section 8), how many of them are
	-- unfinished, what their failure does, and whether jobs run after it.
	after_set		bigint,			-- NULL: it runs after no job
	after_count		integer NOT NULL DEFAULT 0,
	after_failed	claimq.after_failed_rule,	-- NULL: it runs after no job
	dependents		boolean NOT NULL DEFAULT false,
	headers			jsonb,			-- trace context (sql/check-headers.sql)
	CONSTRAINT job_pkey PRIMARY KEY (job_id),
	CONSTRAINT job_lease_check CHECK ((expires_at IS NOT NULL) OPERATOR(pg_catalog.=)
		(state OPERATOR(pg_catalog.=) ANY ('{claimed,running}'::text[])))
);

ALTER SEQUENCE claimq.job_id_seq OWNED BY claimq.job.job_id;

-- @include queue-changed.sql

/*
 * The claim's order: a queue's pending jobs that no group limit holds
 * back, by priority, then due time, then id.
 */
CREATE INDEX job_ready_idx ON claimq.job
	(queue_id, priority DESC, run_at, job_id)
	WHERE state OPERATOR(pg_catalog.=) 'pending' AND NOT held;

/*
 * Jobs in flight by lease, queue first, so that a claim of a queue with
 * max_in_flight counts that queue's jobs in flight and no other's.  The
 * reclaimer, which looks for expired leases of every queue, reads all of
 * it, as many entries as jobs are claimed or running.
 */
CREATE INDEX job_lease_idx ON claimq.job (queue_id, expires_at)
	WHERE expires_at IS NOT NULL;

/* A live job's dedup key is unique in its queue. */

CREATE UNIQUE INDEX job_dedup_idx ON claimq.job (queue_id, dedup_key)
	WHERE dedup_key IS NOT NULL
	  AND state OPERATOR(pg_catalog.=) ANY ('{waiting,pending,claimed,running}'::text[]);

/*
 * Finished jobs by age, for the reclaimer's pruning; and waiting and held
 * jobs, which no other index led by queue_id holds (drop_queue).
 */
CREATE INDEX job_finished_idx ON claimq.job (queue_id, state, finished_at)
	WHERE state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled,waiting}'::text[])
	   OR held;

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

/* The jobs that run after a set of jobs (section 8). */
CREATE INDEX job_after_set_idx ON claimq.job (after_set)
	WHERE after_set IS NOT NULL;

/*
 * Workflows: the jobs an enqueue names in "after", once each, in order of
 * first appearance, as one set that every job of the call shares (so an
 * enqueue_many of n jobs after m jobs writes n + m rows, not n x m).  A
 * finishing job finds the sets it is in by after_id; the sets' waiting
 * jobs by job_after_set_idx.  A set lives as long as a job that names it.
 * final_state keeps the state of a listed job that drop_queue removed
 * after it had finished (NULL while the job exists, or if it was removed
 * unfinished): its dependents judge it by that state (section 8).  On a
 * distributed install, remote marks a listed job that the enqueue did not
 * find in its shard: its final state is heard from elsewhere, and only
 * that counts it off (sql/after-elsewhere.sql).
 */
CREATE SEQUENCE claimq.after_set_seq AS bigint MAXVALUE 281474976710655;

CREATE TABLE claimq.job_after (
	set_id			bigint NOT NULL,
	position		integer NOT NULL,
	after_id		bigint NOT NULL,
	final_state		text,
	remote			boolean NOT NULL DEFAULT false,
	CONSTRAINT job_after_pkey PRIMARY KEY (set_id, position)
);

CREATE INDEX job_after_after_idx ON claimq.job_after (after_id);

/*
 * Workflows: the finishes of transactions in progress, whose dependents
 * each transaction's commit judges (section 8), one row per call.  A row
 * lives only inside the transaction that wrote it (xact), which deletes it
 * at its commit; unlogged, since no row outlives its transaction.  The
 * first row of a transaction (first) is the one whose trigger judges them
 * all.
 */
CREATE UNLOGGED TABLE claimq.job_finish (
	xact			xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
	job_ids			bigint[] NOT NULL,
	first			boolean NOT NULL
);

CREATE INDEX job_finish_xact_idx ON claimq.job_finish (xact);

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

/*
 * Schedules: one row per schedule, keeping the next occurrence not yet
 * enqueued.  sql/schedules.sql parses the expressions and fires the
 * occurrences.
 */
CREATE TABLE claimq.schedule (
	name			text NOT NULL,
	queue_id		integer NOT NULL,
	cron			text NOT NULL,
	time_zone		text NOT NULL,
	payload			jsonb NOT NULL,
	priority		integer NOT NULL,
	missed			text NOT NULL,
	enabled			boolean NOT NULL DEFAULT true,
	anchor			timestamptz NOT NULL,	-- when cron or time_zone was set
	next_run_at		timestamptz,			-- NULL: no occurrence any more
	last_run_at		timestamptz,
	last_job_id		bigint,
	catch_up_to		timestamptz,			-- "all" cut short by max_jobs
	created_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	headers			jsonb,			-- each job's; NULL: none
	CONSTRAINT schedule_pkey PRIMARY KEY (name),
	CONSTRAINT schedule_queue_fkey FOREIGN KEY (queue_id)
		REFERENCES claimq.queue (queue_id),
	CONSTRAINT schedule_name_check
		CHECK (claimq.valid_name(name)),
	CONSTRAINT schedule_missed_check CHECK (missed OPERATOR(pg_catalog.=) ANY
		('{skip,once,all}'::text[]))
);

CREATE INDEX schedule_due_idx ON claimq.schedule (next_run_at) WHERE enabled;

CREATE INDEX schedule_queue_idx ON claimq.schedule (queue_id);

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

/*
 * Every table and sequence is dumped with the extension's data, but for
 * claimq.lifetime: a restored database is a new lifetime.
 */
-- @extension
SELECT pg_catalog.pg_extension_config_dump('claimq.queue', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.key_claim', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.job', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.token_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.schedule', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.job_group', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.job_after', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.job_finish', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.after_set_seq', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.epoch', '');
-- @end

/*------------------------------------------------------------------------
 * 3. Private helpers: checks, locks, the C side's notes
 *-----------------------------------------------------------------------*/

/*
 * Private helpers for the administration functions.
 */
CREATE FUNCTION claimq.check_queue_name(queue text)
RETURNS void
LANGUAGE c IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_check_queue_name';

COMMENT ON FUNCTION claimq.check_queue_name(text) IS
'private: raise 22004 or 22023 unless queue is a valid queue name';

-- @include lock-queue.sql

CREATE FUNCTION claimq.lock_producers(queue text)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_lock_producers';

COMMENT ON FUNCTION claimq.lock_producers(text) IS
'private: take a queue''s producer lock exclusive until the end of the transaction, waiting for enqueues in progress and holding new ones back';

CREATE FUNCTION claimq.check_queue_settings(
	lease interval, run_lease interval, max_attempts integer,
	retry_base interval, retry_max interval,
	keep_done interval, keep_dead interval)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_check_queue_settings';

COMMENT ON FUNCTION claimq.check_queue_settings(interval,interval,integer,interval,interval,interval,interval) IS
'private: raise 22023 unless the queue settings are within the limits create_queue and alter_queue accept';

/* The flow control options' limits, for create_queue and alter_queue. */
CREATE FUNCTION claimq.check_flow_settings(
	group_limit integer, max_in_flight integer, rate_limit integer,
	rate_period interval)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_check_flow_settings';

COMMENT ON FUNCTION claimq.check_flow_settings(integer,integer,integer,interval) IS
'private: raise 22023 unless the flow control options are within the limits create_queue and alter_queue accept';

/*
 * Private: the one door of the SQL-language transitions to the ledger
 * (src/ledger.c), through which they report as claimq's C paths do:
 * ledger_begin() before their statements, so that the census's guard
 * stands aside; ledger_note() with the jobs moved, per queue, state
 * entered and states left, as often as needed; ledger_end() when the
 * statements are done.  ledger_wake() is for the changes that move no
 * job (resume_queue, alter_queue freeing held jobs): at commit it wakes
 * the claims waiting on the queue and lowers its claim floor, or wakes
 * wait_for calls.
 */
CREATE FUNCTION claimq.ledger_begin()
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_ledger_begin';

COMMENT ON FUNCTION claimq.ledger_begin() IS
'private: the statements that follow, until ledger_end(), are claimq''s own writes of jobs';

CREATE FUNCTION claimq.ledger_note(queue_id integer, to_state text,
								   from_states text[], counts bigint[])
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_ledger_note';

COMMENT ON FUNCTION claimq.ledger_note(integer,text,text[],bigint[]) IS
'private: in the scope of ledger_begin(), counts[i] jobs of the queue went from from_states[i] (NULL: inserted) to to_state (NULL: deleted)';

CREATE FUNCTION claimq.ledger_end()
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_ledger_end';

COMMENT ON FUNCTION claimq.ledger_end() IS
'private: ends the scope of the last ledger_begin()';

CREATE FUNCTION claimq.ledger_wake(queue_id integer, made_ready boolean,
								   finished boolean)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_ledger_wake';

COMMENT ON FUNCTION claimq.ledger_wake(integer,boolean,boolean) IS
'private: at commit, wake the claims waiting on the queue and lower its claim floor (made_ready), or wake wait_for calls (finished)';

-- @portable
/*
 * The portable edition's own private tables and helpers (sql/portable/).
 */
-- @end
-- @include portable/private.sql

/*------------------------------------------------------------------------
 * 4. Queues: create, alter, drop, pause, resume, purge
 *-----------------------------------------------------------------------*/

-- @include queue-settings.sql

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
	unfinished bigint[];
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
	 * Each arm of the condition matches an index led by queue_id, so that
	 * the queue's jobs are found without a pass over the whole table;
	 * together they cover every state (claimed and running jobs have a
	 * lease: job_lease_check).
	 */
	PERFORM claimq.ledger_begin();
	WITH gone AS (
		DELETE FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND ((j.state OPERATOR(pg_catalog.=) 'pending' AND NOT j.held)
				OR j.state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled,waiting}'::text[])
				OR j.held
				OR (force AND j.expires_at IS NOT NULL))
		RETURNING j.state, j.job_id, j.dependents, j.after_set),
	/*
	 * A job that finished before was counted off by its dependents then:
	 * they judge it by the state it ended in (section 8), never count it
	 * off again.  A set that counts it by hearing of it (remote, on a
	 * distributed install) is left to hear it.
	 */
	kept AS (
		UPDATE claimq.job_after e SET final_state = d.state
		  FROM gone d
		 WHERE e.after_id OPERATOR(pg_catalog.=) d.job_id AND d.dependents
		   AND NOT e.remote
		   AND d.state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[]))
	SELECT pg_catalog.array_agg(g.state), pg_catalog.array_agg(g.n),
		   (SELECT pg_catalog.array_agg(d.job_id) FROM gone d WHERE d.dependents),
		   (SELECT pg_catalog.array_agg(d.job_id) FROM gone d
			 WHERE d.dependents
			   AND d.state OPERATOR(pg_catalog.<>) ALL ('{done,dead,cancelled}'::text[])),
		   (SELECT pg_catalog.array_agg(DISTINCT d.after_set) FROM gone d
			 WHERE d.after_set IS NOT NULL)
	  INTO states, counts, removed, unfinished, sets
	  FROM (SELECT d.state, pg_catalog.count(*) AS n FROM gone d GROUP BY d.state) g;
	IF NOT force THEN
		SELECT pg_catalog.count(*) INTO held FROM claimq.job j
		 WHERE j.queue_id OPERATOR(pg_catalog.=) q.queue_id
		   AND j.expires_at IS NOT NULL;
		IF held OPERATOR(pg_catalog.>) 0 THEN
			RAISE EXCEPTION 'cannot drop queue "%" while it has claimed or running jobs', queue
				USING ERRCODE = '55006',
					  DETAIL = CASE WHEN held OPERATOR(pg_catalog.=) 1
							   THEN '1 job is claimed or running.'
							   ELSE pg_catalog.format('%s jobs are claimed or running.', held) END,
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
-- @c
		-- And the sets of other shards that watch them (at least a job each).
		IF claimq.node_role() OPERATOR(pg_catalog.<>) 'single' THEN
			held := held OPERATOR(pg_catalog.+)
				(SELECT pg_catalog.count(*) FROM claimq.job_watcher w
				  WHERE w.job_id OPERATOR(pg_catalog.=) ANY (removed));
		END IF;
-- @end
		IF held OPERATOR(pg_catalog.>) 0 THEN
			RAISE EXCEPTION 'cannot drop queue "%" while jobs of other queues wait on its jobs', queue
				USING ERRCODE = '2BP01',
					  DETAIL = CASE WHEN held OPERATOR(pg_catalog.=) 1
							   THEN '1 job of another queue waits on jobs of this queue.'
							   ELSE pg_catalog.format('%s jobs of other queues wait on jobs of this queue.', held) END,
					  HINT = 'Cancel them or let them be judged first, or pass force => true.';
		END IF;
		SELECT pg_catalog.count(*) INTO held FROM claimq.schedule s
		 WHERE s.queue_id OPERATOR(pg_catalog.=) q.queue_id;
		IF held OPERATOR(pg_catalog.>) 0 THEN
			RAISE EXCEPTION 'cannot drop queue "%" while schedules feed it', queue
				USING ERRCODE = '2BP01',
					  DETAIL = CASE WHEN held OPERATOR(pg_catalog.=) 1
							   THEN '1 schedule enqueues into it.'
							   ELSE pg_catalog.format('%s schedules enqueue into it.', held) END,
					  HINT = 'Drop them first, or pass force => true.';
		END IF;
	END IF;
	DELETE FROM claimq.schedule s WHERE s.queue_id OPERATOR(pg_catalog.=) q.queue_id;
	DELETE FROM claimq.queue t WHERE t.queue_id OPERATOR(pg_catalog.=) q.queue_id;
	PERFORM claimq.ledger_note(q.queue_id, NULL, COALESCE(states, '{}'),
							   COALESCE(counts, '{}'));
	PERFORM claimq.ledger_end();
	/*
	 * Jobs of other queues waiting on its unfinished jobs count them as
	 * cancelled.
	 */
	IF unfinished IS NOT NULL THEN
		PERFORM claimq.judge_dependents(unfinished);
	END IF;
	IF removed IS NOT NULL OR sets IS NOT NULL THEN
		PERFORM claimq.forget_after(COALESCE(sets, '{}'), COALESCE(removed, '{}'));
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.drop_queue(text,boolean) IS
'drop a queue and all its jobs; refuses (55006) while jobs are claimed or running, and (2BP01) while jobs of other queues wait on its jobs or schedules feed it, unless force (which drops the schedules too; the jobs waiting on its jobs count the unfinished ones as cancelled and the finished ones by their final state)';

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
	IF q.paused THEN
		PERFORM claimq.ledger_wake(q.queue_id, true, false);
	END IF;
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
	PERFORM claimq.ledger_note(q.queue_id, NULL, '{pending,waiting}',
							   ARRAY[n OPERATOR(pg_catalog.-) waiting, waiting]);
	PERFORM claimq.ledger_end();
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

/*------------------------------------------------------------------------
 * 5. Producing: enqueue, cancel, status
 *-----------------------------------------------------------------------*/

CREATE FUNCTION claimq.node_of(job_id bigint)
RETURNS integer
LANGUAGE c IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_node_of';

COMMENT ON FUNCTION claimq.node_of(bigint) IS
'the node number (claimq.node_id of the server that issued it) in a job id';

/*------------------------------------------------------------------------
 * 6. Working: claim, start, extend, complete, fail, release, snooze
 *-----------------------------------------------------------------------*/

-- @include enqueue-claim.sql

-- @include job-calls.sql

CREATE FUNCTION claimq.release_worker(queue text, worker text)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_release_worker';

COMMENT ON FUNCTION claimq.release_worker(text,text) IS
'release every claimed, not started job that worker holds in queue (graceful shutdown); returns how many';

/*------------------------------------------------------------------------
 * 7. Flow control: group limits; fairness between tenants
 *-----------------------------------------------------------------------*/

/*
 * A group's cap: how many of its jobs may be free at a time.  group_fifo
 * means 1 (one job at a time, in id order), else group_limit; NULL when
 * neither is set and the queue's groups are not limited.  The C side's
 * rule (src/groups.c), for SQL.
 */
CREATE FUNCTION claimq.group_cap(group_limit integer, group_fifo boolean)
RETURNS integer
LANGUAGE c IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_group_cap';

COMMENT ON FUNCTION claimq.group_cap(integer,boolean) IS
'private: how many jobs of a group may be free at a time under a queue''s group_limit and group_fifo (1 with group_fifo); NULL if its groups are not limited';

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
	SELECT t.group_fifo, claimq.group_cap(t.group_limit, t.group_fifo) AS cap
	  INTO q FROM claimq.queue t
	 WHERE t.queue_id OPERATOR(pg_catalog.=) sync_groups.queue_id;
	IF NOT FOUND OR q.cap IS NULL THEN
		RETURN NULL;
	END IF;
	lim := q.cap;

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

COMMENT ON FUNCTION claimq.sync_groups(integer,text[]) IS
'private: under each group''s lock, hold or free the groups'' pending jobs so that no more are free than the queue''s group limit allows, first in the group''s order; returns the earliest run_at it freed';

/*
 * Fairness between a queue's tenants (contract 0.5): the weights, each
 * tenant's share, and the claim of a fair queue.
 */
-- @include fair-share.sql

/*------------------------------------------------------------------------
 * 8. Workflows: jobs that run after other jobs
 *-----------------------------------------------------------------------*/

/*
 * A job enqueued "after" other jobs waits (state waiting) until each of
 * them is finished: done, dead or cancelled.  Its row keeps after_set (the
 * set of jobs it runs after, in claimq.job_after, shared by every job of
 * its enqueue), after_count (how many of them are unfinished) and
 * after_failed (cancel or run).  A job that some job runs after has
 * dependents set: only such a job's finish looks for jobs to judge, so a
 * job without dependents finishes as before, and it is kept (done, with
 * its result, whatever its queue's keep_done) until prune finds every job
 * after it finished or removed.
 *
 * The transitions, each in the transaction of the call that causes it:
 *
 *	link_after			an enqueue's "after" list: checked, locked, recorded
 *						as a set; the enqueue then inserts its jobs waiting,
 *						or judged at once if every listed job is finished
 *	judge_dependents	jobs finished, or removed unfinished (complete,
 *						fail and reclaim to dead, cancel, purge_queue,
 *						drop_queue): noted in claimq.job_finish, for the
 *						transaction's commit
 *	judge_finishes		at the commit (a deferred constraint trigger), every
 *						finish the transaction noted, judged at once by
 *	judge_finished		their waiting dependents count them off, once, and
 *						each that has none left is judged: pending, or
 *						cancelled (and its own dependents judged in turn).
 *						A job that drop_queue removes after it finished was
 *						counted off then: its dependents judge it by its
 *						final state, kept in claimq.job_after
 *	count_dependents	the waiting jobs count finishes off, and retry_dead's
 *						redriven jobs on again: a redriven job is
 *						unfinished again for the jobs still waiting on it
 *	forget_after		jobs deleted: the sets no job names any more go
 *	prune_after			retention of the jobs that jobs ran after
 *
 * On a distributed install a job of another shard is watched there and its
 * final state heard here after the commits (sql/after-elsewhere.sql).
 *
 * Races.  An enqueue writes a new version of each job it names (marking
 * it as having dependents) before it records its set, and every finish and
 * redrive changes the row too: so either the finish waits for the enqueue
 * and then sees its set, or the enqueue waits for the finish and then sees
 * the job finished (or gone: 23503).  A finish whose transaction snapshot
 * (REPEATABLE READ, SERIALIZABLE) predates the enqueue's commit gets a
 * serialization failure instead of finishing without the set; and so does
 * prune_after, which would otherwise remove a done job that a new set
 * names.  A waiting job counts off finishes
 * under its row lock, so two jobs finishing at once in two transactions
 * take turns on it and exactly one of them sees the count reach zero; the
 * judgement that follows reads the listed jobs' states with a new
 * snapshot, in which the other's finish has committed.
 *
 * Deadlocks.  A settle call locks only jobs that are claimed or running
 * (never waiting), and leaves its finishes' dependents to its
 * transaction's commit, which judges all of the transaction's finishes
 * together: so a transaction never holds a waiting job while it makes
 * another settle call (test/specs/workflow-crossing-settles.spec).  At
 * the commit each pass locks the waiting jobs it counts in id order; if
 * the judgement may cascade, every waiting job it can reach is locked
 * first, in id order (test/specs/workflow-cascade-order.spec).  One hole
 * is left: a job enqueued after a waiting job between the look at what a
 * cascade can reach and the lock of that job is locked when the cascade
 * reaches it; if its id is below one locked already and another commit
 * holds it while waiting for that one, the deadlock is detected (40P01)
 * and rolls one of the two back.  Closing it would take giving the locks
 * back and taking them again in order, which only a subtransaction's
 * rollback can do, and PostgreSQL does not allow that during a commit.
 * Inside the transaction, after_count and the dependents' states lag
 * until its commit (SET CONSTRAINTS claimq.job_finish_judge IMMEDIATE
 * judges the finishes so far at once).
 */

-- @include link-after.sql

-- @include count-dependents.sql

/*
 * The listed jobs have finished, or been removed unfinished: their waiting
 * dependents are judged at the commit of the transaction, together with
 * its other finishes (judge_finishes).  See the section's head.
 */
CREATE FUNCTION claimq.judge_dependents(job_ids bigint[])
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
	INSERT INTO claimq.job_finish (job_ids, first)
	VALUES (job_ids,
			NOT EXISTS (SELECT 1 FROM claimq.job_finish f
						 WHERE f.xact OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id()));
$$;

COMMENT ON FUNCTION claimq.judge_dependents(bigint[]) IS
'private: the listed jobs finished or were removed: their waiting dependents are judged at the transaction''s commit';

-- @include judge-finished.sql

/*
 * At the commit of a transaction that noted finishes (judge_dependents):
 * judge all of them at once, in id order.  Only the transaction's first
 * row queues the trigger (so a transaction of many calls queues one
 * event); once SET CONSTRAINTS ... IMMEDIATE has fired it, the next row is
 * a first again.  It fires under session_replication_role = replica too
 * (ENABLE ALWAYS), and runs as claimq's owner, whoever commits.
 */
-- @include judge-finishes.sql

CREATE CONSTRAINT TRIGGER job_finish_judge
	AFTER INSERT ON claimq.job_finish
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (NEW.first) EXECUTE FUNCTION claimq.judge_finishes();

ALTER TABLE claimq.job_finish ENABLE ALWAYS TRIGGER job_finish_judge;

-- @include forget-after.sql

/*
 * Retention of the jobs that jobs ran after (prune's second pass): each
 * is kept, whatever its queue's keep_done, until every job after it is
 * finished or removed, then deleted once its keep_done or keep_dead has
 * passed.  prune's first pass leaves them alone; here they are locked
 * first (skipping those an enqueue is linking), so that an enqueue after
 * one of them either committed before the look at its dependents or waits
 * and then finds it gone (23503).  Returns how many it deleted.
 */
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
						'queue_id', g.queue_id, 'from_states', g.states,
						'counts', g.counts))
			  FROM (SELECT c.queue_id, pg_catalog.array_agg(c.state) AS states,
						   pg_catalog.array_agg(c.n) AS counts
					  FROM (SELECT p.queue_id, p.state, pg_catalog.count(*) AS n
							  FROM pruned p GROUP BY p.queue_id, p.state) c
					 GROUP BY c.queue_id) g),
		   (SELECT pg_catalog.array_agg(p.job_id) FROM pruned p),
		   (SELECT pg_catalog.array_agg(DISTINCT p.after_set) FROM pruned p
			 WHERE p.after_set IS NOT NULL)
	  INTO moves, gone, sets;
	PERFORM claimq.ledger_note((x OPERATOR(pg_catalog.->>) 'queue_id')::integer, NULL,
							   ARRAY(SELECT pg_catalog.jsonb_array_elements_text(x OPERATOR(pg_catalog.->) 'from_states')),
							   ARRAY(SELECT pg_catalog.jsonb_array_elements_text(x OPERATOR(pg_catalog.->) 'counts'))::bigint[])
	   FROM pg_catalog.jsonb_array_elements(COALESCE(moves, '[]')) AS x;
	PERFORM claimq.ledger_end();
	IF gone IS NOT NULL THEN
		PERFORM claimq.forget_after(COALESCE(sets, '{}'), gone);
	END IF;
	RETURN COALESCE(pg_catalog.cardinality(gone), 0);
END
$$;

COMMENT ON FUNCTION claimq.prune_after(integer) IS
'private: delete up to max_jobs finished jobs that jobs ran after, once every job after them is finished or removed and their queue''s keep_done / keep_dead has passed';

/*------------------------------------------------------------------------
 * 9. Dedup keys
 *-----------------------------------------------------------------------*/

/*
 * Dedup claims.
 */
CREATE FUNCTION claimq.claim_keys(scope text, keys text[], ttl interval)
RETURNS TABLE(key text, token bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_claim_keys';

COMMENT ON FUNCTION claimq.claim_keys(text,text[],interval) IS
'claim dedup keys for ttl; returns only the keys this call won, each with the token that releases it';

CREATE FUNCTION claimq.release_keys(scope text, keys text[], tokens bigint[])
RETURNS TABLE(key text, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_release_keys';

COMMENT ON FUNCTION claimq.release_keys(text,text[],bigint[]) IS
'release keys held with the given tokens, never a key someone else holds; outcome ok, stale or missing per key';

/*------------------------------------------------------------------------
 * 10. Schedules
 *-----------------------------------------------------------------------*/

-- @include schedules.sql

/*------------------------------------------------------------------------
 * 11. Recovery: reclaim, retry_dead, prune, maintain; version, edition
 *-----------------------------------------------------------------------*/

/*
 * Recovering.
 */
CREATE FUNCTION claimq.reclaim(queue text DEFAULT NULL,
							   max_jobs integer DEFAULT 10000)
RETURNS TABLE(queue text, released bigint, retried bigint, dead bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_reclaim';

COMMENT ON FUNCTION claimq.reclaim(text,integer) IS
'put expired claims back: claimed -> pending with no attempt counted, running -> retry or dead';

-- @include retry-dead.sql

CREATE FUNCTION claimq.prune(max_jobs integer DEFAULT 10000)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_prune';

COMMENT ON FUNCTION claimq.prune(integer) IS
'delete up to max_jobs done, dead and cancelled jobs older than their queue''s keep_done / keep_dead (cancelled as dead), and as many expired key claims; the reclaimer does this on every pass';

/*
 * maintain: the reclaimer's pass (reclaim, fire schedules, prune, sweep
 * key claims) once, in the caller's transaction, for a scheduler to call
 * where the reclaimer does not run.
 */
CREATE FUNCTION claimq.maintain()
RETURNS TABLE(step text, count bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_maintain';

COMMENT ON FUNCTION claimq.maintain() IS
'one pass of what the reclaimer does, in one transaction: one row per step (reclaim, fire_schedules, prune, sweep_keys), each of up to 10,000 jobs or key claims';

/*
 * The release and the edition, in every duty: what a client or the plain
 * script's update asks before it relies on anything else.
 */
CREATE FUNCTION claimq.version()
RETURNS text
LANGUAGE c STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_version';

COMMENT ON FUNCTION claimq.version() IS
'the release of claimq whose schema the library serves';

CREATE FUNCTION claimq.edition()
RETURNS text
LANGUAGE c STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_edition';

COMMENT ON FUNCTION claimq.edition() IS
'the edition of claimq installed: c (this one) or portable';

/*
 * This server lifetime's registered epoch, as claimq.lifetime_epoch()
 * looks for it: the row of claimq.lifetime written in this lifetime, into
 * this very table, whose epoch is the highest registered; ours when this
 * transaction wrote it.  A view, so that a claim of the portable edition
 * makes the look as a statement of its own, without calling a function
 * (which cost each claim about 48,000 instructions more, bench/run
 * --instructions), and calls lifetime_epoch() only when it finds nothing.
 */
CREATE VIEW claimq.lifetime_registered AS
SELECT l.epoch,
	   l.registered_by IS NOT DISTINCT FROM
		   pg_catalog.pg_current_xact_id_if_assigned() AS ours
  FROM claimq.lifetime l
 WHERE l.started_at OPERATOR(pg_catalog.=) pg_catalog.pg_postmaster_start_time()
   AND l.marker OPERATOR(pg_catalog.=) l.tableoid
   AND (SELECT pg_catalog.count(*) FROM claimq.epoch e
		 WHERE e.epoch OPERATOR(pg_catalog.>=) l.epoch) OPERATOR(pg_catalog.=) 1;

COMMENT ON VIEW claimq.lifetime_registered IS
'private: this server lifetime''s epoch if registered, and whether this transaction registered it';

-- @include lifetime-epoch.sql

/*
 * A new install registers its first epoch in its own transaction, unless
 * that transaction commits asynchronously (then the first look does).
 */
DO $install$
BEGIN
	IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.<>) 'off' THEN
		PERFORM claimq.lifetime_epoch();
	END IF;
END
$install$;

/*------------------------------------------------------------------------
 * 12. Observing: counters, latency, the reclaimer, the census, the views
 *-----------------------------------------------------------------------*/

CREATE FUNCTION claimq.counters()
RETURNS TABLE(database text, queue text, claimed bigint, started bigint,
			  completed bigint, failed bigint, released bigint,
			  reclaimed bigint, dead bigint, stale bigint,
			  cancelled bigint, snoozed bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_counters';

COMMENT ON FUNCTION claimq.counters() IS
'cumulative counts per database and queue since server start or reset_counters(), from shared memory (empty without the preload)';

/*
 * Latency percentiles per queue, from shared memory (counters.c), and the
 * current database's figures in the Prometheus text format.
 */
CREATE FUNCTION claimq.queue_latency()
RETURNS TABLE(queue text, samples bigint,
			  wait_p50 interval, wait_p90 interval, wait_p99 interval,
			  run_p50 interval, run_p90 interval, run_p99 interval,
			  wait_sum float8, run_samples bigint, run_sum float8)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_queue_latency';

COMMENT ON FUNCTION claimq.queue_latency() IS
'per queue of this database: wait (ready to claim) and run (start to complete or fail) percentiles since server start or reset_counters(), within 10% (empty without the preload)';

CREATE FUNCTION claimq.latency_histogram()
RETURNS TABLE(queue text, kind text, bucket integer, upper float8, samples bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_latency_histogram';

COMMENT ON FUNCTION claimq.latency_histogram() IS
'private: the non-empty buckets of this database''s wait and run histograms (upper bound in seconds), for percentiles over an interval';

CREATE FUNCTION claimq.reset_counters()
RETURNS void
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_reset_counters';

COMMENT ON FUNCTION claimq.reset_counters() IS
'set the current database''s counters and latency histograms back to zero';

CREATE FUNCTION claimq.reclaimer_status()
RETURNS TABLE(database text, pid integer, last_run timestamptz,
			  last_reclaimed bigint, total_reclaimed bigint, last_error text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_reclaimer_status';

COMMENT ON FUNCTION claimq.reclaimer_status() IS
'the background reclaimer''s row for the current database, if it serves it; without the preload, one row saying it is not running';

/*
 * Diagnosis: the claims of this database that wait for work now.  In no
 * duty.
 */
CREATE FUNCTION claimq.waiting_claims()
RETURNS TABLE(pid integer, queue_id integer)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_waiting_claims';

COMMENT ON FUNCTION claimq.waiting_claims() IS
'private: the claims of this database that wait for work now (with the preload), for diagnosis';

/*
 * The census's guard (src/census.c): claimq's own paths tell the census
 * what they did to jobs (src/ledger.c), and a statement that writes
 * claimq.job otherwise (plain SQL, COPY, TRUNCATE) makes the counts
 * unknown, once its transaction commits, until the reclaimer counts
 * again, and, if it inserts or updates jobs, marks every queue that holds
 * jobs at priorities other than 0 (sql/queue-changed.sql).  One
 * statement-level trigger: nothing per row.  Updates that set neither the
 * state, the queue nor the priority (extend, the held flag) fire nothing.
 */
CREATE FUNCTION claimq.job_census()
RETURNS trigger
LANGUAGE C
AS 'MODULE_PATHNAME', 'claimq_job_census';

COMMENT ON FUNCTION claimq.job_census() IS
'private: the census''s guard on claimq.job, which makes the census unknown after writes that are not claimq''s own';

-- @c
CREATE TRIGGER job_census_guard
	AFTER INSERT OR UPDATE OF state, queue_id, priority OR DELETE OR TRUNCATE ON claimq.job
	FOR EACH STATEMENT EXECUTE FUNCTION claimq.job_census();

-- Also under session_replication_role = replica (some restores): a write
-- the census does not see would leave it valid and wrong, and a job it
-- wrote at a priority other than 0 unseen by claims (queue-changed.sql).
ALTER TABLE claimq.job ENABLE ALWAYS TRIGGER job_census_guard;
-- @end

/*
 * The current database's counts per queue and state as committed; a row
 * with queue_id 0 says that they are valid (none: metrics reads
 * queue_stats instead).
 */
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

/*
 * Count again now, as the reclaimer does after a start or whenever the
 * counts became unknown; true if they are valid afterwards.
 */
CREATE FUNCTION claimq.census_recount()
RETURNS boolean
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_census_recount';

COMMENT ON FUNCTION claimq.census_recount() IS
'private: count the jobs per queue and state again, as the reclaimer does after a start; true if the counts are valid';

/*
 * Flow control's shared memory, for metrics(): which limited queues take
 * turns on their rows for want of a slot, and the server's slots held and
 * free (administer duty only; buckets.c).
 */
CREATE FUNCTION claimq.flow_row_paths(queue_ids integer[],
									  OUT queue_id integer, OUT row_path boolean)
RETURNS SETOF record
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_flow_row_paths';

COMMENT ON FUNCTION claimq.flow_row_paths(integer[]) IS
'private: whether each of these limited queues takes turns on its row, for want of a flow slot (every one without the preload)';

CREATE FUNCTION claimq.flow_slots(OUT held integer, OUT free integer)
RETURNS SETOF record
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_flow_slots';

COMMENT ON FUNCTION claimq.flow_slots() IS
'private: the server''s flow slots held (by a queue, not to be taken over) and free; no row without the preload, nor for a caller without the administer duty';

-- @include queue-stats.sql

CREATE VIEW claimq.counters AS SELECT * FROM claimq.counters();

COMMENT ON VIEW claimq.counters IS
'cumulative counts per database and queue; see claimq.counters()';

CREATE VIEW claimq.queue_latency AS
SELECT l.queue, l.samples, l.wait_p50, l.wait_p90, l.wait_p99,
	   l.run_p50, l.run_p90, l.run_p99
  FROM claimq.queue_latency() l;

COMMENT ON VIEW claimq.queue_latency IS
'wait and run percentiles per queue; see claimq.queue_latency()';

CREATE VIEW claimq.reclaimer_status AS SELECT * FROM claimq.reclaimer_status();

COMMENT ON VIEW claimq.reclaimer_status IS
'state of the background reclaimer in the current database; see claimq.reclaimer_status()';

-- @include job-views.sql

/*
 * Observing: per group with live jobs, its ready jobs, its jobs in flight,
 * and whether the queue's limits keep every one of its ready jobs back.
 */
-- @include group-stats.sql

/*------------------------------------------------------------------------
 * 13. Observing: metrics
 *-----------------------------------------------------------------------*/

-- @include metrics.sql

/*
 * Distribution on Citus: the C edition only.
 */
-- @c
-- @include distribute.sql
-- @end

/*------------------------------------------------------------------------
 * 14. Duties, and copy_grants for the update scripts
 *-----------------------------------------------------------------------*/

-- @include duties.sql

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

COMMENT ON FUNCTION claimq.set_duty(regrole,text,boolean) IS
'private: grant or revoke the privileges that make up a duty';

CREATE FUNCTION claimq.grant_duty(role regrole, duty text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT claimq.set_duty(role, duty, true) $$;

COMMENT ON FUNCTION claimq.grant_duty(regrole,text) IS
'grant a role one duty: produce (enqueue, cancel, status, dependencies, dedup keys), work (claim and settle jobs, status, dedup keys), administer (queues, schedules, recovery, views) or observe (read the figures and metrics only)';

CREATE FUNCTION claimq.revoke_duty(role regrole, duty text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT claimq.set_duty(role, duty, false) $$;

COMMENT ON FUNCTION claimq.revoke_duty(regrole,text) IS
'take a duty back from a role (schema USAGE stays, and grants nothing by itself)';

/*
 * For the update scripts: a function or view whose signature, result or
 * body changes is created anew beside the old one and given the old one's
 * grants with copy_grants; then the old one is dropped.  A GRANT run by an
 * extension script is recorded as the object's initial privilege, which
 * pg_dump leaves out of a dump; the grants copied were made by users (with
 * grant_duty), so the object's initial privileges are put back as they
 * were, and pg_dump keeps the grants.  (The updates to 0.4, 0.5 and 0.6
 * each had a copy of their own, upgrade_copy_grants, dropped at their end.)
 */
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

/*------------------------------------------------------------------------
 * 15. PUBLIC gets nothing
 *-----------------------------------------------------------------------*/

/*
 * CREATE FUNCTION grants EXECUTE to PUBLIC by default: take it back from
 * each function, and everything else from every table, view and sequence.
 */
REVOKE ALL ON ALL TABLES IN SCHEMA claimq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA claimq FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA claimq FROM PUBLIC;
REVOKE ALL ON SCHEMA claimq FROM PUBLIC;
