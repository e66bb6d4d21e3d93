/*
 * sql/portable/update--0.7--0.8.sql: the portable editions' part of the
 * update from 0.7 to 0.8, included at the end of sql/claimq--0.7--0.8.sql
 * (a comment in the C edition's update).  The functions whose portable
 * bodies changed, and version(), are replaced, each keeping its grants.
 */

/*
 * Tokens: claim and claim_keys take their epoch from the register
 * (claimq.lifetime_epoch), and maintain() registers it; the timeline and
 * the forced synchronous commit go.
 */
CREATE OR REPLACE FUNCTION claimq.claim(
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

CREATE OR REPLACE FUNCTION claimq.claim_keys(scope text, keys text[], ttl interval)
RETURNS TABLE(key text, token bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_claim_keys';

CREATE OR REPLACE FUNCTION claimq.maintain()
RETURNS TABLE(step text, count bigint)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_maintain';

DROP FUNCTION claimq.token_base();

ALTER FUNCTION claimq.version() RENAME TO version_0_7;

CREATE FUNCTION claimq.version()
RETURNS text
LANGUAGE c STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_version';

COMMENT ON FUNCTION claimq.version() IS
'the release of claimq whose schema the library serves';

REVOKE ALL ON FUNCTION claimq.version() FROM PUBLIC;

SELECT claimq.copy_grants('claimq.version_0_7()'::regprocedure,
						  'claimq.version()'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.version_0_7();

/*------------------------------------------------------------------------
 * Workflows: a holder's complete that waited for an enqueue after its job
 * succeeds on every path (src/settle.c, cq_complete_all_op)
 *-----------------------------------------------------------------------*/

ALTER FUNCTION claimq.complete(bigint[], bigint[], jsonb[]) RENAME TO complete_0_7;

CREATE FUNCTION claimq.complete(job_ids bigint[], tokens bigint[],
								results jsonb[] DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete';

COMMENT ON FUNCTION claimq.complete(bigint[],bigint[],jsonb[]) IS
'finish claimed or running jobs: deleted, or kept as done (with its result) on a keep_done queue';

REVOKE ALL ON FUNCTION claimq.complete(bigint[], bigint[], jsonb[]) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.complete_0_7(bigint[], bigint[], jsonb[])'::regprocedure,
						  'claimq.complete(bigint[], bigint[], jsonb[])'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.complete_0_7(bigint[], bigint[], jsonb[]);

ALTER FUNCTION claimq.complete(bigint, bigint, jsonb) RENAME TO complete_0_7;

CREATE FUNCTION claimq.complete(job_id bigint, token bigint,
								result jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_complete_one';

COMMENT ON FUNCTION claimq.complete(bigint,bigint,jsonb) IS
'complete one job; true if the token still held it';

REVOKE ALL ON FUNCTION claimq.complete(bigint, bigint, jsonb) FROM PUBLIC;

SELECT claimq.copy_grants('claimq.complete_0_7(bigint, bigint, jsonb)'::regprocedure,
						  'claimq.complete(bigint, bigint, jsonb)'::regprocedure,
						  'pg_catalog.pg_proc');

DROP FUNCTION claimq.complete_0_7(bigint, bigint, jsonb);

/* (end of Workflows) */

/*------------------------------------------------------------------------
 * Settles: the outcomes of the pairs a batch settle left, told apart by
 * one function (claimq.settle_outcomes) for the six of them
 *-----------------------------------------------------------------------*/

-- @include portable/settle-outcomes.sql

REVOKE ALL ON FUNCTION claimq.settle_outcomes(bigint[], bigint[], bigint[], bigint[], boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION claimq.start(job_ids bigint[], tokens bigint[],
							 lease interval DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_start';

CREATE OR REPLACE FUNCTION claimq.extend(job_ids bigint[], tokens bigint[],
							  lease interval DEFAULT NULL)
RETURNS TABLE(job_id bigint, outcome text, expires_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_extend';

CREATE OR REPLACE FUNCTION claimq.fail(job_ids bigint[], tokens bigint[],
							error text DEFAULT NULL,
							retry_in interval DEFAULT NULL,
							permanent boolean DEFAULT false)
RETURNS TABLE(job_id bigint, outcome text, state text, run_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_fail';

CREATE OR REPLACE FUNCTION claimq.release(job_ids bigint[], tokens bigint[])
RETURNS TABLE(job_id bigint, outcome text)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_release';

CREATE OR REPLACE FUNCTION claimq.snooze(job_ids bigint[], tokens bigint[],
							  delay interval)
RETURNS TABLE(job_id bigint, outcome text, run_at timestamptz)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_snooze';
