# The cron parser and next-occurrence computation against an independent
# one: test/t/cron_oracle.py (its own parser, Python's zoneinfo, a walk
# over every minute) draws 3,000 random expressions, time zones and
# instants, half of them within a day of a change of the zone's offset,
# and claimq.cron_next must give the same next occurrence for every one.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $cases = "${PostgreSQL::Test::Utils::tmp_check}/cron_cases.tsv";
my ($out, $err);
IPC::Run::run([ 'python3', "$FindBin::RealBin/cron_oracle.py", '3000', '20261201' ],
	'>', $cases, '2>', \$err)
  or BAIL_OUT("cron_oracle.py failed: $err");

my $node = claimq_node('cronoracle', no_preload => 1);
$node->start;
$node->safe_psql('postgres', qq{
	CREATE EXTENSION claimq;
	CREATE TABLE cases (cron text, zone text, after timestamptz, expected text);
	COPY cases FROM '$cases';
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM cases'), '3000',
	'3,000 cases drawn');

# "none": the oracle walked two days without an occurrence.
my $mismatches = $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s | %s | after %s: oracle %s, claimq %s',
							 cron, zone, after, expected, got), E'\n')
	  FROM (SELECT c.*, claimq.cron_next(c.cron, c.zone, c.after) AS got FROM cases c) x
	 WHERE CASE WHEN expected = 'none'
				THEN got IS NOT NULL AND got <= after + interval '2 days'
				ELSE got IS DISTINCT FROM expected::timestamptz END});
is($mismatches, '', 'claimq agrees with the independent computation on every case');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM cases WHERE expected <> 'none'}),
	'>=', 1500, 'at least half the cases have an occurrence within the window');

$node->stop;
done_testing();
