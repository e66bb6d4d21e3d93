# Workflows under load, with crossing dependents: three pgbench workers
# each claim a few jobs, then complete them in several calls in one
# transaction, while a producer enqueues jobs after jobs that are in
# flight (claimed or running), one in each of its transactions, which
# stay open a moment.  (Both lock the jobs they name or complete in id
# order: an enqueue after jobs that another transaction has been settling
# in another order can deadlock with it, docs/reference.md says.)  A job
# after several in-flight jobs is a dependent that the workers' finishes
# cross on; the producer's enqueues race the completes of the jobs they
# name.  No call deadlocks, no holder's complete is refused, no dependent
# is judged before its jobs finished, and none is left waiting.  Run in
# both editions, each in a database of its own: the C edition's extension,
# and the portable edition's plain script.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $top = "$FindBin::RealBin/../..";
my $portable = "$top/claimq-portable.sql";
ok(-e $portable, 'make portable wrote claimq-portable.sql');

my $node = claimq_node('workflow_crossing',
	conf => "claimq.reclaimer = off\ndeadlock_timeout = '100ms'\n");
$node->start;

sub run_edition
{
	my ($edition) = @_;
	my $db = "wf_$edition";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	if ($edition eq 'c')
	{
		$node->safe_psql($db, 'CREATE EXTENSION claimq');
	}
	else
	{
		my ($ret, $out, $err) = $node->psql($db, slurp_file($portable));
		is($ret, 0, 'the portable edition is installed') or diag($err);
	}
	is($node->safe_psql($db, 'SELECT claimq.edition()'), $edition, "edition $edition");
	my $log_offset = -s $node->logfile;

	# The jobs' queue keeps nothing, another queue keeps done jobs: the path of
	# complete that a wait for an enqueue after its job once made refuse the
	# holder.  Leases are long and the reclaimer is off: nothing is reclaimed,
	# and a job that jobs ran after is kept (done) to the end.
	$node->safe_psql(
		$db, q{
		SELECT claimq.create_queue('wf', lease => '5 minutes', run_lease => '5 minutes');
		SELECT claimq.create_queue('kept', keep_done => '1 day');
		-- Every job enqueued, with the enqueue; every run, with its complete
		-- (when the handler started and when its complete returned); every
		-- complete refused.
		CREATE TABLE made (job_id bigint);
		CREATE TABLE ran (job_id bigint, worker text, started_at timestamptz,
						  done_at timestamptz, after bigint[]);
		CREATE TABLE refused (job_id bigint, worker text);

		-- claim: up to 4 jobs, started, committed on its own.
		CREATE FUNCTION wf_claim(w text) RETURNS bigint LANGUAGE sql AS $$
			SELECT count(*) FROM claimq.claim('wf', 4, worker => w, start => true)
		$$;
		-- complete what this worker holds, one call per job, in id order (the
		-- order in which an enqueue locks the jobs it names), nap seconds
		-- apart, all in the caller's transaction.
		CREATE FUNCTION wf_settle(w text, nap float8) RETURNS bigint LANGUAGE plpgsql AS $$
		DECLARE
			j record;
			n bigint := 0;
		BEGIN
			FOR j IN SELECT job_id, token, started_at, payload FROM claimq.job
					  WHERE worker = w AND state = 'running' ORDER BY job_id LOOP
				PERFORM pg_sleep(nap);
				IF claimq.complete(j.job_id, j.token) THEN
					INSERT INTO ran
					VALUES (j.job_id, w, j.started_at, clock_timestamp(),
							ARRAY(SELECT jsonb_array_elements_text(j.payload->'after')::bigint));
					n := n + 1;
				ELSE
					INSERT INTO refused VALUES (j.job_id, w);
				END IF;
			END LOOP;
			RETURN n;
		END
		$$;
		-- two new jobs, and one after two or three jobs in flight, if there
		-- are (one of which may have completed and gone meanwhile: 23503).
		CREATE FUNCTION wf_produce() RETURNS bigint LANGUAGE plpgsql AS $$
		DECLARE
			listed bigint[] := ARRAY(SELECT job_id FROM claimq.job
									  WHERE state IN ('claimed', 'running')
									  ORDER BY random() LIMIT 2 + (random() * 1.5)::int);
		BEGIN
			INSERT INTO made SELECT claimq.enqueue_many('wf', array_fill('{}'::jsonb, ARRAY[2]));
			IF cardinality(listed) < 2 THEN
				RETURN 0;
			END IF;
			BEGIN
				INSERT INTO made
				VALUES (claimq.enqueue('wf', jsonb_build_object('after', listed), after => listed));
			EXCEPTION WHEN foreign_key_violation THEN
				RETURN 0;
			END;
			RETURN 1;
		END
		$$;
		-- claim and complete at once until nothing is left to claim.
		CREATE FUNCTION wf_drain() RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN
			WHILE wf_claim('drain') > 0 LOOP
				PERFORM wf_settle('drain', 0);
			END LOOP;
			RETURN true;
		END
		$$;
		INSERT INTO made SELECT claimq.enqueue_many('wf', array_fill('{}'::jsonb, ARRAY[100]));
	});

	my $worker = $node->basedir . "/worker_$edition.sql";
	open(my $fh, '>', $worker) or die "could not write $worker: $!";
	print $fh q{
	SELECT wf_claim('w' || :client_id);
	BEGIN;
	SELECT wf_settle('w' || :client_id, 0.005);
	COMMIT;
	};
	close($fh);
	my $producer = $node->basedir . "/producer_$edition.sql";
	open($fh, '>', $producer) or die "could not write $producer: $!";
	print $fh q{
	BEGIN;
	SELECT wf_produce();
	SELECT pg_sleep(0.01);
	COMMIT;
	};
	close($fh);

	my @connect = ('-h', $node->host, '-p', $node->port, $db);
	my ($wout, $werr, $pout, $perr) = ('', '', '', '');
	my $workers = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '3', '-j', '1', '-T', '8', '-f', $worker, @connect ],
		'>', \$wout, '2>', \$werr);
	my $producers = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '1', '-j', '1', '-T', '8', '-f', $producer, @connect ],
		'>', \$pout, '2>', \$perr);
	$workers->finish;
	$producers->finish;

	unlike($werr . $wout, qr/deadlock|ERROR|abort/i, 'no worker transaction failed')
	  or diag($wout . $werr);
	unlike($perr . $pout, qr/deadlock|ERROR|abort/i, 'no producer transaction failed')
	  or diag($pout . $perr);
	like($wout, qr/number of failed transactions: 0 /, 'pgbench counts no failed worker transaction')
	  or diag($wout);
	like($pout, qr/number of failed transactions: 0 /, 'pgbench counts no failed producer transaction')
	  or diag($pout);
	is(scalar(log_lines($node, qr/deadlock detected|ERROR/, $log_offset)), 0,
		'the server logged no deadlock and no error')
	  or diag(join("\n", log_lines($node, qr/deadlock detected|ERROR/, $log_offset)));

	# Finish the rest with one worker.
	poll_ok(
		$node, $db, q{
		SELECT wf_drain()
		   AND NOT EXISTS (SELECT 1 FROM claimq.job
						   WHERE state IN ('waiting', 'pending', 'claimed', 'running'))},
		't', 60, 'every job finishes: none is left waiting');

	cmp_ok($node->safe_psql($db, 'SELECT count(*) FROM ran WHERE after <> \'{}\''),
		'>', 20, 'the producer enqueued jobs after jobs in flight');
	cmp_ok(
		$node->safe_psql(
			$db, q{
		SELECT count(*) FROM (
			SELECT w.job_id FROM ran w
			  JOIN ran a ON a.job_id = ANY (w.after)
			 GROUP BY w.job_id HAVING count(DISTINCT a.worker) > 1) x}),
		'>', 0, 'some of them ran after jobs that different workers completed');
	is($node->safe_psql($db, 'SELECT count(*) FROM refused'),
		'0', 'no holder\'s complete was refused');
	is( $node->safe_psql(
			$db, q{
		SELECT count(*) FROM ran w
		 CROSS JOIN LATERAL unnest(w.after) AS l(id)
		  LEFT JOIN ran a ON a.job_id = l.id
		 WHERE a.job_id IS NULL OR w.started_at < a.done_at}),
		'0', 'no job started before a job it runs after had completed');
	is( $node->safe_psql(
			$db, q{
		SELECT (SELECT count(*) FROM made) = (SELECT count(*) FROM ran)
		   AND NOT EXISTS (SELECT FROM made m FULL JOIN ran r USING (job_id)
						    WHERE m.job_id IS NULL OR r.job_id IS NULL)
		   AND (SELECT count(DISTINCT job_id) FROM ran) = (SELECT count(*) FROM ran)}),
		't', 'every job enqueued was completed, exactly once');
	is( $node->safe_psql(
			$db, q{
		SELECT coalesce(string_agg(state || ':' || after_count, ','), 'none')
		  FROM (SELECT DISTINCT state, after_count FROM claimq.job) s}),
		'done:0', 'what is left are the jobs kept for the jobs after them, done');
	is($node->safe_psql($db, 'SELECT count(*) FROM claimq.job_finish'),
		'0', 'no finish is left noted after its transaction');

}

for my $edition ('c', 'portable')
{
	note("the $edition edition");
	run_edition($edition);
}

$node->stop;
log_is_clean($node);

done_testing();
