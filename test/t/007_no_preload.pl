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

$node->stop;
log_is_clean($node);

done_testing();
