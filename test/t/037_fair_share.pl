# The share of a fair queue under concurrent claims: four pgbench clients
# claim batches of 1 to 10 jobs (each claim commits at once, as a worker
# with a lease does) from a fair queue of 100 tenants, one of them holding
# 90% of the backlog and one of them weighted 2, and from one of three
# tenants weighted 1, 3 and 0.5 (fewer tenants than claimers: each claim
# serves tenants that other open claims are serving too).  Every claim is
# logged in claim order; for every pair of tenants and every span of the
# run (all tenants stay backlogged throughout), handed(A) / w(A) and
# handed(B) / w(B) differ by at most (M x C + 1) x max(1 / w(A), 1 /
# w(B)), M = 10 and C = 4.  Then a claim held open in a transaction while
# the clients run again: they wait for nothing, get every job they ask
# for, and the share of their claims stays within the bound (C = 5, the
# held claim counted).  Last, with fewer entries of shared memory than
# tenants (the C edition keeps the shares there), after a restart: the
# claims take the statements and the shares kept in tables.
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
	SELECT claimq.create_queue('g', fair => true, lease => '1 hour');
	SELECT claimq.set_group_weight('g', 'b', 3);
	SELECT claimq.set_group_weight('g', 'c', 0.5);
	SELECT count(*) FROM claimq.enqueue_many('g', array_fill('{}'::jsonb, ARRAY[9000]),
		group_keys => array_fill('a'::text, ARRAY[9000]));
	SELECT count(*) FROM claimq.enqueue_many('g', array_fill('{}'::jsonb, ARRAY[5000]),
		group_keys => array_fill('b'::text, ARRAY[5000]));
	SELECT count(*) FROM claimq.enqueue_many('g', array_fill('{}'::jsonb, ARRAY[2000]),
		group_keys => array_fill('c'::text, ARRAY[2000]));
	SELECT count(*) FROM claimq.enqueue_many('f', array_fill('{}'::jsonb, ARRAY[36000]),
		group_keys => array_fill('t00'::text, ARRAY[36000]));
	SELECT count(*) FROM generate_series(1, 99) g,
		claimq.enqueue_many('f', array_fill('{}'::jsonb, ARRAY[60]),
			group_keys => array_fill('t' || lpad(g::text, 2, '0'), ARRAY[60]));
	SELECT count(*) FROM claimq.enqueue_many('f', array_fill('{}'::jsonb, ARRAY[100]),
		group_keys => array_fill('t01'::text, ARRAY[100]));
	CREATE SEQUENCE claim_seq;
	CREATE TABLE handed (queue text, claim bigint, tenant text, asked integer);});

my $script = $node->basedir . '/claimer.sql';
open(my $fh, '>', $script) or die "could not write $script: $!";
print $fh q{
\set n random(1, 10)
WITH k AS (SELECT nextval('claim_seq') AS claim),
c AS (SELECT c.job_id FROM claimq.claim(:queue, :n) c)
INSERT INTO handed SELECT :queue, k.claim, j.group_key, :n
  FROM k, c JOIN claimq.job j USING (job_id);
};
close($fh);

sub claimers
{
	my ($queue, $transactions) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(
		[
			'pgbench', '-n', '-c', '4', '-j', '2', '-t', $transactions,
			'-D', "queue='$queue'", '-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
	return ($ok, $out . $err);
}

# The worst pair of a queue's tenants over every span of its logged
# claims, as a share of the bound with C claims open at once: each
# tenant's handed / weight after every claim (0 before the first); per
# pair, the largest change of their difference over a span is the
# difference's range over the run.
sub worst
{
	my ($queue, $c, $since) = @_;
	$since //= 0;
	return $node->safe_psql('postgres', qq{
	WITH w AS (
		SELECT DISTINCT j.group_key AS t,
			   COALESCE((SELECT gw.weight FROM claimq.group_weight gw
						  JOIN claimq.queue q USING (queue_id)
						  WHERE q.name = '$queue' AND gw.group_key = j.group_key), 1)::float8 AS w
		  FROM claimq.job j JOIN claimq.queue q USING (queue_id) WHERE q.name = '$queue'),
	k AS (SELECT ${since}::bigint AS claim
		  UNION SELECT DISTINCT claim FROM handed WHERE queue = '$queue' AND claim > $since),
	c AS (SELECT claim, tenant, count(*) AS n FROM handed
		   WHERE queue = '$queue' AND claim > $since GROUP BY 1, 2),
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
	SELECT round((max(spread / ((10 * $c + 1) * inv)))::numeric, 3)
	  FROM d});
}

my ($ok, $out) = claimers('f', 150);
ok($ok, 'four claimers ran 150 claims each without an error') or diag($out);
my $worst = worst('f', 4);
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

# Three tenants, four claimers.
($ok, $out) = claimers('g', 150);
ok($ok, 'four claimers ran 150 claims each of the queue of three tenants') or diag($out);
$worst = worst('g', 4);
cmp_ok($worst, '<=', 1,
	"each pair of the three tenants (weights 1, 3, 0.5), over every span, is within the bound (worst: $worst of it)");
is( $node->safe_psql('postgres', q{
		SELECT string_agg(format('%s:%s', tenant, abs(n / total - w / 4.5) < 0.02), ',' ORDER BY tenant)
		  FROM (SELECT tenant, count(*)::numeric AS n,
					   (SELECT count(*) FROM handed WHERE queue = 'g') AS total,
					   CASE tenant WHEN 'a' THEN 1 WHEN 'b' THEN 3 ELSE 0.5 END AS w
				  FROM handed WHERE queue = 'g' GROUP BY tenant) s}),
	'a:t,b:t,c:t', 'each got its weight\'s part of the jobs (of 4.5: 1, 3, 0.5), within 2 points');

# A claim held open while the claimers run again, and a new tenant that
# arrives halfway: it shares from its arrival, neither repaid nor left
# behind (the priority's virtual time moves on while the held claim holds
# a row of it).
my $held = $node->background_psql('postgres', on_error_stop => 1);
$held->query_safe('BEGIN');
is($held->query_safe(q{SELECT count(*) FROM claimq.claim('g', 5)}), '5',
	'a claim inside an open transaction takes 5 jobs');
$node->safe_psql('postgres', 'TRUNCATE handed');
($ok, $out) = claimers('g', 50);
ok($ok, 'meanwhile four claimers run 50 claims each, waiting for nothing') or diag($out);
$worst = worst('g', 5);
cmp_ok($worst, '<=', 1,
	"and the share of a, b and c stays within the bound, the held claim counted (worst: $worst of it)");
my $since = $node->safe_psql('postgres', q{
	SELECT max(claim) FROM handed;
	SELECT count(*) FROM claimq.enqueue_many('g', array_fill('{}'::jsonb, ARRAY[3000]),
		group_keys => array_fill('d'::text, ARRAY[3000]));});
$since =~ s/\n.*//s;
($ok, $out) = claimers('g', 50);
ok($ok, 'then a new tenant d arrives, and they run 50 claims each more') or diag($out);
is( $node->safe_psql('postgres', q{
		SELECT count(DISTINCT claim), count(DISTINCT claim) FILTER (WHERE n = asked)
		  FROM (SELECT claim, count(*) AS n, min(asked) AS asked FROM handed GROUP BY claim) s}),
	'400|400', 'every one of their claims returned as many jobs as it asked for');
$worst = worst('g', 5, $since);
cmp_ok($worst, '<=', 1,
	"from d's arrival, each pair of the four tenants is within the bound (worst: $worst of it)");
$held->query_safe('COMMIT');
$held->quit;

# Every job handed out was counted, charges and all, once the claims ended.
is( $node->safe_psql('postgres', q{
		SELECT string_agg(l, ',' ORDER BY l) FROM regexp_split_to_table(claimq.metrics(), E'\n') l
		 WHERE l LIKE 'claimq\_fair\_handed\_total_queue="g"%'}),
	$node->safe_psql('postgres', q{
		SELECT string_agg(format('claimq_fair_handed_total{queue="g",group_key="%s"} %s', group_key, n), ','
						  ORDER BY group_key)
		  FROM (SELECT j.group_key, count(*) AS n FROM claimq.job j JOIN claimq.queue q USING (queue_id)
				 WHERE q.name = 'g' AND j.state <> 'pending' GROUP BY 1) s}),
	'metrics() counts every job each tenant was handed, charges included');

# Fewer entries of shared memory than tenants (claimq.fair_tenants),
# after a restart: the queue of 100 tenants does not fit, and its claims
# take the statements and the tables' shares, slower but as fair.
$node->append_conf('postgresql.conf', 'claimq.fair_tenants = 8');
$node->restart;
$node->safe_psql('postgres', 'TRUNCATE handed');
($ok, $out) = claimers('f', 50);
ok($ok, 'with room for 8 tenants, four claimers ran 50 claims each of the queue of 100')
  or diag($out);
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM claimq.fair_handed() h JOIN claimq.queue q USING (queue_id)
		 WHERE q.name = 'f'}),
	'0', 'shared memory holds none of its tenants');
$worst = worst('f', 4);
cmp_ok($worst, '<=', 1,
	"every pair of the 100 tenants is within the bound (worst: $worst of it)");
is( $node->safe_psql('postgres', q{
		SELECT count(DISTINCT claim), count(DISTINCT claim) FILTER (WHERE n = asked)
		  FROM (SELECT claim, count(*) AS n, min(asked) AS asked FROM handed GROUP BY claim) s}),
	'200|200', 'and every claim returned as many jobs as it asked for');

$node->stop;
done_testing();
