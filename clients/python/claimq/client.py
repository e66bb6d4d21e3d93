"""claimq's SQL functions as Python methods, one per function.

Every method is one statement on the client's connection (autocommit unless
the caller opened a transaction), never a server-side prepared statement (on
a caller's connection too), so a client works through pgbouncer in
transaction mode.  Job ids and tokens are Python ints, exact at any size;
intervals are given as seconds (int or float) or datetime.timedelta.
"""

from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import psycopg
from psycopg.abc import Query
from psycopg.types.json import Jsonb

from . import _tracing

Seconds = Union[int, float, _dt.timedelta]


class Outcome(str, enum.Enum):
    """What a call about a claimed job did (the contract's `outcome`)."""

    OK = "ok"
    STALE = "stale"          # held by another claim, or not claimed
    STARTED = "started"      # release refused: the job is running
    MISSING = "missing"      # no such job
    CANCELLED = "cancelled"  # the job was cancelled: stop working on it
    FINISHED = "finished"    # cancel: the job had already finished


@dataclass
class Job:
    """A claimed job: what `claim` returned for it."""

    id: int
    token: int
    payload: Any
    attempts: int
    priority: int
    enqueued_at: _dt.datetime
    expires_at: _dt.datetime
    # Set by a Worker: why the job must stop ("cancelled", "stale", "timeout",
    # "shutdown"), if it must.
    stop_reason: Optional[str] = field(default=None, compare=False)
    # This run's attempt, counting from 1: `attempts` (the attempts counted
    # before this claim) plus the one that start() counts.  A claim with
    # start=True has counted it already.
    attempt: int = field(default=0, compare=False)
    # The queue it came from (set by claim and the workers).
    queue: Optional[str] = field(default=None, compare=False)
    # The job's headers (contract 0.5): a dict of strings, or None.  A job
    # enqueued where OpenTelemetry is installed carries its creation
    # context here (traceparent, tracestate); see claimq.traceparent.
    headers: Optional[Dict[str, str]] = field(default=None, compare=False)


Pair = Union[Job, Tuple[int, int]]


def _interval(value: Optional[Seconds]) -> Optional[_dt.timedelta]:
    if value is None or isinstance(value, _dt.timedelta):
        return value
    return _dt.timedelta(seconds=float(value))


def queue_of(jobs: Iterable[Pair]) -> Optional[str]:
    """The queue every job of a batch is in, if Jobs tell it and it is one:
    the working calls pass it (it routes them on Citus, and is checked on
    one server); else None, which checks nothing."""
    queues = {j.queue if isinstance(j, Job) else None for j in jobs}
    return queues.pop() if len(queues) == 1 else None


def _pairs(jobs: Iterable[Pair]) -> Tuple[List[int], List[int]]:
    ids: List[int] = []
    tokens: List[int] = []
    for j in jobs:
        if isinstance(j, Job):
            ids.append(j.id)
            tokens.append(j.token)
        else:
            ids.append(int(j[0]))
            tokens.append(int(j[1]))
    return ids, tokens


# The statements of the working calls, one text each for Client and the
# workers (AsyncWorker runs them on its own connection): the job ids and
# tokens come first, as bigint[].
SQL_CLAIM = ("SELECT job_id, token, payload, attempts, priority, enqueued_at, expires_at,"
             " headers"
             "  FROM claimq.claim(%s, %s, lease => %s, worker => %s, start => %s, wait => %s)")
SQL_START = "SELECT * FROM claimq.start(%s::bigint[], %s::bigint[], %s, queue => %s)"
SQL_EXTEND = "SELECT * FROM claimq.extend(%s::bigint[], %s::bigint[], %s, queue => %s)"
SQL_COMPLETE = "SELECT * FROM claimq.complete(%s::bigint[], %s::bigint[], %s::jsonb[], queue => %s)"
SQL_FAIL = "SELECT * FROM claimq.fail(%s::bigint[], %s::bigint[], %s, %s, %s, queue => %s)"
SQL_RELEASE = "SELECT * FROM claimq.release(%s::bigint[], %s::bigint[], queue => %s)"
SQL_SNOOZE = "SELECT * FROM claimq.snooze(%s::bigint[], %s::bigint[], %s, queue => %s)"


def _workflow(after: Optional[Sequence[int]], after_failed: Optional[str]
              ) -> Tuple[str, List[Any]]:
    """enqueue's and enqueue_many's after and after_failed: the named arguments
    to append and their values.  Only those given are passed (None: the
    function's default), so that a call without them reads as before."""
    sql = ""
    params: List[Any] = []
    if after is not None:
        sql += ", after => %s::bigint[]"
        params.append([int(i) for i in after])
    if after_failed is not None:
        sql += ", after_failed => %s"
        params.append(after_failed)
    return sql, params


def job_of(row: Sequence[Any], queue: Optional[str] = None, started: bool = False) -> Job:
    """A Job from a row of SQL_CLAIM (started: claimed with start=True)."""
    return Job(int(row[0]), int(row[1]), row[2], row[3], row[4], row[5], row[6],
               attempt=row[3] if started else row[3] + 1, queue=queue, headers=row[7])


def results_param(results: Optional[Sequence[Any]]) -> Optional[List[Optional[Jsonb]]]:
    """complete's results argument: NULL, or one jsonb (or NULL) per job."""
    if results is None:
        return None
    return [Jsonb(r) if r is not None else None for r in results]


class Client:
    """One connection to a database with claimq, and a method per function.

    `conninfo` is a libpq connection string or URL ("" takes the PG*
    environment variables); or pass an open psycopg `connection`.
    """

    def __init__(self, conninfo: str = "", *, connection: Optional[psycopg.Connection] = None,
                 application_name: Optional[str] = None):
        if connection is None:
            kwargs: Dict[str, Any] = {}
            if application_name:
                kwargs["application_name"] = application_name
            # No server-side prepared statements: a transaction-mode pooler
            # cannot keep them for us.
            connection = psycopg.connect(conninfo, autocommit=True, prepare_threshold=None,
                                         **kwargs)
        self.conn = connection

    def close(self) -> None:
        self.conn.close()

    def _execute(self, sql: Query, params: Any = None) -> psycopg.Cursor:
        # Never prepared, whatever the connection's prepare_threshold: a
        # caller's connection prepares a statement after its fifth run by
        # default, and through a transaction-mode pooler the next transaction
        # may find it missing on its server connection, or meet another
        # client's statement of the same name (DuplicatePreparedStatement).
        return self.conn.execute(sql, params, prepare=False)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- one statement ---------------------------------------------------

    def call(self, function: str, *args: Any, **named: Any) -> List[tuple]:
        """SELECT * FROM claimq.<function>(args..., name => value...): rows.

        Named arguments left as None are left out (the function's default).
        """
        parts = ["%s"] * len(args)
        params: List[Any] = list(args)
        for name, value in named.items():
            if value is None:
                continue
            if not name.isidentifier():
                raise ValueError(f"bad argument name {name!r}")
            parts.append(f"{name} => %s")
            params.append(value)
        if not function.isidentifier():
            raise ValueError(f"bad function name {function!r}")
        sql = f"SELECT * FROM claimq.{function}({', '.join(parts)})"
        return self._execute(sql, params).fetchall()  # type: ignore[arg-type]

    # -- producing ---------------------------------------------------------

    def enqueue(self, queue: str, payload: Any, *, run_at: Optional[_dt.datetime] = None,
                priority: int = 0, dedup_key: Optional[str] = None,
                max_attempts: Optional[int] = None, on_duplicate: str = "keep",
                group_key: Optional[str] = None, after: Optional[Sequence[int]] = None,
                after_failed: Optional[str] = None,
                headers: Optional[Mapping[str, str]] = None) -> int:
        """Enqueue one job: its id.  `headers` (a dict of strings) are kept
        with the job; where OpenTelemetry is installed the call is a
        `publish <queue>` span whose context is added to them (traceparent,
        tracestate, in place of the caller's)."""
        with _tracing.publish(queue) as span:
            if span is not None:
                headers = span.headers(headers)
            workflow, extra = _workflow(after, after_failed)
            if headers is not None:
                workflow += ", headers => %s"
                extra.append(Jsonb(dict(headers)))
            row = self._execute(
                "SELECT claimq.enqueue(%s, %s, run_at => %s, priority => %s, dedup_key => %s,"
                " max_attempts => %s, on_duplicate => %s, group_key => %s" + workflow + ")",
                (queue, Jsonb(payload), run_at, priority, dedup_key, max_attempts,
                 on_duplicate, group_key, *extra)).fetchone()
            assert row is not None
            job_id = int(row[0])
            if span is not None:
                span.sent([job_id])
            return job_id

    def enqueue_many(self, queue: str, payloads: Sequence[Any], *,
                     run_at: Optional[_dt.datetime] = None, priority: int = 0,
                     dedup_keys: Optional[Sequence[Optional[str]]] = None,
                     max_attempts: Optional[int] = None, on_duplicate: str = "keep",
                     group_keys: Optional[Sequence[Optional[str]]] = None,
                     after: Optional[Sequence[int]] = None,
                     after_failed: Optional[str] = None,
                     headers: Optional[Sequence[Optional[Mapping[str, str]]]] = None
                     ) -> List[int]:
        """Enqueue several jobs in one statement: their ids, in order.
        `headers`, if given, has one dict (or None) per payload.  Where
        OpenTelemetry is installed the call is one `publish <queue>` span,
        whose context every job gets."""
        if headers is not None and len(headers) != len(payloads):
            raise ValueError(f"headers has {len(headers)} elements for {len(payloads)} payloads")
        with _tracing.publish(queue, len(payloads)) as span:
            each: Optional[List[Optional[Mapping[str, str]]]] = (
                list(headers) if headers is not None else None)
            if span is not None and span.injected():
                each = [span.headers(h) for h in (each or [None] * len(payloads))]
            workflow, extra = _workflow(after, after_failed)
            if each is not None:
                workflow += ", headers => %s::jsonb[]"
                extra.append([Jsonb(dict(h)) if h is not None else None for h in each])
            rows = self._execute(
                "SELECT * FROM claimq.enqueue_many(%s, %s::jsonb[], run_at => %s, priority => %s,"
                " dedup_keys => %s::text[], max_attempts => %s, on_duplicate => %s,"
                " group_keys => %s::text[]" + workflow + ")",
                (queue, [Jsonb(p) for p in payloads], run_at, priority,
                 list(dedup_keys) if dedup_keys is not None else None, max_attempts,
                 on_duplicate, list(group_keys) if group_keys is not None else None,
                 *extra)).fetchall()
            ids = [int(r[0]) for r in rows]
            if span is not None:
                span.sent(ids)
            return ids

    def cancel(self, job_ids: Sequence[int], queue: Optional[str] = None
               ) -> List[Tuple[int, Outcome, Optional[str]]]:
        rows = self._execute("SELECT * FROM claimq.cancel(%s::bigint[], %s)",
                                 (list(job_ids), queue)).fetchall()
        return [(int(r[0]), Outcome(r[1]), r[2]) for r in rows]

    def status(self, job_ids: Sequence[int], queue: Optional[str] = None
               ) -> List[Dict[str, Any]]:
        cur = self._execute("SELECT * FROM claimq.status(%s::bigint[], %s)",
                            (list(job_ids), queue))
        cols = [c.name for c in cur.description or ()]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def dependencies(self, job_ids: Sequence[int], queue: Optional[str] = None
                     ) -> List[Dict[str, Any]]:
        """For each listed job, one row per job it runs after: job_id, after_id,
        state, result (if done) and last_error (if dead); state, result and
        last_error are None for a job that no longer exists."""
        cur = self._execute("SELECT * FROM claimq.dependencies(%s::bigint[], %s)",
                                (list(job_ids), queue))
        cols = [c.name for c in cur.description or ()]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def wait_for(self, job_ids: Sequence[int], timeout: Seconds,
                 queue: Optional[str] = None) -> List[Dict[str, Any]]:
        cur = self._execute("SELECT * FROM claimq.wait_for(%s::bigint[], %s, %s)",
                                (list(job_ids), _interval(timeout), queue))
        cols = [c.name for c in cur.description or ()]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    # -- working -----------------------------------------------------------

    def claim(self, queue: str, max_jobs: int = 1, *, lease: Optional[Seconds] = None,
              worker: Optional[str] = None, start: bool = False,
              wait: Seconds = 0) -> List[Job]:
        rows = self._execute(
            SQL_CLAIM, (queue, max_jobs, _interval(lease), worker, start,
                        _interval(wait))).fetchall()
        return [job_of(r, queue, start) for r in rows]

    def _settle(self, sql: str, jobs: Iterable[Pair], *extra: Any) -> List[tuple]:
        jobs = list(jobs)
        ids, tokens = _pairs(jobs)
        return self._execute(sql, (ids, tokens, *extra, queue_of(jobs))).fetchall()

    def start(self, jobs: Iterable[Pair], lease: Optional[Seconds] = None
              ) -> List[Tuple[int, Outcome, Optional[_dt.datetime]]]:
        rows = self._settle(SQL_START, jobs, _interval(lease))
        return [(int(r[0]), Outcome(r[1]), r[2]) for r in rows]

    def extend(self, jobs: Iterable[Pair], lease: Optional[Seconds] = None
               ) -> List[Tuple[int, Outcome, Optional[_dt.datetime]]]:
        rows = self._settle(SQL_EXTEND, jobs, _interval(lease))
        return [(int(r[0]), Outcome(r[1]), r[2]) for r in rows]

    def complete(self, jobs: Iterable[Pair], results: Optional[Sequence[Any]] = None
                 ) -> List[Tuple[int, Outcome]]:
        rows = self._settle(SQL_COMPLETE, jobs, results_param(results))
        return [(int(r[0]), Outcome(r[1])) for r in rows]

    def fail(self, jobs: Iterable[Pair], error: Optional[str] = None, *,
             retry_in: Optional[Seconds] = None, permanent: bool = False
             ) -> List[Tuple[int, Outcome, Optional[str], Optional[_dt.datetime]]]:
        rows = self._settle(SQL_FAIL, jobs, error, _interval(retry_in), permanent)
        return [(int(r[0]), Outcome(r[1]), r[2], r[3]) for r in rows]

    def release(self, jobs: Iterable[Pair]) -> List[Tuple[int, Outcome]]:
        rows = self._settle(SQL_RELEASE, jobs)
        return [(int(r[0]), Outcome(r[1])) for r in rows]

    def snooze(self, jobs: Iterable[Pair], delay: Seconds
               ) -> List[Tuple[int, Outcome, Optional[_dt.datetime]]]:
        rows = self._settle(SQL_SNOOZE, jobs, _interval(delay))
        return [(int(r[0]), Outcome(r[1]), r[2]) for r in rows]

    def release_worker(self, queue: str, worker: str) -> int:
        return int(self.call("release_worker", queue, worker)[0][0])

    # -- dedup key claims ----------------------------------------------------

    def claim_keys(self, scope: str, keys: Sequence[str], ttl: Seconds) -> Dict[str, int]:
        rows = self._execute("SELECT * FROM claimq.claim_keys(%s, %s::text[], %s)",
                                 (scope, list(keys), _interval(ttl))).fetchall()
        return {r[0]: int(r[1]) for r in rows}

    def release_keys(self, scope: str, keys: Sequence[str], tokens: Sequence[int]
                     ) -> List[Tuple[str, Outcome]]:
        rows = self._execute(
            "SELECT * FROM claimq.release_keys(%s, %s::text[], %s::bigint[])",
            (scope, list(keys), list(tokens))).fetchall()
        return [(r[0], Outcome(r[1])) for r in rows]

    # -- administration and observing -----------------------------------------

    def create_queue(self, queue: str, **options: Any) -> None:
        self.call("create_queue", queue, **options)

    def alter_queue(self, queue: str, **options: Any) -> None:
        self.call("alter_queue", queue, **options)

    def set_group_weight(self, queue: str, group_key: Optional[str],
                         weight: Optional[float]) -> None:
        """A tenant's weight in a fair queue (None resets it to 1; a None
        group_key names the jobs without one)."""
        self._execute("SELECT claimq.set_group_weight(%s, %s, %s::real)",
                      (queue, group_key, weight)).fetchall()

    def drop_queue(self, queue: str, force: bool = False) -> None:
        self.call("drop_queue", queue, force=force)

    def pause_queue(self, queue: str) -> None:
        self.call("pause_queue", queue)

    def resume_queue(self, queue: str) -> None:
        self.call("resume_queue", queue)

    def purge_queue(self, queue: str) -> int:
        return int(self.call("purge_queue", queue)[0][0])

    def reclaim(self, queue: Optional[str] = None, max_jobs: int = 10000) -> List[tuple]:
        return self.call("reclaim", queue, max_jobs)

    def retry_dead(self, queue: str, job_ids: Optional[Sequence[int]] = None) -> int:
        return int(self._execute("SELECT claimq.retry_dead(%s, %s::bigint[])",
                                     (queue, list(job_ids) if job_ids is not None else None)
                                     ).fetchall()[0][0])

    def queue_stats(self) -> List[Dict[str, Any]]:
        cur = self._execute("SELECT * FROM claimq.queue_stats")
        cols = [c.name for c in cur.description or ()]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def metrics(self) -> str:
        return str(self.call("metrics")[0][0])
