#!/usr/bin/python3
"""claimq benchmark driver; bench/run starts the server and calls this.

Connection comes from PGHOST/PGPORT/PGUSER/PGDATABASE; BENCH_BIN is the
directory of pgbench, BENCH_DIR the directory of the pgbench scripts;
BENCH_PORTABLE_DB, when set, names the database of the same server in which
bench/run installed the portable edition (claimq-portable.sql) and
bench/schema.sql: the portable-* methods run there.
"""
import argparse
import contextlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

METHODS = {
    # name: (pgbench script, label, flow, ratio reference)
    # portable-*: the portable edition (SQL and PL/pgSQL only), claimq's
    # own scripts run in the database that holds it (BENCH_PORTABLE_DB).
    "baseline-tx": ("baseline_tx.sql", "baseline 1-tx", "1-tx", None),
    "claimq-tx": ("claimq_tx.sql", "claimq 1-tx", "1-tx", "baseline-tx"),
    "portable-tx": ("claimq_tx.sql", "portable 1-tx", "1-tx", "baseline-tx"),
    "baseline-lease": ("baseline_lease.sql", "baseline lease", "lease", None),
    "claimq-lease": ("claimq_lease.sql", "claimq lease", "lease", "baseline-lease"),
    "portable-lease": ("claimq_lease.sql", "portable lease", "lease", "baseline-lease"),
    "pgq": ("pgq.sql", "PgQ", "batch", "baseline-tx"),
    "oracle": ("oracle_lease.sql", "oracle lease", "lease", "baseline-lease"),
    "hot": ("hot_lease.sql", "HOT-claim prototype lease", "lease", "baseline-lease"),
    "floor": ("floor.sql", "write-only floor", "1-tx", "baseline-tx"),
}
# Server profiles (bench/run starts one server per profile): Debian's
# defaults, and the tuned server the matrix has always used.
PROFILES = ["default", "tuned"]
PARTS = ["matrix", "backlog", "latency", "reclaim", "groups", "fair", "fair-ceiling", "headers",
         "workflows", "sustained"]

# First guesses of jobs/s per batch size, used only to size the first pool
# of a (variant, method, batch); every later pool is sized from measured rates.
GUESS = {"off": {1: 4000, 10: 25000, 100: 60000},
         "on": {1: 1500, 10: 12000, 100: 50000}}


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench/run",
        description="claimq benchmark: jobs/s, WAL bytes/job and table+index "
                    "size per method, clients and batch size; plus backlog, "
                    "wake-up latency and reclaim tests.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true",
                   help="short runs on a subset (under 2 minutes)")
    g.add_argument("--full", action="store_true",
                   help="the whole matrix and the extras (the default; about 20 minutes)")
    g.add_argument("--sustained", action="store_true",
                   help="only the sustained enqueue+claim+complete run (5 minutes)")
    p.add_argument("--duration", type=float,
                   default=float(os.environ["BENCH_DURATION"]) if os.environ.get("BENCH_DURATION") else None,
                   help="seconds per pgbench run (env BENCH_DURATION; default 5, quick 2)")
    p.add_argument("--methods", help="comma-separated subset of " + ",".join(METHODS))
    p.add_argument("--clients", help="comma-separated client counts (default 1,4,8)")
    p.add_argument("--batches", help="comma-separated batch sizes (default 1,10,100)")
    p.add_argument("--sync", help="synchronous_commit variants, comma-separated (default off,on)")
    p.add_argument("--only", help="comma-separated parts: " + ",".join(PARTS))
    p.add_argument("--sustain-seconds", type=int,
                   default=int(os.environ.get("BENCH_SUSTAIN_SECONDS", "300")),
                   help="length of the sustained run (env BENCH_SUSTAIN_SECONDS; default 300)")
    p.add_argument("--sustain-rate", type=int,
                   default=int(os.environ["BENCH_SUSTAIN_RATE"]) if os.environ.get("BENCH_SUSTAIN_RATE") else None,
                   help="jobs/s the producers offer in the sustained run "
                        "(env BENCH_SUSTAIN_RATE; default: half the measured consumer rate)")
    p.add_argument("--sustain-methods", default="claimq",
                   help="comma-separated methods of the sustained run: claimq, baseline (the "
                        "hand-written queue), hot (the same on the write-less layout) "
                        "(default claimq)")
    p.add_argument("--sustain-load", type=float, default=0.5,
                   help="without --sustain-rate, offer this share of what the slowest "
                        "sustained method's consumers do alone (default 0.5)")
    p.add_argument("--sustain-rounds", type=int, default=1,
                   help="sustained runs of each method, the order turned each round (default 1)")
    p.add_argument("--json", metavar="FILE", help="also write every measurement to FILE")
    p.add_argument("--charts", metavar="DIR",
                   help="draw the results as PNG charts into DIR (python3-matplotlib)")
    p.add_argument("--scrape", type=float, default=0.0, metavar="SECONDS",
                   help="while each matrix run lasts, call claimq.metrics() every SECONDS "
                        "from another connection, as a Prometheus scraper would (default: no)")
    p.add_argument("--keep", action="store_true",
                   help="leave the server running afterwards (for poking)")
    p.add_argument("--profiles", default="default,tuned",
                   help="server profiles, comma-separated: default (Debian's settings: jit on, "
                        "shared_buffers 128MB, synchronous_commit on, autovacuum on everywhere) "
                        "and tuned (default both, one server each)")
    p.add_argument("--profile", help=argparse.SUPPRESS)
    p.add_argument("--check-args", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    def ints(s, what):
        try:
            v = [int(x) for x in s.split(",") if x.strip()]
        except ValueError:
            p.error("--%s takes comma-separated integers" % what)
        if not v or min(v) < 1:
            p.error("--%s takes positive integers" % what)
        return v

    quick = a.quick
    a.mode = "quick" if quick else "sustained" if a.sustained else "full"
    if a.duration is None:
        a.duration = 2.0 if quick else 5.0
    if a.duration <= 0:
        p.error("--duration must be positive")
    a.clients = ints(a.clients, "clients") if a.clients else ([4] if quick else [1, 4, 8])
    a.batches = ints(a.batches, "batches") if a.batches else ([1, 100] if quick else [1, 10, 100])
    if max(a.batches) > 10000:
        p.error("batch sizes go up to 10000 (claimq's max_jobs)")
    a.sync = a.sync.split(",") if a.sync else (["off"] if quick else ["off", "on"])
    for s in a.sync:
        if s not in ("off", "on", "local", "remote_write"):
            p.error("--sync takes off, on, local, remote_write")
    for x in a.profiles.split(","):
        if x not in PROFILES:
            p.error("unknown profile %r (have %s)" % (x, ", ".join(PROFILES)))
    if a.profile == "default":
        # What the server says, as a user who changed nothing gets it.
        a.sync = ["default"]
    a.sustain_methods = a.sustain_methods.split(",")
    for m in a.sustain_methods:
        if m not in ("claimq", "baseline", "hot"):
            p.error("unknown sustained method %r (have claimq, baseline, hot)" % m)
    if not 0 < a.sustain_load <= 2:
        p.error("--sustain-load takes a share between 0 and 2")
    if a.sustain_rounds < 1:
        p.error("--sustain-rounds takes a positive number")
    a.methods = a.methods.split(",") if a.methods else list(METHODS)
    for m in a.methods:
        if m not in METHODS:
            p.error("unknown method %r (have %s)" % (m, ", ".join(METHODS)))
    if a.only:
        a.parts = a.only.split(",")
        for x in a.parts:
            if x not in PARTS:
                p.error("unknown part %r (have %s)" % (x, ", ".join(PARTS)))
    elif a.sustained:
        a.parts = ["sustained"]
    else:
        a.parts = ["matrix", "backlog", "latency", "reclaim", "groups", "fair", "fair-ceiling",
                   "headers", "workflows"]
    return a


def edition(method):
    """The claimq edition a method measures: "c", "portable", or None."""
    if method.startswith("portable"):
        return "portable"
    return "c" if method.startswith("claimq") else None


ARGS = parse_args(sys.argv[1:])
if ARGS.check_args:
    # bench/run starts one server per profile printed on the first line;
    # the second names the claimq editions the chosen methods measure: with
    # "portable" bench/run builds the portable edition and installs it into
    # a database of its own (and --instructions counts the editions named).
    print(" ".join(ARGS.profiles.split(",")))
    print(" ".join(e for e in ("c", "portable")
                   if any(edition(m) == e for m in ARGS.methods)
                   and (e == "c" or "matrix" in ARGS.parts)))
    sys.exit(0)

import psycopg  # noqa: E402  (installed by bench/run before this point)

BIN = os.environ["BENCH_BIN"]
DIR = os.environ["BENCH_DIR"]
OUT = []            # report lines, printed as they come and kept for --json
RESULTS = {"cells": [], "extras": {}}


def say(line=""):
    print(line, flush=True)
    OUT.append(line)


def log(msg):
    print("   " + msg, file=sys.stderr, flush=True)


def connect(dbname=None):
    """A connection to the bench database, or to database `dbname` of the
    same server."""
    if dbname:
        return psycopg.connect("", dbname=dbname, autocommit=True)
    return psycopg.connect("", autocommit=True)


DB = connect()
CRASHES = []        # what was being done when the server went away

# The portable edition's database (bench/run sets it when the build has
# the portable edition), its connection while one is open, and a note for
# the report when its methods had to be left out.
PORTABLE_DB = os.environ.get("BENCH_PORTABLE_DB") or None
OTHER_DB = {}
if not PORTABLE_DB and any(edition(m) == "portable" for m in ARGS.methods):
    ARGS.methods = [m for m in ARGS.methods if edition(m) != "portable"]
    ARGS.portable_note = ("The portable edition is not in this build (no `make portable`),"
                          " so its methods were left out.")
else:
    ARGS.portable_note = None


def database_of(method):
    """The database a method runs in (None: the bench database)."""
    return PORTABLE_DB if edition(method) == "portable" else None


@contextlib.contextmanager
def on_database(dbname):
    """Send the statements of the block (q, rows, DB.execute) to database
    `dbname` of the same server; None leaves them in the bench database."""
    global DB
    if not dbname:
        yield
        return
    conn = OTHER_DB.get(dbname)
    if conn is None or conn.closed:
        conn = OTHER_DB[dbname] = connect(dbname)
    saved, DB = DB, conn
    try:
        yield
    finally:
        DB = saved


def close_others():
    """Close the connections to the other databases (the next on_database
    opens a new one, which takes the databases' current settings)."""
    for conn in OTHER_DB.values():
        try:
            conn.close()
        except Exception:   # noqa: BLE001
            pass
    OTHER_DB.clear()


def server_gone(exc):
    txt = str(exc)
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) or (
        isinstance(exc, RuntimeError) and ("server closed the connection" in txt
                                           or "terminating connection" in txt
                                           or "recovery mode" in txt
                                           or "connection to server" in txt))


def reconnect():
    """After a crash the postmaster restarts the server by itself (restart_after_crash):
    wait for it and connect again."""
    global DB
    try:
        DB.close()
    except Exception:
        pass
    close_others()
    deadline = time.time() + 120
    while True:
        try:
            DB = connect()
            DB.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def retrying(what, fn, *a):
    """Run fn; if the server crashed meanwhile, note it, wait for the restart
    and run fn once more."""
    try:
        return fn(*a)
    except Exception as exc:    # noqa: BLE001
        if not server_gone(exc):
            raise
        log("the server went away during %s; waiting for its restart, then again" % what)
        CRASHES.append(what)
        reconnect()
        return fn(*a)


def q(sql, params=None):
    """One value (first column of the first row) or None."""
    cur = DB.execute(sql, params)
    row = cur.fetchone() if cur.description else None
    return row[0] if row else None


def rows(sql, params=None):
    return DB.execute(sql, params).fetchall()


def lsn():
    return q("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")


def set_sync(value):
    """synchronous_commit for every new session of the bench database (and
    of the portable edition's, if any; and this one).  No configuration
    reload: see README (a SIGHUP is avoided).  "default" leaves the
    server's own setting."""
    close_others()
    for name in ["bench"] + ([PORTABLE_DB] if PORTABLE_DB else []):
        if value == "default":
            DB.execute("ALTER DATABASE %s RESET synchronous_commit" % name)
        else:
            DB.execute("ALTER DATABASE %s SET synchronous_commit = '%s'" % (name, value))
    if value == "default":
        DB.execute("RESET synchronous_commit")
    else:
        DB.execute("SET synchronous_commit = '%s'" % value)


# The synchronous_commit of the parts after the matrix.
PART_SYNC = "default" if ARGS.profile == "default" else "off"


def sync_label(value):
    if value == "default":
        return "%s (the server's default)" % q("SHOW synchronous_commit")
    return value


def mb(nbytes):
    return "%.1f" % (nbytes / 1048576.0)


def fmt_rate(x):
    if x is None:
        return "-"
    if x >= 100:
        return "{:,}".format(int(round(x)))
    return "%.1f" % x


# ---------------------------------------------------------------------------
# pgbench

def pgbench(script, clients, seconds, batch=None, extra=(), rate=None, progress=None,
            transactions=None, dbname=None):
    cmd = [os.path.join(BIN, "pgbench"), "-n", "-M", "prepared",
           "-c", str(clients), "-j", str(min(clients, 4))]
    if transactions:
        cmd += ["-t", str(transactions)]
    else:
        cmd += ["-T", str(int(math.ceil(seconds))) if seconds >= 1 else "1"]
    cmd += ["-f", os.path.join(DIR, script)]
    if batch is not None:
        cmd += ["-D", "batch=%d" % batch]
    if rate:
        cmd += ["-R", "%.1f" % rate]
    if progress:
        cmd += ["-P", str(progress)]
    cmd += list(extra)
    if dbname:
        cmd.append(dbname)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pgbench_result(proc):
    out, err = proc.communicate()
    txt = out + err
    m_n = re.search(r"number of transactions actually processed: (\d+)", txt)
    m_tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", txt)
    m_lat = re.search(r"latency average = ([\d.]+) ms", txt)
    failed = re.search(r"number of failed transactions: (\d+)", txt)
    if proc.returncode != 0 or not m_n or not m_tps or "aborted" in txt:
        raise RuntimeError("pgbench failed:\n" + txt[-3000:])
    n = int(m_n.group(1))
    tps = float(m_tps.group(1))
    return {"txns": n, "tps": tps, "seconds": n / tps if tps > 0 else 0.0,
            "latency_ms": float(m_lat.group(1)) if m_lat else None,
            "failed": int(failed.group(1)) if failed else 0,
            "output": txt}


# ---------------------------------------------------------------------------
# The matrix

def on_bench_job(method):
    """The baseline's table: the baseline and the oracle work on it."""
    return method.startswith("baseline") or method == "oracle"


def lease_table():
    """claimq.lease, in a build with the write-less layout (a lease row per
    claim call); nothing in one without."""
    return ["claimq.lease"] if q("SELECT to_regclass('claimq.lease') IS NOT NULL") else []


def tables_of(method):
    if on_bench_job(method):
        return ["bench.job"]
    if edition(method):
        return ["claimq.job", "claimq.queue"] + lease_table()
    if method == "floor":
        return ["bench.floor"]
    if method == "hot":
        return ["bench.hjob", "bench.hlease"]
    return [r[0] for r in rows(
        "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c"
        "  JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgq' AND c.relkind = 'r'"
        "   AND (c.relname LIKE 'event\\_' || (SELECT queue_id FROM pgq.queue WHERE queue_name = 'bench') || '%%'"
        "        OR c.relname IN ('tick', 'subscription', 'queue'))")]


def reset_and_load(method, pool, batch):
    """Empty the method's storage, load `pool` jobs, vacuum and analyze.

    A checkpoint comes first, so that no checkpoint starts between the load
    and the end of the run: WAL per job then holds no full-page images.
    """
    if on_bench_job(method):
        DB.execute("TRUNCATE bench.job")
    elif edition(method):
        DB.execute("TRUNCATE " + ", ".join(["claimq.job"] + lease_table()))
    elif method == "floor":
        DB.execute("TRUNCATE bench.floor")
    elif method == "hot":
        DB.execute("TRUNCATE bench.hjob, bench.hlease")
    else:
        DB.execute("SELECT bench.reset_pgq()")
    DB.execute("CHECKPOINT")
    t0 = time.time()
    if on_bench_job(method):
        DB.execute("SELECT bench.load_jobs(%s)", (pool,))
        if method == "oracle":
            # Transaction k of the oracle takes ids [k * batch, (k + 1) * batch).
            DB.execute("SELECT setval('bench.oracle_seq', min(job_id) / %s + 1, false)"
                       " FROM bench.job", (batch,))
    elif edition(method):
        DB.execute("SELECT bench.load_claimq('bench', %s)", (pool,))
        # TRUNCATE left the census unknown: count now rather than in the
        # middle of the run, as the reclaimer would (releases before 0.6,
        # measured by --ab, have no census; the portable edition keeps none).
        if edition(method) == "c" and q(
                "SELECT to_regprocedure('claimq.census_recount()') IS NOT NULL"):
            DB.execute("SELECT claimq.census_recount()")
    elif method == "floor":
        pass                # each transaction inserts the jobs it deletes
    elif method == "hot":
        DB.execute("SELECT bench.load_jobs(%s, tab => 'bench.hjob')", (pool,))
    else:
        DB.execute("CALL bench.load_pgq(%s, %s)", (pool, batch))
    for t in tables_of(method):
        DB.execute("VACUUM (ANALYZE) " + t)
    return time.time() - t0


def remaining(method, state):
    """Jobs still to do."""
    if on_bench_job(method):
        return q("SELECT count(*) FROM bench.job WHERE state = 'pending'")
    if edition(method):
        return q("SELECT count(*) FROM claimq.job WHERE state = 'pending'")
    if method == "floor":
        return float("inf")
    if method == "hot":
        return q("SELECT count(*) FROM bench.hjob WHERE state = 'pending'")
    return state["pool"] - (q("SELECT bench.pgq_consumed()") - state["pgq_start"])


def processed(method, state):
    """Jobs finished during the run, counted in the database."""
    if on_bench_job(method):
        return state["rows_before"] - q("SELECT count(*) FROM bench.job")
    if edition(method):
        return state["rows_before"] - q("SELECT count(*) FROM claimq.job")
    if method == "hot":
        return state["rows_before"] - q("SELECT count(*) FROM bench.hjob")
    if method == "floor":
        # Inserted, less what is left: every transaction deletes its own.
        return (q("SELECT bench.floor_ids()") - state["floor_ids"]
                - (q("SELECT count(*) FROM bench.floor") - state["rows_before"]))
    return q("SELECT bench.pgq_consumed()") - state["pgq_start"]


def claimq_counters():
    r = rows("SELECT completed, stale FROM claimq.counters WHERE queue = 'bench'"
             " AND database = current_database()")
    return r[0] if r else (0, 0)


def run_cell(variant, method, clients, batch, pool):
    with on_database(database_of(method)):
        return run_cell_here(variant, method, clients, batch, pool)


def run_cell_here(variant, method, clients, batch, pool):
    state = {"pool": pool}
    load_s = reset_and_load(method, pool, batch)
    if on_bench_job(method):
        state["rows_before"] = q("SELECT count(*) FROM bench.job")
    elif edition(method):
        state["rows_before"] = q("SELECT count(*) FROM claimq.job")
        if edition(method) == "c":
            # (the portable edition keeps no counters: a stale outcome shows
            # there as a job count short of transactions x batch)
            state["counters"] = claimq_counters()
    elif method == "hot":
        state["rows_before"] = q("SELECT count(*) FROM bench.hjob")
        state["hot0"] = q("SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'bench.hjob'::regclass")
    elif method == "floor":
        state["floor_ids"] = q("SELECT bench.floor_ids()")
        state["rows_before"] = q("SELECT count(*) FROM bench.floor")
    else:
        state["pgq_start"] = q("SELECT bench.pgq_consumed()")
    size_before = q("SELECT bench.method_size(%s)", (method,))
    lsn_before = lsn()
    scraper = Scraper(ARGS.scrape, database_of(method)) if ARGS.scrape > 0 else None
    res = pgbench_result(pgbench(METHODS[method][0], clients, ARGS.duration, batch,
                                 dbname=database_of(method)))
    scrapes = scraper.stop() if scraper else None
    lsn_after = lsn()
    size_after = q("SELECT bench.method_size(%s)", (method,))
    jobs = processed(method, state)
    left = remaining(method, state)
    cell = {
        "variant": variant, "method": method, "clients": clients, "batch": batch,
        "pool": pool, "load_s": round(load_s, 2),
        "jobs": jobs, "seconds": res["seconds"], "txns": res["txns"], "tps": res["tps"],
        "jobs_per_s": jobs / res["seconds"] if res["seconds"] else 0.0,
        "wal_per_job": (lsn_after - lsn_before) / jobs if jobs else None,
        "size_before": size_before, "size_after": size_after,
        "latency_ms": res["latency_ms"], "left": left,
        # A run that got near the end of its pool may have had short batches.
        "dry": left < 2 * clients * batch,
        "notes": [],
    }
    if scrapes:
        cell["notes"].append("scraped %d times, %.1f ms each" % scrapes)
    if method == "hot":
        # Statistics arrive with a delay; the share of claims that were HOT.
        time.sleep(0.6)
        hot = q("SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'bench.hjob'::regclass")
        cell["hot_share"] = (hot - state["hot0"]) / jobs if jobs else None
        if cell["hot_share"] is not None and cell["hot_share"] < 0.9:
            cell["notes"].append("only %.0f%% of claims were HOT" % (100 * cell["hot_share"]))
    if edition(method):
        if "counters" in state:
            c0, c1 = state["counters"], claimq_counters()
            if c1[1] - c0[1]:
                cell["notes"].append("%d stale outcomes" % (c1[1] - c0[1]))
        if q("SELECT count(*) FROM claimq.job WHERE state <> 'pending'"):
            cell["notes"].append("claimed jobs left over")
    if method != "pgq" and jobs != res["txns"] * batch and not cell["dry"]:
        cell["notes"].append("%d jobs counted vs %d txns x batch" % (jobs, res["txns"] * batch))
    return cell


class Scraper:
    """Calls claimq.metrics() every `every` seconds on a connection of its
    own until stopped, as a Prometheus scraper of an exporter would."""

    def __init__(self, every, dbname=None):
        self.every = every
        self.dbname = dbname
        self.done = threading.Event()
        self.count = 0
        self.seconds = 0.0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        with connect(self.dbname) as conn:
            while not self.done.wait(self.every):
                t = time.time()
                conn.execute("SELECT claimq.metrics()").fetchone()
                self.seconds += time.time() - t
                self.count += 1

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.count, 1000 * self.seconds / max(self.count, 1)


def run_matrix():
    cells = {}
    rates = {}
    for variant in ARGS.sync:
        set_sync(variant)
        say()
        say("== matrix, synchronous_commit = %s" % sync_label(variant))
        # Every method runs right after the others at the same clients and
        # batch, so that all of them see about the same background load.
        for batch in ARGS.batches:
            for clients in sorted(ARGS.clients):
                for method in ARGS.methods:
                    key = (variant, method, batch)
                    smaller = [b for b in ARGS.batches if b < batch
                               and (variant, method, clients, b) in cells]
                    if key in rates:
                        # This batch at fewer clients: scale by clients.
                        r, c_prev = rates[key]
                        grow = clients / c_prev
                        grow = min(grow, 2.5) if variant == "off" else min(grow, 6.0)
                        est = r * max(grow, 1.0)
                    elif smaller:
                        # A smaller batch at these clients: scale by batch.
                        b = max(smaller)
                        # (rates grow a little less than the batch: 1 -> 10
                        # gave 4-7x here, 10 -> 100 3-7x; PgQ at many clients
                        # grows much more, as its empty turns go away)
                        est = cells[(variant, method, clients, b)]["jobs_per_s"] * (batch / b) ** 0.85
                    else:
                        est = GUESS.get(variant, GUESS["on"]).get(batch, 50000)
                        if method == "floor":
                            est = 0     # it loads nothing
                        if method == "pgq":
                            est = min(est, 1500 * batch)
                    pool = int(est * ARGS.duration * 1.3) + 4 * clients * batch + 2000
                    if method == "floor":
                        pool = 0
                    what = "%s c=%d b=%d sync=%s" % (method, clients, batch, variant)
                    cell = retrying(what, run_cell, variant, method, clients, batch, pool)
                    if cell["dry"]:
                        log("%s c=%d b=%d came near the end of its pool of %d; again with more"
                            % (method, clients, batch, pool))
                        pool = max(int(pool * 4), int(cell["jobs_per_s"] * ARGS.duration * 3))
                        cell = retrying(what, run_cell, variant, method, clients, batch, pool)
                    cells[(variant, method, clients, batch)] = cell
                    RESULTS["cells"].append(cell)
                    rates[key] = (cell["jobs_per_s"], clients)
                    log("%-15s sync=%-3s c=%d b=%-3d %9s jobs/s  %6s B/job  pool %d (load %.1fs)%s"
                        % (method, variant, clients, batch, fmt_rate(cell["jobs_per_s"]),
                           "%.0f" % cell["wal_per_job"] if cell["wal_per_job"] else "-",
                           pool, cell["load_s"],
                           "  [" + "; ".join(cell["notes"]) + "]" if cell["notes"] else ""))
        print_tables(variant, cells)
    return cells


def section(variant):
    return "%s profile, synchronous_commit = %s" % (ARGS.profile or "tuned", sync_label(variant))


def print_tables(variant, cells):
    methods = ARGS.methods
    say()
    say("### %s: jobs/s end to end (ratio to the baseline of the same flow)"
        % section(variant))
    say()
    say("| batch | clients | " + " | ".join(METHODS[m][1] for m in methods) + " |")
    say("|---:|---:|" + "---:|" * len(methods))
    for batch in ARGS.batches:
        for clients in sorted(ARGS.clients):
            out = []
            for m in methods:
                c = cells.get((variant, m, clients, batch))
                if not c:
                    out.append("-")
                    continue
                s = fmt_rate(c["jobs_per_s"])
                ref = METHODS[m][3]
                rc = cells.get((variant, ref, clients, batch)) if ref else None
                if rc and rc["jobs_per_s"]:
                    s += " (%.2f×)" % (c["jobs_per_s"] / rc["jobs_per_s"])
                if c["dry"] or c["notes"]:
                    s += " !"
                out.append(s)
            say("| %d | %d | %s |" % (batch, clients, " | ".join(out)))
    say()
    say("### %s: WAL bytes per job" % section(variant))
    say()
    say("| batch | clients | " + " | ".join(METHODS[m][1] for m in methods) + " |")
    say("|---:|---:|" + "---:|" * len(methods))
    for batch in ARGS.batches:
        for clients in sorted(ARGS.clients):
            out = []
            for m in methods:
                c = cells.get((variant, m, clients, batch))
                out.append("%.0f" % c["wal_per_job"] if c and c["wal_per_job"] else "-")
            say("| %d | %d | %s |" % (batch, clients, " | ".join(out)))
    say()
    say("### %s: table + index size, MB: before run → after run "
        "(jobs loaded before the run)" % section(variant))
    say()
    say("| batch | clients | " + " | ".join(METHODS[m][1] for m in methods) + " |")
    say("|---:|---:|" + "---:|" * len(methods))
    for batch in ARGS.batches:
        for clients in sorted(ARGS.clients):
            out = []
            for m in methods:
                c = cells.get((variant, m, clients, batch))
                out.append("%s → %s (%s)" % (mb(c["size_before"]), mb(c["size_after"]),
                                             "{:,}".format(c["pool"])) if c else "-")
            say("| %d | %d | %s |" % (batch, clients, " | ".join(out)))
    notes = [c for c in RESULTS["cells"] if c["variant"] == variant and (c["dry"] or c["notes"])]
    if notes:
        say()
        for c in notes:
            say("! %s c=%d b=%d: %s" % (c["method"], c["clients"], c["batch"],
                                         "; ".join(c["notes"] + (["pool ran low (%d left)" % c["left"]]
                                                                 if c["dry"] else []))))
    print_editions(variant, cells)


def print_editions(variant, cells):
    """The portable edition's jobs/s as a ratio to the baseline of the same
    flow and to the C edition, each run on the same server in this run."""
    pairs = [(m, ref) for m in ARGS.methods if edition(m) == "portable"
             for ref in (METHODS[m][3], m.replace("portable", "claimq"))
             if ref in ARGS.methods]
    if not pairs:
        return
    say()
    say("### %s: the portable edition's jobs/s as a ratio to the baseline and to the C edition"
        % section(variant))
    say()
    say("| batch | clients | " + " | ".join("%s / %s" % (METHODS[m][1], METHODS[r][1])
                                          for m, r in pairs) + " |")
    say("|---:|---:|" + "---:|" * len(pairs))
    for batch in ARGS.batches:
        for clients in sorted(ARGS.clients):
            out = []
            for m, r in pairs:
                a, b = cells.get((variant, m, clients, batch)), cells.get((variant, r, clients, batch))
                out.append("%.2f×" % (a["jobs_per_s"] / b["jobs_per_s"])
                           if a and b and b["jobs_per_s"] else "-")
            say("| %d | %d | %s |" % (batch, clients, " | ".join(out)))


# ---------------------------------------------------------------------------
# Backlog: claims must not visit scheduled, dead or other queues' rows.

def ensure_queue(name):
    if not q("SELECT 1 FROM claimq.queue WHERE name = %s", (name,)):
        DB.execute("SELECT claimq.create_queue(%s)", (name,))


def claim_plans(queue, batch, calls):
    """auto_explain output (ANALYZE, BUFFERS) of claimq's claim statement
    for `calls` successive calls in one session, rolled back."""
    notices = []
    with connect() as c:
        c.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        c.execute("LOAD 'auto_explain'")
        for s in ("auto_explain.log_min_duration = 0", "auto_explain.log_analyze = on",
                  "auto_explain.log_buffers = on", "auto_explain.log_nested_statements = on",
                  "auto_explain.log_level = notice", "client_min_messages = notice"):
            c.execute("SET " + s)
        c.execute("BEGIN")
        for _ in range(calls):
            c.execute("SELECT count(*) FROM claimq.claim(%s, %s)", (queue, batch)).fetchall()
        c.execute("ROLLBACK")
    return [n for n in notices if "WITH RECURSIVE prio" in n]


def plan_text(notice):
    """The plan part of an auto_explain message (the query text is one line)."""
    lines = notice.splitlines()
    k = next((i for i, l in enumerate(lines) if l.startswith("Query Text:")), -1)
    return "\n".join(lines[k + 1:])


def plan_kind(plan):
    # A custom plan shows the call's time as a literal in the run_at bound.
    return "custom" if re.search(r"run_at <= '\d{4}-", plan) else "generic"


def load_backlog(method, n):
    """n jobs in the method's table: half ready in the measured queue, a
    sixth each scheduled for tomorrow, dead, and ready in another queue."""
    ready, rest = n // 2, n // 6
    table = tables_of(method)[0]

    def load(count, state="pending", run_at=None, other_queue=False):
        if on_bench_job(method):
            DB.execute("SELECT bench.load_jobs(%s, %s, %s, %s)",
                       (count, state, run_at, 2 if other_queue else 1))
        else:
            DB.execute("SELECT bench.load_claimq(%s, %s, %s, %s)",
                       ("other" if other_queue else "bench", count, state, run_at))

    DB.execute("TRUNCATE " + table)
    DB.execute("CHECKPOINT")
    tomorrow = q("SELECT now() + interval '1 day'")
    load(ready)
    load(rest, run_at=tomorrow)
    load(rest, "dead")
    load(rest, other_queue=True)
    DB.execute("VACUUM (ANALYZE) " + table)
    return ready


def ready_count(method):
    if on_bench_job(method):
        return q("SELECT count(*) FROM bench.job WHERE queue_id = 1 AND state = 'pending'"
                 " AND run_at <= now()")
    return q("SELECT count(*) FROM claimq.job WHERE state = 'pending' AND queue_id ="
             " (SELECT queue_id FROM claimq.queue WHERE name = 'bench') AND run_at <= now()")


def run_backlog():
    """Each flow of claimq and of the baseline on a small queue, then on
    backlogs of 0.3 M and 3 M jobs (half of them ready in the queue, the
    rest scheduled, dead or in another queue).  On a backlog each flow runs
    a fixed number of transactions (a third of the ready jobs), so that
    no run comes near the end of its jobs however fast it goes."""
    sizes = [300000] if ARGS.mode == "quick" else [300000, 3000000]
    clients, batch = 4, 10
    flows = ("claimq-tx", "baseline-tx", "claimq-lease", "baseline-lease")
    set_sync(PART_SYNC)
    ensure_queue("other")
    say()
    say("== backlog: %d clients, batch %d, synchronous_commit = %s; a small queue, then %s jobs"
        " (half ready in the queue, a sixth each scheduled for tomorrow, dead, and ready in"
        " another queue)" % (clients, batch, sync_label(PART_SYNC),
                            " and ".join("{:,}".format(n) for n in sizes)))
    res = {}
    for method in flows:
        res[(method, "small")] = run_cell(PART_SYNC, method, clients, batch,
                                          int(60000 * ARGS.duration) + 5000)
    plans = []
    for n in sizes:
        for method in flows:
            if method in ("claimq-tx", "baseline-tx"):
                t0 = time.time()
                ready = load_backlog(method, n)
                log("backlog of %d loaded for %s in %.1fs" % (n, METHODS[method][1], time.time() - t0))
                if method == "claimq-tx" and n == sizes[-1]:
                    plans = claim_plans("bench", batch, 7)
            before = ready_count(method)
            l0 = lsn()
            r = pgbench_result(pgbench(METHODS[method][0], clients, None, batch,
                                       transactions=max(1, ready // (3 * clients * batch))))
            l1 = lsn()
            jobs = before - ready_count(method)
            res[(method, n)] = {"jobs_per_s": jobs / r["seconds"], "wal_per_job": (l1 - l0) / jobs,
                                "latency_ms": r["latency_ms"], "jobs": jobs}
            DB.execute("VACUUM " + tables_of(method)[0])
        DB.execute("TRUNCATE claimq.job")
        DB.execute("TRUNCATE bench.job")
    say()
    say("| flow | small queue jobs/s | backlog | jobs/s | vs small queue | vs baseline on the same"
        " backlog | WAL B/job small → backlog |")
    say("|---|---:|---:|---:|---:|---:|---:|")
    for method in flows:
        s = res[(method, "small")]
        for n in sizes:
            b = res[(method, n)]
            ref = METHODS[method][3]
            say("| %s | %s | %s | %s | %.2f× | %s | %.0f → %.0f |" % (
                METHODS[method][1], fmt_rate(s["jobs_per_s"]), "{:,}".format(n),
                fmt_rate(b["jobs_per_s"]), b["jobs_per_s"] / s["jobs_per_s"],
                "%.2f×" % (b["jobs_per_s"] / res[(ref, n)]["jobs_per_s"]) if ref else "-",
                s["wal_per_job"], b["wal_per_job"]))
    if plans:
        say()
        for title, p in (("call %d of %d in one session" % (len(plans), len(plans)), plans[-1]),
                         ("first call of the session", plans[0])):
            say("Plan of claimq's claim statement on the %s backlog, %s (auto_explain with "
                "ANALYZE and BUFFERS; %s plan):" % ("{:,}".format(sizes[-1]), title,
                                                  plan_kind(plan_text(p))))
            say()
            say("```")
            for line in plan_text(p).splitlines():
                say(line)
            say("```")
            say()
    RESULTS["extras"]["backlog"] = {"%s/%s" % k: {"jobs_per_s": v["jobs_per_s"],
                                                  "wal_per_job": v["wal_per_job"]}
                                    for k, v in res.items()}
    RESULTS["extras"]["backlog_plans"] = plans


# ---------------------------------------------------------------------------
# Flow control's cost.

def run_groups():
    """Claims of the jobs no limit holds back, on a queue whose 2,000
    groups (200,000 jobs) are all blocked behind a running head, against
    the same claims on a plain queue holding the same free jobs; then the
    lease flow (claim, complete) on both, and on a queue with queue-wide
    limits it never reaches.  The free jobs have no group key: on a queue
    with group limits every job of a group beyond its limit waits, so the
    free work of such a queue is its ungrouped jobs and the heads of its
    free groups.  Each flow runs a fixed number of transactions, the
    measured queues alternating (plain, limited, limited, plain)."""
    free = 60000 if ARGS.mode == "quick" else 240000
    clients, batch = 4, 10
    txns = free // (3 * clients * batch)
    set_sync(PART_SYNC)
    DB.execute("TRUNCATE claimq.job")
    DB.execute("DELETE FROM claimq.job_group")
    for name, opts in (("flow1", ""), ("flow2", ", group_fifo => true"),
                       ("flow3", ", max_in_flight => 100000, rate_limit => 1000000")):
        if not q("SELECT 1 FROM claimq.queue WHERE name = %s", (name,)):
            DB.execute("SELECT claimq.create_queue(%%s%s)" % opts, (name,))
    t0 = time.time()
    DB.execute("""
        INSERT INTO claimq.job (queue_id, state, run_at, enqueued_at, expires_at,
                                attempts, token, group_key, held, payload)
        SELECT q.queue_id,
               CASE WHEN i % 100 = 0 THEN 'running' ELSE 'pending' END,
               clock_timestamp(), clock_timestamp(),
               CASE WHEN i % 100 = 0 THEN now() + interval '1 day' END,
               CASE WHEN i % 100 = 0 THEN 1 ELSE 0 END,
               CASE WHEN i % 100 = 0 THEN i END,
               'g' || (i / 100), i % 100 <> 0, bench.payload(i)
          FROM claimq.queue q, generate_series(0, 199999) i
         WHERE q.name = 'flow2'""")
    DB.execute("INSERT INTO claimq.job_group (queue_id, group_key)"
               " SELECT DISTINCT queue_id, group_key FROM claimq.job WHERE group_key IS NOT NULL")
    blocked = q("SELECT count(*) FROM claimq.group_stats WHERE queue = 'flow2' AND blocked")
    res = {}

    def load_free():
        DB.execute("DELETE FROM claimq.job WHERE group_key IS NULL")
        for name in ("flow1", "flow2", "flow3"):
            DB.execute("SELECT bench.load_claimq(%s, %s)", (name, free))
        DB.execute("VACUUM (ANALYZE) claimq.job")

    for flow, script, pairs in (("claim only", "flow_claim.sql", (1, 2, 2, 1)),
                                ("lease", "flow_lease.sql", (1, 2, 3, 3, 2, 1))):
        load_free()
        for qn in pairs:
            l0 = lsn()
            r = pgbench_result(pgbench(script, clients, None, batch, extra=("-D", "q=%d" % qn),
                                       transactions=txns // 2))
            jobs = txns // 2 * clients * batch
            cell = res.setdefault((flow, qn), {"seconds": 0.0, "jobs": 0, "wal": 0})
            cell["seconds"] += r["seconds"]
            cell["jobs"] += jobs
            cell["wal"] += lsn() - l0
    log("groups loaded and run in %.1fs" % (time.time() - t0))
    say()
    say("== flow control: %d clients, batch %d, synchronous_commit = %s; %s free jobs per"
        " queue; flow2 also holds 200,000 jobs in %s groups blocked behind a running head"
        % (clients, batch, sync_label(PART_SYNC), "{:,}".format(free), "{:,}".format(blocked)))
    say()
    say("| flow | queue | jobs/s | vs plain | WAL B/job |")
    say("|---|---|---:|---:|---:|")
    labels = {1: "flow1: plain", 2: "flow2: group_fifo, 2,000 blocked groups",
              3: "flow3: max_in_flight and rate_limit, never reached"}
    for (flow, qn), cell in sorted(res.items()):
        rate = cell["jobs"] / cell["seconds"]
        plain = res[(flow, 1)]["jobs"] / res[(flow, 1)]["seconds"]
        say("| %s | %s | %s | %.2f× | %.0f |" % (flow, labels[qn], fmt_rate(rate), rate / plain,
                                                cell["wal"] / cell["jobs"]))
    RESULTS["extras"]["groups"] = {"%s/flow%d" % k: v["jobs"] / v["seconds"] for k, v in res.items()}
    DB.execute("TRUNCATE claimq.job")
    DB.execute("DELETE FROM claimq.job_group")


# ---------------------------------------------------------------------------
# Fairness: a fair queue's lease flow against the same jobs in a plain queue.

def run_fair():
    """The lease flow (claim, then complete) of a fair queue whose 1, 100
    and 1,000 tenants are all backlogged, against the same jobs in a plain
    queue, batch 1, 10 and 100, 4 clients; each pair runs a fixed number of
    transactions, the two queues alternating (plain, fair, fair, plain)."""
    clients = 4
    per_batch = {1: 2000, 10: 800, 100: 100} if ARGS.mode == "quick" else \
        {1: 8000, 10: 3000, 100: 400}
    set_sync(PART_SYNC)
    for name, opts in (("fair1", ""), ("fair2", ", fair => true")):
        if not q("SELECT 1 FROM claimq.queue WHERE name = %s", (name,)):
            DB.execute("SELECT claimq.create_queue(%%s%s)" % opts, (name,))
    t0 = time.time()
    res = {}
    for tenants in (1, 100, 1000):
        for batch in (1, 10, 100):
            txns = per_batch[batch] // 2
            jobs = txns * clients * batch
            DB.execute("TRUNCATE claimq.job")
            DB.execute("DELETE FROM claimq.fair_share")
            DB.execute("DELETE FROM claimq.fair_level")
            DB.execute("DELETE FROM claimq.fair_charge")
            # Twice what both runs of a queue take, spread over the tenants.
            for name in ("fair1", "fair2"):
                DB.execute("""
                    SELECT count(*) FROM generate_series(1, %s) g,
                           claimq.enqueue_many(%s, array_fill(bench.payload(g::bigint), ARRAY[%s]),
                                               group_keys => array_fill('t' || g, ARRAY[%s]))""",
                           (tenants, name, 4 * jobs // tenants + batch,
                            4 * jobs // tenants + batch))
            DB.execute("VACUUM (ANALYZE) claimq.job")
            for qn in (1, 2, 2, 1):
                l0 = lsn()
                r = pgbench_result(pgbench("fair_lease.sql", clients, None, batch,
                                           extra=("-D", "q=%d" % qn), transactions=txns))
                cell = res.setdefault((tenants, batch, qn), {"seconds": 0.0, "jobs": 0, "wal": 0})
                cell["seconds"] += r["seconds"]
                cell["jobs"] += jobs
                cell["wal"] += lsn() - l0
    log("fair queues loaded and run in %.1fs" % (time.time() - t0))
    say()
    say("== fair queues: lease flow, %d clients, synchronous_commit = %s; every tenant"
        " backlogged" % (clients, sync_label(PART_SYNC)))
    say()
    say("| tenants | batch | plain jobs/s | fair jobs/s | fair vs plain | fair WAL B/job |")
    say("|---:|---:|---:|---:|---:|---:|")
    for tenants in (1, 100, 1000):
        for batch in (1, 10, 100):
            plain = res[(tenants, batch, 1)]
            fair = res[(tenants, batch, 2)]
            pr = plain["jobs"] / plain["seconds"]
            fr = fair["jobs"] / fair["seconds"]
            say("| %s | %d | %s | %s | %.2f× | %.0f |" % ("{:,}".format(tenants), batch, fmt_rate(pr),
                                                      fmt_rate(fr), fr / pr, fair["wal"] / fair["jobs"]))
    RESULTS["extras"]["fair"] = {"%d/%d/q%d" % k: v["jobs"] / v["seconds"] for k, v in res.items()}
    DB.execute("TRUNCATE claimq.job")
    DB.execute("DELETE FROM claimq.fair_share")
    DB.execute("DELETE FROM claimq.fair_level")
    DB.execute("DELETE FROM claimq.fair_charge")


def run_fair_ceiling():
    """The ceiling of a fair claim: a hand-written lease flow (the
    baseline's) over 1,000 backlogged tenants, taking the queue's oldest
    jobs by one range of its index against taking each job from its own
    tenant (a probe per job), the tenants chosen for free; batch 1, 10 and
    100, 4 clients, a fixed number of transactions, the two alternating
    (range, tenant, tenant, range), the jobs loaded afresh per batch."""
    clients, tenants = 4, 1000
    per_batch = {1: 2000, 10: 800, 100: 100} if ARGS.mode == "quick" else \
        {1: 8000, 10: 3000, 100: 400}
    set_sync(PART_SYNC)
    t0 = time.time()
    res = {}
    for batch in (1, 10, 100):
        txns = per_batch[batch] // 2
        jobs = txns * clients * batch
        DB.execute("TRUNCATE bench.tjob")
        # What the four runs take, and as much again, spread evenly.
        DB.execute("""
            INSERT INTO bench.tjob (queue_id, state, run_at, enqueued_at, payload, group_key)
            SELECT 1, 'pending', clock_timestamp(), clock_timestamp(), bench.payload(i),
                   't' || (i %% %s)
              FROM generate_series(1, %s) i""", (tenants, 8 * jobs + tenants * batch))
        DB.execute("VACUUM (ANALYZE) bench.tjob")
        DB.execute("CHECKPOINT")
        for script in ("tenant_range.sql", "tenant_pick.sql", "tenant_pick.sql", "tenant_range.sql"):
            r = pgbench_result(pgbench(script, clients, None, batch,
                                       extra=("-D", "tenants=%d" % tenants), transactions=txns))
            cell = res.setdefault((script, batch), {"seconds": 0.0, "jobs": 0})
            cell["seconds"] += r["seconds"]
            cell["jobs"] += jobs
    log("fair ceiling loaded and run in %.1fs" % (time.time() - t0))
    say()
    say("== the ceiling of a fair claim: a hand-written lease flow over %s backlogged tenants,"
        " %d clients, synchronous_commit = %s" % ("{:,}".format(tenants), clients, sync_label(PART_SYNC)))
    say()
    say("| batch | by range jobs/s | by tenant jobs/s | by tenant vs by range |")
    say("|---:|---:|---:|---:|")
    for batch in (1, 10, 100):
        rr = res[("tenant_range.sql", batch)]
        tr = res[("tenant_pick.sql", batch)]
        a, b = rr["jobs"] / rr["seconds"], tr["jobs"] / tr["seconds"]
        say("| %d | %s | %s | %.2f× |" % (batch, fmt_rate(a), fmt_rate(b), b / a))
    RESULTS["extras"]["fair-ceiling"] = {"%s/%d" % k: v["jobs"] / v["seconds"] for k, v in res.items()}
    DB.execute("TRUNCATE bench.tjob")


# ---------------------------------------------------------------------------
# Trace context: what a job's headers cost its enqueue and its claim.

def run_headers():
    """Jobs with 200 bytes of headers (a traceparent and a tracestate, as
    the worker libraries write them) against the same jobs without, in two
    queues of one server: enqueue_many, then the lease flow (claim, then
    complete), batch 1, 10 and 100, 4 clients; each pair runs a fixed
    number of transactions, the two queues alternating (none, headers,
    headers, none)."""
    clients = 4
    per_batch = {1: 2000, 10: 800, 100: 100} if ARGS.mode == "quick" else \
        {1: 8000, 10: 3000, 100: 400}
    set_sync(PART_SYNC)
    for name in ("hdr0", "hdr1"):
        if not q("SELECT 1 FROM claimq.queue WHERE name = %s", (name,)):
            DB.execute("SELECT claimq.create_queue(%s)", (name,))
    # 200 bytes as text (headers::text), NULL for queue hdr0.
    DB.execute("""
        CREATE OR REPLACE FUNCTION bench.trace_headers(q integer) RETURNS jsonb
        LANGUAGE sql IMMUTABLE AS $$
            SELECT CASE WHEN q = 1 THEN jsonb_build_object(
                'traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
                'tracestate', 'vendor=' || repeat('x', 101)) END
        $$""")
    assert q("SELECT octet_length(bench.trace_headers(1)::text)") == 200
    t0 = time.time()
    res = {}

    def runs(flow, script, batch, txns):
        # The two queues in turn: none, headers, headers, none.
        for qn in (0, 1, 1, 0):
            l0 = lsn()
            r = pgbench_result(pgbench(script, clients, None, batch,
                                       extra=("-D", "q=%d" % qn), transactions=txns))
            cell = res.setdefault((flow, batch, qn), {"seconds": 0.0, "jobs": 0, "wal": 0})
            cell["seconds"] += r["seconds"]
            cell["jobs"] += txns * clients * batch
            cell["wal"] += lsn() - l0

    for batch in (1, 10, 100):
        txns = per_batch[batch] // 2
        DB.execute("TRUNCATE claimq.job")
        DB.execute("CHECKPOINT")
        runs("enqueue", "headers_enqueue.sql", batch, txns)
        DB.execute("VACUUM (ANALYZE) claimq.job")
        runs("claim", "headers_lease.sql", batch, txns)
    log("headers loaded and run in %.1fs" % (time.time() - t0))
    say()
    say("== trace context: jobs with 200 bytes of headers against the same jobs without,"
        " %d clients, synchronous_commit = %s" % (clients, sync_label(PART_SYNC)))
    say()
    say("| flow | batch | no headers jobs/s | headers jobs/s | headers vs none |"
        " WAL B/job none | WAL B/job headers |")
    say("|---|---:|---:|---:|---:|---:|---:|")
    for flow, label in (("enqueue", "enqueue_many"), ("claim", "claim + complete")):
        for batch in (1, 10, 100):
            none = res[(flow, batch, 0)]
            hdr = res[(flow, batch, 1)]
            nr = none["jobs"] / none["seconds"]
            hr = hdr["jobs"] / hdr["seconds"]
            say("| %s | %d | %s | %s | %.2f× | %.0f | %.0f |" % (
                label, batch, fmt_rate(nr), fmt_rate(hr), hr / nr,
                none["wal"] / none["jobs"], hdr["wal"] / hdr["jobs"]))
    RESULTS["extras"]["headers"] = {"%s/%d/q%d" % k: v["jobs"] / v["seconds"] for k, v in res.items()}
    DB.execute("TRUNCATE claimq.job")


# ---------------------------------------------------------------------------
# Workflows: what a finish costs with n jobs after it, and what a claim
# costs with a million jobs waiting in its queue.

def run_workflows():
    """Two measures of the C edition's workflows.  (1) The complete of one
    claimed job that n jobs (one enqueue_many) run after, for n = 0, 1, 100
    and 10,000: the statement and its commit, timed from the client, the
    median of several, and its cost per dependent over n = 0.  (2) The
    matrix's claim-and-complete transaction (claimq-tx, 4 clients, batch 10)
    on a queue whose jobs are all ready, with no other job, with 1,000,000
    jobs of the same queue waiting on a job that never finishes, and with
    1,000,000 dead jobs kept (the table's size without workflows): a fixed
    number of transactions per run, in the order none, waiting, dead, dead,
    waiting, none."""
    set_sync(PART_SYNC)
    DB.execute("TRUNCATE claimq.job, claimq.job_after")
    for name in ("wf_parent", "wf_after"):
        ensure_queue(name)
    t0 = time.time()
    finish = {}
    for n in (0, 1, 100, 10000):
        times = []
        for _ in range(3 if n >= 10000 else (5 if ARGS.mode == "quick" else 15)):
            parent = q("SELECT claimq.enqueue('wf_parent', '{}')")
            if n:
                q("SELECT count(*) FROM claimq.enqueue_many('wf_after', array_fill('{}'::jsonb, ARRAY[%s]),"
                  " after => ARRAY[%s]::bigint[])", (n, parent))
            job, token = rows("SELECT job_id, token FROM claimq.claim('wf_parent', start => true)")[0]
            start = time.perf_counter()
            with DB.transaction():
                ok = q("SELECT claimq.complete(%s::bigint, %s::bigint)", (job, token))
            times.append(time.perf_counter() - start)
            if not ok:
                raise RuntimeError("bench: the parent's complete was refused")
            pending = q("SELECT count(*) FROM claimq.job WHERE queue_id ="
                        " (SELECT queue_id FROM claimq.queue WHERE name = 'wf_after') AND state = 'pending'")
            if pending != n:
                raise RuntimeError("bench: %d of %d dependents pending after the complete" % (pending, n))
            DB.execute("TRUNCATE claimq.job, claimq.job_after")
        finish[n] = statistics.median(times)

    # (2): the same ready jobs, with no other job, with a million waiting,
    # and with a million dead ones (kept: rows of the same size that no claim
    # reads either, so what the table's size alone costs).
    clients, batch = 4, 10
    ready = 40000 if ARGS.mode == "quick" else 160000
    txns = ready // (3 * clients * batch)
    others = 1000000

    def load(kind):
        DB.execute("TRUNCATE claimq.job, claimq.job_after")
        DB.execute("SELECT bench.load_claimq('bench', %s)", (ready,))
        if kind == "waiting":
            p = q("SELECT claimq.enqueue('wf_parent', '{}')")
            q("SELECT claimq.link_after(ARRAY[%s]::bigint[])", (p,))
            DB.execute("""
                INSERT INTO claimq.job (queue_id, state, run_at, enqueued_at, payload,
                                        after_set, after_count, after_failed)
                SELECT q.queue_id, 'waiting', clock_timestamp(), clock_timestamp(),
                       bench.payload(i), (SELECT max(set_id) FROM claimq.job_after), 1, 'cancel'
                  FROM claimq.queue q, generate_series(1, %s) i
                 WHERE q.name = 'bench'""", (others,))
        elif kind == "dead":
            DB.execute("""
                INSERT INTO claimq.job (queue_id, state, run_at, enqueued_at, payload,
                                        finished_at, attempts, last_error)
                SELECT q.queue_id, 'dead', clock_timestamp(), clock_timestamp(),
                       bench.payload(i), clock_timestamp(), 1, 'failed'
                  FROM claimq.queue q, generate_series(1, %s) i
                 WHERE q.name = 'bench'""", (others,))
        DB.execute("VACUUM (ANALYZE) claimq.job")

    claims = {}
    for kind in ("none", "waiting", "dead", "dead", "waiting", "none"):
        load(kind)
        r = pgbench_result(pgbench("claimq_tx.sql", clients, None, batch, transactions=txns))
        cell = claims.setdefault(kind, {"seconds": 0.0, "jobs": 0})
        cell["seconds"] += r["seconds"]
        cell["jobs"] += txns * clients * batch
    log("workflows measured in %.1fs" % (time.time() - t0))
    say()
    say("== workflows, synchronous_commit = %s" % sync_label(PART_SYNC))
    say()
    say("| complete of a job with n jobs after it | ms (median) | over n = 0, per job after it |")
    say("|---|---:|---:|")
    for n, t in sorted(finish.items()):
        say("| n = %s | %.2f | %s |" % ("{:,}".format(n), t * 1000,
                                       "" if n == 0 else "%.1f µs" % ((t - finish[0]) * 1e6 / n)))
    say()
    say("| claim and complete, %d clients, batch %d, %s ready jobs | jobs/s | vs no other job |"
        % (clients, batch, "{:,}".format(ready)))
    say("|---|---:|---:|")
    none = claims["none"]["jobs"] / claims["none"]["seconds"]
    label = {"none": "no other job in the table",
             "waiting": "%s jobs waiting in the queue" % "{:,}".format(others),
             "dead": "%s dead jobs kept in the queue" % "{:,}".format(others)}
    for kind in ("none", "waiting", "dead"):
        cell = claims[kind]
        rate = cell["jobs"] / cell["seconds"]
        say("| %s | %s | %.2f× |" % (label[kind], fmt_rate(rate), rate / none))
    RESULTS["extras"]["workflows"] = {
        "finish_ms": {str(n): t * 1000 for n, t in finish.items()},
        "claim_jobs_per_s": {str(w): c["jobs"] / c["seconds"] for w, c in claims.items()}}
    DB.execute("TRUNCATE claimq.job, claimq.job_after")


# ---------------------------------------------------------------------------
# Wake-up latency of claim(..., wait => '5 seconds').

def run_latency():
    trials = 50 if ARGS.mode == "quick" else 200
    set_sync(PART_SYNC)
    ensure_queue("lat")
    DB.execute("DELETE FROM claimq.job WHERE queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'lat')")
    worker = connect()
    producer = connect()
    wpid = worker.info.backend_pid
    box = {}
    go = threading.Event()
    done = threading.Event()

    def work():
        while True:
            go.wait()
            go.clear()
            if box.get("stop"):
                return
            row = worker.execute("SELECT job_id, token FROM claimq.claim('lat', 1, wait => '5 seconds')").fetchone()
            box["t_return"] = time.perf_counter()
            box["row"] = row
            done.set()

    th = threading.Thread(target=work, daemon=True)
    th.start()
    sent, acked, enq = [], [], []
    misses = 0
    for _ in range(trials):
        done.clear()
        go.set()
        # Wait until the worker sleeps inside claim().
        deadline = time.time() + 5
        while time.time() < deadline:
            w = q("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s AND state = 'active'", (wpid,))
            if w == "Extension":
                break
            time.sleep(0.001)
        time.sleep(random.uniform(0.0, 0.005))
        t_send = time.perf_counter()
        producer.execute("SELECT claimq.enqueue('lat', '{\"n\": 1}')")
        t_ack = time.perf_counter()
        done.wait(10)
        row = box.get("row")
        if not row:
            misses += 1
            continue
        worker.execute("SELECT claimq.complete(%s, %s)", row)
        sent.append((box["t_return"] - t_send) * 1000)
        acked.append((box["t_return"] - t_ack) * 1000)
        enq.append((t_ack - t_send) * 1000)
    box["stop"] = True
    go.set()
    th.join(2)
    worker.close()
    producer.close()

    def pct(v, p):
        v = sorted(v)
        return v[min(len(v) - 1, int(math.ceil(p / 100.0 * len(v))) - 1)]

    say()
    say("== wake-up latency: claim('lat', 1, wait => '5 seconds') waiting, then one enqueue "
        "commits in another session (%d trials, synchronous_commit = %s)"
        % (trials, sync_label(PART_SYNC)))
    say()
    say("| measured from | p50 ms | p99 ms | max ms |")
    say("|---|---:|---:|---:|")
    say("| enqueue sent (before its commit) | %.2f | %.2f | %.2f |" % (pct(sent, 50), pct(sent, 99), max(sent)))
    say("| enqueue commit acknowledged | %.2f | %.2f | %.2f |" % (pct(acked, 50), pct(acked, 99), max(acked)))
    say("| (the enqueue call itself) | %.2f | %.2f | %.2f |" % (pct(enq, 50), pct(enq, 99), max(enq)))
    if misses:
        say("! %d trials returned no job within the wait" % misses)
    RESULTS["extras"]["latency"] = {"from_send_ms": sent, "from_ack_ms": acked, "misses": misses}


# ---------------------------------------------------------------------------
# Reclaim of 100,000 expired claims in one call.

def run_reclaim():
    """In a database the background reclaimer does not serve (it serves only
    claimq.databases = bench), so that nothing reclaims the claims first."""
    n = 100000
    with connect() as c:
        if not c.execute("SELECT 1 FROM pg_database WHERE datname = 'bench_reclaim'").fetchone():
            c.execute("CREATE DATABASE bench_reclaim")
    rdb = psycopg.connect("dbname=bench_reclaim", autocommit=True)
    rq = lambda sql, p=None: rdb.execute(sql, p).fetchone()[0]
    if PART_SYNC != "default":
        rdb.execute("SET synchronous_commit = %s" % PART_SYNC)
    if not rq("SELECT count(*) FROM pg_extension WHERE extname = 'claimq'"):
        rdb.execute("CREATE EXTENSION claimq")
        rdb.execute("SELECT claimq.create_queue('rq')")
        if ARGS.profile != "default":
            rdb.execute("ALTER TABLE claimq.job SET (autovacuum_enabled = false)")
    rdb.execute("TRUNCATE claimq.job")
    rdb.execute("CHECKPOINT")
    for _ in range(n // 10000):
        rdb.execute("SELECT count(*) FROM claimq.enqueue_many('rq', ARRAY(SELECT jsonb_build_object("
                    "'task', 'send_email', 'user_id', i) FROM generate_series(1, 10000) i))")
    for _ in range(n // 10000):
        rdb.execute("SELECT count(*) FROM claimq.claim('rq', 10000, lease => '1 second')")
    rdb.execute("VACUUM (ANALYZE) claimq.job")
    while rq("SELECT max(expires_at) >= clock_timestamp() FROM claimq.job"):
        time.sleep(0.1)
    expired = rq("SELECT count(*) FROM claimq.job WHERE expires_at < clock_timestamp()")
    l0 = rq("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    # One call for all of them if max_jobs allows; else calls of the
    # largest max_jobs accepted until none is left, each timed.
    calls = []
    max_jobs = n
    while True:
        t0 = time.perf_counter()
        try:
            r = rdb.execute("SELECT coalesce(sum(released), 0) FROM claimq.reclaim('rq', %s)",
                            (max_jobs,)).fetchone()[0]
        except psycopg.errors.InvalidParameterValue:
            if max_jobs == 10000:
                raise
            max_jobs = 10000
            continue
        calls.append((time.perf_counter() - t0, int(r)))
        if r == 0 or sum(c[1] for c in calls) >= expired:
            break
    l1 = rq("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    left = rq("SELECT count(*) FROM claimq.job WHERE state = 'claimed'")
    rdb.execute("TRUNCATE claimq.job")
    rdb.close()
    calls = [c for c in calls if c[1] > 0]
    released = sum(c[1] for c in calls)
    total = sum(c[0] for c in calls)
    say()
    say("== reclaim: %s expired claims, claimq.reclaim('rq', max_jobs => %s) "
        "(in a database the background reclaimer does not serve)"
        % ("{:,}".format(expired), "{:,}".format(max_jobs)))
    say()
    if max_jobs < n:
        say("max_jobs above 10,000 is refused, so one call cannot reclaim all %s; "
            "calls of 10,000 until none is left:" % "{:,}".format(n))
        say()
    say("| calls | first call s (jobs) | all calls s | jobs/s | released | WAL B/job | claims left |")
    say("|---:|---:|---:|---:|---:|---:|---:|")
    say("| %d | %.3f (%s) | %.2f | %s | %s | %.0f | %d |" % (
        len(calls), calls[0][0], "{:,}".format(calls[0][1]), total,
        fmt_rate(released / total if total else 0), "{:,}".format(released),
        (l1 - l0) / released if released else 0, left))
    RESULTS["extras"]["reclaim"] = {"calls": calls, "released": released, "expired": expired,
                                    "wal_bytes": l1 - l0, "left": left, "max_jobs": max_jobs}


# ---------------------------------------------------------------------------
# Sustained: producers and consumers together for minutes.

# The sustained run's methods: what produces, what consumes, and, for the
# plain-SQL layouts, what reclaims (claimq's own reclaimer runs in the
# server); "matrix" is the matrix's method of the same flow and tables.
# "baseline" is the hand-written queue on the baseline's table, "hot" the
# same statements on the write-less layout's (bench.hjob, a lease row per
# claim call in bench.hlease): the two layouts compared by the same SQL,
# beside claimq on its own layout.
SUSTAIN = {
    "claimq": {"produce": "sustain_produce.sql", "consume": "sustain_consume.sql",
               "reclaim": None, "matrix": "claimq-lease", "seq": "claimq.job_id_seq"},
    "baseline": {"produce": "sustain_produce_baseline.sql",
                 "consume": "sustain_consume_baseline.sql",
                 "reclaim": "sustain_reclaim_baseline.sql", "matrix": "baseline-lease",
                 "seq": "bench.job_id_seq"},
    "hot": {"produce": "sustain_produce_hot.sql", "consume": "sustain_consume_hot.sql",
            "reclaim": "sustain_reclaim_hot.sql", "matrix": "hot", "seq": "bench.job_id_seq"},
}


def run_sustained():
    """Producers at a fixed rate and consumers together, autovacuum on, for
    each method of --sustain-methods, --sustain-rounds times, the order of
    the methods turned by one each round.  Every method of one invocation
    is offered the same rate."""
    set_sync(PART_SYNC)
    methods = ARGS.sustain_methods
    cons_clients, batch = 4, 10
    rate = ARGS.sustain_rate
    if not rate:
        # A share (--sustain-load) of what the slowest method's consumers
        # do alone.
        caps = {}
        for m in methods:
            cal = run_cell(PART_SYNC, SUSTAIN[m]["matrix"], cons_clients, batch, 150000)
            caps[m] = cal["jobs_per_s"]
            log("%s consumers alone: %s jobs/s" % (m, fmt_rate(caps[m])))
        rate = int(min(caps.values()) * ARGS.sustain_load)
        log("offering %d jobs/s" % rate)
    runs = []
    for r in range(ARGS.sustain_rounds):
        k = r % len(methods)
        for m in methods[k:] + methods[:k]:
            runs.append(sustained_once(m, rate, r + 1))
    say()
    say("### Sustained runs, %d jobs/s offered" % rate)
    say()
    say("| method | round | completed/s | last minute | most ready | ready at end "
        "| WAL B/job | server CPU ms per 1,000 jobs | heap-only updates | MB at end |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for x in runs:
        say("| %s | %d | %s | %s | %s | %s | %d | %.0f | %.0f%% | %s |" % (
            x["method"], x["round"], fmt_rate(x["completed_per_s"]),
            fmt_rate(x["per_minute"][-1]["done"]) if x["per_minute"] else "-",
            "{:,}".format(x["most_ready"]), "{:,}".format(x["ready_at_end"]),
            x["wal_per_job"], x["cpu_ms_per_1000"], 100 * x["hot_share"],
            mb(x["size_at_end"])))
    RESULTS["extras"]["sustained_runs"] = runs
    # The charts draw claimq's first run, as before there were several.
    first = [x for x in runs if x["method"] == "claimq"] or runs
    RESULTS["extras"]["sustained"] = first[0]


def sustained_once(method, rate, round_no):
    m = dict(SUSTAIN[method])
    # The matrix method's tables, the job table first; the queue's row stays.
    m["tables"] = [t for t in tables_of(m["matrix"]) if t != "claimq.queue"]
    m["job"] = m["tables"][0]
    secs = ARGS.sustain_seconds
    prod_clients, cons_clients, batch = 2, 4, 10
    for t in m["tables"]:
        DB.execute("ALTER TABLE %s SET (autovacuum_enabled = true)" % t)
    for t in m["tables"]:
        DB.execute("TRUNCATE %s" % t)
    if method == "claimq":
        DB.execute("SELECT bench.load_claimq('bench', 10000)")
        qid = q("SELECT queue_id FROM claimq.queue WHERE name = 'bench'")
    else:
        DB.execute("SELECT bench.load_jobs(10000, tab => %s)", (m["job"],))
        qid = 1
    for t in m["tables"]:
        DB.execute("VACUUM (ANALYZE) %s" % t)
    DB.execute("CHECKPOINT")
    say()
    say("== sustained (%s, round %d): %d s, %d producer clients offering %d jobs/s "
        "(batches of %d), %d consumer clients (claim %d%s, then complete, lease flow)%s; "
        "autovacuum on, synchronous_commit = %s"
        % (method, round_no, secs, prod_clients, rate, batch, cons_clients, batch,
           " with wait => '1 second'" if method == "claimq"
           else ", 10 ms pause when none is ready",
           "" if method == "claimq" else "; a reclaimer once a second",
           sync_label(PART_SYNC)))
    size_sql = " + ".join("pg_total_relation_size('%s')" % t for t in m["tables"])
    done_sql = ("(SELECT completed FROM claimq.counters WHERE queue = 'bench'"
                " AND database = current_database())" if method == "claimq"
                else "(SELECT last_value FROM %s) - (SELECT count(*) FROM %s)"
                % (m["seq"], m["job"]))

    def sample():
        r = rows("SELECT %s, (SELECT last_value FROM %s),"
                 " (SELECT count(*) FROM %s WHERE queue_id = %%s AND state = 'pending'),"
                 " %s, pg_relation_size('%s'),"
                 " pg_current_wal_lsn() - '0/0'::pg_lsn,"
                 " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = '%s'::regclass),"
                 " (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = '%s'::regclass)"
                 % (done_sql, m["seq"], m["job"], size_sql, m["job"], m["job"], m["job"]),
                 (qid,))[0]
        hist = dict(rows("SELECT bucket, samples FROM claimq.latency_histogram()"
                         " WHERE queue = 'bench' AND kind = 'wait'")) if method == "claimq" else {}
        upd = rows("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                   " WHERE relid = '%s'::regclass" % m["job"])[0]
        return [time.time()] + [int(x or 0) for x in r] + [hist] + [int(x or 0) for x in upd]

    cpu0 = server_cpu()
    samples = [sample()]
    cons = pgbench(m["consume"], cons_clients, secs, batch, progress=60)
    prod = pgbench(m["produce"], prod_clients, secs, batch, rate=rate / batch)
    recl = pgbench(m["reclaim"], 1, secs, rate=1) if m["reclaim"] else None
    end = time.time() + secs + 2
    while time.time() < end:
        time.sleep(1)
        samples.append(sample())
    rc = pgbench_result(cons)
    pgbench_result(prod)
    if recl:
        pgbench_result(recl)
    samples.append(sample())
    cpu = server_cpu() - cpu0
    if ARGS.profile != "default":
        for t in m["tables"]:
            DB.execute("ALTER TABLE %s SET (autovacuum_enabled = false)" % t)
    prog = re.findall(r"progress: ([\d.]+) s, ([\d.]+) tps, lat ([\d.]+) ms", rc["output"])
    say()
    say("| minute | enqueued/s | completed/s | ready at end | job table MB (heap) at end | WAL MB | consumer txn ms | autovacuums |")
    say("|---:|---:|---:|---:|---:|---:|---:|---:|")
    t_start = samples[0][0]
    per_min = []
    for k in range(int(math.ceil(secs / 60.0))):
        a = min(samples, key=lambda s: abs(s[0] - (t_start + 60 * k)))
        b = min(samples, key=lambda s: abs(s[0] - (t_start + 60 * (k + 1))))
        dt = b[0] - a[0]
        if dt <= 0:
            continue
        lat = prog[k][2] if k < len(prog) else "-"
        row = {"enq": (b[2] - a[2]) / dt, "done": (b[1] - a[1]) / dt, "ready": b[3],
               "size": b[4], "heap": b[5], "wal": b[6] - a[6], "lat": lat, "av": b[8] - samples[0][8]}
        per_min.append(row)
        say("| %d | %s | %s | %s | %s (%s) | %s | %s | %d |" % (
            k + 1, fmt_rate(row["enq"]), fmt_rate(row["done"]), "{:,}".format(row["ready"]),
            mb(row["size"]), mb(row["heap"]), mb(row["wal"]), lat, row["av"]))
    if len(per_min) >= 2:
        f, l = per_min[0], per_min[-1]
        say()
        say("last minute vs first: completed/s %.2f×, table+index size %.2f×"
            % (l["done"] / f["done"] if f["done"] else float("nan"),
               l["size"] / f["size"] if f["size"] else float("nan")))
    # Per second, for the charts: the wait p99 of the claims of that second
    # from the difference of two readings of the histogram.
    per_sec = []
    for a, b in zip(samples, samples[1:]):
        dt = b[0] - a[0]
        if dt <= 0:
            continue
        delta = {k: v - a[9].get(k, 0) for k, v in b[9].items() if v > a[9].get(k, 0)}
        n, seen, p99 = sum(delta.values()), 0, None
        for bucket in sorted(delta):
            seen += delta[bucket]
            if seen >= 0.99 * n:
                p99 = (1.2 ** (bucket - 0.5)) / 1000.0 if bucket > 0 else 0.0
                break
        per_sec.append({"t": round(b[0] - samples[0][0], 1), "completed": (b[1] - a[1]) / dt,
                        "enqueued": (b[2] - a[2]) / dt, "ready": b[3],
                        "size_mb": b[4] / 1048576.0, "wait_p99_ms": p99})
    first, last = samples[0], samples[-1]
    completed = last[1] - first[1]
    return {"method": method, "round": round_no, "rate": rate, "per_minute": per_min,
            "per_second": per_sec, "samples": [x[:9] for x in samples],
            "completed_per_s": completed / (last[0] - first[0]),
            "most_ready": max(x[3] for x in samples), "ready_at_end": last[3],
            "wal_per_job": int((last[6] - first[6]) / completed) if completed else 0,
            "latency_ms": rc["latency_ms"], "size_at_end": last[4],
            "cpu_s": cpu, "cpu_ms_per_1000": 1e6 * cpu / completed if completed else 0.0,
            "hot_share": ((last[11] - first[11]) / float(last[10] - first[10])
                          if last[10] > first[10] else 0.0)}


def server_cpu():
    """CPU seconds the server has used so far: the postmaster's, its
    children's that have exited (cutime, cstime) and those alive.  Only the
    server's work, not pgbench's; autovacuum and the WAL writer included."""
    tick = os.sysconf("SC_CLK_TCK")
    datadir = q("SHOW data_directory")
    with open(os.path.join(datadir, "postmaster.pid")) as f:
        pm = int(f.readline())

    def stat(pid):
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()

    st = stat(pm)
    total = sum(int(x) for x in st[11:15])     # utime stime cutime cstime
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = stat(int(d))
        except OSError:
            continue
        if int(st[1]) == pm:
            total += int(st[11]) + int(st[12])
    return total / float(tick)


# ---------------------------------------------------------------------------

def header():
    settings = ["server_version", "shared_buffers", "max_wal_size", "checkpoint_timeout",
                "wal_level", "fsync", "full_page_writes", "synchronous_commit", "autovacuum",
                "jit", "jit_above_cost", "shared_preload_libraries", "claimq.databases",
                "claimq.reclaim_interval"]
    vals = {s: q("SELECT current_setting(%s)", (s,)) for s in settings}
    profile = ARGS.profile or "tuned"
    say("# claimq benchmark (%s), %s profile" % (ARGS.mode, profile))
    say()
    if profile == "default":
        say("Server as Debian's postgresql-15 sets it up; only the socket, the preload and "
            "claimq.databases are added. Autovacuum is on for every table, the measured ones "
            "too (VACUUM ANALYZE before each run all the same).")
    else:
        say("Tuned server; autovacuum_enabled = false on the measured tables (VACUUM ANALYZE "
            "before each run); synchronous_commit per section below.")
    say("Settings: " + ", ".join("%s = %s" % (s, vals[s]) for s in settings) + ".")
    say("Machine: %d CPUs, %s MB RAM. pgbench -M prepared, %g s per run, -j min(clients, 4)."
        % (os.cpu_count(), int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1048576),
           ARGS.duration))
    if "matrix" in ARGS.parts:
        say("Matrix: methods %s; clients %s; batch %s; synchronous_commit %s."
            % (", ".join(ARGS.methods), ",".join(map(str, ARGS.clients)),
               ",".join(map(str, ARGS.batches)), ",".join(sync_label(v) for v in ARGS.sync)))
        say("Each run: empty the method's table, CHECKPOINT, load a pool of jobs, VACUUM ANALYZE, "
            "run; jobs are counted in the database. PgQ: one consumer shared by all clients, "
            "a batch per tick (ticked every <batch> events at load), no per-job lease.")
        if PORTABLE_DB and any(edition(m) == "portable" for m in ARGS.methods):
            say("The portable edition (%s) runs claimq's own scripts in database %s of the same "
                "server, which holds claimq-portable.sql (SQL and PL/pgSQL only: no library, no "
                "shared memory, no background reclaimer) and the same benchmark objects, queue "
                "and loader as the C edition's."
                % (", ".join(METHODS[m][1] for m in ARGS.methods if edition(m) == "portable"),
                   PORTABLE_DB))
        if ARGS.portable_note:
            say(ARGS.portable_note)


def prepare_profile():
    if ARGS.profile == "default":
        for t in ("bench.job", "bench.floor", "bench.hjob", "bench.hlease", "claimq.job"):
            DB.execute("ALTER TABLE %s RESET (autovacuum_enabled)" % t)
        if PORTABLE_DB:
            with on_database(PORTABLE_DB):
                DB.execute("ALTER TABLE claimq.job RESET (autovacuum_enabled)")


def main():
    t0 = time.time()
    prepare_profile()
    header()
    if "matrix" in ARGS.parts:
        run_matrix()
    for part, fn in (("backlog", run_backlog), ("latency", run_latency),
                     ("reclaim", run_reclaim), ("groups", run_groups), ("fair", run_fair),
                     ("fair-ceiling", run_fair_ceiling), ("headers", run_headers),
                     ("workflows", run_workflows),
                     ("sustained", run_sustained)):
        if part in ARGS.parts:
            try:
                retrying("the %s test" % part, fn)
            except Exception as exc:    # noqa: BLE001
                if not server_gone(exc):
                    raise
                CRASHES.append("the %s test, again" % part)
                say()
                say("! the %s test was abandoned: the server went away twice" % part)
                reconnect()
    if CRASHES:
        say()
        say("! the server crashed and restarted during: " + "; ".join(CRASHES)
            + ". Those parts were run again. From the server log:")
        try:
            with open(os.environ.get("BENCH_SERVER_LOG", "/dev/null")) as f:
                for line in f:
                    if "terminated by signal" in line or "was terminated" in line:
                        say("    " + line.rstrip())
        except OSError:
            pass
    say()
    say("(%d s in all)" % (time.time() - t0))
    out = ARGS.json
    if not out and ARGS.charts:
        os.makedirs(ARGS.charts, exist_ok=True)
        out = os.path.join(ARGS.charts, "bench.json")
    if out:
        if ARGS.profile:
            base, ext = os.path.splitext(out)
            out = "%s-%s%s" % (base, ARGS.profile, ext or ".json")
        with open(out, "w") as f:
            json.dump({"profile": ARGS.profile or "tuned", "report": OUT, "results": RESULTS},
                      f, indent=1, default=str)
        say("(results in %s)" % out)
    if ARGS.charts:
        subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "charts.py"), ARGS.charts, out], check=False)


if __name__ == "__main__":
    main()
