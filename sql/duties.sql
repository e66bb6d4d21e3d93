-- The functions of each duty (see set_duty), written once for the install
-- script and the update that changes them.

CREATE FUNCTION claimq.duty_functions(duty text)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	keys text[] := '{"claimq.claim_keys(text, text[], interval)",'
				   '"claimq.release_keys(text, text[], bigint[])"}';
	look text[] := '{"claimq.status(bigint[], text)",'
				   '"claimq.wait_for(bigint[], interval, text)",'
				   '"claimq.dependencies(bigint[], text)",'
				   '"claimq.node_of(bigint)"}';
	observe text[] := '{"claimq.counters()",'
					  '"claimq.queue_latency()",'
					  '"claimq.reclaimer_status()",'
-- @c
					  '"claimq.cluster_queue_stats()",'
-- @end
					  '"claimq.metrics()"}';
	every text[] := '{"claimq.version()",'
					'"claimq.edition()"}';
BEGIN
	CASE duty
		WHEN 'observe' THEN
			RETURN every OPERATOR(pg_catalog.||) observe;
		WHEN 'produce' THEN
			RETURN every OPERATOR(pg_catalog.||) keys OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) '{'
				'"claimq.enqueue(text, jsonb, timestamptz, integer, text, integer, text, text, bigint[], text, jsonb)",'
				'"claimq.enqueue_many(text, jsonb[], timestamptz, integer, text[], integer, text, text[], bigint[], text, jsonb[])",'
				'"claimq.cancel(bigint[], text)"}'::text[];
		WHEN 'work' THEN
			RETURN every OPERATOR(pg_catalog.||) keys OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) '{'
				'"claimq.claim(text, integer, interval, text, boolean, interval)",'
				'"claimq.start(bigint[], bigint[], interval, text)",'
				'"claimq.start(bigint, bigint, interval, text)",'
				'"claimq.extend(bigint[], bigint[], interval, text)",'
				'"claimq.extend(bigint, bigint, interval, text)",'
				'"claimq.complete(bigint[], bigint[], jsonb[], text)",'
				'"claimq.complete(bigint, bigint, jsonb, text)",'
				'"claimq.fail(bigint[], bigint[], text, interval, boolean, text)",'
				'"claimq.fail(bigint, bigint, text, interval, boolean, text)",'
				'"claimq.release(bigint[], bigint[], text)",'
				'"claimq.release(bigint, bigint, text)",'
				'"claimq.snooze(bigint[], bigint[], interval, text)",'
				'"claimq.snooze(bigint, bigint, interval, text)",'
				'"claimq.release_worker(text, text)"}'::text[];
		WHEN 'administer' THEN
			RETURN every OPERATOR(pg_catalog.||) look OPERATOR(pg_catalog.||) observe OPERATOR(pg_catalog.||) '{'
-- @c
				'"claimq.distribute(integer)",'
				'"claimq.update_distributed()",'
-- @end
				'"claimq.create_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval, boolean)",'
				'"claimq.alter_queue(text, interval, interval, integer, interval, interval, interval, interval, boolean, integer, boolean, integer, integer, interval, boolean)",'
				'"claimq.drop_queue(text, boolean)",'
				'"claimq.set_group_weight(text, text, real)",'
				'"claimq.pause_queue(text)",'
				'"claimq.resume_queue(text)",'
				'"claimq.purge_queue(text)",'
				'"claimq.cancel(bigint[], text)",'
				'"claimq.create_schedule(text, text, text, jsonb, text, integer, text, jsonb)",'
				'"claimq.alter_schedule(text, text, text, jsonb, text, integer, text, boolean, jsonb)",'
				'"claimq.drop_schedule(text)",'
				'"claimq.fire_schedules(integer)",'
				'"claimq.reclaim(text, integer)",'
				'"claimq.retry_dead(text, bigint[])",'
				'"claimq.prune(integer)",'
				'"claimq.maintain()",'
				'"claimq.reset_counters()"}'::text[];
		ELSE
			RAISE EXCEPTION 'unknown duty "%"', duty
				USING ERRCODE = '22023',
					  HINT = 'The duties are produce, work, administer and observe.';
	END CASE;
END
$$;

COMMENT ON FUNCTION claimq.duty_functions(text) IS
'private: the functions that make up a duty';
