# The reclaimer's flow upkeep skips a queue row that a transaction holds.
# It writes a rate bucket in shared memory to its queue's row (the first
# record, or an idle bucket's); 0.8 before this waited for a locked row
# up to the pass's lock_timeout, then failed the whole pass, and the next
# failed the same way for as long as the lock was held: a transaction
# left open after an alter_queue, say, stopped the census's recount
# behind it in every pass.  Now passes succeed meanwhile, and the bucket
# is written once the lock is gone.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = claimq_node('locked_queue');
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION claimq;
	SELECT claimq.create_queue('r', rate_limit => 100, rate_period => '1 hour');
	SELECT claimq.enqueue_many('r', array_fill('{}'::jsonb, ARRAY[3]));});

# A transaction holds r's row; then a claim makes r's bucket in shared
# memory, which its row does not record yet.
my $holder = $node->background_psql('postgres', on_error_stop => 1);
$holder->query_safe('BEGIN');
$holder->query_safe(q{SELECT 1 FROM claimq.queue WHERE name = 'r' FOR UPDATE});
is($node->safe_psql('postgres', q{SELECT count(*) FROM claimq.claim('r', 1)}), '1',
	'a claim of r makes its bucket in shared memory');

for my $pass (1 .. 2)
{
	my $t = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
	poll_ok($node, 'postgres',
		"SELECT last_run > '$t' AND last_error IS NULL FROM claimq.reclaimer_status",
		't', 60, "reclaimer pass $pass succeeds while r's row is held");
}
is($node->safe_psql('postgres', q{SELECT rate_at IS NULL FROM claimq.queue WHERE name = 'r'}),
	't', 'r\'s row is left as it was');

$holder->query_safe('COMMIT');
$holder->quit;
poll_ok($node, 'postgres',
	q{SELECT rate_at IS NOT NULL FROM claimq.queue WHERE name = 'r'}, 't', 60,
	'once the row is free, a pass records r\'s bucket in it');
ok(slurp_file($node->logfile) !~ /lock timeout/,
	'no pass waited for the lock');

$node->stop;
done_testing();
