-- The portable edition's private helpers: work.

-- settle

/*
 * An interval argument of a settle call, judged as it will be used: added
 * to the wall clock (src/common.c, cq_interval_check).  Valid when now <
 * now + span <= now + max (now <= now + span when zero_ok); a field far
 * outside what max allows is refused before any arithmetic, as in C.
 * Raises 22023 naming argname and max_text.
 */
CREATE FUNCTION claimq.settle_check_interval(span interval, argname text,
											 zero_ok boolean, max interval,
											 max_text text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	max_months numeric := (pg_catalog.date_part('year', max)::numeric OPERATOR(pg_catalog.*) 12)
		OPERATOR(pg_catalog.+) pg_catalog.date_part('month', max)::numeric;
	max_days numeric := (10 OPERATOR(pg_catalog.*) (pg_catalog.date_part('day', max)::numeric
		OPERATOR(pg_catalog.+) (31 OPERATOR(pg_catalog.*) max_months))) OPERATOR(pg_catalog.+) 31;
	months numeric := (pg_catalog.date_part('year', span)::numeric OPERATOR(pg_catalog.*) 12)
		OPERATOR(pg_catalog.+) pg_catalog.date_part('month', span)::numeric;
	days numeric := pg_catalog.date_part('day', span)::numeric;
	/* The time field in whole days, truncated toward zero as in C. */
	time_days numeric := pg_catalog.trunc(pg_catalog.date_part('hour', span)::numeric
		OPERATOR(pg_catalog./) 24);
	t0 timestamptz;
	t1 timestamptz;
BEGIN
	IF pg_catalog.abs(months) OPERATOR(pg_catalog.<=) ((10 OPERATOR(pg_catalog.*) max_months) OPERATOR(pg_catalog.+) 12)
	   AND pg_catalog.abs(days) OPERATOR(pg_catalog.<=) max_days
	   AND pg_catalog.abs(time_days) OPERATOR(pg_catalog.<=) max_days THEN
		t0 := pg_catalog.clock_timestamp();
		t1 := t0 OPERATOR(pg_catalog.+) span;
		IF (CASE WHEN zero_ok THEN t1 OPERATOR(pg_catalog.>=) t0
				 ELSE t1 OPERATOR(pg_catalog.>) t0 END)
		   AND t1 OPERATOR(pg_catalog.<=) (t0 OPERATOR(pg_catalog.+) max) THEN
			RETURN;
		END IF;
	END IF;
	RAISE EXCEPTION '% must be % zero and at most %', argname,
		CASE WHEN zero_ok THEN 'at least' ELSE 'greater than' END, max_text
		USING ERRCODE = '22023';
END
$$;

COMMENT ON FUNCTION claimq.settle_check_interval(interval,text,boolean,interval,text) IS
'private (portable edition): raise 22023 unless now < now + span <= now + max (now <= now + span when zero_ok), as the C edition judges lease, retry_in and delay';

-- @include portable/settle-outcomes.sql
