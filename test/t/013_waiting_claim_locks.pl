# A waiting claim keeps no row lock from a try that claimed nothing.
#
# A claim's statement can lock a row it then does not claim: its snapshot
# saw the job pending, another claim took the job and committed before the
# statement reached the row, and under READ COMMITTED the lock goes to the
# newest version, whose recheck (state = 'pending') fails.  That lock lasts
# as long as the claiming transaction, which for claim(wait => ...) is the
# whole wait, so the job's holder could not complete it meanwhile.  Each
# try of the wait now runs in a subtransaction that is rolled back when it
# claimed nothing.
#
# The window between the statement's snapshot and its row locks is widened
# on purpose: another session holds row locks on 100,000 jobs that come
# before the raced job in claim order, so the waiting claim's statement
# spends a while skipping them after it took its snapshot; the other claim
# commits meanwhile.  pgrowlocks shows which rows the waiting session
# still has locked while it sleeps.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Without the preload: no claim floor lets the waiting claim start past
# the blocker's jobs, and it polls.
my $node = claimq_node('waitlock', no_preload => 1);
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	CREATE EXTENSION pgrowlocks;
	SELECT claimq.create_queue('wq');
	SELECT claimq.create_queue('other');
	SELECT claimq.enqueue_many('wq', (SELECT array_agg(jsonb_build_object('n', i))
	                                    FROM generate_series(1, 10000) i))
	  FROM generate_series(1, 10);
	SELECT claimq.enqueue('wq', '{"n": 0}');
});

# The blocker locks every job but the last; claims skip them.
my $blocker = $node->background_psql('postgres');
$blocker->query_safe('BEGIN');
is( $blocker->query_safe(
		q{SELECT count(*) FROM (SELECT 1 FROM claimq.job
		   ORDER BY job_id LIMIT 100000 FOR UPDATE) l}),
	'100000',
	'the blocker locks 100,000 jobs');

# The holder claims the last job and does not commit yet.
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
my ($job, $token) = split /\|/,
  $holder->query_safe("SELECT job_id, token FROM claimq.claim('wq')");
is( $node->safe_psql('postgres', 'SELECT max(job_id) FROM claimq.job'),
	$job, 'the holder claimed the last job');

# The waiting claim starts (its first try skips the blocker's jobs) and
# the holder commits while it does.
my $waiter = $node->background_psql('postgres');
my $waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_safe("SELECT count(*) FROM claimq.claim('other')");
$waiter->query_until(qr/claiming/,
	"\\echo claiming\nSELECT count(*) FROM claimq.claim('wq', wait => '5 minutes');\n");
$holder->query_safe('COMMIT');

# The waiting claim found nothing and sleeps until woken.
poll_ok($node, 'postgres',
	"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $waiter_pid",
	'Extension', 30, 'the claim found nothing and sleeps');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pgrowlocks('claimq.job') WHERE $waiter_pid = ANY (pids)"),
	'0',
	'the sleeping claim holds no row lock');

# The holder completes its job without waiting for the sleeping claim.
my ($ret, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '5s'; SELECT claimq.complete($job, $token)");
is($out, 't', "the holder's complete is not blocked by the waiting claim")
  or diag($err);

# The waiting claim still gets the next job.
$node->safe_psql('postgres', q{SELECT claimq.enqueue('wq', '{"n": 2}')});
is($waiter->query_safe(''), '1', 'the waiting claim gets the next job');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM claimq.job WHERE state = 'claimed'"),
	'1', 'and it is claimed');

$waiter->quit;
$holder->quit;
$blocker->query_safe('ROLLBACK');
$blocker->quit;
$node->stop;
log_is_clean($node);
done_testing();
