-- The portable edition's private helpers: keys.
--
-- claim_keys and release_keys check their arguments and draw the token,
-- then run their statements in these helpers, which turn jit off and keep
-- generic plans, as the C edition does for its kept plans (src/common.c,
-- cq_execute): what a call costs must not follow the caller's jit and
-- plan_cache_mode settings (test/sql/jit.sql).

/*
 * claim_keys' work (src/keys.c), its arguments checked: the keys of
 * key_list (not empty) that this call wins in scope key_scope, each held
 * with call_token for ttl from now, in the order of their first
 * appearance.  A key nobody holds is won by an insert; a key whose claim
 * has expired is taken over by an update that re-checks the expiry under
 * the row lock, so of two callers only one takes it over.
 */
CREATE FUNCTION claimq.claim_keys_won(key_scope text, key_list text[],
									  call_token bigint, ttl interval)
RETURNS TABLE(key text, token bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
	now_ts timestamptz;
	expiry timestamptz;
	won text[];
	taken text[];
	nwon integer;
BEGIN
	/*
	 * Claims won now expire ttl after this one reading of the clock.  A
	 * key nobody holds is won; a key another transaction is inserting
	 * makes this wait for it, and is won only if that one aborts.  Sorted,
	 * so that concurrent calls lock keys in one order.
	 */
	now_ts := pg_catalog.clock_timestamp();
	expiry := now_ts OPERATOR(pg_catalog.+) ttl;
	WITH ins AS (
		INSERT INTO claimq.key_claim AS k (scope, key, token, expires_at)
		SELECT DISTINCT key_scope, u.key, call_token, expiry
		  FROM pg_catalog.unnest(key_list) AS u(key)
		 ORDER BY 2
		ON CONFLICT ON CONSTRAINT key_claim_pkey DO NOTHING
		RETURNING k.key)
	SELECT pg_catalog.array_agg(i.key), pg_catalog.count(*) INTO won, nwon
	  FROM ins i;

	IF nwon OPERATOR(pg_catalog.=) pg_catalog.cardinality(key_list) THEN
		/* Every key won, none repeated: the caller's order as it is. */
		RETURN QUERY
		SELECT u.key, call_token FROM pg_catalog.unnest(key_list) AS u(key);
		RETURN;
	END IF;

	/*
	 * Some keys were held, perhaps only by claims that have expired: take
	 * those over, re-checking the expiry under the row lock.
	 */
	WITH upd AS (
		UPDATE claimq.key_claim k SET token = call_token, expires_at = expiry
		 WHERE k.scope OPERATOR(pg_catalog.=) key_scope
		   AND k.key OPERATOR(pg_catalog.=) ANY (key_list)
		   AND k.expires_at OPERATOR(pg_catalog.<) now_ts
		RETURNING k.key)
	SELECT pg_catalog.array_agg(u.key) INTO taken FROM upd u;
	won := won OPERATOR(pg_catalog.||) taken;
	IF won IS NULL THEN
		RETURN;
	END IF;

	/* The keys won, in the order the caller first named them. */
	RETURN QUERY
	SELECT f.key, call_token
	  FROM (SELECT u.key, pg_catalog.min(u.n) AS n
			  FROM pg_catalog.unnest(key_list) WITH ORDINALITY AS u(key, n)
			 GROUP BY u.key) f
	  JOIN pg_catalog.unnest(won) AS w(key) ON w.key OPERATOR(pg_catalog.=) f.key
	 ORDER BY f.n;
END
$$;

COMMENT ON FUNCTION claimq.claim_keys_won(text,text[],bigint,interval) IS
'private (portable edition): claim_keys'' statements: the keys won, each held with call_token for ttl, in the order first named';

/*
 * release_keys' work (src/keys.c), its arguments checked (key_list and
 * token_list as long, not empty): delete only the rows held with the
 * given tokens, never a key someone else won; one outcome per pair, in
 * input order.
 */
CREATE FUNCTION claimq.release_keys_held(key_scope text, key_list text[],
										 token_list bigint[])
RETURNS TABLE(key text, outcome text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
	gone_keys text[];
	gone_tokens bigint[];
BEGIN
	/* Only rows held with the given token: never a key someone else won. */
	WITH gone AS (
		DELETE FROM claimq.key_claim k
		 USING ROWS FROM (pg_catalog.unnest(key_list), pg_catalog.unnest(token_list))
			   AS i(key, token)
		 WHERE k.scope OPERATOR(pg_catalog.=) key_scope
		   AND k.key OPERATOR(pg_catalog.=) i.key
		   AND k.token OPERATOR(pg_catalog.=) i.token
		RETURNING k.key, k.token)
	SELECT pg_catalog.array_agg(g.key), pg_catalog.array_agg(g.token)
	  INTO gone_keys, gone_tokens
	  FROM gone g;

	IF pg_catalog.cardinality(gone_keys) OPERATOR(pg_catalog.=) pg_catalog.cardinality(key_list) THEN
		/* As many keys released as pairs given: every pair's is. */
		RETURN QUERY
		SELECT i.key, 'ok'::text FROM pg_catalog.unnest(key_list) AS i(key);
		RETURN;
	END IF;

	/*
	 * One outcome per pair, in input order: ok (released, here or by an
	 * earlier pair of this call), else stale if the key is held now (a
	 * new snapshot, after the delete), else missing.
	 */
	RETURN QUERY
	SELECT i.key,
		   CASE WHEN r.key IS NOT NULL THEN 'ok'
				WHEN EXISTS (SELECT 1 FROM claimq.key_claim k
							  WHERE k.scope OPERATOR(pg_catalog.=) key_scope
								AND k.key OPERATOR(pg_catalog.=) i.key) THEN 'stale'
				ELSE 'missing' END
	  FROM ROWS FROM (pg_catalog.unnest(key_list), pg_catalog.unnest(token_list))
		   WITH ORDINALITY AS i(key, token, n)
	  LEFT JOIN ROWS FROM (pg_catalog.unnest(gone_keys), pg_catalog.unnest(gone_tokens))
		   AS r(key, token)
		ON r.key OPERATOR(pg_catalog.=) i.key AND r.token OPERATOR(pg_catalog.=) i.token
	 ORDER BY i.n;
END
$$;

COMMENT ON FUNCTION claimq.release_keys_held(text,text[],bigint[]) IS
'private (portable edition): release_keys'' statements: delete the keys held with the given tokens; ok, stale or missing per pair, in input order';
