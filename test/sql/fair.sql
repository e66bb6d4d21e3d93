-- Fairness between a queue's tenants (contract 0.5): fair on create_queue
-- and alter_queue, set_group_weight, group_stats.weight; the share bound
-- with weights 1, 3 and 0.5 over every span of a run of claims; a lone
-- tenant gets everything; an idle tenant is not repaid; priority stays
-- strict; what group limits, scheduled and waiting jobs do to it; the
-- rows of tenants that are gone.
\pset format unaligned
\pset tuples_only on
\pset footer off
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS claimq;
SELECT plan(47);

-- n jobs of tenant t (NULL: no group key) at priority p.
CREATE FUNCTION pg_temp.fill(q text, t text, n integer, p integer DEFAULT 0)
RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FROM claimq.enqueue_many(q, array_fill('{}'::jsonb, ARRAY[n]),
		priority => p, group_keys => CASE WHEN t IS NOT NULL THEN array_fill(t, ARRAY[n]) END)
$$;

-- A log of what each claim handed out, by tenant ('-': no group key).
CREATE TABLE pg_temp.handed (claim integer, tenant text, priority integer);
CREATE FUNCTION pg_temp.take(q text, k integer, n integer)
RETURNS bigint LANGUAGE sql AS $$
	WITH c AS (
		INSERT INTO pg_temp.handed
		SELECT k, COALESCE(j.group_key, '-'), c.priority
		  FROM claimq.claim(q, n) c JOIN claimq.job j USING (job_id)
		RETURNING 1)
	SELECT count(*) FROM c
$$;

-- The largest gap between two tenants' handed / weight at the end of any
-- claim so far, over the tenants and weights given, as a multiple of the
-- contract's bound (M x C + 1) x max(1 / w(A), 1 / w(B)) with C = 1.
CREATE FUNCTION pg_temp.worst(tenants text[], weights float8[], m integer)
RETURNS float8 LANGUAGE sql AS $$
	WITH w AS (SELECT * FROM unnest(tenants, weights) w(t, w)),
	k AS (SELECT DISTINCT claim FROM pg_temp.handed),
	s AS (SELECT k.claim, w.t, w.w,
				 (SELECT count(*) FROM pg_temp.handed h
				   WHERE h.claim <= k.claim AND h.tenant = w.t) / w.w AS nv
			FROM k CROSS JOIN w)
	SELECT max(abs(a.nv - b.nv) / ((m + 1) * greatest(1 / a.w, 1 / b.w)))
	  FROM s a JOIN s b ON a.claim = b.claim AND a.t < b.t
$$;

--
-- The settings.
--
SELECT claimq.create_queue('fq') \gset
SELECT is((SELECT fair FROM claimq.queue WHERE name = 'fq'), false,
	'a queue is not fair unless created so');
SELECT throws_ok($$SELECT claimq.create_queue('fq_null', fair => NULL)$$, '22004', NULL,
	'create_queue with fair NULL: 22004');
SELECT claimq.alter_queue('fq', fair => true) \gset
SELECT is((SELECT fair FROM claimq.queue WHERE name = 'fq'), true,
	'alter_queue makes a queue fair');
SELECT claimq.alter_queue('fq', max_attempts => 3) \gset
SELECT is((SELECT fair FROM claimq.queue WHERE name = 'fq'), true,
	'and a NULL fair leaves it as it is');
SELECT throws_ok($$SELECT claimq.set_group_weight('fq', 'a', 0)$$, '22023', NULL,
	'a weight of 0: 22023');
SELECT throws_ok($$SELECT claimq.set_group_weight('fq', 'a', 10001)$$, '22023', NULL,
	'a weight above 10,000: 22023');
SELECT throws_ok($$SELECT claimq.set_group_weight('fq', 'a', 0.001)$$, '22023', NULL,
	'a weight below 0.01: 22023');
SELECT throws_ok($$SELECT claimq.set_group_weight('no_such_queue', 'a', 2)$$, '42704', NULL,
	'the weight of a queue that does not exist: 42704');
SELECT throws_ok($$SELECT claimq.set_group_weight('bad name', 'a', 2)$$, '22023', NULL,
	'the weight of an invalid queue name: 22023');
SELECT lives_ok($$SELECT claimq.set_group_weight('fq', 'a', 0.01)$$,
	'a weight of 0.01, the least, is taken');
SELECT lives_ok($$SELECT claimq.set_group_weight('fq', 'a', 10000)$$,
	'a weight of 10,000, the most, is taken');
SELECT claimq.set_group_weight('fq', 'a', 2.5) \gset
SELECT pg_temp.fill('fq', 'a', 2) \gset
SELECT is((SELECT weight FROM claimq.group_stats WHERE queue = 'fq' AND group_key = 'a'),
	2.5::real, 'group_stats shows a weight set');
SELECT claimq.set_group_weight('fq', 'a', NULL) \gset
SELECT is((SELECT weight FROM claimq.group_stats WHERE queue = 'fq' AND group_key = 'a'),
	1::real, 'and 1 again once reset with NULL');
SELECT claimq.set_group_weight('fq', NULL, 4) \gset
SELECT is((SELECT weight FROM claimq.group_weight w JOIN claimq.queue q USING (queue_id)
			WHERE q.name = 'fq' AND w.group_key IS NULL), 4::real,
	'a NULL group_key names the tenant of jobs without one');

--
-- The share: three backlogged tenants with weights 1, 3 and 0.5, claims
-- of 2 to 10 jobs.
--
SELECT claimq.create_queue('fw', fair => true) \gset
SELECT claimq.set_group_weight('fw', 'b', 3) \gset
SELECT claimq.set_group_weight('fw', NULL, 0.5) \gset
SELECT pg_temp.fill('fw', 'a', 1500) + pg_temp.fill('fw', 'b', 1500)
	+ pg_temp.fill('fw', NULL, 1500) AS filled \gset
SELECT sum(pg_temp.take('fw', k, 2 + (k * 7) % 9)) AS taken
  FROM generate_series(1, 200) k \gset
SELECT is(:taken::bigint, (SELECT sum(2 + (k * 7) % 9) FROM generate_series(1, 200) k)::bigint,
	'every claim of a fair queue with backlogged tenants returns as many jobs as asked');
SELECT cmp_ok(pg_temp.worst('{a,b,-}', '{1,3,0.5}', 10), '<=', 1::float8,
	'after every claim, each pair of tenants is within the bound (weights 1, 3, 0.5)');

-- A lone tenant gets everything.
TRUNCATE pg_temp.handed;
SELECT claimq.create_queue('fl', fair => true) \gset
SELECT pg_temp.fill('fl', 'solo', 30) \gset
SELECT is(pg_temp.take('fl', 1, 10) + pg_temp.take('fl', 2, 10), 20::bigint,
	'a lone tenant gets every job it asks for');

-- A tenant that had nothing ready earns no credit: after a runs alone for
-- 40 jobs, b arrives and the two share from then on.
TRUNCATE pg_temp.handed;
SELECT claimq.create_queue('fi', fair => true) \gset
SELECT pg_temp.fill('fi', 'a', 200) \gset
SELECT sum(pg_temp.take('fi', k, 4)) FROM generate_series(1, 10) k \gset
TRUNCATE pg_temp.handed;
SELECT pg_temp.fill('fi', 'b', 200) \gset
SELECT sum(pg_temp.take('fi', k, 4)) FROM generate_series(1, 10) k \gset
SELECT cmp_ok((SELECT count(*) FILTER (WHERE tenant = 'b') - count(*) FILTER (WHERE tenant = 'a')
				FROM pg_temp.handed), '<=', 1::bigint,
	'a tenant that was idle is not repaid: from its return it gets at most one job more than the other');
SELECT cmp_ok(pg_temp.worst('{a,b}', '{1,1}', 4), '<=', 1::float8,
	'and every claim since is within the bound');

-- Priority stays strict: the higher priority's jobs go first, whoever
-- was served more.
TRUNCATE pg_temp.handed;
SELECT pg_temp.fill('fi', 'a', 3, 5) \gset
SELECT pg_temp.take('fi', 1, 4) \gset
SELECT results_eq($$SELECT tenant, priority FROM pg_temp.handed WHERE priority = 5$$,
	$$VALUES ('a', 5), ('a', 5), ('a', 5)$$,
	'priority stays strict: the higher priority''s jobs go first, to a tenant served more');
SELECT is((SELECT count(*) FROM pg_temp.handed WHERE priority = 0), 1::bigint,
	'and the claim takes the rest from the next priority');

-- Scheduled jobs are not ready, and a tenant with none ready is not
-- backlogged.
TRUNCATE pg_temp.handed;
SELECT claimq.create_queue('fs', fair => true) \gset
SELECT count(*) FROM claimq.enqueue_many('fs', array_fill('{}'::jsonb, ARRAY[5]),
	run_at => now() + interval '1 hour', group_keys => array_fill('later'::text, ARRAY[5])) \gset
SELECT pg_temp.fill('fs', 'now', 5) \gset
SELECT pg_temp.take('fs', 1, 10) AS took \gset
SELECT results_eq($$SELECT tenant, count(*) FROM pg_temp.handed GROUP BY 1$$,
	$$VALUES ('now'::text, 5::bigint)$$,
	'a tenant whose jobs are scheduled later gets none; the others get theirs');

-- A group limit caps a tenant: it is not backlogged past its cap, and
-- the others fill the claim.
TRUNCATE pg_temp.handed;
SELECT claimq.create_queue('fg', fair => true, group_limit => 1) \gset
SELECT pg_temp.fill('fg', 'a', 10) + pg_temp.fill('fg', 'b', 10) AS filled \gset
SELECT pg_temp.fill('fg', NULL, 10) \gset
SELECT is(pg_temp.take('fg', 1, 10), 10::bigint,
	'a fair queue with group_limit 1 fills a claim of 10');
SELECT results_eq($$SELECT tenant, count(*) FROM pg_temp.handed GROUP BY 1 ORDER BY 1$$,
	$$VALUES ('-', 8::bigint), ('a', 1::bigint), ('b', 1::bigint)$$,
	'a capped tenant gets its cap; the jobs without a group key the rest');

-- Three tenants alike, claims of 4 one after another: a tenant that got
-- no job in a claim holds the priority's time back (the others do not
-- run away from it).
TRUNCATE pg_temp.handed;
SELECT claimq.create_queue('f3', fair => true) \gset
SELECT pg_temp.fill('f3', 'a', 200) + pg_temp.fill('f3', 'b', 200)
	+ pg_temp.fill('f3', 'c', 200) AS filled \gset
SELECT sum(pg_temp.take('f3', k, 4)) FROM generate_series(1, 60) k \gset
SELECT cmp_ok(pg_temp.worst('{a,b,c}', '{1,1,1}', 4), '<=', 1::float8,
	'three tenants alike, claims of 4: every claim within the bound');

-- A deep tenant whose jobs are oldest, and 150 tenants of one job each:
-- a claim of 100 goes on picking tenants while they have jobs, and gives
-- the deep one a run of 25, not what an early end would leave in the
-- queue's order.  (Runs are the C edition's with the preload: elsewhere
-- the deep tenant gets one job, as each of the others.)
TRUNCATE pg_temp.handed;
SELECT claimq.create_queue('fo', fair => true) \gset
SELECT pg_temp.fill('fo', 'deep', 500) \gset
SELECT count(*) FROM generate_series(1, 150) g, pg_temp.fill('fo', 'o' || g, 1) \gset
SELECT is(pg_temp.take('fo', 1, 100), 100::bigint, 'a claim of 100 gets 100');
SELECT cmp_ok((SELECT count(*) FROM pg_temp.handed WHERE tenant = 'deep'), '<=', 25::bigint,
	'and the deep tenant at most a run of a quarter of it, the others one job each');

-- A tenant with nothing ready (its one job claimed) does not hold the
-- priority's time back either: when its jobs come, it shares from then
-- on, not repaid for the claims that served a and b meanwhile.
TRUNCATE pg_temp.handed;
SELECT claimq.create_queue('fz', fair => true) \gset
SELECT pg_temp.fill('fz', 'idle', 1) \gset
SELECT pg_temp.take('fz', 0, 1) \gset
SELECT pg_temp.fill('fz', 'a', 50) + pg_temp.fill('fz', 'b', 50) AS filled \gset
SELECT sum(pg_temp.take('fz', k, 1)) FROM generate_series(1, 40) k \gset
TRUNCATE pg_temp.handed;
SELECT pg_temp.fill('fz', 'idle', 20) \gset
SELECT sum(pg_temp.take('fz', k, 1)) FROM generate_series(1, 12) k \gset
SELECT cmp_ok((SELECT count(*) FROM pg_temp.handed WHERE tenant = 'idle'), '<=', 5::bigint,
	'a tenant back from having nothing ready gets its share of the next 12 claims of 1 (at most 5), not all');

-- A schedule's jobs in a fair queue have their tenant (jobs without a
-- group key).
SELECT claimq.create_queue('fc', fair => true) \gset
SELECT claimq.create_schedule('fc_every', 'fc', '* * * * *') \gset
UPDATE claimq.schedule SET next_run_at = now() - interval '1 minute' WHERE name = 'fc_every';
SELECT claimq.fire_schedules(10) >= 1 AS fired \gset
SELECT is((SELECT count(*) FROM claimq.fair_share s JOIN claimq.queue q USING (queue_id)
			WHERE q.name = 'fc' AND s.group_key IS NULL), 1::bigint,
	'a fired schedule''s job has its tenant''s share');

-- A claim rolled back (here to a savepoint) charges its tenants nothing:
-- the next claim serves the same tenant.
TRUNCATE pg_temp.handed;
SELECT claimq.create_queue('fb', fair => true) \gset
SELECT pg_temp.fill('fb', 'a', 5) + pg_temp.fill('fb', 'b', 5) AS filled \gset
SAVEPOINT before_claim;
SELECT pg_temp.take('fb', 1, 1) \gset
ROLLBACK TO SAVEPOINT before_claim;
SELECT pg_temp.take('fb', 2, 1) + pg_temp.take('fb', 3, 1) AS took \gset
SELECT results_eq($$SELECT tenant FROM pg_temp.handed ORDER BY claim$$,
	$$VALUES ('a'), ('b')$$,
	'a claim rolled back charges its tenant nothing: the next claims serve a, then b');
-- With the preload, the C edition keeps the shares in shared memory.
SELECT CASE WHEN claimq.edition() = 'c' THEN is(
	(SELECT count(*) FROM claimq.fair_share s JOIN claimq.queue q USING (queue_id)
	  WHERE q.name = 'fb' AND s.vt IS NOT NULL), 0::bigint,
	'the claims of a fair queue write no share''s row (shared memory keeps them)')
	ELSE skip('C edition only: shares in shared memory') END;
SELECT CASE WHEN claimq.edition() = 'c' THEN results_eq(
	$$SELECT h.group_key, h.handed FROM claimq.fair_handed() h
		JOIN claimq.queue q USING (queue_id) WHERE q.name = 'fb' ORDER BY 1$$,
	$$VALUES ('a'::text, 1::bigint), ('b', 1)$$,
	'and shared memory holds what each tenant was handed, the rolled back claim not counted')
	ELSE skip('C edition only: shares in shared memory') END;

-- Waiting jobs (after) are not ready, but their tenant is kept.
SELECT claimq.create_queue('fa', fair => true) \gset
SELECT claimq.enqueue('fa', '{}', group_key => 'first') AS first_id \gset
SELECT claimq.enqueue('fa', '{}', group_key => 'then', after => ARRAY[:first_id]::bigint[]) AS then_id \gset
SELECT is((SELECT array_agg(job_id) FROM claimq.claim('fa', 10)), ARRAY[:first_id]::bigint[],
	'a waiting job is not claimed');
SELECT is((SELECT count(*) FROM claimq.fair_share s JOIN claimq.queue q USING (queue_id)
			WHERE q.name = 'fa' AND s.group_key = 'then'), 1::bigint,
	'and its tenant has its share kept for when it is ready');

-- Retried jobs come back with a later run_at; dead ones with retry_dead.
SELECT claimq.create_queue('fd', fair => true, max_attempts => 1) \gset
SELECT claimq.enqueue('fd', '{}', group_key => 'd') AS dead_id \gset
SELECT job_id AS dj, token AS dt FROM claimq.claim('fd', 1) \gset
SELECT claimq.fail(:dj::bigint, :dt::bigint, 'no') \gset
SELECT is(claimq.prune(100) >= 0, true, 'prune runs over a fair queue');
SELECT is((SELECT count(*) FROM claimq.fair_share s JOIN claimq.queue q USING (queue_id)
			WHERE q.name = 'fd'), 0::bigint,
	'a tenant with no live job left is forgotten');
SELECT is(claimq.retry_dead('fd'), 1::bigint, 'retry_dead redrives the dead job');
SELECT is((SELECT job_id FROM claimq.claim('fd', 1)), :dead_id::bigint,
	'and its tenant, back, is served');

-- A tenant's virtual time far ahead of its priority's (as while a claim
-- held open keeps the priority's row): a claim still shares.
SELECT claimq.create_queue('fv', fair => true) \gset
SELECT pg_temp.fill('fv', 'far', 5) \gset
UPDATE claimq.fair_share s SET vt = 1e12 FROM claimq.queue q
 WHERE q.queue_id = s.queue_id AND q.name = 'fv' AND s.group_key = 'far';
SELECT pg_temp.fill('fv', 'new', 5) \gset
SELECT is((SELECT count(*) FROM claimq.claim('fv', 4)), 4::bigint,
	'a tenant far ahead in virtual time does not stop the claim (no overflow)');

-- A replaced job keeps its own tenant, at the priority it takes.
SELECT claimq.create_queue('fr', fair => true) \gset
SELECT claimq.enqueue('fr', '{}', dedup_key => 'd1', group_key => 'x') AS rx \gset
SELECT is(claimq.enqueue('fr', '{}', priority => 5, dedup_key => 'd1', group_key => 'y',
						 on_duplicate => 'replace'), :rx::bigint,
	'on_duplicate => replace updates the pending job of the key');
SELECT is(claimq.prune(100) >= 0, true, 'prune forgets what it may');
SELECT is((SELECT array_agg(s.group_key || ':' || s.priority ORDER BY s.priority)
			 FROM claimq.fair_share s JOIN claimq.queue q USING (queue_id)
			WHERE q.name = 'fr'), ARRAY['x:5'],
	'the replaced job''s tenant has its share at the priority it took');

-- Made unfair: the shares go, and claims take the queue's usual order.
SELECT claimq.alter_queue('fw', fair => false) \gset
SELECT is((SELECT count(*) FROM claimq.fair_share s JOIN claimq.queue q USING (queue_id)
			WHERE q.name = 'fw'), 0::bigint,
	'a queue made unfair forgets its shares');
SELECT (array_agg(j.job_id ORDER BY j.job_id))[1:3] AS oldest FROM claimq.job j
  JOIN claimq.queue q USING (queue_id) WHERE q.name = 'fw' AND j.state = 'pending' \gset
SELECT is((SELECT array_agg(c.job_id ORDER BY c.job_id) FROM claimq.claim('fw', 3) c),
		  :'oldest'::bigint[], 'and its claims take the oldest jobs, as on any queue');
-- metrics(): what each tenant was handed, and its weight, one line each.
SELECT claimq.create_queue('fm', fair => true) \gset
SELECT claimq.set_group_weight('fm', E'odd"key\\', 2) \gset
SELECT pg_temp.fill('fm', E'odd"key\\', 10) + pg_temp.fill('fm', NULL, 10) AS filled \gset
SELECT count(*) FROM claimq.claim('fm', 6) \gset
SELECT count(claimq.complete(c.job_id, c.token)) FROM claimq.claim('fm', 3) c \gset
SELECT is((SELECT string_agg(l, E'\n' ORDER BY l)
			 FROM regexp_split_to_table(claimq.metrics(), E'\n') l
			WHERE l LIKE 'claimq\_fair%queue="fm"%'),
		  E'claimq_fair_handed_total{queue="fm",group_key="odd\\"key\\\\"} 6\n'
		  || E'claimq_fair_handed_total{queue="fm",keyless="1"} 3\n'
		  || E'claimq_fair_weight{queue="fm",group_key="odd\\"key\\\\"} 2\n'
		  || E'claimq_fair_weight{queue="fm",keyless="1"} 1',
	'metrics() counts the jobs handed to each tenant of a fair queue (weights 2 and 1: 6 and 3 of 9), with its weight');
SELECT claimq.drop_queue('fi', force => true) \gset
SELECT is((SELECT count(*) FROM claimq.fair_share s WHERE NOT EXISTS (
			SELECT FROM claimq.queue q WHERE q.queue_id = s.queue_id)), 0::bigint,
	'a dropped queue leaves no shares');
SELECT claimq.fair_forget(1000) \gset
SELECT is((SELECT count(*) FROM claimq.fair_level l WHERE NOT EXISTS (
			SELECT FROM claimq.queue q WHERE q.queue_id = l.queue_id)), 0::bigint,
	'and once forgotten, no virtual time of its priorities');

SELECT * FROM finish();
ROLLBACK;
