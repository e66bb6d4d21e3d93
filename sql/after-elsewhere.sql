-- Workflows across shards on a distributed install (the C edition),
-- written once for the install script and the update that creates it.
/*
 * A job enqueued "after" a job of a queue on another shard (another
 * worker's, or another of its own worker's shards) cannot look at that
 * job in its enqueue: Citus runs the enqueue on the queue's worker and
 * refuses a distributed query from there.  So the two shards exchange
 * mail after their commits, each message written in the transaction that
 * causes it and handed on by the reclaimer of the node that holds the
 * sender's shard, in a transaction of its own that Citus commits on both
 * nodes at once (cq_hand_off_after, src/shard.c):
 *
 *	link_after		the enqueue records the job in its set as usual
 *					(claimq.job_after), but marked remote: counted
 *					unfinished, and counted off only by what is heard of
 *					it, never by a finish in this shard; and writes a look
 *					for it: claimq.after_mail with no to_queue
 *	hand-off		finds the job's queue, and has that queue's node
 *					watch it for the set (watch_after): marked as having
 *					dependents, and a row in claimq.job_watcher, unless it
 *					has finished already: then the set hears its state at
 *					once
 *	tell_watchers	the job finishes, or is removed unfinished: at the
 *					commit that judges its dependents (judge_finished),
 *					each watcher becomes mail of its final state to its
 *					set
 *	hand-off		the set's node hears it (hear_after): the set keeps
 *					the state as final_state, once, and its waiting jobs
 *					count the job off and are judged, as those of a job of
 *					their own shard at its finish
 *
 * Each watch and each state is the set's own, so a state told before a
 * retry_dead reaches only the sets that watched the job then.  A look
 * whose job another transaction holds is made again at the next pass.  A
 * look that finds the job nowhere is tried again at each pass (an enqueue
 * of the job whose commit has not reached every node yet) and heard as a
 * job removed unfinished (cancelled) once it has been missed for two
 * minutes.  Watching the job locks it as link_after does, so its finish
 * either waits for the watcher and tells it, or the watch waits for the
 * finish and hears the state at once.  A job that finishes and is removed
 * (a queue that keeps nothing) before the look reaches it counts as
 * removed too.  retry_dead of a job whose state a set has heard does not
 * make that set wait for it again.  The delay is one pass of the
 * reclaimers (claimq.reclaim_interval) per message, two in all; a hand-off
 * that fails (a worker that does not answer) is logged and tried again at
 * the next pass, without holding up the reclaimer's other work.
 */

/*
 * The mail of a queue's shards (queue: the sender's), about job job_id and
 * the jobs of set set_id that run after it: a look for it from those of
 * queue (to_queue and state NULL; missed_at, since when it is found
 * nowhere), or its final state for those of to_queue.  Handed on in order
 * of written_at (a look tried again goes to the back).
 */
CREATE TABLE claimq.after_mail (
	queue			text NOT NULL,
	job_id			bigint NOT NULL,
	set_id			bigint NOT NULL,
	to_queue		text,
	state			text,
	written_at		timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	missed_at		timestamptz
);

CREATE INDEX after_mail_written_idx ON claimq.after_mail (written_at);

/* The sets of other shards' queues (to_queue) whose jobs wait on job_id, of queue. */
CREATE TABLE claimq.job_watcher (
	queue			text NOT NULL,
	job_id			bigint NOT NULL,
	to_queue		text NOT NULL,
	set_id			bigint NOT NULL,
	CONSTRAINT job_watcher_pkey PRIMARY KEY (job_id, to_queue, set_id, queue)
);

SELECT pg_catalog.pg_extension_config_dump('claimq.after_mail', '');
SELECT pg_catalog.pg_extension_config_dump('claimq.job_watcher', '');

/*
 * The listed jobs finished or were removed (judge_finished, routed to
 * their shard): each watcher of theirs becomes mail of the job's final
 * state (cancelled for a job removed unfinished).
 */
CREATE FUNCTION claimq.tell_watchers(job_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	WITH told AS (
		DELETE FROM claimq.job_watcher w
		 WHERE w.job_id OPERATOR(pg_catalog.=) ANY (job_ids)
		RETURNING w.queue, w.job_id, w.to_queue, w.set_id)
	INSERT INTO claimq.after_mail (queue, job_id, set_id, to_queue, state)
	SELECT t.queue, t.job_id, t.set_id, t.to_queue,
		   COALESCE((SELECT j.state FROM claimq.job j
					  WHERE j.job_id OPERATOR(pg_catalog.=) t.job_id
						AND j.state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[])),
					'cancelled')
	  FROM told t;
END
$$;

COMMENT ON FUNCTION claimq.tell_watchers(bigint[]) IS
'private: on a distributed install, mail the final state of the listed jobs to the queues of other shards that wait on them';

/*
 * The jobs of set set_id, of to_queue, wait on job job_id of queue (a call
 * Citus delegates to queue's node): watch it for them, or return its
 * final state if it has one already ('missing' if it is gone, 'busy' if
 * another transaction holds its row: a claim inside a longer transaction,
 * say; the look is made again at the next pass, rather than the hand-off
 * waiting for it).
 */
CREATE FUNCTION claimq.watch_after(queue text, job_id bigint, to_queue text,
								   set_id bigint)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	now_state text;
BEGIN
	PERFORM claimq.route_to(watch_after.queue);
	PERFORM FROM claimq.job j
	  WHERE j.job_id OPERATOR(pg_catalog.=) watch_after.job_id
	  FOR NO KEY UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		PERFORM FROM claimq.job j
		  WHERE j.job_id OPERATOR(pg_catalog.=) watch_after.job_id;
		RETURN CASE WHEN FOUND THEN 'busy' ELSE 'missing' END;
	END IF;
	-- A new version of the job (locked above), as link_after writes.
	UPDATE claimq.job j SET dependents = true
	 WHERE j.job_id OPERATOR(pg_catalog.=) watch_after.job_id
	RETURNING j.state INTO now_state;
	IF now_state OPERATOR(pg_catalog.=) ANY ('{done,dead,cancelled}'::text[]) THEN
		RETURN now_state;
	END IF;
	INSERT INTO claimq.job_watcher (queue, job_id, to_queue, set_id)
	VALUES (watch_after.queue, watch_after.job_id, watch_after.to_queue,
			watch_after.set_id)
	ON CONFLICT DO NOTHING;
	RETURN NULL;
END
$$;

COMMENT ON FUNCTION claimq.watch_after(text, bigint, text, bigint) IS
'private: on a distributed install, watch a job for the jobs of another shard''s queue that run after it, or return its final state';

/*
 * The final state of job job_id, of another shard, heard by set set_id of
 * queue (a call Citus delegates to queue's node): unless the set has
 * heard it already, it keeps the state, and its waiting jobs count the
 * job off and are judged.
 */
CREATE FUNCTION claimq.hear_after(queue text, job_id bigint, state text,
								  set_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	sets bigint[];
BEGIN
	PERFORM claimq.route_to(hear_after.queue);
	WITH heard AS (
		UPDATE claimq.job_after e SET final_state = hear_after.state
		 WHERE e.set_id OPERATOR(pg_catalog.=) hear_after.set_id
		   AND e.after_id OPERATOR(pg_catalog.=) hear_after.job_id
		   AND e.remote AND e.final_state IS NULL
		RETURNING e.set_id)
	SELECT pg_catalog.array_agg(h.set_id) INTO sets FROM heard h;
	IF sets IS NOT NULL THEN
		PERFORM claimq.judge_finished(ARRAY[hear_after.job_id], sets);
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.hear_after(text, bigint, text, bigint) IS
'private: on a distributed install, the final state of a job of another shard reaches the jobs of a queue that wait on it';

REVOKE ALL ON TABLE claimq.after_mail, claimq.job_watcher FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.tell_watchers(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.watch_after(text, bigint, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.hear_after(text, bigint, text, bigint) FROM PUBLIC;
