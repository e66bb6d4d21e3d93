"""Workers: a handler function is all the user writes.

    def handle(job):            # job.payload, job.id, job.attempts ...
        ...                     # return a result (kept on keep_done queues)

    claimq.Worker("dbname=app", "emails", handle, concurrency=8).run()

The worker claims when a handler would otherwise be idle, up to `batch`
jobs (more than `concurrency` wait their turn, their leases kept alive),
starts each one and runs the handler in a thread (the AsyncWorker: in a
task).  A heartbeat extends the leases of every job it
holds in one call, every third of a lease.  The handler's return value is
the job's result; an exception fails the job with its text; `Fail` says
when to retry or that the job is dead; `Snooze` puts the job back for a
while without using up an attempt.

A job cancelled while it runs, or whose lease was lost (the heartbeat came
too late: another worker may have it now), is told so: `job.stop_reason`
is set and `check_stop(job)` raises `JobStopped`.  A thread cannot be
killed, so a long handler calls `check_stop` now and then; the AsyncWorker
cancels the handler's task.  Such a job is never completed by this worker.

After a lost connection or a server restart every call is retried on a new
connection, with backoff (settle calls are fenced, so a retry can only be
refused, never do harm).  On SIGTERM or SIGINT (or `stop()`) the worker
claims nothing more, releases what it claimed and has not started, lets the
running handlers finish and settles them, and `run()` returns.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Dict, List, Optional, Set, Tuple

import psycopg

from .client import (SQL_CLAIM, SQL_COMPLETE, SQL_EXTEND, SQL_FAIL, SQL_RELEASE,
                     SQL_SNOOZE, SQL_START, Client, Job, Outcome, job_of,
                     results_param)

log = logging.getLogger("claimq.worker")


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
    """The job was cancelled, or its lease lost: stop, and do not complete it."""


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


class _Base:
    """What both workers share: settings, the jobs held, and the outcomes."""

    def __init__(self, conninfo: str, queue: str, handler: Callable[..., Any], *,
                 concurrency: int = 4, batch: Optional[int] = None, lease: float = 30.0,
                 heartbeat: Optional[float] = None, name: Optional[str] = None,
                 idle: float = 0.1, max_idle: float = 2.0, max_backoff: float = 5.0,
                 on_complete: Optional[Callable[..., Any]] = None):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.conninfo = conninfo
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch = batch or concurrency
        # Jobs held at most: a batch larger than the handlers waits its turn.
        self.prefetch = max(self.batch, self.concurrency)
        self.on_complete = on_complete
        self.lease = float(lease)
        self.heartbeat = self.lease / 3 if heartbeat is None else float(heartbeat)
        self.name = name or _default_name()
        self.idle = idle
        self.max_idle = max_idle
        self.max_backoff = max_backoff
        self.held: Dict[int, Job] = {}       # claimed or running, ours
        self.started: Set[int] = set()
        self.completed = 0
        self.failed = 0

    def _log_stopped(self, job: Job) -> None:
        if job.stop_reason == Outcome.CANCELLED.value:
            log.info("job %s: cancelled while running, handler stopped, not completed", job.id)
        else:
            log.info("job %s: lease lost while running (%s), dropped", job.id, job.stop_reason)

    def _log_refused(self, job: Job, call: str, outcome: Outcome) -> None:
        if outcome is Outcome.STALE:
            log.info("job %s: stale at %s, someone else owns it now", job.id, call)
        else:
            log.info("job %s: %s at %s", job.id, outcome.value, call)

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
            log.info("job %s: %s", job.id, what)
        else:
            self._log_refused(job, call, outcome)

    def _stop_job(self, job_id: int, outcome: Outcome) -> None:
        job = self.held.pop(job_id, None)
        if job is not None:
            job.stop_reason = outcome.value
            if outcome is Outcome.CANCELLED:
                log.info("job %s: cancelled, stopping its handler", job_id)
            else:
                log.warning("job %s: lease lost (%s): another worker may own it", job_id,
                            outcome.value)



class Worker(_Base):
    """A worker that runs a plain function in `concurrency` threads.

    `handler(job)` gets a `Job` and returns the job's result (any value
    JSON can hold, or None).  With `on_complete(job, result, conn)`, the
    job is completed in a transaction on `conn` in which on_complete runs
    first: what it writes is committed if and only if the completion takes
    effect (a worker whose lease ran out writes nothing).
    """

    def __init__(self, conninfo: str, queue: str, handler: Callable[[Job], Any], **kw: Any):
        super().__init__(conninfo, queue, handler, **kw)
        self.lock = threading.Lock()         # guards held / started
        self.db_lock = threading.Lock()      # one statement at a time
        self.client: Optional[Client] = None
        self.stopping = threading.Event()
        self.freed = threading.Event()       # a job left this worker
        self.local = threading.local()       # handler threads' connections
        self.thread_conns: List[psycopg.Connection] = []

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
        """Claim nothing more; run() returns once the running jobs are settled."""
        self.stopping.set()

    def run(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda s, f: self.stop())
        beat = threading.Thread(target=self._beat, name="claimq-heartbeat", daemon=True)
        beat.start()
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="claimq-handler")
        idle = self.idle
        try:
            while not self.stopping.is_set():
                # Claim while a handler would otherwise have nothing to do.
                with self.lock:
                    room = self.prefetch - len(self.held)
                    busy = len(self.held) >= self.concurrency
                if busy or room <= 0:
                    self.freed.wait(0.2)
                    self.freed.clear()
                    continue
                try:
                    jobs = self._db(lambda c: c.claim(self.queue, room, lease=self.lease,
                                                      worker=self.name), give_up=self.stopping)
                except ConnectionError:
                    jobs = []
                if not jobs:
                    self.stopping.wait(idle)
                    idle = min(idle * 2, self.max_idle)
                    continue
                idle = self.idle
                log.info("claimed %d jobs", len(jobs))
                with self.lock:
                    for job in jobs:
                        self.held[job.id] = job
                for job in jobs:
                    pool.submit(self._run_job, job)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self._release_unstarted()
            self.stopping.set()
            beat.join()
            for conn in self.thread_conns:
                conn.close()
            if self.client is not None:
                self.client.close()
                self.client = None

    def _release_unstarted(self) -> None:
        with self.lock:
            rest = [j for i, j in self.held.items() if i not in self.started]
        if rest:
            try:
                rows = self._db(lambda c: c.release(rest))
                log.info("released %d jobs it never started",
                         sum(1 for r in rows if r[1] is Outcome.OK))
                with self.lock:
                    for j in rest:
                        self.held.pop(j.id, None)
            except Exception as e:  # noqa: BLE001
                log.warning("could not release %d jobs: %s", len(rest), e)

    def _beat(self) -> None:
        if self.heartbeat <= 0:
            return
        while not self.stopping.wait(self.heartbeat):
            with self.lock:
                jobs = list(self.held.values())
            if not jobs:
                continue
            try:
                rows = self._db(lambda c: c.extend(jobs, self.lease), give_up=self.stopping)
            except Exception as e:  # noqa: BLE001
                log.warning("heartbeat failed: %s", e)
                continue
            with self.lock:
                for job_id, outcome, _ in rows:
                    if outcome is not Outcome.OK:
                        self._stop_job(job_id, outcome)

    def _run_job(self, job: Job) -> None:
        try:
            if self.stopping.is_set():
                # Shutting down: hand it back for another worker.
                self._db(lambda c: c.release([job]))
                return
            with self.lock:
                if job.id not in self.held:
                    return
                self.started.add(job.id)
            outcome = self._db(lambda c: c.start([job], self.lease))[0][1]
            if outcome is not Outcome.OK:
                with self.lock:
                    self.held.pop(job.id, None)
                log.info("job %s: %s at start, skipped", job.id, outcome.value)
                return
            self._handle(job)
        except Exception:  # noqa: BLE001
            log.exception("job %s: the worker failed to settle it", job.id)
        finally:
            with self.lock:
                self.held.pop(job.id, None)
                self.started.discard(job.id)
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
                                                  results_param([result]))).fetchone()
                outcome = Outcome(row[1]) if row else Outcome.MISSING
                if outcome is not Outcome.OK:
                    raise _Refused(outcome)
        except psycopg.OperationalError:
            conn.close()        # the job comes back when its lease runs out
            raise

    def _handle(self, job: Job) -> None:
        try:
            result = self.handler(job)
            check_stop(job)
            if self.on_complete is not None:
                self._complete_in_transaction(job, result)
            else:
                out = self._db(lambda c: c.complete([job], [result]))[0][1]
                if out is not Outcome.OK:
                    raise _Refused(out)
            self.completed += 1
            log.debug("job %s: completed", job.id)
        except JobStopped:
            self._log_stopped(job)
        except _Refused as r:
            self._log_refused(job, "complete", r.outcome)
        except Snooze as s:
            out = self._db(lambda c: c.snooze([job], s.seconds))[0][1]
            self._log_settled(job, "snooze", out, f"snoozed for {s.seconds:.1f} s")
        except Exception as e:  # noqa: BLE001
            msg, retry_in, permanent = self._failure(e)
            out = self._db(lambda c: c.fail([job], msg, retry_in=retry_in,
                                            permanent=permanent))[0][1]
            self._log_settled(job, "fail", out, f"failed: {msg}")


class AsyncWorker(_Base):
    """The same with asyncio: `handler(job)` is a coroutine function, run in
    up to `concurrency` tasks; a cancelled job's or lost lease's task is
    cancelled."""

    def __init__(self, conninfo: str, queue: str, handler: Callable[[Job], Awaitable[Any]],
                 **kw: Any):
        super().__init__(conninfo, queue, handler, **kw)
        self.conn: Optional[psycopg.AsyncConnection] = None
        self.db_lock: Optional[asyncio.Lock] = None
        self.stopping: Optional[asyncio.Event] = None
        self.tasks: Dict[int, asyncio.Task] = {}

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
                    cur = await self.conn.execute(sql, params)
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
        loop = asyncio.get_running_loop()
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        except (NotImplementedError, RuntimeError):
            pass
        beat = asyncio.create_task(self._beat())
        idle = self.idle
        try:
            while not self.stopping.is_set():
                free = min(self.batch, self.concurrency - len(self.tasks))
                if free <= 0:
                    await asyncio.wait(list(self.tasks.values()), timeout=0.2,
                                       return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    rows = await self._db(
                        SQL_CLAIM, (self.queue, free, _dt.timedelta(seconds=self.lease),
                                    self.name, False, _dt.timedelta(0)),
                        retry=False)
                except ConnectionError:
                    rows = []
                if not rows:
                    try:
                        await asyncio.wait_for(self.stopping.wait(), idle)
                    except asyncio.TimeoutError:
                        pass
                    idle = min(idle * 2, self.max_idle)
                    continue
                idle = self.idle
                for r in rows:
                    job = job_of(r)
                    self.held[job.id] = job
                    self.tasks[job.id] = asyncio.create_task(self._run_job(job))
        finally:
            if self.tasks:
                await asyncio.gather(*self.tasks.values(), return_exceptions=True)
            self.stopping.set()
            await beat
            if self.conn is not None:
                await self.conn.close()
                self.conn = None

    async def _beat(self) -> None:
        assert self.stopping is not None
        if self.heartbeat <= 0:
            return
        while True:
            try:
                await asyncio.wait_for(self.stopping.wait(), self.heartbeat)
                return
            except asyncio.TimeoutError:
                pass
            jobs = list(self.held.values())
            if not jobs:
                continue
            try:
                rows = await self._db(
                    SQL_EXTEND, ([j.id for j in jobs], [j.token for j in jobs],
                                 _dt.timedelta(seconds=self.lease)), retry=False)
            except ConnectionError:
                continue
            for job_id, outcome, _ in rows:
                if outcome != "ok" and job_id in self.held:
                    self._stop_job(job_id, Outcome(outcome))
                    task = self.tasks.get(job_id)
                    if task is not None:
                        task.cancel()

    async def _settle(self, sql: str, job: Job, *extra: Any) -> Outcome:
        rows = await self._db(sql, ([job.id], [job.token], *extra))
        return Outcome(rows[0][1])

    async def _run_job(self, job: Job) -> None:
        assert self.stopping is not None
        try:
            if self.stopping.is_set():
                await self._settle(SQL_RELEASE, job)
                return
            self.started.add(job.id)
            out = await self._settle(SQL_START, job, _dt.timedelta(seconds=self.lease))
            if out is not Outcome.OK:
                log.info("job %s: %s at start, skipped", job.id, out.value)
                return
            await self._handle(job)
        except asyncio.CancelledError:
            self._log_stopped(job)
        except Exception:  # noqa: BLE001
            log.exception("job %s: the worker failed to settle it", job.id)
        finally:
            self.held.pop(job.id, None)
            self.started.discard(job.id)
            self.tasks.pop(job.id, None)

    async def _handle(self, job: Job) -> None:
        try:
            result = await self.handler(job)
        except JobStopped:
            self._log_stopped(job)
            return
        except Snooze as s:
            out = await self._settle(SQL_SNOOZE, job, _dt.timedelta(seconds=s.seconds))
            self._log_settled(job, "snooze", out, f"snoozed for {s.seconds:.1f} s")
            return
        except Exception as e:  # noqa: BLE001
            msg, retry_in, permanent = self._failure(e)
            out = await self._settle(
                SQL_FAIL, job, msg,
                _dt.timedelta(seconds=retry_in) if retry_in is not None else None, permanent)
            self._log_settled(job, "fail", out, f"failed: {msg}")
            return
        if job.stop_reason is not None:
            self._log_stopped(job)
            return
        out = await self._settle(SQL_COMPLETE, job, results_param([result]))
        if out is Outcome.OK:
            self.completed += 1
        else:
            self._log_refused(job, "complete", out)
