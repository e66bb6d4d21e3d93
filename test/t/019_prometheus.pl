# Prometheus: claimq.metrics() on real figures (a fair queue's tenants
# among them, one key with quotes and a backslash, one with a newline, and
# the keyless one) passes `promtool check metrics` (Debian's prometheus
# package) without a complaint, and Debian's
# prometheus-postgres-exporter, connected as a role with only the observe
# duty and given contrib/prometheus/queries.yaml, serves claimq_* series
# over HTTP on 127.0.0.1 whose values are those of queue_stats.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use HTTP::Tiny;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = claimq_node('prom');
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('pq', keep_done => '1 hour');
	SELECT claimq.create_queue('px');
	SELECT claimq.enqueue_many('pq', array_fill('{}'::jsonb, ARRAY[20]));
	SELECT claimq.enqueue('pq', '{}', run_at => now() + interval '1 hour');
	SELECT claimq.enqueue('px', '{}');
	SELECT claimq.complete(job_id, token) FROM claimq.claim('pq', 5, start => true);
	SELECT count(*) FROM claimq.claim('pq', 3);
	SELECT claimq.fail(job_id, token, 'no', permanent => true) FROM claimq.claim('pq', 2);
	SELECT claimq.create_queue('pf', fair => true);
	SELECT claimq.set_group_weight('pf', 'a "quoted"\key', 2);
	SELECT claimq.enqueue_many('pf', array_fill('{}'::jsonb, ARRAY[4]),
		group_keys => ARRAY['a "quoted"\key', 'a "quoted"\key', E'two\nlines', NULL]);
	SELECT count(*) FROM claimq.claim('pf', 4);
	CREATE ROLE claimq_exporter LOGIN;
	SELECT claimq.grant_duty('claimq_exporter', 'observe');
});

# promtool on metrics(), read as the observer.
my $metrics = $node->safe_psql('postgres', 'SELECT claimq.metrics()',
	extra_params => [ '-U', 'claimq_exporter' ]);
like($metrics, qr/^claimq_jobs\{queue="pq",state="ready"\} 10$/m,
	'metrics() reports the figures');
like($metrics, qr/^claimq_fair_handed_total\{queue="pf",group_key="a \\"quoted\\"\\\\key"\} 2$/m,
	'and the jobs handed to a fair queue\'s tenants, the label escaped');
my ($out, $err) = ('', '');
my $ok = IPC::Run::run([ 'promtool', 'check', 'metrics' ],
	'<', \"$metrics\n", '>', \$out, '2>', \$err);
ok($ok, 'promtool check metrics accepts it') or diag("$out$err");
is("$out$err", '', 'without a single complaint');

# The exporter, as the observer, over HTTP.
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $dsn = sprintf('host=%s port=%d user=claimq_exporter dbname=postgres sslmode=disable',
	$node->host, $node->port);
local $ENV{DATA_SOURCE_NAME} = $dsn;
my $log = "${PostgreSQL::Test::Utils::tmp_check}/exporter.log";
my $exporter = IPC::Run::start(
	[
		'prometheus-postgres-exporter',
		"--web.listen-address=127.0.0.1:$port",
		"--extend.query-path=$FindBin::RealBin/../../contrib/prometheus/queries.yaml",
		'--disable-default-metrics', '--disable-settings-metrics'
	],
	'>', $log, '2>&1');

my $http = HTTP::Tiny->new(timeout => 5);
my $body = '';
for (my $i = 0; $i < 100; $i++)
{
	my $res = $http->get("http://127.0.0.1:$port/metrics");
	$body = $res->{content} // '';
	last if $res->{success} && $body =~ /^claimq_ready\{/m;
	usleep(200_000);
}
like($body, qr/^claimq_ready\{/m, 'the exporter serves claimq_* series')
  or diag(slurp_file($log));

my %served;
for my $line (split /\n/, $body)
{
	next unless $line =~ /^claimq_(\w+)\{([^}]*)\} (\S+)$/;
	my ($name, $labels, $value) = ($1, $2, $3);
	next unless $labels =~ /queue="([^"]*)"/;
	$served{"$1:$name"} = $value + 0;
}
my @stats = split /\n/, $node->safe_psql('postgres', q{
	SELECT format('%s:%s', queue, s.key) || '|' || s.value
	  FROM claimq.queue_stats q,
		   LATERAL jsonb_each_text(jsonb_build_object(
			 'ready', ready, 'scheduled', scheduled, 'claimed', claimed, 'running', running,
			 'expired', expired, 'dead', dead, 'done', done, 'cancelled', cancelled)) s
	 ORDER BY 1});
is(scalar @stats, 24, 'queue_stats has eight figures for each of the three queues');
my @wrong = grep {
	my ($key, $value) = split /\|/;
	!defined $served{$key} || $served{$key} != $value
} @stats;
is(join(', ', @wrong), '', 'every served claimq_* figure is the one queue_stats shows');
is($served{'pq:ready'}, 10, 'for instance: pq has 10 ready jobs');

$exporter->kill_kill;
$node->stop;
log_is_clean($node);
done_testing();
