# A database moved from one server to another by pg_dump and a restore,
# with the steps of docs/operations.md ("Moving to another server"): the
# queues paused first, claims, a running job and a key claim held across
# the move.  The portable edition as a plain script, installed, dumped and
# restored by the database's owner, a role with LOGIN and nothing else (no
# superuser, no predefined role, no CREATE on schema public); through
# pg_tle too, when CLAIMQ_PGTLE_BINDIR names the bin directory of an
# installation with pg_tle and without claimq's files (as test/portable
# uses), with pgtle_admin as well.  And the C edition, which only a
# superuser can dump and restore (its tables belong to the extension's
# owner): the owner's pg_dump is refused, the superuser's moves it.
#
# After each move: the rows are the same; the held claims settle with
# their tokens (and refuse others); the queues are still paused until the
# owner resumes them; then new claims get tokens of a new epoch, above
# every token and epoch in the dump, new jobs ids above the dump's, and
# the grants of the worker's duty are there.  Neither server runs the
# reclaimer, so nothing changes the rows between the dump and the checks.
use strict;
use warnings;

use File::Basename qw(dirname);
use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $top = "$FindBin::RealBin/../..";
my $script = "$top/claimq-portable.sql";
my $tle_script = "$top/claimq-pgtle.sql";
ok(-e $script && -e $tle_script, 'make portable wrote the portable scripts');

my $tmp = $PostgreSQL::Test::Utils::tmp_check;

# Two servers of the C edition's installation; the portable edition's
# plain script needs none of claimq's files and runs there too.
my $src = claimq_node('move_src', conf => "claimq.reclaimer = off\n");
my $dst = claimq_node('move_dst', conf => "claimq.reclaimer = off\n");
$_->start for ($src, $dst);

# The roles and an empty database $db owned by app_owner, on $node (as
# the administrator of a server sets them up); schema public belongs to
# the superuser, so that the owner may not create there.
sub setup_server
{
	my ($node, $db) = @_;
	$node->safe_psql('postgres', q{
		DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app_owner') THEN
				CREATE ROLE app_owner LOGIN;
				CREATE ROLE app_worker LOGIN;
			END IF;
		END $$});
	$node->safe_psql('postgres', "CREATE DATABASE $db OWNER app_owner");
	$node->safe_psql($db, 'ALTER SCHEMA public OWNER TO postgres');
}

sub dbq
{
	my ($node, $db, $sql, $user) = @_;
	return $node->safe_psql($db, $sql,
		extra_params => [ '-U', $user // 'app_owner' ]);
}

# The owner has LOGIN and nothing more (with pg_tle, pgtle_admin).
sub owner_is_plain
{
	my ($node, $db, $also) = @_;
	is( $node->safe_psql($db, q{
		SELECT r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication
			   OR r.rolbypassrls,
			   (SELECT string_agg(g.rolname, ',' ORDER BY g.rolname)
				  FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
				 WHERE m.member = r.oid),
			   has_schema_privilege(r.oid, 'public', 'CREATE')
		  FROM pg_roles r WHERE r.rolname = 'app_owner'}),
		'f|' . ($also // '') . '|f',
		$node->name . " $db: the owner has LOGIN and nothing else");
}

# Queues, jobs in several states, a schedule, held
# claims and a key claim, on $node's $db, whose claimq is installed.
# $admin runs the administration.  Returns a hash of what the checks need.
sub fill
{
	my ($node, $db, $admin) = @_;
	my %s;
	dbq($node, $db, q{
		SELECT claimq.create_queue('mv', lease => '1 hour', max_attempts => 7);
		SELECT claimq.create_queue('side', keep_done => '1 day');
		SELECT claimq.enqueue_many('mv', array_fill('{"m": 1}'::jsonb, ARRAY[6]));
		SELECT claimq.enqueue('mv', '{"later": 1}', run_at => now() + interval '1 day');
		SELECT claimq.enqueue('side', '{"s": 1}', dedup_key => 'only-one');
		SELECT claimq.create_schedule('nightly', 'side', '0 3 * * *');}, $admin);
	# A dead job: claimed, started and failed for good.
	my ($dj, $dt) = split /\|/, dbq($node, $db,
		q{SELECT job_id, token FROM claimq.claim('mv', 1, start => true)}, 'app_worker');
	dbq($node, $db, "SELECT claimq.fail($dj, $dt, 'boom', permanent => true)", 'app_worker');
	# A done job on side.
	my ($sj, $st) = split /\|/, dbq($node, $db,
		q{SELECT job_id, token FROM claimq.claim('side', 1)}, 'app_worker');
	dbq($node, $db, "SELECT claimq.complete($sj, $st)", 'app_worker');
	# Held: two claimed jobs, a running one, a key claim.
	$s{held} = [ split /\n/, dbq($node, $db, q{
		SELECT job_id || ':' || token FROM claimq.claim('mv', 2, worker => 'w1')}, 'app_worker') ];
	push @{ $s{held} }, dbq($node, $db, q{
		SELECT job_id || ':' || token FROM claimq.claim('mv', 1, start => true)}, 'app_worker');
	$s{key} = dbq($node, $db,
		q{SELECT token FROM claimq.claim_keys('s', ARRAY['k'], '1 hour')}, 'app_worker');
	is(scalar(@{ $s{held} }), 3, "$db: three claims held") or diag(join ',', @{ $s{held} });
	is( $node->safe_psql($db, q{SELECT string_agg(state || ':' || n, ',' ORDER BY state)
						FROM (SELECT state, count(*) AS n FROM claimq.job GROUP BY state) s}),
		'claimed:2,dead:1,done:1,pending:3,running:1',
		"$db: jobs in every state before the dump");
	return \%s;
}

# The steps before the dump: every queue paused by the owner; a paused
# queue hands out nothing.
sub pause_all
{
	my ($node, $db, $admin) = @_;
	dbq($node, $db, 'SELECT claimq.pause_queue(queue) FROM claimq.queue_stats', $admin);
	is( dbq($node, $db, q{SELECT count(*) FILTER (WHERE NOT paused) FROM claimq.queue_stats}),
		'0', "$db: every queue is paused");
	is(dbq($node, $db, q{SELECT count(*) FROM claimq.claim('mv', 10)}, 'app_worker'),
		'0', "$db: a claim on a paused queue takes nothing");
}

# What must come back the same, as row texts.
my %compare = (
	'queue rows' =>
	  q{SELECT string_agg(t::text, E'\n' ORDER BY queue_id) FROM claimq.queue t},
	'job rows' =>
	  q{SELECT string_agg(t::text, E'\n' ORDER BY job_id) FROM claimq.job t},
	'key_claim rows' =>
	  q{SELECT string_agg(t::text, E'\n' ORDER BY scope, key) FROM claimq.key_claim t},
	'schedule rows' =>
	  q{SELECT string_agg(t::text, E'\n' ORDER BY name) FROM claimq.schedule t},
	'id sequences' => q{
		SELECT format('%s/%s %s/%s', q.last_value, q.is_called, j.last_value, j.is_called)
		  FROM claimq.queue_id_seq q, claimq.job_id_seq j},);

sub snapshot
{
	my ($node, $db) = @_;
	my %before = map { $_ => $node->safe_psql($db, $compare{$_}) } keys %compare;
	$before{max_token} = $node->safe_psql($db, q{
		SELECT greatest((SELECT max(token) FROM claimq.job),
						(SELECT max(token) FROM claimq.key_claim))});
	$before{max_epoch} = $node->safe_psql($db, 'SELECT max(epoch) FROM claimq.epoch');
	$before{max_id} = $node->safe_psql($db, 'SELECT max(job_id) FROM claimq.job');
	return \%before;
}

# The checks after a restore on $dst's $db.
sub check_after
{
	my ($db, $edition, $s, $before, $admin) = @_;
	is(dbq($dst, $db, 'SELECT claimq.edition()', 'app_worker'), $edition,
		"$db: the restored database has the $edition edition");
	for my $what (sort keys %compare)
	{
		is($dst->safe_psql($db, $compare{$what}), $before->{$what},
			"$db: restored $what are the same");
	}
	is( $dst->safe_psql($db, q{
		SELECT has_function_privilege('app_worker',
				'claimq.claim(text, integer, interval, text, boolean, interval)', 'EXECUTE'),
			   has_function_privilege('app_worker', 'claimq.pause_queue(text)', 'EXECUTE'),
			   has_table_privilege('app_worker', 'claimq.job', 'SELECT')}),
		't|f|f', "$db: the worker's duty is restored, and no more");

	# The queues are still paused.  (No claim here: in the portable
	# edition the first claim of the new lifetime registers its epoch,
	# which maintain() must do below.)
	is( dbq($dst, $db, q{SELECT string_agg(queue || ':' || paused, ',' ORDER BY queue)
						  FROM claimq.queue_stats}, $admin),
		'mv:true,side:true', "$db: the restored queues are paused");

	# The held claims settle with their tokens, and refuse others.
	my ($j0, $t0) = split /:/, $s->{held}[0];
	my ($j1, $t1) = split /:/, $s->{held}[1];
	my ($j2, $t2) = split /:/, $s->{held}[2];
	my @settle = (
		[ "complete(ARRAY[$j0], ARRAY[$t1])", 'stale', "another job's token is refused" ],
		[ "complete(ARRAY[$j0], ARRAY[$t0])", 'ok',
		  'a claim held across the move completes with its token' ],
		[ "extend(ARRAY[$j1], ARRAY[$t1])", 'ok', 'another is extended with its token' ],
		[ "release(ARRAY[$j1], ARRAY[$t1])", 'ok', 'and released' ],
		[ "fail(ARRAY[$j2], ARRAY[$t2], 'x')", 'ok',
		  'the running job fails with its token' ],
		[ "release_keys('s', ARRAY['k'], ARRAY[$s->{key}])", 'ok',
		  'the key claim is released with its token' ]);
	for my $c (@settle)
	{
		is(dbq($dst, $db, "SELECT outcome FROM claimq.$c->[0]", 'app_worker'),
			$c->[1], "$db: $c->[2]");
	}
	is($dst->safe_psql($db, "SELECT state FROM claimq.job WHERE job_id = $j2"),
		'pending', "$db: the failed job waits for its retry");

	# The owner runs maintain(), which registers the new lifetime's epoch,
	# and resumes the queues: the first claim hands out a job at once.
	is( dbq($dst, $db,
			q{SELECT string_agg(step || ':' || count, ',') FROM claimq.maintain()}, $admin),
		'reclaim:0,fire_schedules:0,prune:0,sweep_keys:0',
		"$db: maintain() runs for the owner");
	dbq($dst, $db, 'SELECT claimq.resume_queue(queue) FROM claimq.queue_stats', $admin);
	my ($nj, $nt) = split /:/, dbq($dst, $db,
		q{SELECT job_id || ':' || token FROM claimq.claim('mv', 1, lease => '1 min')},
		'app_worker');
	like($nj // '', qr/^[0-9]+$/,
		"$db: after maintain() and resume_queue the first claim takes a job");
	cmp_ok($nt // 0, '>', $before->{max_token},
		"$db: its token is above every token in the dump");
	cmp_ok(($nt // 0) >> 48, '>', $before->{max_epoch},
		"$db: of a new epoch, above every epoch the dump registered");
	is(dbq($dst, $db, "SELECT claimq.complete($nj, $nt)", 'app_worker'), 't',
		"$db: and completes with it");
	my $kt = dbq($dst, $db,
		q{SELECT token FROM claimq.claim_keys('s', ARRAY['k2'], '1 hour')}, 'app_worker');
	cmp_ok($kt, '>', $before->{max_token}, "$db: a new key claim's token is above them too");
	my $id = dbq($dst, $db, q{SELECT claimq.enqueue('side', '{"new": 1}')}, $admin);
	cmp_ok($id, '>', $before->{max_id}, "$db: a new job's id is above the dump's");
	is( dbq($dst, $db, q{SELECT claimq.enqueue('side', '{"s": 2}', dedup_key => 'only-one')},
			$admin),
		$id + 1, "$db: a finished job's dedup key is free (a new job)");
}

# A client program of $node's installation, by its full path: IPC::Run
# keeps the first path it found for a name.
sub prog
{
	my ($node, $name) = @_;
	return $node->install_path ? $node->install_path . "/bin/$name" : $name;
}

# The dump, by $user, to $file; checks that it exits cleanly.
sub dump_ok
{
	my ($node, $db, $user, $file) = @_;
	$node->command_checks_all(
		[ prog($node, 'pg_dump'), '-Fc', '-U', $user, '-d', $db, '-f', $file ],
		0, [qr/^$/], [qr/^$/], "$db: pg_dump -Fc as $user");
}

#
# The portable edition as a plain script.
#
setup_server($_, 'app') for ($src, $dst);
owner_is_plain($_, 'app') for ($src, $dst);
my ($ret, $out, $err) = $src->psql('app', slurp_file($script),
	extra_params => [ '-U', 'app_owner' ]);
is($ret, 0, 'app: the owner installs the portable edition') or diag($err);
dbq($src, 'app', q{SELECT claimq.grant_duty('app_worker', 'work')});
my $s = fill($src, 'app', 'app_owner');
pause_all($src, 'app', 'app_owner');
my $before = snapshot($src, 'app');
dump_ok($src, 'app', 'app_owner', "$tmp/app.dump");
$dst->command_checks_all(
	[ 'pg_restore', '--exit-on-error', '-U', 'app_owner', '-d', 'app', "$tmp/app.dump" ],
	0, [qr/^$/], [qr/^$/], 'app: pg_restore as the owner, without error');
check_after('app', 'portable', $s, $before, 'app_owner');
is(dbq($src, 'app', $compare{'job rows'}), $before->{'job rows'},
	'app: the source is untouched');

#
# The C edition: the superuser creates the extension and gives the owner
# the administer and produce duties.  The owner's pg_dump cannot read the extension's
# tables; the superuser dumps and restores.
#
setup_server($_, 'capp') for ($src, $dst);
$src->safe_psql('capp', q{
	CREATE EXTENSION claimq;
	SELECT claimq.grant_duty('app_owner', 'administer');
	SELECT claimq.grant_duty('app_owner', 'produce');
	SELECT claimq.grant_duty('app_worker', 'work');});
$s = fill($src, 'capp', 'app_owner');
pause_all($src, 'capp', 'app_owner');
$before = snapshot($src, 'capp');
$src->command_fails_like(
	[ 'pg_dump', '-Fc', '-U', 'app_owner', '-d', 'capp', '-f', "$tmp/capp-owner.dump" ],
	qr/permission denied|lack SELECT privilege/,
	"capp: the owner's pg_dump cannot read the C edition's tables");
dump_ok($src, 'capp', 'postgres', "$tmp/capp.dump");
$dst->command_checks_all(
	[ 'pg_restore', '--exit-on-error', '-U', 'postgres', '-d', 'capp', "$tmp/capp.dump" ],
	0, [qr/^$/], [qr/^$/], 'capp: pg_restore as the superuser, without error');
check_after('capp', 'c', $s, $before, 'app_owner');

$_->stop for ($src, $dst);
log_is_clean($_) for ($src, $dst);

#
# Through pg_tle: the owner registers and creates claimq, dumps, and
# restores on a server where the administrator created pg_tle in the new
# database, leaving out pg_tle's own entries (its schema, extension and
# settings), which the restore cannot make and the server has.
#
SKIP:
{
	my $bindir = $ENV{CLAIMQ_PGTLE_BINDIR};
	skip 'CLAIMQ_PGTLE_BINDIR is not set: it names an installation with pg_tle', 1
	  unless $bindir && -x "$bindir/pg_ctl";
	my $path = dirname($bindir);
	my %tle = (
		install_path => $path,
		no_preload => 1,
		conf => "shared_preload_libraries = 'pg_tle'\n");
	$src = claimq_node('move_tle_src', %tle);
	$dst = claimq_node('move_tle_dst', %tle);
	$_->start for ($src, $dst);
	for my $node ($src, $dst)
	{
		setup_server($node, 'tapp');
		$node->safe_psql('tapp', q{
			CREATE EXTENSION pg_tle;
			GRANT pgtle_admin TO app_owner;});
		owner_is_plain($node, 'tapp', 'pgtle_admin');
	}
	($ret, $out, $err) = $src->psql('tapp',
		slurp_file($tle_script) . "CREATE EXTENSION claimq;\n",
		extra_params => [ '-U', 'app_owner', '-v', 'ON_ERROR_STOP=1' ]);
	is($ret, 0, 'tapp: the owner registers claimq with pg_tle and creates it')
	  or diag($err);
	dbq($src, 'tapp', q{SELECT claimq.grant_duty('app_worker', 'work')});
	$s = fill($src, 'tapp', 'app_owner');
	pause_all($src, 'tapp', 'app_owner');
	$before = snapshot($src, 'tapp');
	dump_ok($src, 'tapp', 'app_owner', "$tmp/tapp.dump");
	$dst->command_ok([ prog($dst, 'pg_restore'), '-l', '-f', "$tmp/tapp.all", "$tmp/tapp.dump" ],
		'tapp: pg_restore -l');
	# The pattern of docs/operations.md's grep -v.
	my @entries = grep { !/ (SCHEMA - pgtle|EXTENSION - pg_tle|EXTENSION pg_tle|TABLE DATA pgtle) /
	} split /\n/, slurp_file("$tmp/tapp.all");
	open my $fh, '>', "$tmp/tapp.list" or die $!;
	print $fh "$_\n" for @entries;
	close $fh;
	like(slurp_file("$tmp/tapp.list"), qr/FUNCTION pgtle claimq--[0-9.]+\.sql\(\)/,
		"tapp: the dump holds claimq's registration with pg_tle");
	$dst->command_checks_all(
		[ prog($dst, 'pg_restore'), '--exit-on-error', '-U', 'app_owner', '-d', 'tapp',
		  '-L', "$tmp/tapp.list", "$tmp/tapp.dump" ],
		0, [qr/^$/], [qr/^$/],
		"tapp: pg_restore as the owner, without pg_tle's own entries, without error");
	check_after('tapp', 'portable', $s, $before, 'app_owner');
	$_->stop for ($src, $dst);
}

done_testing();
