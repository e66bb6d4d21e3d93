BEGIN
	IF job_id IS NULL THEN
		RAISE EXCEPTION 'argument "job_id" must not be null'
			USING ERRCODE = '22004';
	END IF;
	RETURN (job_id OPERATOR(pg_catalog.>>) 48)::integer;
END
