/*
 * sql/enqueue-claim.sql: enqueue, enqueue_many (section 5, producing) and
 * claim (section 6, working), whose signatures 0.8 changed for a job's
 * headers (contract 0.5, sql/check-headers.sql): sql/claimq.sql and the
 * update to 0.8 include it.  Their C bodies are in src/enqueue.c and
 * src/claim.c, the portable edition's in sql/portable.
 */

-- @include check-headers.sql

/*
 * Producing: per-job attempts, debounce and group keys.
 */
CREATE FUNCTION claimq.enqueue(
	queue text,
	payload jsonb,
	run_at timestamptz DEFAULT NULL,
	priority integer DEFAULT 0,
	dedup_key text DEFAULT NULL,
	max_attempts integer DEFAULT NULL,
	on_duplicate text DEFAULT 'keep',
	group_key text DEFAULT NULL,
	after bigint[] DEFAULT NULL,
	after_failed text DEFAULT 'cancel',
	headers jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_enqueue';

COMMENT ON FUNCTION claimq.enqueue(text,jsonb,timestamp with time zone,integer,text,integer,text,text,bigint[],text,jsonb) IS
'add a job (waiting, with after, until the jobs listed finish); with a dedup_key that a live job holds, return that job''s id instead (and with on_duplicate => ''replace'', update it while it is pending or waiting)';

CREATE FUNCTION claimq.enqueue_many(
	queue text,
	payloads jsonb[],
	run_at timestamptz DEFAULT NULL,
	priority integer DEFAULT 0,
	dedup_keys text[] DEFAULT NULL,
	max_attempts integer DEFAULT NULL,
	on_duplicate text DEFAULT 'keep',
	group_keys text[] DEFAULT NULL,
	after bigint[] DEFAULT NULL,
	after_failed text DEFAULT 'cancel',
	headers jsonb[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_enqueue_many';

COMMENT ON FUNCTION claimq.enqueue_many(text,jsonb[],timestamp with time zone,integer,text[],integer,text,text[],bigint[],text,jsonb[]) IS
'add one job per payload in one statement (all after the same jobs, with after; each with its element of headers); returns the ids in input order';

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
			  expires_at timestamptz, headers jsonb)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_claim';

COMMENT ON FUNCTION claimq.claim(text,integer,interval,text,boolean,interval) IS
'claim up to max_jobs ready jobs, skipping rows other sessions hold; each comes with the token that fences later calls, and its headers';
