# Flow slots held by slow limited queues give way.  With claimq.flow_slots
# at its least (16), forty queues with a rate limit of one job a day each
# hand out a job: their buckets are no longer full, and would be full again
# only after a day, so 0.7 never gave their slots to another queue.  After
# three reclaimer passes (which write a bucket unused for a whole pass to
# its queue's row), a queue with max_in_flight gets a slot: a claim of it
# in an open transaction does not make a second claim wait on the queue's
# row.  metrics() shows the slots held, then free, and which queues take
# turns on their rows meanwhile.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('flow_full', conf => "claimq.flow_slots = 16\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION claimq;
	SELECT count(*) FROM generate_series(1, 40) i,
		LATERAL (SELECT claimq.create_queue('slow' || i, rate_limit => 1,
											rate_period => '1 day')) c,
		LATERAL (SELECT claimq.enqueue_many('slow' || i, array_fill('{}'::jsonb, ARRAY[2]))) e;
	SELECT claimq.create_queue('x', max_in_flight => 5);
	SELECT claimq.enqueue_many('x', array_fill('{}'::jsonb, ARRAY[4]));});
# metrics() in the claims' transaction, which holds every slot.
my $m = $node->safe_psql('postgres', q{
	WITH c AS (SELECT count(*) AS n FROM generate_series(1, 40) i, claimq.claim('slow' || i, 2))
	SELECT n || E'\n' || claimq.metrics() FROM c});
like($m, qr/\A40\n/, 'each slow queue hands out one job of two: its bucket is empty');
like($m, qr/^claimq_flow_slots\{state="held"\} 16\nclaimq_flow_slots\{state="free"\} 0$/m,
	'metrics(): every flow slot held');
like($m, qr/^claimq_flow_row_path\{queue="x"\} 1$/m,
	'metrics(): x, which has no slot, is on the row path');
is(scalar(() = $m =~ /^claimq_flow_row_path\{queue="slow\d+"\} 1$/mg), 24,
	'metrics(): so are the 24 slow queues that found no slot');

# Three reclaimer passes after the claims: the first may have looked
# before them, the second sees the buckets unused since, the third
# finds them still unused and writes them.
for my $pass (1 .. 3)
{
	my $t = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
	poll_ok($node, 'postgres',
		"SELECT last_run > '$t' FROM claimq.reclaimer_status", 't', 30,
		"reclaimer pass $pass after the claims");
}

$m = $node->safe_psql('postgres', 'SELECT claimq.metrics()');
like($m, qr/^claimq_flow_slots\{state="held"\} 0\nclaimq_flow_slots\{state="free"\} 16$/m,
	'metrics(): after the passes every slot is free');
like($m, qr/^claimq_flow_row_path\{queue="x"\} 0$/m, 'and x is not on the row path');

my $a = $node->background_psql('postgres', on_error_stop => 1);
$a->query_safe('BEGIN');
is($a->query_safe(q{SELECT count(*) FROM claimq.claim('x', 1)}), '1',
	'a claim of x in a transaction left open');
my ($ret, $out, $err) = $node->psql('postgres', q{
	SET lock_timeout = '2s';
	SELECT count(*) FROM claimq.claim('x', 1);});
is($ret, 0, 'a second claim of x does not wait for the first one\'s transaction')
  or diag($err);
is($out, '1', 'and gets a job');
$a->query_safe('COMMIT');
$a->quit;

# The slow queues' limits still hold after their slots went: each holds
# no token (it would refill only in a day).
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM generate_series(1, 40) i, claimq.claim('slow' || i, 1)}),
	'0', 'no slow queue hands out its second job');

$node->stop;
done_testing();
