# Flow control on a live server: what the job table alone cannot show.
#
#  - A ledger written in the same transactions as the claims and completes
#    of a pgbench run with 8 clients: no group and no queue ever has more
#    jobs in flight than its limit, at any commit, and no job is lost.
#  - The rate limit's bucket in shared memory: full on its first use, empty
#    (not full) after a restart, full again after alter_queue changes the
#    rate.
#  - Slots reserved by a claim whose session dies come back with it; the
#    slots of a crashed worker's jobs come back when the reclaimer reclaims
#    them.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = claimq_node('flow', conf => "max_prepared_transactions = 2\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION claimq');

#
# The ledger.  Queue lq: group_limit 2 over 40 groups, max_in_flight 12.
# ledger_claim() claims up to 3 jobs and, in the same transaction, adds
# each to the ledger row of its group and to the queue's ('*'); each row is
# updated under its lock, so its count is exactly what the committed
# transactions have in flight, and every transaction checks it against the
# limit.  ledger_complete() completes one held job and takes it off.
#
$node->safe_psql(
	'postgres', q{
	SELECT claimq.create_queue('lq', group_limit => 2, max_in_flight => 8,
							   lease => '10 min', run_lease => '10 min');
	SELECT count(*) FROM claimq.enqueue_many('lq',
		ARRAY(SELECT jsonb_build_object('g', 'g' || (i % 6))
				FROM generate_series(1, 4000) i),
		group_keys => ARRAY(SELECT 'g' || (i % 6) FROM generate_series(1, 4000) i));
	CREATE TABLE ledger (key text PRIMARY KEY, n integer NOT NULL DEFAULT 0,
						 peak integer NOT NULL DEFAULT 0);
	INSERT INTO ledger (key) SELECT '*' UNION ALL SELECT 'g' || i FROM generate_series(0, 5) i;
	CREATE TABLE held (job_id bigint PRIMARY KEY, token bigint NOT NULL, g text NOT NULL);
	CREATE TABLE violation (key text, n integer, what text);
	CREATE TABLE done (job_id bigint PRIMARY KEY);

	CREATE FUNCTION ledger_move(g text, d integer) RETURNS void
	LANGUAGE plpgsql AS $$
	DECLARE
		n integer;
	BEGIN
		-- '*' first, then the group: one lock order for everyone.
		UPDATE ledger SET n = ledger.n + d, peak = greatest(peak, ledger.n + d)
		 WHERE key = '*' RETURNING ledger.n INTO n;
		IF n > 8 THEN
			INSERT INTO violation VALUES ('*', n, 'max_in_flight');
		END IF;
		UPDATE ledger SET n = ledger.n + d, peak = greatest(peak, ledger.n + d)
		 WHERE key = g RETURNING ledger.n INTO n;
		IF n > 2 THEN
			INSERT INTO violation VALUES (g, n, 'group_limit');
		END IF;
	END
	$$;

	CREATE FUNCTION ledger_claim() RETURNS integer
	LANGUAGE plpgsql AS $$
	DECLARE
		r record;
		k integer := 0;
	BEGIN
		FOR r IN SELECT c.job_id, c.token, c.payload->>'g' AS g
				   FROM claimq.claim('lq', 3, start => true) c LOOP
			PERFORM ledger_move(r.g, 1);
			INSERT INTO held VALUES (r.job_id, r.token, r.g);
			k := k + 1;
		END LOOP;
		RETURN k;
	END
	$$;

	CREATE FUNCTION ledger_complete() RETURNS integer
	LANGUAGE plpgsql AS $$
	DECLARE
		h record;
	BEGIN
		SELECT * INTO h FROM held ORDER BY job_id LIMIT 1 FOR UPDATE SKIP LOCKED;
		IF NOT FOUND THEN
			RETURN 0;
		END IF;
		IF NOT claimq.complete(h.job_id, h.token) THEN
			INSERT INTO violation VALUES (h.job_id::text, 0, 'complete refused');
		END IF;
		PERFORM ledger_move(h.g, -1);
		DELETE FROM held WHERE job_id = h.job_id;
		INSERT INTO done VALUES (h.job_id);
		RETURN 1;
	END
	$$;
});

$node->pgbench(
	'-n -c 8 -j 2 -T 15',
	0,
	[qr/processed: [1-9]/],
	[qr/^$/],
	'pgbench: 8 clients claim and complete for 15 s',
	{
		'flow_ledger' => q{
\set r random(1, 2)
SELECT CASE WHEN :r = 1 THEN ledger_claim() ELSE ledger_complete() END;
}
	});

# Drain what is left, one client, a transaction per call.
for my $round (1 .. 5000)
{
	my $claimed = $node->safe_psql('postgres', 'SELECT ledger_claim()');
	1 while $node->safe_psql('postgres', 'SELECT ledger_complete()') eq '1';
	last if $claimed eq '0';
}

is($node->safe_psql('postgres', 'SELECT count(*) FROM violation'),
	'0', 'the ledger saw no limit exceeded and no complete refused');
is( $node->safe_psql(
		'postgres', q{
	SELECT (SELECT peak FROM ledger WHERE key = '*'),
		   (SELECT max(peak) FROM ledger WHERE key <> '*')}),
	'8|2',
	'the limits were reached: 8 in flight at the peak, 2 of a group');
is( $node->safe_psql(
		'postgres', q{
	SELECT (SELECT count(*) FROM done),
		   (SELECT count(*) FROM claimq.job),
		   (SELECT sum(n) FROM ledger)}),
	'4000|0|0',
	'every job was completed once; nothing is left in flight or in the queue');

#
# The rate limit's bucket with the preload.
#
$node->safe_psql('postgres',
	"SELECT claimq.create_queue('rl', rate_limit => 4, rate_period => '1 hour')");
$node->safe_psql('postgres',
	"SELECT count(*) FROM claimq.enqueue_many('rl', array_fill('{}'::jsonb, ARRAY[20]))");
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rl', 3)"),
	'3', 'a new bucket starts full: 3 of 4 tokens taken');
poll_ok($node, 'postgres', "SELECT rate_at IS NOT NULL FROM claimq.queue WHERE name = 'rl'",
	't', 10, 'the reclaimer records its first use in the queue row');
$node->restart;
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rl', 10)"),
	'0', 'after a restart the bucket starts empty, not full');

# A worker's first claim waits on an empty queue: its subtransaction sets
# the bucket up and rolls back.  The record of the bucket's use must not go
# with it, or a restart would refill it.
$node->safe_psql('postgres',
	"SELECT claimq.create_queue('rw', rate_limit => 4, rate_period => '1 hour')");
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rw', 1, wait => '300 ms')"),
	'0', 'a waiting first claim finds nothing');
poll_ok($node, 'postgres', "SELECT rate_at IS NOT NULL FROM claimq.queue WHERE name = 'rw'",
	't', 10, 'its bucket is recorded all the same');
$node->safe_psql('postgres',
	"SELECT count(*) FROM claimq.enqueue_many('rw', array_fill('{}'::jsonb, ARRAY[10]))");
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rw', 10)"),
	'4', 'the full bucket of 4');
$node->restart;
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rw', 10)"),
	'0', 'and none after a restart');

# A group left with held jobs and nothing free (here made by hand, as a
# sync that had to skip a locked row could leave it) is synced by the
# reclaimer.
$node->safe_psql(
	'postgres', q{
	SELECT claimq.create_queue('sg', group_fifo => true);
	SELECT count(*) FROM claimq.enqueue_many('sg', array_fill('{}'::jsonb, ARRAY[3]),
											 group_keys => '{s,s,s}');
	UPDATE claimq.job SET held = true
	 WHERE queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'sg');
});
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM claimq.job
	 WHERE queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'sg') AND NOT held},
	'1', 10, 'the reclaimer frees the stuck group\'s next job');

$node->safe_psql('postgres', "SELECT claimq.alter_queue('rl', rate_limit => 5)");
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rl', 10)"),
	'5', 'a new rate makes a new, full bucket');
$node->safe_psql('postgres',
	"SELECT claimq.alter_queue('rl', rate_limit => 2, rate_period => '2 seconds')");
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rl', 10)"),
	'2', 'two tokens per two seconds: a full bucket of 2');
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rl', 10)"),
	'0', 'then none');
poll_ok($node, 'postgres', "SELECT count(*) FROM claimq.claim('rl', 1)",
	'1', 10, 'the bucket refills: a token within about a second');

# A claim that waits on an empty bucket looks again when the next token is
# whole (every 200 ms at 5 a second), not only at the second's recheck.
$node->safe_psql('postgres',
	"SELECT claimq.alter_queue('rl', rate_limit => 5, rate_period => '1 second')");
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rl', 10)"),
	'5', 'five tokens a second: a full bucket of 5');
my $t0 = time();
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('rl', 1, wait => '3 seconds')"),
	'1', 'a waiting claim gets the next token');
my $waited = time() - $t0;
cmp_ok($waited, '<', 0.75,
	sprintf('when it is due, not at the next second\'s recheck (%.2f s)', $waited));

#
# A claim's reservation dies with its session; a crashed worker's jobs
# give their slots back when they are reclaimed.
#
$node->safe_psql(
	'postgres', q{
	SELECT claimq.create_queue('mq', max_in_flight => 2, lease => '1 second');
	SELECT count(*) FROM claimq.enqueue_many('mq', array_fill('{}'::jsonb, ARRAY[10]));
});
my $bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
is($bg->query_safe("SELECT count(*) FROM claimq.claim('mq', 2, lease => '1 hour')"),
	'2', 'an open transaction claims both slots');
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('mq', 2)"),
	'0', 'another claim gets none, without waiting');
my $pid = $bg->query_safe('SELECT pg_backend_pid()');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
eval { $bg->quit; };
poll_ok($node, 'postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid",
	'0', 10, 'the session is gone');
# Claimed for an hour, so that a busy machine cannot see them expire before
# the next check; then their leases are cut short, as a crashed worker's
# run out.
$node->safe_psql('postgres', q{
	CREATE TABLE mq_held AS SELECT job_id, token FROM claimq.claim('mq', 2, lease => '1 hour')});
is($node->safe_psql('postgres', 'SELECT count(*) FROM mq_held'),
	'2', 'its reservation went with it: the two slots are claimed again');
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('mq', 2)"),
	'0', 'and they are taken');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM mq_held h, claimq.extend(h.job_id, h.token, '1 millisecond') x
	 WHERE x}),
	'2', 'the holder disappears: its leases run out');
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id)
	 WHERE q.name = 'mq' AND j.state = 'claimed'},
	'0', 15, 'the reclaimer puts the abandoned claims back');
is($node->safe_psql('postgres', "SELECT count(*) FROM claimq.claim('mq', 2)"),
	'2', 'and their slots are free again');

# A prepared transaction would hold claims no backend answers for.
my ($ret, $out, $err) = $node->psql('postgres', q{
	BEGIN;
	SELECT count(*) FROM claimq.enqueue_many('mq', array_fill('{}'::jsonb, ARRAY[2]));
	COMMIT;
	SELECT claimq.alter_queue('mq', max_in_flight => 10);
	BEGIN;
	SELECT count(*) FROM claimq.claim('mq', 1);
	PREPARE TRANSACTION 'held_claim';
});
like($err, qr/cannot prepare a transaction that claimed jobs of a queue with max_in_flight/,
	'PREPARE TRANSACTION after a claim of a max_in_flight queue is refused');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'),
	'0', 'nothing was prepared');

$node->stop;
log_is_clean($node);

done_testing();
