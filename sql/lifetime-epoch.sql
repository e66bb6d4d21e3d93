-- The token epoch's rule, written once for the install script and the
-- update that creates it.

-- @c
/*
 * The first epoch from `epoch` up that this node may take: on a
 * distributed install (sql/distribute.sql) one congruent to the node's
 * Citus group modulo 128, so that two nodes never hand out tokens of one
 * epoch and a queue's tokens stay unique when its shards move from one to
 * the other (src/shard.c); on a single server, `epoch` itself.
 */
CREATE FUNCTION claimq.node_epoch(epoch integer)
RETURNS integer
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_node_epoch';

COMMENT ON FUNCTION claimq.node_epoch(integer) IS
'private: the first token epoch from the one given that this node may take (on a distributed install, congruent to its Citus group modulo 128)';

REVOKE ALL ON FUNCTION claimq.node_epoch(integer) FROM PUBLIC;
-- @end

/*
 * The epoch of this server lifetime's tokens (The token, contract 0.5;
 * src/token.c), registering it on the first look of a lifetime: the
 * marker counts if it was written in this lifetime, into this very table,
 * and its epoch is the highest registered, registered once.  durable is
 * true when a transaction that has committed registered it; such a
 * transaction committed with synchronous_commit at least local, so the
 * registration is on disk and no later lifetime can take the same epoch.
 * Otherwise this call has just registered it, in its own transaction,
 * which is then made to commit with synchronous_commit at least local (a
 * setting of the transaction only), or another transaction is registering
 * it right now and this call does not wait for it: epoch is then the one
 * the lifetime gets if that registration commits.  The portable edition
 * hands out no token of an epoch that is not durable; the C edition, which
 * flushes the WAL that logged its tokens' sequence values before they
 * leave the server, may.  The portable edition's claims look through
 * claimq.lifetime_registered first and call it when they find nothing:
 * PL/pgSQL keeps the plans of both, where an SQL function would plan the
 * look on every call.
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
		SELECT r.epoch, r.ours INTO epoch, ours
		  FROM claimq.lifetime_registered r LIMIT 1;
		IF FOUND THEN
			durable := NOT ours;
			RETURN;
		END IF;
		SELECT COALESCE(pg_catalog.max(e.epoch) OPERATOR(pg_catalog.+) 1, 0)
		  INTO epoch FROM claimq.epoch e;
-- @c
		epoch := claimq.node_epoch(epoch);
-- @end
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
