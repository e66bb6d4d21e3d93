-- claimq, lease flow: claim commits (autocommit), complete is a second
-- transaction, as a worker that runs its handler between the two would.
SELECT coalesce(array_agg(job_id)::text, '{}') AS ids,
	   coalesce(array_agg(token)::text, '{}') AS tokens
  FROM claimq.claim('bench', :batch) \gset
SELECT count(*) FROM claimq.complete(:ids::bigint[], :tokens::bigint[]);
