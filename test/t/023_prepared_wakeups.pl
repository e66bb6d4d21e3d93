# A transaction that finishes, enqueues or releases jobs and is PREPAREd
# wakes nobody at PREPARE, and COMMIT PREPARED (run by any backend) runs
# none of claimq's commit hooks: wait_for() and claim(..., wait => ...)
# see such a commit by looking again at most a second after their last
# look.  Each wait below has a timeout of 30 seconds, and the checks give
# the waiter 5 seconds after COMMIT PREPARED: a commit that is only seen at
# the timeout fails the test.  (A waiting backend's latch is also set now
# and then for other reasons, the first about 10 seconds into the wait,
# after which it looks again: hence a bound well below that.)
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('prepared',
	conf => "max_prepared_transactions = 5\nclaimq.reclaimer = off\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('pw', keep_done => '1 day');
	SELECT claimq.create_queue('pc');
});

my $waiter = $node->background_psql('postgres');
my $pid = $waiter->query_safe('SELECT pg_backend_pid()');
my $other = $node->background_psql('postgres');

# Start $sql in the waiter and wait until it sleeps in claimq's wait.
sub start_waiting
{
	my ($sql, $name) = @_;
	$waiter->query_until(qr/waiting/, "\\echo waiting\n$sql\n");
	poll_ok($node, 'postgres',
		"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid",
		'Extension', 30, $name);
}

# Run $sql in a transaction that $other prepares, then commit it from a
# new session; the waiter must return within 5 seconds.
sub commit_prepared
{
	my ($sql, $gid, $name) = @_;
	$other->query_safe("BEGIN; $sql; PREPARE TRANSACTION '$gid'");
	is($node->safe_psql('postgres',
			"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid"),
		'Extension', "$name: the waiter still waits after PREPARE");
	$node->safe_psql('postgres', "COMMIT PREPARED '$gid'");
	poll_ok($node, 'postgres',
		"SELECT state FROM pg_stat_activity WHERE pid = $pid",
		'idle', 5, "$name: the waiter returns soon after COMMIT PREPARED");
}

# wait_for and a complete committed by COMMIT PREPARED.
my ($job, $token) = split /\|/, $node->safe_psql('postgres', q{
	SELECT c.job_id, c.token
	  FROM claimq.enqueue('pw', '{}') e, claimq.claim('pw') c});
start_waiting("SELECT state FROM claimq.wait_for(ARRAY[$job]::bigint[], '30 seconds');",
	'wait_for sleeps while the job is claimed');
commit_prepared("SELECT claimq.complete($job, $token)", 'p1', 'wait_for');
is($waiter->query_safe(''), 'done', 'wait_for reports the job finished');

# claim(..., wait => ...) and an enqueue committed by COMMIT PREPARED.
start_waiting("SELECT count(*) FROM claimq.claim('pc', wait => '30 seconds');",
	'a claim waits on an empty queue');
commit_prepared("SELECT claimq.enqueue('pc', '{}')", 'p2', 'enqueue');
is($waiter->query_safe(''), '1', 'the waiting claim takes the enqueued job');

# ... and a release committed by COMMIT PREPARED.
($job, $token) = split /\|/, $node->safe_psql('postgres', q{
	SELECT c.job_id, c.token
	  FROM claimq.enqueue('pc', '{}') e, claimq.claim('pc') c});
start_waiting("SELECT count(*) FROM claimq.claim('pc', wait => '30 seconds');",
	'a claim waits while the only pending job is claimed');
commit_prepared("SELECT claimq.release($job, $token)", 'p3', 'release');
is($waiter->query_safe(''), '1', 'the waiting claim takes the released job');

$waiter->quit;
$other->quit;
$node->stop;
log_is_clean($node);
done_testing();
