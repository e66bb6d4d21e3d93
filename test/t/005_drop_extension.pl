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
use Time::HiRes qw(time);

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

sub status
{
	my ($columns) = @_;
	return $node->safe_psql('obs',
		"SELECT $columns FROM claimq.reclaimer_status WHERE database = 'postgres'"
	);
}

poll_ok(
	$node, 'obs', q{
	SELECT count(*) FROM claimq.reclaimer_status WHERE pid IS NOT NULL},
	'2', 15, 'both databases are served (obs once it exists)');
my $worker = status('pid');

poll_ok($node, 'obs',
	"SELECT last_error FROM claimq.reclaimer_status WHERE database = 'postgres'",
	'extension "claimq" is not installed in this database',
	5, 'before CREATE EXTENSION, reclaimer_status says it is not installed');

$node->safe_psql('postgres', "CREATE EXTENSION claimq; $setup");
poll_ok($node, 'postgres', 'SELECT state FROM claimq.job', 'pending', 10,
	'the expired claim is reclaimed');
is(status('last_error IS NULL'), 't', 'no error once installed');

# Dropped: the worker carries on and says so.
$node->safe_psql('postgres', 'DROP EXTENSION claimq');
poll_ok($node, 'obs',
	"SELECT last_error FROM claimq.reclaimer_status WHERE database = 'postgres'",
	'extension "claimq" is not installed in this database',
	5, 'after DROP EXTENSION, reclaimer_status says it is not installed');
my $run = status('last_run');
poll_ok($node, 'obs',
	"SELECT last_run > '$run' FROM claimq.reclaimer_status WHERE database = 'postgres'",
	't', 3, 'passes go on while the extension is gone');

# Created again: new tables, and the worker works on them.
my $total = status('total_reclaimed');
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
