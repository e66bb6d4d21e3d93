-- sustained run, the hand-written queue's reclaimer (once a second): jobs
-- whose lease has run out go back to pending, found by the lease index.
UPDATE bench.job
   SET state = 'pending', token = NULL, worker = NULL, claimed_at = NULL, expires_at = NULL
 WHERE expires_at < now() AND state = ANY ('{claimed,running}'::text[]);
