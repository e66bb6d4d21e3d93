SELECT * FROM claimq.status_rows(status.job_ids, status.queue)
