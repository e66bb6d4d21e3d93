# Workflows under load, with workers killed mid-run: pgbench clients claim
# jobs of three shapes (fan-out 1 to 100, fan-in 100 to 1, chains of 50),
# some of which fail for good, while their backends are terminated between
# claim and settle; the reclaimer takes the stranded claims back.  In the
# end every job is finished exactly as the rules say: a job whose listed
# jobs all ended done ran once, after all of them had finished; one with a
# listed job dead or cancelled was cancelled without running
# (after_failed cancel) or ran (after_failed run).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('workflow_pgbench');
$node->start;

# Jobs are kept when done, so that the end state can be read; a killed
# attempt fails by its lease, so attempts are many.
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('wf', lease => '1 second', run_lease => '1 second',
							   max_attempts => 1000, retry_base => '10 milliseconds',
							   retry_max => '10 milliseconds', keep_done => '1 day');
	-- What the handlers did: one row per completed job, written in the
	-- transaction of its complete.
	CREATE TABLE ran (job_id bigint, worker text);

	-- claim: up to 5 jobs, started, committed on its own.
	CREATE FUNCTION wf_claim(w text) RETURNS bigint LANGUAGE sql AS $$
		SELECT count(*) FROM claimq.claim('wf', 5, worker => w, start => true)
	$$;
	-- settle what this worker holds, each job after nap seconds of work:
	-- fail the jobs marked to fail, complete the others, recording the run
	-- with the complete.
	CREATE FUNCTION wf_settle(w text, nap float8) RETURNS bigint LANGUAGE plpgsql AS $$
	DECLARE
		j record;
		n bigint := 0;
	BEGIN
		FOR j IN SELECT job_id, token, payload FROM claimq.job
				  WHERE worker = w AND state = 'running' ORDER BY job_id LOOP
			PERFORM pg_sleep(nap);
			IF j.payload ? 'fail' THEN
				PERFORM claimq.fail(j.job_id, j.token, 'planned', permanent => true);
			ELSIF claimq.complete(j.job_id, j.token, jsonb_build_object('by', w)) THEN
				INSERT INTO ran VALUES (j.job_id, w);
				n := n + 1;
			END IF;
		END LOOP;
		RETURN n;
	END
	$$;
	-- claim and settle at once until nothing is left to claim.
	CREATE FUNCTION wf_drain() RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		WHILE wf_claim('drain') > 0 LOOP
			PERFORM wf_settle('drain', 0);
		END LOOP;
		RETURN true;
	END
	$$;
});

# The shapes, five of each, in one transaction (as a workflow is
# enqueued): a root and 100 jobs after it; 100 jobs and one after all of
# them; a chain of 50.  One root of the fan-outs, one job of two fan-ins
# and one link of two chains fail; one of those fan-ins' sinks runs anyway.
$node->safe_psql(
	'postgres', q{
DO $$
DECLARE
	root bigint;
	ids bigint[];
	prev bigint;
BEGIN
	FOR s IN 1 .. 5 LOOP
		root := claimq.enqueue('wf', CASE WHEN s = 1 THEN '{"fail": true}' ELSE '{}' END::jsonb);
		PERFORM claimq.enqueue_many('wf', array_fill('{}'::jsonb, ARRAY[100]), after => ARRAY[root]);

		ids := ARRAY(SELECT claimq.enqueue_many('wf',
				 ARRAY(SELECT CASE WHEN s <= 2 AND g = 50 THEN '{"fail": true}' ELSE '{}' END::jsonb
						 FROM generate_series(1, 100) g)));
		PERFORM claimq.enqueue('wf', '{"sink": true}', after => ids,
							   after_failed => CASE WHEN s = 2 THEN 'run' ELSE 'cancel' END);

		prev := NULL;
		FOR k IN 1 .. 50 LOOP
			prev := claimq.enqueue('wf', CASE WHEN s <= 2 AND k = 10 THEN '{"fail": true}' ELSE '{}' END::jsonb,
								   after => CASE WHEN prev IS NULL THEN NULL ELSE ARRAY[prev] END);
		END LOOP;
	END LOOP;
END
$$;});
is($node->safe_psql('postgres', 'SELECT count(*) FROM claimq.job'),
	5 * (101 + 101 + 50), 'the workflows are enqueued');

my $script = $node->basedir . '/worker.sql';
open(my $fh, '>', $script) or die "could not write $script: $!";
print $fh q{
SELECT set_config('application_name', 'w' || :client_id, false);
SELECT wf_claim('w' || :client_id);
SELECT wf_settle('w' || :client_id, 0.05);
};
close($fh);

my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '6', '-j', '2', '-T', '6',
		'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
	],
	'>', \$out, '2>', \$err);

# Kill up to three of the workers while they hold started jobs, one at a
# time (on a busy machine the run may end before the third):
# each loses the claims it had not settled, which the reclaimer then takes
# back.  A kill counts once the worker's jobs are seen left running.
my $killed = 0;
my $deadline = time() + 30;
while ($killed < 3 && time() < $deadline)
{
	my ($pid, $worker) = split /\|/, $node->safe_psql(
		'postgres', q{
		SELECT a.pid, a.application_name FROM pg_stat_activity a
		 WHERE a.application_name IN (SELECT worker FROM claimq.job WHERE state = 'running')
		 LIMIT 1});
	if (defined $worker
		&& $node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)") eq 't'
		&& $node->poll_query_until('postgres',
			"SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $pid)")
		&& $node->safe_psql('postgres',
			"SELECT count(*) FROM claimq.job WHERE worker = '$worker' AND state = 'running'") > 0)
	{
		$killed++;
		select(undef, undef, undef, 1);
	}
	else
	{
		select(undef, undef, undef, 0.02);
	}
}
$pgbench->finish;
cmp_ok($killed, '>=', 1,
	"workers were terminated holding started jobs ($killed of the three tried for)");
like($err, qr/terminat|abort|connection/i, 'pgbench saw its clients lose their connections')
  or diag($out . $err);

# Finish the rest with one worker that works at once; stranded claims come
# back by their lease.
poll_ok(
	$node, 'postgres', q{
	SELECT wf_drain()
	   AND NOT EXISTS (SELECT 1 FROM claimq.job
					   WHERE state IN ('waiting', 'pending', 'claimed', 'running'))},
	't', 120, 'every job finishes');

# The rules, job by job.
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM claimq.job
	 WHERE (payload ? 'fail') <> (state = 'dead')}),
	'0', 'the jobs marked to fail are dead, and only they');
is( $node->safe_psql(
		'postgres', q{
	WITH verdict AS (
		SELECT w.job_id, w.state, w.after_failed, w.attempts,
			   bool_and(a.state = 'done') AS all_done
		  FROM claimq.job w
		  JOIN claimq.job_after e ON e.set_id = w.after_set
		  JOIN claimq.job a ON a.job_id = e.after_id
		 GROUP BY w.job_id, w.state, w.after_failed, w.attempts)
	SELECT count(*) FROM verdict v
	 WHERE NOT (CASE WHEN v.all_done OR v.after_failed = 'run'
					 THEN v.state IN ('done', 'dead')
					 ELSE v.state = 'cancelled' AND v.attempts = 0 END)}),
	'0',
	'a job after others ran if they all ended done (or after_failed is run), else was cancelled without running');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM claimq.job w
	  JOIN claimq.job_after e ON e.set_id = w.after_set
	  JOIN claimq.job a ON a.job_id = e.after_id
	 WHERE w.started_at < a.finished_at}),
	'0', 'no job started before a job it runs after had finished');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM claimq.job j
	  LEFT JOIN (SELECT job_id, count(*) AS n FROM ran GROUP BY job_id) r USING (job_id)
	 WHERE coalesce(r.n, 0) <> CASE WHEN j.state = 'done' THEN 1 ELSE 0 END}),
	'0', 'each done job was completed exactly once, and nothing else was');
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(state || ':' || n, ',' ORDER BY state)
	  FROM (SELECT state, count(*) AS n FROM claimq.job GROUP BY state) s}),
	'cancelled:' . (100 + 1 + 40 + 40) . ',dead:' . (1 + 2 + 2)
	  . ',done:' . (5 * 252 - 181 - 5),
	'the counts: a failed root cancels its 100, a failed fan-in job its sink (one sink runs anyway), a failed link the rest of its chain');
cmp_ok(
	$node->safe_psql('postgres',
		"SELECT count(*) FROM claimq.job WHERE attempts > 1"),
	'>', 0, 'some attempts were lost with the killed workers and retried');

$node->stop;
log_is_clean($node, qr/terminating connection due to administrator command/);

done_testing();
