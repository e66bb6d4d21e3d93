"""OpenTelemetry spans for enqueueing and for each attempt of a job, through
the OpenTelemetry API where the application has it installed, and nothing
where it has not (contract 0.5; the Node.js library does the same).

- enqueue and enqueue_many: a `publish <queue>` span (kind PRODUCER),
  current while the statement runs.  The context it makes is injected into
  the jobs' headers with the application's propagators
  (`opentelemetry.propagate.inject`); if they wrote no valid `traceparent`
  (a propagator of another format), `traceparent` and `tracestate` are
  written here from the span.  What is injected replaces the caller's
  headers of the same names (in any case), and an injected traceparent the
  caller's tracestate too; the caller's others are kept.
- each attempt a worker makes: a `process <queue>` span (kind CONSUMER),
  from the job's start to its settling, the root of a trace of its own,
  linked to the context in the job's headers: what the application's
  propagators read there (`opentelemetry.propagate.extract`), else the
  W3C traceparent read by claimq.traceparent.  The handler runs in that
  span, in the context read from the headers (so baggage the application
  propagates reaches it).  `claimq.outcome` says what came of the attempt
  (completed, failed, snoozed, stale, cancelled, missing, lease_lost,
  timeout, shutdown, connection_lost, unsettled); the status is OK for
  completed, unset for snoozed, ERROR otherwise.

The package is imported on first use, not with claimq; where it cannot be
imported every call here is a no-op and a job gets no headers from it.
Nothing here raises into the library: a tracing call that fails is logged
at WARNING and the job goes on without it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from . import traceparent as _tp

log = logging.getLogger("claimq.tracing")

SYSTEM = "claimq"
MAX_HEADERS = 8192          # bytes of a job's headers as text (the server's rule)
_MODULES = ("opentelemetry.trace", "opentelemetry.propagate", "opentelemetry.context")

_missing = False            # the package could not be imported: do not try again

Api = Tuple[Any, Any, Any]  # opentelemetry.trace, .propagate, .context


def api() -> Optional[Api]:
    """(opentelemetry.trace, opentelemetry.propagate, opentelemetry.context),
    or None without them.

    Modules already imported are taken from sys.modules; an import that
    failed is not tried again; None in sys.modules["opentelemetry"] (the
    import system's way to block a package) is taken as its absence."""
    global _missing
    modules = sys.modules
    found = tuple(modules.get(name) for name in _MODULES)
    if all(m is not None for m in found):
        return found  # type: ignore[return-value]
    if _missing or ("opentelemetry" in modules and modules["opentelemetry"] is None):
        return None
    try:
        from opentelemetry import context, propagate, trace  # type: ignore[import-not-found]
    except ImportError:
        _missing = True
        return None
    except Exception as e:  # noqa: BLE001  (a broken install: as if absent)
        _warn("importing opentelemetry", e)
        _missing = True
        return None
    return trace, propagate, context


def error_type(e: BaseException) -> str:
    """error.type for an exception: its SQLSTATE if it has one (a psycopg
    error from the server), else its class's name."""
    code = getattr(e, "sqlstate", None)
    if isinstance(code, str) and code:
        return code
    return type(e).__qualname__


def _warn(what: str, e: BaseException) -> None:
    log.warning("OpenTelemetry: %s failed, going on without it: %s: %s", what,
                type(e).__name__, e)


def _start(apis: Api, name: str, kind: str, attributes: Dict[str, Any],
           links: Optional[List[Any]] = None, context: Any = None) -> Any:
    """A new span, or None if the API failed."""
    trace = apis[0]
    try:
        from . import __version__
        tracer = trace.get_tracer("claimq", __version__)
        return tracer.start_span(name, context=context, kind=getattr(trace.SpanKind, kind),
                                 attributes=attributes, links=links or None,
                                 record_exception=False, set_status_on_exception=False)
    except Exception as e:  # noqa: BLE001
        _warn("starting a span", e)
        return None


@contextlib.contextmanager
def _attached(apis: Api, ctx: Any) -> Iterator[None]:
    """ctx as the current context in the block (nothing if ctx is None)."""
    token = None
    if ctx is not None:
        try:
            token = apis[2].attach(ctx)
        except Exception as e:  # noqa: BLE001
            _warn("making a span current", e)
    try:
        yield
    finally:
        if token is not None:
            try:
                apis[2].detach(token)
            except Exception as e:  # noqa: BLE001
                _warn("restoring the context", e)


def _finish(apis: Api, span: Any, outcome: Optional[str], error: Optional[BaseException],
            ok: Optional[bool], description: Optional[str]) -> None:
    """Set what came of a span and end it: ok True is status OK, False
    ERROR (with description), None unset."""
    trace = apis[0]
    try:
        if outcome is not None:
            span.set_attribute("claimq.outcome", outcome)
        if error is not None:
            span.set_attribute("error.type", error_type(error))
            span.record_exception(error)
        if ok is True:
            span.set_status(trace.Status(trace.StatusCode.OK))
        elif ok is False:
            span.set_status(trace.Status(trace.StatusCode.ERROR, description))
    except Exception as e:  # noqa: BLE001
        _warn("setting what came of a span", e)
    try:
        span.end()
    except Exception as e:  # noqa: BLE001
        _warn("ending a span", e)


def text_size(headers: Mapping[str, Any]) -> int:
    """The bytes of headers as jsonb writes them as text ({"k": "v", ...})."""
    return len(json.dumps(dict(headers), ensure_ascii=False, separators=(", ", ": "))
               .encode("utf-8"))


def merge(given: Optional[Mapping[str, Any]], injected: Mapping[str, str]
          ) -> Optional[Dict[str, Any]]:
    """A job's headers: the caller's, with what tracing injected in place of
    those of the same names (in any case; an injected traceparent replaces
    the caller's tracestate too).  Injected entries that would take
    the headers past the server's limit are left out, the largest first and
    traceparent last (with it, all of them); the caller's own are never cut
    (too large, the server refuses them)."""
    if not injected:
        return dict(given) if given is not None else None
    theirs = dict(given or {})
    ours = dict(injected)
    while ours:
        names = {k.lower() for k in ours}
        if _tp.TRACEPARENT in names:    # a tracestate goes with its traceparent
            names.add(_tp.TRACESTATE)
        out = {k: v for k, v in theirs.items()
               if not (isinstance(k, str) and k.lower() in names)}
        out.update(ours)
        if text_size(out) <= MAX_HEADERS:
            return out
        rest = [k for k in ours if k.lower() != _tp.TRACEPARENT]
        if rest:
            del ours[max(rest, key=lambda k: len(ours[k]))]
        else:
            ours.clear()
    return theirs if given is not None else None


class Publish:
    """The publish span of one enqueue or enqueue_many call."""

    def __init__(self, apis: Api, span: Any):
        self.apis = apis
        self.span = span
        self.ids: List[int] = []
        self._carrier: Optional[Dict[str, str]] = None

    def injected(self) -> Dict[str, str]:
        """The current context (the publish span's) as headers."""
        if self._carrier is not None:
            return self._carrier
        trace, propagate, _ = self.apis
        carrier: Dict[str, Any] = {}
        try:
            propagate.inject(carrier)
            if _tp.read(carrier) is None:
                # The application's propagators write no W3C trace context
                # (or a bad one): the contract's keys are written here.
                for k in [k for k in carrier if isinstance(k, str)
                          and k.lower() in (_tp.TRACEPARENT, _tp.TRACESTATE)]:
                    del carrier[k]
                sc = self.span.get_span_context()
                if sc.is_valid:
                    carrier[_tp.TRACEPARENT] = _tp.write(_tp.TraceParent(
                        f"{sc.trace_id:032x}", f"{sc.span_id:016x}", int(sc.trace_flags)))
                    state = sc.trace_state.to_header() if sc.trace_state is not None else ""
                    if state:
                        carrier[_tp.TRACESTATE] = state
        except Exception as e:  # noqa: BLE001
            _warn("injecting the trace context", e)
            carrier = {}
        self._carrier = {k: v for k, v in carrier.items()
                         if isinstance(k, str) and isinstance(v, str)}
        return self._carrier

    def headers(self, given: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
        return merge(given, self.injected())

    def sent(self, job_ids: List[int]) -> None:
        self.ids = job_ids


@contextlib.contextmanager
def publish(queue: str, count: int = 1) -> Iterator[Optional[Publish]]:
    """`with publish(queue, count) as p:` a publish span for `count` jobs,
    current in the block (p is None without OpenTelemetry); p.sent(ids)
    names the job for one; an exception out of the block ends the span
    with an error status and error.type."""
    apis = api()
    attributes: Dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "publish",
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    span = _start(apis, f"publish {queue}", "PRODUCER", attributes) if apis else None
    if span is None:
        yield None
        return
    assert apis is not None
    try:
        ctx = apis[0].set_span_in_context(span)
    except Exception as e:  # noqa: BLE001
        _warn("making a span current", e)
        ctx = None
    p = Publish(apis, span)
    try:
        with _attached(apis, ctx):
            yield p
    except Exception as e:
        _finish(apis, span, None, e, False, f"{type(e).__name__}: {e}")
        raise
    except BaseException:
        _finish(apis, span, None, None, None, None)
        raise
    if count == 1 and len(p.ids) == 1:
        try:
            span.set_attribute("messaging.message.id", str(p.ids[0]))
        except Exception as e:  # noqa: BLE001
            _warn("setting an attribute", e)
    _finish(apis, span, None, None, None, None)


def link_context(apis: Api, headers: Optional[Mapping[str, Any]]) -> Tuple[Any, Any]:
    """(the context the application's propagators read from a job's
    headers, the SpanContext to link to or None).  The SpanContext is the
    one they read, else the W3C traceparent read here."""
    trace, propagate, _ = apis
    created = None
    try:
        created = propagate.extract(dict(headers or {}))
        sc = trace.get_current_span(created).get_span_context()
        if sc is not None and sc.is_valid:
            return created, sc
    except Exception as e:  # noqa: BLE001
        _warn("extracting a job's trace context", e)
    tp = _tp.read(headers)
    if tp is None:
        return created, None
    try:
        state = _tp.tracestate(headers)
        return created, trace.SpanContext(
            trace_id=int(tp.trace_id, 16), span_id=int(tp.parent_id, 16), is_remote=True,
            trace_flags=trace.TraceFlags(tp.flags & (_tp.SAMPLED | _tp.RANDOM)),
            trace_state=trace.TraceState.from_header([state]) if state else trace.TraceState())
    except Exception as e:  # noqa: BLE001
        _warn("making a span context", e)
        return created, None


STOPPED = ("cancelled", "timeout", "shutdown")


class Process:
    """The process span of one attempt of a job, from its start to its
    settling; without OpenTelemetry (or for job None) every method is a
    no-op.  The worker tells what came of the attempt as it learns it
    (settle, stopped); end() sets that on the span and ends it."""

    def __init__(self, job: Any):
        self.span: Any = None
        self.result: Optional[str] = None
        self.error: Optional[BaseException] = None
        self.ended = False
        self.context: Any = None
        apis = api() if job is not None else None
        if apis is None:
            return
        self.apis = apis
        trace, _, context = apis
        try:
            created, sc = link_context(apis, job.headers)
            links = [trace.Link(sc)] if sc is not None else []
            root = context.Context()
        except Exception as e:  # noqa: BLE001
            _warn("linking a job's span", e)
            created, links, root = None, [], None
        self.span = _start(apis, f"process {job.queue}", "CONSUMER", {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "claimq.attempt": job.attempt,
        }, links, root)
        if self.span is not None:
            try:
                # The handler's context: the span in what the headers carried.
                self.context = trace.set_span_in_context(self.span, created)
            except Exception as e:  # noqa: BLE001
                _warn("making a span current", e)

    def current(self) -> Any:
        """The span current in the block, as a context manager."""
        if self.span is None:
            return contextlib.nullcontext()
        return _attached(self.apis, self.context)

    def settle(self, result: str, error: Optional[BaseException] = None) -> None:
        """What came of the attempt (claimq.outcome), and the error that
        failed the job or that the worker met, if one did."""
        if not self.ended:
            self.result = result
            self.error = error

    def stopped(self, reason: Optional[str]) -> None:
        """The handler was stopped (job.stop_reason), unless what came of
        the attempt is known already (a timeout that failed the job)."""
        if self.result is None:
            self.settle(reason if reason in STOPPED else "lease_lost")

    def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        if self.span is None:
            return
        result = self.result or "unsettled"
        error = self.error
        if result == "completed":
            ok: Optional[bool] = True
        elif result == "snoozed":
            ok = None
        else:
            ok = False
        description = (f"{type(error).__name__}: {error}"
                       if error is not None and result in ("failed", "unsettled",
                                                           "connection_lost")
                       else result)
        _finish(self.apis, self.span, result, error, ok, description)
