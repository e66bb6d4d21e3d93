/*
 * sql/portable/update--0.7--0.8.sql: the portable editions' part of the
 * update from 0.7 to 0.8, included at the end of sql/claimq--0.7--0.8.sql
 * (a comment in the C edition's update).  The functions whose portable
 * bodies changed, and version(), are replaced, each keeping its grants.
 */

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
