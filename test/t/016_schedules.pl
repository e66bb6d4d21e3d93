# Schedules fire each occurrence once, across a crash and a failover.
#
# Part 1: the reclaimer fires two schedules of "@every 1 second", one with
# missed => 'all' and one with 'once'.  The server stops with an immediate
# shutdown for a few seconds.  After the restart the reclaimer catches
# up: "all" has exactly one job per occurrence up to now, none twice and
# none missing; "once" has none twice and skipped the occurrences that
# came due while the server was down but one.
#
# Part 2: a streaming standby is cut off while the primary keeps firing;
# the primary stops, and the standby is promoted.  The occurrences the old
# primary fired but never sent are fired again by the new primary, once.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The occurrences of a schedule's jobs: "count|distinct|missing|all up to
# now", where missing counts occurrences (anchor + k seconds, up to the
# latest job) that have no job.
sub occurrences
{
	my ($node, $schedule) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*), count(DISTINCT j.run_at),
			   (SELECT count(*) FROM generate_series(1,
						(SELECT extract(epoch FROM max(j2.run_at) - s.anchor)::int
						   FROM claimq.job j2 WHERE j2.queue_id = s.queue_id)) k
				 WHERE NOT EXISTS (SELECT FROM claimq.job j3
									WHERE j3.queue_id = s.queue_id
									  AND j3.run_at = s.anchor + k * interval '1 second'))
		  FROM claimq.schedule s JOIN claimq.job j ON j.queue_id = s.queue_id
		 WHERE s.name = '$schedule'
		 GROUP BY s.anchor, s.queue_id});
}

my $node = claimq_node('sched', allows_streaming => 1);
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('qa');
	SELECT claimq.create_queue('qo');
	SELECT claimq.create_schedule('all1', 'qa', '@every 1 second', missed => 'all');
	SELECT claimq.create_schedule('once1', 'qo', '@every 1 second', missed => 'once');
});

poll_ok($node, 'postgres',
	"SELECT count(*) >= 3 FROM claimq.job j JOIN claimq.queue q USING (queue_id) WHERE q.name = 'qa'",
	't', 30, 'the reclaimer fires the schedules');

$node->stop('immediate');
sleep 4;
$node->start;
my $restarted = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
poll_ok($node, 'postgres',
	"SELECT count(*) > 0 FROM claimq.schedule WHERE next_run_at > '$restarted'::timestamptz + interval '2 seconds'",
	't', 30, 'after the restart the reclaimer catches up');

my ($n, $distinct, $missing) = split /\|/, occurrences($node, 'all1');
cmp_ok($n, '>=', 8, "\"all\": $n jobs, over the time before and after the crash");
is($distinct, $n, '"all": no occurrence twice');
is($missing, '0', '"all": no occurrence missing, those of the downtime included');

($n, $distinct, $missing) = split /\|/, occurrences($node, 'once1');
is($distinct, $n, '"once": no occurrence twice');
cmp_ok($missing, '>=', 2, "\"once\": the downtime's occurrences but one were skipped ($missing)");

# Part 2: failover.
$node->safe_psql('postgres', q{
	SELECT claimq.drop_schedule('once1');
	SELECT claimq.create_queue('qf');
	SELECT claimq.create_schedule('fail1', 'qf', '@every 1 second', missed => 'all');
});
$node->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('sched_standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby);
poll_ok($node, 'postgres',
	"SELECT count(*) >= 2 FROM claimq.job j JOIN claimq.queue q USING (queue_id) WHERE q.name = 'qf'",
	't', 30, 'the primary fires the new schedule');
$node->wait_for_catchup($standby);
$standby->stop;

# The primary fires on; none of it reaches the standby.
my $before = $node->safe_psql('postgres', q{
	SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id) WHERE q.name = 'qf'});
poll_ok($node, 'postgres', qq{
	SELECT count(*) >= $before + 3 FROM claimq.job j JOIN claimq.queue q USING (queue_id)
	 WHERE q.name = 'qf'},
	't', 30, 'the primary fires occurrences the standby never receives');
$node->stop('immediate');

$standby->start;
$standby->promote;
poll_ok($standby, 'postgres',
	"SELECT count(*) > 0 FROM claimq.schedule WHERE name = 'fail1' AND next_run_at > clock_timestamp()",
	't', 60, 'the promoted standby catches up with the schedule');
($n, $distinct, $missing) = split /\|/, occurrences($standby, 'fail1');
cmp_ok($n, '>=', $before + 3, "the new primary has a job for each occurrence ($n)");
is($distinct, $n, 'no occurrence twice');
is($missing, '0', 'none missing: those the old primary fired and lost are fired again');

$standby->stop;
log_is_clean($node);
log_is_clean($standby);
done_testing();
