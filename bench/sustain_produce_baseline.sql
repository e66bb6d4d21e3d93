-- sustained run, producers of the hand-written queue: :batch jobs per
-- transaction, as enqueue_many writes them (pending, ready now).
INSERT INTO bench.job (queue_id, state, run_at, enqueued_at, payload)
SELECT 1, 'pending', now(), now(), bench.payload(i)
  FROM generate_series(1, :batch) i;
