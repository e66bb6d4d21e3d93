#!/usr/bin/env python3
"""An independent computation of schedules' next occurrences.

    cron_oracle.py COUNT SEED > cases.tsv

Writes COUNT random cases, one per line, tab-separated: a cron expression,
a time zone, an instant (UTC), and the first occurrence after it (UTC), or
"none" if there is none within WINDOW.  It shares nothing with claimq's C
code: its own parser, and a walk over every UTC minute with Python's
zoneinfo, applying the rules as the contract words them:

  - a minute fires if its local wall-clock time matches, unless that time
    is the second instance of a repeated local time and the hour field
    does not start with "*";
  - a minute right after a gap (the wall clock jumped forward) also fires
    if any local minute inside the gap matches.
"""

import datetime as dt
import random
import sys
from zoneinfo import ZoneInfo

WINDOW = dt.timedelta(days=2)
UTC = dt.timezone.utc
MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
DAYS = "sun mon tue wed thu fri sat".split()
FIELDS = [(0, 59, None), (0, 23, None), (1, 31, None), (1, 12, MONTHS), (0, 7, DAYS)]
ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe",
         "Asia/Kolkata", "America/Sao_Paulo", "Pacific/Chatham"]


def value(text, lo, names):
    if text.isdigit():
        return int(text)
    return lo + names.index(text.lower())


def parse_field(text, i):
    lo, hi, names = FIELDS[i]
    bits = set()
    for item in text.split(","):
        step, stepped = 1, "/" in item
        if stepped:
            item, s = item.split("/")
            step = int(s)
        if item == "*":
            a, b = lo, hi
        elif "-" in item:
            x, y = item.split("-")
            a, b = value(x, lo, names), value(y, lo, names)
            if i == 4 and b == 0 and a > 0:
                b = 7
        else:
            a = value(item, lo, names)
            b = hi if stepped else a
        bits.update(range(a, b + 1, step))
    if i == 4 and 7 in bits:
        bits.add(0)
    return bits


def parse(expr):
    parts = expr.split()
    sets = [parse_field(p, i) for i, p in enumerate(parts)]
    stars = [p.startswith("*") for p in parts]
    return sets, stars


def matches(cron, t):
    (mins, hours, mdays, months, wdays), stars = cron
    if t.minute not in mins or t.hour not in hours or t.month not in months:
        return False
    dom = t.day in mdays
    dow = (t.weekday() + 1) % 7 in wdays
    if not stars[2] and not stars[4]:
        return dom or dow
    return dom and dow


def next_occurrence(expr, zone, after):
    cron = parse(expr)
    tz = ZoneInfo(zone)
    hour_star = cron[1][1]
    u = after.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    prev = (u - dt.timedelta(minutes=1)).astimezone(tz)
    end = after + WINDOW
    while u <= end:
        local = u.astimezone(tz)
        wall = local.replace(tzinfo=None)
        if matches(cron, wall) and (local.fold == 0 or hour_star):
            return u
        skipped = prev.replace(tzinfo=None) + dt.timedelta(minutes=1)
        while skipped < wall:
            if matches(cron, skipped):
                return u
            skipped += dt.timedelta(minutes=1)
        prev = local
        u += dt.timedelta(minutes=1)
    return None


def random_field(i, rng):
    lo, hi, names = FIELDS[i]
    r = rng.random()
    if i in (2, 3) and r < 0.75:
        return "*"
    if i == 4 and r < 0.6:
        return "*"
    if r < 0.2:
        return "*"
    if r < 0.4:
        return "*/%d" % rng.choice([2, 3, 5, 7, 10, 15] if hi > 12 else [2, 3])

    def number():
        v = rng.randint(lo, hi if i != 4 else 6)
        if names and rng.random() < 0.5:
            name = names[v - lo]
            return rng.choice([name, name.upper(), name.capitalize()])
        return str(v)
    if r < 0.6:
        return ",".join(sorted({number() for _ in range(rng.randint(1, 3))}, key=lambda s: s))
    a = rng.randint(lo, hi - 1 if i != 4 else 5)
    b = rng.randint(a + 1, hi if i != 4 else 6)
    item = "%d-%d" % (a, b)
    if r < 0.8:
        item += "/%d" % rng.randint(1, 3)
    return item


def random_instant(rng, zone):
    # Half of them within a day of a change of the zone's offset.
    base = dt.datetime(2025, 1, 1, tzinfo=UTC) + dt.timedelta(
        seconds=rng.randint(0, 3 * 365 * 86400))
    if rng.random() < 0.5 and zone != "UTC":
        tz = ZoneInfo(zone)
        t = base
        off = t.astimezone(tz).utcoffset()
        for _ in range(24 * 200):
            t += dt.timedelta(hours=1)
            if t.astimezone(tz).utcoffset() != off:
                base = t + dt.timedelta(seconds=rng.randint(-86400, 86400))
                break
    return base.replace(microsecond=0)


def main():
    count, seed = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    for _ in range(count):
        expr = " ".join(random_field(i, rng) for i in range(5))
        zone = rng.choice(ZONES)
        after = random_instant(rng, zone)
        nxt = next_occurrence(expr, zone, after)
        print("\t".join([expr, zone, after.isoformat(),
                         nxt.isoformat() if nxt else "none"]))


if __name__ == "__main__":
    main()
