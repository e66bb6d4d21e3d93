SELECT * FROM claimq.wait_for_rows(wait_for.job_ids, wait_for.timeout, wait_for.queue)
