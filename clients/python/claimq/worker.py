"""Workers: a handler function is all the user writes.

    def handle(job):            # job.payload, job.id, job.attempt ...
        ...                     # return a result (kept on keep_done queues)

    claimq.Worker("dbname=app", "emails", handle, concurrency=8).run()
    claimq.Worker("dbname=app", {"emails": 8, "reports": 2}, handle).run()

For each queue the worker claims when a handler would otherwise be idle,
up to `batch` jobs (more than `concurrency` wait their turn, their leases
kept alive), starts each one and runs the handler in a thread (the
AsyncWorker: in a task).  A heartbeat extends the leases of every job it
holds, over every queue, in one call, every third of a lease.  The
handler's return value is the job's result; an exception fails the job
with its text; `Fail` says when to retry or that the job is dead; `Snooze`
puts the job back for a while without using up an attempt.

What the worker holds is keyed by (job id, token): a job it claims again
while a stale run of it is still in a handler (after a stall) is another
claim, and the stale run's end does not touch it.

A job cancelled while it runs, whose lease was lost (the heartbeat came too
late: another worker may have it now), or whose `timeout` passed, is told
so: `job.stop_reason` is set and `check_stop(job)` raises `JobStopped`.  A
thread cannot be killed, so a long handler calls `check_stop` now and then;
the AsyncWorker cancels the handler's task.  Such a job is never completed
by this run (a timed-out one is failed at its deadline).

After a lost connection or a server restart every call is retried on a new
connection, with backoff (settle calls are fenced, so a retry can only be
refused, never do harm).  On SIGTERM or SIGINT (or `stop()`) the worker
claims nothing more and releases at once what it claimed and has not
started; the heartbeat goes on for the running jobs while their handlers
finish and are settled; after `shutdown_timeout` seconds (if given) the
jobs still running are given back at once (`on_shutdown_timeout="release"`:
a snooze of 0, no attempt used) or left to their leases ("abandon": the
reclaimer counts a failed attempt), and `run()` returns.

Logging goes to the "claimq" logger: claims, starts and completions at
DEBUG, shutdown steps and cancellations at INFO, problems (failed jobs,
lost leases, refused calls, lost connections) at WARNING.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import math
import os
import queue as _queue
import signal
import socket
import threading
import time
from typing import (Any, Awaitable, Callable, Dict, List, Mapping, Optional, Set, Tuple,
                    Union)

import psycopg

from . import _tracing
from .client import (SQL_CLAIM, SQL_COMPLETE, SQL_EXTEND, SQL_FAIL, SQL_RELEASE,
                     SQL_SNOOZE, SQL_START, Client, Job, Outcome, job_of, queue_of,
                     results_param)

log = logging.getLogger("claimq.worker")

Key = Tuple[int, int]        # (job id, token): one claim of one job


def _key(job: Job) -> Key:
    return (job.id, job.token)


class Fail(Exception):
    """Raised by a handler: fail the job with this message, retrying after
    `retry_in` seconds (default: the queue's backoff), or not at all if
    `permanent`."""

    def __init__(self, message: str, *, retry_in: Optional[float] = None,
                 permanent: bool = False):
        super().__init__(message)
        self.retry_in = retry_in
        self.permanent = permanent


class Snooze(Exception):
    """Raised by a handler: run this job again in `seconds`; no attempt is used."""

    def __init__(self, seconds: float):
        super().__init__(f"snooze {seconds:.3f} s")
        self.seconds = seconds


class JobStopped(Exception):
    """The job was cancelled, its lease lost, its timeout passed or the
    worker's shutdown deadline reached: stop, and do not complete it."""


class JobTimeout(Exception):
    """What a job that ran past the worker's `timeout` is failed with (and
    what on_failure is given)."""


def check_stop(job: Job) -> None:
    """Raise JobStopped if the worker has been told to stop this job."""
    if job.stop_reason is not None:
        raise JobStopped(job.stop_reason)


def sleep(job: Job, seconds: float) -> None:
    """Sleep up to `seconds`, raising JobStopped as soon as the job must stop."""
    end = time.monotonic() + seconds
    while True:
        check_stop(job)
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


class _Refused(Exception):
    """complete() inside the handler's transaction was refused: roll back."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.value)
        self.outcome = outcome


def _default_name() -> str:
    return f"py-{socket.gethostname()}-{os.getpid()}"


class _Lane:
    """One queue a worker serves: its handler and its share of handlers."""

    def __init__(self, queue: str, handler: Callable[..., Any], concurrency: int,
                 batch: Optional[int], idle: float):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch = batch or concurrency
        # Jobs held at most: a batch larger than the handlers waits its turn.
        self.prefetch = max(self.batch, concurrency)
        self.idle = idle
        self.next_claim = 0.0                # monotonic time of the next claim
        self.work: "_queue.Queue[Optional[Job]]" = _queue.Queue()   # Worker only
        self.threads: List[threading.Thread] = []
        self.slots: Optional[asyncio.Semaphore] = None              # AsyncWorker only

    def room(self, held: int) -> int:
        """How many jobs a claim may take with `held` held: none while every
        handler is busy, else up to the batch (what exceeds the handlers
        waits for one)."""
        return 0 if held >= self.concurrency else max(self.prefetch - held, 0)

    def claimed(self, n: int, now: float, idle: float, max_idle: float) -> bool:
        """After a claim that took n jobs at `now`: claim again at once, or
        back off, doubling up to max_idle while the queue gives nothing."""
        if n == 0:
            self.next_claim = now + self.idle
            self.idle = min(self.idle * 2, max_idle)
            return False
        self.idle = idle
        self.next_claim = 0.0
        log.debug("claimed %d jobs of %s", n, self.queue)
        return True


class _Base:
    """What both workers share: settings, the jobs held, and the outcomes."""

    def __init__(self, conninfo: str, queue: Union[str, Mapping[str, int]],
                 handler: Union[Callable[..., Any], Mapping[str, Callable[..., Any]]], *,
                 concurrency: int = 4, batch: Optional[int] = None, lease: float = 30.0,
                 heartbeat: Optional[float] = None, name: Optional[str] = None,
                 idle: float = 0.1, max_idle: float = 2.0, max_backoff: float = 5.0,
                 on_complete: Optional[Callable[..., Any]] = None,
                 on_failure: Optional[Callable[..., Any]] = None,
                 timeout: Optional[float] = None,
                 shutdown_timeout: Optional[float] = None,
                 on_shutdown_timeout: str = "release"):
        if on_shutdown_timeout not in ("release", "abandon"):
            raise ValueError('on_shutdown_timeout must be "release" or "abandon"')
        queues = {queue: concurrency} if isinstance(queue, str) else dict(queue)
        if not queues:
            raise ValueError("no queue to serve")

        def handler_of(q: str) -> Callable[..., Any]:
            if callable(handler):
                return handler
            if q not in handler:
                raise ValueError(f"no handler for queue {q!r}")
            return handler[q]
        self.lanes = [_Lane(q, handler_of(q), n, batch, idle) for q, n in queues.items()]
        self.conninfo = conninfo
        self.queue = self.lanes[0].queue     # the first (or only) queue
        self.handler = self.lanes[0].handler
        self.concurrency = sum(lane.concurrency for lane in self.lanes)
        self.batch = batch or self.lanes[0].batch
        self.prefetch = sum(lane.prefetch for lane in self.lanes)
        self.on_complete = on_complete
        self.on_failure = on_failure
        self.timeout = timeout
        self.shutdown_timeout = shutdown_timeout
        self.on_shutdown_timeout = on_shutdown_timeout
        self.lease = float(lease)
        self.heartbeat = self.lease / 3 if heartbeat is None else float(heartbeat)
        self.name = name or _default_name()
        self.idle = idle
        self.max_idle = max_idle
        self.max_backoff = max_backoff
        self.held: Dict[Key, Job] = {}       # claimed or running, ours
        self.started: Set[Key] = set()
        self.deadlines: Dict[Key, float] = {}  # started jobs with a timeout
        self.completed = 0
        self.failed = 0

    def _held_in(self, lane: _Lane) -> int:
        return sum(1 for j in self.held.values() if j.queue == lane.queue)

    def _log_stopped(self, job: Job) -> None:
        if job.stop_reason == Outcome.CANCELLED.value:
            log.info("job %s: cancelled while running, handler stopped, not completed", job.id)
        elif job.stop_reason in ("timeout", "shutdown"):
            log.info("job %s: handler stopped (%s)", job.id, job.stop_reason)
        else:
            log.warning("job %s: lease lost while running (%s), dropped", job.id,
                        job.stop_reason)

    def _log_refused(self, job: Job, call: str, outcome: Outcome) -> None:
        if outcome is Outcome.STALE:
            log.warning("job %s: stale at %s, someone else owns it now", job.id, call)
        elif outcome is Outcome.CANCELLED:
            log.info("job %s: cancelled at %s", job.id, call)
        else:
            log.warning("job %s: %s at %s", job.id, outcome.value, call)

    @staticmethod
    def _failure(e: BaseException) -> Tuple[str, Optional[float], bool]:
        """What fail() is told of a handler's exception: the message (the
        exception's text, with its type unless it is a Fail), retry_in and
        permanent."""
        if isinstance(e, Fail):
            return str(e)[:2000], e.retry_in, e.permanent
        return f"{type(e).__name__}: {e}"[:2000], None, False

    def _log_settled(self, job: Job, call: str, outcome: Outcome, what: str) -> None:
        if outcome is Outcome.OK:
            if call == "fail":
                self.failed += 1
                log.warning("job %s (%s, attempt %d): %s", job.id, job.queue, job.attempt, what)
            else:
                log.debug("job %s: %s", job.id, what)
        else:
            self._log_refused(job, call, outcome)

    def _failed_hook(self, job: Job, error: BaseException, state: Optional[str]) -> None:
        """on_failure(job, error, dead) after a failure took effect."""
        if self.on_failure is None:
            return
        try:
            self.on_failure(job, error, state == "dead")
        except Exception:  # noqa: BLE001
            log.exception("job %s: on_failure raised", job.id)

    def _stop_job(self, key: Key, reason: str) -> Optional[Job]:
        """Forget a claim and tell its handler to stop (caller holds the lock
        in Worker)."""
        job = self.held.pop(key, None)
        self.started.discard(key)
        self.deadlines.pop(key, None)
        if job is not None:
            job.stop_reason = reason
            if reason == Outcome.CANCELLED.value:
                log.info("job %s: cancelled, stopping its handler", job.id)
            elif reason in ("timeout", "shutdown"):
                log.info("job %s: %s, stopping its handler", job.id, reason)
            else:
                log.warning("job %s: lease lost (%s): another worker may own it", job.id,
                            reason)
        return job


class Worker(_Base):
    """A worker that runs a plain function in `concurrency` threads per queue.

    `queue` is a queue name, or a mapping of queue names to their
    concurrency; `handler` a function, or a mapping of queue names to
    functions.  `handler(job)` gets a `Job` and returns the job's result
    (any value JSON can hold, or None).  With `on_complete(job, result,
    conn)`, the job is completed in a transaction on `conn` in which
    on_complete runs first: what it writes is committed if and only if the
    completion takes effect (a worker whose lease ran out writes nothing).
    `on_failure(job, error, dead)` runs after a failure of the job took
    effect.  `timeout` (seconds) stops a handler the way a cancel does and
    fails its job.
    """

    def __init__(self, conninfo: str, queue: Union[str, Mapping[str, int]],
                 handler: Union[Callable[[Job], Any], Mapping[str, Callable[[Job], Any]]],
                 **kw: Any):
        super().__init__(conninfo, queue, handler, **kw)
        self.lock = threading.Lock()         # guards held / started / deadlines
        self.db_lock = threading.Lock()      # one statement at a time
        self.client: Optional[Client] = None
        self.stopping = threading.Event()
        self.freed = threading.Event()       # a job left this worker, or stop()
        self.beat_wake = threading.Event()   # a new deadline, or the end
        self.beat_done = threading.Event()   # the heartbeat's end: all settled
        self.local = threading.local()       # handler threads' connections
        self.thread_conns: List[psycopg.Connection] = []
        self.spans: Dict[Key, _tracing.Process] = {}   # started attempts' spans

    # -- the connection, kept alive ------------------------------------------

    def _db(self, fn: Callable[[Client], Any], *, give_up: Optional[threading.Event] = None) -> Any:
        """fn(client) on the worker's connection; after a lost connection,
        again on a new one, with backoff, until it works (or give_up is set)."""
        delay = 0.1
        while True:
            with self.db_lock:
                try:
                    if self.client is None:
                        self.client = Client(self.conninfo, application_name=self.name)
                    return fn(self.client)
                except psycopg.OperationalError as e:
                    log.warning("connection lost (%s); reconnecting in %.1f s", e, delay)
                    try:
                        if self.client is not None:
                            self.client.close()
                    except Exception:  # noqa: BLE001
                        pass
                    self.client = None
            if give_up is not None and give_up.is_set():
                raise ConnectionError("gave up reconnecting")
            time.sleep(delay)
            delay = min(delay * 2, self.max_backoff)

    # -- the loop --------------------------------------------------------------

    def stop(self) -> None:
        """Claim nothing more; release the unstarted claims; run() returns once
        the running jobs are settled (or the shutdown deadline passed)."""
        self.stopping.set()
        self.freed.set()

    def run(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda s, f: self.stop())
        beat = threading.Thread(target=self._beat, name="claimq-heartbeat", daemon=True)
        beat.start()
        # Daemon threads: a handler that ignores check_stop cannot keep the
        # process alive past run() once its job is no longer ours.
        for lane in self.lanes:
            for i in range(lane.concurrency):
                t = threading.Thread(target=self._serve, args=(lane,), daemon=True,
                                     name=f"claimq-{lane.queue}-{i}")
                t.start()
                lane.threads.append(t)
        try:
            while not self.stopping.is_set():
                if not self._claim_round():
                    now = time.monotonic()
                    wait = min([0.2] + [lane.next_claim - now for lane in self.lanes
                                        if lane.next_claim > now])
                    self.freed.wait(wait)
                    self.freed.clear()
        finally:
            self.stopping.set()
            self._shutdown()

    def _claim_round(self) -> bool:
        """One claim for each queue that has room and is due: True if any
        job came."""
        got = False
        for lane in self.lanes:
            if self.stopping.is_set():
                break
            now = time.monotonic()
            if now < lane.next_claim:
                continue
            with self.lock:
                room = lane.room(self._held_in(lane))
            if room == 0:
                continue
            try:
                jobs = self._db(lambda c: c.claim(lane.queue, room, lease=self.lease,
                                                  worker=self.name), give_up=self.stopping)
            except ConnectionError:
                jobs = []
            if not lane.claimed(len(jobs), time.monotonic(), self.idle, self.max_idle):
                continue
            got = True
            with self.lock:
                for job in jobs:
                    self.held[_key(job)] = job
            for job in jobs:
                lane.work.put(job)
        return got

    def _serve(self, lane: _Lane) -> None:
        while True:
            job = lane.work.get()
            if job is None:
                return
            self._run_job(job)

    def _shutdown(self) -> None:
        # 1. What was claimed and not started goes back at once.
        for lane in self.lanes:
            while True:
                try:
                    lane.work.get_nowait()
                except _queue.Empty:
                    break
            for _ in lane.threads:
                lane.work.put(None)
        self._release_unstarted()
        # 2. The running jobs finish, their leases kept by the heartbeat.
        deadline = (math.inf if self.shutdown_timeout is None
                    else time.monotonic() + self.shutdown_timeout)
        while True:
            with self.lock:
                left = len(self.held)
            if left == 0:
                break
            wait = deadline - time.monotonic()
            if wait <= 0:
                self._give_up_running()
                break
            self.freed.wait(min(wait, 0.2))
            self.freed.clear()
        # 3. Nothing is held: stop the heartbeat, close the connections.
        self.beat_done.set()
        self.beat_wake.set()
        for conn in list(self.thread_conns):
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
        with self.db_lock:
            if self.client is not None:
                self.client.close()
                self.client = None

    def _release_unstarted(self) -> None:
        with self.lock:
            rest = [j for k, j in self.held.items() if k not in self.started]
            for j in rest:
                del self.held[_key(j)]
        if rest:
            try:
                rows = self._db(lambda c: c.release(rest))
                log.info("released %d jobs it never started",
                         sum(1 for r in rows if r[1] is Outcome.OK))
            except Exception as e:  # noqa: BLE001
                log.warning("could not release %d jobs: %s", len(rest), e)

    def _give_up_running(self) -> None:
        """The shutdown deadline passed: stop the running handlers, and give
        their jobs back (a snooze of 0: no attempt used) or leave them to
        their leases."""
        with self.lock:
            jobs = [self._stop_job(k, "shutdown") for k in list(self.held)]
        jobs = [j for j in jobs if j is not None]
        if not jobs:
            return
        if self.on_shutdown_timeout == "abandon":
            log.warning("shutdown deadline: %d running jobs left to their leases", len(jobs))
            return
        try:
            rows = self._db(lambda c: c.snooze(jobs, 0))
            log.warning("shutdown deadline: %d running jobs given back",
                        sum(1 for r in rows if r[1] is Outcome.OK))
        except Exception as e:  # noqa: BLE001
            log.warning("could not give back %d running jobs: %s", len(jobs), e)

    def _beat(self) -> None:
        """Extends every held lease every `heartbeat` seconds, and fails the
        jobs whose timeout passed, until shutdown has settled everything."""
        next_beat = time.monotonic() + self.heartbeat if self.heartbeat > 0 else math.inf
        while not self.beat_done.is_set():
            with self.lock:
                due = min([next_beat] + list(self.deadlines.values()))
            self.beat_wake.wait(max(0.0, min(due - time.monotonic(), 1.0)))
            self.beat_wake.clear()
            if self.beat_done.is_set():
                return
            self._time_out()
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + self.heartbeat
            with self.lock:
                jobs = list(self.held.values())
            if not jobs:
                continue
            try:
                rows = self._db(lambda c: c.extend(jobs, self.lease), give_up=self.beat_done)
            except Exception as e:  # noqa: BLE001
                log.warning("heartbeat failed: %s", e)
                continue
            stopped = False
            with self.lock:
                # One row per job, in the order given.
                for job, (_, outcome, _) in zip(jobs, rows):
                    if outcome is not Outcome.OK and self._stop_job(_key(job), outcome.value):
                        stopped = True
            if stopped:
                self.freed.set()

    def _time_out(self) -> None:
        now = time.monotonic()
        late = []
        with self.lock:
            for k, t in list(self.deadlines.items()):
                if t > now:
                    continue
                err = JobTimeout(f"timed out after {self.timeout:g} s")
                # The span knows of the failure before the handler is told.
                span = self.spans.get(k)
                if span is not None:
                    span.settle("failed", err)
                late.append((self._stop_job(k, "timeout"), err, span))
        for job, err, span in late:
            if job is None:
                continue
            msg = f"JobTimeout: {err}"
            try:
                row = self._db(lambda c: c.fail([job], msg))[0]
            except Exception as e:  # noqa: BLE001
                log.warning("job %s: could not fail it after its timeout: %s", job.id, e)
                continue
            self._log_settled(job, "fail", row[1], f"failed: {msg}")
            if row[1] is Outcome.OK:
                self._failed_hook(job, err, row[2])
            elif span is not None:
                span.settle(row[1].value, err)
        if late:
            self.freed.set()

    def _run_job(self, job: Job) -> None:
        key = _key(job)
        with self.lock:
            if key not in self.held or self.stopping.is_set():
                return      # lost or cancelled while it waited, or released at shutdown
            self.started.add(key)
        # The attempt's span (if tracing): from its start to its settling.
        span = _tracing.Process(job)
        with self.lock:
            self.spans[key] = span
        try:
            with span.current():
                out = self._db(lambda c: c.start([job], self.lease))[0][1]
                if out is not Outcome.OK:
                    with self.lock:
                        self.held.pop(key, None)
                    self._log_refused(job, "start", out)
                    span.settle(out.value)
                    return
                log.debug("job %s: started (%s, attempt %d)", job.id, job.queue, job.attempt)
                if self.timeout is not None:
                    with self.lock:
                        if key in self.held:
                            self.deadlines[key] = time.monotonic() + self.timeout
                    self.beat_wake.set()
                self._handle(job, span)
        except Exception as e:  # noqa: BLE001
            span.settle("unsettled", e)
            log.exception("job %s: the worker failed to settle it", job.id)
        finally:
            # Only this claim: a newer claim of the same job is not ours to drop.
            with self.lock:
                self.held.pop(key, None)
                self.started.discard(key)
                self.deadlines.pop(key, None)
                self.spans.pop(key, None)
            span.end()
            self.freed.set()

    def _thread_conn(self) -> psycopg.Connection:
        conn = getattr(self.local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.conninfo, autocommit=True, prepare_threshold=None,
                                   application_name=self.name)
            self.local.conn = conn
            with self.lock:
                self.thread_conns.append(conn)
        return conn

    def _complete_in_transaction(self, job: Job, result: Any) -> None:
        """on_complete(job, result, conn) and complete() in one transaction."""
        conn = self._thread_conn()
        try:
            with conn.transaction():
                assert self.on_complete is not None
                self.on_complete(job, result, conn)
                row = conn.execute(SQL_COMPLETE, ([job.id], [job.token],
                                                  results_param([result]), job.queue),
                                   prepare=False).fetchone()
                outcome = Outcome(row[1]) if row else Outcome.MISSING
                if outcome is not Outcome.OK:
                    raise _Refused(outcome)
        except psycopg.OperationalError:
            conn.close()        # the job comes back when its lease runs out
            raise

    def _handle(self, job: Job, span: Optional[_tracing.Process] = None) -> None:
        span = span or _tracing.Process(None)
        lane = next(lane for lane in self.lanes if lane.queue == job.queue)
        try:
            result = lane.handler(job)
            check_stop(job)
            if self.on_complete is not None:
                try:
                    self._complete_in_transaction(job, result)
                except psycopg.OperationalError as e:
                    # The handler did not fail: the job is not failed; it
                    # comes back when its lease runs out.
                    log.warning("job %s: connection lost while completing it (%s);"
                                " its lease decides", job.id, e)
                    span.settle("connection_lost", e)
                    return
            else:
                out = self._db(lambda c: c.complete([job], [result]))[0][1]
                if out is not Outcome.OK:
                    raise _Refused(out)
            self.completed += 1
            span.settle("completed")
            log.debug("job %s: completed", job.id)
        except JobStopped:
            span.stopped(job.stop_reason)
            self._log_stopped(job)
        except _Refused as r:
            span.settle(r.outcome.value)
            self._log_refused(job, "complete", r.outcome)
        except Snooze as s:
            out = self._db(lambda c: c.snooze([job], s.seconds))[0][1]
            span.settle("snoozed" if out is Outcome.OK else out.value)
            self._log_settled(job, "snooze", out, f"snoozed for {s.seconds:.1f} s")
        except Exception as e:  # noqa: BLE001
            if job.stop_reason is not None:     # told to stop: not ours to fail
                span.stopped(job.stop_reason)
                self._log_stopped(job)
                return
            msg, retry_in, permanent = self._failure(e)
            row = self._db(lambda c: c.fail([job], msg, retry_in=retry_in,
                                            permanent=permanent))[0]
            span.settle("failed" if row[1] is Outcome.OK else row[1].value, e)
            self._log_settled(job, "fail", row[1], f"failed: {msg}")
            if row[1] is Outcome.OK:
                self._failed_hook(job, e, row[2])


class AsyncWorker(_Base):
    """The same with asyncio: `handler(job)` is a coroutine function, run in
    up to `concurrency` tasks per queue; a cancelled job's, a lost lease's
    or a timed-out job's task is cancelled.  It takes no `on_complete`."""

    def __init__(self, conninfo: str, queue: Union[str, Mapping[str, int]],
                 handler: Union[Callable[[Job], Awaitable[Any]],
                                Mapping[str, Callable[[Job], Awaitable[Any]]]],
                 **kw: Any):
        if kw.get("on_complete") is not None:
            # The hook takes a blocking connection; accepted and never
            # called, what it writes would be lost.
            raise TypeError("AsyncWorker does not take on_complete")
        super().__init__(conninfo, queue, handler, **kw)
        self.conn: Optional[psycopg.AsyncConnection] = None
        self.db_lock: Optional[asyncio.Lock] = None
        self.stopping: Optional[asyncio.Event] = None
        self.beat_done: Optional[asyncio.Event] = None
        self.tasks: Dict[Key, asyncio.Task] = {}

    def stop(self) -> None:
        if self.stopping is not None:
            self.stopping.set()

    async def _db(self, sql: str, params: Any, *, retry: bool = True) -> List[tuple]:
        assert self.db_lock is not None and self.stopping is not None
        delay = 0.1
        while True:
            async with self.db_lock:
                try:
                    if self.conn is None:
                        self.conn = await psycopg.AsyncConnection.connect(
                            self.conninfo, autocommit=True, prepare_threshold=None,
                            application_name=self.name)
                    cur = await self.conn.execute(sql, params, prepare=False)
                    return await cur.fetchall()
                except psycopg.OperationalError as e:
                    log.warning("connection lost (%s); reconnecting in %.1f s", e, delay)
                    if self.conn is not None:
                        try:
                            await self.conn.close()
                        except Exception:  # noqa: BLE001
                            pass
                    self.conn = None
            if not retry:
                raise ConnectionError("connection lost")
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_backoff)

    async def run(self) -> None:
        self.db_lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.beat_done = asyncio.Event()
        for lane in self.lanes:
            lane.slots = asyncio.Semaphore(lane.concurrency)
        loop = asyncio.get_running_loop()
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        except (NotImplementedError, RuntimeError):
            pass
        beat = asyncio.create_task(self._beat())
        try:
            while not self.stopping.is_set():
                got = False
                for lane in self.lanes:
                    if self.stopping.is_set() or loop.time() < lane.next_claim:
                        continue
                    room = lane.room(self._held_in(lane))
                    if room == 0:
                        continue
                    try:
                        rows = await self._db(
                            SQL_CLAIM, (lane.queue, room, _dt.timedelta(seconds=self.lease),
                                        self.name, False, _dt.timedelta(0)),
                            retry=False)
                    except ConnectionError:
                        rows = []
                    if not lane.claimed(len(rows), loop.time(), self.idle, self.max_idle):
                        continue
                    got = True
                    for r in rows:
                        job = job_of(r, lane.queue)
                        self.held[_key(job)] = job
                        self.tasks[_key(job)] = asyncio.create_task(self._run_job(lane, job))
                if not got:
                    now = loop.time()
                    wait = min([0.2] + [lane.next_claim - now for lane in self.lanes
                                        if lane.next_claim > now])
                    stop = asyncio.ensure_future(self.stopping.wait())
                    await asyncio.wait([stop, *self.tasks.values()], timeout=wait,
                                       return_when=asyncio.FIRST_COMPLETED)
                    stop.cancel()
        finally:
            # What was claimed and not started goes back at once; the
            # heartbeat goes on until every running job is settled or the
            # shutdown deadline passed.
            self.stopping.set()
            await self._release_unstarted()
            if self.tasks:
                _, pending = await asyncio.wait(list(self.tasks.values()),
                                                timeout=self.shutdown_timeout)
                if pending:
                    await self._give_up_running(pending)
            self.beat_done.set()
            await beat
            if self.conn is not None:
                await self.conn.close()
                self.conn = None

    async def _release_unstarted(self) -> None:
        rest = [j for k, j in self.held.items() if k not in self.started]
        for job in rest:
            del self.held[_key(job)]
            task = self.tasks.get(_key(job))
            if task is not None:
                task.cancel()       # it waits for a slot, and will find none
        if not rest:
            return
        try:
            rows = await self._db(SQL_RELEASE, ([j.id for j in rest], [j.token for j in rest],
                                                queue_of(rest)), retry=False)
            log.info("released %d jobs it never started", sum(1 for r in rows if r[1] == "ok"))
        except Exception as e:  # noqa: BLE001
            log.warning("could not release %d jobs: %s", len(rest), e)

    async def _give_up_running(self, pending: Set[asyncio.Task]) -> None:
        jobs = [j for j in (self._stop_job(k, "shutdown") for k in list(self.held))
                if j is not None]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if not jobs:
            return
        if self.on_shutdown_timeout == "abandon":
            log.warning("shutdown deadline: %d running jobs left to their leases", len(jobs))
            return
        try:
            rows = await self._db(SQL_SNOOZE, ([j.id for j in jobs], [j.token for j in jobs],
                                               _dt.timedelta(0), queue_of(jobs)), retry=False)
            log.warning("shutdown deadline: %d running jobs given back",
                        sum(1 for r in rows if r[1] == "ok"))
        except Exception as e:  # noqa: BLE001
            log.warning("could not give back %d running jobs: %s", len(jobs), e)

    async def _beat(self) -> None:
        assert self.beat_done is not None
        if self.heartbeat <= 0:
            await self.beat_done.wait()
            return
        while True:
            try:
                await asyncio.wait_for(self.beat_done.wait(), self.heartbeat)
                return
            except asyncio.TimeoutError:
                pass
            jobs = list(self.held.values())
            if not jobs:
                continue
            try:
                rows = await self._db(
                    SQL_EXTEND, ([j.id for j in jobs], [j.token for j in jobs],
                                 _dt.timedelta(seconds=self.lease), queue_of(jobs)),
                    retry=False)
            except ConnectionError:
                continue
            # One row per job, in the order given.
            for job, (_, outcome, _) in zip(jobs, rows):
                key = _key(job)
                if outcome != "ok" and key in self.held:
                    self._stop_job(key, outcome)
                    task = self.tasks.get(key)
                    if task is not None:
                        task.cancel()

    async def _settle(self, sql: str, job: Job, *extra: Any) -> List[tuple]:
        rows = await self._db(sql, ([job.id], [job.token], *extra, job.queue))
        return [(r[0], Outcome(r[1]), *r[2:]) for r in rows]

    async def _run_job(self, lane: _Lane, job: Job) -> None:
        assert self.stopping is not None and lane.slots is not None
        key = _key(job)
        span = _tracing.Process(None)      # none until the job is started
        try:
            async with lane.slots:
                if key not in self.held or self.stopping.is_set():
                    return  # lost or cancelled while it waited, or released at shutdown
                self.started.add(key)
                # The attempt's span (if tracing): from its start to its settling.
                span = _tracing.Process(job)
                with span.current():
                    out = (await self._settle(SQL_START, job,
                                              _dt.timedelta(seconds=self.lease)))[0][1]
                    if out is not Outcome.OK:
                        span.settle(out.value)
                        self._log_refused(job, "start", out)
                        return
                    log.debug("job %s: started (%s, attempt %d)", job.id, job.queue,
                              job.attempt)
                    await self._handle(lane, job, span)
        except asyncio.CancelledError:
            if key in self.started:
                span.stopped(job.stop_reason)
                self._log_stopped(job)
        except Exception as e:  # noqa: BLE001
            span.settle("unsettled", e)
            log.exception("job %s: the worker failed to settle it", job.id)
        finally:
            span.end()
            # Only this claim: a newer claim of the same job is not ours to drop.
            self.held.pop(key, None)
            self.started.discard(key)
            self.tasks.pop(key, None)

    async def _fail(self, job: Job, error: BaseException, span: _tracing.Process) -> None:
        msg, retry_in, permanent = self._failure(error)
        row = (await self._settle(
            SQL_FAIL, job, msg,
            _dt.timedelta(seconds=retry_in) if retry_in is not None else None, permanent))[0]
        span.settle("failed" if row[1] is Outcome.OK else row[1].value, error)
        self._log_settled(job, "fail", row[1], f"failed: {msg}")
        if row[1] is Outcome.OK:
            self._failed_hook(job, error, row[2])

    async def _handle(self, lane: _Lane, job: Job,
                      span: Optional[_tracing.Process] = None) -> None:
        span = span or _tracing.Process(None)
        try:
            if self.timeout is None:
                result = await lane.handler(job)
            else:
                try:
                    result = await asyncio.wait_for(lane.handler(job), self.timeout)
                except asyncio.TimeoutError:
                    job.stop_reason = "timeout"
                    self.held.pop(_key(job), None)
                    await self._fail(job, JobTimeout(f"timed out after {self.timeout:g} s"),
                                     span)
                    return
        except JobStopped:
            span.stopped(job.stop_reason)
            self._log_stopped(job)
            return
        except Snooze as s:
            out = (await self._settle(SQL_SNOOZE, job, _dt.timedelta(seconds=s.seconds)))[0][1]
            span.settle("snoozed" if out is Outcome.OK else out.value)
            self._log_settled(job, "snooze", out, f"snoozed for {s.seconds:.1f} s")
            return
        except Exception as e:  # noqa: BLE001
            await self._fail(job, e, span)
            return
        if job.stop_reason is not None:
            span.stopped(job.stop_reason)
            self._log_stopped(job)
            return
        try:
            out = (await self._settle(SQL_COMPLETE, job, results_param([result])))[0][1]
        except (TypeError, ValueError) as e:        # a result JSON cannot hold
            await self._fail(job, e, span)
            return
        if out is Outcome.OK:
            self.completed += 1
            span.settle("completed")
            log.debug("job %s: completed", job.id)
        else:
            span.settle(out.value)
            self._log_refused(job, "complete", out)
