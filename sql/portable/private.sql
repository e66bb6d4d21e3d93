/*
 * Tokens in the portable edition (the C edition: src/token.c).  A token is
 * the timeline's epoch (the timeline, less one, in bits 48 and up) plus a
 * value of claimq.token_seq.  Without XLogFlush, no value can be drawn
 * again after a crash because the transaction that drew it commits with
 * synchronous_commit at least local: the commit record follows the
 * sequence's record, and the claim's caller learns of its tokens only when
 * that commit is on disk.  The setting is the transaction's own (a SET
 * LOCAL, reverted when it ends); a later SET LOCAL synchronous_commit =
 * off in the same transaction voids it.  The timeline is that of the WAL
 * being written now, as the name of its segment shows it.
 */
CREATE FUNCTION claimq.token_base()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) 'off' THEN
		PERFORM pg_catalog.set_config('synchronous_commit', 'local', true);
	END IF;
	IF pg_catalog.pg_is_in_recovery() THEN
		RAISE EXCEPTION 'cannot draw tokens during recovery'
			USING ERRCODE = '25006';
	END IF;
	RETURN (('x' OPERATOR(pg_catalog.||)
			 pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, 8)
			)::pg_catalog.bit(32)::bigint OPERATOR(pg_catalog.-) 1)
		OPERATOR(pg_catalog.<<) 48;
END
$$;

COMMENT ON FUNCTION claimq.token_base() IS
'private (portable edition): what to add to a value of claimq.token_seq to make a token; makes the transaction commit with synchronous_commit at least local';

-- @include portable/private-produce.sql
-- @include portable/private-work.sql
-- @include portable/private-keys.sql
-- @include portable/private-schedules.sql
-- @include portable/private-recover.sql
-- @include portable/private-observe.sql
