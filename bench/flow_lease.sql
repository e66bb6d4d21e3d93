-- Flow control's cost, lease flow: claim from queue flow<:q> (1 plain, 2
-- with every group blocked, 3 with queue-wide limits it never reaches),
-- then complete in a second transaction.
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids,
	   coalesce(array_agg(token)::text, '{}') AS tokens
  FROM claimq.claim('flow' || :q, :batch) \gset
SELECT count(*) FROM claimq.complete(:ids::bigint[], :tokens::bigint[]);
