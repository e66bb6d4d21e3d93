/* claimq--0.7--0.8.sql: tokens that never repeat (the register of token epochs) */

-- @extension
\echo Use "ALTER EXTENSION claimq UPDATE TO '0.8'" to load this file. \quit
-- @end
-- @include portable/update--0.7--0.8-begin.sql

/*------------------------------------------------------------------------
 * 1. Tokens that never repeat: the register of token epochs
 *-----------------------------------------------------------------------*/

/*
 * Token epochs (see src/token.c and claimq.lifetime_epoch).  A token is
 * the epoch of the server lifetime that handed it out, in bits 48 to 62,
 * plus a value of claimq.token_seq.  claimq.epoch registers the epochs
 * handed out, in both editions; a lifetime's epoch is one above every
 * epoch registered before it.  claimq.lifetime marks the lifetime whose
 * epoch is registered: it is unlogged, so every recovery (a crash-restart
 * or a promotion) empties it, and it records the server's start time and
 * its own OID, so that a clean restart, a restored or upgraded cluster and
 * a row that a restore or a move between editions copied into another
 * install's table find it out of date.  Neither has a key: the register
 * that a restore or a move copies in beside an install's own makes the
 * install's epoch no longer the highest, or one registered twice, and so
 * out of date too.
 */
CREATE TABLE claimq.epoch (
	epoch			integer NOT NULL,
	started_at		timestamptz NOT NULL,
	edition			text NOT NULL,
	registered_at	timestamptz NOT NULL,
	CONSTRAINT epoch_range CHECK (epoch OPERATOR(pg_catalog.>=) 0
								  AND epoch OPERATOR(pg_catalog.<=) 32767)
);

CREATE INDEX epoch_epoch_idx ON claimq.epoch (epoch);

CREATE UNLOGGED TABLE claimq.lifetime (
	epoch			integer NOT NULL,
	started_at		timestamptz NOT NULL,
	marker			oid NOT NULL,	/* claimq.lifetime's, when written */
	registered_by	xid8 NOT NULL
);

-- @extension
SELECT pg_catalog.pg_extension_config_dump('claimq.epoch', '');
-- @end

REVOKE ALL ON TABLE claimq.epoch, claimq.lifetime FROM PUBLIC;

/*
 * The epoch of this server lifetime's tokens (The token, contract 0.5;
 * src/token.c), if a transaction registered it: the marker counts if it
 * was written in this lifetime, into this very table, and its epoch is
 * the highest registered, registered once.  ours: by this transaction,
 * which has not committed yet.  The rule, for lifetime_epoch() and for
 * the portable edition's claims, which look here first.
 */
CREATE FUNCTION claimq.lifetime_marker(OUT epoch integer, OUT ours boolean)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT l.epoch, l.registered_by IS NOT DISTINCT FROM
				pg_catalog.pg_current_xact_id_if_assigned()
  FROM claimq.lifetime l
 WHERE l.started_at OPERATOR(pg_catalog.=) pg_catalog.pg_postmaster_start_time()
   AND l.marker OPERATOR(pg_catalog.=) l.tableoid
   AND (SELECT pg_catalog.count(*) FROM claimq.epoch e
		 WHERE e.epoch OPERATOR(pg_catalog.>=) l.epoch) OPERATOR(pg_catalog.=) 1
 LIMIT 1
$$;

COMMENT ON FUNCTION claimq.lifetime_marker() IS
'private: the epoch of this server lifetime''s tokens if it is registered, and whether by this transaction';

/*
 * The epoch of this server lifetime's tokens, registering it on the first
 * look of a lifetime.  durable is true when a transaction that has
 * committed registered it; such a transaction committed with
 * synchronous_commit at least local, so the registration is on disk and
 * no later lifetime can take the same epoch.  Otherwise this call has
 * just registered it, in its own transaction, which is then made to commit
 * with synchronous_commit at least local (a setting of the transaction
 * only), or another transaction is registering it right now and this call
 * does not wait for it: epoch is then the one the lifetime gets if that
 * registration commits.  The portable edition hands out no token of an
 * epoch that is not durable; the C edition, which flushes the WAL that
 * logged its tokens' sequence values before they leave the server, may.
 *
 * Registrations take turns on claimq.lifetime (NOWAIT: a look that finds
 * one under way goes on); under the lock, each statement of READ
 * COMMITTED sees one that committed meanwhile.
 */
CREATE FUNCTION claimq.lifetime_epoch(OUT epoch integer, OUT durable boolean)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	ours boolean;
BEGIN
	FOR pass IN 1..2 LOOP
		SELECT m.epoch, m.ours INTO epoch, ours FROM claimq.lifetime_marker() m;
		IF FOUND THEN
			durable := NOT ours;
			RETURN;
		END IF;
		SELECT COALESCE(pg_catalog.max(e.epoch) OPERATOR(pg_catalog.+) 1, 0)
		  INTO epoch FROM claimq.epoch e;
		durable := false;
		EXIT WHEN pass OPERATOR(pg_catalog.=) 2;
		BEGIN
			LOCK TABLE claimq.lifetime IN EXCLUSIVE MODE NOWAIT;
		EXCEPTION WHEN lock_not_available THEN
			RETURN;
		END;
	END LOOP;

	IF epoch OPERATOR(pg_catalog.>) 32767 THEN
		RAISE EXCEPTION 'claimq has no token epoch left for this server lifetime'
			USING ERRCODE = '54000',
				  DETAIL = pg_catalog.format('Every server lifetime that hands out tokens takes an epoch, and epoch %s is the last.', epoch OPERATOR(pg_catalog.-) 1),
				  HINT = 'Move the database''s claimq to a fresh install: see docs/operations.md.';
	END IF;
	INSERT INTO claimq.epoch (epoch, started_at, edition, registered_at)
	VALUES (epoch, pg_catalog.pg_postmaster_start_time(), claimq.edition(),
			pg_catalog.clock_timestamp());
	DELETE FROM claimq.lifetime;
	INSERT INTO claimq.lifetime (epoch, started_at, marker, registered_by)
	VALUES (epoch, pg_catalog.pg_postmaster_start_time(),
			'claimq.lifetime'::pg_catalog.regclass, pg_catalog.pg_current_xact_id());
	IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) 'off' THEN
		PERFORM pg_catalog.set_config('synchronous_commit', 'local', true);
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.lifetime_epoch() IS
'private: the epoch of this server lifetime''s tokens, registered on the first look of a lifetime; durable once a committed transaction registered it';

REVOKE ALL ON FUNCTION claimq.lifetime_marker() FROM PUBLIC;
REVOKE ALL ON FUNCTION claimq.lifetime_epoch() FROM PUBLIC;

/*
 * The epochs of tokens that 0.7 handed out are registered, so that this
 * release's first epoch is above them: the C edition's epoch followed the
 * timeline, and the portable edition's too; the tokens still held are the
 * rest that is known of them.  Then this lifetime's epoch is registered,
 * as by an install.
 */
INSERT INTO claimq.epoch (epoch, started_at, edition, registered_at)
SELECT GREATEST(
		   (SELECT pg_catalog.max(j.token OPERATOR(pg_catalog.>>) 48) FROM claimq.job j),
		   (SELECT pg_catalog.max(k.token OPERATOR(pg_catalog.>>) 48) FROM claimq.key_claim k),
-- @c
		   (SELECT (('x' OPERATOR(pg_catalog.||)
					 pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, 8)
					)::pg_catalog.bit(32)::bigint OPERATOR(pg_catalog.-) 1)
			 WHERE NOT pg_catalog.pg_is_in_recovery()),
-- @end
		   0)::integer,
	   '-infinity', claimq.edition(), pg_catalog.clock_timestamp();

DO $update$
BEGIN
	IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.<>) 'off' THEN
		PERFORM claimq.lifetime_epoch();
	END IF;
END
$update$;

-- @include portable/update--0.7--0.8.sql
