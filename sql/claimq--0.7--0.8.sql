/* claimq--0.7--0.8.sql: tokens that never repeat (the register of token epochs); workflows that never run a job early, never refuse a holder, never deadlock between settles; metrics() shows flow control's row path and slots; drop_queue without a pass over the job table; one door to the ledger; one body for schedules and cron in both editions; trace context; a queue's settings kept per backend, and a queue at one priority claimed without a walk of its priorities; a job's state and max_attempts checked by domains, not by CHECK constraints of the job table */

-- @extension
\echo Use "ALTER EXTENSION claimq UPDATE TO '0.8'" to load this file. \quit
-- @end
-- @include portable/update--0.7--0.8-begin.sql

/*------------------------------------------------------------------------
 * 1. Tokens that never repeat: the register of token epochs
 *-----------------------------------------------------------------------*/

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

-- @extension
SELECT pg_catalog.pg_extension_config_dump('claimq.epoch', '');
-- @end

REVOKE ALL ON TABLE claimq.epoch, claimq.lifetime FROM PUBLIC;

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

REVOKE ALL ON TABLE claimq.lifetime_registered FROM PUBLIC;

-- @include lifetime-epoch.sql

REVOKE ALL ON FUNCTION claimq.lifetime_epoch() FROM PUBLIC;

/*
 * The epochs of tokens that 0.7 handed out are registered, so that this
 * release's first epoch is above them: the C edition's epoch followed the
 * timeline, and the portable edition's too; the tokens still held are the
 * rest that is known of them.  Then this lifetime's epoch is registered,
 * as by an install.
 */
INSERT INTO claimq.epoch (epoch, started_at, edition, registered_at)
SELECT GREATEST(
		   (SELECT pg_catalog.max(j.token OPERATOR(pg_catalog.>>) 48) FROM claimq.job j),
		   (SELECT pg_catalog.max(k.token OPERATOR(pg_catalog.>>) 48) FROM claimq.key_claim k),
-- @c
		   (SELECT (('x' OPERATOR(pg_catalog.||)
					 pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, 8)
					)::pg_catalog.bit(32)::bigint OPERATOR(pg_catalog.-) 1)
			 WHERE NOT pg_catalog.pg_is_in_recovery()),
-- @end
		   0)::integer,
	   '-infinity', claimq.edition(), pg_catalog.clock_timestamp();

DO $update$
BEGIN
	IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.<>) 'off' THEN
		PERFORM claimq.lifetime_epoch();
	END IF;
END
$update$;

/*------------------------------------------------------------------------
 * 2. Workflows (sql/claimq.sql, section 8): a job that drop_queue removes
 * after it finished counts by its final state, once; a transaction's
 * finishes judge their dependents at its commit, all together, in id
 * order (claimq.job_finish and its deferred trigger)
 *-----------------------------------------------------------------------*/

ALTER TABLE claimq.job_after ADD COLUMN final_state text,
	ADD COLUMN remote boolean NOT NULL DEFAULT false;

-- A set's id carries the node's bits, as a job id does (link_after).
ALTER SEQUENCE claimq.after_set_seq MAXVALUE 281474976710655;

CREATE UNLOGGED TABLE claimq.job_finish (
	xact			xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
	job_ids			bigint[] NOT NULL,
	first			boolean NOT NULL
);

CREATE INDEX job_finish_xact_idx ON claimq.job_finish (xact);

-- @extension
SELECT pg_catalog.pg_extension_config_dump('claimq.job_finish', '');
-- @end

REVOKE ALL ON TABLE claimq.job_finish FROM PUBLIC;

ALTER FUNCTION claimq.drop_queue(text, boolean) RENAME TO drop_queue_0_7;

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

REVOKE ALL ON FUNCTION claimq.drop_queue(text, boolean) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.drop_queue_0_7(text, boolean)'::regprocedure,
						  'claimq.drop_queue(text, boolean)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.drop_queue_0_7(text, boolean);

-- @include judge-finished.sql

REVOKE ALL ON FUNCTION claimq.judge_finished(bigint[], bigint[]) FROM PUBLIC;

ALTER FUNCTION claimq.judge_dependents(bigint[]) RENAME TO judge_dependents_0_7;

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

REVOKE ALL ON FUNCTION claimq.judge_dependents(bigint[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.judge_dependents_0_7(bigint[])'::regprocedure,
						  'claimq.judge_dependents(bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.judge_dependents_0_7(bigint[]);

-- @include judge-finishes.sql

REVOKE ALL ON FUNCTION claimq.judge_finishes() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER job_finish_judge
	AFTER INSERT ON claimq.job_finish
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (NEW.first) EXECUTE FUNCTION claimq.judge_finishes();

ALTER TABLE claimq.job_finish ENABLE ALWAYS TRIGGER job_finish_judge;

/* (end of Workflows) */

/*------------------------------------------------------------------------
 * 3. retry_dead refuses NULL among job_ids (22004)
 *-----------------------------------------------------------------------*/

ALTER FUNCTION claimq.retry_dead(text, bigint[]) RENAME TO retry_dead_0_7;

-- @include retry-dead.sql

REVOKE ALL ON FUNCTION claimq.retry_dead(text, bigint[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.retry_dead_0_7(text, bigint[])'::regprocedure,
						  'claimq.retry_dead(text, bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.retry_dead_0_7(text, bigint[]);

/*------------------------------------------------------------------------
 * 4. metrics() shows flow control's row path and slots (contract 0.5)
 *-----------------------------------------------------------------------*/

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

REVOKE ALL ON FUNCTION claimq.flow_row_paths(integer[]), claimq.flow_slots() FROM PUBLIC;

/*
 * metrics(), replaced with its grants kept, and the stats it reads
 * (sql/metrics.sql: in the C edition they show flow control, and a
 * distributed install's nodes).
 */
ALTER FUNCTION claimq.metrics() RENAME TO metrics_0_7;
DROP FUNCTION claimq.scrape_stats();

-- @include metrics.sql

REVOKE ALL ON FUNCTION claimq.metrics(), claimq.scrape_stats() FROM PUBLIC;

SELECT claimq.copy_grants('claimq.metrics_0_7()'::regprocedure,
						  'claimq.metrics()'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.metrics_0_7();

/*------------------------------------------------------------------------
 * 5. drop_queue finds a queue's jobs through indexes (section 2 replaced
 * it): the index of finished jobs holds waiting and held jobs too
 *-----------------------------------------------------------------------*/

DROP INDEX claimq.job_finished_idx;
CREATE INDEX job_finished_idx ON claimq.job (queue_id, state, finished_at)
	WHERE state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled,waiting}'::text[])
	   OR held;

/*------------------------------------------------------------------------
 * 6. One door to the ledger for the SQL-language transitions:
 * ledger_note() any number of times, then ledger_end(); ledger_wake() in
 * place of note_change(); the functions that called them replaced
 * (drop_queue, judge_finished and retry_dead above already call the new
 * ones)
 *-----------------------------------------------------------------------*/

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

REVOKE ALL ON FUNCTION claimq.ledger_note(integer, text, text[], bigint[]),
	claimq.ledger_end(), claimq.ledger_wake(integer, boolean, boolean) FROM PUBLIC;

ALTER FUNCTION claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval) RENAME TO alter_queue_0_7_door;

/*
 * Fairness between a queue's tenants (contract 0.5).
 */
ALTER TABLE claimq.queue ADD COLUMN fair boolean NOT NULL DEFAULT false;

-- @include fair-share.sql

ALTER VIEW claimq.group_stats RENAME TO group_stats_0_7;

-- @include group-stats.sql

REVOKE ALL ON claimq.group_stats FROM PUBLIC;

SELECT claimq.copy_grants('claimq.group_stats_0_7'::regclass,
						  'claimq.group_stats'::regclass, 'pg_catalog.pg_class');

DROP VIEW claimq.group_stats_0_7;

REVOKE ALL ON FUNCTION claimq.check_fair(boolean),
	claimq.fair_join(integer, integer, text[]),
	claimq.fair_forget(integer),
	claimq.charge_fair(integer, integer, double precision, text[], double precision[], integer[], text[]),
	claimq.claim_fair(integer, integer, timestamptz, interval, text, boolean, bigint),
	claimq.set_group_weight(text, text, real),
	claimq.fair_changed(), claimq.fair_handed(),
	claimq.fair_joined(integer, integer, text[]) FROM PUBLIC;
REVOKE ALL ON claimq.group_weight, claimq.fair_share, claimq.fair_level,
	claimq.fair_charge FROM PUBLIC;

ALTER FUNCTION claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval) RENAME TO create_queue_0_7;

-- @include queue-settings.sql

REVOKE ALL ON FUNCTION claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval, boolean),
	claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval, boolean) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.alter_queue_0_7_door(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval)'::regprocedure,
						  'claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval, boolean)'::regprocedure,
						  'pg_catalog.pg_proc');
SELECT claimq.copy_grants('claimq.create_queue_0_7(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval)'::regprocedure,
						  'claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval, boolean)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.alter_queue_0_7_door(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval);
-- Who may create queues may weigh their tenants (the administer duty).
SELECT claimq.copy_grants('claimq.create_queue_0_7(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval)'::regprocedure,
						  'claimq.set_group_weight(text, text, real)'::regprocedure,
						  'pg_catalog.pg_proc');
DROP FUNCTION claimq.create_queue_0_7(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval);

ALTER FUNCTION claimq.resume_queue(text) RENAME TO resume_queue_0_7_door;

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

REVOKE ALL ON FUNCTION claimq.resume_queue(text) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.resume_queue_0_7_door(text)'::regprocedure,
						  'claimq.resume_queue(text)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.resume_queue_0_7_door(text);

ALTER FUNCTION claimq.purge_queue(text) RENAME TO purge_queue_0_7_door;

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

REVOKE ALL ON FUNCTION claimq.purge_queue(text) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.purge_queue_0_7_door(text)'::regprocedure,
						  'claimq.purge_queue(text)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.purge_queue_0_7_door(text);

ALTER FUNCTION claimq.prune_after(integer) RENAME TO prune_after_0_7_door;

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

REVOKE ALL ON FUNCTION claimq.prune_after(integer) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.prune_after_0_7_door(integer)'::regprocedure,
						  'claimq.prune_after(integer)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.prune_after_0_7_door(integer);

DROP FUNCTION claimq.ledger_end_moves(jsonb);
DROP FUNCTION claimq.ledger_end(integer, text, text[], bigint[]);
DROP FUNCTION claimq.note_change(integer, boolean, boolean);

/*------------------------------------------------------------------------
 * 7. One body for schedules and cron in both editions (sql/schedules.sql):
 * the functions that were C in the C edition and PL/pgSQL in the portable
 * one are replaced, each keeping its grants, and the portable edition's
 * private helpers with them
 *-----------------------------------------------------------------------*/

/* A job's headers, and each job's of a schedule (section 9). */
ALTER TABLE claimq.job ADD COLUMN headers jsonb;
ALTER TABLE claimq.schedule ADD COLUMN headers jsonb;

ALTER FUNCTION claimq.cron_next(text, text, timestamptz, timestamptz) RENAME TO cron_next_0_7;
ALTER FUNCTION claimq.create_schedule(text, text, text, jsonb, text, integer, text) RENAME TO create_schedule_0_7;
ALTER FUNCTION claimq.alter_schedule(text, text, text, jsonb, text, integer, text, boolean) RENAME TO alter_schedule_0_7;
ALTER FUNCTION claimq.drop_schedule(text) RENAME TO drop_schedule_0_7;
ALTER FUNCTION claimq.fire_schedules(integer) RENAME TO fire_schedules_0_7;

-- @portable
DROP FUNCTION claimq.fire_due(integer);
DROP FUNCTION claimq.schedule_first(text, text, timestamptz);
DROP FUNCTION claimq.check_schedule_name(text);
DROP FUNCTION claimq.cron_walk(interval, bigint, bigint, bigint, bigint, bigint, boolean, boolean, boolean, text, timestamptz, timestamptz);
DROP FUNCTION claimq.cron_offsets(bigint, bigint);
DROP FUNCTION claimq.cron_parse(text, boolean);
DROP FUNCTION claimq.interval_parts(interval);
-- @end

-- @include schedules.sql

REVOKE ALL ON FUNCTION claimq.job_id_base(), claimq.interval_parts(interval),
	claimq.cron_parse(text, boolean), claimq.cron_offsets(bigint, bigint),
	claimq.cron_walk(interval, bigint, bigint, bigint, bigint, bigint, boolean, boolean, boolean, text, timestamptz, timestamptz),
	claimq.check_schedule_name(text),
	claimq.schedule_first(text, text, timestamptz) FROM PUBLIC;
-- @c
REVOKE ALL ON FUNCTION claimq.schedule_home(text, text),
	claimq.at_schedule(text, text, boolean, text, text, jsonb, text, integer, text, boolean, jsonb) FROM PUBLIC;
-- @end

REVOKE ALL ON FUNCTION claimq.cron_next(text, text, timestamptz, timestamptz) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.cron_next_0_7(text, text, timestamptz, timestamptz)'::regprocedure,
						  'claimq.cron_next(text, text, timestamptz, timestamptz)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.cron_next_0_7(text, text, timestamptz, timestamptz);

REVOKE ALL ON FUNCTION claimq.create_schedule(text, text, text, jsonb, text, integer, text, jsonb) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.create_schedule_0_7(text, text, text, jsonb, text, integer, text)'::regprocedure,
						  'claimq.create_schedule(text, text, text, jsonb, text, integer, text, jsonb)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.create_schedule_0_7(text, text, text, jsonb, text, integer, text);

REVOKE ALL ON FUNCTION claimq.alter_schedule(text, text, text, jsonb, text, integer, text, boolean, jsonb) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.alter_schedule_0_7(text, text, text, jsonb, text, integer, text, boolean)'::regprocedure,
						  'claimq.alter_schedule(text, text, text, jsonb, text, integer, text, boolean, jsonb)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.alter_schedule_0_7(text, text, text, jsonb, text, integer, text, boolean);

REVOKE ALL ON FUNCTION claimq.drop_schedule(text) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.drop_schedule_0_7(text)'::regprocedure,
						  'claimq.drop_schedule(text)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.drop_schedule_0_7(text);

REVOKE ALL ON FUNCTION claimq.fire_schedules(integer) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.fire_schedules_0_7(integer)'::regprocedure,
						  'claimq.fire_schedules(integer)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.fire_schedules_0_7(integer);

/*------------------------------------------------------------------------
 * 8. The calls about enqueued jobs take the jobs' queue (sql/job-calls.sql)
 *-----------------------------------------------------------------------*/

ALTER FUNCTION claimq.cancel(bigint[]) RENAME TO cancel_0_7;
ALTER FUNCTION claimq.status(bigint[]) RENAME TO status_0_7;
ALTER FUNCTION claimq.wait_for(bigint[], interval) RENAME TO wait_for_0_7;
ALTER FUNCTION claimq.start(bigint[], bigint[], interval) RENAME TO start_0_7;
ALTER FUNCTION claimq.start(bigint, bigint, interval) RENAME TO start_0_7;
ALTER FUNCTION claimq.extend(bigint[], bigint[], interval) RENAME TO extend_0_7;
ALTER FUNCTION claimq.extend(bigint, bigint, interval) RENAME TO extend_0_7;
ALTER FUNCTION claimq.complete(bigint[], bigint[], jsonb[]) RENAME TO complete_0_7;
ALTER FUNCTION claimq.complete(bigint, bigint, jsonb) RENAME TO complete_0_7;
ALTER FUNCTION claimq.fail(bigint[], bigint[], text, interval, boolean) RENAME TO fail_0_7;
ALTER FUNCTION claimq.fail(bigint, bigint, text, interval, boolean) RENAME TO fail_0_7;
ALTER FUNCTION claimq.release(bigint[], bigint[]) RENAME TO release_0_7;
ALTER FUNCTION claimq.release(bigint, bigint) RENAME TO release_0_7;
ALTER FUNCTION claimq.snooze(bigint[], bigint[], interval) RENAME TO snooze_0_7;
ALTER FUNCTION claimq.snooze(bigint, bigint, interval) RENAME TO snooze_0_7;
ALTER FUNCTION claimq.dependencies(bigint[]) RENAME TO dependencies_0_7;

-- @include portable/job-states.sql
-- @include job-calls.sql

REVOKE ALL ON FUNCTION claimq.check_in_queue(text, bigint[]) FROM PUBLIC;

DO $claimq_job_calls$
DECLARE
	f record;
BEGIN
	FOR f IN SELECT v.old, v.new
			   FROM (VALUES
					  ('claimq.cancel_0_7(bigint[])', 'claimq.cancel(bigint[], text)'),
					  ('claimq.status_0_7(bigint[])', 'claimq.status(bigint[], text)'),
					  ('claimq.wait_for_0_7(bigint[], interval)', 'claimq.wait_for(bigint[], interval, text)'),
					  ('claimq.start_0_7(bigint[], bigint[], interval)', 'claimq.start(bigint[], bigint[], interval, text)'),
					  ('claimq.start_0_7(bigint, bigint, interval)', 'claimq.start(bigint, bigint, interval, text)'),
					  ('claimq.extend_0_7(bigint[], bigint[], interval)', 'claimq.extend(bigint[], bigint[], interval, text)'),
					  ('claimq.extend_0_7(bigint, bigint, interval)', 'claimq.extend(bigint, bigint, interval, text)'),
					  ('claimq.complete_0_7(bigint[], bigint[], jsonb[])', 'claimq.complete(bigint[], bigint[], jsonb[], text)'),
					  ('claimq.complete_0_7(bigint, bigint, jsonb)', 'claimq.complete(bigint, bigint, jsonb, text)'),
					  ('claimq.fail_0_7(bigint[], bigint[], text, interval, boolean)', 'claimq.fail(bigint[], bigint[], text, interval, boolean, text)'),
					  ('claimq.fail_0_7(bigint, bigint, text, interval, boolean)', 'claimq.fail(bigint, bigint, text, interval, boolean, text)'),
					  ('claimq.release_0_7(bigint[], bigint[])', 'claimq.release(bigint[], bigint[], text)'),
					  ('claimq.release_0_7(bigint, bigint)', 'claimq.release(bigint, bigint, text)'),
					  ('claimq.snooze_0_7(bigint[], bigint[], interval)', 'claimq.snooze(bigint[], bigint[], interval, text)'),
					  ('claimq.snooze_0_7(bigint, bigint, interval)', 'claimq.snooze(bigint, bigint, interval, text)'),
					  ('claimq.dependencies_0_7(bigint[])', 'claimq.dependencies(bigint[], text)')) AS v(old, new) LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.new);
		PERFORM claimq.copy_grants(f.old::pg_catalog.regprocedure,
								   f.new::pg_catalog.regprocedure,
								   'pg_catalog.pg_proc');
		EXECUTE pg_catalog.format('DROP FUNCTION %s', f.old);
	END LOOP;
END
$claimq_job_calls$;

DROP FUNCTION claimq.duty_functions(text);

-- Distribution on Citus: the C edition only.
-- @c
-- @include distribute.sql
-- @end

-- count_dependents() and forget_after() in PL/pgSQL, whose plans a
-- distributed install makes again for each shard a transaction judges;
-- count_dependents() for some sets only, and link_after() for a job of
-- another shard, for workflows across shards (sql/after-elsewhere.sql).
ALTER FUNCTION claimq.count_dependents(bigint[], integer) RENAME TO count_dependents_0_7;
ALTER FUNCTION claimq.forget_after(bigint[], bigint[]) RENAME TO forget_after_0_7;
ALTER FUNCTION claimq.link_after(bigint[]) RENAME TO link_after_0_7;

-- @include count-dependents.sql
-- @include forget-after.sql
-- @include link-after.sql

REVOKE ALL ON FUNCTION claimq.count_dependents(bigint[], integer, bigint[]),
	claimq.forget_after(bigint[], bigint[]), claimq.link_after(bigint[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.count_dependents_0_7(bigint[], integer)'::regprocedure,
						  'claimq.count_dependents(bigint[], integer, bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');
SELECT claimq.copy_grants('claimq.link_after_0_7(bigint[])'::regprocedure,
						  'claimq.link_after(bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');
SELECT claimq.copy_grants('claimq.forget_after_0_7(bigint[], bigint[])'::regprocedure,
						  'claimq.forget_after(bigint[], bigint[])'::regprocedure,
						  'pg_catalog.pg_proc');
DROP FUNCTION claimq.count_dependents_0_7(bigint[], integer);
DROP FUNCTION claimq.forget_after_0_7(bigint[], bigint[]);
DROP FUNCTION claimq.link_after_0_7(bigint[]);

-- lock_queue() routes the administration calls of a queue on a
-- distributed install (the C edition's; the same in the portable one).
ALTER FUNCTION claimq.lock_queue(text) RENAME TO lock_queue_0_7;

-- @include lock-queue.sql

REVOKE ALL ON FUNCTION claimq.lock_queue(text) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.lock_queue_0_7(text)'::regprocedure,
						  'claimq.lock_queue(text)'::regprocedure,
						  'pg_catalog.pg_proc');
DROP FUNCTION claimq.lock_queue_0_7(text);

-- @include duties.sql

REVOKE ALL ON FUNCTION claimq.duty_functions(text) FROM PUBLIC;

/*------------------------------------------------------------------------
 * 9. Trace context (contract 0.5): a job's headers, checked by one rule
 * (sql/check-headers.sql); enqueue and enqueue_many take them, claim
 * returns them (sql/enqueue-claim.sql), status and wait_for too (section
 * 8), schedules give them to their jobs (section 7), and the views jobs
 * and schedules show them (sql/job-views.sql); each replaced function and
 * view keeps its grants
 *-----------------------------------------------------------------------*/

ALTER FUNCTION claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text) RENAME TO enqueue_0_7;
ALTER FUNCTION claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text) RENAME TO enqueue_many_0_7;
ALTER FUNCTION claimq.claim(text, integer, interval, text, boolean, interval) RENAME TO claim_0_7;
ALTER VIEW claimq.jobs RENAME TO jobs_0_7;
ALTER VIEW claimq.schedules RENAME TO schedules_0_7;

-- @include enqueue-claim.sql
-- @include job-views.sql

REVOKE ALL ON FUNCTION claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text, jsonb),
	claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text, jsonb[]),
	claimq.claim(text, integer, interval, text, boolean, interval) FROM PUBLIC;
REVOKE ALL ON claimq.jobs, claimq.schedules FROM PUBLIC;

SELECT claimq.copy_grants('claimq.enqueue_0_7(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text)'::regprocedure,
						  'claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text, jsonb)'::regprocedure,
						  'pg_catalog.pg_proc');
SELECT claimq.copy_grants('claimq.enqueue_many_0_7(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text)'::regprocedure,
						  'claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text, jsonb[])'::regprocedure,
						  'pg_catalog.pg_proc');
SELECT claimq.copy_grants('claimq.claim_0_7(text, integer, interval, text, boolean, interval)'::regprocedure,
						  'claimq.claim(text, integer, interval, text, boolean, interval)'::regprocedure,
						  'pg_catalog.pg_proc');
SELECT claimq.copy_grants('claimq.jobs_0_7'::regclass, 'claimq.jobs'::regclass,
						  'pg_catalog.pg_class');
SELECT claimq.copy_grants('claimq.schedules_0_7'::regclass, 'claimq.schedules'::regclass,
						  'pg_catalog.pg_class');

DROP FUNCTION claimq.enqueue_0_7(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text);
DROP FUNCTION claimq.enqueue_many_0_7(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text);
DROP FUNCTION claimq.claim_0_7(text, integer, interval, text, boolean, interval);
DROP VIEW claimq.jobs_0_7;
DROP VIEW claimq.schedules_0_7;

/*------------------------------------------------------------------------
 * 10. Each backend keeps the settings of the queues it looked up, until a
 * statement writes claimq.queue; a queue whose jobs are all at priority 0
 * is claimed without a walk of its priorities (sql/queue-changed.sql)
 *-----------------------------------------------------------------------*/

-- No rewrite: a column with a constant default.  Then marked where a job
-- of any state has another priority.
ALTER TABLE claimq.queue ADD COLUMN prioritized boolean NOT NULL DEFAULT false;

-- @include queue-changed.sql

SELECT claimq.mark_prioritized(NULL);

REVOKE ALL ON FUNCTION claimq.queue_changed(), claimq.mark_prioritized(integer) FROM PUBLIC;

/*------------------------------------------------------------------------
 * 11. A job's state and max_attempts checked by domains (claimq.job_state
 * and claimq.job_max_attempts, see claimq.sql) instead of CHECK
 * constraints of claimq.job, which every statement that writes a job read
 * back and prepared again; the table is read, not rewritten
 *-----------------------------------------------------------------------*/

/*
 * ALTER COLUMN TYPE refuses a column that a view or a trigger reads.  The
 * views keep their OIDs, and so their grants and what depends on their
 * row types (scrape_stats() on queue_stats' rows): those that read state
 * or max_attempts read no job while the columns change, each replaced by
 * a view of the same columns, all NULL; then each view of the files that
 * make them takes the definition that the file gives once the columns
 * have changed.  The census's guard, a trigger on an update of state, is
 * dropped and made again.
 */
DO $claimq_job_domains$
DECLARE
	v text;
BEGIN
	FOREACH v IN ARRAY '{jobs,queue_stats,group_stats}'::text[] LOOP
		-- claimq's own view, replaced in place, as distribute() does (the
		-- scripts themselves replace nothing: test/sql/security.sql).
		EXECUTE pg_catalog.format('CREATE %s VIEW claimq.%I AS SELECT %s', 'OR REPLACE', v,
			(SELECT pg_catalog.string_agg(pg_catalog.format('NULL::%s AS %I',
											  pg_catalog.format_type(a.atttypid, a.atttypmod),
											  a.attname),
										  ', ' ORDER BY a.attnum)
			   FROM pg_catalog.pg_attribute a
			  WHERE a.attrelid OPERATOR(pg_catalog.=)
					pg_catalog.format('claimq.%I', v)::pg_catalog.regclass
				AND a.attnum OPERATOR(pg_catalog.>) 0
				AND NOT a.attisdropped));
	END LOOP;
END
$claimq_job_domains$;

-- @c
DROP TRIGGER job_census_guard ON claimq.job;
-- @end

ALTER TABLE claimq.job DROP CONSTRAINT job_state_check,
	DROP CONSTRAINT job_max_attempts_check;

/*
 * The domains get their rules once the columns are of them: a column's
 * change to a domain of its own type with no rule leaves the table's rows
 * as they are, where a change to one with a rule would rewrite them; the
 * rules, added NOT VALID and then validated, only read them.
 */
CREATE DOMAIN claimq.job_state AS text;

COMMENT ON DOMAIN claimq.job_state IS
'private: the state of a job (pending, claimed, running, dead, done, cancelled, waiting)';

REVOKE ALL ON DOMAIN claimq.job_state FROM PUBLIC;

CREATE DOMAIN claimq.job_max_attempts AS integer;

COMMENT ON DOMAIN claimq.job_max_attempts IS
'private: 1 to 1000, the max_attempts a job has of its own (NULL: its queue''s)';

REVOKE ALL ON DOMAIN claimq.job_max_attempts FROM PUBLIC;

ALTER TABLE claimq.job
	ALTER COLUMN state TYPE claimq.job_state,
	ALTER COLUMN max_attempts TYPE claimq.job_max_attempts;

ALTER DOMAIN claimq.job_state ADD CONSTRAINT job_state_check
	CHECK (VALUE OPERATOR(pg_catalog.=) ANY
		('{pending,claimed,running,dead,done,cancelled,waiting}'::text[])) NOT VALID;

ALTER DOMAIN claimq.job_max_attempts ADD CONSTRAINT job_max_attempts_check
	CHECK (VALUE OPERATOR(pg_catalog.>=) 1
		   AND VALUE OPERATOR(pg_catalog.<=) 1000) NOT VALID;

ALTER DOMAIN claimq.job_state VALIDATE CONSTRAINT job_state_check;
ALTER DOMAIN claimq.job_max_attempts VALIDATE CONSTRAINT job_max_attempts_check;

-- @c
-- Made again as 0.8 has it: it also marks every queue after a write of
-- jobs, or of their priorities, that is not claimq's own (section 10).
CREATE TRIGGER job_census_guard
	AFTER INSERT OR UPDATE OF state, queue_id, priority OR DELETE OR TRUNCATE ON claimq.job
	FOR EACH STATEMENT EXECUTE FUNCTION claimq.job_census();

ALTER TABLE claimq.job ENABLE ALWAYS TRIGGER job_census_guard;
-- @end

/*
 * The files make the views anew beside the old ones, renamed, which take
 * their definitions and comments; the new ones go.  (The jobs view shows
 * state and max_attempts as text and integer, as it did: its definition
 * casts them.)
 */
ALTER VIEW claimq.jobs RENAME TO jobs_0_7;
ALTER VIEW claimq.schedules RENAME TO schedules_0_7;
ALTER VIEW claimq.queue_stats RENAME TO queue_stats_0_7;
ALTER VIEW claimq.group_stats RENAME TO group_stats_0_7;

-- @include job-views.sql
-- @include queue-stats.sql
-- @include group-stats.sql

DO $claimq_job_domains$
DECLARE
	v text;
	old pg_catalog.regclass;
	new pg_catalog.regclass;
BEGIN
	FOREACH v IN ARRAY '{jobs,schedules,queue_stats,group_stats}'::text[] LOOP
		old := pg_catalog.format('claimq.%I', v OPERATOR(pg_catalog.||) '_0_7');
		new := pg_catalog.format('claimq.%I', v);
		EXECUTE pg_catalog.format('CREATE %s VIEW %s AS %s', 'OR REPLACE', old,
								  pg_catalog.pg_get_viewdef(new));
		EXECUTE pg_catalog.format('COMMENT ON VIEW %s IS %L', old,
								  pg_catalog.obj_description(new, 'pg_class'));
		EXECUTE pg_catalog.format('DROP VIEW %s', new);
		EXECUTE pg_catalog.format('ALTER VIEW %s RENAME TO %I', old, v);
	END LOOP;
END
$claimq_job_domains$;

-- @include portable/update--0.7--0.8.sql
