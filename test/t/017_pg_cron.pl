# Without claimq's preload there is no reclaimer: docs/operations.md
# ("Running without the preload") gives a pg_cron recipe that makes its
# pass instead, with maintain().  This runs that recipe as written, taken out of the
# document (the blocks marked as run by this test), on a server that
# preloads pg_cron (Debian's postgresql-15-cron, 1.4, which runs jobs at
# most once a minute) and not claimq, and checks that it does all that the
# reclaimer would: an expired claim is put back, a schedule fires, done
# and dead jobs past their retention and an expired key claim are deleted.
#
# pg_cron fires on the minute: each event is waited for, against one
# deadline of a little over three minutes for all of them.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# Debian packages pg_cron for its own PostgreSQL (15) only: on a server
# built from source there is none, and this says so rather than pass.
my ($libdir) = run_command([ 'pg_config', '--pkglibdir' ]);
chomp $libdir;
plan skip_all => "pg_cron is not installed for this server ($libdir/pg_cron.so is missing)"
  unless -e "$libdir/pg_cron.so";

# The recipe's SQL blocks: each fenced block right after the marker line.
my $doc = "$FindBin::RealBin/../../docs/operations.md";
my $marker =
  '<!-- not run: needs pg_cron; test/t/017_pg_cron.pl runs this block as written -->';
my @blocks;
{
	my @lines = split /\n/, slurp_file($doc);
	for (my $i = 0; $i < @lines; $i++)
	{
		next unless $lines[$i] eq $marker;
		my $j = $i + 1;
		$j++ while $j < @lines && $lines[$j] =~ /^\s*$/;
		die "$doc:" . ($j + 1) . ": a fenced sql block must follow the marker"
		  unless $j < @lines && $lines[$j] =~ /^```sql\s*$/;
		my @body;
		push @body, $lines[$j] while ++$j < @lines && $lines[$j] !~ /^```/;
		push @blocks, join("\n", @body) . "\n";
	}
}
# First the role, in the queues' database; then pg_cron's jobs, in pg_cron's.
is(scalar @blocks, 2, 'docs/operations.md marks the two blocks of its pg_cron recipe')
  or BAIL_OUT("the pg_cron recipe is not where this test looks for it");
note "recipe, in app:\n$blocks[0]\nrecipe, in postgres:\n$blocks[1]";

# pg_cron as it comes: installed in "postgres", a connection per run to
# cron.host (here the node's socket directory, where it may log in).
my $node = claimq_node('pgcron', no_preload => 1,
	conf => "shared_preload_libraries = 'pg_cron'\n");
$node->append_conf('postgresql.conf', "cron.host = '" . $node->host . "'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');

# What the reclaimer would act on: a claim whose lease runs out, a
# schedule, a done and a dead job kept for a second, a key claim that
# expires.
$node->safe_psql(
	'app', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('cronq');
	SELECT claimq.create_schedule('minutely', 'cronq', '* * * * *', payload => '{"from": "cron"}');
	SELECT claimq.create_queue('leased');
	SELECT claimq.enqueue('leased', '{}');
	SELECT claimq.create_queue('kept', keep_done => '1 second', keep_dead => '1 second');
	SELECT claimq.enqueue_many('kept', ARRAY['{}', '{}']::jsonb[]);
	SELECT claimq.complete(job_id, token) FROM claimq.claim('kept', 1);
	SELECT claimq.fail(job_id, token, 'no', permanent => true) FROM claimq.claim('kept', 1);
	SELECT count(*) FROM claimq.claim_keys('scope', ARRAY['k'], '1 second');
});
my ($job, $token) = split /\|/,
  $node->safe_psql('app', q{SELECT job_id, token FROM claimq.claim('leased', 1, lease => '1 second')});
is( $node->safe_psql('app', q{
		SELECT string_agg(queue || ':' || state, ',' ORDER BY queue, state) FROM claimq.jobs}),
	'kept:dead,kept:done,leased:claimed', 'a claim, a done and a dead job to act on');
is($node->safe_psql('app', 'SELECT count(*) FROM claimq.reclaimer_status WHERE pid IS NOT NULL'),
	'0', 'no reclaimer runs');

$node->safe_psql('app', $blocks[0]);
$node->safe_psql('postgres', $blocks[1]);
is( $node->safe_psql('postgres', q{
		SELECT string_agg(command || ' in ' || database || ' as ' || username, ', ' ORDER BY command)
		  FROM cron.job}),
	'SELECT claimq.maintain() in app as claimq_cron',
	'the recipe schedules maintain() in app, as its role');

my $deadline = time() + 200;
sub left { my $s = $deadline - time(); return $s > 1 ? $s : 1; }

poll_ok($node, 'app', qq{SELECT state FROM claimq.jobs WHERE job_id = $job},
	'pending', left(), 'the expired claim is put back');
is($node->safe_psql('app', "SELECT claimq.complete($job, $token)"),
	'f', 'its old token no longer completes it');
poll_ok($node, 'app', q{SELECT count(*) > 0 FROM claimq.jobs WHERE queue = 'cronq'},
	't', left(), 'the schedule fires');
poll_ok($node, 'app', q{SELECT count(*) FROM claimq.jobs WHERE queue = 'kept'},
	'0', left(), 'the done and the dead job are pruned after their retention');
poll_ok($node, 'app', 'SELECT count(*) FROM claimq.key_claim',
	'0', left(), 'the expired key claim is deleted');
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job_run_details WHERE status = 'failed'}),
	'0', 'no run of the recipe failed');
# What pg_cron did, and what runs now, for a failure's report.
note "pg_cron's runs:\n"
  . $node->safe_psql('postgres', q{
	SELECT jobid, status, start_time, end_time, return_message
	  FROM cron.job_run_details ORDER BY start_time, jobid});
note "sessions:\n"
  . $node->safe_psql('postgres', q{
	SELECT pid, datname, usename, state, wait_event_type, wait_event, query
	  FROM pg_stat_activity WHERE backend_type = 'client backend'});

is( $node->safe_psql('app', q{
		SELECT bool_and(extract(second FROM run_at) = 0 AND payload = '{"from": "cron"}')
		  FROM claimq.jobs WHERE queue = 'cronq'}),
	't', 'the schedule\'s jobs are at minute marks, with the payload');
is( $node->safe_psql('app', q{
		SELECT count(*) = count(DISTINCT run_at) FROM claimq.jobs WHERE queue = 'cronq'}),
	't', 'each occurrence once');
is( $node->safe_psql('app', q{
		SELECT last_job_id = (SELECT max(job_id) FROM claimq.jobs WHERE queue = 'cronq')
		  FROM claimq.schedules}),
	't', 'the schedule records the job it enqueued');
is($node->safe_psql('app', 'SELECT count(*) FROM claimq.reclaimer_status WHERE pid IS NOT NULL'),
	'0', 'still no reclaimer: pg_cron did it all');

$node->stop;
log_is_clean($node);
done_testing();
