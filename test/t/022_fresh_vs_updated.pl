# One current SQL source: CREATE EXTENSION claimq runs the install script
# built from sql/claimq.sql, and an installation of the oldest version
# followed by every update script must end with the same schema, fact for
# fact (test/t/schema_description.sql: functions and a digest of their
# source, tables, columns in order, constraints, indexes, views, triggers,
# sequences, comments, privileges, initial privileges, what pg_dump dumps).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('fresh_vs_updated');
$node->start;

my $describe = slurp_file("$FindBin::RealBin/schema_description.sql");
my $oldest = '0.1';

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('postgres', 'CREATE DATABASE updated');
$node->safe_psql('fresh', 'CREATE EXTENSION claimq');
$node->safe_psql('updated', "CREATE EXTENSION claimq VERSION '$oldest'");
$node->safe_psql('updated', 'ALTER EXTENSION claimq UPDATE');

my $version = $node->safe_psql('fresh',
	"SELECT extversion FROM pg_extension WHERE extname = 'claimq'");
is($node->safe_psql('updated',
		"SELECT extversion FROM pg_extension WHERE extname = 'claimq'"),
	$version, "the updates lead from $oldest to the fresh install's $version");

my @fresh = split /\n/, $node->safe_psql('fresh', $describe);
my @updated = split /\n/, $node->safe_psql('updated', $describe);
cmp_ok(scalar @fresh, '>', 300, 'the description has its facts (' . scalar(@fresh) . ')');

my %in_fresh = map { $_ => 1 } @fresh;
my %in_updated = map { $_ => 1 } @updated;
my @only_fresh = grep { !$in_updated{$_} } @fresh;
my @only_updated = grep { !$in_fresh{$_} } @updated;
is(join("\n", @only_fresh), '', 'nothing in the fresh install that the updated one lacks');
is(join("\n", @only_updated), '', 'nothing in the updated install that the fresh one lacks');

$node->stop;
done_testing();
