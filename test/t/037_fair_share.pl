# The share of a fair queue under concurrent claims: four pgbench clients
# claim batches of 1 to 10 jobs (each claim commits at once, as a worker
# with a lease does) from a fair queue of 100 tenants, one of them holding
# 90% of the backlog and one of them weighted 2.  Every claim is logged
# in claim order; for every pair of tenants and every span of the run (all
# tenants stay backlogged throughout), handed(A) / w(A) and handed(B) /
# w(B) differ by at most (M x C + 1) x max(1 / w(A), 1 / w(B)), M = 10
# and C = 4.  Then a claim held open in a transaction while the clients
# run again: they wait for nothing and get every job they ask for (the
# share of the tenants it holds may drift until it ends: README, "Not
# yet").
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('fair_share');
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('f', fair => true, lease => '1 hour');
	SELECT claimq.set_group_weight('f', 't01', 2);
	SELECT count(*) FROM claimq.enqueue_many('f', array_fill('{}'::jsonb, ARRAY[36000]),
		group_keys => array_fill('t00'::text, ARRAY[36000]));
	SELECT count(*) FROM generate_series(1, 99) g,
		claimq.enqueue_many('f', array_fill('{}'::jsonb, ARRAY[60]),
			group_keys => array_fill('t' || lpad(g::text, 2, '0'), ARRAY[60]));
	CREATE SEQUENCE claim_seq;
	CREATE TABLE handed (claim bigint, tenant text, asked integer);});

my $script = $node->basedir . '/claimer.sql';
open(my $fh, '>', $script) or die "could not write $script: $!";
print $fh q{
\set n random(1, 10)
WITH k AS (SELECT nextval('claim_seq') AS claim),
c AS (SELECT c.job_id FROM claimq.claim('f', :n) c)
INSERT INTO handed SELECT k.claim, j.group_key, :n
  FROM k, c JOIN claimq.job j USING (job_id);
};
close($fh);

sub claimers
{
	my ($transactions) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(
		[
			'pgbench', '-n', '-c', '4', '-j', '2', '-t', $transactions,
			'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
	return ($ok, $out . $err);
}

my ($ok, $out) = claimers(150);
ok($ok, 'four claimers ran 150 claims each without an error') or diag($out);

# Each tenant's handed / weight after every claim (0 before the first);
# per pair, the largest change of their difference over a span is the
# difference's range over the run.
my $worst = $node->safe_psql('postgres', q{
	WITH w AS (
		SELECT DISTINCT j.group_key AS t,
			   COALESCE((SELECT gw.weight FROM claimq.group_weight gw
						  WHERE gw.group_key = j.group_key), 1)::float8 AS w
		  FROM claimq.job j),
	k AS (SELECT 0::bigint AS claim UNION SELECT DISTINCT claim FROM handed),
	c AS (SELECT claim, tenant, count(*) AS n FROM handed GROUP BY 1, 2),
	nv AS (
		SELECT k.claim, w.t, w.w,
			   sum(COALESCE(c.n, 0)) OVER (PARTITION BY w.t ORDER BY k.claim) / w.w AS v
		  FROM k CROSS JOIN w
		  LEFT JOIN c ON c.claim = k.claim AND c.tenant = w.t),
	d AS (
		SELECT a.t AS ta, b.t AS tb, greatest(1 / a.w, 1 / b.w) AS inv,
			   max(a.v - b.v) - min(a.v - b.v) AS spread
		  FROM nv a JOIN nv b ON a.claim = b.claim AND a.t < b.t
		 GROUP BY a.t, b.t, a.w, b.w)
	SELECT round((max(spread / ((10 * 4 + 1) * inv)))::numeric, 3)
	  FROM d});
cmp_ok($worst, '<=', 1,
	"every pair of the 100 tenants, over every span of the run, is within the bound (worst: $worst of it)");
is( $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE ready = 0) FROM claimq.group_stats WHERE queue = 'f'}),
	'0', 'every tenant was backlogged throughout: each still has a job ready');
is( $node->safe_psql('postgres', q{
		SELECT count(DISTINCT claim), count(DISTINCT claim) FILTER (WHERE n = asked)
		  FROM (SELECT claim, count(*) AS n, min(asked) AS asked FROM handed GROUP BY claim) s}),
	'600|600', 'every claim returned as many jobs as it asked for');
my $noisy = $node->safe_psql('postgres',
	q{SELECT round(100.0 * count(*) FILTER (WHERE tenant = 't00') / count(*), 1) FROM handed});
cmp_ok($noisy, '<', 5,
	"the tenant with 90% of the backlog got $noisy% of the jobs (its share is 1 in 101)");

# A claim held open while the claimers run again.
my $held = $node->background_psql('postgres', on_error_stop => 1);
$held->query_safe('BEGIN');
is($held->query_safe(q{SELECT count(*) FROM claimq.claim('f', 5)}), '5',
	'a claim inside an open transaction takes 5 jobs');
$node->safe_psql('postgres', 'TRUNCATE handed');
($ok, $out) = claimers(50);
ok($ok, 'meanwhile four claimers run 50 claims each, waiting for nothing') or diag($out);
is( $node->safe_psql('postgres', q{
		SELECT count(DISTINCT claim), count(DISTINCT claim) FILTER (WHERE n = asked)
		  FROM (SELECT claim, count(*) AS n, min(asked) AS asked FROM handed GROUP BY claim) s}),
	'200|200', 'and every one of their claims returned as many jobs as it asked for');
$held->query_safe('COMMIT');
$held->quit;

$node->stop;
done_testing();
