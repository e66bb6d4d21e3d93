# Without shared_preload_libraries: the extension installs and works, no
# reclaimer runs, reclaimer_status says so in one row, the counters are
# empty, and reclaim() puts expired claims back when called by hand.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = claimq_node('nopreload', no_preload => 1);
$node->start;

is($node->safe_psql('postgres', "SHOW shared_preload_libraries"),
	'', 'claimq is not preloaded');
my ($ret, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION claimq');
is($ret, 0, 'CREATE EXTENSION works without the preload') or diag($err);

is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'claimq%'}),
	'0',
	'no claimq background process');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*),
		   bool_and(database = current_database()),
		   bool_and(pid IS NULL AND last_run IS NULL),
		   bool_and(last_error ~ 'not running')
	  FROM claimq.reclaimer_status}),
	'1|t|t|t',
	'reclaimer_status: one row, for this database, saying it is not running');

$node->safe_psql(
	'postgres', q{
	SELECT claimq.create_queue('tq', lease => '500ms');
	SELECT claimq.enqueue_many('tq', array_fill('{}'::jsonb, ARRAY[3]));
	SELECT count(*) FROM claimq.claim('tq');
	SELECT count(*) FROM claimq.claim('tq', start => true, lease => '500ms');
});
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM claimq.job
	 WHERE state IN ('claimed', 'running') AND expires_at < clock_timestamp()},
	'2', 5, 'the two claims expire');
usleep(500_000);
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM claimq.job WHERE state IN ('claimed', 'running')"),
	'2',
	'nothing reclaims them by itself');

is( $node->safe_psql(
		'postgres', 'SELECT * FROM claimq.reclaim()'),
	'tq|1|1|0',
	'reclaim() by hand: one released, one retried');
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(state || ':' || attempts, ',' ORDER BY attempts, job_id)
	  FROM claimq.job}),
	'pending:0,pending:0,pending:1',
	'the jobs are pending again, the started one with its attempt counted');
is($node->safe_psql('postgres', "SELECT * FROM claimq.reclaim('tq')"),
	'tq|0|0|0', 'a second reclaim finds nothing');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claimq.counters'),
	'0', 'no counters without the preload');
is($node->safe_psql('postgres', 'SELECT claimq.prune()'),
	'0', 'prune() works by hand');

# Flow control without the preload: the queue-wide limits are kept in the
# queue's row, and claims of such a queue take turns on it.
$node->safe_psql(
	'postgres', q{
	SELECT claimq.create_queue('fq', max_in_flight => 3, rate_limit => 5,
							   rate_period => '1 hour', group_fifo => true);
	SELECT count(*) FROM claimq.enqueue_many('fq', array_fill('{}'::jsonb, ARRAY[8]),
		group_keys => '{a,a,b,b,c,c,d,d}');
});
my $bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
is($bg->query_safe("SELECT count(*) FROM claimq.claim('fq', 2)"),
	'2', 'an open transaction claims the heads of two groups');
my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/started/, q{
	\echo started
	SELECT count(*) FROM claimq.claim('fq', 5);
});
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE wait_event_type = 'Lock' AND query ~ 'claimq.claim'},
	'1', 10, 'another claim waits for it');
$bg->query_safe('COMMIT');
$bg->quit;
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM claimq.job WHERE state = 'claimed'}),
	'3', 'then it takes one: max_in_flight 3, one head per group');
$waiter->quit;
is($node->safe_psql('postgres', q{
	SELECT floor(rate_tokens) FROM claimq.queue WHERE name = 'fq'}),
	'2', 'the bucket in the row: 5 less the 3 claimed');

# A rate_period with a month part, left in a queue row by an earlier
# release: the bucket in the row refuses to hand out with the same clean
# error as the shared bucket, whatever the bucket held (never a division
# by zero, nor a negative LIMIT, in the claim's own SQL).
$node->safe_psql(
	'postgres', q{
	SELECT claimq.create_queue('fm', rate_limit => 2, rate_period => '1 hour');
	SELECT count(*) FROM claimq.enqueue_many('fm', array_fill('{}'::jsonb, ARRAY[3]));
	UPDATE claimq.queue SET rate_period = '1 mon -30 days' WHERE name = 'fm';
});
foreach my $tokens ('NULL', '2')
{
	$node->safe_psql('postgres',
		"UPDATE claimq.queue SET rate_tokens = $tokens, rate_at = now() WHERE name = 'fm'");
	my ($fret, $fout, $ferr) = $node->psql('postgres',
		"SELECT count(*) FROM claimq.claim('fm')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($ferr, qr/ERROR:  55000: rate_period of queue "fm" cannot be used/,
		"a stored 1 mon -30 days, bucket $tokens: the claim is refused with 55000");
	unlike($ferr, qr/CONTEXT/, 'the error shows no internal SQL');
}
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id)
	 WHERE q.name = 'fm' AND j.state = 'pending'}),
	'3', 'and took nothing');

$node->stop;
log_is_clean($node);

done_testing();
