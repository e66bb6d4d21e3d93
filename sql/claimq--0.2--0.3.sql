/* claimq--0.2--0.3.sql: guarantees under asynchronous commit and crashes */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.3'" to load this file. \quit

/*
 * Every job of a claim now draws a token of its own.  Each backend keeps a
 * cache of the sequence's values, so that the WAL record which reserves
 * them, and which must be flushed before any of them is handed out (see
 * token.c), is written once per this many tokens rather than every 32.
 */
ALTER SEQUENCE claimq.token_seq CACHE 65536;

/*
 * Interval settings are judged by the timestamp arithmetic they are used
 * with (a month as long as the calendar says), by the same C code as the
 * arguments of every other function.  create_queue and alter_queue call
 * it by name.
 */
DROP FUNCTION claimq.check_queue_settings(interval, interval, integer,
										  interval, interval, interval, interval);

CREATE FUNCTION claimq.check_queue_settings(
	lease interval, run_lease interval, max_attempts integer,
	retry_base interval, retry_max interval,
	keep_done interval, keep_dead interval)
RETURNS void
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_check_queue_settings';

COMMENT ON FUNCTION claimq.check_queue_settings(interval, interval, integer, interval, interval, interval, interval) IS
'private: raise 22023 unless the queue settings are within the contract''s limits';

REVOKE ALL ON FUNCTION claimq.check_queue_settings(interval, interval, integer, interval, interval, interval, interval) FROM PUBLIC;

/*
 * Diagnosis: the claims of this database that wait for work now.  In no
 * duty.
 */
CREATE FUNCTION claimq.waiting_claims()
RETURNS TABLE(pid integer, queue_id integer)
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_waiting_claims';

COMMENT ON FUNCTION claimq.waiting_claims() IS
'private: the claims of this database that wait for work now (with the preload), for diagnosis';

REVOKE ALL ON FUNCTION claimq.waiting_claims() FROM PUBLIC;
