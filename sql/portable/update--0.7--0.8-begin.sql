-- @script
/*
 * sql/portable/update--0.7--0.8-begin.sql: the first statement of the
 * portable edition's plain script of the update from 0.7 to 0.8 (included
 * at the top of sql/claimq--0.7--0.8.sql).  It updates a database that
 * has that edition's 0.7, installed as a plain script, and nothing else:
 * anything else raises 55000 before a change is made.
 */
DO $claimq_update$
BEGIN
	IF pg_catalog.to_regprocedure('claimq.version()') IS NULL THEN
		RAISE EXCEPTION 'claimq is not installed in this database'
			USING ERRCODE = '55000',
				  HINT = 'Install the current release with claimq-portable.sql.';
	END IF;
	IF EXISTS (SELECT FROM pg_catalog.pg_extension e
				WHERE e.extname OPERATOR(pg_catalog.=) 'claimq') THEN
		RAISE EXCEPTION 'claimq is installed as an extension in this database'
			USING ERRCODE = '55000',
				  HINT = 'Update it with ALTER EXTENSION claimq UPDATE.';
	END IF;
	IF claimq.edition() OPERATOR(pg_catalog.<>) 'portable'
	   OR claimq.version() OPERATOR(pg_catalog.<>) '0.7' THEN
		RAISE EXCEPTION 'this script updates claimq 0.7 (the portable edition), not % (the % edition)',
			claimq.version(), claimq.edition()
			USING ERRCODE = '55000';
	END IF;
END
$claimq_update$;
-- @end
