# The reclaimer does not wait for a synchronous standby: with
# synchronous_standby_names naming a standby that is not there, every
# transaction that commits with synchronous_commit = on waits for ever,
# but the reclaimer's own commit locally (docs/operations.md), so expired
# claims are still reclaimed.  This test's sessions commit locally too.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('sync_standby', allows_streaming => 1,
	conf => "synchronous_standby_names = 'absent_standby'\n");
$node->start;

sub local_psql
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', "SET synchronous_commit = local;\n$sql");
}

local_psql(q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('sq', lease => '1 second');
	SELECT claimq.enqueue_many('sq', array_fill('{}'::jsonb, ARRAY[3]));});
is(local_psql(q{SELECT count(*) FROM claimq.claim('sq', 3)}), '3',
	'three jobs claimed, with a lease of one second');

poll_ok($node, 'postgres',
	q{SELECT count(*) FROM claimq.job WHERE state = 'pending'},
	'3', 60, 'the reclaimer puts the expired claims back while the standby is away');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_stat_activity
		 WHERE backend_type = 'claimq reclaimer' AND wait_event = 'SyncRep'}),
	'0', 'the reclaimer is not waiting for the standby');
poll_ok($node, 'postgres', 'SELECT total_reclaimed FROM claimq.reclaimer_status',
	'3', 30, 'reclaimer_status counts the reclaim');

$node->stop;
done_testing();
