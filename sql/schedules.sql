/*
 * sql/schedules.sql: schedules and their cron expressions, one body for
 * every edition (sql/claimq.sql and the update to 0.8 include it; see
 * sql/edition).  PL/pgSQL, but for job_id_base, a thin C function (with
 * its portable body in sql/portable): the parser and the next occurrence
 * run once per schedule and occurrence, on a path that fires at most once
 * a second (docs/performance.md, "Schedules in PL/pgSQL").
 *
 * An expression is five fields (minute, hour, day of month, month, day of
 * week) with "*", lists, ranges and steps, month and day names wherever a
 * number may stand; or @yearly, @monthly, @weekly, @daily, @hourly; or
 * "@every <interval>".  Occurrences are wall-clock times in the
 * schedule's time zone, turned into instants through the TimeZone setting
 * of the call (PostgreSQL's own time-zone code):
 *
 *	- a local time that does not exist (it falls in the gap of a change to
 *	  daylight saving time) fires at the first existing minute after the
 *	  gap, the instant of the change, merged with whatever fires then;
 *	- a local time that exists twice (the change back) fires at its first
 *	  instance, or at both when the hour field starts with "*".
 *
 * A schedule's row keeps the next occurrence that has not been enqueued
 * (next_run_at).  fire_schedules locks the rows of due schedules (FOR
 * UPDATE SKIP LOCKED), enqueues their occurrences and moves next_run_at
 * on, in the caller's transaction: the jobs and the schedule's advance
 * commit together, so each occurrence is enqueued once whoever fires it,
 * however many fire at once, and after a crash or a failover that lost
 * the commit it is fired again.  Its jobs are reported to the ledger
 * (ledger_begin, ledger_note, ledger_end), as the C paths report theirs.
 */

/*
 * An interval's months, days and microseconds, as PostgreSQL keeps
 * them; +-infinity (PostgreSQL 17 and later) has every part at its
 * limit.
 */
CREATE FUNCTION claimq.interval_parts(span interval, OUT months bigint,
									  OUT days bigint, OUT micros bigint)
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF NOT pg_catalog.isfinite(span) THEN
		IF span OPERATOR(pg_catalog.>) pg_catalog.make_interval() THEN
			months := 2147483647;
			days := 2147483647;
			micros := 9223372036854775807;
		ELSE
			months := -2147483648;
			days := -2147483648;
			micros := -9223372036854775808;
		END IF;
	ELSE
		months := (pg_catalog.date_part('year', span)::bigint OPERATOR(pg_catalog.*) 12)
			OPERATOR(pg_catalog.+) pg_catalog.date_part('month', span)::bigint;
		days := pg_catalog.date_part('day', span)::bigint;
		micros := ((pg_catalog.date_part('hour', span)::bigint OPERATOR(pg_catalog.*) 3600000000)
				   OPERATOR(pg_catalog.+) (pg_catalog.date_part('minute', span)::bigint OPERATOR(pg_catalog.*) 60000000))
			OPERATOR(pg_catalog.+) pg_catalog.date_part('microseconds', span)::bigint;
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.interval_parts(interval) IS
'private: an interval''s months, days and microseconds, for the cron code';

/*
 * A cron expression parsed, or refused with an error that names the
 * field (22023): every is the interval of "@every <interval>" (the rest
 * NULL); otherwise minutes to wdays are bit sets (bit n: n matches; day of
 * week 0-6, Sunday 0, 7 folded into it) and the stars say whether the
 * hour, day of month and day of week fields start with "*".  With
 * check_every, an @every interval must have parts of one sign and be 1
 * second to 100 years from this moment, in the session's time zone.
 */
CREATE FUNCTION claimq.cron_parse(cron text, check_every boolean,
								  OUT every interval, OUT minutes bigint,
								  OUT hours bigint, OUT mdays bigint,
								  OUT months bigint, OUT wdays bigint,
								  OUT hour_star boolean, OUT mday_star boolean,
								  OUT wday_star boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	names constant text[] := ARRAY['minute', 'hour', 'day of month', 'month', 'day of week'];
	lows constant integer[] := ARRAY[0, 0, 1, 1, 0];
	highs constant integer[] := ARRAY[59, 23, 31, 12, 7];
	month_names constant text[] := ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun',
										 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
	day_names constant text[] := ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
	upper_ascii constant text := 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
	lower_ascii constant text := 'abcdefghijklmnopqrstuvwxyz';
	hint constant text := 'A cron expression is five fields (minute, hour, day of month, month, day of week), or @yearly, @monthly, @weekly, @daily, @hourly, or @every followed by an interval.';
	fields text;
	parts text[];
	nparts integer;
	span interval;
	span_month bigint;
	span_day bigint;
	span_time bigint;
	now_ts timestamptz;
	bad text;
	detail text;
	f integer;
	fmin integer;
	fmax integer;
	field text;
	star boolean;
	bits bigint;
	p integer;
	c text;
	lo integer;
	hi integer;
	step integer;
	v integer;
	which integer;
	i integer;
BEGIN
	fields := pg_catalog.ltrim(cron, E' \t');
	IF pg_catalog.substr(fields, 1, 1) OPERATOR(pg_catalog.=) '@' THEN
		IF pg_catalog.translate(pg_catalog.substr(fields, 1, 6), upper_ascii, lower_ascii) OPERATOR(pg_catalog.=) '@every'
		   AND pg_catalog.substr(fields, 7, 1) OPERATOR(pg_catalog.=) ANY (ARRAY[' ', E'\t']) THEN
			BEGIN
				span := pg_catalog.substr(fields, 8)::interval;
			EXCEPTION WHEN OTHERS THEN
				span := NULL;
			END;
			IF span IS NULL THEN
				bad := '@every';
				detail := '@every takes an interval, such as "90 seconds".';
			ELSE
				SELECT x.months, x.days, x.micros INTO span_month, span_day, span_time
				  FROM claimq.interval_parts(span) x;
			END IF;
			IF span IS NOT NULL AND check_every THEN
				now_ts := pg_catalog.clock_timestamp();
				IF (span_month OPERATOR(pg_catalog.>) 0 OR span_day OPERATOR(pg_catalog.>) 0 OR span_time OPERATOR(pg_catalog.>) 0)
				   AND (span_month OPERATOR(pg_catalog.<) 0 OR span_day OPERATOR(pg_catalog.<) 0 OR span_time OPERATOR(pg_catalog.<) 0) THEN
					bad := '@every';
					detail := 'The interval''s months, days and time must not have mixed signs, as in "1 mon -29 days": such a step is not the same, or not forward, at every point of the calendar.';
				ELSIF span_month OPERATOR(pg_catalog.>) 1200 OR span_month OPERATOR(pg_catalog.<) -1200
				   OR span_day OPERATOR(pg_catalog.>) 36600 OR span_day OPERATOR(pg_catalog.<) -36600 THEN
					bad := '@every';
				ELSIF (now_ts OPERATOR(pg_catalog.+) span) OPERATOR(pg_catalog.<) (now_ts OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => 1)) THEN
					bad := '@every';
				ELSIF (now_ts OPERATOR(pg_catalog.+) span) OPERATOR(pg_catalog.>) (now_ts OPERATOR(pg_catalog.+) pg_catalog.make_interval(months => 1200)) THEN
					bad := '@every';
				END IF;
				IF bad IS NOT NULL AND detail IS NULL THEN
					detail := 'The interval must be at least 1 second and at most 100 years.';
				END IF;
			END IF;
			IF bad IS NOT NULL THEN
				RAISE EXCEPTION 'invalid cron expression "%": bad % field', cron, bad
					USING ERRCODE = '22023', DETAIL = detail, HINT = hint;
			END IF;
			every := span;
			RETURN;
		END IF;
		fields := CASE pg_catalog.translate(fields, upper_ascii, lower_ascii)
			WHEN '@yearly' THEN '0 0 1 1 *'
			WHEN '@annually' THEN '0 0 1 1 *'
			WHEN '@monthly' THEN '0 0 1 * *'
			WHEN '@weekly' THEN '0 0 * * 0'
			WHEN '@daily' THEN '0 0 * * *'
			WHEN '@midnight' THEN '0 0 * * *'
			WHEN '@hourly' THEN '0 * * * *'
			ELSE fields END;
		IF pg_catalog.substr(fields, 1, 1) OPERATOR(pg_catalog.=) '@' THEN
			RAISE EXCEPTION 'invalid cron expression "%": bad macro field', cron
				USING ERRCODE = '22023',
					  DETAIL = 'The macros are @yearly, @monthly, @weekly, @daily, @hourly and @every <interval>.',
					  HINT = hint;
		END IF;
	END IF;

	/* The fields, as strtok(" \t") finds them. */
	fields := pg_catalog.btrim(fields, E' \t');
	IF fields OPERATOR(pg_catalog.=) '' THEN
		nparts := 0;
	ELSE
		parts := pg_catalog.regexp_split_to_array(fields, E'[ \t]+');
		nparts := pg_catalog.cardinality(parts);
	END IF;
	IF nparts OPERATOR(pg_catalog.>) 5 THEN
		RAISE EXCEPTION 'invalid cron expression "%": bad day of week field', cron
			USING ERRCODE = '22023', DETAIL = 'There are more than five fields.', HINT = hint;
	END IF;
	IF nparts OPERATOR(pg_catalog.<) 5 THEN
		RAISE EXCEPTION 'invalid cron expression "%": bad % field', cron, names[nparts OPERATOR(pg_catalog.+) 1]
			USING ERRCODE = '22023', DETAIL = 'There are fewer than five fields.', HINT = hint;
	END IF;

	FOR f IN 1..5 LOOP
		field := parts[f];
		fmin := lows[f];
		fmax := highs[f];
		bits := 0;
		p := 1;
		star := pg_catalog.substr(field, 1, 1) OPERATOR(pg_catalog.=) '*';
		<<items>>
		LOOP
			step := 1;
			c := pg_catalog.substr(field, p, 1);
			IF c OPERATOR(pg_catalog.=) '*' THEN
				lo := fmin;
				hi := fmax;
				p := p OPERATOR(pg_catalog.+) 1;
			ELSE
				/*
				 * A value: a number (its digits read while it is below
				 * 1000), or a month's or a day's name; then maybe "-" and
				 * another.  which 1 is the range's start, 2 its end.
				 */
				FOR which IN 1..2 LOOP
					c := pg_catalog.substr(field, p, 1);
					v := -1;
					IF c OPERATOR(pg_catalog.<>) '' AND pg_catalog.strpos('0123456789', c) OPERATOR(pg_catalog.>) 0 THEN
						v := 0;
						WHILE c OPERATOR(pg_catalog.<>) '' AND pg_catalog.strpos('0123456789', c) OPERATOR(pg_catalog.>) 0 AND v OPERATOR(pg_catalog.<) 1000 LOOP
							v := (v OPERATOR(pg_catalog.*) 10) OPERATOR(pg_catalog.+) (pg_catalog.strpos('0123456789', c) OPERATOR(pg_catalog.-) 1);
							p := p OPERATOR(pg_catalog.+) 1;
							c := pg_catalog.substr(field, p, 1);
						END LOOP;
					ELSIF f OPERATOR(pg_catalog.=) 4 OR f OPERATOR(pg_catalog.=) 5 THEN
						i := pg_catalog.array_position(CASE WHEN f OPERATOR(pg_catalog.=) 4 THEN month_names ELSE day_names END,
													   pg_catalog.translate(pg_catalog.substr(field, p, 3), upper_ascii, lower_ascii));
						c := pg_catalog.substr(field, p OPERATOR(pg_catalog.+) 3, 1);
						IF i IS NOT NULL AND (c OPERATOR(pg_catalog.=) '' OR pg_catalog.strpos(upper_ascii OPERATOR(pg_catalog.||) lower_ascii, c) OPERATOR(pg_catalog.=) 0) THEN
							v := (fmin OPERATOR(pg_catalog.+) i) OPERATOR(pg_catalog.-) 1;
							p := p OPERATOR(pg_catalog.+) 3;
						END IF;
					END IF;
					IF which OPERATOR(pg_catalog.=) 1 THEN
						IF v OPERATOR(pg_catalog.<) 0 THEN
							detail := 'Expected a number, a name, or "*".';
							EXIT items;
						END IF;
						lo := v;
						hi := v;
						EXIT WHEN pg_catalog.substr(field, p, 1) OPERATOR(pg_catalog.<>) '-';
						p := p OPERATOR(pg_catalog.+) 1;
					ELSE
						IF v OPERATOR(pg_catalog.<) 0 THEN
							detail := 'A range needs an end.';
							EXIT items;
						END IF;
						hi := v;
						/* sat-sun: Sunday as 7 */
						IF f OPERATOR(pg_catalog.=) 5 AND hi OPERATOR(pg_catalog.=) 0 AND lo OPERATOR(pg_catalog.>) 0 THEN
							hi := 7;
						END IF;
					END IF;
				END LOOP;
				IF lo OPERATOR(pg_catalog.<) fmin OR hi OPERATOR(pg_catalog.>) fmax OR lo OPERATOR(pg_catalog.>) fmax OR hi OPERATOR(pg_catalog.<) fmin THEN
					detail := pg_catalog.format('Values must be between %s and %s.', fmin, fmax);
					EXIT items;
				END IF;
				IF lo OPERATOR(pg_catalog.>) hi THEN
					detail := 'A range must not run backwards.';
					EXIT items;
				END IF;
			END IF;
			IF pg_catalog.substr(field, p, 1) OPERATOR(pg_catalog.=) '/' THEN
				p := p OPERATOR(pg_catalog.+) 1;
				c := pg_catalog.substr(field, p, 1);
				step := -1;
				IF c OPERATOR(pg_catalog.<>) '' AND pg_catalog.strpos('0123456789', c) OPERATOR(pg_catalog.>) 0 THEN
					step := 0;
					WHILE c OPERATOR(pg_catalog.<>) '' AND pg_catalog.strpos('0123456789', c) OPERATOR(pg_catalog.>) 0 AND step OPERATOR(pg_catalog.<) 1000 LOOP
						step := (step OPERATOR(pg_catalog.*) 10) OPERATOR(pg_catalog.+) (pg_catalog.strpos('0123456789', c) OPERATOR(pg_catalog.-) 1);
						p := p OPERATOR(pg_catalog.+) 1;
						c := pg_catalog.substr(field, p, 1);
					END LOOP;
				END IF;
				IF step OPERATOR(pg_catalog.<) 1 OR step OPERATOR(pg_catalog.>) fmax THEN
					detail := pg_catalog.format('A step must be between 1 and %s.', fmax);
					EXIT items;
				END IF;
				/* "a/n": from a to the end of the field */
				IF hi OPERATOR(pg_catalog.=) lo AND NOT star THEN
					hi := fmax;
				END IF;
			END IF;
			IF step OPERATOR(pg_catalog.=) 1 THEN
				/* bits lo to hi at once */
				bits := bits OPERATOR(pg_catalog.|) (((1::bigint OPERATOR(pg_catalog.<<) (hi OPERATOR(pg_catalog.+) 1)) OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.#) ((1::bigint OPERATOR(pg_catalog.<<) lo) OPERATOR(pg_catalog.-) 1));
			ELSE
				v := lo;
				WHILE v OPERATOR(pg_catalog.<=) hi LOOP
					bits := bits OPERATOR(pg_catalog.|) (1::bigint OPERATOR(pg_catalog.<<) v);
					v := v OPERATOR(pg_catalog.+) step;
				END LOOP;
			END IF;
			c := pg_catalog.substr(field, p, 1);
			EXIT items WHEN c OPERATOR(pg_catalog.=) '';
			IF c OPERATOR(pg_catalog.<>) ',' THEN
				detail := pg_catalog.format('Unexpected "%s".', c);
				EXIT items;
			END IF;
			p := p OPERATOR(pg_catalog.+) 1;
		END LOOP;
		IF detail IS NOT NULL THEN
			RAISE EXCEPTION 'invalid cron expression "%": bad % field', cron, names[f]
				USING ERRCODE = '22023', DETAIL = detail, HINT = hint;
		END IF;
		CASE f
			WHEN 1 THEN minutes := bits;
			WHEN 2 THEN hours := bits;
						hour_star := star;
			WHEN 3 THEN mdays := bits;
						mday_star := star;
			WHEN 4 THEN months := bits;
			ELSE wdays := (bits OPERATOR(pg_catalog.|) (bits OPERATOR(pg_catalog.>>) 7)) OPERATOR(pg_catalog.&) 127;
				 wday_star := star;
		END CASE;
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.cron_parse(text,boolean) IS
'private: a cron expression parsed (its @every interval, or its fields as bit sets and which start with "*"), with its errors';

/*
 * The changes of offset of the session's TimeZone over the instants
 * [w_lo, w_hi] (seconds since 1970-01-01 00:00 UTC), for cron_walk: the
 * offset at w_lo, and each instant at which the offset changes, with the
 * offset from then on.  The offset is probed every 48 hours (no zone
 * changes it twice in a week), and an interval where it differs is halved
 * down to the second.
 */
CREATE FUNCTION claimq.cron_offsets(w_lo bigint, w_hi bigint,
									OUT first_offset integer,
									OUT changes bigint[], OUT offsets integer[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p bigint := w_lo;
	q bigint;
	p_offset integer;
	q_offset integer;
	a bigint;
	b bigint;
	mid bigint;
BEGIN
	changes := ARRAY[]::bigint[];
	offsets := ARRAY[]::integer[];
	p_offset := pg_catalog.date_part('timezone', pg_catalog.to_timestamp(LEAST(GREATEST(p, -210866803200), 9224318015999)::double precision))::integer;
	first_offset := p_offset;
	LOOP
		q := LEAST(p OPERATOR(pg_catalog.+) 172800, w_hi);
		q_offset := pg_catalog.date_part('timezone', pg_catalog.to_timestamp(LEAST(GREATEST(q, -210866803200), 9224318015999)::double precision))::integer;
		IF q_offset OPERATOR(pg_catalog.<>) p_offset THEN
			a := p;
			b := q;
			WHILE (b OPERATOR(pg_catalog.-) a) OPERATOR(pg_catalog.>) 1 LOOP
				mid := a OPERATOR(pg_catalog.+) ((b OPERATOR(pg_catalog.-) a) OPERATOR(pg_catalog./) 2);
				IF pg_catalog.date_part('timezone', pg_catalog.to_timestamp(LEAST(GREATEST(mid, -210866803200), 9224318015999)::double precision))::integer OPERATOR(pg_catalog.=) p_offset THEN
					a := mid;
				ELSE
					b := mid;
				END IF;
			END LOOP;
			changes := changes OPERATOR(pg_catalog.||) b;
			offsets := offsets OPERATOR(pg_catalog.||) q_offset;
		END IF;
		EXIT WHEN q OPERATOR(pg_catalog.>=) w_hi;
		p := q;
		p_offset := q_offset;
	END LOOP;
END
$$;

COMMENT ON FUNCTION claimq.cron_offsets(bigint,bigint) IS
'private: the offset of the session''s time zone at w_lo and its changes up to w_hi, for cron_walk';

/*
 * The first occurrence, strictly after after, of an expression parsed by
 * claimq.cron_parse, in time_zone (anchor: when an @every schedule was
 * set); NULL if there is none within 9 years.  With the session's TimeZone set to time_zone for the
 * call (reverted when it returns): local wall-clock times are "naive"
 * seconds since 1970-01-01 00:00 of that reading; the matching local
 * minutes are walked field by field from a little before after's local
 * time; a local time in the gap of a change to daylight saving time fires
 * at the instant the gap ends, one that exists twice at its first instance
 * (both unless the hour field starts with "*"); the earliest instant after
 * after wins.  The zone's changes of offset come from cron_offsets.
 */
CREATE FUNCTION claimq.cron_walk(every interval, minutes bigint, hours bigint,
								 mdays bigint, months bigint, wdays bigint,
								 hour_star boolean, mday_star boolean,
								 wday_star boolean, time_zone text,
								 after timestamptz, anchor timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
AS $$
DECLARE
	days_in constant integer[] := ARRAY[31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
	known boolean := true;
	zone text;
	zone_name text;
	/* @every */
	span_month bigint;
	span_day bigint;
	span_time bigint;
	len double precision;
	diff numeric;
	k bigint := 1;
	kk bigint;
	steps integer := 0;
	t timestamptz;
	result timestamptz;
	/* the walk */
	x bigint;
	x_offset integer;
	naive bigint;
	lim bigint;
	best bigint;
	best_offset integer := 0;
	y integer;
	mo integer;
	dd integer;
	hh integer;
	mi integer;
	v bigint;
	new_month boolean := true;
	month_days bigint;
	month_len integer;
	dow1 integer;
	day_ok boolean;
	start_day date;
	local_t bigint;
	/* the zone's changes of offset over instants [w_lo, w_hi] */
	w_lo bigint;
	w_hi bigint;
	w_offset integer;
	changes bigint[];
	offsets integer[];
	nchanges integer;
	/* the instants of one local time */
	lo bigint;
	hi bigint;
	i integer;
	seg_start bigint;
	seg_end bigint;
	seg_offset integer;
	max_offset integer;
	n integer;
	u bigint;
	u1 bigint;
	u2 bigint;
	gap_end bigint;
BEGIN
	/*
	 * The zone, as pg_tzset takes it, through the TimeZone setting.  The
	 * setting reads a number of hours (as strtod reads it) and "INTERVAL
	 * ..." itself, where pg_tzset takes a POSIX zone: a name (here, what
	 * comes before the first digit, ",", "+" or "-") and an offset.  Such a
	 * value is passed with its name quoted, "<name>offset...", the same
	 * zone to pg_tzset and no number to the setting.
	 */
	zone := time_zone;
	IF zone OPERATOR(pg_catalog.~*) '^[[:space:]]*[-+]?(([0-9]+[.]?[0-9]*|[.][0-9]+)(e[-+]?[0-9]+)?|inf|infinity|nan|0x([0-9a-f]+[.]?[0-9a-f]*|[.][0-9a-f]+)(p[-+]?[0-9]+)?)$'
	   OR pg_catalog.translate(pg_catalog.substr(zone, 1, 8), 'INTERVAL', 'interval') OPERATOR(pg_catalog.=) 'interval' THEN
		zone_name := pg_catalog."substring"(zone, '^[^0-9,+-]*');
		IF pg_catalog.strpos(zone_name, '>') OPERATOR(pg_catalog.>) 0 THEN
			known := false;
		ELSE
			zone := (('<' OPERATOR(pg_catalog.||) zone_name) OPERATOR(pg_catalog.||) '>')
				OPERATOR(pg_catalog.||) pg_catalog.substr(zone, pg_catalog.length(zone_name) OPERATOR(pg_catalog.+) 1);
		END IF;
	END IF;
	IF known THEN
		BEGIN
			PERFORM pg_catalog.set_config('TimeZone', zone, true);
		EXCEPTION WHEN invalid_parameter_value THEN
			known := false;
		END;
	END IF;
	IF NOT known THEN
		RAISE EXCEPTION 'time zone "%" not recognized', time_zone
			USING ERRCODE = '22023',
				  HINT = 'Use a name from pg_timezone_names, such as UTC or Europe/Berlin.';
	END IF;

	IF every IS NOT NULL THEN
		SELECT x.months, x.days, x.micros INTO span_month, span_day, span_time
		  FROM claimq.interval_parts(every) x;

		/* Estimate k from the interval's length, then step to the first. */
		len := (span_time::double precision
				OPERATOR(pg_catalog.+) (span_day::double precision OPERATOR(pg_catalog.*) 86400000000::double precision))
			OPERATOR(pg_catalog.+) ((span_month::double precision OPERATOR(pg_catalog.*) 30::double precision) OPERATOR(pg_catalog.*) 86400000000::double precision);
		IF after OPERATOR(pg_catalog.>=) anchor AND len OPERATOR(pg_catalog.>) 0 THEN
			/* after - anchor in microseconds, as int64 arithmetic wraps */
			diff := (CASE WHEN pg_catalog.isfinite(after)
						 THEN (EXTRACT(epoch FROM after) OPERATOR(pg_catalog.-) 946684800) OPERATOR(pg_catalog.*) 1000000
						 WHEN after OPERATOR(pg_catalog.>) pg_catalog.now() THEN 9223372036854775807
						 ELSE -9223372036854775808 END)
				OPERATOR(pg_catalog.-) (CASE WHEN pg_catalog.isfinite(anchor)
						  THEN (EXTRACT(epoch FROM anchor) OPERATOR(pg_catalog.-) 946684800) OPERATOR(pg_catalog.*) 1000000
						  WHEN anchor OPERATOR(pg_catalog.>) pg_catalog.now() THEN 9223372036854775807
						  ELSE -9223372036854775808 END);
			diff := pg_catalog.round(diff);
			IF diff OPERATOR(pg_catalog.>) 9223372036854775807 THEN
				diff := diff OPERATOR(pg_catalog.-) 18446744073709551616;
			ELSIF diff OPERATOR(pg_catalog.<) -9223372036854775808 THEN
				diff := diff OPERATOR(pg_catalog.+) 18446744073709551616;
			END IF;
			k := GREATEST(pg_catalog.trunc(diff::bigint::double precision OPERATOR(pg_catalog./) len)::bigint OPERATOR(pg_catalog.-) 2, 1);
		END IF;

		/*
		 * Up from the estimate to the first occurrence after after (an
		 * interval that does not move forward at this point of the calendar
		 * never gets there: none), then down while the one before is after
		 * it too.  kk is the k whose occurrence t is.
		 */
		kk := k;
		LOOP
			/* anchor + kk x interval, or "infinity" past an interval's range */
			IF (span_time::numeric OPERATOR(pg_catalog.*) kk) OPERATOR(pg_catalog.>) 9223372036854775807
			   OR (span_time::numeric OPERATOR(pg_catalog.*) kk) OPERATOR(pg_catalog.<) -9223372036854775808
			   OR kk OPERATOR(pg_catalog.>) 2147483647 OR (kk OPERATOR(pg_catalog.*) span_day) OPERATOR(pg_catalog.>) 2147483647
			   OR (kk OPERATOR(pg_catalog.*) span_month) OPERATOR(pg_catalog.>) 2147483647 THEN
				t := 'infinity';
			ELSE
				t := (anchor OPERATOR(pg_catalog.+) pg_catalog.make_interval(
						months => (((((kk OPERATOR(pg_catalog.*) span_month) OPERATOR(pg_catalog.%) 4294967296) OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296) OPERATOR(pg_catalog.-) 2147483648)::integer,
						days => (((((kk OPERATOR(pg_catalog.*) span_day) OPERATOR(pg_catalog.%) 4294967296) OPERATOR(pg_catalog.+) 6442450944) OPERATOR(pg_catalog.%) 4294967296) OPERATOR(pg_catalog.-) 2147483648)::integer))
					OPERATOR(pg_catalog.+) (((span_time OPERATOR(pg_catalog.*) kk)::text OPERATOR(pg_catalog.||) ' microseconds')::interval);
			END IF;
			IF result IS NULL THEN
				IF t OPERATOR(pg_catalog.>) after THEN
					result := t;
					k := kk;
				ELSE
					IF steps OPERATOR(pg_catalog.>) 1000 THEN
						RETURN NULL;
					END IF;
					kk := kk OPERATOR(pg_catalog.+) 1;
					steps := steps OPERATOR(pg_catalog.+) 1;
					CONTINUE;
				END IF;
			ELSIF t OPERATOR(pg_catalog.>) after THEN
				result := t;
				k := kk;
			ELSE
				EXIT;
			END IF;
			EXIT WHEN k OPERATOR(pg_catalog.<=) 1;
			kk := k OPERATOR(pg_catalog.-) 1;
			IF t OPERATOR(pg_catalog.=) 'infinity'::timestamptz THEN
				/*
				 * Every k from here down to the last one within an
				 * interval's range gives "infinity" too: that one next.
				 */
				kk := LEAST(kk, 2147483647);
				IF span_day OPERATOR(pg_catalog.>) 0 THEN
					kk := LEAST(kk, 2147483647 OPERATOR(pg_catalog./) span_day);
				END IF;
				IF span_month OPERATOR(pg_catalog.>) 0 THEN
					kk := LEAST(kk, 2147483647 OPERATOR(pg_catalog./) span_month);
				END IF;
				IF span_time OPERATOR(pg_catalog.>) 0 THEN
					kk := LEAST(kk, pg_catalog.trunc(9223372036854775807::numeric OPERATOR(pg_catalog./) span_time::numeric)::bigint);
				ELSIF span_time OPERATOR(pg_catalog.<) 0 THEN
					kk := LEAST(kk, pg_catalog.trunc(9223372036854775808::numeric OPERATOR(pg_catalog./) (OPERATOR(pg_catalog.-) span_time::numeric))::bigint);
				END IF;
				IF kk OPERATOR(pg_catalog.<) (k OPERATOR(pg_catalog.-) 1) THEN
					k := kk OPERATOR(pg_catalog.+) 1;
				END IF;
			END IF;
		END LOOP;
		RETURN NULLIF(result, 'infinity'::timestamptz);
	END IF;

	/* after as whole seconds since 1970, rounded down */
	IF after OPERATOR(pg_catalog.=) '-infinity'::timestamptz THEN
		RETURN NULL;			-- the walk starts in 1970, past its 9 years
	ELSIF after OPERATOR(pg_catalog.=) 'infinity'::timestamptz THEN
		RAISE EXCEPTION 'timestamp out of range'
			USING ERRCODE = '22008';
	END IF;
	x := pg_catalog.floor(EXTRACT(epoch FROM after))::bigint;
	x_offset := pg_catalog.date_part('timezone', pg_catalog.to_timestamp(LEAST(GREATEST(x, -210866803200), 9224318015999)::double precision))::integer;
	/* Start before x's local time: a second instance or a gap's end. */
	naive := (x OPERATOR(pg_catalog.+) x_offset) OPERATOR(pg_catalog.-) 10800;
	lim := naive OPERATOR(pg_catalog.+) 284508800;		-- 9 x 366 days

	/*
	 * The zone's changes of offset around x.  Where it keeps one offset from
	 * 80 hours before x to 80 after, every local time before x's has its
	 * one instant at or before x: the walk starts at x's local time.
	 */
	w_lo := x OPERATOR(pg_catalog.-) 288000;
	w_hi := x OPERATOR(pg_catalog.+) 288000;
	SELECT o.first_offset, o.changes, o.offsets INTO w_offset, changes, offsets
	  FROM claimq.cron_offsets(w_lo, w_hi) o;
	nchanges := pg_catalog.cardinality(changes);
	IF nchanges OPERATOR(pg_catalog.=) 0 THEN
		naive := GREATEST(naive, (x OPERATOR(pg_catalog.+) x_offset) OPERATOR(pg_catalog.+) 1);
	END IF;

	/* The local date and time where the walk starts: the next whole minute. */
	local_t := GREATEST(naive, 0);
	local_t := ((local_t OPERATOR(pg_catalog.+) 59) OPERATOR(pg_catalog./) 60) OPERATOR(pg_catalog.*) 60;
	start_day := '1970-01-01'::date OPERATOR(pg_catalog.+) (local_t OPERATOR(pg_catalog./) 86400)::integer;
	y := pg_catalog.date_part('year', start_day)::integer;
	mo := pg_catalog.date_part('month', start_day)::integer;
	dd := pg_catalog.date_part('day', start_day)::integer;
	hh := ((local_t OPERATOR(pg_catalog.%) 86400) OPERATOR(pg_catalog./) 3600)::integer;
	mi := ((local_t OPERATOR(pg_catalog.%) 3600) OPERATOR(pg_catalog./) 60)::integer;

	LOOP
		/* The next matching local minute, field by field. */
		IF new_month THEN
			month_days := pg_catalog.make_date(y, mo, 1) OPERATOR(pg_catalog.-) '1970-01-01'::date;
			IF (month_days OPERATOR(pg_catalog.*) 86400) OPERATOR(pg_catalog.>) lim THEN
				EXIT;
			END IF;
			month_len := days_in[mo];
			IF mo OPERATOR(pg_catalog.=) 2 AND ((y OPERATOR(pg_catalog.%) 4) OPERATOR(pg_catalog.=) 0 AND ((y OPERATOR(pg_catalog.%) 100) OPERATOR(pg_catalog.<>) 0 OR (y OPERATOR(pg_catalog.%) 400) OPERATOR(pg_catalog.=) 0)) THEN
				month_len := 29;
			END IF;
			dow1 := ((month_days OPERATOR(pg_catalog.+) 4) OPERATOR(pg_catalog.%) 7)::integer;
			new_month := false;
		END IF;
		IF ((months OPERATOR(pg_catalog.>>) mo) OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 0 OR dd OPERATOR(pg_catalog.>) month_len THEN
			/* Not this month, or past its last day: the next month. */
			mo := mo OPERATOR(pg_catalog.+) 1;
			IF mo OPERATOR(pg_catalog.>) 12 THEN
				mo := 1;
				y := y OPERATOR(pg_catalog.+) 1;
			END IF;
			dd := 1;
			hh := 0;
			mi := 0;
			new_month := true;
			CONTINUE;
		END IF;
		/* Both day fields restricted: either matches, as in cron. */
		day_ok := CASE WHEN NOT mday_star AND NOT wday_star
			THEN ((mdays OPERATOR(pg_catalog.>>) dd) OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 1
				OR ((wdays OPERATOR(pg_catalog.>>) (((dow1 OPERATOR(pg_catalog.+) dd) OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.%) 7)) OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 1
			ELSE ((mdays OPERATOR(pg_catalog.>>) dd) OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 1
				AND ((wdays OPERATOR(pg_catalog.>>) (((dow1 OPERATOR(pg_catalog.+) dd) OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.%) 7)) OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 1 END;
		IF NOT day_ok OR hh OPERATOR(pg_catalog.>) 23 THEN
			dd := dd OPERATOR(pg_catalog.+) 1;
			hh := 0;
			mi := 0;
			CONTINUE;
		END IF;
		/* The first listed hour from hh on: the lowest bit of v. */
		v := (hours OPERATOR(pg_catalog.>>) hh) OPERATOR(pg_catalog.<<) hh;
		IF v OPERATOR(pg_catalog.=) 0 THEN
			dd := dd OPERATOR(pg_catalog.+) 1;
			hh := 0;
			mi := 0;
			CONTINUE;
		END IF;
		v := pg_catalog.round(pg_catalog.ln((v OPERATOR(pg_catalog.&) (OPERATOR(pg_catalog.-) v))::double precision) OPERATOR(pg_catalog./) 0.6931471805599453::double precision)::bigint;
		IF v OPERATOR(pg_catalog.<>) hh THEN
			hh := v::integer;
			mi := 0;
		END IF;
		v := CASE WHEN mi OPERATOR(pg_catalog.>) 59 THEN 0 ELSE (minutes OPERATOR(pg_catalog.>>) mi) OPERATOR(pg_catalog.<<) mi END;
		IF v OPERATOR(pg_catalog.=) 0 THEN
			hh := hh OPERATOR(pg_catalog.+) 1;
			mi := 0;
			CONTINUE;
		END IF;
		mi := pg_catalog.round(pg_catalog.ln((v OPERATOR(pg_catalog.&) (OPERATOR(pg_catalog.-) v))::double precision) OPERATOR(pg_catalog./) 0.6931471805599453::double precision)::integer;
		local_t := (((month_days OPERATOR(pg_catalog.+) (dd OPERATOR(pg_catalog.-) 1)) OPERATOR(pg_catalog.*) 86400) OPERATOR(pg_catalog.+) (hh OPERATOR(pg_catalog.*) 3600)) OPERATOR(pg_catalog.+) (mi OPERATOR(pg_catalog.*) 60);
		EXIT WHEN local_t OPERATOR(pg_catalog.>) lim;

		/* No later local time can give an instant before best. */
		EXIT WHEN best IS NOT NULL AND (local_t OPERATOR(pg_catalog.-) GREATEST(93600, best_offset)) OPERATOR(pg_catalog.>) best;

		/*
		 * The instants at which local time local_t occurs: one usually, two
		 * when the zone turns back over it, none in a gap (then gap_end, the
		 * instant the gap ends); max_offset, the largest offset in effect
		 * from 48 hours before to 48 after.  First the changes of offset
		 * over that span.
		 */
		lo := local_t OPERATOR(pg_catalog.-) 172800;
		hi := local_t OPERATOR(pg_catalog.+) 172800;
		IF lo OPERATOR(pg_catalog.<) w_lo OR hi OPERATOR(pg_catalog.>) w_hi THEN
			w_lo := lo;
			w_hi := hi OPERATOR(pg_catalog.+) 345600;
			SELECT o.first_offset, o.changes, o.offsets INTO w_offset, changes, offsets
			  FROM claimq.cron_offsets(w_lo, w_hi) o;
			nchanges := pg_catalog.cardinality(changes);
		END IF;
		seg_offset := w_offset;
		i := 1;
		WHILE i OPERATOR(pg_catalog.<=) nchanges AND changes[i] OPERATOR(pg_catalog.<=) lo LOOP
			seg_offset := offsets[i];
			i := i OPERATOR(pg_catalog.+) 1;
		END LOOP;
		seg_start := lo;
		max_offset := seg_offset;
		n := 0;
		gap_end := 0;
		LOOP
			seg_end := CASE WHEN i OPERATOR(pg_catalog.<=) nchanges THEN changes[i] END;
			u := local_t OPERATOR(pg_catalog.-) seg_offset;
			IF u OPERATOR(pg_catalog.>=) seg_start AND (seg_end IS NULL OR u OPERATOR(pg_catalog.<) seg_end) AND n OPERATOR(pg_catalog.<) 2 THEN
				n := n OPERATOR(pg_catalog.+) 1;
				IF n OPERATOR(pg_catalog.=) 1 THEN
					u1 := u;
				ELSE
					u2 := u;
				END IF;
			END IF;
			/* A segment whose local start is past local_t ends a gap before it. */
			IF gap_end OPERATOR(pg_catalog.=) 0 AND seg_start OPERATOR(pg_catalog.>) lo AND (seg_start OPERATOR(pg_catalog.+) seg_offset) OPERATOR(pg_catalog.>) local_t THEN
				gap_end := seg_start;
			END IF;
			EXIT WHEN seg_end IS NULL OR seg_end OPERATOR(pg_catalog.>) hi;
			seg_start := seg_end;
			seg_offset := offsets[i];
			max_offset := GREATEST(max_offset, seg_offset);
			i := i OPERATOR(pg_catalog.+) 1;
		END LOOP;

		EXIT WHEN best IS NOT NULL AND (local_t OPERATOR(pg_catalog.-) GREATEST(max_offset, best_offset)) OPERATOR(pg_catalog.>) best;
		IF n OPERATOR(pg_catalog.=) 0 THEN
			n := 1;
			u1 := gap_end;
		ELSIF n OPERATOR(pg_catalog.=) 2 AND NOT hour_star THEN
			n := 1;				-- the first instance only
		END IF;
		IF u1 OPERATOR(pg_catalog.>) x AND (best IS NULL OR u1 OPERATOR(pg_catalog.<) best) THEN
			best := u1;
			best_offset := max_offset;
		END IF;
		IF n OPERATOR(pg_catalog.=) 2 AND u2 OPERATOR(pg_catalog.>) x AND (best IS NULL OR u2 OPERATOR(pg_catalog.<) best) THEN
			best := u2;
			best_offset := max_offset;
		END IF;
		mi := mi OPERATOR(pg_catalog.+) 1;
	END LOOP;
	IF best IS NULL THEN
		RETURN NULL;
	END IF;
	/* best in two halves of whole hours, past an integer's range */
	v := best OPERATOR(pg_catalog./) 3600;
	RETURN (pg_catalog.to_timestamp(0::double precision)
			OPERATOR(pg_catalog.+) pg_catalog.make_interval(hours => (v OPERATOR(pg_catalog./) 2)::integer))
		OPERATOR(pg_catalog.+) pg_catalog.make_interval(hours => (v OPERATOR(pg_catalog.-) (v OPERATOR(pg_catalog./) 2))::integer,
									 secs => (best OPERATOR(pg_catalog.%) 3600)::double precision);
END
$$;

COMMENT ON FUNCTION claimq.cron_walk(interval,bigint,bigint,bigint,bigint,bigint,boolean,boolean,boolean,text,timestamp with time zone,timestamp with time zone) IS
'private: the first occurrence after after of an expression parsed by claimq.cron_parse, in time_zone; NULL if none within 9 years';


/*
 * The schedule-name rule's check for create_schedule, alter_schedule and
 * drop_schedule, with the errors of the queue name's (src/common.c,
 * cq_name_arg): 22004 for NULL, 22023 for a bad name, quoting at most a
 * name's worth.
 */
CREATE FUNCTION claimq.check_schedule_name(schedule text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	shown text;
BEGIN
	IF schedule IS NULL THEN
		RAISE EXCEPTION 'argument "schedule" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF NOT claimq.valid_name(schedule) THEN
		shown := pg_catalog.left(schedule, 64);
		WHILE pg_catalog.octet_length(shown) OPERATOR(pg_catalog.>) 64 LOOP
			shown := pg_catalog.left(shown, -1);
		END LOOP;
		RAISE EXCEPTION 'invalid schedule name "%"', shown
			USING ERRCODE = '22023',
				  DETAIL = 'A schedule name is 1 to 63 characters, each a letter, a digit, "_", "-" or ".".';
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.check_schedule_name(text) IS
'private: raise 22004 or 22023 unless schedule is a valid schedule name';

/*
 * The first occurrence after moment of an expression being set by
 * create_schedule or alter_schedule:
 * parsed with the checks of an @every interval, refused (22023) if it can
 * never fire (with the day of week "*", no listed month has a listed day
 * of the month, February counting 29),
 * and only then judged in time_zone.  NULL if there is none.
 */
CREATE FUNCTION claimq.schedule_first(cron text, time_zone text,
									  moment timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	parsed record;
BEGIN
	parsed := claimq.cron_parse(cron, true);
	IF parsed.every IS NULL AND NOT parsed.mday_star AND parsed.wday_star
	   AND NOT EXISTS (
			SELECT 1
			  FROM pg_catalog.generate_series(1, 12) AS m(m),
				   pg_catalog.generate_series(1, 31) AS d(d)
			 WHERE d.d OPERATOR(pg_catalog.<=) ('{31,29,31,30,31,30,31,31,30,31,30,31}'::integer[])[m.m]
			   AND ((parsed.months OPERATOR(pg_catalog.>>) m.m) OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 1
			   AND ((parsed.mdays OPERATOR(pg_catalog.>>) d.d) OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 1) THEN
		RAISE EXCEPTION 'cron expression "%" never matches', cron
			USING ERRCODE = '22023',
				  DETAIL = 'None of the months it lists has a day of the month it lists (February has 29 days).',
				  HINT = 'List a day of the month that exists in one of the months.';
	END IF;
	RETURN claimq.cron_walk(parsed.every, parsed.minutes, parsed.hours,
							parsed.mdays, parsed.months, parsed.wdays,
							parsed.hour_star, parsed.mday_star, parsed.wday_star,
							time_zone, moment, moment);
END
$$;

COMMENT ON FUNCTION claimq.schedule_first(text,text,timestamp with time zone) IS
'private: the first occurrence after moment of a schedule''s expression being set, checked as create_schedule and alter_schedule check it; NULL if none';

/*
 * The next occurrence of an expression, for tests and for anyone who wants
 * to see one without a schedule.
 */
CREATE FUNCTION claimq.cron_next(cron text, time_zone text, after timestamptz,
								 anchor timestamptz DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	parsed record;
BEGIN
	IF cron_next.cron IS NULL THEN
		RAISE EXCEPTION 'argument "cron" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF cron_next.time_zone IS NULL THEN
		RAISE EXCEPTION 'argument "time_zone" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF cron_next.after IS NULL THEN
		RAISE EXCEPTION 'argument "after" must not be null'
			USING ERRCODE = '22004';
	END IF;
	parsed := claimq.cron_parse(cron_next.cron, true);
	RETURN claimq.cron_walk(parsed.every, parsed.minutes, parsed.hours,
							parsed.mdays, parsed.months, parsed.wdays,
							parsed.hour_star, parsed.mday_star, parsed.wday_star,
							cron_next.time_zone, cron_next.after,
							COALESCE(cron_next.anchor, cron_next.after));
END
$$;

COMMENT ON FUNCTION claimq.cron_next(text,text,timestamp with time zone,timestamp with time zone) IS
'private: the first occurrence of cron in time_zone after after (for @every, counted from anchor); NULL if none';

CREATE FUNCTION claimq.create_schedule(
	schedule text,
	queue text,
	cron text,
	payload jsonb DEFAULT '{}',
	time_zone text DEFAULT 'UTC',
	priority integer DEFAULT 0,
	missed text DEFAULT 'once',
	headers jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	now_ts timestamptz := pg_catalog.clock_timestamp();
	next_at timestamptz;
	qid integer;
	job_headers jsonb;
BEGIN
	-- @include check-primary.sql function=create_schedule
	PERFORM claimq.check_schedule_name(create_schedule.schedule);
	PERFORM claimq.check_queue_name(create_schedule.queue);
	IF create_schedule.cron IS NULL THEN
		RAISE EXCEPTION 'argument "cron" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF create_schedule.payload IS NULL THEN
		RAISE EXCEPTION 'argument "payload" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF create_schedule.time_zone IS NULL THEN
		RAISE EXCEPTION 'argument "time_zone" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF create_schedule.priority IS NULL THEN
		RAISE EXCEPTION 'argument "priority" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF create_schedule.missed IS NULL THEN
		RAISE EXCEPTION 'argument "missed" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF create_schedule.missed OPERATOR(pg_catalog.<>) ALL ('{skip,once,all}'::text[]) THEN
		RAISE EXCEPTION 'missed must be "skip", "once" or "all"'
			USING ERRCODE = '22023';
	END IF;
	next_at := claimq.schedule_first(create_schedule.cron,
									 create_schedule.time_zone, now_ts);
	/* Each job's headers; an empty object is none (alter_schedule). */
	job_headers := NULLIF(claimq.checked_headers(create_schedule.headers, 'headers'),
						  '{}'::jsonb);

-- @c
	/* On a distributed install a schedule lives with its queue. */
	PERFORM claimq.route_to(create_schedule.queue);
-- @end
	SELECT t.queue_id INTO qid FROM claimq.queue t
	 WHERE t.name OPERATOR(pg_catalog.=) create_schedule.queue;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" does not exist', create_schedule.queue
			USING ERRCODE = '42704';
	END IF;
	INSERT INTO claimq.schedule AS s
		(name, queue_id, cron, payload, time_zone, priority, missed,
		 anchor, next_run_at, headers)
	VALUES (create_schedule.schedule, qid, create_schedule.cron,
			create_schedule.payload, create_schedule.time_zone,
			create_schedule.priority, create_schedule.missed, now_ts, next_at,
			job_headers)
	ON CONFLICT ON CONSTRAINT schedule_pkey DO NOTHING;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'schedule "%" already exists', create_schedule.schedule
			USING ERRCODE = '42710';
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.create_schedule(text,text,text,jsonb,text,integer,text,jsonb) IS
'enqueue a job (with headers, if given) into queue whenever cron matches in time_zone; raises 42710 if the schedule exists';

/*
 * A NULL option stays as it is; a new cron or time zone counts from the
 * moment of the call; headers => '{}' clears the schedule's headers.
 */
CREATE FUNCTION claimq.alter_schedule(
	schedule text,
	queue text DEFAULT NULL,
	cron text DEFAULT NULL,
	payload jsonb DEFAULT NULL,
	time_zone text DEFAULT NULL,
	priority integer DEFAULT NULL,
	missed text DEFAULT NULL,
	enabled boolean DEFAULT NULL,
	headers jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	now_ts timestamptz := pg_catalog.clock_timestamp();
	s claimq.schedule;
	cron_text text;
	zone text;
	next_at timestamptz;
	anchor_at timestamptz;
	qid integer;
BEGIN
	-- @include check-primary.sql function=alter_schedule
	PERFORM claimq.check_schedule_name(alter_schedule.schedule);
	IF alter_schedule.missed OPERATOR(pg_catalog.<>) ALL ('{skip,once,all}'::text[]) THEN
		RAISE EXCEPTION 'missed must be "skip", "once" or "all"'
			USING ERRCODE = '22023';
	END IF;
	PERFORM claimq.checked_headers(alter_schedule.headers, 'headers');
-- @c
	IF claimq.node_role() OPERATOR(pg_catalog.=) 'coordinator' THEN
		PERFORM claimq.at_schedule(claimq.schedule_home(alter_schedule.schedule,
														 alter_schedule.queue),
								   alter_schedule.schedule, false, alter_schedule.queue,
								   alter_schedule.cron, alter_schedule.payload,
								   alter_schedule.time_zone, alter_schedule.priority,
								   alter_schedule.missed, alter_schedule.enabled,
								   alter_schedule.headers);
		RETURN;
	END IF;
-- @end

	SELECT * INTO s FROM claimq.schedule t
	 WHERE t.name OPERATOR(pg_catalog.=) alter_schedule.schedule FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'schedule "%" does not exist', alter_schedule.schedule
			USING ERRCODE = '42704';
	END IF;
	qid := s.queue_id;
	cron_text := COALESCE(alter_schedule.cron, s.cron);
	zone := COALESCE(alter_schedule.time_zone, s.time_zone);
	anchor_at := s.anchor;
	next_at := s.next_run_at;

	/* A new expression or zone counts from the moment of the call. */
	IF alter_schedule.cron IS NOT NULL OR alter_schedule.time_zone IS NOT NULL THEN
		anchor_at := now_ts;
		next_at := claimq.schedule_first(cron_text, zone, now_ts);
	END IF;
	IF alter_schedule.queue IS NOT NULL THEN
		PERFORM claimq.check_queue_name(alter_schedule.queue);
		SELECT t.queue_id INTO qid FROM claimq.queue t
		 WHERE t.name OPERATOR(pg_catalog.=) alter_schedule.queue;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'queue "%" does not exist', alter_schedule.queue
				USING ERRCODE = '42704';
		END IF;
	END IF;

	UPDATE claimq.schedule t
	   SET queue_id = qid, cron = cron_text,
		   payload = COALESCE(alter_schedule.payload, t.payload),
		   time_zone = zone,
		   priority = COALESCE(alter_schedule.priority, t.priority),
		   missed = COALESCE(alter_schedule.missed, t.missed),
		   enabled = COALESCE(alter_schedule.enabled, t.enabled),
		   headers = CASE WHEN alter_schedule.headers IS NULL THEN t.headers
						  ELSE NULLIF(alter_schedule.headers, '{}'::jsonb) END,
		   anchor = anchor_at, next_run_at = next_at,
		   catch_up_to = CASE WHEN cron_text OPERATOR(pg_catalog.=) t.cron
								AND zone OPERATOR(pg_catalog.=) t.time_zone
							  THEN t.catch_up_to END
	 WHERE t.name OPERATOR(pg_catalog.=) alter_schedule.schedule;
END
$$;

COMMENT ON FUNCTION claimq.alter_schedule(text,text,text,jsonb,text,integer,text,boolean,jsonb) IS
'change a schedule; a NULL option stays as it is, a new cron or time_zone counts from now, headers => ''{}'' clears its headers';

CREATE FUNCTION claimq.drop_schedule(schedule text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	-- @include check-primary.sql function=drop_schedule
	PERFORM claimq.check_schedule_name(drop_schedule.schedule);
-- @c
	IF claimq.node_role() OPERATOR(pg_catalog.=) 'coordinator' THEN
		PERFORM claimq.at_schedule(claimq.schedule_home(drop_schedule.schedule, NULL),
								   drop_schedule.schedule, true);
		RETURN;
	END IF;
-- @end
	DELETE FROM claimq.schedule s
	 WHERE s.name OPERATOR(pg_catalog.=) drop_schedule.schedule;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'schedule "%" does not exist', drop_schedule.schedule
			USING ERRCODE = '42704';
	END IF;
END
$$;

COMMENT ON FUNCTION claimq.drop_schedule(text) IS
'drop a schedule; jobs it enqueued stay';

-- @c
/*
 * On a distributed install a schedule lives on its queue's node, where
 * alter_schedule and drop_schedule must run: on the coordinator,
 * schedule_home finds its queue (one look over every worker), and
 * at_schedule (src/shard.c) forwards the call to that queue's node, where
 * its statements run against the queue's shards.  A schedule does not
 * move to another queue there yet (0A000).
 */
CREATE FUNCTION claimq.schedule_home(schedule text, new_queue text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	home text;
BEGIN
	SELECT s.queue INTO home FROM claimq.schedule s
	 WHERE s.name OPERATOR(pg_catalog.=) schedule_home.schedule;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'schedule "%" does not exist', schedule
			USING ERRCODE = '42704';
	END IF;
	IF new_queue IS NOT NULL AND new_queue OPERATOR(pg_catalog.<>) home THEN
		RAISE EXCEPTION 'on a distributed install a schedule cannot move to another queue yet'
			USING ERRCODE = '0A000',
				  HINT = 'Drop the schedule and create it in the other queue.';
	END IF;
	RETURN home;
END
$$;

COMMENT ON FUNCTION claimq.schedule_home(text,text) IS
'private: on a distributed install''s coordinator, the queue of a schedule (42704 if none; 0A000 for a move to another queue)';

CREATE FUNCTION claimq.at_schedule(queue text, schedule text, drop_it boolean,
								   new_queue text DEFAULT NULL, cron text DEFAULT NULL,
								   payload jsonb DEFAULT NULL, time_zone text DEFAULT NULL,
								   priority integer DEFAULT NULL, missed text DEFAULT NULL,
								   enabled boolean DEFAULT NULL, headers jsonb DEFAULT NULL)
RETURNS void
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_at_schedule';

COMMENT ON FUNCTION claimq.at_schedule(text,text,boolean,text,text,jsonb,text,integer,text,boolean,jsonb) IS
'private: on a distributed install, alter or drop a schedule on its queue''s node (delegated there by queue)';
-- @end

/*
 * The high bits of the job ids this server issues (claimq.node_id, in the
 * C edition), which fire_schedules adds to the values of job_id_seq as
 * enqueue does (src/common.c, cq_job_id_base).
 */
CREATE FUNCTION claimq.job_id_base()
RETURNS bigint
LANGUAGE c STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'claimq_job_id_base';

COMMENT ON FUNCTION claimq.job_id_base() IS
'private: the high bits of the job ids this server issues (claimq.node_id)';

/*
 * Enqueue the due occurrences of every enabled schedule, up to max_jobs
 * jobs, and return how many; the reclaimer calls it on every pass.  When
 * more than one occurrence of a schedule is due at once (the schedule
 * was disabled, or nothing fired it for a while), its "missed" policy
 * decides: skip (none), once (the latest), all (each, oldest first, at
 * most the latest 1,000).  The latest are found by looking back from now,
 * not by stepping through every missed occurrence.  If max_jobs stops a
 * call part-way through "all", the row remembers how far the policy
 * reached (catch_up_to), and the next call enqueues the rest without
 * applying the policy again.  Its statements run with jit off and
 * generic plans, as the C edition's kept plans do (src/common.c,
 * cq_execute; test/sql/jit.sql).
 */
CREATE FUNCTION claimq.fire_schedules(max_jobs integer DEFAULT 1000)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
	/* Of more missed occurrences than this, "all" enqueues the latest. */
	missed_max constant integer := 1000;
	/*
	 * Where to look back from now for the latest occurrences, rather than
	 * step through every one since the first due: an hour, a day, a
	 * week, 31 days, 366 days, 9 x 366 days, as exact spans.
	 */
	windows constant interval[] := '{1:00:00,24:00:00,168:00:00,744:00:00,8784:00:00,79056:00:00}';
	now_ts timestamptz := pg_catalog.clock_timestamp();
	id_base bigint;
	fired bigint := 0;
	budget integer;
	r record;
	parsed record;
	occurrences timestamptz[];
	n integer;
	t timestamptz;
	second_at timestamptz;
	latest timestamptz;
	start_at timestamptz;
	from_at timestamptz;
	next_at timestamptz;
	catch_up timestamptz;
	counted integer;
BEGIN
	-- @include check-primary.sql function=fire_schedules
	IF max_jobs IS NULL THEN
		RAISE EXCEPTION 'argument "max_jobs" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF max_jobs OPERATOR(pg_catalog.<) 1 OR max_jobs OPERATOR(pg_catalog.>) @CQ_MAX_BATCH@ THEN
		RAISE EXCEPTION 'max_jobs must be between 1 and @CQ_MAX_BATCH@'
			USING ERRCODE = '22023';
	END IF;

	/* The high bits of this server's job ids (claimq.node_id) */
	id_base := claimq.job_id_base();
	/* The jobs enqueued below are claimq's own writes (see ledger_begin). */
	PERFORM claimq.ledger_begin();
	/*
	 * Every due schedule is locked (SKIP LOCKED: another caller is firing
	 * it) before the first is fired: the sort reads them all.  A second
	 * caller that reaches a row the first has advanced re-reads it under
	 * READ COMMITTED and finds it no longer due.
	 */
	FOR r IN
		SELECT d.* FROM (
			SELECT s.name, s.queue_id, q.name AS queue_name, s.cron, s.time_zone,
				   s.payload, s.headers, s.priority, s.missed, s.anchor, s.next_run_at,
				   s.catch_up_to, q.notify, q.prioritized, q.fair
			  FROM claimq.schedule s
			  JOIN claimq.queue q ON q.queue_id OPERATOR(pg_catalog.=) s.queue_id
			 WHERE s.enabled AND s.next_run_at OPERATOR(pg_catalog.<=) now_ts
			   FOR UPDATE OF s SKIP LOCKED) d
		 ORDER BY d.next_run_at, d.name
	LOOP
		EXIT WHEN fired OPERATOR(pg_catalog.>=) max_jobs;
		budget := max_jobs OPERATOR(pg_catalog.-) fired;
		/*
		 * A queue being dropped or redriven (its producer lock held
		 * exclusive) is passed over until the next call: waiting for the
		 * lock while holding the schedule's row could deadlock.
		 */
		CONTINUE WHEN NOT pg_catalog.pg_try_advisory_xact_lock_shared(@CQ_PRODUCER_LOCK_KEY@,
			pg_catalog.hashtext(r.queue_name COLLATE pg_catalog."C"));
-- @c
		/* A distributed install's jobs are inserted under their queue's route. */
		PERFORM claimq.route_to(r.queue_name);
-- @end
		/* As stored: an @every that would now be refused still steps. */
		parsed := claimq.cron_parse(r.cron, false);
		occurrences := '{}';
		catch_up := r.catch_up_to;

		IF catch_up IS NOT NULL THEN
			/* Finishing what "all" began: no policy again. */
			t := r.next_run_at;
			WHILE t IS NOT NULL AND t OPERATOR(pg_catalog.<=) catch_up
				  AND pg_catalog.cardinality(occurrences) OPERATOR(pg_catalog.<) LEAST(budget, missed_max) LOOP
				occurrences := occurrences OPERATOR(pg_catalog.||) t;
				t := claimq.cron_walk(parsed.every, parsed.minutes, parsed.hours,
					parsed.mdays, parsed.months, parsed.wdays, parsed.hour_star,
					parsed.mday_star, parsed.wday_star, r.time_zone,
					t, r.anchor);
			END LOOP;
			next_at := t;
			IF t IS NULL OR t OPERATOR(pg_catalog.>) catch_up THEN
				catch_up := NULL;
			END IF;
		ELSE
			second_at := claimq.cron_walk(parsed.every, parsed.minutes, parsed.hours,
				parsed.mdays, parsed.months, parsed.wdays, parsed.hour_star,
				parsed.mday_star, parsed.wday_star, r.time_zone,
				r.next_run_at, r.anchor);
			IF second_at IS NULL OR second_at OPERATOR(pg_catalog.>) now_ts THEN
				/* One occurrence due: it fires, however late. */
				occurrences := ARRAY[r.next_run_at];
				next_at := second_at;
			ELSIF r.missed OPERATOR(pg_catalog.=) 'all' THEN
				/*
				 * Every due occurrence, at most the latest missed_max,
				 * oldest first.  Start at the shortest window before now
				 * that holds missed_max of them, or at the first.
				 */
				from_at := r.next_run_at;
				FOR i IN 1 .. pg_catalog.cardinality(windows) LOOP
					EXIT WHEN (now_ts OPERATOR(pg_catalog.-) windows[i]) OPERATOR(pg_catalog.<=) r.next_run_at;
					start_at := claimq.cron_walk(parsed.every, parsed.minutes, parsed.hours,
						parsed.mdays, parsed.months, parsed.wdays, parsed.hour_star,
						parsed.mday_star, parsed.wday_star, r.time_zone,
						now_ts OPERATOR(pg_catalog.-) windows[i], r.anchor);
					counted := 0;
					t := start_at;
					WHILE t IS NOT NULL AND t OPERATOR(pg_catalog.<=) now_ts
						  AND counted OPERATOR(pg_catalog.<) missed_max LOOP
						counted := counted OPERATOR(pg_catalog.+) 1;
						t := claimq.cron_walk(parsed.every, parsed.minutes, parsed.hours,
							parsed.mdays, parsed.months, parsed.wdays, parsed.hour_star,
							parsed.mday_star, parsed.wday_star, r.time_zone,
							t, r.anchor);
					END LOOP;
					IF counted OPERATOR(pg_catalog.>=) missed_max THEN
						from_at := start_at;
						EXIT;
					END IF;
				END LOOP;
				t := from_at;
				WHILE t IS NOT NULL AND t OPERATOR(pg_catalog.<=) now_ts LOOP
					occurrences := occurrences OPERATOR(pg_catalog.||) t;
					IF pg_catalog.cardinality(occurrences) OPERATOR(pg_catalog.>=) (2 OPERATOR(pg_catalog.*) missed_max) THEN
						occurrences := occurrences[missed_max OPERATOR(pg_catalog.+) 1 :];
					END IF;
					t := claimq.cron_walk(parsed.every, parsed.minutes, parsed.hours,
						parsed.mdays, parsed.months, parsed.wdays, parsed.hour_star,
						parsed.mday_star, parsed.wday_star, r.time_zone,
						t, r.anchor);
				END LOOP;
				next_at := t;
				n := pg_catalog.cardinality(occurrences);
				IF n OPERATOR(pg_catalog.>) missed_max THEN
					occurrences := occurrences[(n OPERATOR(pg_catalog.-) missed_max) OPERATOR(pg_catalog.+) 1 :];
					n := missed_max;
				END IF;
				IF n OPERATOR(pg_catalog.>) budget THEN
					/* The rest on the next call, without the policy. */
					catch_up := occurrences[n];
					next_at := occurrences[budget OPERATOR(pg_catalog.+) 1];
					occurrences := occurrences[1 : budget];
				END IF;
			ELSE
				/*
				 * The latest occurrence at or before now: look for one in
				 * the windows before now, then step from there.
				 */
				latest := second_at;
				FOR i IN 1 .. pg_catalog.cardinality(windows) LOOP
					EXIT WHEN (now_ts OPERATOR(pg_catalog.-) windows[i]) OPERATOR(pg_catalog.<=) second_at;
					t := claimq.cron_walk(parsed.every, parsed.minutes, parsed.hours,
						parsed.mdays, parsed.months, parsed.wdays, parsed.hour_star,
						parsed.mday_star, parsed.wday_star, r.time_zone,
						now_ts OPERATOR(pg_catalog.-) windows[i], r.anchor);
					IF t IS NOT NULL AND t OPERATOR(pg_catalog.<=) now_ts THEN
						latest := t;
						EXIT;
					END IF;
				END LOOP;
				LOOP
					t := claimq.cron_walk(parsed.every, parsed.minutes, parsed.hours,
						parsed.mdays, parsed.months, parsed.wdays, parsed.hour_star,
						parsed.mday_star, parsed.wday_star, r.time_zone,
						latest, r.anchor);
					EXIT WHEN t IS NULL OR t OPERATOR(pg_catalog.>) now_ts;
					latest := t;
				END LOOP;
				next_at := t;
				IF r.missed OPERATOR(pg_catalog.=) 'once' THEN
					occurrences := ARRAY[latest];
				END IF;
			END IF;
		END IF;

		/* A first job at a priority but 0 marks its queue (queue-changed.sql). */
		IF r.priority OPERATOR(pg_catalog.<>) 0 AND NOT r.prioritized
		   AND pg_catalog.cardinality(occurrences) OPERATOR(pg_catalog.>) 0 THEN
			PERFORM claimq.mark_prioritized(r.queue_id);
		END IF;
		/* A fair queue's tenant of jobs without a group key (fair-share.sql). */
		IF r.fair AND pg_catalog.cardinality(occurrences) OPERATOR(pg_catalog.>) 0 THEN
			PERFORM claimq.fair_join(r.queue_id, r.priority, ARRAY[NULL::text]);
		END IF;

		/*
		 * One job per occurrence, in order, and the schedule's advance, in
		 * one statement: they commit together.
		 */
		WITH ins AS (
			INSERT INTO claimq.job AS j
				(job_id, queue_id, state, priority, run_at, enqueued_at, payload,
				 headers)
			SELECT id_base OPERATOR(pg_catalog.+) pg_catalog.nextval('claimq.job_id_seq'::pg_catalog.regclass),
				   r.queue_id, 'pending', r.priority, o.run_at, now_ts, r.payload,
				   r.headers
			  FROM pg_catalog.unnest(occurrences) WITH ORDINALITY AS o(run_at, n)
			 ORDER BY o.n
			RETURNING j.job_id, j.run_at)
		UPDATE claimq.schedule s
		   SET next_run_at = next_at, catch_up_to = catch_up,
			   last_run_at = COALESCE((SELECT pg_catalog.max(i.run_at) FROM ins i),
									  s.last_run_at),
			   last_job_id = COALESCE((SELECT pg_catalog.max(i.job_id) FROM ins i),
									  s.last_job_id)
		 WHERE s.name OPERATOR(pg_catalog.=) r.name
		   AND s.queue_id OPERATOR(pg_catalog.=) r.queue_id;
		n := pg_catalog.cardinality(occurrences);
		IF n OPERATOR(pg_catalog.>) 0 THEN
			/* New jobs, pending: counted, and waiting claims woken at commit. */
			PERFORM claimq.ledger_note(r.queue_id, 'pending', ARRAY[NULL]::text[],
									   ARRAY[n::bigint]);
			IF r.notify THEN
				PERFORM pg_catalog.pg_notify('claimq', r.queue_name);
			END IF;
		END IF;
		fired := fired OPERATOR(pg_catalog.+) n;
	END LOOP;
	PERFORM claimq.ledger_end();
	RETURN fired;
END
$$;

COMMENT ON FUNCTION claimq.fire_schedules(integer) IS
'enqueue the due occurrences of every enabled schedule, up to max_jobs; returns how many (the reclaimer calls it on every pass)';
