/* claimq--0.1--0.2.sql: node numbers in job ids, for running on several servers */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.2'" to load this file. \quit

/*
 * A job id is the server's node number (claimq.node_id) times 2^48 plus a
 * value of job_id_seq, so that a router can tell from an id which server
 * issued it.  The sequence stays below 2^48.
 */
ALTER SEQUENCE claimq.job_id_seq MAXVALUE 281474976710655;

CREATE FUNCTION claimq.node_of(job_id bigint)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF job_id IS NULL THEN
		RAISE EXCEPTION 'argument "job_id" must not be null' USING ERRCODE = '22004';
	END IF;
	RETURN (job_id OPERATOR(pg_catalog.>>) 48)::integer;
END
$$;

COMMENT ON FUNCTION claimq.node_of(bigint) IS
'the node number (claimq.node_id of the server that issued it) in a job id';

REVOKE ALL ON FUNCTION claimq.node_of(bigint) FROM PUBLIC;
