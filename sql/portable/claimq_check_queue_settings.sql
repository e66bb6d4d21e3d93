DECLARE
	/* In the order they are checked, max_attempts after the second. */
	spans interval[] := ARRAY[lease, run_lease, retry_base, retry_max,
							  keep_done, keep_dead];
	names text[] := '{lease,run_lease,retry_base,retry_max,keep_done,keep_dead}';
	span interval;
	zero_ok boolean;
	max_months float8;
	max_days float8;
	months float8;
	days float8;
	time_days float8;
	t0 timestamptz;
	t1 timestamptz;
	valid boolean;
BEGIN
	/*
	 * Each interval judged as it will be used, added to the wall clock
	 * (src/common.c, cq_interval_check): valid when now < now + span <= now
	 * + max (now <= now + span for the delays); a field far outside what max
	 * allows is refused before any arithmetic, as in C.  NULL passes.
	 */
	FOR i IN 1 .. 6 LOOP
		IF i OPERATOR(pg_catalog.=) 3 AND max_attempts OPERATOR(pg_catalog.<) 1 THEN
			RAISE EXCEPTION 'max_attempts must be at least 1'
				USING ERRCODE = '22023';
		END IF;
		span := spans[i];
		CONTINUE WHEN span IS NULL;
		/* lease and run_lease: at most 7 days; the others at most 100 years. */
		zero_ok := i OPERATOR(pg_catalog.>) 2;
		max_months := CASE WHEN zero_ok THEN 1200 ELSE 0 END;
		max_days := (10 OPERATOR(pg_catalog.*) ((CASE WHEN zero_ok THEN 0 ELSE 7 END)
			OPERATOR(pg_catalog.+) (31 OPERATOR(pg_catalog.*) max_months)))
			OPERATOR(pg_catalog.+) 31;
		months := (pg_catalog.date_part('year', span) OPERATOR(pg_catalog.*) 12)
			OPERATOR(pg_catalog.+) pg_catalog.date_part('month', span);
		days := pg_catalog.date_part('day', span);
		time_days := pg_catalog.trunc(((pg_catalog.date_part('hour', span) OPERATOR(pg_catalog.*) 3600)
			OPERATOR(pg_catalog.+) (pg_catalog.date_part('minute', span) OPERATOR(pg_catalog.*) 60)
			OPERATOR(pg_catalog.+) pg_catalog.date_part('second', span)) OPERATOR(pg_catalog./) 86400);
		valid := false;
		IF pg_catalog.abs(months) OPERATOR(pg_catalog.<=) ((10 OPERATOR(pg_catalog.*) max_months) OPERATOR(pg_catalog.+) 12)
		   AND pg_catalog.abs(days) OPERATOR(pg_catalog.<=) max_days
		   AND pg_catalog.abs(time_days) OPERATOR(pg_catalog.<=) max_days THEN
			t0 := pg_catalog.clock_timestamp();
			t1 := t0 OPERATOR(pg_catalog.+) span;
			valid := CASE WHEN zero_ok THEN t1 OPERATOR(pg_catalog.>=) t0
						  ELSE t1 OPERATOR(pg_catalog.>) t0 END
				AND t1 OPERATOR(pg_catalog.<=) (t0 OPERATOR(pg_catalog.+)
					(CASE WHEN zero_ok THEN '100 years' ELSE '7 days' END)::interval);
		END IF;
		IF NOT valid THEN
			RAISE EXCEPTION '% must be % zero and at most %', names[i],
				CASE WHEN zero_ok THEN 'at least' ELSE 'greater than' END,
				CASE WHEN zero_ok THEN '100 years' ELSE '7 days' END
				USING ERRCODE = '22023';
		END IF;
	END LOOP;
END
