# Without claimq's preload there is no reclaimer to fire schedules; pg_cron
# (Debian's postgresql-15-cron, 1.4, which runs jobs at most once a
# minute) can call fire_schedules instead, and schedules fire the same.
#
# A claimq schedule fires every minute; a pg_cron job calls
# fire_schedules() every minute.  Within about two minutes a job of the
# schedule is in the queue, with its run_at on a minute mark.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Debian packages pg_cron for its own PostgreSQL (15) only: on a server
# built from source there is none, and this says so rather than pass.
my ($libdir) = run_command([ 'pg_config', '--pkglibdir' ]);
chomp $libdir;
plan skip_all => "pg_cron is not installed for this server ($libdir/pg_cron.so is missing)"
  unless -e "$libdir/pg_cron.so";

my $node = claimq_node('pgcron', no_preload => 1,
	conf => "shared_preload_libraries = 'pg_cron'\ncron.database_name = 'postgres'\n"
	  . "cron.use_background_workers = on\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	CREATE EXTENSION pg_cron;
	SELECT claimq.create_queue('cronq');
	SELECT claimq.create_schedule('minutely', 'cronq', '* * * * *', payload => '{"from": "cron"}');
	SELECT cron.schedule('claimq-fire', '* * * * *', 'SELECT claimq.fire_schedules()');
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM claimq.reclaimer_status WHERE pid IS NOT NULL'),
	'0', 'no reclaimer runs');

poll_ok($node, 'postgres',
	q{SELECT count(*) > 0 FROM claimq.jobs WHERE queue = 'cronq'},
	't', 150, 'pg_cron fires the schedule');
is( $node->safe_psql('postgres', q{
		SELECT bool_and(extract(second FROM run_at) = 0 AND payload = '{"from": "cron"}')
		  FROM claimq.jobs WHERE queue = 'cronq'}),
	't', 'its jobs are at minute marks, with the payload');
is( $node->safe_psql('postgres', q{
		SELECT count(*) = count(DISTINCT run_at) FROM claimq.jobs WHERE queue = 'cronq'}),
	't', 'each occurrence once');
is( $node->safe_psql('postgres', q{
		SELECT last_job_id = (SELECT max(job_id) FROM claimq.job) FROM claimq.schedules}),
	't', 'the schedule records the job it enqueued');

$node->stop;
log_is_clean($node);
done_testing();
