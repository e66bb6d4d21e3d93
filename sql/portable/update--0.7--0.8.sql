/*
 * sql/portable/update--0.7--0.8.sql: the portable editions' part of the
 * update from 0.7 to 0.8, included at the end of sql/claimq--0.7--0.8.sql
 * (a comment in the C edition's update).  The functions whose portable
 * bodies changed, and version(), are replaced, each keeping its grants.
 */

/*
 * Tokens: claim and claim_keys take their epoch from the register
 * (claimq.lifetime_epoch), and maintain() registers it; the timeline and
 * the forced synchronous commit go.  (claim, enqueue and enqueue_many,
 * whose signatures changed, are replaced in both editions: section 9 of
 * the update.)
 */
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

/*
 * Fairness between tenants (fair-share.sql): prune forgets the tenants
 * with no live job.
 */
CREATE OR REPLACE FUNCTION claimq.prune(max_jobs integer DEFAULT 10000)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_prune';

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
 * Settles: the outcomes of the pairs a batch settle left, told apart by
 * one function (claimq.settle_outcomes) for the six of them
 *-----------------------------------------------------------------------*/

-- @include portable/settle-outcomes.sql

REVOKE ALL ON FUNCTION claimq.settle_outcomes(bigint[], bigint[], bigint[], bigint[], boolean) FROM PUBLIC;

/*
 * complete (a holder's complete that waited for an enqueue after its job
 * succeeds on every path: src/settle.c, cq_complete_all_op), start,
 * extend, fail, release and snooze, with the bodies that use it, are
 * replaced with the calls about jobs (sql/job-calls.sql, section 8 of
 * the update).
 */
