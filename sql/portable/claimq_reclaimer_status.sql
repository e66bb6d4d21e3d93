SELECT pg_catalog.current_database()::text, NULL::integer, m.last_run,
	   COALESCE(m.last_reclaimed, 0), COALESCE(m.total_reclaimed, 0),
	   CASE WHEN m.last_run IS NULL
			THEN 'no maintain() has run in this database yet: schedule claimq.maintain()' END
  FROM (VALUES (true)) AS o(id)
  LEFT JOIN claimq.maintained m ON m.id OPERATOR(pg_catalog.=) o.id
