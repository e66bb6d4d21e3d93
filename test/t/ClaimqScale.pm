# Helpers of the at-scale TAP tests: psql and pgbench runs started in the
# background and given a deadline, so that a commit that hangs fails a test
# instead of hanging the run.
package ClaimqScale;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(start_psql start_pgbench finish_by pgbench_max_latency
  show_waits);

# Start psql running $sql on $db in the background.  Options: env (a hash of
# environment variables, such as PGOPTIONS).  Returns a run for finish_by.
sub start_psql
{
	my ($node, $db, $sql, %opts) = @_;
	my $run = { name => "psql on $db", out => '', err => '', in => $sql };
	local %ENV = (%ENV, %{ $opts{env} // {} });

	$run->{h} = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr($db), '-f', '-'
		],
		'<', \$run->{in}, '>', \$run->{out}, '2>', \$run->{err});
	$run->{t0} = time();
	return $run;
}

# Start pgbench on $db with the script file $script and the arguments
# @$args; each transaction's latency goes to a log under $logdir.  Options:
# env, as for start_psql.
sub start_pgbench
{
	my ($node, $db, $script, $args, $logdir, %opts) = @_;
	my $run = { name => "pgbench on $db", out => '', err => '', in => '' };
	local %ENV = (%ENV, %{ $opts{env} // {} });

	mkdir $logdir;
	$run->{logdir} = $logdir;
	$run->{h} = IPC::Run::start(
		[
			'pgbench', '-n', @$args, '-f', $script,
			'-l', "--log-prefix=$logdir/tx",
			'-h', $node->host, '-p', $node->port, $db
		],
		'<', \$run->{in}, '>', \$run->{out}, '2>', \$run->{err});
	$run->{t0} = time();
	return $run;
}

# Wait until the run has ended or the clock passes $deadline (an epoch
# time).  Returns true if it ended; its exit code is then in $run->{rc} and
# its duration in $run->{secs}.  A run still going at the deadline is killed
# (only the client: a backend stuck in its commit stays), and false is
# returned.
sub finish_by
{
	my ($run, $deadline) = @_;
	my $h = $run->{h};

	while ($h->pumpable && time() < $deadline)
	{
		$h->pump_nb;
		usleep(20_000);
	}
	if ($h->pumpable)
	{
		$h->kill_kill;
		$run->{rc} = undef;
		$run->{secs} = time() - $run->{t0};
		return 0;
	}
	$h->finish;
	$run->{rc} = $h->result(0);
	$run->{secs} = time() - $run->{t0};
	return 1;
}

# The longest transaction, in seconds, of the pgbench run's logs, and the
# number of transactions logged.
sub pgbench_max_latency
{
	my ($run) = @_;
	my ($max, $n) = (0, 0);

	for my $file (glob("$run->{logdir}/tx*"))
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
