# The reclaimer's settings take effect on reload (SIGHUP), without a restart
# and without the launcher or the workers going down: claimq.databases adds
# and removes workers, claimq.reclaimer and claimq.reclaim_interval stop,
# slow down and resume the passes.  A served database can be dropped
# without FORCE: its worker gets out of the way.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = claimq_node('reload');
$node->start;

sub launcher_pid
{
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'claimq launcher'");
}

sub worker_pid
{
	my ($db) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'claimq reclaimer' AND datname = '$db'"
	);
}

sub last_run
{
	return $node->safe_psql('postgres',
		"SELECT last_run FROM claimq.reclaimer_status WHERE database = 'postgres'");
}

# Change settings with ALTER SYSTEM and reload; the launcher must live on.
sub reload_with
{
	my ($what, @settings) = @_;
	my $launcher = launcher_pid();
	my $offset = -s $node->logfile;

	$node->safe_psql('postgres',
		join('', map { "ALTER SYSTEM SET $_;\n" } @settings)
		  . 'SELECT pg_reload_conf();');
	# The reload sets every process's latch; leave them time to act on it.
	usleep(600_000);
	my $alive = poll_ok($node, 'postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'claimq launcher'",
		$launcher, 3, "$what: the launcher lives on");
	my @crashes = log_lines($node, qr/terminated by signal/, $offset);
	is(join("\n", @crashes), '', "$what: no process crashed");
	return if defined $alive && !@crashes;

	# Everything below depends on a launcher that survives reloads.
	diag('the launcher did not live through a reload; stopping this test here');
	$node->stop;
	log_is_clean($node);
	done_testing();
	exit;
}

poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'claimq reclaimer' AND datname = 'postgres'},
	'1', 30, 'a worker serves postgres');
my $pg_worker = worker_pid('postgres');

$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('tq', lease => '1s');
	CREATE DATABASE db2;
});
$node->safe_psql(
	'db2', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('tq', lease => '1s');
	SELECT claimq.enqueue('tq', '{}');
	SELECT count(*) FROM claimq.claim('tq', lease => '1s');
});
is(worker_pid('db2'), '', 'db2 is not served');

# Add a database: its worker appears and works.
reload_with('adding db2', "claimq.databases = 'postgres, db2'");
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'claimq reclaimer' AND datname = 'db2'},
	'1', 10, 'a worker for db2 appears');
poll_ok($node, 'db2', "SELECT state FROM claimq.job", 'pending', 10,
	'the db2 worker reclaims the expired claim');
is( $node->safe_psql(
		'db2', q{
	SELECT s.pid = a.pid
	  FROM claimq.reclaimer_status s
	  JOIN pg_stat_activity a
		ON a.backend_type = 'claimq reclaimer' AND a.datname = s.database
	 WHERE s.database = 'db2'}),
	't',
	'reclaimer_status shows the db2 worker');
is(worker_pid('postgres'), $pg_worker, 'the postgres worker was left alone');

# Each database sees only its own reclaimer and counters, and resets only
# its own counters.
is( $node->safe_psql(
		'postgres', 'SELECT string_agg(database, \',\') FROM claimq.reclaimer_status'),
	'postgres',
	'postgres does not see the db2 reclaimer');
is($node->safe_psql('db2', 'SELECT string_agg(database, \',\') FROM claimq.reclaimer_status'),
	'db2', 'nor db2 the postgres one');
$node->safe_psql('postgres', q{
	SELECT claimq.enqueue('tq', '{}');
	SELECT count(*) FROM claimq.claim('tq', lease => '1 hour');});
is( $node->safe_psql(
		'postgres', 'SELECT string_agg(DISTINCT database, \',\') FROM claimq.counters'),
	'postgres',
	'postgres reads only its own counters');
$node->safe_psql('postgres', 'SELECT claimq.reset_counters()');
is( $node->safe_psql(
		'db2', "SELECT claimed > 0 FROM claimq.counters WHERE database = 'db2' AND queue = 'tq'"),
	't',
	'reset_counters in postgres leaves db2 counters alone');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claimq.counters'),
	'0', 'and resets those of postgres');

# Remove it: its worker exits.
reload_with('removing db2', "claimq.databases = 'postgres'");
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'claimq reclaimer' AND datname = 'db2'},
	'0', 10, 'the db2 worker exits');
is( $node->safe_psql(
		'postgres', 'SELECT string_agg(database, \',\') FROM claimq.reclaimer_status'),
	'postgres',
	'reclaimer_status lists postgres only');
is(worker_pid('postgres'), $pg_worker, 'the postgres worker was left alone');

# Serve it again, for the DROP DATABASE below.
reload_with('adding db2 again', "claimq.databases = 'postgres,db2'");
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'claimq reclaimer' AND datname = 'db2'},
	'1', 10, 'db2 is served again');
my $db2_served_at = time();

# The interval: passes every 200 ms now.
my $run0 = last_run();
poll_ok($node, 'postgres',
	"SELECT last_run > '$run0' FROM claimq.reclaimer_status WHERE database = 'postgres'",
	't', 3, 'passes run');

# Off: no pass, and an expired claim stays.
reload_with('reclaimer off', 'claimq.reclaimer = off');
my $run1 = last_run();
my $job = $node->safe_psql(
	'postgres', q{
	SELECT claimq.enqueue('tq', '{}');
	SELECT job_id FROM claimq.claim('tq', lease => '1s');
});
$job = (split /\n/, $job)[1];
usleep(2_000_000);
is(last_run(), $run1, 'no pass while the reclaimer is off');
is($node->safe_psql('postgres', "SELECT state FROM claimq.job WHERE job_id = $job"),
	'claimed', 'the expired claim is left alone while off');

# On again, but with a long interval: still no pass.
reload_with('reclaimer on with a long interval',
	'claimq.reclaimer = on', "claimq.reclaim_interval = '1h'");
usleep(1_500_000);
is(last_run(), $run1, 'no pass before the long interval is over');
is($node->safe_psql('postgres', "SELECT state FROM claimq.job WHERE job_id = $job"),
	'claimed', 'the expired claim is still there');

# A short interval again: passes resume at once.
reload_with('short interval',
	"claimq.reclaim_interval = '${ClaimqTest::INTERVAL_MS}ms'");
poll_ok(
	$node, 'postgres', qq{
	SELECT s.last_run > '$run1' AND j.state = 'pending'
	  FROM claimq.reclaimer_status s, claimq.job j
	 WHERE s.database = 'postgres' AND j.job_id = $job},
	't', 3, 'passes resume and reclaim the expired claim');
my $run2 = last_run();
poll_ok($node, 'postgres',
	"SELECT last_run > '$run2' FROM claimq.reclaimer_status WHERE database = 'postgres'",
	't', 3, 'and go on');
is(worker_pid('postgres'), $pg_worker,
	'the postgres worker served through every reload');

# DROP DATABASE of a served database, without FORCE.  Once its worker has
# served for more than the launcher's restart delay (10 s), the launcher
# would start a new worker as soon as the old one leaves: the drop must
# succeed all the same.
my $wait = $db2_served_at + 10.5 - time();
usleep($wait * 1_000_000) if $wait > 0;
my $drop_offset = -s $node->logfile;
my $t0 = time();
my ($ret, $out, $err) = $node->psql('postgres', 'DROP DATABASE db2');
my $took = time() - $t0;
is($ret, 0, 'DROP DATABASE of a served database succeeds without FORCE')
  or diag($err);
note sprintf('DROP DATABASE took %.2fs', $took);
cmp_ok($took, '<', 5, 'within a few seconds');

poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'claimq reclaimer' AND datname = 'db2'},
	'0', 5, 'no worker for the dropped database');
is( $node->safe_psql(
		'postgres', 'SELECT string_agg(database, \',\') FROM claimq.reclaimer_status'),
	'postgres',
	'reclaimer_status in postgres shows its own row only');
usleep(2_000_000);
is(scalar(log_lines($node, qr/database "db2" named in claimq.databases does not exist/,
			$drop_offset)),
	1, 'the launcher says so once, without a hot loop');
is(worker_pid('postgres'), $pg_worker, 'the postgres worker still runs');

is(scalar(log_lines($node, qr/claimq reclaimer pass failed/)),
	0, 'no failed pass');
$node->stop;
log_is_clean($node);

done_testing();
