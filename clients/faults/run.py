"""The faulted run: 20,000 jobs (CLAIMQ_FAULTED_JOBS) drained by two Python
and two Node.js worker processes at once, through pgbouncer in transaction
mode, while faults are injected:

- kill -9 of two worker processes of each language (each replaced by a new
  one of its language);
- one immediate restart of the server (pg_ctl -m immediate: a crash);
- SIGSTOP of one worker of each language past its 3 s lease (until a pass
  of the reclaimer began after every lease it held ran out), then SIGCONT;
- cancels from outside: jobs running at that moment and pending ones.

Each fault waits for its moment (a number of jobs done), and every wait has
a deadline.  Each run of a handler is a line in its process's record file,
written before the work; each complete that took effect is a row of
faulted_done, written in the completion's transaction (worker.py,
worker.js).  At the end it checks:

1. nothing lost: every job is done or cancelled; none pending, claimed,
   running or dead; every job whose cancel said ok is cancelled;
2. done exactly once: each done job has exactly one accepted complete, and
   a cancelled job none;
3. no stale token accepted: that complete's token is the job's last claim's
   (the token in its row) and its result's, and it is the token of a
   recorded run; no two runs share a token;
4. no job ran more often than its faults force.  A run is the job's own if
   its token is the job's last claim's (the run that completed it, or the
   one running when it was cancelled).  Every other run must be charged to
   the first fault its claim met: the kill of its process, the stop of its
   process (claimed before the SIGCONT), or the restart (claimed before the
   server answered again through the pooler), whichever ended first.  No
   run may be left uncharged; no job may have two runs charged to the same
   fault (so no job runs more than 1 + the number of faults that touched
   it); a kill or a stop is charged at most the process's concurrency, the
   restart at most all processes' concurrency, and the faults together at
   least one run.

Prints one "ok N - ..." or "not ok N - ..." line per check and exits 0 only
if all passed.  Environment: PGHOST, PGPORT, PGDATABASE (the pooler),
CLAIMQ_TEST_WORKER_ROLE, CLAIMQ_TEST_ADMIN (a superuser, not through the
pooler), CLAIMQ_TEST_CRASH_RESTART (restarts the server in immediate mode),
CLAIMQ_TEST_PACKAGE (the installed npm package), and optionally
CLAIMQ_FAULTED_DIR (where the records and logs go; a new temporary
directory if unset) and CLAIMQ_FAULTED_JOBS.
"""

import collections
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time

import psycopg

import claimq

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS = int(os.environ.get("CLAIMQ_FAULTED_JOBS", "20000"))
ROLE = os.environ.get("CLAIMQ_TEST_WORKER_ROLE", "cq_worker")
ADMIN = os.environ.get("CLAIMQ_TEST_ADMIN", "")
CRASH_RESTART = os.environ["CLAIMQ_TEST_CRASH_RESTART"]
QUEUE = "faulted"
CONCURRENCY = 8
LEASE = 3               # seconds: a stopped worker loses its jobs soon
HANDLER_MS = 2

# The record files and the workers' logs.
work = os.environ.get("CLAIMQ_FAULTED_DIR") or tempfile.mkdtemp(prefix="claimq-faulted.")
os.makedirs(work, exist_ok=True)
checks = []


def check(ok, what):
    checks.append(bool(ok))
    print(f"{'ok' if ok else 'not ok'} {len(checks)} - {what}", flush=True)
    return ok


def now_ms():
    return time.time() * 1000


def sql(query, params=(), deadline=60.0):
    """Rows of one statement as the superuser, on a new connection; while
    the server restarts, again until it answers (or the deadline)."""
    end = time.monotonic() + deadline
    while True:
        try:
            with psycopg.connect(ADMIN, autocommit=True) as conn:
                cur = conn.execute(query, params)
                return cur.fetchall() if cur.description else []
        except psycopg.OperationalError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


class Timeout(Exception):
    pass


def wait_until(what, seconds, description):
    end = time.monotonic() + seconds
    while not what():
        if time.monotonic() > end:
            raise Timeout(f"{description}: not within {seconds} s")
        time.sleep(0.1)


def counts():
    """(done, unfinished) of the queue's jobs."""
    return tuple(sql("SELECT count(*) FILTER (WHERE state = 'done'),"
                     "       count(*) FILTER (WHERE state IN ('pending', 'claimed', 'running'))"
                     "  FROM claimq.job WHERE queue_id = %s", (qid,))[0])


def running_in(proc):
    return sql("SELECT count(*) FROM claimq.job WHERE queue_id = %s AND worker = %s"
               "   AND state = 'running'", (qid, f"faulted-{proc.pid}"))[0][0]


def last_pass():
    return sql("SELECT last_run FROM claimq.reclaimer_status")[0][0]


procs = []              # every worker process started
faults = []             # {kind, pid, label, before}: a claim made before `before` (ms;
                        # the kill, the SIGCONT, or the server serving again) met it


def spawn(lang):
    n = sum(1 for p in procs if p.lang == lang) + 1
    record = os.path.join(work, f"{lang}{n}.runs")
    log = open(os.path.join(work, f"{lang}{n}.log"), "wb")
    if lang == "py":
        cmd = [sys.executable, os.path.join(HERE, "worker.py"), f"user={ROLE}"]
    else:
        cmd = ["node", os.path.join(HERE, "worker.js"), ROLE]
    p = subprocess.Popen(cmd + [QUEUE, str(CONCURRENCY), str(LEASE), str(HANDLER_MS), record],
                         stdout=log, stderr=subprocess.STDOUT)
    p.lang, p.label, p.killed = lang, f"{lang}{n}", False
    procs.append(p)
    return p


def when_done(n):
    wait_until(lambda: counts()[0] >= n, 120, f"{n} jobs done")


def kill(p):
    wait_until(lambda: running_in(p) > 0, 30, f"{p.label} runs a job")
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    p.killed = True
    faults.append({"kind": "kill", "pid": p.pid, "label": p.label, "before": now_ms()})
    print(f"# kill -9 {p.label} (pid {p.pid})", flush=True)
    return spawn(p.lang)


def stop_past_the_lease(p):
    wait_until(lambda: running_in(p) > 0, 30, f"{p.label} runs a job")
    t0 = time.monotonic()
    os.kill(p.pid, signal.SIGSTOP)
    # Past its lease: a pass of the reclaimer began after every lease it
    # holds ran out (a pass ended after that, and another one since), so
    # the reclaimer took back every job it held, but those it was
    # completing (its transaction, stopped, holds the row until SIGCONT).
    latest = sql("SELECT greatest(max(expires_at), clock_timestamp() + %s) FROM claimq.job"
                 " WHERE queue_id = %s AND worker = %s AND state IN ('claimed', 'running')",
                 (datetime.timedelta(seconds=LEASE), qid, f"faulted-{p.pid}"))[0][0]
    wait_until(lambda: last_pass() > latest, 60, f"the leases of the stopped {p.label} ran out")
    first = last_pass()
    wait_until(lambda: last_pass() > first, 60, "another pass of the reclaimer")
    before = now_ms()
    os.kill(p.pid, signal.SIGCONT)
    faults.append({"kind": "stop", "pid": p.pid, "label": p.label, "before": before})
    print(f"# SIGSTOP {p.label} (pid {p.pid}) for {time.monotonic() - t0:.1f} s, then SIGCONT",
          flush=True)


def pooler_answers():
    try:
        with psycopg.connect(f"user={ROLE}", autocommit=True, prepare_threshold=None,
                             connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def crash_restart():
    t0 = time.monotonic()
    subprocess.run(CRASH_RESTART, shell=True, check=True, stdout=subprocess.DEVNULL)
    wait_until(pooler_answers, 60, "the server answers through the pooler after the restart")
    faults.append({"kind": "restart", "pid": None, "label": "restart", "before": now_ms()})
    print(f"# immediate restart: served again after {time.monotonic() - t0:.1f} s", flush=True)


cancelled_ok = set()


def cancel_some(running=15, pending=25):
    ids = [r[0] for r in sql(
        "(SELECT job_id FROM claimq.job WHERE queue_id = %s AND state = 'running'"
        "  ORDER BY random() LIMIT %s)"
        " UNION ALL (SELECT job_id FROM claimq.job WHERE queue_id = %s AND state = 'pending'"
        "  ORDER BY random() LIMIT %s)", (qid, running, qid, pending))]
    with claimq.Client(ADMIN) as a:
        rows = a.cancel(ids)
    ok = [i for i, outcome, _ in rows if outcome is claimq.Outcome.OK]
    cancelled_ok.update(ok)
    print(f"# cancelled {len(ok)} of {len(ids)} jobs", flush=True)


def read_runs():
    runs = []           # (job_id, token, attempt, pid, began, claimed): ms
    for name in sorted(os.listdir(work)):
        if name.endswith(".runs"):
            with open(os.path.join(work, name)) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 6:     # a kill -9 cannot cut a write(2) short, but be sure
                        runs.append((int(parts[0]), int(parts[1]), int(parts[2]),
                                     int(parts[3]), float(parts[4]),
                                     float(parts[5]) - LEASE * 1000))
    return runs


def main():
    global qid
    started = time.monotonic()
    sql("DROP TABLE IF EXISTS faulted_done")
    sql("CREATE TABLE faulted_done (job_id bigint NOT NULL, token bigint NOT NULL,"
        " pid integer NOT NULL)")
    sql(f'GRANT INSERT ON faulted_done TO "{ROLE}"')
    with claimq.Client(ADMIN) as a:
        if sql("SELECT 1 FROM claimq.queue WHERE name = %s", (QUEUE,)):
            a.drop_queue(QUEUE, force=True)
        a.create_queue(QUEUE, lease=f"{LEASE} seconds", run_lease=f"{LEASE} seconds",
                       keep_done="1 hour", max_attempts=20, retry_base="100 milliseconds",
                       retry_max="1 second")
        for i in range(0, JOBS, 5000):
            a.enqueue_many(QUEUE, [{"n": n} for n in range(i, min(i + 5000, JOBS))])
    qid = sql("SELECT queue_id FROM claimq.queue WHERE name = %s", (QUEUE,))[0][0]
    # The test server runs with synchronous_commit = off, where a crash may
    # undo the completes of its last moments, and their jobs run again
    # beyond what the handlers running at the restart explain.  For this
    # run every commit is durable before it is acknowledged (every session
    # takes the setting at its next statement).
    sql("ALTER SYSTEM SET synchronous_commit = on")
    sql("SELECT pg_reload_conf()")

    py = [spawn("py"), spawn("py")]
    js = [spawn("js"), spawn("js")]
    at = lambda share: int(JOBS * share)      # noqa: E731
    try:
        when_done(at(0.075))
        cancel_some()
        when_done(at(0.125))
        py[0] = kill(py[0])
        when_done(at(0.2))
        js[0] = kill(js[0])
        when_done(at(0.3))
        crash_restart()
        when_done(at(0.4))
        cancel_some()
        when_done(at(0.45))
        stop_past_the_lease(py[1])
        when_done(at(0.575))
        py[0] = kill(py[0])
        when_done(at(0.65))
        stop_past_the_lease(js[1])
        when_done(at(0.725))
        js[0] = kill(js[0])
        when_done(at(0.8))
        cancel_some()
        wait_until(lambda: counts()[1] == 0, 300, "every job finished")
        check(True, "the faulted run drained the queue")
    except Timeout as e:
        check(False, f"the faulted run drained the queue ({e})")
    finally:
        live = [p for p in procs if not p.killed]
        for p in live:
            os.kill(p.pid, signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
        codes = []
        for p in live:
            try:
                codes.append(p.wait(60))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        sql("ALTER SYSTEM RESET synchronous_commit")
        sql("SELECT pg_reload_conf()")
    check(codes == [0] * len(live), f"every live worker exits 0 on SIGTERM: {codes}")
    drained = time.monotonic() - started
    report()
    print(f"# faulted run: {JOBS} jobs in {drained:.1f} s", flush=True)
    if not all(checks):
        for p in procs:
            with open(os.path.join(work, f"{p.label}.log"), errors="replace") as f:
                tail = f.readlines()[-40:]
            for line in tail:
                print(f"# {p.label}: {line.rstrip()}")
    return 0 if all(checks) else 1


def report():
    jobs = {r[0]: (r[1], r[2], r[3]) for r in sql(
        "SELECT job_id, state, token, result FROM claimq.job WHERE queue_id = %s", (qid,))}
    done_rows = collections.defaultdict(list)
    for job_id, token, pid in sql("SELECT job_id, token, pid FROM faulted_done"):
        done_rows[job_id].append(token)
    runs = read_runs()
    by_job = collections.defaultdict(list)
    for r in runs:
        by_job[r[0]].append(r)

    # 1. Nothing lost.
    state_count = collections.Counter(s for s, _, _ in jobs.values())
    check(len(jobs) == JOBS and set(state_count) <= {"done", "cancelled"},
          f"nothing lost: all {JOBS} jobs done or cancelled: {dict(state_count)}")
    check(cancelled_ok and all(jobs[i][0] == "cancelled" for i in cancelled_ok),
          f"the {len(cancelled_ok)} jobs whose cancel said ok are cancelled")
    # 2. Done exactly once.
    twice = [i for i, t in done_rows.items() if len(t) > 1]
    unaccepted = [i for i, (s, _, _) in jobs.items() if s == "done" and i not in done_rows]
    cancelled_done = [i for i, (s, _, _) in jobs.items() if s == "cancelled" and i in done_rows]
    check(not twice and not unaccepted and not cancelled_done and set(done_rows) <= set(jobs),
          f"each done job has one accepted complete, a cancelled one none (twice: {twice[:5]},"
          f" none: {unaccepted[:5]}, cancelled: {cancelled_done[:5]})")
    # 3. No stale token accepted; tokens never repeat.
    run_tokens = collections.Counter(r[1] for r in runs)
    stale = [i for i, t in done_rows.items()
             if i in jobs and (t[0] != jobs[i][1] or str(t[0]) != (jobs[i][2] or {}).get("token")
                               or not any(r[1] == t[0] for r in by_job[i]))]
    check(not stale, f"each accepted complete holds the job's last token and its run's ({stale[:5]})")
    check(all(n == 1 for n in run_tokens.values()),
          f"no two runs share a token ({[t for t, n in run_tokens.items() if n > 1][:5]})")
    # 4. Every run beyond the job's own is charged to a fault, each fault at
    #    most once per job and within what it can interrupt.
    charged = collections.Counter()
    uncharged, double = [], []
    runs_per_job = collections.Counter()
    for job_id, rs in by_job.items():
        runs_per_job[len(rs)] += 1
        last = jobs.get(job_id, (None, None, None))[1]
        seen = set()
        for _, token, attempt, pid, began, claimed in rs:
            if token == last:
                continue
            # The first fault its claim met: the restart, or a kill or a
            # stop of its process.
            met = [f for f in faults if f["pid"] in (None, pid) and claimed < f["before"]]
            if not met:
                uncharged.append((job_id, token, attempt, pid))
                continue
            fault = min(met, key=lambda f: f["before"])
            key = (fault["kind"], fault["pid"])
            if key in seen:
                double.append((job_id, key))
            seen.add(key)
            charged[key] += 1
    never = [i for i, (s, _, _) in jobs.items() if s == "done" and i not in by_job]
    print(f"# runs per job: {dict(sorted(runs_per_job.items()))}; jobs never run: "
          f"{JOBS - len(by_job)} (done without a run: {len(never)})", flush=True)
    for f in faults:
        print(f"# fault {f['label']} ({f['kind']}): {charged[(f['kind'], f['pid'])]} runs charged",
              flush=True)
    check(not uncharged, f"every run beyond a job's own is charged to a fault: {len(uncharged)}"
          f" uncharged {uncharged[:5]}")
    check(not double, f"no fault charged twice for one job (at most 1 + its faults runs):"
          f" {double[:5]}")
    bounds = {(f["kind"], f["pid"]): CONCURRENCY for f in faults}
    bounds[("restart", None)] = CONCURRENCY * 4
    over = {f"{k[0]} {k[1]}": charged[k] for k, hi in bounds.items() if charged[k] > hi}
    check(not over and sum(charged.values()) > 0,
          "the faults forced runs again, a kill or a stop at most 8 (its handlers), the"
          f" restart at most 32 (all handlers): {over or sum(charged.values())}")


if __name__ == "__main__":
    sys.exit(main())
