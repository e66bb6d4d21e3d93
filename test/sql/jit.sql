-- claimq's own statements are planned once, generically, and never
-- JIT-compiled, whatever the caller's jit, jit_*_cost and plan_cache_mode
-- say: their kept plans must stay cheap on a server left at its defaults.
-- pg_stat_statements (preloaded for the tests) sees every nested statement.
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on
\pset pager off
SET client_min_messages = warning;
-- The settings come first: a plan kept by this session is made with them.
SET jit = on;
SET jit_above_cost = 0;
SET jit_inline_above_cost = 0;
SET jit_optimize_above_cost = 0;
SET plan_cache_mode = force_custom_plan;
SET pg_stat_statements.track = 'all';
SET pg_stat_statements.track_planning = on;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
CREATE EXTENSION IF NOT EXISTS claimq;
BEGIN;
SELECT plan(5);
SELECT pg_stat_statements_reset() IS NOT NULL;

SELECT claimq.create_queue('jq', lease => '1 millisecond', run_lease => '1 millisecond');
SELECT count(*) FROM claimq.enqueue_many('jq', array_fill('{}'::jsonb, ARRAY[20]));
SELECT claimq.enqueue('jq', '{}', dedup_key => 'k') > 0;
SELECT claimq.enqueue('jq', '{}', dedup_key => 'k') > 0;
CREATE TEMP TABLE c AS
	SELECT job_id, token, row_number() OVER (ORDER BY job_id) AS n
	  FROM claimq.claim('jq', 6);
SELECT count(*) FROM claimq.claim('jq', 2, start => true);
SELECT count(*) FROM claimq.start(ARRAY(SELECT job_id FROM c WHERE n <= 4),
								  ARRAY(SELECT token FROM c WHERE n <= 4));
SELECT count(*) FROM claimq.extend(ARRAY(SELECT job_id FROM c WHERE n <= 4),
								   ARRAY(SELECT token FROM c WHERE n <= 4));
SELECT count(*) FROM claimq.complete(ARRAY(SELECT job_id FROM c WHERE n = 1),
									 ARRAY(SELECT token FROM c WHERE n = 1));
SELECT count(*) FROM claimq.fail(ARRAY(SELECT job_id FROM c WHERE n = 2),
								 ARRAY(SELECT token FROM c WHERE n = 2), 'no');
SELECT count(*) FROM claimq.release(ARRAY(SELECT job_id FROM c WHERE n = 5),
									ARRAY(SELECT token FROM c WHERE n = 5));
SELECT pg_sleep(0.01);
SELECT count(*) FROM claimq.reclaim('jq');
SELECT count(*) FROM claimq.claim_keys('js', ARRAY['a', 'b'], '1 hour');
SELECT claimq.prune() >= 0;
-- The same settings do compile an ordinary query of the same table.
SELECT count(*) >= 0 FROM claimq.job WHERE job_id > 0;

SELECT cmp_ok((SELECT count(*) FROM pg_stat_statements
				WHERE NOT toplevel AND query ~ 'claimq\.(job|key_claim)'), '>=', 10::bigint,
	'claimq''s nested statements were seen');
-- A server built without LLVM compiles nothing (expected/jit_1.out).
SELECT CASE WHEN pg_jit_available() THEN
	cmp_ok((SELECT sum(jit_functions)::bigint FROM pg_stat_statements
			 WHERE toplevel AND query ~ 'FROM claimq\.job WHERE job_id >'), '>', 0::bigint,
		'with these settings an ordinary query is JIT-compiled')
	ELSE skip('this server was built without LLVM: it JIT-compiles nothing', 1) END;
SELECT is((SELECT sum(jit_functions)::bigint FROM pg_stat_statements
			WHERE NOT toplevel AND query ~ 'claimq\.(job|key_claim)'), 0::bigint,
	'no statement of claimq''s is JIT-compiled');
SELECT is((SELECT string_agg(query, E'\n') FROM pg_stat_statements
			WHERE NOT toplevel AND query ~ 'claimq\.(job|key_claim)' AND plans > 1), NULL,
	'no statement of claimq''s is planned more than once');
SELECT cmp_ok((SELECT max(calls) FROM pg_stat_statements
				WHERE NOT toplevel AND query ~ 'claimq\.(job|key_claim)'), '>', 1::bigint,
	'though some ran more than once');

SELECT * FROM finish();
ROLLBACK;
