-- sustained run, producers: one enqueue_many of :batch jobs per transaction.
SELECT count(*) FROM claimq.enqueue_many('bench',
	ARRAY(SELECT bench.payload(i) FROM generate_series(1, :batch) i));
