-- Dedup key claims: claim_keys and release_keys.  Only the keys a call won
-- come back (duplicates once, in the order first asked for, one fresh
-- token per call); a key is held until its ttl passes or its winner
-- releases it; an expired key is won again before any sweep; release outcomes ok, stale and missing
-- in input order; scopes; 10,000 keys in one call; argument errors;
-- privileges.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(89);

-- The rows each claim_keys call returned, by label, in the order returned.
CREATE TEMP TABLE won(label text, ord bigint, key text, token bigint);
CREATE INDEX ON won (label);
-- Claim keys k of scope s and remember what the call won as label l;
-- returns how many rows the call returned.
CREATE FUNCTION pg_temp.claim(l text, s text, k text[], ttl interval DEFAULT '1 hour')
RETURNS bigint LANGUAGE sql AS $$
	WITH w AS (
		INSERT INTO pg_temp.won
		SELECT l, r.ord, r.key, r.token
		  FROM claimq.claim_keys(s, k, ttl) WITH ORDINALITY AS r(key, token, ord)
		RETURNING 1)
	SELECT count(*) FROM w
$$;
-- The keys call l won, in the order they were returned.
CREATE FUNCTION pg_temp.keys(l text) RETURNS text[] LANGUAGE sql STABLE AS $$
	SELECT COALESCE(array_agg(key ORDER BY ord), '{}') FROM pg_temp.won WHERE label = l
$$;
-- The token of call l; NULL unless every row of the call has the same one.
CREATE FUNCTION pg_temp.tok(l text) RETURNS bigint LANGUAGE sql STABLE AS $$
	SELECT CASE WHEN count(DISTINCT token) = 1 AND count(token) = count(*)
				THEN min(token) END
	  FROM pg_temp.won WHERE label = l
$$;
-- The token stored for key k of scope s; NULL when there is no row.
CREATE FUNCTION pg_temp.holder(s text, k text) RETURNS bigint LANGUAGE sql STABLE AS $$
	SELECT token FROM claimq.key_claim WHERE scope = s AND key = k
$$;
-- The rows release_keys returned, as 'key:outcome', in the order returned.
CREATE FUNCTION pg_temp.rel(s text, k text[], t bigint[]) RETURNS text[] LANGUAGE sql AS $$
	SELECT COALESCE(array_agg(r.key || ':' || r.outcome ORDER BY r.ord), '{}')
	  FROM claimq.release_keys(s, k, t) WITH ORDINALITY AS r(key, outcome, ord)
$$;

--
-- The functions and who may call them
--
SELECT has_function('claimq', 'claim_keys', ARRAY['text', 'text[]', 'interval'],
	'claim_keys(text, text[], interval) exists');
SELECT has_function('claimq', 'release_keys', ARRAY['text', 'text[]', 'bigint[]'],
	'release_keys(text, text[], bigint[]) exists');
SELECT ok(NOT has_function_privilege('public',
	'claimq.claim_keys(text, text[], interval)', 'EXECUTE'),
	'PUBLIC cannot execute claim_keys');
SELECT ok(NOT has_function_privilege('public',
	'claimq.release_keys(text, text[], bigint[])', 'EXECUTE'),
	'PUBLIC cannot execute release_keys');
-- A role with nothing but usage on the schema gets 42501 from both.
CREATE ROLE regress_keys_nobody;
GRANT USAGE ON SCHEMA claimq TO regress_keys_nobody;
SET ROLE regress_keys_nobody;
DO $$
BEGIN
	BEGIN
		PERFORM claimq.claim_keys('kpriv', '{a}', '1 hour');
		PERFORM set_config('keys_test.claim', 'allowed', true);
	EXCEPTION WHEN OTHERS THEN
		PERFORM set_config('keys_test.claim', SQLSTATE, true);
	END;
	BEGIN
		PERFORM claimq.release_keys('kpriv', '{a}', '{1}');
		PERFORM set_config('keys_test.release', 'allowed', true);
	EXCEPTION WHEN OTHERS THEN
		PERFORM set_config('keys_test.release', SQLSTATE, true);
	END;
END
$$;
RESET ROLE;
SELECT is(current_setting('keys_test.claim'), '42501',
	'a role without a grant calling claim_keys gets 42501');
SELECT is(current_setting('keys_test.release'), '42501',
	'a role without a grant calling release_keys gets 42501');

--
-- Winning keys
--
SELECT clock_timestamp() AS t0 \gset
SELECT is(pg_temp.claim('A', 'k1', '{a,b}'), 2::bigint, 'free keys: the call wins both');
SELECT clock_timestamp() AS t1 \gset
SELECT is(pg_temp.keys('A'), '{a,b}', 'and returns them');
SELECT ok(pg_temp.tok('A') IS NOT NULL, 'both with one token');
SELECT results_eq($$SELECT key, token FROM claimq.key_claim WHERE scope = 'k1' ORDER BY key$$,
	$$SELECT key, token FROM pg_temp.won WHERE label = 'A' ORDER BY key$$,
	'the keys are held with the returned token');
SELECT ok(bool_and(expires_at BETWEEN :'t0'::timestamptz + '1 hour'
								  AND :'t1'::timestamptz + '1 hour'),
	'and expire ttl after the call')
  FROM claimq.key_claim WHERE scope = 'k1';

SELECT is(pg_temp.claim('B', 'k1', '{e,b,a}'), 1::bigint,
	'held keys: a second call wins only the free one');
SELECT is(pg_temp.keys('B'), '{e}', 'and returns only that key');
SELECT ok(pg_temp.tok('B') IS NOT NULL AND pg_temp.tok('B') <> pg_temp.tok('A'),
	'with a fresh token');
SELECT is(ARRAY[pg_temp.holder('k1', 'a'), pg_temp.holder('k1', 'b')],
	ARRAY[pg_temp.tok('A'), pg_temp.tok('A')],
	'the keys it did not win are still held by the first call');
SELECT is(pg_temp.claim('A2', 'k1', '{a}'), 0::bigint,
	'a held key cannot be won again, not even from the session that holds it');

SELECT is(pg_temp.claim('C', 'k1', '{c,d,c,c,d}'), 2::bigint,
	'duplicate keys in one call count once');
SELECT is(pg_temp.keys('C'), '{c,d}', 'each returned once');
SELECT ok(pg_temp.tok('C') IS NOT NULL, 'with one token');

SELECT is(pg_temp.claim('D', 'k1', '{z3,z1,y,z2}'), 4::bigint, 'a call in no order');
SELECT is(pg_temp.keys('D'), '{z3,z1,y,z2}', 'returns its keys in the order asked for');
SELECT ok(pg_temp.tok('D') NOT IN (pg_temp.tok('A'), pg_temp.tok('B'), pg_temp.tok('C')),
	'every call that wins gets a fresh token');

SELECT is(pg_temp.claim('E', 'k1', '{}'), 0::bigint, 'an empty array returns no rows');
SELECT is_empty($$SELECT * FROM claimq.release_keys('k1', '{}', '{}')$$,
	'release_keys of empty arrays returns no rows');
SELECT is((SELECT count(*) FROM claimq.key_claim WHERE scope = 'k1'), 9::bigint,
	'and neither changed anything');

--
-- Scopes are independent namespaces
--
SELECT is(pg_temp.claim('S2', 'k2', '{a,b,q}'), 3::bigint,
	'keys held in one scope are free in another');
SELECT is(pg_temp.rel('k2', '{a,c}', ARRAY[pg_temp.tok('A'), pg_temp.tok('C')]),
	'{a:stale,c:missing}',
	'a token of one scope releases nothing in another');
SELECT is(ARRAY[pg_temp.holder('k1', 'a'), pg_temp.holder('k2', 'a')],
	ARRAY[pg_temp.tok('A'), pg_temp.tok('S2')],
	'each scope keeps its own holder');
SELECT is(pg_temp.rel('k2', '{a,b,q}', ARRAY[pg_temp.tok('S2'), pg_temp.tok('S2'), pg_temp.tok('S2')]),
	'{a:ok,b:ok,q:ok}', 'releasing in one scope');
SELECT is(ARRAY[pg_temp.holder('k1', 'a'), pg_temp.holder('k1', 'b')],
	ARRAY[pg_temp.tok('A'), pg_temp.tok('A')],
	'leaves the same keys of the other scope held');
SELECT is(pg_temp.claim('S3', 'K1', '{a}'), 1::bigint, 'scopes are case-sensitive');

--
-- Releasing
--
SELECT is(pg_temp.rel('k1', '{a,nope,b,e,a,c}',
		ARRAY[pg_temp.tok('A'), pg_temp.tok('A'), pg_temp.tok('B'), pg_temp.tok('B'),
			  pg_temp.tok('A'), pg_temp.tok('A')]),
	'{a:ok,nope:missing,b:stale,e:ok,a:ok,c:stale}',
	'one outcome per pair in input order: ok, missing, stale, and ok again for a repeated pair');
SELECT is(ARRAY[pg_temp.holder('k1', 'a'), pg_temp.holder('k1', 'e')], ARRAY[NULL, NULL]::bigint[],
	'the keys released with their tokens are free');
SELECT is(ARRAY[pg_temp.holder('k1', 'b'), pg_temp.holder('k1', 'c')],
	ARRAY[pg_temp.tok('A'), pg_temp.tok('C')],
	'a key released with another token is still held by its winner');
SELECT is(pg_temp.rel('k1', '{a,e}', ARRAY[pg_temp.tok('A'), pg_temp.tok('B')]),
	'{a:missing,e:missing}', 'a second release of the same keys gives missing');
SELECT is(pg_temp.claim('F', 'k1', '{e,a,b}'), 2::bigint, 'released keys can be won again at once');
SELECT is(pg_temp.keys('F'), '{e,a}', 'exactly the released ones');
SELECT is(pg_temp.rel('k1', '{a}', ARRAY[pg_temp.tok('A')]), '{a:stale}',
	'the first winner''s token no longer releases a key won again');
SELECT is(pg_temp.rel('k1', '{a}', ARRAY[pg_temp.tok('F')]), '{a:ok}',
	'the new winner''s token does');
SELECT is(pg_temp.rel('k1', '{b,d,c,z1,y,z2,z3}',
		ARRAY[pg_temp.tok('A'), pg_temp.tok('C'), pg_temp.tok('C'), pg_temp.tok('D'),
			  pg_temp.tok('D'), pg_temp.tok('D'), pg_temp.tok('D')]),
	'{b:ok,d:ok,c:ok,z1:ok,y:ok,z2:ok,z3:ok}',
	'one call releases keys of several winners, each with its own token');

--
-- The ttl: held until it passes, then won again at once, before any sweep
--
SELECT is(pg_temp.claim('T1', 'k3', '{t}', '1 millisecond'), 1::bigint,
	'claim a key for 1 millisecond');
SELECT pg_sleep(0.01);
SELECT is(pg_temp.holder('k3', 't'), pg_temp.tok('T1'),
	'after the ttl the expired claim is still in the table (nothing swept it)');
SELECT is(pg_temp.claim('T2', 'k3', '{t}'), 1::bigint, 'an expired key is won again at once');
SELECT is(pg_temp.keys('T2'), '{t}', 'and returned to its new winner');
SELECT ok(pg_temp.tok('T2') <> pg_temp.tok('T1'), 'with the new call''s token');
SELECT is(pg_temp.holder('k3', 't'), pg_temp.tok('T2'), 'which now holds it');
SELECT is(pg_temp.rel('k3', '{t}', ARRAY[pg_temp.tok('T1')]), '{t:stale}',
	'the old winner''s release is stale once someone else won the key');
SELECT is(pg_temp.holder('k3', 't'), pg_temp.tok('T2'), 'and the new winner keeps the key');
SELECT is(pg_temp.claim('T3', 'k3', '{t}', '1 millisecond'), 0::bigint,
	'the new winner''s key cannot be won while its ttl runs');
SELECT is(pg_temp.rel('k3', '{t}', ARRAY[pg_temp.tok('T2')]), '{t:ok}',
	'the new winner can release it');

-- One call with new keys, an expired key and a held key.
SELECT is(pg_temp.claim('M1', 'k4', '{m2}', '1 millisecond'), 1::bigint,
	'claim m2 for 1 millisecond');
SELECT is(pg_temp.claim('M2', 'k4', '{h}'), 1::bigint, 'claim h for an hour');
SELECT pg_sleep(0.01);
SELECT is(pg_temp.claim('M3', 'k4', '{m3,m2,h,m1,m2}'), 3::bigint,
	'a call wins free and expired keys but not held ones');
SELECT is(pg_temp.keys('M3'), '{m3,m2,m1}',
	'the keys it won come back in the order first asked for, the expired one among the new ones');
SELECT ok(pg_temp.tok('M3') IS NOT NULL AND pg_temp.tok('M3') <> pg_temp.tok('M1'),
	'all with the call''s one fresh token');
SELECT results_eq($$SELECT key, token FROM claimq.key_claim WHERE scope = 'k4' ORDER BY key$$,
	$$VALUES ('h', pg_temp.tok('M2')), ('m1', pg_temp.tok('M3')),
			 ('m2', pg_temp.tok('M3')), ('m3', pg_temp.tok('M3'))$$,
	'each key is held by its winner');

--
-- 10,000 keys in one call each
--
SELECT is(pg_temp.claim('BIG', 'kbig', ARRAY(SELECT 'key' || i FROM generate_series(1, 10000) i)),
	10000::bigint, 'one call wins 10,000 keys');
SELECT ok(pg_temp.tok('BIG') IS NOT NULL, 'all with one token');
SELECT is((SELECT count(*) FROM claimq.key_claim WHERE scope = 'kbig' AND token = (SELECT pg_temp.tok('BIG'))),
	10000::bigint, 'all 10,000 are held with it');
SELECT is(pg_temp.claim('BIG2', 'kbig', ARRAY(SELECT 'key' || i FROM generate_series(1, 10000) i)),
	0::bigint, 'a second call for the same 10,000 keys wins none');
SELECT results_eq($$SELECT outcome, count(*) FROM claimq.release_keys('kbig',
		ARRAY(SELECT 'key' || i FROM generate_series(1, 10000) i),
		array_fill(pg_temp.tok('BIG'), ARRAY[10000])) GROUP BY outcome$$,
	$$VALUES ('ok', 10000::bigint)$$, 'one call releases all 10,000');
SELECT is((SELECT count(*) FROM claimq.key_claim WHERE scope = 'kbig'), 0::bigint,
	'and none is held any more');

--
-- Argument errors: nothing changes
--
SELECT throws_ok(c, e, NULL, c || ' raises ' || e)
  FROM (VALUES
	($$SELECT * FROM claimq.claim_keys(NULL, '{x}', '1 hour')$$, '22004'),
	($$SELECT * FROM claimq.claim_keys('kerr', NULL, '1 hour')$$, '22004'),
	($$SELECT * FROM claimq.claim_keys('kerr', '{x}', NULL)$$, '22004'),
	($$SELECT * FROM claimq.claim_keys('kerr', '{}', NULL)$$, '22004'),
	($$SELECT * FROM claimq.claim_keys('kerr', '{x,NULL}', '1 hour')$$, '22004'),
	($$SELECT * FROM claimq.claim_keys('kerr', ARRAY[NULL]::text[], '1 hour')$$, '22004'),
	($$SELECT * FROM claimq.claim_keys('kerr', '{x}', '0')$$, '22023'),
	($$SELECT * FROM claimq.claim_keys('kerr', '{x}', '-1 second')$$, '22023'),
	($$SELECT * FROM claimq.claim_keys('kerr', '{x}', '-10 months 302 days')$$, '22023'),
	($$SELECT * FROM claimq.claim_keys('kerr', '{x}', '101 years')$$, '22023'),
	($$SELECT * FROM claimq.claim_keys('kerr', '{{x,y},{z,w}}', '1 hour')$$, '22023'),
	($$SELECT * FROM claimq.release_keys(NULL, '{x}', '{1}')$$, '22004'),
	($$SELECT * FROM claimq.release_keys('kerr', NULL, '{1}')$$, '22004'),
	($$SELECT * FROM claimq.release_keys('kerr', '{x}', NULL)$$, '22004'),
	($$SELECT * FROM claimq.release_keys('kerr', '{x,NULL}', '{1,2}')$$, '22004'),
	($$SELECT * FROM claimq.release_keys('kerr', '{x,y}', '{1,NULL}')$$, '22004'),
	($$SELECT * FROM claimq.release_keys('kerr', '{x,y}', '{1}')$$, '22023'),
	($$SELECT * FROM claimq.release_keys('kerr', '{x}', '{1,1}')$$, '22023'),
	($$SELECT * FROM claimq.release_keys('kerr', '{}', '{1}')$$, '22023'),
	($$SELECT * FROM claimq.release_keys('kerr', '{{x,y}}', '{1,1}')$$, '22023'),
	($$SELECT * FROM claimq.release_keys('kerr', '{x,y}', '{{1,1}}')$$, '22023')
  ) v(c, e);
SELECT is(pg_temp.claim('ERR', 'kerr', '{x,y}'), 2::bigint, 'claim x and y of scope kerr');
SELECT throws_ok(format('SELECT * FROM claimq.release_keys(%L, %L, %L)', 'kerr', '{x,y}',
	ARRAY[pg_temp.tok('ERR')]), '22023', NULL,
	'release_keys with one token too few raises 22023');
SELECT throws_ok(format('SELECT * FROM claimq.release_keys(%L, %L, %L)', 'kerr', '{x,NULL}',
	ARRAY[pg_temp.tok('ERR'), pg_temp.tok('ERR')]), '22004', NULL,
	'release_keys with a NULL key after a good pair raises 22004');
SELECT is(ARRAY[pg_temp.holder('kerr', 'x'), pg_temp.holder('kerr', 'y')],
	ARRAY[pg_temp.tok('ERR'), pg_temp.tok('ERR')],
	'a refused release_keys releases nothing');
SELECT throws_ok($$SELECT * FROM claimq.claim_keys('kerr', '{w,NULL}', '1 hour')$$, '22004', NULL,
	'claim_keys with a NULL key after a free one raises 22004');
SELECT is((SELECT array_agg(key ORDER BY key) FROM claimq.key_claim WHERE scope = 'kerr'),
	'{x,y}', 'a refused claim_keys claims nothing');

SELECT * FROM finish();
ROLLBACK;
