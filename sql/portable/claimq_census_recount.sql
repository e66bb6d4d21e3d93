BEGIN
	/*
	 * As the C edition without the preload: no census to count, so never
	 * valid; refused, as there, in a transaction that has written.
	 */
	IF pg_catalog.txid_current_if_assigned() IS NOT NULL THEN
		RAISE EXCEPTION 'census_recount() cannot run in a transaction that has written anything'
			USING ERRCODE = '25001';
	END IF;
	RETURN false;
END
