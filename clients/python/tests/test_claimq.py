"""Tests of the Python library against a real server, through pgbouncer in
transaction mode (run by clients/test, which sets the environment):

    PGHOST, PGPORT, PGDATABASE   the pooler
    CLAIMQ_TEST_WORKER_ROLE      the role with the work duty
    CLAIMQ_TEST_PRODUCER_ROLE    the role with the produce duty
    CLAIMQ_TEST_ADMIN            a superuser connection string (the server's socket)
    CLAIMQ_TEST_RESTART          a command that restarts the server
"""

import asyncio
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest

import claimq
import psycopg

WORKER = "user=" + os.environ.get("CLAIMQ_TEST_WORKER_ROLE", "cq_worker")
PRODUCER_ROLE = os.environ.get("CLAIMQ_TEST_PRODUCER_ROLE", "cq_producer")
ADMIN = os.environ.get("CLAIMQ_TEST_ADMIN", "")
RESTART = os.environ.get("CLAIMQ_TEST_RESTART")

# The workers' own log lines (a lease lost, a job stopped) are expected here.
logging.getLogger("claimq").setLevel(logging.ERROR)


def admin():
    return claimq.Client(ADMIN)


def new_queue(name, **options):
    with admin() as a:
        if a.conn.execute("SELECT 1 FROM claimq.queue WHERE name = %s", (name,)).fetchone():
            a.drop_queue(name, force=True)
        a.create_queue(name, **options)


def states(queue):
    with admin() as a:
        rows = a.conn.execute(
            "SELECT j.state, count(*) FROM claimq.job j JOIN claimq.queue q USING (queue_id)"
            " WHERE q.name = %s GROUP BY 1", (queue,)).fetchall()
    return {s: n for s, n in rows}


def reruns(queue):
    """(jobs run more than once, the most runs of one job) in a queue."""
    with admin() as a:
        return a.conn.execute(
            "SELECT count(*) FILTER (WHERE attempts > 1), coalesce(max(attempts), 0)"
            "  FROM claimq.job JOIN claimq.queue q USING (queue_id) WHERE q.name = %s",
            (queue,)).fetchone()


def wait_until(what, seconds=60.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if what():
            return True
        time.sleep(0.1)
    return False


class Kept(logging.Handler):
    """The records of the "claimq" logger at `level` and above, while in a
    with block (the logger's level lowered to `level` meanwhile)."""

    def __init__(self, level):
        super().__init__(level)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def __enter__(self):
        logger = logging.getLogger("claimq")
        self.old = logger.level
        logger.addHandler(self)
        logger.setLevel(self.level)
        return self

    def __exit__(self, *exc):
        logger = logging.getLogger("claimq")
        logger.removeHandler(self)
        logger.setLevel(self.old)


def job_row(job_id):
    """(state, attempts) of a job, or None."""
    with admin() as a:
        return a.conn.execute("SELECT state, attempts FROM claimq.job WHERE job_id = %s",
                              (job_id,)).fetchone()


# A worker in its own process, for killing and signalling.  The handler
# sleeps `ms` milliseconds (and does not look at check_stop, as a handler
# that calls a slow service would not) and returns the payload's n.  More
# Worker options as JSON in the sixth argument; the seventh is "async" for
# an AsyncWorker (whose handler awaits its sleep).
WORKER_SCRIPT = textwrap.dedent("""
    import asyncio, json, logging, sys, time
    import claimq
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    queue, concurrency, lease, ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    options = json.loads(sys.argv[6])
    if sys.argv[7] == "async":
        async def handle(job):
            await asyncio.sleep(ms / 1000)
            return {"n": job.payload.get("n")}
        asyncio.run(claimq.AsyncWorker(sys.argv[5], queue, handle, concurrency=concurrency,
                                       lease=lease, **options).run())
    else:
        def handle(job):
            time.sleep(ms / 1000)
            return {"n": job.payload.get("n")}
        claimq.Worker(sys.argv[5], queue, handle, concurrency=concurrency, lease=lease,
                      **options).run()
    print("exited cleanly", flush=True)
""")


def spawn(queue, concurrency=8, lease=2.0, ms=2.0, log=None, kind="thread", **options):
    return subprocess.Popen([sys.executable, "-c", WORKER_SCRIPT, queue, str(concurrency),
                             str(lease), str(ms), WORKER, json.dumps(options), kind],
                            stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT)


def stalled_worker_keeps_the_new_claim(test, queue, kind):
    """Issue #26: a 5 s handler, a 2 s lease, the worker stopped (SIGSTOP)
    past its lease.  The reclaimer takes the job back (one failed attempt);
    the worker, let go on, claims it again while the stale run is still in
    its handler.  The stale run's end must not drop the new claim: the job
    runs twice and is done."""
    new_queue(queue, keep_done="1 hour", lease="2 seconds", max_attempts=3,
              retry_base="100 milliseconds")
    with admin() as a:
        job_id = a.enqueue(queue, {"n": 1})
    p = spawn(queue, concurrency=2, lease=2, ms=5000, kind=kind)
    try:
        test.assertTrue(wait_until(lambda: job_row(job_id) == ("running", 1), 20))
        p.send_signal(signal.SIGSTOP)
        test.assertTrue(wait_until(lambda: job_row(job_id)[0] != "running", 20),
                        "the reclaimer took the job back")
        p.send_signal(signal.SIGCONT)
        test.assertTrue(wait_until(lambda: job_row(job_id)[0] in ("done", "dead"), 60))
        test.assertEqual(job_row(job_id), ("done", 2),
                         "one stall, one run more: the new claim was kept")
    finally:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait()


def long_job_at_sigterm(test, queue, kind):
    """Issue #26: SIGTERM during a 7 s job with a 3 s lease, two more jobs
    claimed and waiting their turn.  The waiting ones are released at once
    (within 2 s, less than the lease: not by their leases running out), the
    running one is kept alive by the heartbeat and completed."""
    new_queue(queue, keep_done="1 hour", lease="3 seconds")
    with admin() as a:
        ids = a.enqueue_many(queue, [{"n": i} for i in range(3)])
    p = spawn(queue, concurrency=1, lease=3, ms=7000, batch=3, kind=kind)
    try:
        test.assertTrue(wait_until(lambda: states(queue) == {"running": 1, "claimed": 2}, 20),
                        repr(states(queue)))
        p.send_signal(signal.SIGTERM)
        test.assertTrue(wait_until(lambda: states(queue) == {"running": 1, "pending": 2}, 2),
                        "released within 2 s: %r" % states(queue))
        test.assertEqual(p.wait(30), 0, "the worker exits 0")
    finally:
        p.kill()
        p.wait()
    rows = sorted(job_row(i) for i in ids)
    test.assertEqual(rows, [("done", 1), ("pending", 0), ("pending", 0)],
                     "the long job was done in one attempt; the others used none")


class ClientTest(unittest.TestCase):
    def test_round_trip_of_ids_tokens_and_outcomes(self):
        new_queue("py_client", keep_done="1 hour")
        with claimq.Client(WORKER) as w, admin() as a:
            job_id = a.enqueue("py_client", {"x": 1})
            self.assertGreater(job_id, 2 ** 53, "ids above 2^53 come back exact")
            [job] = w.claim("py_client", 5, lease=30)
            self.assertEqual(job.id, job_id)
            self.assertIsInstance(job.token, int)
            self.assertEqual(w.start([job])[0][1], claimq.Outcome.OK)
            # The job's queue goes with the call, and the server checks it.
            self.assertEqual(job.queue, "py_client")
            new_queue("py_client_elsewhere")
            with self.assertRaises(psycopg.Error) as refused:
                w.extend([dataclasses.replace(job, queue="py_client_elsewhere")])
            self.assertEqual(refused.exception.sqlstate, "22023")
            self.assertEqual(w.status([job_id], "py_client")[0]["state"], "running")
            self.assertEqual(w.complete([(job.id, job.token + 1)])[0][1], claimq.Outcome.STALE)
            self.assertEqual(w.complete([job], [{"r": 2}])[0][1], claimq.Outcome.OK)
            self.assertEqual(w.status([job_id])[0]["state"], "done")
            self.assertEqual(a.conn.execute("SELECT result FROM claimq.job WHERE job_id = %s",
                                            (job_id,)).fetchone()[0], {"r": 2})

    def test_a_fair_queue_shares_a_claim_by_weight(self):
        new_queue("py_fair", fair=True)
        with claimq.Client(WORKER) as w, admin() as a:
            a.set_group_weight("py_fair", "heavy", 3)
            a.enqueue_many("py_fair", [{}] * 20, group_keys=["light"] * 20)
            a.enqueue_many("py_fair", [{}] * 20, group_keys=["heavy"] * 20)
            jobs = w.claim("py_fair", 8, lease=30)
            keys = dict(a.conn.execute(
                "SELECT group_key, count(*) FROM claimq.job WHERE job_id = ANY(%s)"
                " GROUP BY 1", ([j.id for j in jobs],)).fetchall())
            self.assertEqual(keys, {"light": 2, "heavy": 6})
            weights = dict(a.conn.execute(
                "SELECT group_key, weight FROM claimq.group_stats WHERE queue = 'py_fair'"
            ).fetchall())
            self.assertEqual(weights, {"light": 1.0, "heavy": 3.0})
            a.set_group_weight("py_fair", "heavy", None)
            self.assertEqual(a.conn.execute(
                "SELECT weight FROM claimq.group_stats"
                " WHERE queue = 'py_fair' AND group_key = 'heavy'").fetchone()[0], 1.0)

    def test_a_job_after_another_waits_until_it_is_done(self):
        new_queue("py_after", keep_done="1 hour")
        with claimq.Client(WORKER) as w, admin() as a:
            first = a.enqueue("py_after", {"n": 1})
            second = a.enqueue("py_after", {"n": 2}, after=[first])
            self.assertEqual([r["state"] for r in w.status([first, second])],
                             ["pending", "waiting"])
            self.assertEqual(w.dependencies([second, first]), [
                {"job_id": second, "after_id": first, "state": "pending", "result": None,
                 "last_error": None}], "one row, for the job that has an after list")
            # The waiting job is not claimable: only the first comes.
            jobs = w.claim("py_after", 10, lease=30)
            self.assertEqual([j.id for j in jobs], [first])
            self.assertEqual(w.complete(jobs, [{"r": 1}])[0][1], claimq.Outcome.OK)
            self.assertEqual(w.status([second])[0]["state"], "pending")
            self.assertEqual(w.dependencies([second]), [
                {"job_id": second, "after_id": first, "state": "done", "result": {"r": 1},
                 "last_error": None}])
            self.assertEqual([j.id for j in w.claim("py_after", 10, lease=30)], [second])
            self.assertEqual(w.dependencies([first]), [], "no rows for a job without after")

    def test_after_failed_cancels_or_runs_the_jobs_after_a_dead_one(self):
        new_queue("py_after_failed", keep_done="1 hour")
        with claimq.Client(WORKER) as w, admin() as a:
            doomed = a.enqueue("py_after_failed", {"doomed": True})
            cancelled = a.enqueue_many("py_after_failed", [{"n": 1}, {"n": 2}], after=[doomed])
            report = a.enqueue("py_after_failed", {"report": True}, after=[doomed, doomed],
                               after_failed="run")
            run_many = a.enqueue_many("py_after_failed", [{"n": 3}], after=[doomed],
                                      after_failed="run")
            self.assertEqual({r["state"] for r in w.status(cancelled + [report] + run_many)},
                             {"waiting"})
            [job] = w.claim("py_after_failed", 10, lease=30)
            self.assertEqual(job.id, doomed)
            self.assertEqual(w.fail([job], "boom", permanent=True)[0][2], "dead")
            self.assertEqual([r["state"] for r in w.status(cancelled + [report] + run_many)],
                             ["cancelled", "cancelled", "pending", "pending"])
            dead = {"after_id": doomed, "state": "dead", "result": None, "last_error": "boom"}
            self.assertEqual(w.dependencies([report, cancelled[0]]),
                             [{"job_id": report, **dead}, {"job_id": cancelled[0], **dead}],
                             "a repeated id counts once")
            # after_failed is passed, and checked, without after too.
            with self.assertRaises(psycopg.errors.InvalidParameterValue):
                a.enqueue("py_after_failed", {}, after_failed="sometimes")
            with self.assertRaises(psycopg.errors.ForeignKeyViolation):
                a.enqueue_many("py_after_failed", [{}], after=[doomed + 10 ** 9])

    def test_enqueue_in_the_callers_transaction_through_the_pooler_12_times(self):
        # The README's recipe, on two connections used in turn (as an
        # application's pool uses them), twelve times each, through
        # pgbouncer in transaction mode: psycopg prepares a statement after
        # its fifth run on a connection (prepare_threshold), and a statement
        # prepared on a server connection is met there by the next client.
        # The client's statements are never prepared, on any connection;
        # the caller's own need prepare_threshold=None (as the README
        # says), or prepare=False.
        new_queue("py_own_tx")
        with admin() as a:
            a.conn.execute("DROP TABLE IF EXISTS py_orders")
            a.conn.execute("CREATE TABLE py_orders (id int)")
            a.conn.execute(f'GRANT INSERT ON py_orders TO "{PRODUCER_ROLE}"')
        for name, options, own in (("the README's connection", {"prepare_threshold": None}, {}),
                                   ("psycopg's defaults", {}, {"prepare": False})):
            conns = [psycopg.connect("user=" + PRODUCER_ROLE, **options) for _ in range(2)]
            try:
                ids = []
                for order_id in range(24):
                    conn = conns[order_id % 2]
                    with conn.transaction():
                        conn.execute("INSERT INTO py_orders (id) VALUES (%s)", (order_id,), **own)
                        ids.append(claimq.Client(connection=conn).enqueue(
                            "py_own_tx", {"order": order_id}))
                with conns[0].transaction():
                    prepared = conns[0].execute("SELECT name FROM pg_prepared_statements",
                                                prepare=False).fetchall()
            finally:
                for conn in conns:
                    conn.close()
            self.assertEqual(len(set(ids)), 24, name)
            self.assertEqual(prepared, [], f"{name}: no statement was left prepared")
        with admin() as a:
            self.assertEqual(a.conn.execute("SELECT count(*) FROM py_orders").fetchone()[0], 48)
        self.assertEqual(states("py_own_tx"), {"pending": 48})

    def test_the_worker_role_cannot_enqueue(self):
        new_queue("py_denied")
        with claimq.Client(WORKER) as w:
            with self.assertRaises(Exception):
                w.enqueue("py_denied", {})


class WorkerTest(unittest.TestCase):
    def test_drain_with_concurrency_8_and_a_killed_worker(self):
        new_queue("py_drain", keep_done="1 hour", lease="2 seconds")
        with admin() as a:
            a.enqueue_many("py_drain", [{"n": i} for i in range(3000)])
        victim = spawn("py_drain", ms=5)
        survivor = spawn("py_drain", ms=5)
        try:
            self.assertTrue(wait_until(lambda: states("py_drain").get("done", 0) >= 300, 30),
                            "the workers got going")
            victim.kill()
            victim.wait()
            self.assertTrue(wait_until(lambda: states("py_drain") == {"done": 3000}, 90),
                            "every job ends done after one worker was killed: %r"
                            % states("py_drain"))
            # Only what the victim held (8 handlers) ran again, once.
            many, most = reruns("py_drain")
            self.assertLessEqual(many, 8, "jobs run twice")
            self.assertLessEqual(most, 2, "the most runs of one job")
        finally:
            survivor.send_signal(signal.SIGTERM)
            self.assertEqual(survivor.wait(30), 0, "the survivor exits 0 on SIGTERM")

    def test_sigterm_finishes_running_jobs_and_releases_the_rest(self):
        new_queue("py_term", keep_done="1 hour", lease="30 seconds")
        with admin() as a:
            a.enqueue_many("py_term", [{"n": i} for i in range(40)])
        p = spawn("py_term", concurrency=4, lease=30, ms=1500)
        self.assertTrue(wait_until(lambda: states("py_term").get("running", 0) == 4, 20),
                        "four jobs are running")
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(20), 0, "the worker exits 0")
        s = states("py_term")
        self.assertEqual(s.get("claimed", 0) + s.get("running", 0), 0,
                         "nothing is left claimed or running: %r" % s)
        self.assertGreaterEqual(s.get("done", 0), 4, "the running jobs were finished: %r" % s)
        with admin() as a:
            self.assertEqual(a.conn.execute(
                "SELECT count(*) FROM claimq.job WHERE state = 'pending' AND attempts > 0"
                "   AND queue_id = (SELECT queue_id FROM claimq.queue WHERE name = 'py_term')"
            ).fetchone()[0], 0, "no job went back with an attempt used")

    def test_a_stalled_worker_that_reclaims_its_own_job_keeps_the_new_claim(self):
        stalled_worker_keeps_the_new_claim(self, "py_reclaim", "thread")

    def test_sigterm_keeps_a_job_longer_than_its_lease_and_releases_the_others_at_once(self):
        long_job_at_sigterm(self, "py_long", "thread")

    @unittest.skipUnless(RESTART, "no restart command")
    def test_server_restart_mid_run(self):
        new_queue("py_restart", keep_done="1 hour", lease="3 seconds")
        with admin() as a:
            a.enqueue_many("py_restart", [{"n": i} for i in range(1500)])
        p = spawn("py_restart", ms=5)
        try:
            self.assertTrue(wait_until(lambda: states("py_restart").get("done", 0) >= 200, 30))
            subprocess.run(RESTART, shell=True, check=True, stdout=subprocess.DEVNULL)
            self.assertTrue(wait_until(lambda: states("py_restart") == {"done": 1500}, 90),
                            "the worker reconnects and drains the queue: %r"
                            % states("py_restart"))
            # At most what was in flight at the restart (8 handlers) ran again, once.
            many, most = reruns("py_restart")
            self.assertLessEqual(many, 8, "jobs run twice")
            self.assertLessEqual(most, 2, "the most runs of one job")
            self.assertIsNone(p.poll(), "the worker kept running")
        finally:
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(30), 0)

    def test_cancel_reaches_the_running_handler(self):
        new_queue("py_cancel", lease="10 seconds")
        with admin() as a:
            job_id = a.enqueue("py_cancel", {})
        told = threading.Event()

        def handle(job):
            while True:
                try:
                    claimq.check_stop(job)
                except claimq.JobStopped:
                    told.set()
                    raise
                time.sleep(0.05)

        w = claimq.Worker(WORKER, "py_cancel", handle, concurrency=2, lease=10, heartbeat=0.3)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            self.assertTrue(wait_until(lambda: states("py_cancel").get("running") == 1, 10))
            with admin() as a:
                self.assertEqual(a.cancel([job_id])[0][1], claimq.Outcome.OK)
            self.assertTrue(told.wait(10), "the handler was told")
        finally:
            w.stop()
            t.join(20)
        self.assertEqual(states("py_cancel"), {"cancelled": 1}, "and it was never completed")

    def test_a_lease_lost_to_a_stall_is_told_and_its_complete_refused(self):
        # The heartbeat comes only after the lease ran out and the reclaimer
        # took the job back: a stalled process.
        # One attempt: the reclaimer makes the job dead, so nothing runs it again.
        new_queue("py_stall", lease="1 second", run_lease="1 second", max_attempts=1)
        with admin() as a:
            job_id = a.enqueue("py_stall", {})
        held = {}
        told = threading.Event()

        def handle(job):
            held["job"] = job
            if wait_until(lambda: job.stop_reason is not None, 15):
                told.set()
            return "late"

        w = claimq.Worker(WORKER, "py_stall", handle, concurrency=1, lease=1, heartbeat=3)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            self.assertTrue(told.wait(20), "the handler was told its lease was lost")
            self.assertEqual(held["job"].stop_reason, "stale")
        finally:
            w.stop()
            t.join(20)
        with claimq.Client(WORKER) as c:
            self.assertEqual(c.complete([held["job"]])[0][1], claimq.Outcome.STALE,
                             "its complete is refused")
        self.assertEqual(states("py_stall"), {"dead": 1})
        self.assertEqual(held["job"].id, job_id)

    def test_fail_and_snooze(self):
        new_queue("py_fs", keep_done="1 hour")
        with admin() as a:
            dead, snoozed, retried = a.enqueue_many("py_fs", [{"k": "dead"}, {"k": "snooze"},
                                                               {"k": "retry"}])
        seen = {"snooze": 0}

        def handle(job):
            k = job.payload["k"]
            if k == "dead":
                raise claimq.Fail("no use", permanent=True)
            if k == "snooze" and seen["snooze"] == 0:
                seen["snooze"] += 1
                raise claimq.Snooze(0.2)
            if k == "retry" and job.attempts == 0:
                raise claimq.Fail("again", retry_in=0)
            return k

        w = claimq.Worker(WORKER, "py_fs", handle, concurrency=3)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            self.assertTrue(wait_until(lambda: states("py_fs") == {"dead": 1, "done": 2}, 20),
                            repr(states("py_fs")))
        finally:
            w.stop()
            t.join(20)
        with admin() as a:
            rows = dict(a.conn.execute(
                "SELECT job_id, attempts FROM claimq.job WHERE job_id = ANY(%s)",
                ([dead, snoozed, retried],)).fetchall())
        self.assertEqual(rows[snoozed], 1, "the snooze used no attempt")
        self.assertEqual(rows[retried], 2, "the failure with retry_in was retried")


    def test_a_shutdown_deadline_gives_running_jobs_back_or_leaves_them_to_the_lease(self):
        for mode, after in (("release", ("pending", 0)), ("abandon", ("pending", 1))):
            q = f"py_deadline_{mode}"
            new_queue(q, lease="2 seconds", retry_base="1 hour")
            with admin() as a:
                job_id = a.enqueue(q, {})
            started = threading.Event()

            def handle(job):
                started.set()
                claimq.sleep(job, 60)

            w = claimq.Worker(WORKER, q, handle, concurrency=1, lease=2,
                              shutdown_timeout=1, on_shutdown_timeout=mode)
            t = threading.Thread(target=w.run)
            t.start()
            try:
                self.assertTrue(started.wait(20))
                w.stop()
                t.join(10)
                self.assertFalse(t.is_alive(), "run() returned after the 1 s deadline")
                # release: pending at once, no attempt used; abandon: the
                # lease runs out and the reclaimer counts a failed attempt.
                self.assertTrue(wait_until(lambda: job_row(job_id) == after, 20),
                                f"{mode}: {job_row(job_id)!r}")
            finally:
                w.stop()
                t.join(10)

    def test_several_queues_a_timeout_on_failure_and_attempt(self):
        new_queue("py_mq_a", keep_done="1 hour")
        new_queue("py_mq_b", keep_done="1 hour", retry_base="100 milliseconds")
        with admin() as a:
            quick = a.enqueue_many("py_mq_a", [{"n": i} for i in range(20)])
            slow = a.enqueue("py_mq_b", {})
        lock = threading.Lock()
        now = {"py_mq_a": 0, "py_mq_b": 0}
        most = dict(now)
        failures = []

        def counted(fn):
            def run(job):
                with lock:
                    now[job.queue] += 1
                    most[job.queue] = max(most[job.queue], now[job.queue])
                try:
                    return fn(job)
                finally:
                    with lock:
                        now[job.queue] -= 1
            return run

        def handle_a(job):
            time.sleep(0.05)
            return {"queue": job.queue, "attempt": job.attempt}

        def handle_b(job):
            if job.attempt == 1:
                claimq.sleep(job, 30)       # stopped by the 1 s timeout
            return {"queue": job.queue, "attempt": job.attempt}

        w = claimq.Worker(WORKER, {"py_mq_a": 3, "py_mq_b": 1},
                          {"py_mq_a": counted(handle_a), "py_mq_b": counted(handle_b)},
                          timeout=1, on_failure=lambda job, e, dead: failures.append(
                              (job.id, job.attempt, type(e).__name__, dead)))
        t = threading.Thread(target=w.run)
        t.start()
        try:
            self.assertTrue(wait_until(lambda: states("py_mq_a") == {"done": 20}
                                       and states("py_mq_b") == {"done": 1}, 30),
                            repr((states("py_mq_a"), states("py_mq_b"))))
        finally:
            w.stop()
            t.join(20)
        with admin() as a:
            results = dict(a.conn.execute("SELECT job_id, result FROM claimq.job"
                                          " WHERE job_id = ANY(%s)", (quick + [slow],)).fetchall())
        self.assertEqual([results[i] for i in quick], [{"queue": "py_mq_a", "attempt": 1}] * 20)
        self.assertEqual(results[slow], {"queue": "py_mq_b", "attempt": 2})
        self.assertEqual(failures, [(slow, 1, "JobTimeout", False)])
        self.assertLessEqual(most["py_mq_a"], 3, "at most 3 at once in py_mq_a")
        self.assertEqual(most["py_mq_b"], 1)

    def test_a_connection_lost_in_on_complete_leaves_the_job_to_its_lease(self):
        # The completion's connection ends inside its transaction (as in a
        # server restart): the handler did not fail, so on_failure is not
        # called and the job is not failed; it comes back when its lease
        # runs out, and the next run completes it.
        new_queue("py_oc_lost", keep_done="1 hour", lease="2 seconds",
                  retry_base="100 milliseconds")
        with admin() as a:
            job_id = a.enqueue("py_oc_lost", {})
        failures = []

        def on_complete(job, result, conn):
            if job.attempt == 1:
                conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

        w = claimq.Worker(WORKER, "py_oc_lost", lambda job: job.attempt, concurrency=1, lease=2,
                          on_complete=on_complete,
                          on_failure=lambda job, e, dead: failures.append(repr(e)))
        t = threading.Thread(target=w.run)
        with Kept(logging.WARNING) as kept:
            t.start()
            try:
                self.assertTrue(wait_until(lambda: job_row(job_id) == ("done", 2), 30),
                                repr(job_row(job_id)))
            finally:
                w.stop()
                t.join(20)
        with admin() as a:
            last_error = a.conn.execute("SELECT last_error FROM claimq.job WHERE job_id = %s",
                                        (job_id,)).fetchone()[0]
        self.assertEqual(failures, [], "on_failure is for the handler's failures")
        self.assertEqual(last_error, "lease expired", "the lease brought it back")
        # A warning, as in Node, not an error: the job is not lost.
        lines = [(r.levelname, r.getMessage()) for r in kept.records]
        self.assertTrue([m for level, m in lines if level == "WARNING" and m.startswith(
            f"job {job_id}: connection lost while completing it")], lines)
        self.assertEqual([m for level, m in lines if level != "WARNING"], [], lines)

    def test_claims_log_at_debug_and_failures_at_warning(self):
        new_queue("py_log", max_attempts=1)
        with admin() as a:
            a.enqueue_many("py_log", [{"fail": i == 0} for i in range(10)])

        def handle(job):
            if job.payload["fail"]:
                raise ValueError("no")

        w = claimq.Worker(WORKER, "py_log", handle, concurrency=2)
        t = threading.Thread(target=w.run)
        with Kept(logging.DEBUG) as kept:
            t.start()
            try:
                self.assertTrue(wait_until(lambda: states("py_log") == {"dead": 1}, 20))
            finally:
                w.stop()
                t.join(20)
        records = kept.records
        loud = [r.getMessage() for r in records if r.levelno >= logging.INFO]
        self.assertTrue(any("claimed" in r.getMessage() for r in records
                            if r.levelno == logging.DEBUG), "claims are logged at DEBUG")
        self.assertFalse([m for m in loud if "claimed" in m or "completed" in m], loud)
        self.assertTrue([r for r in records if r.levelno == logging.WARNING
                         and "ValueError: no" in r.getMessage()], "the failure at WARNING")


class AsyncWorkerTest(unittest.TestCase):
    def test_drain_and_cancel(self):
        new_queue("py_async", keep_done="1 hour", lease="10 seconds")
        with admin() as a:
            ids = a.enqueue_many("py_async", [{"n": i, "slow": i == 0} for i in range(300)])

        async def handle(job):
            if job.payload["slow"]:
                await asyncio.sleep(60)
            await asyncio.sleep(0.001)
            return job.payload["n"]

        async def main():
            w = claimq.AsyncWorker(WORKER, "py_async", handle, concurrency=8, lease=10,
                                   heartbeat=0.3)
            task = asyncio.create_task(w.run())
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(
                None, lambda: wait_until(lambda: states("py_async").get("done") == 299, 30))
            with admin() as a:
                a.cancel([ids[0]])
            cancelled = await loop.run_in_executor(
                None, lambda: wait_until(lambda: all(k[0] != ids[0] for k in w.held), 10))
            w.stop()
            await asyncio.wait_for(task, 20)
            return ok, cancelled

        ok, cancelled = asyncio.run(main())
        self.assertTrue(ok, repr(states("py_async")))
        self.assertTrue(cancelled, "the cancelled job's task was stopped")
        self.assertEqual(states("py_async"), {"done": 299, "cancelled": 1})

    def test_a_stalled_worker_that_reclaims_its_own_job_keeps_the_new_claim(self):
        stalled_worker_keeps_the_new_claim(self, "py_areclaim", "async")

    def test_on_complete_is_refused_not_ignored(self):
        # Its hook takes a blocking connection: an AsyncWorker that accepted
        # it and never called it would drop what the hook writes.
        with self.assertRaises(TypeError):
            claimq.AsyncWorker(WORKER, "py_async", lambda job: None,
                               on_complete=lambda job, result, conn: None)

    def test_sigterm_keeps_a_job_longer_than_its_lease_and_releases_the_others_at_once(self):
        long_job_at_sigterm(self, "py_along", "async")


if __name__ == "__main__":
    unittest.main()
