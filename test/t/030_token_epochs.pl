# No token repeats, whatever became of the claim that handed it out, in
# both editions (The token, contract 0.5): claims made in a transaction
# that is still open, their tokens seen by the caller, then the server
# crashes before the COMMIT.  After each crash the jobs come back to new
# claims (after at most one empty claim, or a maintain()), every new token
# is greater than every token handed out before, and the old holder's calls
# are refused.  The crashes: an immediate stop of the postmaster, a kill -9
# of the claiming backend alone (the postmaster crash-restarts), two of
# those in a row with every commit between them asynchronous, and the
# promotion of a streaming standby; under synchronous_commit on and off.
#
# The WAL writer waits ten seconds between flushes, nothing else commits,
# and no dirty buffer is written out (which flushes the WAL up to its
# changes first), so that the WAL that logged the open transactions'
# sequence values is lost with the crash (unless the WAL writer's wake-up
# falls in between, once in a hundred runs or so): the sequence then goes back, and only the
# epoch keeps the tokens apart (0.7's portable edition handed out the same
# tokens again here).  The C edition is in database cdb, the portable
# edition, as a plain script, in pdb, on one server.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $top = "$FindBin::RealBin/../..";
my $script = "$top/claimq-portable.sql";
ok(-e $script, 'make portable wrote claimq-portable.sql');

my $node = claimq_node('epochs', allows_streaming => 1,
	conf => "claimq.reclaimer = off\nwal_writer_delay = '10s'\n"
	  . "shared_buffers = '64MB'\nbgwriter_lru_maxpages = 0\nautovacuum = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE cdb; CREATE DATABASE pdb;');
$node->safe_psql('cdb', 'CREATE EXTENSION claimq');
my ($ret, $out, $err) = $node->psql('pdb', slurp_file($script));
is($ret, 0, 'the portable edition is installed as a plain script') or diag($err);

my %edition = (cdb => 'c', pdb => 'portable');

# The queue's jobs, and how many of them the open transaction claims: more
# than the 32 values a sequence logs ahead of those it hands out, so that
# some of the lost values are handed out again after the crash.
my $jobs = 50;
my $nheld = 40;
for my $db (sort keys %edition)
{
	is($node->safe_psql($db, 'SELECT claimq.edition()'), $edition{$db},
		"$db has the $edition{$db} edition");
	$node->safe_psql($db, qq{
		SELECT claimq.create_queue('q', lease => '1 hour');
		SELECT claimq.enqueue_many('q', array_fill('{}'::jsonb, ARRAY[$jobs]));});
}

# Every token seen so far, per database (job and key tokens alike).
my %seen;

sub max_seen
{
	my ($db) = @_;
	my $max = 0;
	$max = $_ > $max ? $_ : $max for @{ $seen{$db} };
	return $max;
}

# Claims every ready job of q (one claim of a thousand, after at most one empty
# claim, or after maintain() when $maintain), completes none.  Returns
# "job:token" strings.
sub claim_all
{
	my ($n, $db, $maintain) = @_;
	$n->safe_psql($db, 'SELECT count(*) FROM claimq.maintain()') if $maintain;
	my $sql = q{SELECT string_agg(job_id || ':' || token, ' ' ORDER BY job_id)
				  FROM claimq.claim('q', 1000)};
	my $got = $n->safe_psql($db, $sql);
	my $empty = 0;
	if ($got eq '')
	{
		$empty = 1;
		$got = $n->safe_psql($db, $sql);
	}
	return ($empty, split / /, $got);
}

# Gives the jobs back, so that the next round claims them all again.
sub release_all
{
	my ($n, $db) = @_;
	$n->safe_psql($db, q{
		SELECT count(*) FROM claimq.job j, claimq.release(j.job_id, j.token) r
		 WHERE j.state = 'claimed'});
}

# A session per database that claims $nheld jobs and wins a key in a
# transaction it leaves open, under synchronous_commit $sc.  Returns the
# sessions, their pids and what they hold.  With $fresh, $nheld new jobs
# are enqueued for it first.
sub hold
{
	my ($n, $sc, $fresh) = @_;
	my (%session, %pid, %held, %key);
	for my $db (sort keys %edition)
	{
		# The lifetime's epoch is registered (a claim in a transaction of
		# its own, committed), as a worker that has been running would
		# have it.
		$n->safe_psql($db, q{SELECT count(*) FROM claimq.claim('q', 1)});
		release_all($n, $db);
		$n->safe_psql($db, qq{SELECT claimq.enqueue_many('q', array_fill('{}'::jsonb, ARRAY[$nheld]))})
		  if $fresh;
		my $s = $n->background_psql($db, on_error_stop => 1);
		$pid{$db} = $s->query_safe('SELECT pg_backend_pid()');
		$s->query_safe("SET synchronous_commit = $sc");
		$s->query_safe('BEGIN');
		$held{$db} = [ split /\n/, $s->query_safe(
			qq{SELECT job_id || ':' || token FROM claimq.claim('q', $nheld)}) ];
		is(scalar @{ $held{$db} }, $nheld, "$db: $nheld jobs claimed in an open transaction");
		$key{$db} = $s->query_safe(
			q{SELECT token FROM claimq.claim_keys('s', ARRAY['k'], '1 hour')});
		like($key{$db}, qr/^\d+$/, "$db: a key won in the same transaction");
		push @{ $seen{$db} }, (map { (split /:/)[1] } @{ $held{$db} }), $key{$db};
		$session{$db} = $s;
	}
	return (\%session, \%pid, \%held, \%key);
}

# After a crash: the held jobs are pending again, come back to a new claim
# with greater tokens, and the old tokens are refused.  With $loose, the
# commits made since the last synchronous one may have been lost with the
# crash too (every commit asynchronous): then only the tokens are checked,
# and that no old one is accepted.
sub check_after
{
	my ($n, $held, $key, $what, $maintain, $loose) = @_;
	for my $db (sort keys %edition)
	{
		my $before = max_seen($db);
		my $old = $held->{$db};
		my $ids = join ',', map { (split /:/)[0] } @$old;
		my $toks = join ',', map { (split /:/)[1] } @$old;
		is( $n->safe_psql($db, qq{
				SELECT count(*) FROM claimq.job WHERE token = ANY (ARRAY[$toks]::bigint[])}),
			'0', "$db, $what: the open transaction's claims are gone");
		my $pending = $n->safe_psql($db,
			q{SELECT count(*) FROM claimq.job WHERE state = 'pending'});
		is($pending, $jobs, "$db, $what: every job is pending") unless $loose;
		my ($empty, @pairs) = claim_all($n, $db, $maintain);
		is(scalar @pairs, $pending, "$db, $what: every pending job comes back to a new claim"
			  . ($maintain ? ' after maintain()' : ''));
		ok(!$maintain || !$empty, "$db, $what: no empty claim after maintain()");
		my @tokens = map { (split /:/)[1] } @pairs;
		my @low = grep { $_ <= $before } @tokens;
		is(scalar @low, 0, "$db, $what: every new token is greater than every one before")
		  or diag("before: up to $before; now: @tokens");
		push @{ $seen{$db} }, @tokens;

		my $outcomes = $n->safe_psql($db, qq{
				SELECT string_agg(outcome, ',')
				  FROM claimq.complete(ARRAY[$ids]::bigint[], ARRAY[$toks]::bigint[])});
		if ($loose)
		{
			unlike($outcomes, qr/ok/, "$db, $what: no complete of the old holder is accepted");
		}
		else
		{
			is($outcomes, join(',', ('stale') x $nheld),
				"$db, $what: the old holder's completes are refused");
			is( $n->safe_psql($db, q{SELECT count(*) FROM claimq.job WHERE state = 'claimed'}),
				$jobs, "$db, $what: the new holder still holds every job");
		}

		my $k = $n->safe_psql($db,
			q{SELECT token FROM claimq.claim_keys('s', ARRAY['k'], '1 hour')});
		if ($k eq '')
		{
			# Won before the crash by a commit that survived: sweep it.
			$n->safe_psql($db, q{DELETE FROM claimq.key_claim});
			$k = $n->safe_psql($db,
				q{SELECT token FROM claimq.claim_keys('s', ARRAY['k'], '1 hour')});
			fail("$db, $what: the key is free again") unless $loose;
		}
		ok($k ne '' && $k > $before, "$db, $what: the key, won again, has a greater token");
		push @{ $seen{$db} }, $k if $k ne '';
		isnt( $n->safe_psql($db, qq{
				SELECT outcome FROM claimq.release_keys('s', ARRAY['k'], ARRAY[$key->{$db}]::bigint[])}),
			'ok', "$db, $what: the key's first winner cannot release it");
		$n->safe_psql($db, qq{SELECT claimq.release_keys('s', ARRAY['k'], ARRAY[$k]::bigint[])});
		release_all($n, $db);
	}
}

sub quit_all
{
	my ($session) = @_;
	for my $s (values %$session)
	{
		eval { $s->quit };
	}
}

# Kills a session's backend; waits for the crash-restart.
sub kill_backend
{
	my ($n, $pid) = @_;
	my $offset = -s $n->logfile;
	kill 'KILL', $pid;
	local $PostgreSQL::Test::Utils::timeout_default = 60;
	$n->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	$n->wait_for_log(qr/database system is ready to accept connections/, $offset);
}

for my $sc ('on', 'off')
{
	# An immediate stop of the postmaster, then a start.
	my ($session, $pid, $held, $key) = hold($node, $sc);
	$node->stop('immediate');
	quit_all($session);
	$node->start;
	check_after($node, $held, $key, "immediate stop, synchronous_commit $sc");

	# A kill -9 of the claiming backend alone.
	($session, $pid, $held, $key) = hold($node, $sc);
	kill_backend($node, $pid->{cdb});
	quit_all($session);
	check_after($node, $held, $key, "backend killed, synchronous_commit $sc",
		$sc eq 'off');
}

# Two crashes in a row, every commit between them asynchronous (but the
# one that registers an epoch, which the rule makes synchronous).
$node->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_commit = off; SELECT pg_reload_conf();});
for my $round (1, 2)
{
	my ($session, $pid, $held, $key) = hold($node, 'off', 1);
	kill_backend($node, $pid->{pdb});
	quit_all($session);
	check_after($node, $held, $key, "asynchronous commits, crash $round of two in a row",
		0, 1);
}
# Back to the queue's jobs, every commit flushed.
for my $db (sort keys %edition)
{
	$node->safe_psql($db, qq{
		SET synchronous_commit = on;
		SELECT claimq.drop_queue('q', force => true);
		SELECT claimq.create_queue('q', lease => '1 hour');
		SELECT claimq.enqueue_many('q', array_fill('{}'::jsonb, ARRAY[$jobs]));});
}
$node->safe_psql('postgres', q{ALTER SYSTEM RESET synchronous_commit; SELECT pg_reload_conf();});

# A promotion: the standby has streamed everything the primary flushed,
# which is what the primary had registered; the primary stops (fenced)
# with its claims open, and the standby takes over.
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('epochs_standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;
{
	my ($session, $pid, $held, $key) = hold($node, 'on');
	$node->wait_for_catchup($standby, 'replay', $node->lsn('flush'));
	$node->stop('immediate');
	quit_all($session);
	$standby->promote;
	check_after($standby, $held, $key, 'promotion');
}

# The register: one epoch per lifetime that handed out tokens, each above
# the one before.
for my $db (sort keys %edition)
{
	is( $standby->safe_psql($db, q{
			SELECT bool_and(epoch > prev)
			  FROM (SELECT epoch, lag(epoch) OVER (ORDER BY registered_at) AS prev
					  FROM claimq.epoch) e WHERE prev IS NOT NULL}),
		't', "$db: every epoch registered is above the one before");
}

$standby->stop;
done_testing();
