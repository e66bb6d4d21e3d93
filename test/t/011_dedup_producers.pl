# Producers that enqueue_many the same new dedup keys in shuffled orders,
# all at once, never deadlock: every call succeeds, and each key has one
# live job.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('dedup', conf => "claimq.reclaimer = off\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('dq');
});

# Each call takes 200 keys of a 50-millisecond window, so the producers
# that run in the same window insert the same new keys, each in its own
# random order.
my $script = $node->basedir . '/producer.sql';
open(my $fh, '>', $script) or die "could not write $script: $!";
print $fh q{
SELECT count(*) FROM claimq.enqueue_many('dq',
	array_fill('{}'::jsonb, ARRAY[200]),
	dedup_keys => (SELECT array_agg(w.k || '-' || g ORDER BY random())
					 FROM generate_series(1, 200) g,
						  (SELECT floor(extract(epoch FROM clock_timestamp()) * 20)::text AS k) w));
};
close($fh);

my ($out, $err) = ('', '');
my $ok = IPC::Run::run(
	[
		'pgbench', '-n', '-c', '8', '-j', '2', '-T', '6',
		'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
	],
	'>', \$out, '2>', \$err);
ok($ok, 'eight producers ran for six seconds without an error');
unlike($err, qr/deadlock detected/, 'no deadlock was detected');
like($out, qr/number of failed transactions: 0 /, 'pgbench counted no failure')
  or diag($out . $err);
cmp_ok(
	$node->safe_psql('postgres',
		'SELECT count(DISTINCT dedup_key) FROM claimq.job'),
	'>', 200, 'the producers covered several windows');
is( $node->safe_psql(
		'postgres', q{
		SELECT count(*) FROM (SELECT dedup_key FROM claimq.job
							   GROUP BY dedup_key HAVING count(*) > 1) d}),
	'0',
	'each key has one live job');

$node->stop;
done_testing();
