# The census (jobs per queue and state, kept as changes commit) on a live
# server: what the regression tests cannot show.
#
#  - After a start the reclaimer counts by itself; metrics() then reads the
#    census, and its figures are queue_stats's.
#  - Under a pgbench run of 6 clients that enqueue, claim, complete, fail,
#    cancel and roll back, while prepared transactions keep making the
#    census unknown so that the reclaimer counts again and again in the
#    middle of the traffic, the census ends equal to the table: no commit
#    is lost or added twice by a recount.
#  - A crash empties shared memory: metrics() reads queue_stats until the
#    reclaimer has counted again.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = claimq_node('census', conf => "max_prepared_transactions = 4\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION claimq');
$node->safe_psql('postgres', slurp_file("$FindBin::RealBin/../census_wrong.sql"));
$node->safe_psql('postgres', <<'SQL');
	SELECT claimq.create_queue('ca', keep_done => '1 day', max_attempts => 3,
							   retry_base => '1 second', retry_max => '1 second');
	SELECT claimq.create_queue('cb');
	SELECT count(*) FROM claimq.enqueue_many('ca', array_fill('{}'::jsonb, ARRAY[3000]));
	SELECT count(*) FROM claimq.enqueue_many('cb', array_fill('{}'::jsonb, ARRAY[500]),
											 run_at => now() + interval '1 hour');
	-- metrics()'s claimq_jobs lines against queue_stats's counts.
	CREATE VIEW metrics_wrong AS
	WITH m AS (SELECT (regexp_match(l, 'queue="([^"]*)",state="([^"]*)"\} (\d+)')) AS f
				 FROM regexp_split_to_table(claimq.metrics(), E'\n') l
				WHERE l LIKE 'claimq_jobs{%'),
		 s AS (SELECT q.queue, v.state, v.n
				 FROM claimq.queue_stats q,
					  LATERAL (VALUES ('ready', q.ready), ('scheduled', q.scheduled),
									  ('claimed', q.claimed), ('running', q.running),
									  ('expired', q.expired), ('dead', q.dead),
									  ('done', q.done), ('cancelled', q.cancelled),
									  ('waiting', q.waiting)) v(state, n))
	SELECT s.queue, s.state, s.n, m.f[3]
	  FROM s FULL JOIN m ON m.f[1] = s.queue AND m.f[2] = s.state
	 WHERE s.n IS DISTINCT FROM m.f[3]::bigint;
SQL
my $metrics_wrong =
  q{SELECT string_agg(concat_ws(' ', queue, state, n, f), ', ') FROM metrics_wrong};

poll_ok($node, 'postgres', 'SELECT valid FROM census_valid', 't', 30,
	'the reclaimer counts after the start');
is($node->safe_psql('postgres', 'SELECT count(*) FROM census_wrong'),
	'0', 'its counts are the table\'s');
is($node->safe_psql('postgres', $metrics_wrong),
	'', 'metrics() from the census shows queue_stats\'s counts');

#
# Traffic, and recounts in the middle of it.  Each client's transaction
# does one thing to the jobs; some are rolled back in part.
#
my $script = $node->basedir . '/census_traffic.sql';
open my $fh, '>', $script or die $!;
print $fh q{
\set r random(1, 8)
BEGIN;
SELECT count(*) FROM claimq.enqueue_many(CASE WHEN :r = 1 THEN 'ca' ELSE 'cb' END,
										 array_fill('{}'::jsonb, ARRAY[3])) WHERE :r <= 2;
SELECT count(*) FROM claimq.claim('ca', 2, start => (:r = 4)) c,
	LATERAL claimq.complete(c.job_id, c.token) WHERE :r IN (3, 4);
SELECT count(*) FROM claimq.claim('ca', 2, start => true) c,
	LATERAL claimq.fail(c.job_id, c.token, 'no', permanent => c.job_id % 2 = 0)
 WHERE :r = 5;
SELECT count(*) FROM claimq.cancel(ARRAY(SELECT job_id FROM claimq.job
										  WHERE state = 'pending' ORDER BY job_id DESC LIMIT 1))
 WHERE :r = 6;
SAVEPOINT s;
SELECT count(*) FROM claimq.claim('ca', 1) WHERE :r = 7;
ROLLBACK TO s;
SELECT count(*) FROM claimq.claim('ca', 1, lease => '1 second') WHERE :r = 8;
SELECT count(*) FROM claimq.claim('ca', 1, start => true, lease => '1 hour') WHERE :r = 8;
END;
};
close $fh;

my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '6', '-j', '2', '-T', '12', '-f', $script,
		'-h', $node->host, '-p', $node->port, 'postgres'
	],
	'>', \$out, '2>', \$err);

# Every round, a prepared transaction that enqueues makes the census
# unknown; once it is committed, the reclaimer counts again while the
# clients go on.
my $recounts = 0;
for my $round (1 .. 15)
{
	$node->safe_psql('postgres', q{
		BEGIN;
		SELECT claimq.enqueue('cb', '{}');
		PREPARE TRANSACTION 'census';
	});
	my $unknown = $node->safe_psql('postgres', 'SELECT valid FROM census_valid');
	usleep(200_000);
	$node->safe_psql('postgres', "COMMIT PREPARED 'census'");
	$recounts++
	  if $unknown eq 'f'
	  && poll_quiet($node, 'SELECT valid FROM census_valid', 't', 3);
	last unless $pgbench->pumpable;
}
$pgbench->finish;
like($out, qr/processed: [1-9]/, 'pgbench: 6 clients changed jobs for 12 s')
  or diag($err);
cmp_ok($recounts, '>=', 5, "the reclaimer counted again under the traffic ($recounts times)");

poll_ok($node, 'postgres', 'SELECT valid FROM census_valid', 't', 30,
	'the census is valid after the traffic');
is($node->safe_psql('postgres', 'SELECT count(*) FROM census_wrong'),
	'0', 'and equal to the table: no commit lost or counted twice');
# Leases of a second and retries after a second have all run out by now:
# nothing changes with the clock while the two are compared.
sleep(3);
is($node->safe_psql('postgres', $metrics_wrong),
	'', 'metrics() shows queue_stats\'s counts');
is( $node->safe_psql(
		'postgres', q{SELECT string_agg(DISTINCT state, ',' ORDER BY state) FROM claimq.job}),
	'cancelled,dead,done,pending,running',
	'the traffic left jobs in every state that lasts (the claims of a second were reclaimed)');

#
# A crash: shared memory starts empty.  metrics() is right all the same
# (from queue_stats), and the reclaimer counts again.
#
my $bg = $node->background_psql('postgres');
my $victim = $bg->query_safe('SELECT pg_backend_pid()');
kill 'KILL', $victim;
eval { $bg->quit };
$node->poll_query_until('postgres', 'SELECT 1', '1')
  or die 'the server did not come back';
is($node->safe_psql('postgres', $metrics_wrong),
	'', 'after a crash, metrics() shows queue_stats\'s counts');
poll_ok($node, 'postgres', 'SELECT valid FROM census_valid', 't', 30,
	'the reclaimer counts again after the crash');
is($node->safe_psql('postgres', 'SELECT count(*) FROM census_wrong'),
	'0', 'its counts are the table\'s');

log_is_clean($node, qr/\(PID $victim\) was terminated by signal 9/);
$node->stop;
done_testing();

# Like poll_ok, without a test: true if $sql returned $expected in time.
sub poll_quiet
{
	my ($node, $sql, $expected, $seconds) = @_;
	my $t0 = time();
	while (time() - $t0 < $seconds)
	{
		my $got = $node->safe_psql('postgres', $sql);
		return 1 if $got eq $expected;
		usleep(50_000);
	}
	return 0;
}
