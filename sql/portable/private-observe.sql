-- The portable edition's private helpers: observe.
--
-- The helpers that run statements on claimq's tables turn jit off and
-- keep generic plans, as the C edition does for its kept plans (src/
-- common.c, cq_execute): what they cost must not follow the caller's jit
-- and plan_cache_mode settings (test/sql/jit.sql).

/*
 * The sweep of expired key claims (the C edition: src/keys.c,
 * cq_sweep_keys), oldest expiry first; a key claim being taken over right
 * now is skipped.
 */
CREATE FUNCTION claimq.sweep_keys(max_keys integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
	at timestamptz := pg_catalog.clock_timestamp();
	n bigint;
BEGIN
	DELETE FROM claimq.key_claim k
	 WHERE k.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
		SELECT e.ctid FROM claimq.key_claim e
		 WHERE e.expires_at OPERATOR(pg_catalog.<) at
		 ORDER BY e.expires_at LIMIT max_keys
		 FOR UPDATE SKIP LOCKED))
	   AND k.expires_at OPERATOR(pg_catalog.<) at;
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

COMMENT ON FUNCTION claimq.sweep_keys(integer) IS
'private (portable edition): delete up to max_keys expired key claims; returns how many';

/*
 * The portable edition's reclaimer_status (the C edition keeps it in
 * shared memory, src/reclaimer.c): the last maintain() of this database,
 * written by maintain() in its caller's transaction, so that it commits
 * or rolls back with the pass it describes (a failed pass leaves no
 * trace: last_error stays NULL).  One row at most, id true; maintain()
 * calls running at once take turns on it until each one's transaction
 * ends.
 */
CREATE TABLE claimq.maintained (
	id				boolean NOT NULL DEFAULT true,
	last_run		timestamptz NOT NULL,
	last_reclaimed	bigint NOT NULL,
	total_reclaimed	bigint NOT NULL,
	CONSTRAINT maintained_pkey PRIMARY KEY (id),
	CONSTRAINT maintained_id_check CHECK (id)
);

-- @extension
SELECT pg_catalog.pg_extension_config_dump('claimq.maintained', '');
-- @end

COMMENT ON TABLE claimq.maintained IS
'private (portable edition): the last maintain() of this database, for reclaimer_status';
