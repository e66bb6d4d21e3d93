SELECT CASE WHEN group_fifo THEN 1
			WHEN group_limit OPERATOR(pg_catalog.>) 0 THEN group_limit END
