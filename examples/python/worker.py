#!/usr/bin/env python3
"""A claimq worker in Python with psycopg 3.

    python3 worker.py --queue jobs [--dsn URL] [--batch 10] [--lease 30]

The loop: claim a batch, then for each job in turn start it, run the
handler while a heartbeat keeps the leases of the whole batch alive, and
complete or fail it.  Every call is a single statement in autocommit mode
(or one short transaction), so it works through pgbouncer in transaction
mode.  On SIGTERM or SIGINT the job at hand is finished, the jobs of the
batch that were never started are released for other workers, and the
process exits 0.

A call about a job returns "stale" (False from the scalar functions) when
the job is no longer held by this claim: its lease ran out and the
reclaimer gave it to someone else.  That is not an error; the worker drops
the job and goes on.  A job cancelled while we hold it answers
"cancelled" instead: the heartbeat hears it and stops the handler, and the
job is never completed.  A handler that cannot run its job yet raises
Snooze(seconds): the job goes back to the queue for that long, and the
attempt is not counted.  Job ids and tokens are Python ints: exact at any
size.
"""

import argparse
import logging
import os
import signal
import socket
import threading
import time

import psycopg
from psycopg import sql

log = logging.getLogger("claimq.worker")


class LeaseLost(Exception):
    """The job's claim is gone (someone else owns the job now), or the job
    was cancelled: stop, and do not complete it."""


class Snooze(Exception):
    """Raised by a handler: run this job again in `seconds`, no attempt used."""

    def __init__(self, seconds):
        super().__init__(f"snooze {seconds:.3f} s")
        self.seconds = seconds


def handle(job, lost):
    """The demo handler.  Replace it with real work.

    payload {"ms": N} works N milliseconds; {"fail_first": N} fails the
    first N attempts; {"not_before": T} snoozes until the Unix time T.
    `lost` is set by the heartbeat if the lease was lost or the job was
    cancelled: a long handler should check it and give up.
    """
    payload = job["payload"] or {}
    attempt = job["attempts"] + 1  # start() counts this attempt
    if attempt <= int(payload.get("fail_first", 0)):
        raise RuntimeError(f"demo failure on attempt {attempt}")
    wait = float(payload.get("not_before", 0)) - time.time()
    if wait > 0:
        raise Snooze(wait)
    if lost.wait(float(payload.get("ms", 0)) / 1000.0):
        raise LeaseLost()
    return {"ok": True}


class Heartbeat:
    """Extends the leases of the jobs still held, every `every` seconds.

    One statement covers the whole batch: the running job and the claimed
    ones waiting their turn.  Jobs that come back stale are dropped from
    the batch; if it is the running one, `lost` is set for the handler.
    """

    def __init__(self, worker, every):
        self.worker = worker
        self.every = every
        self.stop = threading.Event()
        self.thread = None

    def __enter__(self):
        if self.every > 0:
            self.thread = threading.Thread(target=self.run, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread:
            self.thread.join()

    def run(self):
        while not self.stop.wait(self.every):
            try:
                self.worker.extend_held()
            except psycopg.Error as e:
                log.warning("heartbeat failed: %s", e)


class Worker:
    def __init__(self, args):
        self.args = args
        self.queue = args.queue
        self.name = args.worker
        self.lease = f"{args.lease} seconds"
        # prepare_threshold=None: no server-side prepared statements, which
        # a transaction-mode pooler cannot keep for us.
        self.conn = psycopg.connect(args.dsn, autocommit=True,
                                    prepare_threshold=None,
                                    application_name=self.name)
        self.db = threading.Lock()  # one statement or transaction at a time
        self.lock = threading.Lock()  # guards held / running
        self.held = {}  # job_id -> token: claimed or running, ours
        self.running = None
        self.lost = threading.Event()
        self.lost_why = None  # the outcome that ended the running job's claim
        self.stopping = threading.Event()

    # -- the claimq calls -------------------------------------------------

    def query(self, query, params):
        """Run one statement (autocommit: one transaction) and fetch it all."""
        with self.db:
            return self.conn.execute(query, params).fetchall()

    def claim(self):
        with self.db:
            cur = self.conn.execute(
                "SELECT job_id, token, payload, attempts"
                "  FROM claimq.claim(%s, %s, lease => %s::interval, worker => %s)",
                (self.queue, self.args.batch, self.lease, self.name))
            cols = [c.name for c in cur.description]
            return [dict(zip(cols, row)) for row in cur.fetchall()]

    def start(self, job):
        """Returns the outcome: ok, stale or cancelled."""
        return self.query(
            "SELECT outcome FROM claimq.start(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],"
            "                                 %s::interval)",
            (job["job_id"], job["token"], self.lease))[0][0]

    def extend_held(self):
        with self.lock:
            ids = list(self.held)
            tokens = [self.held[i] for i in ids]
        if not ids:
            return
        rows = self.query(
            "SELECT job_id, outcome"
            "  FROM claimq.extend(%s::bigint[], %s::bigint[], %s::interval)",
            (ids, tokens, self.lease))
        with self.lock:
            for job_id, outcome in rows:
                if outcome != "ok" and job_id in self.held:
                    if outcome == "cancelled":
                        log.info("job %s: cancelled, stopping its handler", job_id)
                    else:
                        log.warning("job %s: lease lost (%s), someone else owns it now",
                                    job_id, outcome)
                    del self.held[job_id]
                    if job_id == self.running:
                        self.lost_why = outcome
                        self.lost.set()

    def complete(self, job):
        if not self.args.results:
            return self.query("SELECT claimq.complete(%s::bigint, %s::bigint)",
                              (job["job_id"], job["token"]))[0][0]
        # One statement, so one transaction: the result row is written if
        # and only if complete() returned true.  A handler that writes its
        # own tables does the same with a transaction:
        #     with conn.transaction():
        #         ...the handler's writes...
        #         if not complete(job): raise psycopg.Rollback()
        return bool(self.query(
            sql.SQL("INSERT INTO {} (job_id, worker)"
                    " SELECT %s::bigint, %s::text"
                    "  WHERE claimq.complete(%s::bigint, %s::bigint)"
                    " RETURNING true")
            .format(sql.Identifier(*self.args.results.split("."))),
            (job["job_id"], self.name, job["job_id"], job["token"])))

    def fail(self, job, error):
        return self.query(
            "SELECT claimq.fail(%s::bigint, %s::bigint, %s)",
            (job["job_id"], job["token"], error[:1000]))[0][0]

    def snooze(self, job, seconds):
        return self.query(
            "SELECT claimq.snooze(%s::bigint, %s::bigint, make_interval(secs => %s))",
            (job["job_id"], job["token"], seconds))[0][0]

    def release_rest(self):
        with self.lock:
            ids = list(self.held)
            tokens = [self.held[i] for i in ids]
            self.held.clear()
        if not ids:
            return 0
        rows = self.query(
            "SELECT outcome FROM claimq.release(%s::bigint[], %s::bigint[])",
            (ids, tokens))
        return sum(1 for (outcome,) in rows if outcome == "ok")

    # -- the loop ---------------------------------------------------------

    def run_job(self, job):
        job_id = job["job_id"]
        outcome = self.start(job)
        if outcome != "ok":
            if outcome == "cancelled":
                log.info("job %s: cancelled before it started, skipped", job_id)
            else:
                log.info("job %s: stale at start, someone else owns it now", job_id)
            with self.lock:
                self.held.pop(job_id, None)
            return
        with self.lock:
            self.running = job_id
            self.lost.clear()
            self.lost_why = None
        try:
            handle(job, self.lost)
        except LeaseLost:
            if self.lost_why == "cancelled":
                log.info("job %s: cancelled while running, handler stopped, not completed",
                         job_id)
            else:
                log.info("job %s: lease lost while running, dropped", job_id)
            return
        except Snooze as s:
            if self.snooze(job, s.seconds):
                log.info("job %s: snoozed for %.1f s", job_id, s.seconds)
            else:
                log.info("job %s: stale or cancelled at snooze", job_id)
            return
        except Exception as e:  # the handler failed: record it
            if self.fail(job, f"{type(e).__name__}: {e}"):
                log.info("job %s: failed: %s", job_id, e)
            else:
                log.info("job %s: stale at fail, someone else owns it now", job_id)
            return
        finally:
            with self.lock:
                self.running = None
                self.held.pop(job_id, None)
        if self.complete(job):
            log.debug("job %s: completed", job_id)
        else:
            log.info("job %s: stale at complete, someone else owns it now", job_id)

    def run(self):
        idle = self.args.idle
        while not self.stopping.is_set():
            batch = self.claim()
            if not batch:
                self.stopping.wait(idle)
                idle = min(idle * 2, 2.0)
                continue
            idle = self.args.idle
            log.info("claimed %d jobs", len(batch))
            with self.lock:
                self.held = {j["job_id"]: j["token"] for j in batch}
            with Heartbeat(self, self.args.heartbeat):
                for job in batch:
                    if self.stopping.is_set():
                        break
                    with self.lock:
                        still_ours = job["job_id"] in self.held
                    if still_ours:
                        self.run_job(job)
                released = self.release_rest()
            if released:
                log.info("released %d jobs it never started", released)
        self.conn.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""),
                   help="libpq connection string (default: $DATABASE_URL, then PG* variables)")
    p.add_argument("--queue", required=True)
    p.add_argument("--worker", default=f"py-{socket.gethostname()}-{os.getpid()}",
                   help="worker name, shown in claimq.jobs and used by release_worker()")
    p.add_argument("--batch", type=int, default=10, help="jobs per claim")
    p.add_argument("--lease", type=float, default=30.0, help="lease in seconds")
    p.add_argument("--heartbeat", type=float, default=None,
                   help="seconds between lease extensions (default lease/3, 0 = none)")
    p.add_argument("--idle", type=float, default=0.1,
                   help="first pause in seconds when the queue is empty (doubles up to 2)")
    p.add_argument("--results", default=None,
                   help="table (job_id bigint, worker text) to record completions in")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    if args.heartbeat is None:
        args.heartbeat = args.lease / 3
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format=f"%(asctime)s {args.worker} %(levelname)s %(message)s")

    worker = Worker(args)

    def stop(signum, frame):
        log.info("got %s: finishing the job at hand, then releasing the rest",
                 signal.Signals(signum).name)
        worker.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker.run()
    log.info("stopped")


if __name__ == "__main__":
    main()
