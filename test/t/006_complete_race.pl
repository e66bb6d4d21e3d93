# A reclaim pass racing a worker's complete never overwrites the
# completion.  Two clients claim jobs with a 50 ms lease and complete them
# 35 to 65 ms later, right around expiry, while the reclaimer passes every
# 10 ms.  A client records a job in a side table, in the transaction of the
# complete, only when complete said ok.  At the end every job is either
# completed exactly once, or still in the queue and not done; none is
# lost; completed jobs of a queue that keeps nothing are gone, those of a
# queue that keeps done jobs are done.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('race', conf => "claimq.reclaim_interval = '10ms'\n");
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('del', max_attempts => 1000);
	SELECT claimq.create_queue('keep', max_attempts => 1000,
							   keep_done => '1 hour');
	CREATE TABLE all_jobs (job_id bigint PRIMARY KEY, queue text NOT NULL);
	CREATE TABLE done_log (job_id bigint NOT NULL, queue text NOT NULL);
	INSERT INTO all_jobs
	SELECT claimq.enqueue_many(q, array_fill('{}'::jsonb, ARRAY[1000])), q
	  FROM unnest(ARRAY['del', 'keep']) AS q;
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM all_jobs'),
	'2000', '2000 jobs enqueued');

# One client: for 8 seconds, claim up to 5 jobs of a queue picked at
# random (started or not, at random), commit, wait about a lease, complete.
my $client = q{
DO $client$
DECLARE
	deadline timestamptz := clock_timestamp() + interval '8 s';
	q text;
	ids bigint[];
	tokens bigint[];
BEGIN
	WHILE clock_timestamp() < deadline LOOP
		q := CASE WHEN random() < 0.5 THEN 'del' ELSE 'keep' END;
		SELECT array_agg(c.job_id), array_agg(c.token) INTO ids, tokens
		  FROM claimq.claim(q, max_jobs => 5, lease => '50 ms',
							start => random() < 0.5) c;
		COMMIT;
		IF ids IS NULL THEN
			PERFORM pg_sleep(0.01);
			CONTINUE;
		END IF;
		PERFORM pg_sleep(0.035 + random() * 0.03);
		INSERT INTO done_log
		SELECT r.job_id, q FROM claimq.complete(ids, tokens) r
		 WHERE r.outcome = 'ok';
		COMMIT;
	END LOOP;
END
$client$;
};

my @clients;
for my $i (1 .. 2)
{
	my %c = (out => '', err => '');
	$c{h} = IPC::Run::start(
		[
			$node->installed_command('psql'), '-XAtq',
			'-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'),
			'-c', $client
		],
		'>', \$c{out}, '2>', \$c{err},
		IPC::Run::timeout(60));
	push @clients, \%c;
}
for my $i (0 .. $#clients)
{
	my $c = $clients[$i];
	my $ok = eval { $c->{h}->finish };
	ok($ok, "client " . ($i + 1) . " ran without error")
	  or diag("stderr: $c->{err}" . ($@ ? "\n$@" : ''));
}

# Let the last leases run out and be reclaimed.
poll_ok($node, 'postgres',
	"SELECT count(*) FROM claimq.job WHERE state IN ('claimed', 'running')",
	'0', 10, 'every claim left is reclaimed');

my %counts = map { split /\|/ } split /\n/, $node->safe_psql(
	'postgres', q{
	SELECT 'logged', count(*) FROM done_log
	UNION ALL
	SELECT 'completed', coalesce(sum(completed), 0) FROM claimq.counters
	UNION ALL
	SELECT 'reclaimed', coalesce(sum(reclaimed), 0) FROM claimq.counters
	UNION ALL
	SELECT 'stale', coalesce(sum(stale), 0) FROM claimq.counters
});
note explain \%counts;
cmp_ok($counts{logged}, '>', 0, 'clients completed jobs');
cmp_ok($counts{reclaimed}, '>', 0, 'the reclaimer reclaimed jobs meanwhile');
cmp_ok($counts{stale}, '>', 0,
	'some completes came too late (so the race was run)');
is($counts{completed}, $counts{logged},
	'every complete counted as ok was logged by its client');

is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM (SELECT job_id FROM done_log
						   GROUP BY job_id HAVING count(*) > 1) d}),
	'0',
	'no job was completed twice');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM done_log d JOIN claimq.job j USING (job_id)
	 WHERE d.queue = 'del'}),
	'0',
	'jobs completed with outcome ok are gone from claimq.job');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM claimq.job j
	  LEFT JOIN (SELECT DISTINCT job_id FROM done_log) d USING (job_id)
	 WHERE (j.state = 'done') <> (d.job_id IS NOT NULL)}),
	'0',
	'a job is done exactly when a complete said ok (kept queue)');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM claimq.job WHERE state NOT IN ('done', 'pending')}),
	'0',
	'every other job is pending');
cmp_ok($node->safe_psql('postgres',
		"SELECT count(*) FROM claimq.job WHERE state = 'pending'"),
	'>', 0, 'jobs were left (the clients never ran out of work)');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM all_jobs a
	 WHERE NOT EXISTS (SELECT FROM claimq.job j WHERE j.job_id = a.job_id)
	   AND NOT EXISTS (SELECT FROM done_log d WHERE d.job_id = a.job_id)}),
	'0',
	'no job was lost');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM done_log d JOIN all_jobs a USING (job_id)
	 WHERE d.queue <> a.queue}),
	'0',
	'each job was completed in its own queue');

is( $node->safe_psql(
		'postgres',
		"SELECT last_error IS NULL FROM claimq.reclaimer_status WHERE database = 'postgres'"
	),
	't',
	'the reclaimer reports no error');
is(scalar(log_lines($node, qr/claimq reclaimer pass failed/)),
	0, 'no failed pass');
$node->stop;
log_is_clean($node);

done_testing();
