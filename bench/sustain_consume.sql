-- sustained run, consumers: claim up to :batch jobs, waiting up to a second
-- for work, then complete them in a second transaction.
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids,
	   coalesce(array_agg(token)::text, '{}') AS tokens
  FROM claimq.claim('bench', :batch, wait => '1 second') \gset
SELECT count(*) FROM claimq.complete(:ids::bigint[], :tokens::bigint[]);
