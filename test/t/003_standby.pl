# On a streaming standby with the same preload settings, no claimq worker
# runs and nothing claimq does shows in the log: the primary's expired
# claims come back on the standby only when the primary reclaims them.
# After promotion the new primary's reclaimer starts, and claims left
# expired there come back within about a lease plus an interval.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $interval = $ClaimqTest::INTERVAL_MS / 1000.0;

my $primary = claimq_node('primary', allows_streaming => 1);
$primary->start;
$primary->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('tq', lease => '1s', retry_base => '1s');
	SELECT claimq.enqueue_many('tq', array_fill('{}'::jsonb, ARRAY[6]));
});
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'standby is in recovery');
is( $standby->safe_psql(
		'postgres',
		"SELECT current_setting('shared_preload_libraries'), current_setting('claimq.reclaimer')"
	),
	'claimq|on',
	'standby preloads claimq with the reclaimer on');

# Switch the primary's passes off or on.  A restart, not a reload, so that
# this test does not depend on how the reclaimer takes a reload
# (004_reload.pl tests that).
sub primary_reclaimer
{
	my ($on) = @_;
	$primary->safe_psql('postgres', "ALTER SYSTEM SET claimq.reclaimer = $on");
	$primary->restart;
}
primary_reclaimer('off');

$primary->safe_psql(
	'postgres', q{
	SELECT count(*) FROM claimq.claim('tq', max_jobs => 2, lease => '1s');
	SELECT count(*) FROM claimq.claim('tq', lease => '1s', start => true);
});
$primary->wait_for_catchup($standby);

my $held_sql = q{
	SELECT string_agg(state || ':' || attempts, ',' ORDER BY job_id)
	  FROM claimq.job WHERE state <> 'pending'};
is($standby->safe_psql('postgres', $held_sql),
	'claimed:0,claimed:0,running:1', 'the claims are replicated');

# Wait for the leases to pass and then ten intervals more.
usleep((1.0 + 10 * $interval + 0.5) * 1_000_000);

is( $standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type LIKE 'claimq%'}),
	'0',
	'no claimq launcher or worker on the standby');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM claimq.reclaimer_status'),
	'0', 'reclaimer_status on the standby serves no database');
is( $standby->safe_psql(
		'postgres',
		"SELECT count(*) FROM claimq.job WHERE expires_at < clock_timestamp()"),
	'3',
	'on the standby the claims are expired');
is($standby->safe_psql('postgres', $held_sql),
	'claimed:0,claimed:0,running:1',
	'and are not reclaimed while the primary does not reclaim them');
is($primary->safe_psql('postgres', $held_sql),
	'claimed:0,claimed:0,running:1',
	'the primary has not reclaimed them either');

# Nothing from claimq in the standby's log (apart from our statements).
my @claimq_lines =
  grep { !/ (LOG|DETAIL):  statement: / }
  log_lines($standby, qr/^\d{4}-.*claimq/);
is(join("\n", @claimq_lines), '', 'no claimq message in the standby log');
# The primary's restarts cut the standby's WAL stream for a moment (18
# names the receiver first: 'streaming replication receiver "standby" could
# not connect to the primary server').
my @error_lines =
  grep { !/ FATAL:  (streaming replication receiver "[^"]*" )?could not .*(WAL stream|primary)/ }
  log_lines($standby, qr/^\d{4}-.* (ERROR|FATAL|PANIC):/);
is(join("\n", @error_lines), '', 'no error in the standby log');

# Every call that writes is refused on the standby with 25006, checked
# before anything else, and without claimq's internal SQL in CONTEXT: a
# C function's error has none, a PL/pgSQL function's (the schedules') the
# one line that names the function and its RAISE.  (After the log checks
# above, which these errors would fail.)
my ($held_id, $held_token) = split /\|/, $primary->safe_psql('postgres',
	"SELECT job_id, token FROM claimq.job WHERE state = 'claimed' ORDER BY job_id LIMIT 1");
my $pair = "ARRAY[$held_id]::bigint[], ARRAY[$held_token]::bigint[]";
foreach my $call (
	"claim('tq')",
	"claim('tq', wait => '10 seconds')",
	"enqueue('tq', '{}')",
	"enqueue_many('tq', ARRAY['{}']::jsonb[])",
	"start($pair)",
	"extend($pair)",
	"complete($pair)",
	"complete($held_id, $held_token)",
	"fail($pair)",
	"release($pair)",
	"release($held_id, $held_token)",
	"snooze($pair, '1 minute')",
	"release_worker('tq', 'w')",
	"cancel(ARRAY[$held_id]::bigint[])",
	"claim_keys('s', ARRAY['k'], '1 minute')",
	"release_keys('s', ARRAY['k'], ARRAY[1]::bigint[])",
	"reclaim()",
	"prune()",
	"fire_schedules()",
	"create_schedule('sch', 'tq', '* * * * *')",
	"alter_schedule('sch', cron => '* * * * *')",
	"drop_schedule('sch')")
{
	my ($ret, $out, $err) = $standby->psql('postgres', "SELECT claimq.$call",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:  25006: cannot run claimq\.\w+\(\) during recovery/,
		"on the standby $call is refused with 25006");
	my ($context) = $err =~ /^CONTEXT:  (.*?)\n(?=LOCATION:|\z)/ms;
	ok(!defined $context
		  || $context =~ /^PL\/pgSQL function claimq\.\w+\([^)\n]*\) line \d+ at RAISE$/,
		"$call: no internal SQL in the error")
	  or diag($err);
}

# Once the primary reclaims, the standby sees it through replication.
primary_reclaimer('on');
poll_ok($primary, 'postgres', "SELECT count(*) FROM claimq.job WHERE state <> 'pending'",
	'0', 10, 'the primary reclaims the expired claims');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres',
		"SELECT string_agg(state || ':' || attempts, ',' ORDER BY attempts, job_id) FROM claimq.job"
	),
	'pending:0,pending:0,pending:0,pending:0,pending:0,pending:1',
	'the standby sees the reclaimed jobs');

# Claims left expired on the primary when the standby takes over.
primary_reclaimer('off');
$primary->safe_psql('postgres',
	"SELECT count(*) FROM claimq.claim('tq', max_jobs => 2, lease => '2s')");
my ($started_id, $started_exp) = split /\|/, $primary->safe_psql('postgres',
	"SELECT job_id, expires_at FROM claimq.claim('tq', lease => '2s', start => true)");
my $t_claimed = time();
$primary->wait_for_catchup($standby);
$primary->stop('fast');
$standby->promote;
my $t_promoted = time();

poll_ok($standby, 'postgres', "SELECT count(*) FROM claimq.job WHERE state <> 'pending'",
	'0', 20, 'after promotion the expired claims are reclaimed');
my $t_reclaimed = time();
my $t_base = $t_claimed + 2.0 > $t_promoted ? $t_claimed + 2.0 : $t_promoted;
my $late = $t_reclaimed - $t_base;
note sprintf('reclaimed %.2fs after lease end or promotion, whichever was later',
	$late);
# One interval, plus time for the launcher and worker to start and for the
# poll to notice.
cmp_ok($late, '<=', $interval + 3.0,
	'reclaimed within a lease plus an interval, give or take startup');

is( $standby->safe_psql(
		'postgres',
		"SELECT string_agg(state || ':' || attempts, ',' ORDER BY attempts, job_id) FROM claimq.job"
	),
	'pending:0,pending:0,pending:0,pending:0,pending:1,pending:1',
	'claimed jobs pending with no attempt counted, the started one with one more');
# Its retry time is the reclaim's time plus a backoff of 0.8 to 1 s.
is( $standby->safe_psql(
		'postgres', qq{
	SELECT run_at >= '$started_exp'::timestamptz + interval '0.8 s'
	  FROM claimq.job WHERE job_id = $started_id}),
	't',
	'the started job was not reclaimed before its lease ended');
is( $standby->safe_psql(
		'postgres', q{
	SELECT s.pid = a.pid, s.last_error IS NULL
	  FROM claimq.reclaimer_status s
	  JOIN pg_stat_activity a
		ON a.backend_type = 'claimq reclaimer' AND a.datname = s.database}),
	't|t',
	'the promoted node runs a worker, shown in reclaimer_status');

$standby->stop;
log_is_clean($primary);
log_is_clean($standby);

done_testing();
