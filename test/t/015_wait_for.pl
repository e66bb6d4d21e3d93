# wait_for() is woken by the commits that finish or remove the jobs it
# waits for, sees them from inside a REPEATABLE READ transaction whose
# snapshot predates them, and waits on across a restart of the reclaimer.
#
# Each wait below has a timeout of ten minutes, and the checks give the
# waiter 5 seconds to return after the commit that should wake it: a
# wake-up that did not happen fails the test instead of ending in the
# timeout.  (A waiting backend's latch is also set now and then for other
# reasons, the first about 10 seconds into the wait here, after which
# wait_for looks again and returns: hence the short bound.)
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('waitfor');
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('w', keep_done => '1 day');
	SELECT claimq.create_queue('p');
	SELECT claimq.enqueue_many('w', ARRAY['{}', '{}', '{}']::jsonb[]);
	SELECT claimq.enqueue('p', '{}');
});
my @held = map { [ split /\|/ ] } split /\n/,
  $node->safe_psql('postgres',
	"SELECT job_id, token FROM claimq.claim('w', 3) ORDER BY job_id");
is(scalar @held, 3, 'three jobs are claimed');
my $ids = join ',', map { $_->[0] } @held;

# The waiter's snapshot is taken before any of the jobs finishes.
my $waiter = $node->background_psql('postgres');
my $pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
is($waiter->query_safe("SELECT count(*) FROM claimq.job WHERE state = 'claimed'"),
	'3', 'the waiter sees three claimed jobs in its snapshot');
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nSELECT string_agg(coalesce(state, '-'), ',' ORDER BY job_id) FROM claimq.wait_for(ARRAY[$ids], '10 minutes');\n"
);
poll_ok($node, 'postgres',
	"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid",
	'Extension', 30, 'wait_for sleeps while the jobs are claimed');

# Finishing two of them wakes it, and it sleeps on.
$node->safe_psql('postgres',
	"SELECT claimq.complete($held[0][0], $held[0][1], '{\"r\": 1}')");
$node->safe_psql('postgres',
	"SELECT * FROM claimq.cancel(ARRAY[$held[1][0]]::bigint[])");
poll_ok($node, 'postgres',
	"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid",
	'Extension', 30, 'with one job unfinished it sleeps on');

# The last one fails for good: wait_for returns.
$node->safe_psql('postgres',
	"SELECT claimq.fail($held[2][0], $held[2][1], 'no', permanent => true)");
poll_ok($node, 'postgres',
	"SELECT state FROM pg_stat_activity WHERE pid = $pid",
	'idle in transaction', 5, 'the commit that finished the last job wakes it');
is($waiter->query_safe(''), 'done,cancelled,dead',
	'it returns the states committed after its transaction began');
$waiter->query_safe('COMMIT');

# The reclaimer restarts while a wait_for waits: the wait goes on, and
# the next commit that finishes its job still wakes it.
my ($job, $token) = split /\|/, $node->safe_psql('postgres', q{
	SELECT c.job_id, c.token
	  FROM claimq.enqueue('w', '{}') e, claimq.claim('w') c});
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nSELECT state FROM claimq.wait_for(ARRAY[$job]::bigint[], '10 minutes');\n"
);
poll_ok($node, 'postgres',
	"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid",
	'Extension', 30, 'wait_for sleeps while the job is claimed');
my $reclaimer = $node->safe_psql('postgres', q{
	SELECT pid FROM pg_stat_activity
	 WHERE backend_type = 'claimq reclaimer' AND datname = 'postgres'});
ok($reclaimer, 'the reclaimer runs');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($reclaimer)");
poll_ok($node, 'postgres', qq{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'claimq reclaimer' AND datname = 'postgres'
	   AND pid <> $reclaimer},
	'1', 60, 'a new reclaimer takes over');
is($node->safe_psql('postgres',
		"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid"),
	'Extension', 'wait_for still waits');
$node->safe_psql('postgres', "SELECT claimq.complete($job, $token)");
poll_ok($node, 'postgres',
	"SELECT state FROM pg_stat_activity WHERE pid = $pid",
	'idle', 5, 'the complete after the restart wakes it');
is($waiter->query_safe(''), 'done', 'and it answers');

# purge_queue removes a pending job: that wakes a wait_for too.
my ($pending) = $node->safe_psql('postgres',
	"SELECT job_id FROM claimq.job WHERE state = 'pending'");
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nSELECT count(*) FROM claimq.wait_for(ARRAY[$pending], '10 minutes') WHERE state IS NULL;\n"
);
poll_ok($node, 'postgres',
	"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid",
	'Extension', 30, 'wait_for sleeps while the job is pending');
$node->safe_psql('postgres', "SELECT claimq.purge_queue('p')");
poll_ok($node, 'postgres',
	"SELECT state FROM pg_stat_activity WHERE pid = $pid",
	'idle', 5, 'purge_queue wakes it');
is($waiter->query_safe(''), '1', 'the purged job is reported gone');

$waiter->quit;
$node->stop;
log_is_clean($node);
done_testing();
