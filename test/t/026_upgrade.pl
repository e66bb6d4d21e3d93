# A major-version upgrade with pg_upgrade, from PostgreSQL 15 to this
# suite's PostgreSQL, keeps every claim.
#
# The old cluster (the installation named by CLAIMQ_UPGRADE_FROM, with
# claimq installed) serves database "app" with the reclaimer.  It holds a
# claim and a key claim made on timeline 1, is then promoted (timeline 2,
# so tokens of token epoch 1), and gets queues of every kind: plain (with
# done jobs and their results, dead, cancelled, retried, claimed, running,
# reclaimed, ready and scheduled jobs, live dedup keys), group limits,
# FIFO groups, a rate limit whose bucket is empty, two schedules (one that
# fires every second, one for later), live key claims and roles with each
# duty.  Its rows, sequences, grants and tokens are recorded; it stops, and
# pg_upgrade makes the new cluster, with no other step (no pg_resetwal: the
# token epochs are registered in the database, not taken from the
# timeline, which pg_upgrade starts again at 1).
#
# On the new cluster, started as a user would (reclaimer on):
#  - the rows, sequence positions and grants are the same (the every-second
#    schedule's progress and jobs are checked by the next items instead);
#  - every held token settles its job, the claim made on timeline 1
#    included; a token is refused for another job, for a job reclaimed
#    before the upgrade and for one reclaimed after it; key claims hold
#    and are released by their tokens only; dedup keys hold;
#  - new tokens are above every token handed out before, of an epoch
#    above the old cluster's last: none is handed out twice;
#  - FIFO, group limits and the rate limit go on where they were (no
#    burst of the emptied bucket);
#  - the every-second schedule (missed => 'all') has exactly one job per
#    occurrence, before, during and after the upgrade: none twice, none
#    missing;
#  - the reclaimer serves the database; after its first pass the census is
#    valid and equals the table.  Counters live in shared memory, which a
#    start makes new: right after the first pass they are all zero (none
#    of the work done before the upgrade is counted), and at the end they
#    hold exactly the calls made after the upgrade.
#
# Can it fail?  A copy of the new cluster as pg_upgrade leaves it, with
# claimq's register of epochs emptied, hands out tokens that the "none
# twice" check refuses (0.7, whose epoch followed the timeline, did so
# without the emptying, until pg_resetwal put the timeline back).
#
# Without CLAIMQ_UPGRADE_FROM (as in the PostgreSQL 15 suite itself) the
# test is skipped, saying why.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use List::Util qw(all max);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::RecursiveCopy;
use PostgreSQL::Test::Utils;
use Test::More;

my $old_install = $ENV{CLAIMQ_UPGRADE_FROM};
if (!defined $old_install || $old_install eq '')
{
	plan skip_all =>
	  'CLAIMQ_UPGRADE_FROM is not set: it names the PostgreSQL 15 installation '
	  . '(a directory with bin/, with claimq installed) to upgrade from';
}
if (!-x "$old_install/bin/pg_ctl")
{
	plan skip_all => "CLAIMQ_UPGRADE_FROM ($old_install) has no bin/pg_ctl";
}

# Both clusters are made by initdb with the same options, as pg_upgrade
# requires, and have the same claimq settings.
my @initdb = ('--encoding=UTF8', '--locale=C', '--data-checksums');
my $claimq_conf = "claimq.databases = 'app'\n";

my $old = claimq_node(
	'old',
	install_path => $old_install,
	initdb => \@initdb,
	# Replica WAL, so that the node can be started as a standby and promoted.
	conf => $claimq_conf . "wal_level = replica\n");
like($old->pg_version, qr/^15\b/, 'the old cluster runs PostgreSQL 15');
$old->start;

# Run $sql on database app of $node.
sub dbq
{
	my ($node, $sql) = @_;
	return $node->safe_psql('app', $sql);
}

# Every token the test was given before the upgrade.
my @issued;

# Enqueue one job into $queue with $enqueue_args and, unless $claim is
# undef, claim it with $claim (the setup leaves no other ready job in the
# queue, so the claim takes this one).  Returns (job_id, token).
sub job
{
	my ($node, $queue, $name, $enqueue_args, $claim) = @_;
	my $id = dbq($node,
		"SELECT claimq.enqueue('$queue', '{\"n\": \"$name\"}'$enqueue_args)");
	return ($id, undef) unless defined $claim;
	my ($cid, $token) = split /\|/,
	  dbq($node, "SELECT job_id, token FROM claimq.claim('$queue'$claim)");
	is($cid, $id, "setup: claimed the $name job");
	push @issued, $token;
	return ($id, $token);
}

# claim_keys in $scope for $keys; returns the token (one per call).
sub key_claim
{
	my ($node, $scope, $keys) = @_;
	my @tokens = split /\n/, dbq($node, qq{
		SELECT token FROM claimq.claim_keys('$scope', '$keys', '1 hour')});
	push @issued, @tokens;
	return $tokens[0];
}

$old->safe_psql('postgres', 'CREATE DATABASE app');
dbq($old, q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('plain', lease => '45 s', run_lease => '10 min',
							   max_attempts => 3, retry_base => '10 s',
							   retry_max => '30 s', keep_done => '1 day',
							   keep_dead => '7 days', notify => true);
	CREATE ROLE cq_producer;
	CREATE ROLE cq_worker;
	CREATE ROLE cq_admin;
	CREATE ROLE cq_observer;
	CREATE ROLE cq_nobody;
	SELECT claimq.grant_duty('cq_producer', 'produce');
	SELECT claimq.grant_duty('cq_worker', 'work');
	SELECT claimq.grant_duty('cq_admin', 'administer');
	SELECT claimq.grant_duty('cq_observer', 'observe');
});

# On timeline 1: a claim and a key claim that are held through the
# promotion and the upgrade.
my ($j_tl1, $t_tl1) = job($old, 'plain', 'held-tl1', ", dedup_key => 'dk-tl1'",
	", lease => '1 hour', worker => 'w-tl1'");
my $kt_tl1 = key_claim($old, 'scope', '{k-tl1}');

# Promote the old cluster, as a failover would: it goes on, on timeline 2.
$old->stop;
$old->set_standby_mode;
$old->start;
$old->promote;
poll_ok($old, 'app', 'SELECT pg_is_in_recovery()', 'f', 60,
	'setup: the old cluster is promoted');

# Plain queue: a job in each state.  Claims take the only ready job.
my ($j_done, $t_done) = job($old, 'plain', 'done', '', ", lease => '1 hour'");
is(dbq($old, qq{SELECT claimq.complete($j_done, $t_done, '{"r": 42}')}),
	't', 'setup: a done job with a result');
my ($j_dead, $t_dead) =
  job($old, 'plain', 'dead', ", dedup_key => 'dk-dead'", ", start => true");
is(dbq($old, "SELECT claimq.fail($j_dead, $t_dead, 'boom', permanent => true)"),
	't', 'setup: a dead job');
my ($j_cancel) = job($old, 'plain', 'cancelled', ", dedup_key => 'dk-cancel'");
is(dbq($old, "SELECT outcome FROM claimq.cancel(ARRAY[$j_cancel])"),
	'ok', 'setup: a cancelled job');
my ($j_retry, $t_retry) = job($old, 'plain', 'retry', '', ", start => true");
is( dbq($old,
		"SELECT claimq.fail($j_retry, $t_retry, 'again', retry_in => '1 hour')"),
	't',
	'setup: a failed job waiting for its retry');
my ($j_tl2, $t_tl2) = job($old, 'plain', 'held-tl2', ", priority => 5",
	", lease => '1 hour', worker => 'w-tl2'");
my ($j_run, $t_run) = job($old, 'plain', 'running', '',
	", lease => '1 hour', worker => 'w-run', start => true");
my ($j_rec, $t_rec) = job($old, 'plain', 'reclaimed', '',
	", lease => '1 s', worker => 'w-gone'");
my ($j_ready) = job($old, 'plain', 'ready', ", priority => 3, dedup_key => 'dk-ready'");
my ($j_sched) = job($old, 'plain', 'scheduled',
	", run_at => now() + interval '1 day', dedup_key => 'dk-sched'");

is($t_tl1 >> 48, 0, 'setup: the claim made on timeline 1 has token epoch 0');
is($t_tl2 >> 48, 1, 'setup: claims made after the promotion have token epoch 1');

# Group limit: two of group a in flight, the third held; b's one in flight.
my %grp = map { split /\|/ } grep { /\|/ } split /\n/, dbq($old, q{
	SELECT claimq.create_queue('grp', lease => '1 hour', group_limit => 2,
							   max_in_flight => 10);
	SELECT count(*) FROM claimq.enqueue_many('grp',
		ARRAY['{"g": "a1"}', '{"g": "a2"}', '{"g": "a3"}', '{"g": "b1"}']::jsonb[],
		group_keys => '{a,a,a,b}');
	SELECT payload->>'g', job_id || ',' || token FROM claimq.claim('grp', 10);
});
is(join(',', sort keys %grp), 'a1,a2,b1', 'setup: the group limit held a3 back');

# FIFO: the head of group g claimed, the other two wait.
my @fifo = grep { /^\d+,\d+$/ } split /\n/, dbq($old, q{
	SELECT claimq.create_queue('fifo', lease => '1 hour', group_fifo => true);
	SELECT count(*) FROM claimq.enqueue_many('fifo',
		ARRAY['{"d": 1}', '{"d": 2}', '{"d": 3}']::jsonb[], group_keys => '{g,g,g}');
	SELECT job_id || ',' || token FROM claimq.claim('fifo', 10);
});
is(scalar(@fifo), 1, 'setup: the FIFO head is claimed, alone');
my $fifo_head = $fifo[0];

# Rate limit: 5 an hour; a claim of 10 gets the 5 the bucket held.
my @rate = grep { /^\d+,\d+$/ } split /\n/, dbq($old, q{
	SELECT claimq.create_queue('rate', lease => '1 hour', rate_limit => 5,
							   rate_period => '1 hour');
	SELECT count(*) FROM claimq.enqueue_many('rate', array_fill('{}'::jsonb, ARRAY[8]));
	SELECT job_id || ',' || token FROM claimq.claim('rate', 10);
});
is(scalar(@rate), 5, 'setup: the rate limit hands out 5 of 8 jobs');
# The reclaimer writes the shared bucket's record into the queue's row.
poll_ok($old, 'app',
	"SELECT rate_at IS NOT NULL FROM claimq.queue WHERE name = 'rate'",
	't', 30, 'setup: the emptied bucket is recorded');

push @issued, map { (split /,/)[1] } values(%grp), $fifo_head, @rate;

# Live key claims, and a queue for the token probes.
my $kt_k1 = key_claim($old, 'scope', '{k1}');
my $kt_k2 = key_claim($old, 'scope', '{k2}');

# Schedules: one every second, catching up every occurrence; one later.
dbq($old, q{
	SELECT claimq.create_queue('probe', lease => '1 min');
	SELECT claimq.create_queue('tick');
	SELECT claimq.create_schedule('tick', 'tick', '@every 1 second', missed => 'all');
	SELECT claimq.create_schedule('nightly', 'plain', '30 2 * * mon-fri',
								  payload => '{"night": 1}',
								  time_zone => 'Europe/Berlin');
});

poll_ok($old, 'app',
	"SELECT state FROM claimq.job WHERE job_id = $j_rec",
	'pending', 30, 'setup: the reclaimer reclaimed the 1 s claim');
poll_ok($old, 'app', q{
	SELECT count(*) >= 2 FROM claimq.job JOIN claimq.queue USING (queue_id)
	 WHERE name = 'tick'},
	't', 30, 'setup: the reclaimer fires the every-second schedule');

# Jobs per queue and state (the tick queue's are checked on their own).
my $states_sql = q{
	SELECT string_agg(format('%s:%s:%s', q.name, j.state, j.n), ','
					  ORDER BY q.name, j.state)
	  FROM (SELECT queue_id, state, count(*) AS n FROM claimq.job
			 GROUP BY queue_id, state) j
	  JOIN claimq.queue q USING (queue_id)
	 WHERE q.name <> 'tick'};
is( dbq($old, $states_sql),
	'fifo:claimed:1,fifo:pending:2,grp:claimed:3,grp:pending:1,'
	  . 'plain:cancelled:1,plain:claimed:2,plain:dead:1,plain:done:1,'
	  . 'plain:pending:4,plain:running:1,rate:claimed:5,rate:pending:3',
	'the old cluster holds jobs in every state');

my $not_tick = q{(SELECT queue_id FROM claimq.queue WHERE name = 'tick')};
my @roles = qw(public cq_producer cq_worker cq_admin cq_observer cq_nobody);
my $roles = '{' . join(',', @roles) . '}';

# What has to come back the same, as row texts, so that every column counts.
my %compare = (
	'queue rows (settings, pause, rate bucket)' => q{
		SELECT string_agg(t::text, E'\n' ORDER BY queue_id) FROM claimq.queue t},
	'job rows (states, attempts, run_at, tokens, payloads, results)' => qq{
		SELECT string_agg(t::text, E'\\n' ORDER BY job_id) FROM claimq.job t
		 WHERE queue_id <> $not_tick},
	'schedule rows' => q{
		SELECT string_agg(CASE WHEN name = 'tick'
							   THEN concat_ws('|', name, queue_id, cron, time_zone, payload,
											  priority, missed, enabled, anchor, created_at)
							   ELSE t::text END, E'\n' ORDER BY name)
		  FROM claimq.schedule t},
	'job_group rows' => q{
		SELECT string_agg(t::text, E'\n' ORDER BY queue_id, group_key)
		  FROM claimq.job_group t},
	'key_claim rows' => q{
		SELECT string_agg(t::text, E'\n' ORDER BY scope, key) FROM claimq.key_claim t},
	'queue_id and token sequences' => q{
		SELECT format('%s/%s %s/%s', q.last_value, q.is_called, t.last_value, t.is_called)
		  FROM claimq.queue_id_seq q, claimq.token_seq t},
	'queue_stats counts' => q{
		SELECT string_agg(concat_ws(':', queue, paused, ready, scheduled, claimed,
									running, expired, dead, done, cancelled), ','
						  ORDER BY queue)
		  FROM claimq.queue_stats WHERE queue <> 'tick'},
	'jobs per queue and state' => $states_sql,
	'extension version' => q{
		SELECT extversion FROM pg_extension WHERE extname = 'claimq'},
	'privileges of PUBLIC and of each duty' => qq{
		SELECT string_agg(format('%s: %s', r, o), E'\\n' ORDER BY r, o)
		  FROM unnest('$roles'::text[]) r,
			   LATERAL (SELECT p.oid::regprocedure::text
						  FROM pg_proc p
						 WHERE p.pronamespace = 'claimq'::regnamespace
						   AND has_function_privilege(r, p.oid, 'EXECUTE')
						UNION ALL
						SELECT format('%s %s', c.oid::regclass, m)
						  FROM pg_class c, unnest('{SELECT,INSERT,UPDATE,DELETE}'::text[]) m
						 WHERE c.relnamespace = 'claimq'::regnamespace
						   AND c.relkind IN ('r', 'v', 'S')
						   AND has_table_privilege(r, c.oid, m)
						UNION ALL
						SELECT 'schema claimq USAGE'
						 WHERE has_schema_privilege(r, 'claimq', 'USAGE')) x(o)},);
my %before = map { $_ => dbq($old, $compare{$_}) } keys %compare;

my $privileges = $before{'privileges of PUBLIC and of each duty'};
like($privileges,
	qr/^cq_worker: claimq\.claim\(text,integer,interval,text,boolean,interval\)$/m,
	'the recorded privileges hold the work duty');
like($privileges, qr/^cq_observer: claimq\.queue_stats SELECT$/m,
	'and the observe duty');
unlike($privileges, qr/^(public|cq_nobody):/m,
	'and nothing of PUBLIC or a role without a duty');
unlike($privileges, qr/^cq_worker: claimq\.create_queue/m,
	'and no more than the duty');

my $old_job_id_seq = dbq($old, 'SELECT last_value FROM claimq.job_id_seq');
my $max_before = max(@issued,
	dbq($old, q{
	SELECT greatest((SELECT max(token) FROM claimq.job),
					(SELECT max(token) FROM claimq.key_claim))}));

# The new cluster, run from this suite's installation.
my $new = claimq_node('new', initdb => \@initdb, conf => $claimq_conf);
my $new_bindir = $new->config_data('--bindir');

# Not claimq's: PostgreSQL 15.20 marks every column with the attribute
# option pg_attver, which PostgreSQL 18 releases older than it (18.6) do
# not know, so that pg_upgrade's restore fails on the first table
# (docs/operations.md: take an 18 at least as new as the 15).  Where the
# new installation does not know the option, the marks are taken off the
# columns of the old cluster's own tables (pg_upgrade dumps no others), so
# that the test can run at all.
$new->start;
my ($ret) = $new->psql('postgres', q{
	BEGIN;
	CREATE TABLE pg_temp.attver_probe (a integer);
	ALTER TABLE pg_temp.attver_probe ALTER COLUMN a SET (pg_attver = 1);
	ROLLBACK});
$new->stop;
if ($ret != 0)
{
	my $n = dbq($old, q{
		WITH m AS (
			UPDATE pg_attribute
			   SET attoptions = NULLIF(ARRAY(SELECT o FROM unnest(attoptions) o
											  WHERE o NOT LIKE 'pg_attver=%'), '{}')
			 WHERE attrelid >= 16384 AND attoptions::text LIKE '%pg_attver=%'
			RETURNING 1)
		SELECT count(*) FROM m});
	note("the new installation does not know pg_attver: "
		  . "taken off $n columns of the old cluster");
}
# The last epoch the old cluster registered.
my $old_epoch = dbq($old, 'SELECT max(epoch) FROM claimq.epoch');
cmp_ok($old_epoch, '>=', 1, 'the old cluster registered an epoch after its promotion');
$old->stop;

# The old cluster's timeline, which pg_upgrade does not carry over.
my ($controldata) =
  run_command([ "$old_install/bin/pg_controldata", $old->data_dir ]);
my ($old_tli) = $controldata =~ /^Latest checkpoint's TimeLineID:\s+(\d+)$/m;
is($old_tli, 2, 'the old cluster ends on timeline 2');

chdir $PostgreSQL::Test::Utils::tmp_check;
ok( run_log(
		[
		"$new_bindir/pg_upgrade", '--no-sync', '--copy',
		'--old-datadir' => $old->data_dir,
		'--new-datadir' => $new->data_dir,
		'--old-bindir' => "$old_install/bin",
		'--new-bindir' => $new_bindir,
		'--old-port' => $old->port,
		'--new-port' => $new->port,
		'--socketdir' => $new->host,
		]),
	'pg_upgrade from the old cluster to the new one')
  or die 'pg_upgrade failed: see its logs in the new data directory';

# Keep a copy of the new cluster as pg_upgrade left it, for the end.
my $broken = PostgreSQL::Test::Cluster->new('broken');
PostgreSQL::Test::RecursiveCopy::copypath($new->data_dir, $broken->data_dir);
chmod(0700, $broken->data_dir) or die "chmod: $!";
$broken->append_conf('postgresql.conf', 'port = ' . $broken->port);

$new->start;
my $started = dbq($new, 'SELECT pg_postmaster_start_time()');

for my $what (sort keys %compare)
{
	is(dbq($new, $compare{$what}), $before{$what}, "the upgraded $what are the same");
}
cmp_ok(dbq($new, 'SELECT last_value FROM claimq.job_id_seq'),
	'>=', $old_job_id_seq, 'the job id sequence did not go back');

# The reclaimer serves the database; its first pass counts the census
# again and counts nothing in the counters.
poll_ok($new, 'app', q{
	SELECT database, pid IS NOT NULL, last_run IS NOT NULL, last_error
	  FROM claimq.reclaimer_status},
	'app|t|t|', 60, 'the reclaimer serves the upgraded database');
poll_ok($new, 'app',
	'SELECT EXISTS (SELECT FROM claimq.census() WHERE queue_id = 0)',
	't', 60, 'after its first pass the census is valid');
my $counters_sql = q{
	SELECT string_agg(concat_ws('|', queue, claimed, started, completed, failed,
								released, reclaimed, dead, stale, cancelled, snoozed),
					  E'\n' ORDER BY queue)
	  FROM claimq.counters()
	 WHERE database = current_database()
	   AND claimed + started + completed + failed + released + reclaimed + dead
		   + stale + cancelled + snoozed > 0};
is(dbq($new, $counters_sql), '',
	'the counters start at zero: nothing done before the upgrade is counted');

# Tokens drawn now: three claims and a key claim, in new sessions.
sub draw_tokens
{
	my ($node) = @_;
	my @tokens = split /\n/, dbq($node, q{
		SELECT count(*) FROM claimq.enqueue_many('probe', array_fill('{}'::jsonb, ARRAY[3]));
		SELECT token FROM claimq.claim('probe', 3)});
	shift @tokens;
	push @tokens, split /\n/, dbq($node, q{
		SELECT token FROM claimq.claim_keys('probe', ARRAY[gen_random_uuid()::text], '1 hour')});
	return @tokens;
}

# The check: tokens handed out now are above every token handed out
# before the upgrade (and so of the same epoch or a later one): none is
# handed out twice.
sub tokens_are_new
{
	my ($drawn, $max) = @_;
	return @$drawn == 4 && all { $_ > $max } @$drawn;
}

my @drawn = draw_tokens($new);
ok(tokens_are_new(\@drawn, $max_before),
	'new claims and key claims get tokens above every token handed out before')
  or diag("before: up to $max_before; now: @drawn");
# (pg_upgrade starts the old cluster again, whose reclaimer may register
# another lifetime's epoch meanwhile.)
ok((all { ($_ >> 48) > $old_epoch } @drawn),
	'the token epoch went on: above the old cluster\'s, on timeline 1')
  or diag('epochs: ' . join(',', map { $_ >> 48 } @drawn) . "; the old cluster's: $old_epoch");

# The every-second schedule fired after the upgrade, and each occurrence
# once: before, during and after it.
poll_ok($new, 'app', qq{
	SELECT count(*) > 0 FROM claimq.job JOIN claimq.queue USING (queue_id)
	 WHERE name = 'tick' AND run_at > '$started'},
	't', 60, 'the schedule fires on the upgraded database');
dbq($new, "SELECT claimq.alter_schedule('tick', enabled => false)");
my ($n, $distinct, $missing, $before_upgrade) = split /\|/, dbq($new, qq{
	SELECT count(*), count(DISTINCT j.run_at),
		   (SELECT count(*)
			  FROM generate_series(1, extract(epoch FROM max(j.run_at) - s.anchor)::int) k
			 WHERE NOT EXISTS (SELECT FROM claimq.job j2
								WHERE j2.queue_id = s.queue_id
								  AND j2.run_at = s.anchor + k * interval '1 second')),
		   count(*) FILTER (WHERE j.job_id <= $old_job_id_seq)
	  FROM claimq.schedule s JOIN claimq.job j USING (queue_id)
	 WHERE s.name = 'tick'
	 GROUP BY s.anchor, s.queue_id});
cmp_ok($before_upgrade, '>=', 2, "the schedule's jobs from before the upgrade are there");
is($distinct, $n, "no occurrence fired twice ($n jobs)");
is($missing, '0', 'none missing, those of the downtime included');

# The census equals the table.
dbq($new, slurp_file("$FindBin::RealBin/../census_wrong.sql"));
my $census_wrong_sql = 'SELECT count(*) FROM census_wrong';
is(dbq($new, $census_wrong_sql), '0', 'the census equals the job table');

# Held tokens settle their jobs; other tokens do not.
is( dbq($new, qq{
	SELECT string_agg(outcome, ',' ORDER BY job_id)
	  FROM claimq.complete(ARRAY[$j_tl1, $j_tl2], ARRAY[$t_tl1, $t_tl2])}),
	'ok,ok',
	'claims held across the upgrade complete with their tokens, '
	  . 'the one made on timeline 1 included');
is( dbq($new, qq{
	SELECT string_agg(outcome, ',')
	  FROM claimq.complete(ARRAY[$j_run, $j_rec], ARRAY[$t_tl2, $t_rec])}),
	'stale,stale',
	"another job's token is refused, and so is the old token of a job "
	  . 'reclaimed before the upgrade');

# A running claim made to expire is reclaimed by the reclaimer; then its
# token is refused.
is(dbq($new, "SELECT outcome FROM claimq.extend(ARRAY[$j_run], ARRAY[$t_run], '10 ms')"),
	'ok', 'a held running claim extends with its token');
poll_ok($new, 'app',
	"SELECT state, attempts FROM claimq.job WHERE job_id = $j_run",
	'pending|1', 30,
	'the reclaimer reclaims it once expired: a failed attempt, retried');
is(dbq($new, "SELECT claimq.complete($j_run, $t_run)"), 'f',
	'its old token is refused once reclaimed after the upgrade');

# Groups go on where they were.
my ($a1, $ta1) = split /,/, $grp{a1};
is(dbq($new, "SELECT count(*) FROM claimq.claim('grp', 10)"), '0',
	'the group limit still holds a3 back');
is(dbq($new, "SELECT claimq.complete($a1, $ta1)"), 't', 'a group job completes');
my ($a3, $ta3) = split /\|/,
  dbq($new, "SELECT job_id, token FROM claimq.claim('grp', 10)");
is(dbq($new, "SELECT payload->>'g' FROM claimq.job WHERE job_id = $a3"),
	'a3', 'then a3, and only it, is claimed');
is( dbq($new, qq{
	SELECT string_agg(c.outcome, ',')
	  FROM claimq.complete(ARRAY[$a3, @{[ (split /,/, $grp{a2})[0] ]}, @{[ (split /,/, $grp{b1})[0] ]}],
						   ARRAY[$ta3, @{[ (split /,/, $grp{a2})[1] ]}, @{[ (split /,/, $grp{b1})[1] ]}]) c}),
	'ok,ok,ok',
	'and the group jobs complete');

my ($fifo_id, $fifo_token) = split /,/, $fifo_head;
is(dbq($new, "SELECT claimq.complete($fifo_id, $fifo_token)"), 't',
	'the FIFO head completes');
is(dbq($new, q{SELECT string_agg(payload->>'d', ',') FROM claimq.claim('fifo', 10)}),
	'2', 'then the next job of its group, and only it, is claimed');

my $rate_ids = join(',', map { (split /,/)[0] } @rate);
my $rate_tokens = join(',', map { (split /,/)[1] } @rate);
is( dbq($new, qq{
	SELECT string_agg(outcome, ',')
	  FROM claimq.complete(ARRAY[$rate_ids], ARRAY[$rate_tokens])}),
	'ok,ok,ok,ok,ok',
	'the rate-limited jobs complete');
is(dbq($new, "SELECT count(*) FROM claimq.claim('rate', 10)"), '0',
	'the rate limit bucket is still empty: no burst after the upgrade');

# Dedup keys of live jobs hold; those of finished jobs are free.
is( dbq($new, q{
	SELECT claimq.enqueue('plain', '{"dup": 1}', dedup_key => 'dk-ready'),
		   claimq.enqueue('plain', '{"dup": 2}', dedup_key => 'dk-sched')}),
	"$j_ready|$j_sched",
	'an enqueue with a live dedup key returns the existing job');
cmp_ok(dbq($new, q{SELECT claimq.enqueue('plain', '{"dup": 3}', dedup_key => 'dk-dead')}),
	'>', $old_job_id_seq, "a dead job's dedup key makes a new job");

# Key claims: held, refused with another key's token, released with their own.
is( dbq($new, q{
	SELECT count(*) FROM claimq.claim_keys('scope', '{k-tl1,k1,k2}', '1 hour')}),
	'0', 'key claims held across the upgrade are still held');
is( dbq($new, qq{
	SELECT string_agg(outcome, ',')
	  FROM claimq.release_keys('scope', '{k1,k2}', ARRAY[$kt_k2, $kt_k1])}),
	'stale,stale',
	"a key claim refuses another key's token");
is( dbq($new, qq{
	SELECT string_agg(outcome, ',')
	  FROM claimq.release_keys('scope', '{k-tl1,k1,k2}',
							   ARRAY[$kt_tl1, $kt_k1, $kt_k2])}),
	'ok,ok,ok',
	'and each is released with its own token');

# The counters hold exactly the calls made since the upgrade: per queue,
# claimed, started, completed, failed, released, reclaimed, dead, stale,
# cancelled, snoozed.
is( dbq($new, $counters_sql),
	join("\n",
		'fifo|1|0|1|0|0|0|0|0|0|0',
		'grp|1|0|4|0|0|0|0|0|0|0',
		'plain|0|0|2|0|0|1|0|3|0|0',
		'probe|3|0|0|0|0|0|0|0|0|0',
		'rate|0|0|5|0|0|0|0|0|0|0'),
	'the counters count what happened after the upgrade, and only that');
is(dbq($new, $census_wrong_sql), '0', 'the census still equals the job table');

is(join("\n", log_lines($new, qr/claimq reclaimer pass failed/)), '',
	'no reclaimer pass failed on the new cluster');
$new->stop;
log_is_clean($new);
log_is_clean($old);

# Can the token check fail?  The copy taken right after pg_upgrade is on
# timeline 1, as the new cluster was, and passes it, until claimq's
# register of epochs is emptied: its tokens then have epoch 0, below those
# handed out on the old cluster after its promotion.
$broken->start;
is($broken->safe_psql('app', 'SELECT timeline_id FROM pg_control_checkpoint()'),
	'1', 'copy: pg_upgrade left the new cluster on timeline 1');
@drawn = draw_tokens($broken);
ok(tokens_are_new(\@drawn, $max_before),
	'copy as pg_upgrade left it: the check passes');
$broken->safe_psql('app', 'TRUNCATE claimq.epoch, claimq.lifetime');
@drawn = draw_tokens($broken);
ok(!tokens_are_new(\@drawn, $max_before),
	'copy with the register of epochs emptied: the check catches it')
  or diag("tokens: @drawn");
$broken->stop;

done_testing();
