/*-------------------------------------------------------------------------
 *
 * cron.c
 *		Schedules' expressions: the cron parser and the next occurrence.
 *
 * An expression is five fields (minute, hour, day of month, month, day of
 * week) with "*", lists, ranges and steps, month and day names wherever a
 * number may stand; or @yearly, @monthly, @weekly, @daily, @hourly; or
 * "@every <interval>".
 *
 * Occurrences are wall-clock times in the schedule's time zone, turned
 * into instants with PostgreSQL's own time-zone code (pg_localtime and
 * pg_next_dst_boundary over the zone's transitions):
 *
 *	- a local time that does not exist (it falls in the gap of a change to
 *	  daylight saving time) fires at the first existing minute after the
 *	  gap, the instant of the change, merged with whatever fires then;
 *	- a local time that exists twice (the change back) fires at its first
 *	  instance, or at both when the hour field starts with "*".
 *
 * The next occurrence after an instant X is found by walking the matching
 * local minutes from a little before X's local time, field by field (a
 * month, a day or an hour that cannot match is skipped whole), and taking
 * the earliest instant after X.  "@every" adds k times the interval to
 * the moment the schedule was set, in its time zone, as timestamptz +
 * interval does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "datatype/timestamp.h"
#include "pgtime.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "claimq.h"

#define SECS_PER_MIN_L	((int64) 60)
#define SECS_PER_HOUR_L	((int64) 3600)
#define SECS_PER_DAY_L	((int64) 86400)

/* How far the walk looks: past every gap in the calendar (29 February). */
#define CQ_CRON_HORIZON_YEARS	9

/* Wider than any zone's offset and any change of it. */
#define CQ_ZONE_WINDOW	(48 * SECS_PER_HOUR_L)

static const char *const cq_month_names[] = {
	"jan", "feb", "mar", "apr", "may", "jun",
	"jul", "aug", "sep", "oct", "nov", "dec", NULL
};
static const char *const cq_day_names[] = {
	"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL
};

typedef struct CqCronField
{
	const char *name;			/* for messages */
	int			min;
	int			max;
	const char *const *names;	/* names[i] stands for min + i, or NULL */
} CqCronField;

static const CqCronField cq_fields[5] = {
	{"minute", 0, 59, NULL},
	{"hour", 0, 23, NULL},
	{"day of month", 1, 31, NULL},
	{"month", 1, 12, cq_month_names},
	{"day of week", 0, 7, cq_day_names},
};

static void
cq_cron_error(const char *text, const char *field, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid cron expression \"%s\": bad %s field", text, field),
			 detail ? errdetail("%s", detail) : 0,
			 errhint("A cron expression is five fields (minute, hour, day of month, month, day of week), or @yearly, @monthly, @weekly, @daily, @hourly, or @every followed by an interval.")));
}

/*
 * A number or a name of field f at *p; advances *p.  Returns -1 if there
 * is neither.
 */
static int
cq_cron_value(const char **p, const CqCronField *f)
{
	const char *s = *p;

	if (*s >= '0' && *s <= '9')
	{
		int			v = 0;

		while (*s >= '0' && *s <= '9' && v < 1000)
			v = v * 10 + (*s++ - '0');
		*p = s;
		return v;
	}
	if (f->names)
	{
		for (int i = 0; f->names[i]; i++)
			if (pg_strncasecmp(s, f->names[i], 3) == 0 &&
				!((s[3] >= 'a' && s[3] <= 'z') || (s[3] >= 'A' && s[3] <= 'Z')))
			{
				*p = s + 3;
				return f->min + i;
			}
	}
	return -1;
}

/*
 * Parse one field (the text between spaces) into a bit set.  Sets *star
 * if the field starts with "*".
 */
static uint64
cq_cron_field(const char *text, const char *field_text, int fieldno,
			  bool *star)
{
	const CqCronField *f = &cq_fields[fieldno];
	const char *p = field_text;
	uint64		bits = 0;

	*star = (*p == '*');
	for (;;)
	{
		int			lo;
		int			hi;
		int			step = 1;

		if (*p == '*')
		{
			lo = f->min;
			hi = f->max;
			p++;
		}
		else
		{
			if ((lo = cq_cron_value(&p, f)) < 0)
				cq_cron_error(text, f->name, "Expected a number, a name, or \"*\".");
			hi = lo;
			if (*p == '-')
			{
				p++;
				if ((hi = cq_cron_value(&p, f)) < 0)
					cq_cron_error(text, f->name, "A range needs an end.");
				/* sat-sun: Sunday as 7 */
				if (fieldno == 4 && hi == 0 && lo > 0)
					hi = 7;
			}
			if (lo < f->min || hi > f->max || lo > f->max || hi < f->min)
				cq_cron_error(text, f->name,
							  psprintf("Values must be between %d and %d.",
									   f->min, f->max));
			if (lo > hi)
				cq_cron_error(text, f->name, "A range must not run backwards.");
		}
		if (*p == '/')
		{
			p++;
			if ((step = cq_cron_value(&p, &cq_fields[0])) < 1 || step > f->max)
				cq_cron_error(text, f->name,
							  psprintf("A step must be between 1 and %d.", f->max));
			/* "a/n": from a to the end of the field */
			if (hi == lo && !*star)
				hi = f->max;
		}
		for (int v = lo; v <= hi; v += step)
			bits |= UINT64CONST(1) << v;
		if (*p == '\0')
			break;
		if (*p != ',')
			cq_cron_error(text, f->name,
						  psprintf("Unexpected \"%c\".", *p));
		p++;
	}
	return bits;
}

/*
 * Parse text into cron.  Raises 22023, naming the field, if it is not a
 * valid expression.  With check_every, an @every interval must be 1 second
 * to 100 years at this moment (when a schedule is set); a stored one is
 * taken as it is, since a calendar interval such as "1 month -30 days"
 * that was positive when set may not be at every moment.
 */
void
cq_cron_parse(const char *text, CqCron *cron, bool check_every)
{
	static const struct
	{
		const char *macro;
		const char *fields;
	}			macros[] = {
		{"@yearly", "0 0 1 1 *"},
		{"@annually", "0 0 1 1 *"},
		{"@monthly", "0 0 1 * *"},
		{"@weekly", "0 0 * * 0"},
		{"@daily", "0 0 * * *"},
		{"@midnight", "0 0 * * *"},
		{"@hourly", "0 * * * *"},
	};
	const char *fields = text;
	char	   *copy;
	char	   *parts[5];
	int			nparts = 0;
	bool		stars[5];
	uint64		bits[5];

	memset(cron, 0, sizeof(*cron));
	while (*fields == ' ' || *fields == '\t')
		fields++;
	if (*fields == '@')
	{
		if (pg_strncasecmp(fields, "@every", 6) == 0 &&
			(fields[6] == ' ' || fields[6] == '\t'))
		{
			Interval   *span = NULL;
			MemoryContext cxt = CurrentMemoryContext;
			TimestampTz now = GetCurrentTimestamp();
			static const Interval one_second = {.time = USECS_PER_SEC};

			PG_TRY();
			{
				span = DatumGetIntervalP(DirectFunctionCall3(interval_in,
															 CStringGetDatum(fields + 7),
															 ObjectIdGetDatum(InvalidOid),
															 Int32GetDatum(-1)));
			}
			PG_CATCH();
			{
				MemoryContextSwitchTo(cxt);
				FlushErrorState();
			}
			PG_END_TRY();
			if (span == NULL)
				cq_cron_error(text, "@every", "@every takes an interval, such as \"90 seconds\".");

			/*
			 * Parts of one sign only: "1 mon -29 days" is a day in one month
			 * and less than nothing in another, and its steps from the anchor
			 * would go irregularly or backwards (or stop).  With months, days
			 * and time all at least zero, every step moves forward.
			 */
			if (check_every &&
				(span->month > 0 || span->day > 0 || span->time > 0) &&
				(span->month < 0 || span->day < 0 || span->time < 0))
				cq_cron_error(text, "@every",
							  "The interval's months, days and time must not have mixed signs, as in \"1 mon -29 days\": such a step is not the same, or not forward, at every point of the calendar.");
			/* At least 1 second and at most 100 years, at this moment. */
			if (check_every &&
				(span->month > 1200 || span->month < -1200 ||
				 span->day > 36600 || span->day < -36600 ||
				 cq_time_plus(now, span) < cq_time_plus(now, &one_second) ||
				 cq_time_plus(now, span) > cq_time_plus(now, &cq_max_delay)))
				cq_cron_error(text, "@every", "The interval must be at least 1 second and at most 100 years.");
			cron->every = true;
			cron->interval = *span;
			return;
		}
		for (size_t i = 0; i < lengthof(macros); i++)
			if (pg_strcasecmp(fields, macros[i].macro) == 0)
			{
				fields = macros[i].fields;
				break;
			}
		if (*fields == '@')
			cq_cron_error(text, "macro",
						  "The macros are @yearly, @monthly, @weekly, @daily, @hourly and @every <interval>.");
	}

	copy = pstrdup(fields);
	for (char *tok = strtok(copy, " \t"); tok; tok = strtok(NULL, " \t"))
	{
		if (nparts == 5)
			cq_cron_error(text, "day of week", "There are more than five fields.");
		parts[nparts++] = tok;
	}
	if (nparts < 5)
		cq_cron_error(text, cq_fields[nparts].name,
					  "There are fewer than five fields.");
	for (int i = 0; i < 5; i++)
		bits[i] = cq_cron_field(text, parts[i], i, &stars[i]);

	cron->minutes = bits[0];
	cron->hours = (uint32) bits[1];
	cron->mdays = (uint32) bits[2];
	cron->months = (uint16) bits[3];
	cron->wdays = (uint8) ((bits[4] | (bits[4] >> 7)) & 0x7F);
	cron->hour_star = stars[1];
	cron->mday_star = stars[2];
	cron->wday_star = stars[4];
}

/*
 * Raise 22023 if cron (parsed from text) can never fire: with the day of
 * week "*" (the day of month alone decides), no listed month has a listed
 * day of the month, February counting 29.  With both day fields
 * restricted, either may match, and every month has every day of the
 * week; with the day of month "*", day 1 comes on each day of the week in
 * turn.  A structural check, for when a schedule is set.
 */
void
cq_cron_check_fires(const char *text, const CqCron *cron)
{
	static const int days_in[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

	if (cron->every || cron->mday_star || !cron->wday_star)
		return;
	for (int month = 1; month <= 12; month++)
		if ((cron->months >> month) & 1)
			for (int day = 1; day <= days_in[month]; day++)
				if ((cron->mdays >> day) & 1)
					return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("cron expression \"%s\" never matches", text),
			 errdetail("None of the months it lists has a day of the month it lists (February has 29 days)."),
			 errhint("List a day of the month that exists in one of the months.")));
}

/*
 * Local wall-clock times are handled as "naive" seconds: the seconds since
 * 1970-01-01 00:00 of that wall-clock reading, as if the zone were UTC.
 */
static int64
cq_naive(int year, int month, int day, int hour, int minute)
{
	return (int64) (date2j(year, month, day) - UNIX_EPOCH_JDATE) * SECS_PER_DAY_L +
		hour * SECS_PER_HOUR_L + minute * SECS_PER_MIN_L;
}

static bool
cq_day_matches(const CqCron *c, int year, int month, int day)
{
	bool		mday = (c->mdays >> day) & 1;
	bool		wday = (c->wdays >> j2day(date2j(year, month, day))) & 1;

	/* Both restricted: either matches, as in cron. */
	if (!c->mday_star && !c->wday_star)
		return mday || wday;
	return mday && wday;
}

/*
 * The first matching local minute at or after *naive, if it comes no later
 * than limit.
 */
static bool
cq_cron_next_local(const CqCron *c, int64 *naive, int64 limit)
{
	/* Up to the next whole minute; times before 1970 are not scheduled. */
	int64		t = Max(*naive, 0);
	int			year,
				month,
				day,
				hour,
				minute;
	int64		rest;

	t = (t + SECS_PER_MIN_L - 1) / SECS_PER_MIN_L * SECS_PER_MIN_L;
	j2date((int) (t / SECS_PER_DAY_L) + UNIX_EPOCH_JDATE, &year, &month, &day);
	rest = t % SECS_PER_DAY_L;
	hour = (int) (rest / SECS_PER_HOUR_L);
	minute = (int) ((rest % SECS_PER_HOUR_L) / SECS_PER_MIN_L);

	for (;;)
	{
		if (cq_naive(year, month, 1, 0, 0) > limit)
			return false;
		if (!((c->months >> month) & 1) ||
			day > day_tab[isleap(year)][month - 1])
		{
			/* Not this month, or past its last day: the next month. */
			if (++month > 12)
			{
				month = 1;
				year++;
			}
			day = 1;
			hour = minute = 0;
			continue;
		}
		if (!cq_day_matches(c, year, month, day))
		{
			day++;
			hour = minute = 0;
			continue;
		}
		if (hour > 23)
		{
			day++;
			hour = minute = 0;
			continue;
		}
		if (!((c->hours >> hour) & 1) || minute > 59)
		{
			hour++;
			minute = 0;
			continue;
		}
		if (!((c->minutes >> minute) & 1))
		{
			minute++;
			continue;
		}
		t = cq_naive(year, month, day, hour, minute);
		if (t > limit)
			return false;
		*naive = t;
		return true;
	}
}

/* The zone's offset from UTC at instant t, in seconds. */
static long
cq_zone_offset(pg_time_t t, const pg_tz *tz)
{
	struct pg_tm *tm = pg_localtime(&t, tz);

	if (tm == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	return tm->tm_gmtoff;
}

/*
 * The instants at which local wall-clock time naive occurs in tz: one
 * usually, two when the zone turns back over it, none when it falls in a
 * gap.  For a gap, *gap_end is the instant the gap ends.  *max_offset is
 * the largest offset in effect around naive.
 */
static int
cq_local_instants(int64 naive, const pg_tz *tz, pg_time_t *instants,
				  pg_time_t *gap_end, long *max_offset)
{
	pg_time_t	seg_start = naive - CQ_ZONE_WINDOW;
	long		offset = cq_zone_offset(seg_start, tz);
	int			n = 0;

	*gap_end = 0;
	*max_offset = offset;
	for (;;)
	{
		long		before;
		long		after;
		int			before_isdst;
		int			after_isdst;
		pg_time_t	boundary;
		pg_time_t	seg_end;
		pg_time_t	u = naive - offset;
		int			r;

		r = pg_next_dst_boundary(&seg_start, &before, &before_isdst,
								 &boundary, &after, &after_isdst, tz);
		seg_end = (r == 1 && boundary > seg_start) ? boundary : PG_INT64_MAX;
		if (u >= seg_start && u < seg_end && n < 2)
			instants[n++] = u;
		/* A segment whose local start is past naive ends a gap before it. */
		if (*gap_end == 0 && seg_start > naive - CQ_ZONE_WINDOW &&
			seg_start + offset > naive)
			*gap_end = seg_start;
		if (seg_end == PG_INT64_MAX || seg_end > naive + CQ_ZONE_WINDOW)
			break;
		seg_start = seg_end;
		offset = after;
		*max_offset = Max(*max_offset, offset);
	}
	return n;
}

static TimestampTz
cq_from_unix(pg_time_t t)
{
	return (TimestampTz) (t - (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY_L) *
		USECS_PER_SEC;
}

/* Seconds since 1970, rounded down. */
static pg_time_t
cq_to_unix(TimestampTz t)
{
	int64		secs = t / USECS_PER_SEC - (t % USECS_PER_SEC < 0 ? 1 : 0);

	return secs + (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY_L;
}

/*
 * anchor + k * interval, in tz, as timestamptz + interval computes it in a
 * session whose TimeZone is tz.
 */
static TimestampTz
cq_every_at(TimestampTz anchor, const Interval *span, int64 k, pg_tz *tz)
{
	Interval	step;
	pg_tz	   *save = session_timezone;
	TimestampTz result;

	if (pg_mul_s64_overflow(span->time, k, &step.time) ||
		k > PG_INT32_MAX || k * (int64) span->day > PG_INT32_MAX ||
		k * (int64) span->month > PG_INT32_MAX)
		return DT_NOEND;
	step.day = (int32) (k * span->day);
	step.month = (int32) (k * span->month);
	session_timezone = tz;
	PG_TRY();
	{
		result = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
														 TimestampTzGetDatum(anchor),
														 IntervalPGetDatum(&step)));
	}
	PG_FINALLY();
	{
		session_timezone = save;
	}
	PG_END_TRY();
	return result;
}

/*
 * The first occurrence of cron in tz strictly after instant after
 * (anchor: when an @every schedule was set).  DT_NOEND if there is none
 * within CQ_CRON_HORIZON_YEARS.
 */
TimestampTz
cq_cron_next(const CqCron *cron, pg_tz *tz, TimestampTz after,
			 TimestampTz anchor)
{
	pg_time_t	x;
	int64		naive;
	int64		limit;
	pg_time_t	best = PG_INT64_MAX;
	long		best_offset = 0;

	if (cron->every)
	{
		/* Estimate k from the interval's length, then step to the first. */
		double		len = (double) cron->interval.time +
		(double) cron->interval.day * USECS_PER_DAY +
		(double) cron->interval.month * DAYS_PER_MONTH * USECS_PER_DAY;
		int64		k = 1;

		if (after >= anchor && len > 0)
			k = Max((int64) ((double) (after - anchor) / len) - 2, 1);

		/*
		 * A few steps from the estimate reach the first occurrence; an
		 * interval that does not move forward at this point of the calendar
		 * never would: no next occurrence.
		 */
		for (int steps = 0; cq_every_at(anchor, &cron->interval, k, tz) <= after; steps++)
		{
			if (steps > 1000)
				return DT_NOEND;
			k++;
		}
		while (k > 1 && cq_every_at(anchor, &cron->interval, k - 1, tz) > after)
			k--;
		return cq_every_at(anchor, &cron->interval, k, tz);
	}

	x = cq_to_unix(after);
	/* Start before x's local time: a second instance or a gap's end. */
	naive = (int64) x + cq_zone_offset(x, tz) - 3 * SECS_PER_HOUR_L;
	limit = naive + CQ_CRON_HORIZON_YEARS * 366 * SECS_PER_DAY_L;
	while (cq_cron_next_local(cron, &naive, limit))
	{
		pg_time_t	instants[2];
		pg_time_t	gap_end;
		long		max_offset;
		int			n = cq_local_instants(naive, tz, instants, &gap_end,
										  &max_offset);

		/* No later local time can give an instant before best. */
		if (best != PG_INT64_MAX && naive - Max(max_offset, best_offset) > best)
			break;
		if (n == 0)
			instants[n++] = gap_end;
		else if (n == 2 && !cron->hour_star)
			n = 1;				/* the first instance only */
		for (int i = 0; i < n; i++)
			if (instants[i] > x && instants[i] < best)
			{
				best = instants[i];
				best_offset = max_offset;
			}
		naive += SECS_PER_MIN_L;
	}
	return best == PG_INT64_MAX ? DT_NOEND : cq_from_unix(best);
}

/*
 * The time zone named name, or 22023.
 */
pg_tz *
cq_time_zone(const char *name)
{
	pg_tz	   *tz = pg_tzset(name);

	if (tz == NULL || !pg_tz_acceptable(tz))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("time zone \"%s\" not recognized", name),
				 errhint("Use a name from pg_timezone_names, such as UTC or Europe/Berlin.")));
	return tz;
}

/*
 * cron_next(cron text, time_zone text, after timestamptz, anchor
 * timestamptz) returns timestamptz: the next occurrence, for tests and
 * diagnosis.  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_cron_next);

Datum
claimq_cron_next(PG_FUNCTION_ARGS)
{
	CqCron		cron;
	TimestampTz next;

	cq_arg_not_null(fcinfo, 0, "cron");
	cq_arg_not_null(fcinfo, 1, "time_zone");
	cq_arg_not_null(fcinfo, 2, "after");
	cq_cron_parse(text_to_cstring(PG_GETARG_TEXT_PP(0)), &cron, true);
	next = cq_cron_next(&cron, cq_time_zone(text_to_cstring(PG_GETARG_TEXT_PP(1))),
						PG_GETARG_TIMESTAMPTZ(2),
						PG_ARGISNULL(3) ? PG_GETARG_TIMESTAMPTZ(2) :
						PG_GETARG_TIMESTAMPTZ(3));
	if (next == DT_NOEND)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(next);
}
