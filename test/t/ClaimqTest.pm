# Helpers shared by claimq's TAP tests: a node with claimq preloaded, a
# bounded poll, and the end-of-test check of the server log.
package ClaimqTest;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(claimq_node poll_ok log_is_clean log_lines);

# The reclaimer's interval in these tests, in milliseconds.
our $INTERVAL_MS = 200;

# A new (not started) node.  Unless no_preload is given, claimq is in
# shared_preload_libraries and the reclaimer runs every $INTERVAL_MS.
# Extra settings go in conf.  install_path names another PostgreSQL
# installation (a directory with bin/) to run the node with; initdb, a
# list of initdb options (initdb then always runs, never copies a
# template of this installation).
sub claimq_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name,
		defined $opts{install_path}
		? (install_path => $opts{install_path})
		: ());

	$node->init(
		allows_streaming => $opts{allows_streaming} // 0,
		defined $opts{initdb} ? (extra => $opts{initdb}) : ());
	# A crash shows in the log (see log_is_clean); restarting after it
	# keeps the node up, so that one crash does not stop the whole run.
	my $conf = "restart_after_crash = on\nlock_timeout = '60s'\n";
	unless ($opts{no_preload})
	{
		$conf .= "shared_preload_libraries = 'claimq'\n";
		$conf .= "claimq.reclaim_interval = '${INTERVAL_MS}ms'\n";
	}
	$conf .= $opts{conf} if defined $opts{conf};
	$node->append_conf('postgresql.conf', $conf);
	return $node;
}

# Run $sql on $db every 100 ms until it returns $expected (and no error),
# for at most $seconds of wall-clock time.  Passes or fails a test named
# $name; returns the seconds it took, or undef on timeout.
sub poll_ok
{
	my ($node, $db, $sql, $expected, $seconds, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $t0 = time();
	my ($out, $err, $timed_out) = ('', '', 0);

	while (1)
	{
		my $ret = $node->psql(
			$db, $sql,
			stdout => \$out,
			stderr => \$err,
			timeout => $seconds,
			timed_out => \$timed_out);
		my $took = time() - $t0;
		if (defined $ret && $ret == 0 && $out eq $expected && $err eq '')
		{
			pass($name);
			return $took;
		}
		if ($took > $seconds)
		{
			fail($name);
			diag(sprintf("gave up after %.1fs; query:\n%s\nexpected: %s\n"
				  . "last output: %s\nlast error: %s",
					$took, $sql, $expected, $out, $err));
			return undef;
		}
		usleep(100_000);
	}
}

# Lines of the node's server log that match $re, from byte $offset on.
sub log_lines
{
	my ($node, $re, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset // 0);

	return grep { /$re/ } split /\n/, $log;
}

# The server log has no line saying that a process was killed by a signal
# or that anything panicked, apart from lines matching $allow.
sub log_is_clean
{
	my ($node, $allow) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @bad = grep { !(defined $allow && /$allow/) }
	  log_lines($node, qr/terminated by signal|PANIC/);

	is(join("\n", @bad), '',
		$node->name . ': no process terminated by a signal, no PANIC');
}

1;
