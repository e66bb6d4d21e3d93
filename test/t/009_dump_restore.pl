# pg_dump -Fc of a database holding claimq queues (non-default settings,
# one paused), jobs in every state (ready and scheduled pending, claimed,
# running, dead, done), live dedup keys and key claims, restored with
# pg_restore into a new database, gives the same queue, job and key claim
# rows and sequence positions, and a claimq that works: new ids and tokens
# come after the restored ones, a restored claim is still settled by its
# token (it is the same claim) and refused with any other, restored
# expired claims are reclaimed, dedup keys still hold, the paused queue
# stays paused and granted duties survive.
#
# Neither database is served by the background reclaimer (it serves only
# "postgres"), so nothing changes the rows between the dump and the
# comparison; the test calls reclaim() itself.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('dump');
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql(
	'src', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('alpha', lease => '45 s', run_lease => '10 min',
							   max_attempts => 3, retry_base => '10 s',
							   retry_max => '30 s', keep_done => '1 day',
							   keep_dead => '7 days', notify => true);
	SELECT claimq.create_queue('beta', lease => '1 min', max_attempts => 7,
							   keep_dead => '1 hour');
	SELECT claimq.create_queue('gamma');
	SELECT claimq.create_queue('fairq', fair => true);
	SELECT claimq.set_group_weight('fairq', 'big', 0.25);
	SELECT claimq.enqueue('fairq', '{"t": 1}', group_key => 'big');
	SELECT count(*) FROM claimq.claim('fairq');
	SELECT claimq.enqueue('fairq', '{"t": 2}', group_key => 'big');
	SELECT claimq.create_schedule('nightly', 'gamma', '30 2 * * mon-fri',
								  payload => '{"r": 1}', time_zone => 'Europe/Berlin');
	CREATE ROLE claimq_dump_worker;
	CREATE ROLE claimq_dump_nobody;
	SELECT claimq.grant_duty('claimq_dump_worker', 'work');
});

# A charge on a fair queue's tenant: a claim serves it while another,
# open, holds its row.  (Shares are rows for a queue with priorities:
# without them, the C edition keeps its shares in shared memory.)
$node->safe_psql('src', q{
	SELECT claimq.enqueue('fairq', '{"t": 3}', group_key => 'big', priority => 1);
	SELECT claimq.enqueue('fairq', '{"t": 4}', group_key => 'big', priority => 1);});
my $holder = $node->background_psql('src', on_error_stop => 1);
$holder->query_safe('BEGIN');
$holder->query_safe(q{SELECT count(*) FROM claimq.claim('fairq')});
$node->safe_psql('src', q{SELECT count(*) FROM claimq.claim('fairq')});
$holder->query_safe('COMMIT');
$holder->quit;
is($node->safe_psql('src', 'SELECT count(*) FROM claimq.fair_charge'), '1',
	'a fair queue\'s tenant has a charge');

# Run $sql on database $db and return its output.
sub dbq
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql);
}

# Enqueue one job on alpha and, unless $claim is empty, claim it with the
# arguments in $claim.  Each step leaves no other ready job in alpha, so
# the claim takes the job just enqueued.  Returns (job_id, token).
sub alpha_job
{
	my ($name, $enqueue_args, $claim) = @_;
	my $id = dbq('src',
		"SELECT claimq.enqueue('alpha', '{\"n\": \"$name\"}'$enqueue_args)");
	return ($id, undef) if $claim eq '';
	my ($cid, $token) = split /\|/,
	  dbq('src', "SELECT job_id, token FROM claimq.claim('alpha'$claim)");
	is($cid, $id, "setup: claimed the $name job");
	return ($id, $token);
}

my ($j_done, $t_done) = alpha_job('done', '', ", lease => '1 h'");
is(dbq('src', "SELECT claimq.complete($j_done, $t_done)"), 't', 'setup: done job');
my ($j_dead, $t_dead) =
  alpha_job('dead', ", dedup_key => 'dk-dead'", ", start => true");
is(dbq('src', "SELECT claimq.fail($j_dead, $t_dead, 'boom', permanent => true)"),
	't', 'setup: dead job');
my ($j_retry, $t_retry) = alpha_job('retry', '', ", start => true");
is( dbq('src',
		"SELECT claimq.fail($j_retry, $t_retry, 'try again', retry_in => '1 hour')"),
	't',
	'setup: failed job waiting for its retry');
my ($j_cl, $t_cl) = alpha_job('claimed', ", priority => 5, dedup_key => 'dk-live'",
	", lease => '1 h', worker => 'w-live'");
my ($j_run, $t_run) = alpha_job('running', '',
	", lease => '1 h', worker => 'w-run', start => true");
my ($j_clx, $t_clx) = alpha_job('claimed-expired', '',
	", lease => '1 s', worker => 'w-gone'");
my ($j_runx, $t_runx) = alpha_job('running-expired', '',
	", lease => '1 s', worker => 'w-gone', start => true");
my ($j_r1) = alpha_job('ready-1', ", priority => 2, dedup_key => 'r1'", '');
my ($j_r2) = alpha_job('ready-2', ", dedup_key => 'r2'", '');
my ($j_r3) = alpha_job('ready-3', '', '');
my ($j_sched) = alpha_job('scheduled',
	", run_at => now() + interval '1 day', dedup_key => 'dk-sched'", '');

my ($j_b1, $j_b2, $j_b3) = split /\n/, dbq('src', q{
	SELECT claimq.enqueue_many('beta', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[],
							   dedup_keys => '{b1,b2,b3}')});
my ($jb_cl, $tb_cl) = split /\|/, dbq('src',
	"SELECT job_id, token FROM claimq.claim('beta', lease => '1 h', worker => 'w-beta')");
is($jb_cl, $j_b1, 'setup: beta job claimed');
dbq('src', "SELECT claimq.pause_queue('beta')");

my %key_token = map { split /\|/ } split /\n/, dbq('src', q{
	SELECT key, token FROM claimq.claim_keys('scope-a', '{k1}', '1 hour');
	SELECT key, token FROM claimq.claim_keys('scope-a', '{k2}', '1 hour');
	SELECT key, token FROM claimq.claim_keys('scope-b', '{x}', '1 second');
});
is(join(',', sort keys %key_token), 'k1,k2,x', 'setup: three keys claimed');

# Wait for the 1 s leases and ttl to pass; nothing reclaims them here.
poll_ok(
	$node, 'src', q{
	SELECT (SELECT count(*) FROM claimq.job WHERE expires_at < clock_timestamp()),
		   (SELECT count(*) FROM claimq.key_claim WHERE expires_at < clock_timestamp())},
	'2|1', 10, 'setup: two claims and a key claim have expired');

# A FIFO queue: one job of group g claimed, the other two held back.
dbq('src', q{
	SELECT claimq.create_queue('delta', group_fifo => true, max_in_flight => 5,
							   lease => '1 hour');
	SELECT count(*) FROM claimq.enqueue_many('delta', ARRAY['{"d": 1}', '{"d": 2}', '{"d": 3}']::jsonb[],
											 group_keys => '{g,g,g}');
	SELECT count(*) FROM claimq.claim('delta', 10, worker => 'w-delta');
});

# A workflow: a claimed job and a job waiting on it.
dbq('src', "SELECT claimq.create_queue('epsilon', lease => '1 hour')");
my $j_e1 = dbq('src', q{SELECT claimq.enqueue('epsilon', '{"e": 1}')});
my $j_e2 = dbq('src',
	qq{SELECT claimq.enqueue('epsilon', '{"e": 2}', after => ARRAY[$j_e1]::bigint[])});
my ($je_cl, $te_cl) = split /\|/, dbq('src',
	"SELECT job_id, token FROM claimq.claim('epsilon')");
is($je_cl, $j_e1, 'setup: the first epsilon job claimed, the second waits on it');

my $states_sql = q{
	SELECT string_agg(format('%s:%s:%s', q.name, j.state, j.n), ','
					  ORDER BY q.name, j.state)
	  FROM (SELECT queue_id, state, count(*) AS n FROM claimq.job
			 GROUP BY queue_id, state) j
	  JOIN claimq.queue q USING (queue_id)};
is( dbq('src', $states_sql),
	'alpha:claimed:2,alpha:dead:1,alpha:done:1,alpha:pending:5,alpha:running:2,'
	  . 'beta:claimed:1,beta:pending:2,delta:claimed:1,delta:pending:2,'
	  . 'epsilon:claimed:1,epsilon:waiting:1,fairq:claimed:3,fairq:pending:1',
	'source holds jobs in every state');

# What has to come back the same.  Row texts, so every column counts.
my %compare = (
	'queue rows' => q{
		SELECT string_agg(t::text, E'\n' ORDER BY queue_id) FROM claimq.queue t},
	'job rows' => q{
		SELECT string_agg(t::text, E'\n' ORDER BY job_id) FROM claimq.job t},
	'schedule rows' => q{
		SELECT string_agg(t::text, E'\n' ORDER BY name) FROM claimq.schedule t},
	'job_group rows' => q{
		SELECT string_agg(t::text, E'\n' ORDER BY queue_id, group_key) FROM claimq.job_group t},
	'held jobs' => q{
		SELECT string_agg(job_id::text, ',' ORDER BY job_id) FROM claimq.job WHERE held},
	'job_after rows' => q{
		SELECT string_agg(t::text, E'\n' ORDER BY set_id, position) FROM claimq.job_after t},
	'after set sequence' => q{
		SELECT format('%s/%s', s.last_value, s.is_called) FROM claimq.after_set_seq s},
	'fair queues\' weights and shares' => q{
		SELECT concat_ws(E'\n',
			(SELECT string_agg(t::text, E'\n' ORDER BY queue_id, group_key) FROM claimq.group_weight t),
			(SELECT string_agg(t::text, E'\n' ORDER BY queue_id, priority, group_key) FROM claimq.fair_share t),
			(SELECT string_agg(t::text, E'\n' ORDER BY queue_id, priority, v) FROM claimq.fair_level t),
			(SELECT string_agg(t::text, E'\n' ORDER BY t::text) FROM claimq.fair_charge t))},
	'key_claim rows' => q{
		SELECT string_agg(t::text, E'\n' ORDER BY scope, key) FROM claimq.key_claim t},
	'sequence positions' => q{
		SELECT format('%s/%s %s/%s %s/%s',
					  q.last_value, q.is_called, j.last_value, j.is_called,
					  t.last_value, t.is_called)
		  FROM claimq.queue_id_seq q, claimq.job_id_seq j, claimq.token_seq t},
	'queue_stats counts' => q{
		SELECT string_agg(concat_ws(':', queue, paused, ready, scheduled, claimed,
									running, expired, dead, done), ','
						  ORDER BY queue)
		  FROM claimq.queue_stats},);
my %before = map { $_ => dbq('src', $compare{$_}) } keys %compare;
like($before{'job rows'}, qr/"\{""n"": ""running-expired""\}"/,
	'the job rows hold the payloads');

my $max_id = dbq('src', 'SELECT max(job_id) FROM claimq.job');
my $max_token = dbq('src', q{
	SELECT greatest((SELECT max(token) FROM claimq.job),
					(SELECT max(token) FROM claimq.key_claim))});

# Dump, then restore into a new database.
my $dump = $PostgreSQL::Test::Utils::tmp_check . '/claimq_src.dump';
$node->command_checks_all(
	[ 'pg_dump', '-Fc', '-d', 'src', '-f', $dump ],
	0, [qr/^$/], [qr/^$/], 'pg_dump -Fc of the source database');
$node->safe_psql('postgres', 'CREATE DATABASE dst');
$node->command_checks_all(
	[ 'pg_restore', '--exit-on-error', '-d', 'dst', $dump ],
	0, [qr/^$/], [qr/^$/], 'pg_restore into a new database, without error');

for my $what (sort keys %compare)
{
	is(dbq('dst', $compare{$what}), $before{$what}, "restored $what are the same");
}
is( dbq('dst', q{
	SELECT e.extversion = a.default_version, cardinality(e.extconfig)
	  FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
	 WHERE e.extname = 'claimq'}),
	't|18',
	'the restored extension is at the current version with its eighteen dumped tables and sequences (two of them, the mail of workflows across shards, are used only on a distributed install)');

# Duties survive the dump; PUBLIC still gets nothing.
is( dbq('dst', q{
	SELECT has_function_privilege('claimq_dump_worker',
			'claimq.claim(text, integer, interval, text, boolean, interval)', 'EXECUTE'),
		   has_function_privilege('claimq_dump_worker',
			'claimq.complete(bigint[], bigint[], jsonb[], text)', 'EXECUTE'),
		   has_function_privilege('claimq_dump_worker',
			'claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval, boolean)',
			'EXECUTE'),
		   has_function_privilege('claimq_dump_nobody',
			'claimq.claim(text, integer, interval, text, boolean, interval)', 'EXECUTE'),
		   has_table_privilege('claimq_dump_worker', 'claimq.job', 'SELECT')}),
	't|t|f|f|f',
	'the work duty is restored, no more; a role without a duty gets nothing');

# Sequences go on past the restored values.
my $new_id = dbq('dst', q{SELECT claimq.enqueue('gamma', '{"new": 1}')});
cmp_ok($new_id, '>', $max_id, 'a new enqueue gets an id above every restored id');
my ($g_id, $g_token) = split /\|/,
  dbq('dst', "SELECT job_id, token FROM claimq.claim('gamma', lease => '1 min')");
is($g_id, $new_id, 'the new job is claimed');
cmp_ok($g_token, '>', $max_token,
	'a new claim gets a token above every restored token');
cmp_ok($g_token >> 48, '>', dbq('src', 'SELECT max(epoch) FROM claimq.epoch'),
	'of a new epoch: above every epoch the dumped database registered');
is(dbq('dst', "SELECT claimq.complete($g_id, $g_token)"), 't',
	'and completes with it');

# Dedup keys of live restored jobs still hold; a dead job's key does not.
is( dbq('dst', q{
	SELECT claimq.enqueue('alpha', '{"dup": 1}', dedup_key => 'r1'),
		   claimq.enqueue('alpha', '{"dup": 2}', dedup_key => 'dk-sched'),
		   claimq.enqueue('alpha', '{"dup": 3}', dedup_key => 'dk-live')}),
	"$j_r1|$j_sched|$j_cl",
	'enqueue with a restored live dedup key returns the restored job');
my $j_redo = dbq('dst',
	q{SELECT claimq.enqueue('alpha', '{"dup": 4}', dedup_key => 'dk-dead')});
cmp_ok($j_redo, '>', $new_id, "a dead job's key makes a new job");

# A restored claim is the same claim: its token settles it, others do not.
is( dbq('dst', qq{
	SELECT string_agg(outcome, ',' ORDER BY job_id)
	  FROM claimq.complete(ARRAY[$j_cl, $j_run], ARRAY[$t_run, $t_cl])}),
	'stale,stale',
	"a restored claim refuses another job's token");
is( dbq('dst', qq{
	SELECT outcome, expires_at > clock_timestamp() + interval '9 min'
	  FROM claimq.extend(ARRAY[$j_run], ARRAY[$t_run])}),
	'ok|t',
	'a restored running claim extends with its token, by the run_lease');
is( dbq('dst', qq{
	SELECT string_agg(outcome, ',' ORDER BY job_id)
	  FROM claimq.complete(ARRAY[$j_cl, $j_run, $jb_cl], ARRAY[$t_cl, $t_run, $tb_cl])}),
	'ok,ok,ok',
	'restored claims complete with their tokens');

# A restored FIFO group goes on in order.
is( dbq('dst', q{
	SELECT string_agg(c.outcome, ',') FROM claimq.job j,
		   LATERAL claimq.complete(ARRAY[j.job_id], ARRAY[j.token]) c
	 WHERE j.worker = 'w-delta'}),
	'ok', 'the restored FIFO head completes');
is(dbq('dst', q{SELECT string_agg(payload->>'d', ',') FROM claimq.claim('delta', 10)}),
	'2', 'and the next job of its group, and only it, is claimed');
is( dbq('dst', qq{
	SELECT string_agg(format('%s:%s', job_id, state), ',' ORDER BY job_id)
	  FROM claimq.job WHERE job_id IN ($j_cl, $j_run, $jb_cl)}),
	"$j_cl:done,$j_run:done",
	'kept as done on alpha (keep_done), deleted on beta');

# Restored expired claims are reclaimed: the claimed one with no attempt
# counted, the started one as a failed attempt.
is(dbq('dst', "SELECT * FROM claimq.reclaim('alpha')"), 'alpha|1|1|0',
	'reclaim releases the expired claim and retries the expired run');
is( dbq('dst', qq{
	SELECT string_agg(format('%s:%s:%s', state, attempts, last_error), ','
					  ORDER BY job_id)
	  FROM claimq.job WHERE job_id IN ($j_clx, $j_runx)}),
	'pending:0:,pending:1:lease expired',
	'the reclaimed jobs are pending, attempts as the contract says');
is( dbq('dst', qq{
	SELECT string_agg(outcome, ',' ORDER BY job_id)
	  FROM claimq.complete(ARRAY[$j_clx, $j_runx], ARRAY[$t_clx, $t_runx])}),
	'stale,stale',
	'their old tokens are refused once reclaimed');

# Claim and complete the ready work in the contract's order: priority,
# then run_at, then id.  The retried job waits for its backoff.
is( dbq('dst', q{
	SELECT string_agg(job_id::text, ',' ORDER BY ord)
	  FROM claimq.claim('alpha', max_jobs => 10, lease => '1 min')
	  WITH ORDINALITY AS c(job_id, token, payload, attempts, priority,
						   enqueued_at, expires_at, ord)}),
	"$j_r1,$j_clx,$j_r2,$j_r3,$j_redo",
	'claim takes the restored ready jobs in order');
is( dbq('dst', q{
	SELECT string_agg(c.outcome, ',')
	  FROM (SELECT array_agg(job_id) AS ids, array_agg(token) AS tokens
			  FROM claimq.job WHERE state = 'claimed'
			   AND queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'alpha')) h,
		   claimq.complete(h.ids, h.tokens) c}),
	'ok,ok,ok,ok,ok',
	'and completes them');

# The paused queue stays paused until resumed.
is(dbq('dst', "SELECT count(*) FROM claimq.claim('beta')"), '0',
	'the restored paused queue hands out nothing');
dbq('dst', "SELECT claimq.resume_queue('beta')");
is(dbq('dst', "SELECT job_id FROM claimq.claim('beta', lease => '1 min')"),
	$j_b2, 'after resume_queue it does');

# Key claims: a live one is still held by its token, an expired one can be
# won again.
is( dbq('dst', q{
	SELECT count(*) FROM claimq.claim_keys('scope-a', '{k1,k2}', '1 hour')}),
	'0',
	'restored live key claims are still held');
is( dbq('dst', qq{
	SELECT string_agg(outcome, ',')
	  FROM claimq.release_keys('scope-a', '{k1,k2}',
							   ARRAY[$key_token{k2}, $key_token{k1}])}),
	'stale,stale',
	"a restored key claim refuses another key's token");
is( dbq('dst', qq{
	SELECT string_agg(outcome, ',')
	  FROM claimq.release_keys('scope-a', '{k1}', ARRAY[$key_token{k1}])}),
	'ok',
	'and is released with its own token');
my $x_token = dbq('dst',
	"SELECT token FROM claimq.claim_keys('scope-b', '{x}', '1 hour')");
cmp_ok($x_token || 0, '>', $max_token,
	'an expired restored key claim is won again, with a new token');

# A claim held across the dump finishes, and unblocks the job waiting on it.
is(dbq('dst', "SELECT claimq.complete($je_cl, $te_cl)"), 't',
	'a restored claim of a job that another waits on completes with its token');
is(dbq('dst', "SELECT state FROM claimq.status(ARRAY[$j_e2]::bigint[])"), 'pending',
	'and the restored waiting job is judged: pending');

# The source is untouched by all this.
is(dbq('src', $compare{'job rows'}), $before{'job rows'},
	'the source database still has its own rows');

$node->stop;
log_is_clean($node);

done_testing();
