# A crash in the middle of a large fan-in: a thousand jobs, one job after
# all of them, and the server crash-restarts while a transaction that
# completes five hundred of them (and has counted them off the waiting job,
# as its commit would) is open.  After the restart the waiting job counts only the finishes
# that committed, the claims of the rest are still good, and finishing
# them makes the waiting job pending exactly once.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('workflow_crash');
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('batch', lease => '1 hour');
	SELECT claimq.create_queue('report');
});
my $child = $node->safe_psql(
	'postgres', q{
	SELECT claimq.enqueue('report', '{"report": true}',
						  after => ARRAY(SELECT claimq.enqueue_many('batch',
										   array_fill('{}'::jsonb, ARRAY[1000]))))});
is($node->safe_psql('postgres',
		"SELECT state || '/' || after_count FROM claimq.jobs WHERE job_id = $child"),
	'waiting/1000', 'a job waits on a thousand jobs');

# Every job of the batch claimed, in id order, with its token.
my @claimed = map { [ split /\|/ ] } split /\n/,
  $node->safe_psql('postgres',
	"SELECT job_id, token FROM claimq.claim('batch', 1000) ORDER BY job_id");
is(scalar @claimed, 1000, 'the thousand jobs are claimed');

sub complete_sql
{
	my @pairs = @_;
	return sprintf(
		'SELECT count(*) FILTER (WHERE outcome = %s) FROM claimq.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])',
		"'ok'",
		join(',', map { $_->[0] } @pairs),
		join(',', map { $_->[1] } @pairs));
}

is($node->safe_psql('postgres', complete_sql(@claimed[ 0 .. 299 ])),
	'300', 'three hundred complete and commit');

# Five hundred more complete in a transaction that never commits: the
# server crash-restarts while it is open.
my $holder = $node->background_psql('postgres');
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
$holder->query_safe('BEGIN');
is($holder->query_safe(complete_sql(@claimed[ 300 .. 799 ])),
	'500', 'five hundred complete in an open transaction');
is($holder->query_safe(
		"SELECT after_count FROM claimq.jobs WHERE job_id = $child"),
	'700', 'which judges their dependent at its commit: after_count lags');
# Judged now, as at the commit: the transaction holds the waiting job.
$holder->query_safe('SET CONSTRAINTS claimq.job_finish_judge IMMEDIATE');
is($holder->query_safe(
		"SELECT after_count FROM claimq.jobs WHERE job_id = $child"),
	'200', 'which has counted them off the waiting job');

my $log_offset = -s $node->logfile;
kill 'KILL', $holder_pid;
{
	local $PostgreSQL::Test::Utils::timeout_default = 60;
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$log_offset);
	$node->wait_for_log(qr/database system is ready to accept connections/,
		$log_offset);
}
pass('server restarted after the crash');
$holder->quit;

is( $node->safe_psql(
		'postgres', qq{
	SELECT state || '/' || after_count FROM claimq.jobs WHERE job_id = $child}),
	'waiting/700',
	'after the restart the waiting job counts only the finishes that committed');
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(state || ':' || n, ',' ORDER BY state)
	  FROM (SELECT state, count(*) AS n FROM claimq.jobs GROUP BY state) s}),
	'claimed:700,done:300,waiting:1',
	'the three hundred are kept done for it, the rest still claimed');
poll_ok(
	$node, 'postgres', q{
	SELECT waiting FROM claimq.queue_stats WHERE queue = 'report'},
	'1', 30, 'queue_stats counts it waiting');

# The claims made before the crash still hold: their tokens finish them.
is($node->safe_psql('postgres', complete_sql(@claimed[ 300 .. 998 ])),
	'699', 'all but one of the rest complete with the tokens from before the crash');
is( $node->safe_psql(
		'postgres', qq{
	SELECT state || '/' || after_count FROM claimq.jobs WHERE job_id = $child}),
	'waiting/1', 'the waiting job waits for the last one');
is($node->safe_psql('postgres', complete_sql($claimed[999])),
	'1', 'the last one completes');
is( $node->safe_psql(
		'postgres', qq{
	SELECT state || '/' || after_count FROM claimq.jobs WHERE job_id = $child}),
	'pending/0', 'and the waiting job is pending');
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(DISTINCT state, ',') || '/' || count(*)
	  FROM claimq.dependencies((SELECT array_agg(job_id) FROM claimq.jobs WHERE queue = 'report'))}),
	'done/1000', 'its thousand dependencies are all done');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM claimq.claim('report', 10)}),
	'1', 'it is claimed once');

$node->stop;
log_is_clean($node, qr/\(PID $holder_pid\) was terminated by signal 9/);

done_testing();
