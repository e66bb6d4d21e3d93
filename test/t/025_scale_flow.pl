# Queue-wide limits (max_in_flight, rate_limit) with more limited queues
# than claimq.flow_slots: what shared memory must keep when it is full.
#
#  - 1,100 rate-limited queues are claimed from round-robin, one claim per
#    transaction, each recorded with the clock read before and after it in a
#    ledger written in the claim's transaction; meanwhile 3 pgbench clients
#    claim and complete jobs of 40 queues with max_in_flight 2, through the
#    flow test's ledger.  Asserted:
#      * no rate limit is exceeded: for every queue and every run of its
#        claims i..j, the jobs handed out are at most
#        rate_limit + rate_limit x (after_j - before_i) / rate_period (the
#        contract's bound over a span that holds all of those claims);
#      * no bucket starves: a queue of 1,000 a second that has handed out
#        fewer than 1,000 jobs since its bucket was first used (and no
#        restart since) holds a token by the contract, and then every claim
#        of max_jobs 1 gets its job;
#      * a new bucket starts full: every queue's first claim gets its job;
#      * no max_in_flight is exceeded at any commit (the ledger), and the
#        limit was reached.
#  - The same after a restart with claimq.flow_slots = 16 (and
#    claimq.census_entries = 200), on new queues: the full paths.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use ClaimqTest;
use ClaimqScale;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# Seconds within which a run must end once its own work is over.
my $BOUND = 30;

my $node = claimq_node('scale_flow',
	conf => "max_connections = 30\nlog_statement = none\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION claimq;

	-- The rate ledger: one row per claim, written in its transaction.
	CREATE TABLE rq (name text PRIMARY KEY, ord integer NOT NULL,
					 rate integer NOT NULL, period interval NOT NULL);
	CREATE TABLE rl (id bigserial PRIMARY KEY, name text NOT NULL,
					 round integer NOT NULL, t_before timestamptz NOT NULL,
					 t_after timestamptz NOT NULL, n integer NOT NULL);

	CREATE PROCEDURE rate_rounds(phase text, rounds integer)
	LANGUAGE plpgsql AS $$
	DECLARE
		q record;
		t0 timestamptz;
		k integer;
	BEGIN
		FOR r IN 1 .. rounds LOOP
			FOR q IN SELECT name FROM rq WHERE name LIKE phase || '%' ORDER BY ord LOOP
				t0 := clock_timestamp();
				SELECT count(*) INTO k FROM claimq.claim(q.name, 1);
				INSERT INTO rl (name, round, t_before, t_after, n)
				VALUES (q.name, r, t0, clock_timestamp(), k);
				COMMIT;
			END LOOP;
		END LOOP;
	END
	$$;

	-- Runs i..j of a queue's claims that handed out more than the bucket
	-- allows over a span that contains them all.
	CREATE VIEW rate_exceeded AS
	WITH c AS (SELECT rl.*, rq.rate, rq.period,
					  sum(n) OVER (PARTITION BY rl.name ORDER BY rl.id) AS cum
				 FROM rl JOIN rq USING (name))
	SELECT a.name, a.id AS first, b.id AS last, b.cum - a.cum + a.n AS handed_out,
		   a.rate + a.rate * extract(epoch FROM b.t_after - a.t_before)
						   / extract(epoch FROM a.period) AS allowed
	  FROM c a JOIN c b ON b.name = a.name AND b.id >= a.id
	 WHERE b.cum - a.cum + a.n
		   > a.rate + a.rate * extract(epoch FROM b.t_after - a.t_before)
						   / extract(epoch FROM a.period);

	-- The max_in_flight ledger (as in the flow test): per queue, what the
	-- committed transactions have in flight, checked by each of them.
	CREATE TABLE ledger (key text PRIMARY KEY, n integer NOT NULL DEFAULT 0,
						 peak integer NOT NULL DEFAULT 0);
	CREATE TABLE held (job_id bigint PRIMARY KEY, token bigint NOT NULL, key text NOT NULL);
	CREATE TABLE violation (key text, n integer, what text);

	CREATE FUNCTION ledger_claim(phase text) RETURNS integer
	LANGUAGE plpgsql AS $$
	DECLARE
		q text := phase || 'm' || (1 + floor(random() * 40))::integer;
		r record;
		k integer := 0;
		m integer;
	BEGIN
		FOR r IN SELECT c.job_id, c.token FROM claimq.claim(q, 3, start => true) c LOOP
			UPDATE ledger SET n = ledger.n + 1, peak = greatest(peak, ledger.n + 1)
			 WHERE key = q RETURNING ledger.n INTO m;
			IF m > 2 THEN
				INSERT INTO violation VALUES (q, m, 'max_in_flight');
			END IF;
			INSERT INTO held VALUES (r.job_id, r.token, q);
			k := k + 1;
		END LOOP;
		RETURN k;
	END
	$$;

	CREATE FUNCTION ledger_complete(phase text) RETURNS integer
	LANGUAGE plpgsql AS $$
	DECLARE
		h record;
	BEGIN
		SELECT * INTO h FROM held WHERE key LIKE phase || 'm%'
		 ORDER BY job_id LIMIT 1 FOR UPDATE SKIP LOCKED;
		IF NOT FOUND THEN
			RETURN 0;
		END IF;
		IF NOT claimq.complete(h.job_id, h.token) THEN
			INSERT INTO violation VALUES (h.key, 0, 'complete refused');
		END IF;
		UPDATE ledger SET n = n - 1 WHERE key = h.key;
		DELETE FROM held WHERE job_id = h.job_id;
		RETURN 1;
	END
	$$;

	-- Make a phase's queues: nd of 1 a day, nd of 1,000 a second
	-- (interleaved in the round-robin), 40 with max_in_flight 2.
	CREATE PROCEDURE make_queues(phase text, nd integer, jobs integer)
	LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO rq
		SELECT phase || 'd' || i, 2 * i, 1, interval '1 day' FROM generate_series(1, nd) i
		UNION ALL
		SELECT phase || 's' || i, 2 * i + 1, 1000, interval '1 second' FROM generate_series(1, nd) i;
		PERFORM claimq.create_queue(name, rate_limit => rate, rate_period => period)
		   FROM rq WHERE name LIKE phase || '%';
		PERFORM claimq.enqueue_many(name, array_fill('{}'::jsonb, ARRAY[jobs]))
		   FROM rq WHERE name LIKE phase || '%';
		PERFORM claimq.create_queue(phase || 'm' || i, max_in_flight => 2,
									lease => '10 min', run_lease => '10 min')
		   FROM generate_series(1, 40) i;
		PERFORM claimq.enqueue_many(phase || 'm' || i, array_fill('{}'::jsonb, ARRAY[100]))
		   FROM generate_series(1, 40) i;
		INSERT INTO ledger (key) SELECT phase || 'm' || i FROM generate_series(1, 40) i;
	END
	$$;
});

# One phase: its queues, the round-robin with the pgbench clients beside it,
# the checks.
sub phase
{
	my ($phase, $nd, $rounds, $what) = @_;

	$node->safe_psql('postgres', "CALL make_queues('$phase', $nd, $rounds + 1)");
	my $script = $node->basedir . "/flow_ledger_$phase.sql";
	open my $fh, '>', $script or die $!;
	print $fh qq{
\\set r random(1, 2)
SELECT CASE WHEN :r = 1 THEN ledger_claim('$phase') ELSE ledger_complete('$phase') END;
};
	close $fh;
	my $bench = start_pgbench($node, 'postgres', $script,
		[ '-c', '3', '-j', '1', '-T', '8' ],
		$node->basedir . "/bench_$phase");
	my $t0 = time();
	my ($ret, $out, $err) = $node->psql('postgres',
		"CALL rate_rounds('$phase', $rounds)", timeout => 300);
	is($ret, 0, "$what: $rounds rounds of claims over " . (2 * $nd) . ' rate-limited queues')
	  or diag($err);
	note(sprintf('the rounds took %.1f s', time() - $t0));
	ok(finish_by($bench, time() + 8 + $BOUND),
		"$what: the pgbench clients end within ${BOUND} s of their 8 s");
	like($bench->{out}, qr/processed: [1-9]/,
		"$what: the pgbench clients claimed and completed")
	  or diag($bench->{err});

	# Rates.
	my $exceeded = $node->safe_psql(
		'postgres', qq{
		SELECT count(DISTINCT name) || ' queues; worst: '
			   || coalesce((SELECT name || ' handed out ' || handed_out || ' where '
								   || round(allowed::numeric, 3) || ' were allowed'
							  FROM rate_exceeded WHERE name LIKE '$phase%'
							 ORDER BY handed_out - allowed DESC LIMIT 1), 'none')
		  FROM rate_exceeded WHERE name LIKE '$phase%'});
	is($exceeded, '0 queues; worst: none',
		"$what: no rate limit exceeded over any span (ledger of every claim)");
	is( $node->safe_psql(
			'postgres', qq{
		SELECT count(*) FILTER (WHERE n = 0) || ' of ' || count(*)
		  FROM rl WHERE name LIKE '${phase}s%'}),
		'0 of ' . ($nd * $rounds),
		"$what: no claim of a 1,000-a-second queue got nothing while its bucket held tokens by the contract");
	is( $node->safe_psql(
			'postgres', qq{
		SELECT count(*) FROM rl
		 WHERE name LIKE '$phase%' AND round = 1 AND n = 0}),
		'0', "$what: every queue's first claim got its job (a new bucket starts full)");

	# max_in_flight.
	is( $node->safe_psql(
			'postgres', qq{
		SELECT count(*) FROM violation WHERE key LIKE '${phase}m%'}),
		'0', "$what: the ledger saw no max_in_flight exceeded at any commit");
	is( $node->safe_psql(
			'postgres', qq{
		SELECT max(peak) FROM ledger WHERE key LIKE '${phase}m%'}),
		'2', "$what: the limit of 2 in flight was reached");
	return;
}

phase('a', 550, 4, '1,100 rate-limited queues, default settings');

#
# The tables deliberately small.
#
$node->append_conf('postgresql.conf',
	"claimq.flow_slots = 16\nclaimq.census_entries = 200\n");
$node->restart;
note('the server knows claimq.flow_slots: '
	  . $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_settings WHERE name = 'claimq.flow_slots'"));
phase('b', 200, 4, '400 rate-limited queues, 16 flow slots');

$node->stop;
log_is_clean($node);

done_testing();
