-- PgQ: one consumer loop step: take the next batch, read its events, close
-- it, in one transaction.  Batch size was fixed when the events were ticked.
BEGIN;
SELECT coalesce(pgq.next_batch('bench', 'worker'), 0) AS batch_id \gset
\if :batch_id
SELECT count(*) FROM pgq.get_batch_events(:batch_id);
SELECT pgq.finish_batch(:batch_id);
\endif
COMMIT;
