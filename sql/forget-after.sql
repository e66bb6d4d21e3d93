-- The sets of jobs to run after that no job names any more, written once
-- for the install script and the update that replaces it.
/*
 * Jobs were deleted: the sets that no job names any more go, those named
 * (set_ids) and those that named the deleted jobs (job_ids).  A set whose
 * last two jobs are deleted at once by two transactions stays until one
 * of the jobs it names is deleted.  In PL/pgSQL, as count_dependents.
 */
CREATE FUNCTION claimq.forget_after(set_ids bigint[], job_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	DELETE FROM claimq.job_after e
	 WHERE e.set_id OPERATOR(pg_catalog.=) ANY (ARRAY(
			SELECT s.id FROM pg_catalog.unnest(set_ids) AS s(id)
			UNION
			SELECT d.set_id FROM claimq.job_after d
			 WHERE d.after_id OPERATOR(pg_catalog.=) ANY (job_ids)))
	   AND NOT EXISTS (SELECT 1 FROM claimq.job j
						WHERE j.after_set OPERATOR(pg_catalog.=) e.set_id);
END
$$;

COMMENT ON FUNCTION claimq.forget_after(bigint[],bigint[]) IS
'private: delete the sets of jobs to run after that no job names any more, among those listed and those that named the deleted jobs';
