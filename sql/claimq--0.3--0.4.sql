/* claimq--0.3--0.4.sql: claims that write no index entries */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.4'" to load this file. \quit

/*
 * A claim, a start and an extend change only columns that no index of
 * claimq.job names (state, token, worker, attempts, claimed_at,
 * expires_at), so PostgreSQL makes each such update heap-only: the new
 * version goes beside the old one on the same page, no index gets an entry
 * for it, and only the changed bytes are written to WAL.  For that:
 *
 *	- the indexes tell live jobs from finished ones by finished_at, which
 *	  done and dead jobs have and no other job has (job_finished_check), not
 *	  by state;
 *	- claimed and running jobs are found by expiry through claimq.lease,
 *	  one row per call that set an expiry (claim, start, extend), instead
 *	  of an index on claimq.job.expires_at;
 *	- pages are filled to 40% on insert, so that a claim of all the jobs
 *	  on a page (jobs enqueued together are claimed together) finds room
 *	  for their new versions beside them: a claimed version is 24 bytes
 *	  longer than the pending one (token, claimed_at, expires_at), and the
 *	  old versions can only be pruned once the claim has committed.  Space
 *	  freed as jobs leave is reused by later enqueues.  The price is room:
 *	  a backlog of pending jobs takes 2.5 times the pages it would at 100%.
 *
 * A claimed or running job stays in job_ready_idx, which now holds every
 * live job; the claim reads state from the row (and starts past the jobs
 * it knows are taken, see floor.c).
 */
/*
 * No claim may run while the leases of the claims held now are filed: the
 * library asks which statements to use only once it holds its lock on
 * claimq.job (see cq_leases), so it waits for this update and then files
 * leases itself.
 */
LOCK TABLE claimq.job IN ACCESS EXCLUSIVE MODE;

ALTER TABLE claimq.job ADD CONSTRAINT job_finished_check
	CHECK ((finished_at IS NOT NULL) OPERATOR(pg_catalog.=)
		   (state OPERATOR(pg_catalog.=) ANY ('{done,dead}'::text[])));

ALTER TABLE claimq.job SET (fillfactor = 40);

/*
 * Leases.  Each row says: these jobs of this queue were given this expiry.
 * A job's own expires_at is the truth; a row only tells the reclaimer when
 * to look.  Every change that sets an expiry adds a row with that expiry,
 * so each claimed or running job has a row due no later than its expiry.
 * The reclaimer deletes a row once it is due and none of its jobs is
 * still held and expired; rows of jobs settled meanwhile just go then.
 */
CREATE TABLE claimq.lease (
	queue_id		integer NOT NULL,
	expires_at		timestamptz NOT NULL,
	job_ids			bigint[] NOT NULL
);

CREATE INDEX lease_expiry_idx ON claimq.lease (expires_at);

REVOKE ALL ON claimq.lease FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('claimq.lease', '');

/* The claims held across this update. */
INSERT INTO claimq.lease (queue_id, expires_at, job_ids)
SELECT j.queue_id, j.expires_at, pg_catalog.array_agg(j.job_id ORDER BY j.job_id)
  FROM claimq.job j
 WHERE j.expires_at IS NOT NULL
 GROUP BY j.queue_id, j.expires_at;

DROP INDEX claimq.job_lease_idx;

DROP INDEX claimq.job_ready_idx;
CREATE INDEX job_ready_idx ON claimq.job
	(queue_id, priority DESC, run_at, job_id)
	WHERE finished_at IS NULL;

DROP INDEX claimq.job_dedup_idx;
CREATE UNIQUE INDEX job_dedup_idx ON claimq.job (queue_id, dedup_key)
	WHERE dedup_key IS NOT NULL AND finished_at IS NULL;

DROP INDEX claimq.job_finished_idx;
CREATE INDEX job_finished_idx ON claimq.job (queue_id, finished_at)
	WHERE finished_at IS NOT NULL;
