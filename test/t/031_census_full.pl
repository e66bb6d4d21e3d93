# A census table that has been full recovers without a restart.  With
# claimq.census_entries at its least (64) and two databases served by the
# reclaimer, db1 makes more queues with jobs than the table holds, and
# works jobs of them while its census is unknown (commits in queues
# without an entry, which in 0.7 made entries holding only their own
# change, never zero and never removed); then it drops those queues and
# makes new ones.  Both
# databases' censuses must come back valid and equal to the job table, in
# every state.  Then db2 drops claimq: its entries must go, so that db1 can
# use their room.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('census_full',
	conf => "claimq.census_entries = 64\nclaimq.databases = 'db1, db2'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE db1; CREATE DATABASE db2;');
my $compare = slurp_file("$FindBin::RealBin/../census_wrong.sql");
for my $db ('db1', 'db2')
{
	$node->safe_psql($db, "CREATE EXTENSION claimq;\n$compare");
}

# n queues named PREFIXi, each with one job (a waiting one after it in
# every fifth): the statement, and its run.
sub queues_sql
{
	my ($prefix, $n) = @_;
	return qq{
		SELECT count(*) FROM generate_series(1, $n) i,
			LATERAL (SELECT claimq.create_queue('$prefix' || i, keep_done => '1 day')) c,
			LATERAL (SELECT claimq.enqueue('$prefix' || i, '{}') AS id) e,
			LATERAL (SELECT claimq.enqueue('$prefix' || i, '{}', after => ARRAY[e.id])
					  WHERE i % 5 = 0) w;};
}

sub queues
{
	my ($db, $prefix, $n) = @_;
	$node->safe_psql($db, queues_sql($prefix, $n));
}

sub census_right
{
	my ($db, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	poll_ok($node, $db,
		'SELECT valid AND NOT EXISTS (SELECT FROM census_wrong) FROM census_valid',
		't', 60, "$db: the census is valid and equals the job table ($what)")
	  or diag($node->safe_psql($db,
		'SELECT string_agg(format(\'%s %s: %s/%s\', queue_id, state, census, counted), \', \') FROM census_wrong'));
}

queues('db2', 'b', 30);
queues('db1', 'keep', 3);
census_right('db1', 'at first');
census_right('db2', 'at first');

# Fill the table, and work jobs of the queues that have no entry while
# db1's census is unknown.
queues('db1', 'fill', 100);
poll_ok($node, 'db1', 'SELECT valid FROM census_valid', 'f', 60,
	'db1: with more queues than the table holds, its census is unknown');
for my $round (1 .. 3)
{
	$node->safe_psql('db1', q{
		SELECT count(*)
		  FROM claimq.queue q,
			   LATERAL claimq.claim(q.name, 1) c,
			   LATERAL claimq.complete(ARRAY[c.job_id], ARRAY[c.token]) d
		 WHERE q.name LIKE 'fill%'});
}
is( $node->safe_psql('db1',
		q{SELECT count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id)
		   WHERE q.name LIKE 'fill%' AND j.state = 'done'}),
	'120', 'db1: the filling queues\' jobs were worked (done, kept)');
# Drop them, and in the same transaction make new queues with jobs: the
# recount then needs entries for these while the dropped queues' entries
# still hold counts (0.7's recount stopped at the first new queue that
# found no room, before it set the dropped ones to zero: never valid).
$node->safe_psql('db1', q{
	BEGIN;
	SELECT count(*) FROM claimq.queue q, LATERAL claimq.drop_queue(q.name, force => true) d
	 WHERE q.name LIKE 'fill%';} . queues_sql('new', 20) . 'COMMIT;');

census_right('db1', 'after the queues that filled the table were dropped');
census_right('db2', 'after db1 filled the table');
is($node->safe_psql('db1', 'SELECT count(*) FROM claimq.census() WHERE pending < 0 OR done < 0'),
	'0', 'db1: no count below zero');

# Two recounts at once of a valid census both say it is valid.
is($node->safe_psql('db1', 'SELECT claimq.census_recount()'), 't',
	'db1: a recount of a valid census returns true');

# db2 drops claimq: its reclaimer frees its entries, and db1 has their
# room (its queues and db2's would not fit together).
$node->safe_psql('db2', 'DROP EXTENSION claimq CASCADE');
queues('db1', 'more', 27);
census_right('db1', 'with the room db2 left');

$node->stop;
done_testing();
