-- claimq, one transaction: claim and complete before one commit.
BEGIN;
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids,
	   coalesce(array_agg(token)::text, '{}') AS tokens
  FROM claimq.claim('bench', :batch) \gset
SELECT count(*) FROM claimq.complete(:ids::bigint[], :tokens::bigint[]);
COMMIT;
