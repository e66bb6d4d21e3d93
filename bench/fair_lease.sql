-- Fairness's cost, lease flow: claim from queue fair<:q> (1 unfair, 2 the
-- same jobs in a fair queue), then complete in a second transaction.
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids,
	   coalesce(array_agg(token)::text, '{}') AS tokens
  FROM claimq.claim('fair' || :q, :batch) \gset
SELECT count(*) FROM claimq.complete(:ids::bigint[], :tokens::bigint[]);
