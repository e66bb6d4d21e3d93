# What the background processes and waiting claims leave behind over time:
# the launcher's memory stays flat however often it reads its settings, a
# waiting claim ended by pg_terminate_backend leaves no wait slot behind,
# and a failed reclaimer pass is logged with its SQLSTATE.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# Many names, most of no database: each look at the list does some work.
my $names = join(', ', 'postgres', map { "nodb$_" } 1 .. 30);
my $node = claimq_node('hygiene', conf => "claimq.databases = '$names'\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('wq');
});
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type IN ('claimq launcher', 'claimq reclaimer')},
	'2', 30, 'launcher and worker run');
my $launcher = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'claimq launcher'");

# The launcher's memory in use, from pg_log_backend_memory_contexts.
sub launcher_memory
{
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres',
		"SELECT pg_log_backend_memory_contexts($launcher)");
	for (1 .. 100)
	{
		my @lines = log_lines($node, qr/Grand total: .* (\d+) used/, $offset);
		if (@lines)
		{
			$lines[0] =~ /(\d+) used/;
			return $1;
		}
		usleep(100_000);
	}
	return undef;
}

# Each reload makes the launcher read the list again at once.
sub reloads
{
	for (1 .. 150)
	{
		$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
		usleep(10_000);
	}
	usleep(500_000);
}

reloads();
my $before = launcher_memory();
ok(defined $before, "the launcher's memory is logged ($before bytes used)");
reloads();
reloads();
my $after = launcher_memory();
ok(defined $after, "and again ($after bytes used)");
cmp_ok($after - $before, '<', 8192,
	'the launcher does not grow with every look at its settings');

# A waiting claim ended by FATAL gives its wait slot back.
my $waiter = $node->background_psql('postgres');
my $waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nSELECT * FROM claimq.claim('wq', wait => '5 minutes');\n");
poll_ok($node, 'postgres',
	"SELECT count(*) FROM claimq.waiting_claims() WHERE pid = $waiter_pid",
	'1', 10, 'the claim waits');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($waiter_pid)");
poll_ok($node, 'postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE pid = $waiter_pid",
	'0', 10, 'the waiting session is gone');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claimq.waiting_claims()'),
	'0', 'and so is its wait');
# The session died with its backend; its psql may be gone already.
eval { $waiter->quit; };

# A pass that cannot lock the job table fails; the log names the SQLSTATE.
my $offset = -s $node->logfile;
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE claimq.job IN ACCESS EXCLUSIVE MODE;');
my $logged = 0;
for (1 .. 100)
{
	$logged = scalar(log_lines($node,
			qr/claimq reclaimer pass failed with SQLSTATE 55P03: /, $offset));
	last if $logged;
	usleep(100_000);
}
ok($logged, 'a failed pass is logged with its SQLSTATE');
$locker->query_safe('ROLLBACK');
$locker->quit;

$node->stop;
done_testing();
