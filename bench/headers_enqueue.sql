-- Trace context's cost, producing: enqueue_many of :batch jobs into queue
-- hdr<:q>, without headers (0) or with 200 bytes of headers each (1,
-- bench.trace_headers).
SELECT count(*) FROM claimq.enqueue_many('hdr' || :q, array_fill('{"n": 1}'::jsonb, ARRAY[:batch::int]),
	headers => array_fill(bench.trace_headers(:q::int), ARRAY[:batch::int]));
