-- Trace context's cost, lease flow: claim from queue hdr<:q> (0 jobs
-- without headers, 1 the same jobs with 200 bytes of headers each), then
-- complete in a second transaction.
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids,
	   coalesce(array_agg(token)::text, '{}') AS tokens
  FROM claimq.claim('hdr' || :q, :batch) \gset
SELECT count(*) FROM claimq.complete(:ids::bigint[], :tokens::bigint[]);
