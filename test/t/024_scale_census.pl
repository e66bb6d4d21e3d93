# The census at scale: 10,000 queues with jobs over 20 databases, NOTIFY
# queues, a synchronous standby that stops answering, prepared
# transactions, pgbench in several databases at once, databases dropped
# while they hold jobs.  Every commit here that does not itself wait for
# the standby must complete within $BOUND seconds; a run that does not is
# killed and reported, and the primary is then stopped in immediate mode
# (a commit stuck in the census would keep a fast shutdown waiting) and
# started again, so that the checks after it still run.
#
#  - NOTIFY: pgbench clients in two databases enqueue into queues created
#    with notify => true, which have never held jobs.
#  - The standby stops answering (its walreceiver is stopped) while a
#    commit with synchronous_commit = on waits for it: commits with
#    synchronous_commit off or local still complete, including ones that
#    need new census entries, prepared transactions' PREPARE, COMMIT
#    PREPARED and ROLLBACK PREPARED, and pgbench in four databases; the
#    waiting commit completes once the standby answers again.
#  - After the recount every database's census is valid and equal to its
#    jobs (claimq.census()'s rows against claimq.job grouped by queue and
#    state), with the entries of three dropped databases that held jobs
#    gone.
#  - With claimq.census_entries = 200 (a census far too small): the same
#    commits complete within the bound; each database's counts are either
#    right or said to be unknown; once the databases that filled it are
#    dropped, a database whose queues fit gets a valid census again.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use ClaimqScale;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# Seconds within which a commit that does not wait for the standby must
# complete (and a pgbench run must end after its -T).
my $BOUND = 20;
my $PGBENCH_SECS = 5;
my @DBS = map { sprintf('db%02d', $_) } 1 .. 20;

my $primary = claimq_node(
	'primary',
	allows_streaming => 1,
	conf => "max_connections = 60\nshared_buffers = 32MB\n"
	  . "max_prepared_transactions = 10\nmax_wal_size = 1GB\n"
	  . "log_statement = none\n");
$primary->start;
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

# The walreceiver stopped with SIGSTOP, if it is.
my $stopped_walreceiver;
END { kill 'CONT', $stopped_walreceiver if $stopped_walreceiver; }

#
# The databases.  tmpl: the extension, the views of the checks, 40 NOTIFY
# queues and 200 queues without jobs; dbsmall: those and 100 queues with
# jobs; db01 .. db20 and three to be dropped: those and 500 queues with
# jobs (100 of them with a claimed job).
#
$primary->safe_psql('postgres', 'CREATE DATABASE tmpl');
$primary->safe_psql(
	'tmpl', q{
	CREATE EXTENSION claimq;
	SELECT count(claimq.create_queue('n' || i, notify => true)) FROM generate_series(1, 40) i;
	SELECT count(claimq.create_queue('f' || i)) FROM generate_series(1, 200) i;
	SELECT claimq.create_queue('p');
	CREATE PROCEDURE make_jobs(n integer) LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM claimq.create_queue('q' || i) FROM generate_series(1, n) i;
		COMMIT;
		PERFORM claimq.enqueue_many('q' || i, array_fill('{}'::jsonb, ARRAY[2]))
		   FROM generate_series(1, n) i;
		COMMIT;
		PERFORM claimq.claim('q' || i, 1) FROM generate_series(1, least(n, 100)) i;
	END
	$$;
});
$primary->safe_psql('tmpl', slurp_file("$FindBin::RealBin/../census_wrong.sql"));
$primary->safe_psql(
	'tmpl', q{
	-- After a recount: 'valid' and right, 'unknown', or 'WRONG'.
	CREATE VIEW census_verdict AS
	SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM claimq.census() WHERE queue_id = 0)
				THEN 'unknown'
				WHEN EXISTS (SELECT 1 FROM census_wrong) THEN 'WRONG'
				ELSE 'valid' END AS verdict;
});
$primary->safe_psql('postgres', 'CREATE DATABASE dbsmall TEMPLATE tmpl');
$primary->safe_psql('dbsmall', 'CALL make_jobs(100)');
$primary->safe_psql('tmpl', 'CALL make_jobs(500)');
my $t0 = time();
$primary->safe_psql('postgres', "CREATE DATABASE $_ TEMPLATE tmpl")
  for (@DBS, 'doomed1', 'doomed2');
note(sprintf('22 databases made in %.1f s', time() - $t0));

is( $primary->safe_psql(
		'postgres', q{
	SELECT count(*) FROM pg_database WHERE datname ~ '^db\d\d$'}),
	'20', '20 databases of 500 queues with jobs each: 10,000 queues');

#
# A run that did not end in time leaves backends stuck in their commits:
# stop the primary in immediate mode and start it again.
#
my $hung = 0;

sub recover
{
	if ($stopped_walreceiver)
	{
		kill 'CONT', $stopped_walreceiver;
		$stopped_walreceiver = undef;
	}
	return unless $hung;
	show_waits($primary);
	note('stopping the primary in immediate mode after a hang');
	$primary->stop('immediate');
	$primary->start;
	$hung = 0;
	return;
}

# Count each database: census_recount() answers whether its census is
# valid afterwards; then the verdict.  Returns a hash database => verdict.
sub recount_all
{
	my (@dbs) = @_;
	my %verdict;
	for my $db (@dbs)
	{
		my $timed_out = 0;
		my ($ret, $out, $err) = $primary->psql($db,
			'SELECT claimq.census_recount()',
			timeout => $BOUND, timed_out => \$timed_out);
		$hung = 1 if $timed_out;
		$verdict{$db} =
			$timed_out ? "census_recount() did not complete within $BOUND s"
		  : $ret != 0 ? "recount failed: $err"
		  : $out eq 't' ? $primary->safe_psql($db, 'SELECT verdict FROM census_verdict')
		  : $primary->safe_psql($db, 'SELECT verdict FROM census_verdict') . ' (recount: f)';
	}
	my %seen;
	$seen{ $verdict{$_} =~ s/ .*//r }++ for keys %verdict;
	note('census verdicts: ' . join(', ', map { "$_ $seen{$_}" } sort keys %seen));
	recover();
	return %verdict;
}

# What is wrong in a hash of verdicts, if anything but $ok.
sub verdicts_not
{
	my ($ok, %verdict) = @_;
	my @bad = map { "$_: $verdict{$_}" } grep { $verdict{$_} !~ $ok } sort keys %verdict;
	return scalar(@bad) . ' of ' . scalar(keys %verdict)
	  . (@bad ? ' (' . join(', ', @bad[ 0 .. ($#bad < 4 ? $#bad : 4) ]) . (@bad > 5 ? ', ...' : '') . ')' : '');
}

my %verdict = recount_all(@DBS, 'doomed1', 'doomed2');
is(verdicts_not(qr/^valid$/, %verdict), '0 of 22',
	'after census_recount(), every database\'s census is valid and equals its jobs (10,600 queues with jobs)');

# Wait for a run; a test named $name passes if it ended by $deadline with
# exit code 0.
sub ended_ok
{
	my ($run, $deadline, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $ended = finish_by($run, $deadline);

	$hung = 1 unless $ended;
	if (!$ended)
	{
		fail($name);
		diag(sprintf('%s did not complete within %.0f s', $run->{name}, $run->{secs}));
		return 0;
	}
	return ok($run->{rc} == 0, $name)
	  || diag("$run->{name} exited with $run->{rc}: $run->{err}");
}

# Check a pgbench run that has ended: transactions done, none longer than
# the bound.
sub pgbench_ok
{
	my ($run, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($max, $n) = pgbench_max_latency($run);

	ok($n > 0 && $max < $BOUND,
		sprintf('%s: every transaction within %d s (%d transactions, longest %.2f s)',
			$what, $BOUND, $n, $max));
	return;
}

my $notify_script = $primary->basedir . '/notify.sql';
open my $fh, '>', $notify_script or die $!;
print $fh q{
\set n random(1, 40)
SELECT claimq.enqueue('n' || :n, '{}');
};
close $fh;

my $mixed_script = $primary->basedir . '/mixed.sql';
open $fh, '>', $mixed_script or die $!;
print $fh q{
\set f random(1, 200)
\set n random(1, 40)
\set q random(101, 500)
BEGIN;
SELECT claimq.enqueue('f' || :f, '{}');
SELECT claimq.enqueue('n' || :n, '{}');
SELECT count(*) FROM claimq.claim('q' || :q, 1) c, LATERAL claimq.complete(c.job_id, c.token);
END;
};
close $fh;

# Item 1 of the issue: NOTIFY's commit lock and the census.
sub notify_check
{
	my ($what, @dbs) = @_;
	(my $tag = $what) =~ s/\W+/_/g;
	my @runs = map {
		start_pgbench($primary, $_, $notify_script,
			[ '-c', '2', '-j', '1', '-T', $PGBENCH_SECS ],
			$primary->basedir . "/notify_${tag}_$_")
	} @dbs;
	my $deadline = time() + $PGBENCH_SECS + $BOUND;
	for my $run (@runs)
	{
		ended_ok($run, $deadline,
			"$what: $run->{name}, 2 clients enqueueing into NOTIFY queues, ends within $BOUND s of its $PGBENCH_SECS s")
		  and pgbench_ok($run, "$what: NOTIFY enqueues on $run->{name}");
	}
	recover();
	return;
}

# Item 3: a synchronous standby that stops answering.  @dbs: 11 databases
# of which the 4th to 6th have a prepared transaction px_<database>
# (prepare_px).
sub standby_check
{
	my ($what, @dbs) = @_;
	(my $tag = $what) =~ s/\W+/_/g;

	$primary->append_conf('postgresql.conf', "synchronous_standby_names = 'standby'\n");
	$primary->reload;
	$primary->poll_query_until('postgres',
		"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'",
		'sync')
	  or die 'the standby did not become synchronous';
	$stopped_walreceiver =
	  $standby->safe_psql('postgres', 'SELECT pid FROM pg_stat_wal_receiver');
	die 'no walreceiver' unless $stopped_walreceiver;
	kill 'STOP', $stopped_walreceiver;

	my $waiter = start_psql($primary, $dbs[0],
		"SET synchronous_commit = on;\nSELECT claimq.enqueue('q7', '{}');");
	poll_ok($primary, 'postgres', q{
		SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'},
		't', $BOUND, "$what: a commit with synchronous_commit = on waits for the standby");

	my $t_start = time();
	my @runs;
	# Commits that need new census entries: queues that never held jobs.
	push @runs, start_psql($primary, $dbs[1],
		"SET synchronous_commit = off;\n"
		  . join('', map { "SELECT claimq.enqueue('f$_', '{}');\n" } 1 .. 20));
	push @runs, start_psql($primary, $dbs[2],
		"SET synchronous_commit = local;\n"
		  . join('', map { "SELECT claimq.enqueue('f$_', '{}');\n" } 101 .. 120));
	# Prepared transactions: decided, and a new one made and committed.
	push @runs, start_psql($primary, $dbs[3],
		"SET synchronous_commit = local;\nCOMMIT PREPARED 'px_$dbs[3]';");
	push @runs, start_psql($primary, $dbs[4],
		"SET synchronous_commit = off;\nCOMMIT PREPARED 'px_$dbs[4]';");
	push @runs, start_psql($primary, $dbs[5],
		"SET synchronous_commit = local;\nROLLBACK PREPARED 'px_$dbs[5]';");
	push @runs, start_psql($primary, $dbs[6],
		"SET synchronous_commit = local;\nBEGIN;\n"
		  . "SELECT claimq.enqueue('f150', '{}');\n"
		  . "SELECT count(*) FROM claimq.claim('q150', 1);\n"
		  . "PREPARE TRANSACTION 'py_$dbs[6]';\nCOMMIT PREPARED 'py_$dbs[6]';");
	# pgbench in four databases at once.
	my @benches;
	for my $i (7 .. 10)
	{
		push @benches,
		  start_pgbench($primary, $dbs[$i], $mixed_script,
			[ '-c', '1', '-T', $PGBENCH_SECS ],
			$primary->basedir . "/mixed_${tag}_$dbs[$i]",
			env => { PGOPTIONS => '-c synchronous_commit=' . ($i % 2 ? 'off' : 'local') });
	}

	for my $run (@runs)
	{
		ended_ok($run, $t_start + $BOUND,
			"$what: while the standby does not answer, $run->{name} with synchronous_commit off or local completes within $BOUND s");
	}
	for my $run (@benches)
	{
		ended_ok($run, $t_start + $PGBENCH_SECS + $BOUND,
			"$what: while the standby does not answer, $run->{name} (synchronous_commit off or local) ends within $BOUND s of its $PGBENCH_SECS s")
		  and pgbench_ok($run, "$what: $run->{name} while the standby does not answer");
	}

	kill 'CONT', $stopped_walreceiver;
	$stopped_walreceiver = undef;
	ended_ok($waiter, time() + $BOUND,
		"$what: once the standby answers, the commit that waited for it completes within $BOUND s");

	$primary->adjust_conf('postgresql.conf', 'synchronous_standby_names', "''");
	$primary->reload;
	recover();
	return;
}

# Make the prepared transactions standby_check decides.
sub prepare_px
{
	my (@dbs) = @_;
	$primary->safe_psql(
		$_, qq{
		BEGIN;
		SELECT count(*) FROM claimq.enqueue_many('p', array_fill('{}'::jsonb, ARRAY[3]));
		SELECT count(*) FROM claimq.claim('q3', 1);
		PREPARE TRANSACTION 'px_$_';
	}) for @dbs;
	return;
}

# Prepared transactions left by a run that was killed: rolled back.
sub drop_prepared
{
	for my $row (split /\n/,
		$primary->safe_psql('postgres', 'SELECT database, gid FROM pg_prepared_xacts'))
	{
		my ($db, $gid) = split /\|/, $row;
		note("rolling back the prepared transaction $gid left in $db");
		$primary->safe_psql($db, "ROLLBACK PREPARED '$gid'");
	}
	return;
}

#
# With the default settings.
#
notify_check('default census', 'db01', 'db02');
prepare_px(@DBS[ 5 .. 7 ]);
standby_check('default census', @DBS[ 2 .. 12 ]);
drop_prepared();

$primary->safe_psql('postgres', "DROP DATABASE $_") for qw(doomed1 doomed2 tmpl);
%verdict = recount_all(@DBS, 'dbsmall');
is(verdicts_not(qr/^valid$/, %verdict), '0 of 21',
	'after the load, three databases that held jobs dropped and census_recount(), every database\'s census is valid and equals its jobs');

#
# The census deliberately small.
#
$primary->append_conf('postgresql.conf',
	"claimq.census_entries = 200\nclaimq.flow_slots = 16\n");
$primary->restart;
note('the server knows claimq.census_entries: '
	  . $primary->safe_psql('postgres',
		"SELECT count(*) FROM pg_settings WHERE name = 'claimq.census_entries'"));

%verdict = recount_all(@DBS);
is(verdicts_not(qr/^(valid|unknown)/, %verdict), '0 of 20',
	'census_entries = 200: each database\'s census is right or says it is unknown');

notify_check('small census', 'db03', 'db04');
prepare_px(@DBS[ 11 .. 13 ]);
standby_check('small census', @DBS[ 8 .. 18 ]);
drop_prepared();

%verdict = recount_all(@DBS);
is(verdicts_not(qr/^(valid|unknown)/, %verdict), '0 of 20',
	'census_entries = 200, after the load: each database\'s census is right or says it is unknown');

$primary->safe_psql('postgres', "DROP DATABASE $_") for @DBS;
%verdict = recount_all('dbsmall');
is(verdicts_not(qr/^valid$/, %verdict), '0 of 1',
	'census_entries = 200: once the 20 databases that filled it are dropped, dbsmall\'s 100 queues get a valid census equal to its jobs');

$primary->stop;
$standby->stop;
log_is_clean($primary);

done_testing();
