# A regular backend killed with SIGKILL makes the server crash-restart.  The
# launcher and the worker come back (new processes), the claims made before
# the crash are reclaimed (and counted, under the queue's name), a claim
# that was never committed left nothing behind, and the jobs can then be
# worked to completion.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('crash');
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('tq', lease => '2s', retry_base => '1s');
	SELECT claimq.enqueue_many('tq', array_fill('{}'::jsonb, ARRAY[4]));
});

my $pids_sql = q{
	SELECT string_agg(pid::text, ',' ORDER BY backend_type)
	  FROM pg_stat_activity
	 WHERE backend_type IN ('claimq launcher', 'claimq reclaimer')};
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type IN ('claimq launcher', 'claimq reclaimer')},
	'2', 30, 'launcher and worker run');
my $old_pids = $node->safe_psql('postgres', $pids_sql);
my ($old_launcher, $old_worker) = split /,/, $old_pids;

# A worker session: claims two jobs, starts a third, and has a fourth
# claimed in a transaction it never commits.
my $holder = $node->background_psql('postgres');
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
is( $holder->query_safe(
		"SELECT count(*) FROM claimq.claim('tq', max_jobs => 2, lease => '3s', worker => 'h')"
	),
	'2',
	'two jobs claimed');
is( $holder->query_safe(
		"SELECT count(*) FROM claimq.claim('tq', lease => '3s', worker => 'h', start => true)"
	),
	'1',
	'one job claimed and started');
my $started = $node->safe_psql('postgres',
	"SELECT job_id FROM claimq.job WHERE state = 'running'");
$holder->query_safe('BEGIN');
is( $holder->query_safe(
		"SELECT count(*) FROM claimq.claim('tq', lease => '1h', worker => 'h')"),
	'1',
	'one job claimed in an open transaction');

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

poll_ok(
	$node, 'postgres', qq{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type IN ('claimq launcher', 'claimq reclaimer')
	   AND pid NOT IN ($old_launcher, $old_worker)},
	'2', 30, 'a new launcher and a new worker run');
is( $node->safe_psql(
		'postgres', q{
	SELECT s.pid = a.pid
	  FROM claimq.reclaimer_status s
	  JOIN pg_stat_activity a
		ON a.backend_type = 'claimq reclaimer' AND a.datname = s.database}),
	't',
	'reclaimer_status names the new worker');

poll_ok($node, 'postgres',
	"SELECT count(*) FROM claimq.job WHERE state IN ('claimed', 'running')",
	'0', 15, 'the claims made before the crash are reclaimed');
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(concat_ws(':', state, attempts, coalesce(last_error, '-')),
					  ',' ORDER BY attempts, job_id)
	  FROM claimq.job}),
	'pending:0:-,pending:0:-,pending:0:-,pending:1:lease expired',
	'claimed jobs pending with no attempt; the started one retried after one attempt'
);
is( $node->safe_psql(
		'postgres', "SELECT attempts FROM claimq.job WHERE job_id = $started"),
	'1',
	'the retried job is the one that was started');
is( $node->safe_psql(
		'postgres', "SELECT total_reclaimed FROM claimq.reclaimer_status"),
	'3', 'the new worker counts what it reclaimed');
# Shared memory is new: the reclaim is the queue's first count since, and
# knows only the queue's id; counters() still names the queue.
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(format('%s:%s:%s', coalesce(queue, '(none)'), claimed, reclaimed),
					  ',')
	  FROM claimq.counters}),
	'tq:0:3',
	'the counters count the reclaim, and only it, under the queue\'s name');

# A worker can now do the jobs: claim each once it is ready, complete it.
poll_ok(
	$node, 'postgres',
	"SELECT bool_and(run_at <= clock_timestamp()) FROM claimq.job",
	't', 10, 'all jobs ready again');
is( $node->safe_psql(
		'postgres', q{
	WITH c AS (SELECT array_agg(job_id) AS ids, array_agg(token) AS tokens
				 FROM claimq.claim('tq', max_jobs => 10, lease => '1 min',
								   start => true))
	SELECT string_agg(r.outcome, ',')
	  FROM c, claimq.complete(c.ids, c.tokens) r}),
	'ok,ok,ok,ok',
	'all four jobs claimed again and completed');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claimq.job'),
	'0', 'no job is left');

$node->stop;
log_is_clean($node, qr/\(PID $holder_pid\) was terminated by signal 9/);
is(scalar(log_lines($node, qr/\(PID $holder_pid\) was terminated by signal 9/)),
	1, 'the one process killed was the worker session');

done_testing();
