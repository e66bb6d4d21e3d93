# The extension dropped and created again under a running worker: the
# worker neither crashes nor stops, reclaimer_status says the extension is
# not installed while it is gone, and once it is back (with new tables) the
# worker reclaims expired claims again.  reclaimer_status is read from a
# second served database, where the extension stays installed.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = claimq_node('dropext', conf => "claimq.databases = 'postgres,obs'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE obs');
$node->safe_psql('obs', 'CREATE EXTENSION claimq');

# A queue with one claim that nobody will settle; the setup of each round.
my $setup = q{
	SELECT claimq.create_queue('tq', lease => '500ms');
	SELECT claimq.enqueue('tq', '{}');
	SELECT count(*) FROM claimq.claim('tq');
};

# reclaimer_status shows a database its own row only: read it in postgres.
sub status
{
	my ($columns) = @_;
	return $node->safe_psql('postgres',
		"SELECT $columns FROM claimq.reclaimer_status");
}

sub worker_pid
{
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'claimq reclaimer' AND datname = 'postgres'"
	);
}

# The worker logs once that the extension is missing, each time it goes.
sub said_not_installed
{
	my ($offset, $name) = @_;
	for (1 .. 50)
	{
		return pass($name)
		  if log_lines($node,
			qr/extension "claimq" is not installed in database "postgres"/,
			$offset);
		usleep(100_000);
	}
	return fail($name);
}

poll_ok(
	$node, 'obs', q{
	SELECT count(*) FROM claimq.reclaimer_status WHERE pid IS NOT NULL},
	'1', 15, 'obs is served once it exists, and sees its own row only');
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'claimq reclaimer' AND datname = 'postgres'},
	'1', 15, 'postgres is served');
my $worker = worker_pid();
said_not_installed(0, 'before CREATE EXTENSION, the worker says it is not installed');

$node->safe_psql('postgres', "CREATE EXTENSION claimq; $setup");
poll_ok($node, 'postgres', 'SELECT state FROM claimq.job', 'pending', 10,
	'the expired claim is reclaimed');
is(status('last_error IS NULL'), 't', 'no error once installed');
my $total = status('total_reclaimed');

# Dropped: the worker carries on and says so.
my $offset = -s $node->logfile;
$node->safe_psql('postgres', 'DROP EXTENSION claimq');
said_not_installed($offset, 'after DROP EXTENSION, the worker says it is not installed');
is(worker_pid(), $worker, 'the worker carries on while the extension is gone');

# Created again: new tables, and the worker works on them.
$node->safe_psql('postgres', "CREATE EXTENSION claimq; $setup");
poll_ok($node, 'postgres', 'SELECT state FROM claimq.job', 'pending', 10,
	'after CREATE EXTENSION the expired claim is reclaimed again');
is(status('last_error IS NULL'), 't', 'the error is gone');
is(status('total_reclaimed'), $total + 1, 'and the reclaim is counted');

# Dropped and created again in one transaction, a few times, each time
# under a pass that may be running or may have kept plans for the old
# tables.
for my $round (1 .. 3)
{
	$node->safe_psql('postgres',
		"BEGIN; DROP EXTENSION claimq; CREATE EXTENSION claimq; $setup COMMIT;");
	poll_ok($node, 'postgres', 'SELECT state FROM claimq.job', 'pending', 10,
		"round $round: re-created in one transaction, its claim is reclaimed");
}
# A burst of drops and creations back to back, each leaving expired claims
# behind, then one more round that must be reclaimed.
$node->safe_psql('postgres',
	"BEGIN; DROP EXTENSION claimq; CREATE EXTENSION claimq; $setup COMMIT;\n"
	  x 10);
poll_ok($node, 'postgres', 'SELECT state FROM claimq.job', 'pending', 10,
	'after a burst of re-creations the last claim is reclaimed');
is(status('last_error IS NULL'), 't', 'no error at the end');
is(status('pid'), $worker, 'the same worker served throughout');

# A served database can be the template of a new one, as it can be
# dropped: its worker must get out of the way, as autovacuum does.
my $t0 = time();
my ($ret, $out, $err) =
  $node->psql('postgres', 'CREATE DATABASE obs_copy TEMPLATE obs');
is($ret, 0, 'a served database can be used as a template') or diag($err);
note sprintf('CREATE DATABASE ... TEMPLATE took %.2fs', time() - $t0);

my @failed = log_lines($node, qr/claimq reclaimer pass failed/);
note "failed passes logged: " . scalar(@failed);
note $_ for @failed;
$node->stop;
log_is_clean($node);

done_testing();
