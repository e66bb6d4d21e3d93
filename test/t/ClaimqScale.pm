# Helpers of the at-scale TAP tests: psql and pgbench runs started in the
# background and given a deadline, so that a commit that hangs fails a test
# instead of hanging the run.
package ClaimqScale;

use strict;
use warnings;

use Exporter 'import';
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(start_psql start_pgbench finish_by pgbench_max_latency
  show_waits);

my $nruns = 0;

# Start @$cmd in the background, its standard input from /dev/null and its
# output in files under $dir.  Returns a run for finish_by.
sub start_run
{
	my ($name, $cmd, $dir, $env) = @_;
	my $n = ++$nruns;
	my $run = {
		name => $name,
		outfile => "$dir/run$n.out",
		errfile => "$dir/run$n.err",
		t0 => time()
	};
	my $pid = fork();

	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		%ENV = (%ENV, %{ $env // {} });
		open STDIN, '<', '/dev/null' or die $!;
		open STDOUT, '>', $run->{outfile} or die $!;
		open STDERR, '>', $run->{errfile} or die $!;
		exec @$cmd or die "exec $cmd->[0]: $!";
	}
	$run->{pid} = $pid;
	return $run;
}

# Start psql running $sql on $db in the background, each statement in its
# own transaction unless it says otherwise.  Options: env (a hash of
# environment variables, such as PGOPTIONS).
sub start_psql
{
	my ($node, $db, $sql, %opts) = @_;
	my $file = $node->basedir . '/psql' . ($nruns + 1) . '.sql';

	open my $fh, '>', $file or die "$file: $!";
	print $fh $sql;
	close $fh;
	return start_run(
		"psql on $db",
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr($db), '-f', $file
		],
		$node->basedir,
		$opts{env});
}

# Start pgbench on $db with the script file $script and the arguments
# @$args; each transaction's latency goes to a log under $logdir.  Options:
# env, as for start_psql.
sub start_pgbench
{
	my ($node, $db, $script, $args, $logdir, %opts) = @_;

	mkdir $logdir;
	my $run = start_run(
		"pgbench on $db",
		[
			'pgbench', '-n', @$args, '-f', $script,
			'-l', "--log-prefix=$logdir/tx",
			'-h', $node->host, '-p', $node->port, $db
		],
		$logdir,
		$opts{env});
	$run->{logdir} = $logdir;
	return $run;
}

# Wait until the run has ended or the clock passes $deadline (an epoch
# time).  Returns true if it ended; its exit code is then in $run->{rc},
# its output in $run->{out} and $run->{err}, its duration in $run->{secs}.
# A run still going at the deadline is killed (only the client: a backend
# stuck in its commit stays), and false is returned.
sub finish_by
{
	my ($run, $deadline) = @_;
	my $ended = 0;

	while (1)
	{
		if (waitpid($run->{pid}, WNOHANG) == $run->{pid})
		{
			$ended = 1;
			$run->{rc} = $? >> 8;
			last;
		}
		last if time() >= $deadline;
		usleep(20_000);
	}
	$run->{secs} = time() - $run->{t0};
	unless ($ended)
	{
		kill 'KILL', $run->{pid};
		waitpid($run->{pid}, 0);
		$run->{rc} = undef;
	}
	$run->{out} = slurp_file($run->{outfile});
	$run->{err} = slurp_file($run->{errfile});
	chomp $run->{out};
	chomp $run->{err};
	return $ended;
}

# The longest transaction, in seconds, of the pgbench run's logs, and the
# number of transactions logged.
sub pgbench_max_latency
{
	my ($run) = @_;
	my ($max, $n) = (0, 0);

	opendir my $dh, $run->{logdir} or die "$run->{logdir}: $!";
	for my $file (map { "$run->{logdir}/$_" } grep { /^tx/ } readdir $dh)
	{
		open my $fh, '<', $file or die "$file: $!";
		while (my $line = <$fh>)
		{
			# client_id transaction_no time script_no time_epoch time_us
			my @f = split ' ', $line;
			next unless @f >= 3 && $f[2] =~ /^\d+$/;
			$n++;
			$max = $f[2] if $f[2] > $max;
		}
		close $fh;
	}
	closedir $dh;
	return ($max / 1e6, $n);
}

# What every client backend is doing, for the diagnostics of a hang.
sub show_waits
{
	my ($node) = @_;
	my ($ret, $out, $err) = $node->psql(
		'postgres', q{
		SELECT pid, datname, state, wait_event_type, wait_event,
			   left(regexp_replace(query, '\s+', ' ', 'g'), 60)
		  FROM pg_stat_activity
		 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
		 ORDER BY pid},
		timeout => 20);
	diag("sessions (pid|database|state|wait type|wait event|query):\n"
		  . ($out // '') . ($err // ''));
	return;
}

1;
