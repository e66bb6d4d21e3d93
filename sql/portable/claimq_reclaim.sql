SELECT * FROM claimq.reclaim_expired(queue, max_jobs)
