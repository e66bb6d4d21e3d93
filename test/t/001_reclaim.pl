# The background reclaimer puts expired claims back: a claimed job whose
# holder is gone comes back pending with no attempt counted; a started one
# counts exactly one failed attempt (retried, or dead on its last attempt).
# reclaimer_status and the counters show the work.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('reclaim');
$node->start;

# The launcher and the worker for "postgres" are up.
poll_ok($node, 'postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'claimq launcher'",
	'1', 30, 'launcher runs');
poll_ok(
	$node, 'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'claimq reclaimer' AND datname = 'postgres'},
	'1', 30, 'a reclaimer runs for database postgres');

$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('tq', lease => '3s', max_attempts => 5,
							   retry_base => '1s');
	SELECT claimq.create_queue('once', lease => '3s', max_attempts => 1);
});

my ($ja, $jb, $jc) = split /\n/, $node->safe_psql(
	'postgres', q{
	SELECT claimq.enqueue('tq', '{"n": "a"}');
	SELECT claimq.enqueue('tq', '{"n": "b"}');
	SELECT claimq.enqueue('once', '{"n": "c"}');
});

# Each claim is made by a session that then goes away: nobody will settle.
my $exp_a = $node->safe_psql('postgres',
	"SELECT expires_at FROM claimq.claim('tq', lease => '3s', worker => 'gone')");
my $exp_b = $node->safe_psql('postgres',
	"SELECT expires_at FROM claimq.claim('tq', lease => '3s', worker => 'gone', start => true)");
my $exp_c = $node->safe_psql('postgres',
	"SELECT expires_at FROM claimq.claim('once', lease => '3s', worker => 'gone', start => true)");
isnt($exp_a, '', 'job a claimed');
isnt($exp_b, '', 'job b claimed and started');
isnt($exp_c, '', 'job c claimed and started');

# Before their leases pass, the reclaimer leaves them alone.
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(state || ':' || attempts, ',' ORDER BY job_id)
		   FROM claimq.job WHERE job_id IN ($ja, $jb, $jc)"),
	'claimed:0,running:1,running:1',
	'claims are held while their leases last');

poll_ok($node, 'postgres',
	"SELECT count(*) FROM claimq.job WHERE state IN ('claimed', 'running')",
	'0', 15, 'every expired claim is reclaimed');

is( $node->safe_psql(
		'postgres',
		"SELECT state, attempts, last_error IS NULL, expires_at IS NULL
		   FROM claimq.job WHERE job_id = $ja"),
	'pending|0|t|t',
	'claimed job back to pending with attempts untouched');
is( $node->safe_psql(
		'postgres',
		"SELECT state, attempts, last_error FROM claimq.job WHERE job_id = $jb"),
	'pending|1|lease expired',
	'started job pending again, its one attempt counted as failed');
is( $node->safe_psql(
		'postgres',
		"SELECT state, attempts, last_error FROM claimq.job WHERE job_id = $jc"),
	'dead|1|lease expired',
	'started job on its last attempt is dead');

# b was retried at the reclaim's time plus a backoff of 0.8 to 1 s, and the
# reclaim came after b's lease ended and within a few intervals of it.
is( $node->safe_psql(
		'postgres', qq{
	SELECT run_at >= '$exp_b'::timestamptz + interval '0.8 s',
		   run_at <= '$exp_b'::timestamptz + interval '1 s' + interval '3 s'
	  FROM claimq.job WHERE job_id = $jb}),
	't|t',
	'started job reclaimed after its lease, not long after');

# The status of the served database.
is( $node->safe_psql(
		'postgres', q{
	SELECT s.pid = a.pid, s.last_run > now() - interval '10 s',
		   s.total_reclaimed, s.last_error IS NULL
	  FROM claimq.reclaimer_status s
	  JOIN pg_stat_activity a
		ON a.backend_type = 'claimq reclaimer' AND a.datname = s.database
	 WHERE s.database = 'postgres'}),
	't|t|3|t',
	'reclaimer_status: worker pid, a recent last_run, 3 reclaimed, no error');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claimq.reclaimer_status'),
	'1', 'reclaimer_status has one row, for the one served database');

# It keeps running: last_run moves on, and later passes reclaim nothing.
my $last_run = $node->safe_psql('postgres',
	"SELECT last_run FROM claimq.reclaimer_status WHERE database = 'postgres'");
poll_ok(
	$node, 'postgres', qq{
	SELECT last_run > '$last_run' AND last_reclaimed = 0 AND total_reclaimed = 3
	  FROM claimq.reclaimer_status WHERE database = 'postgres'},
	't', 10, 'later passes run and reclaim nothing');

is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(concat_ws(':', queue, claimed, started, reclaimed, dead),
					  ',' ORDER BY queue)
	  FROM claimq.counters WHERE database = 'postgres'}),
	'once:1:1:1:1,tq:2:1:2:0',
	'counters: claimed, started, reclaimed and dead per queue');

# a is claimable again at once, b once its backoff is over.
poll_ok($node, 'postgres',
	"SELECT run_at <= clock_timestamp() FROM claimq.job WHERE job_id = $jb",
	't', 10, 'the retried job becomes ready after its backoff');
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(job_id::text, ',' ORDER BY job_id)
	  FROM claimq.claim('tq', max_jobs => 10, lease => '1 min')}),
	"$ja,$jb",
	'reclaimed jobs can be claimed again');

is(scalar(log_lines($node, qr/claimq reclaimer pass failed/)),
	0, 'no failed pass');
$node->stop;
log_is_clean($node);

done_testing();
