/* claimq--0.6--0.6.1.sql: catalogue comments that say what the functions do (the rest of 0.6.1 is in the library) */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.6.1'" to load this file. \quit

COMMENT ON FUNCTION claimq.check_queue_settings(interval,interval,integer,interval,interval,interval,interval) IS
'private: raise 22023 unless the queue settings are within the limits create_queue and alter_queue accept';

COMMENT ON FUNCTION claimq.check_flow_settings(integer,integer,integer,interval) IS
'private: raise 22023 unless the flow control options are within the limits create_queue and alter_queue accept';

COMMENT ON FUNCTION claimq.prune(integer) IS
'delete up to max_jobs done, dead and cancelled jobs older than their queue''s keep_done / keep_dead (cancelled as dead), and as many expired key claims; the reclaimer does this on every pass';

COMMENT ON FUNCTION claimq.reset_counters() IS
'set the current database''s counters and latency histograms back to zero';

COMMENT ON FUNCTION claimq.reclaimer_status() IS
'the background reclaimer''s row for the current database, if it serves it; without the preload, one row saying it is not running';

COMMENT ON VIEW claimq.reclaimer_status IS
'state of the background reclaimer in the current database; see claimq.reclaimer_status()';
