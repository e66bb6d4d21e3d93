-- The baseline's table, in schema bench: bench/schema.sql includes it,
-- and bench/run --instructions loads it alone.

-- The baseline: a hand-written queue's table, claimq.job's first 15
-- columns (those of 0.2, which such a queue needs: ids, token, times,
-- queue, priority, attempts, state, worker, dedup key, last error and
-- payload) and their indexes, but not the nine that later versions added
-- for their features (max_attempts, group_key, result, started_at, held,
-- after_set, after_count, after_failed, dependents) nor their indexes and
-- checks: what those cost is part of what claimq is measured to cost.
CREATE SEQUENCE bench.job_id_seq AS bigint;
CREATE SEQUENCE bench.token_seq AS bigint;

CREATE TABLE bench.job (
	job_id		bigint NOT NULL DEFAULT nextval('bench.job_id_seq'),
	token		bigint,
	run_at		timestamptz NOT NULL,
	enqueued_at	timestamptz NOT NULL,
	expires_at	timestamptz,
	claimed_at	timestamptz,
	finished_at	timestamptz,
	queue_id	integer NOT NULL,
	priority	integer NOT NULL DEFAULT 0,
	attempts	integer NOT NULL DEFAULT 0,
	state		text NOT NULL,
	worker		text,
	dedup_key	text,
	last_error	text,
	payload		jsonb NOT NULL,
	PRIMARY KEY (job_id),
	CHECK (state = ANY ('{pending,claimed,running,dead,done}'::text[])),
	CHECK ((expires_at IS NOT NULL) = (state = ANY ('{claimed,running}'::text[])))
);
CREATE INDEX ON bench.job (queue_id, priority DESC, run_at, job_id)
	WHERE state = 'pending';
CREATE INDEX ON bench.job (expires_at) WHERE expires_at IS NOT NULL;
CREATE UNIQUE INDEX ON bench.job (queue_id, dedup_key)
	WHERE dedup_key IS NOT NULL AND state = ANY ('{pending,claimed,running}'::text[]);
CREATE INDEX ON bench.job (queue_id, state, finished_at)
	WHERE state = ANY ('{done,dead}'::text[]);

