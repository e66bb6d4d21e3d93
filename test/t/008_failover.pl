# Failover: a streaming standby is promoted while workers run on the
# primary, which stops with an immediate shutdown.  On the new primary no
# token the old primary gave out can settle a job any more once the job
# has been reclaimed or handed out again, and every job still ends
# completed or dead: at least once, duplicates allowed, none lost.
#
# Part 1, the failover under load: two workers claim, start (or not),
# complete, or fail permanently the "poison" jobs, of two queues (one
# keeps done jobs).  A worker writes every completion whose outcome was
# ok, with its token, to a side table in the same transaction, and
# reports every claim it holds (job and token) as a NOTICE after the
# claim commits.  Just before the failover, one more claim is made with
# synchronous_commit off, so it may or may not reach the standby.  On the
# new primary every old token is refused, the async claim's token cannot
# settle its job once the new primary hands it out again, new workers
# drain the queues, and the side table and the queue account for every
# job.
#
# Part 2, tokens issued past what the standby has: tokens come from a
# sequence, and a standby knows only the sequence values logged in the WAL
# it received.  A second standby is cut off; the primary then claims a job
# with the first sequence value beyond the standby's, and a dedup key with
# the next, and stops.  The standby is promoted and hands the job and the
# key to new holders; the old holders' tokens must settle neither.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = claimq_node('primary', allows_streaming => 1);
$primary->start;
$primary->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	-- Part 2 steers the token sequence value by value: no per-backend cache.
	ALTER SEQUENCE claimq.token_seq CACHE 1;
	SELECT claimq.create_queue('del', lease => '2 s', run_lease => '2 s',
							   retry_base => '200 ms', retry_max => '1 s');
	SELECT claimq.create_queue('keep', lease => '2 s', run_lease => '2 s',
							   retry_base => '200 ms', retry_max => '1 s',
							   keep_done => '1 hour');
	SELECT claimq.create_queue('solo1', lease => '2 s');
	SELECT claimq.create_queue('solo2', lease => '2 s');
	SELECT claimq.create_queue('filler', lease => '1 hour');
	SELECT claimq.enqueue_many(q, ARRAY(
			SELECT jsonb_build_object('n', n, 'poison', n % 10 = 0)
			  FROM generate_series(1, 200) n))
	  FROM unnest('{del,keep}'::text[]) q;
	SELECT claimq.enqueue('solo1', '{}');
	SELECT claimq.enqueue('solo2', '{}');
	SELECT claimq.enqueue_many('filler', array_fill('{}'::jsonb, ARRAY[50]));

	CREATE TABLE all_jobs (job_id bigint PRIMARY KEY, queue text NOT NULL,
						   poison boolean NOT NULL);
	INSERT INTO all_jobs
	SELECT j.job_id, q.name, (j.payload ->> 'poison')::boolean
	  FROM claimq.job j JOIN claimq.queue q USING (queue_id)
	 WHERE q.name IN ('del', 'keep');
	-- Completions with outcome ok, and the workers' claims, each written
	-- in the transaction of the call.
	CREATE TABLE done_log (job_id bigint NOT NULL, token bigint NOT NULL,
						   node text NOT NULL);
	CREATE TABLE claim_log (job_id bigint NOT NULL, token bigint NOT NULL,
							node text NOT NULL);
});
is( $primary->safe_psql(
		'postgres', 'SELECT count(*), count(*) FILTER (WHERE poison) FROM all_jobs'),
	'400|40',
	'400 jobs enqueued, 40 of them poison');

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

# A worker, as one DO block: claim up to 3 jobs of a queue picked at
# random; commit; report the claims; start them (by the claim, by a start
# call, or not at all, at random); work a little; complete the good jobs
# (logging those that were ok) and fail the poison ones for good; commit.  With $drain it stops once no job of
# the two queues is pending, claimed or running; otherwise it runs until
# its server goes away.
sub worker
{
	my ($node, $tag, $drain) = @_;
	my $sql = qq{
DO \$worker\$
DECLARE
	deadline timestamptz := clock_timestamp() + interval '40 s';
	q text;
	ids bigint[];
	tokens bigint[];
	good bigint[];
	good_tokens bigint[];
	bad bigint[];
	bad_tokens bigint[];
	mode int;
BEGIN
	WHILE clock_timestamp() < deadline LOOP
		q := CASE WHEN random() < 0.5 THEN 'del' ELSE 'keep' END;
		mode := floor(random() * 3);
		SELECT array_agg(c.job_id), array_agg(c.token),
			   coalesce(array_agg(c.job_id) FILTER (WHERE NOT (c.payload ->> 'poison')::boolean), '{}'),
			   coalesce(array_agg(c.token) FILTER (WHERE NOT (c.payload ->> 'poison')::boolean), '{}'),
			   coalesce(array_agg(c.job_id) FILTER (WHERE (c.payload ->> 'poison')::boolean), '{}'),
			   coalesce(array_agg(c.token) FILTER (WHERE (c.payload ->> 'poison')::boolean), '{}')
		  INTO ids, tokens, good, good_tokens, bad, bad_tokens
		  FROM claimq.claim(q, max_jobs => 3, worker => '$tag',
							start => mode = 0) c;
		IF ids IS NULL THEN
			COMMIT;
			EXIT WHEN $drain AND NOT EXISTS (
				SELECT FROM claimq.job j JOIN claimq.queue cq USING (queue_id)
				 WHERE cq.name IN ('del', 'keep')
				   AND j.state IN ('pending', 'claimed', 'running'));
			PERFORM pg_sleep(0.02);
			CONTINUE;
		END IF;
		INSERT INTO claim_log SELECT u.job_id, u.token, '$tag'
		  FROM unnest(ids, tokens) u(job_id, token);
		COMMIT;
		FOR i IN 1 .. cardinality(ids) LOOP
			RAISE NOTICE 'held % %', ids[i], tokens[i];
		END LOOP;
		IF mode = 1 THEN
			PERFORM claimq.start(ids, tokens);
			COMMIT;
		END IF;
		PERFORM pg_sleep(0.01 + random() * 0.03);
		INSERT INTO done_log SELECT r.job_id, u.token, '$tag'
		  FROM claimq.complete(good, good_tokens) r
		  JOIN unnest(good, good_tokens) u(job_id, token) USING (job_id)
		 WHERE r.outcome = 'ok';
		PERFORM claimq.fail(bad, bad_tokens, 'poison', permanent => true);
		COMMIT;
	END LOOP;
END
\$worker\$;
};
	my %c = (out => '', err => '');
	$c{h} = IPC::Run::start(
		[
			$node->installed_command('psql'), '-XAtq',
			'-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'),
			'-c', $sql
		],
		'>', \$c{out}, '2>', \$c{err},
		IPC::Run::timeout(60));
	return \%c;
}

# Part 1: the failover under load.
my @old_workers = map { worker($primary, 'old', 'false') } 1 .. 2;
poll_ok($primary, 'postgres', 'SELECT count(*) >= 60 FROM done_log',
	't', 20, 'workers are completing jobs on the primary');

# One more claim, committed asynchronously, then the primary goes down.
my ($j1, $t1) = split /\|/, $primary->safe_psql(
	'postgres', q{
	SET synchronous_commit = off;
	SELECT job_id, token FROM claimq.claim('solo1', worker => 'async')});
isnt($t1 // '', '', 'a claim committed with synchronous_commit off');
$primary->stop('immediate');

# The workers lost their server.  Every claim they held is in a NOTICE.
my @old_pairs = ([ $j1, $t1 ]);
for my $i (0 .. $#old_workers)
{
	my $c = $old_workers[$i];
	my $ok = eval { $c->{h}->finish };
	ok(!$ok, 'worker ' . ($i + 1) . ' on the old primary ended with it');
	my @lines = split /\n/, $c->{err};
	push @old_pairs, map { /NOTICE:  held (\d+) (\d+)$/ ? [ $1, $2 ] : () } @lines;
	my @other = grep {
		!/NOTICE:  held \d+ \d+$/
		  && !/terminating connection|server closed the connection unexpectedly|probably means the server terminated abnormally|before or while processing the request|connection to server was lost|^\s*$/
	} @lines;
	is(join("\n", @other), '', 'worker ' . ($i + 1) . ': no error but the lost connection');
	note 'worker ' . ($i + 1) . ': ' . join(' / ', grep { !/NOTICE:  held/ } @lines);
}
note scalar(@old_pairs) . ' claims were held on the old primary';
cmp_ok(scalar(@old_pairs), '>', 60, 'the old primary handed out claims');

$standby->promote;
poll_ok($standby, 'postgres', 'SELECT pg_is_in_recovery()', 'f', 30,
	'the standby is promoted');

my $fate = $standby->safe_psql('postgres',
	"SELECT state || ':' || coalesce(token::text, '') FROM claimq.job WHERE job_id = $j1");
note "the async claim ($j1, $t1) on the new primary: $fate";
like($fate, qr/^(pending:|claimed:$t1)$/,
	'the async claim either reached the new primary as it was, or not at all');
cmp_ok(
	$standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id)
	 WHERE q.name IN ('del', 'keep') AND j.state = 'pending'}),
	'>', 0, 'the failover came with work left to do');

# The new primary learns the old primary's claims.
my $values = join(',', map { "($_->[0], $_->[1])" } @old_pairs);
$standby->safe_psql(
	'postgres', qq{
	CREATE TABLE old_claims (job_id bigint NOT NULL, token bigint NOT NULL);
	INSERT INTO old_claims VALUES $values;
});

# Its reclaimer puts back every claim left from before the failover.
poll_ok($standby, 'postgres',
	"SELECT count(*) FROM claimq.job WHERE state IN ('claimed', 'running')",
	'0', 15, 'the new primary reclaims the claims left from the old one');
my $extend_sql = q{
	SELECT coalesce(string_agg(DISTINCT r.outcome || '/' ||
			 CASE WHEN j.job_id IS NULL THEN 'gone' ELSE j.state END, ','), '')
	  FROM (SELECT array_agg(job_id) AS ids, array_agg(token) AS tokens
			  FROM old_claims) o,
		   claimq.extend(o.ids, o.tokens) r
	  LEFT JOIN claimq.job j USING (job_id)
	 WHERE r.outcome <> CASE WHEN j.job_id IS NULL THEN 'missing' ELSE 'stale' END};
is($standby->safe_psql('postgres', $extend_sql), '',
	'every old token is refused: stale, or missing where the job is gone');

# The async claim's job is handed out again; its old token cannot settle it.
my ($j1n, $t1n) = split /\|/, $standby->safe_psql('postgres',
	"SELECT job_id, token FROM claimq.claim('solo1', lease => '1 min', worker => 'new')");
is($j1n, $j1, 'the new primary hands the async claim\'s job out again');
note "old token $t1, new token $t1n";
isnt($t1n, $t1, 'under a new token');
is($standby->safe_psql('postgres', "SELECT claimq.complete($j1, $t1)"),
	'f', 'the async claim\'s token cannot complete the job');
is($standby->safe_psql('postgres', "SELECT claimq.complete($j1, $t1n)"),
	't', 'the new holder completes it');

# New workers drain the queues.
my @new_workers = map { worker($standby, 'new', 'true') } 1 .. 2;
for my $i (0 .. $#new_workers)
{
	my $c = $new_workers[$i];
	my $ok = eval { $c->{h}->finish };
	ok($ok, 'worker ' . ($i + 1) . ' on the new primary drained the queues')
	  or diag("stderr: $c->{err}" . ($@ ? "\n$@" : ''));
}
poll_ok(
	$standby, 'postgres', q{
	SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id)
	 WHERE q.name IN ('del', 'keep')
	   AND j.state IN ('pending', 'claimed', 'running')},
	'0', 10, 'no job is left pending, claimed or running');

my %n = map { split /\|/ } split /\n/, $standby->safe_psql(
	'postgres', q{
	SELECT 'old_done', count(*) FROM done_log WHERE node = 'old'
	UNION ALL
	SELECT 'new_done', count(*) FROM done_log WHERE node = 'new'
	UNION ALL
	SELECT 'twice', count(*) FROM (SELECT job_id FROM done_log
									GROUP BY job_id HAVING count(*) > 1) d
});
note explain \%n;
cmp_ok($n{old_done}, '>', 0, 'completions on the old primary reached the new one');
cmp_ok($n{new_done}, '>', 0, 'the new primary\'s workers completed jobs');

is( $standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM claim_log n JOIN old_claims o USING (job_id, token)
	 WHERE n.node = 'new'}),
	'0',
	'the new primary never handed a job out under a token the old one had given it');
is( $standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM (SELECT array_agg(job_id) AS ids, array_agg(token) AS tokens
							FROM old_claims) o,
		   claimq.complete(o.ids, o.tokens) r
	 WHERE r.outcome NOT IN ('stale', 'missing')}),
	'0',
	'no old token completes anything after the drain');

# Every job is accounted for.
is( $standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM all_jobs a
	  LEFT JOIN claimq.job j USING (job_id)
	 WHERE a.poison AND (j.state IS DISTINCT FROM 'dead'
						 OR j.last_error IS DISTINCT FROM 'poison')}),
	'0',
	'every poison job is dead, failed by a worker');
is( $standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM all_jobs a WHERE a.poison
	   AND EXISTS (SELECT FROM done_log d WHERE d.job_id = a.job_id)}),
	'0',
	'no poison job was ever completed');
is( $standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM all_jobs a
	  LEFT JOIN claimq.job j USING (job_id)
	 WHERE NOT a.poison
	   AND NOT (EXISTS (SELECT FROM done_log d WHERE d.job_id = a.job_id)
				AND CASE a.queue WHEN 'del' THEN j.job_id IS NULL
								 ELSE j.state = 'done' END)}),
	'0',
	'every other job was completed: logged, and gone (del) or done (keep)');
is( $standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id)
	 WHERE q.name IN ('del', 'keep')
	   AND NOT EXISTS (SELECT FROM all_jobs a WHERE a.job_id = j.job_id)}),
	'0',
	'and no job appeared that was not enqueued');
is( $standby->safe_psql(
		'postgres', q{
	SELECT s.pid IS NOT NULL AND s.last_error IS NULL
	  FROM claimq.reclaimer_status s WHERE s.database = 'postgres'}),
	't',
	'the new primary\'s reclaimer runs without error');

# Part 2: a claim the standby never saw, with a token beyond its sequence.
$standby->backup('promoted');
my $standby2 = PostgreSQL::Test::Cluster->new('standby2');
$standby2->init_from_backup($standby, 'promoted', has_streaming => 1);
$standby2->start;
$standby->wait_for_catchup($standby2);
my $seen = $standby2->safe_psql('postgres',
	'SELECT last_value FROM claimq.token_seq');
$standby2->stop;

# The primary gives out tokens up to the last one the standby has seen as
# logged (claims of other jobs), then claims solo2 with the next one.
my ($last, $log_cnt) = split /\|/, $standby->safe_psql('postgres',
	'SELECT last_value, log_cnt FROM claimq.token_seq');
my $burn = $seen - $last;
note "standby2 has token_seq at $seen; the primary at $last (log_cnt $log_cnt)";
ok($burn >= 0 && $burn <= 50, 'setup: fewer tokens to give out than filler jobs');
$standby->safe_psql(
	'postgres', qq{
	DO \$\$
	BEGIN
		FOR i IN 1 .. $burn LOOP
			PERFORM claimq.claim('filler');
		END LOOP;
	END
	\$\$});
my ($j2, $t2) = split /\|/, $standby->safe_psql('postgres',
	"SELECT job_id, token FROM claimq.claim('solo2', lease => '1 min', worker => 'cut-off')");
is($standby->safe_psql('postgres', 'SELECT last_value FROM claimq.token_seq'),
	$seen + 1,
	'setup: that claim took the first sequence value past the standby\'s');
# The same for a dedup key claim.
my $k_old = $standby->safe_psql('postgres',
	"SELECT token FROM claimq.claim_keys('failover', '{k}', '1 hour')");
note "on the old primary: solo2 ($j2) claimed with token $t2, key k with token $k_old";
$standby->stop('immediate');

$standby2->start;
$standby2->promote;
poll_ok($standby2, 'postgres', 'SELECT pg_is_in_recovery()', 'f', 30,
	'the cut-off standby is promoted');
is( $standby2->safe_psql(
		'postgres', qq{
	SELECT j.state, j.token IS NULL,
		   NOT EXISTS (SELECT FROM claimq.key_claim WHERE scope = 'failover')
	  FROM claimq.job j WHERE j.job_id = $j2}),
	'pending|t|t',
	'neither claim reached it');
my ($j2n, $t2n) = split /\|/, $standby2->safe_psql('postgres',
	"SELECT job_id, token FROM claimq.claim('solo2', lease => '1 min', worker => 'new')");
is($j2n, $j2, 'the new primary hands solo2 out again');
my $k_new = $standby2->safe_psql('postgres',
	"SELECT token FROM claimq.claim_keys('failover', '{k}', '1 hour')");
note "on the new primary: solo2 claimed with token $t2n, key k with token $k_new";
isnt($t2n, $t2, 'never under the token the old primary gave for it');
is($standby2->safe_psql('postgres', "SELECT claimq.complete($j2, $t2)"),
	'f', 'the old holder\'s token cannot complete the job');
is($standby2->safe_psql('postgres', "SELECT claimq.complete($j2, $t2n)"),
	't', 'the new holder completes it');
isnt($k_new, '', 'the new primary lets somebody else win key k');
is( $standby2->safe_psql('postgres',
		"SELECT outcome FROM claimq.release_keys('failover', '{k}', ARRAY[$k_old])"),
	'stale',
	'the old winner\'s token cannot release the key the new winner holds');
is( $standby2->safe_psql('postgres',
		"SELECT outcome FROM claimq.release_keys('failover', '{k}', ARRAY[${\ ($k_new || 0)}])"),
	'ok',
	'the new winner releases it');

$standby2->stop;
for my $node ($primary, $standby, $standby2)
{
	is(scalar(log_lines($node, qr/claimq reclaimer pass failed/)),
		0, $node->name . ': no failed reclaimer pass');
	log_is_clean($node);
}

done_testing();
