# With synchronous_commit = off, a claim (and a key claim) acknowledged to
# its caller can be undone by a crash: its WAL was never flushed.  The job
# is then pending again, and a second claim must not hand out the token the
# first holder still has, or the first holder could complete a job that
# another worker holds.
#
# Reproduction: the WAL writer is stopped, so that nothing flushes the
# claim's commit; a worker claims with synchronous_commit = off; the WAL
# writer is killed, which makes the postmaster crash-restart.  The claim is
# gone after recovery; a new claim of the same job gets another token, and
# the old token is refused.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('async', conf => "claimq.reclaimer = off\n");
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('aq');
	SELECT claimq.enqueue('aq', '{}');
	CHECKPOINT;
});

sub walwriter_pid
{
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
}

# Claim the job, and win a key, in sessions whose commits stay in memory;
# then crash.  Returns the (job, token) pair and the key's token.
sub claim_then_crash
{
	my $walwriter = walwriter_pid();
	ok($walwriter, 'the WAL writer runs');
	kill 'STOP', $walwriter;

	# One transaction: a later session's first draw of tokens would flush
	# WAL past this one's commit (that flush is the fix), making it durable.
	my ($pair, $key_token) = split /;/, $node->safe_psql(
		'postgres', q{
		SET synchronous_commit = off;
		SELECT (SELECT job_id || ',' || token FROM claimq.claim('aq'))
			   || ';' || coalesce((SELECT token::text
									 FROM claimq.claim_keys('s', ARRAY['k'], '1 hour')), '');});

	my $log_offset = -s $node->logfile;
	kill 'KILL', $walwriter;
	kill 'CONT', $walwriter;
	ok( $node->poll_query_until(
			'postgres', 'SELECT true', 't'),
		'the server is back after the crash');
	ok( scalar(log_lines($node, qr/terminated by signal 9/, $log_offset)) > 0,
		'the server crash-restarted');
	return ($pair, $key_token);
}

my ($first, $first_key) = claim_then_crash();
like($first, qr/^\d+,\d+$/, 'the first worker got a job');
my ($job, $token) = split /,/, $first;

is($node->safe_psql('postgres', "SELECT state FROM claimq.job WHERE job_id = $job"),
	'pending', 'the crash undid the unflushed claim');
my $second = $node->safe_psql('postgres',
	q{SELECT job_id || ',' || token FROM claimq.claim('aq')});
my ($job2, $token2) = split /,/, $second;
is($job2, $job, 'the second worker gets the same job');
isnt($token2, $token, 'but not the same token');
is( $node->safe_psql('postgres',
		"SELECT outcome FROM claimq.complete(ARRAY[$job]::bigint[], ARRAY[$token]::bigint[])"
	),
	'stale',
	'the first worker\'s complete is refused');
is( $node->safe_psql('postgres',
		"SELECT state || ',' || token FROM claimq.job WHERE job_id = $job"),
	"claimed,$token2",
	'the second worker still holds the job');

# The key claim was undone too: the key is free, and whoever wins it now
# must get a token the first winner does not have.
my $key2 = $node->safe_psql('postgres',
	q{SELECT token FROM claimq.claim_keys('s', ARRAY['k'], '1 hour')});
ok($key2 ne '' && $key2 ne $first_key, 'a key won again gets another token');
is( $node->safe_psql('postgres',
		"SELECT outcome FROM claimq.release_keys('s', ARRAY['k'], ARRAY[$first_key]::bigint[])"
	),
	'stale',
	'the first winner cannot release the key');

# Again, now that this server has drawn tokens since its restart: tokens
# drawn by a session that goes on claiming after the crash must not repeat
# either.
$node->safe_psql('postgres', q{
	SELECT claimq.release(job_id, token) FROM claimq.job WHERE state = 'claimed';
	CHECKPOINT;});
my ($third) = claim_then_crash();
my (undef, $token3) = split /,/, $third;
my $fourth = $node->safe_psql('postgres',
	q{SELECT token FROM claimq.claim('aq')});
ok($fourth ne '' && $fourth ne $token3 && $fourth ne $token2,
	'no token repeats after a second crash');

$node->stop;
done_testing();
