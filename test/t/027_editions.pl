# The portable edition on a server that has the C edition too: installed
# as a plain script by a database owner who is not a superuser; moved to
# the C edition and back with the steps of docs/operations.md, as written
# there, with claims, a running job and a key claim held across each move;
# and its tokens after a failover (a new epoch, above the old primary's).
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

# The three blocks of docs/operations.md that move a database between
# editions, in their order there: portable to C, C to portable, the copy.
my @move;
{
	my @lines = split /\n/, slurp_file("$top/docs/operations.md");
	for (my $i = 0; $i < @lines; $i++)
	{
		next unless $lines[$i] =~ /^<!-- not run: moves the database between editions/;
		$i += 2;
		my $block = '';
		$block .= $lines[$i++] . "\n" while $lines[$i] ne '```';
		push @move, $block;
	}
}
is(scalar(@move), 3, 'docs/operations.md has the three blocks of a move');

my $node = claimq_node('editions', allows_streaming => 1,
	conf => "claimq.reclaimer = off\n");
$node->start;

# The plain script, run by the database's owner, who is no superuser.
$node->safe_psql('postgres', q{
	CREATE ROLE app_owner LOGIN;
	CREATE ROLE app_worker LOGIN;
	CREATE DATABASE app OWNER app_owner;});
my ($ret, $out, $err) = $node->psql('app', slurp_file($script),
	extra_params => [ '-U', 'app_owner' ]);
is($ret, 0, 'the database owner installs the portable edition') or diag($err);

sub app
{
	my ($sql, $user) = @_;
	return $node->safe_psql('app', $sql,
		extra_params => [ '-U', $user // 'postgres' ]);
}

my ($version) = slurp_file("$top/claimq.control") =~ /^default_version = '(.*)'$/m;
is(app('SELECT claimq.edition()'), 'portable', 'edition() is portable');
is(app('SELECT claimq.version()'), $version, 'version() is the release');
is( app(q{SELECT count(*) FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
		   WHERE p.pronamespace = 'claimq'::regnamespace AND r.rolname <> 'app_owner'}),
	'0', 'the owner owns every function');

# A queue with settings, jobs, a schedule, and a worker with the work duty.
app(q{
	SELECT claimq.create_queue('mv', lease => '1 hour', max_attempts => 7);
	SELECT claimq.enqueue_many('mv', array_fill('{}'::jsonb, ARRAY[6]));
	SELECT claimq.create_schedule('every', 'mv', '0 3 * * *');
	SELECT claimq.grant_duty('app_worker', 'work');}, 'app_owner');

# Holds claims: two claimed jobs and a running one, and a key claim.
# Returns "job:token" strings and the key's token.
sub hold
{
	my @held = split /\n/, app(q{
		SELECT job_id || ':' || token FROM claimq.claim('mv', 2)
		UNION ALL
		SELECT job_id || ':' || token FROM claimq.claim('mv', 1, start => true)},
		'app_worker');
	my $key = app(q{SELECT token FROM claimq.claim_keys('s', ARRAY['k'], '1 hour')},
		'app_worker');
	return (\@held, $key);
}

sub move
{
	my ($begin, $name) = @_;
	my ($ret, $out, $err) = $node->psql('app', $begin . $move[2],
		on_error_stop => 1,
		extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
	is($ret, 0, $name) or diag($err);
}

# After a move: the edition, the settings, the schedule, the grant, and
# every held claim settles with its own token and no other.
sub check_after
{
	my ($edition, $held, $key, $max_token) = @_;
	is(app('SELECT claimq.edition()'), $edition, "the database has the $edition edition");
	is(app(q{SELECT max_attempts FROM claimq.queue WHERE name = 'mv'}), '7',
		"$edition: the queue's settings are kept");
	is(app(q{SELECT count(*) FROM claimq.schedules WHERE schedule = 'every'}), '1',
		"$edition: the schedule is kept");
	my ($j0, $t0) = split /:/, $held->[0];
	my ($j1, $t1) = split /:/, $held->[1];
	my ($j2, $t2) = split /:/, $held->[2];
	is(app("SELECT outcome FROM claimq.complete(ARRAY[$j0]::bigint[], ARRAY[$t1]::bigint[])",
			'app_worker'),
		'stale', "$edition: another job's token is refused");
	is(app("SELECT outcome FROM claimq.complete(ARRAY[$j0]::bigint[], ARRAY[$t0]::bigint[])",
			'app_worker'),
		'ok', "$edition: a claim held across the move completes with its token");
	is(app("SELECT outcome FROM claimq.extend(ARRAY[$j1]::bigint[], ARRAY[$t1]::bigint[])",
			'app_worker'),
		'ok', "$edition: another is extended");
	is(app("SELECT state FROM claimq.status(ARRAY[$j2]::bigint[])", 'app_worker'),
		'running', "$edition: the running job is still running");
	is(app("SELECT outcome FROM claimq.fail(ARRAY[$j2]::bigint[], ARRAY[$t2]::bigint[], 'x')",
			'app_worker'),
		'ok', "$edition: the running job fails with its token");
	is(app("SELECT outcome FROM claimq.release(ARRAY[$j1]::bigint[], ARRAY[$t1]::bigint[])",
			'app_worker'),
		'ok', "$edition: and the extended one is released");
	is(app("SELECT outcome FROM claimq.release_keys('s', ARRAY['k'], ARRAY[$key]::bigint[])",
			'app_worker'),
		'ok', "$edition: the key claim is released with its token");
	# A move is a new lifetime: the portable edition's first claim
	# registers its epoch and hands out nothing.
	my $claim = q{SELECT min(token) FROM claimq.claim('mv', 1)};
	my $new = app($claim, 'app_worker');
	$new = app($claim, 'app_worker') if $new eq '' && $edition eq 'portable';
	cmp_ok($new, '>', $max_token,
		"$edition: a new claim's token is above every earlier one");
	cmp_ok($new >> 48, '>', ($max_token >> 48),
		"$edition: of a new epoch");
	app("SELECT claimq.release(job_id, token) FROM claimq.job WHERE token = $new");
}

sub max_token
{
	return app(q{SELECT greatest((SELECT max(token) FROM claimq.job),
								  (SELECT max(token) FROM claimq.key_claim))});
}

my ($held, $key) = hold();
is(scalar(@$held), 3, 'three claims held in the portable edition');
my $top_token = max_token();
move($move[0], 'the move from the portable edition to the C edition commits');
check_after('c', $held, $key, $top_token);

($held, $key) = hold();
$top_token = max_token();
my $begin = $move[1];
$begin =~ s/\\i claimq-portable\.sql/\\i $script/;
move($begin, 'the move from the C edition to the portable edition commits');
check_after('portable', $held, $key, $top_token);
is( app(q{SELECT count(*) FROM pg_extension WHERE extname = 'claimq'}),
	'0', 'the C edition is gone from the database');

# A failover: the promoted standby is a new server lifetime, whose epoch
# is above every epoch the old primary registered, and so are its tokens.
# (test/t/030_token_epochs.pl crashes claims in both editions.)
app(q{SELECT claimq.enqueue('mv', '{}')});
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('editions_standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$standby->start;
$node->wait_for_catchup($standby);
my $old_max = max_token();
my $old_epoch = app('SELECT max(epoch) FROM claimq.epoch');
$node->stop('immediate');
$standby->promote;
is($standby->safe_psql('app', q{SELECT count(*) FROM claimq.claim('mv', 1)}), '0',
	'the first claim after the promotion registers its epoch and hands out nothing');
my $after = $standby->safe_psql('app',
	q{SELECT token FROM claimq.claim('mv', 1)});
cmp_ok($after, '>', $old_max, 'after a failover tokens are above the old primary\'s');
is($standby->safe_psql('app', "SELECT ($after >> 48)::int"), $old_epoch + 1,
	'their epoch is one above the old primary\'s last');

$standby->stop;
done_testing();
