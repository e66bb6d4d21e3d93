"""A stand-in for the `opentelemetry` API package, for the tests: the
package is not installable where these tests run (no Debian package, no
package index).

It has only the names claimq uses, with the signatures the API documents
(opentelemetry-api 1.x: opentelemetry.trace, opentelemetry.propagate,
opentelemetry.context), so a call with an argument the API does not have
fails here too.  It records spans instead of exporting them.  Its
propagator writes and reads W3C traceparent and tracestate (and a
`baggage` header of k=v pairs) with code of its own, or, as `other`, a
header of another format only, as an application configured for another
propagator would.

What it does not show: that the real package behaves as its documentation
says, nor anything about an SDK, a sampler or an exporter.
"""

import contextvars
import enum
import random
import re
import sys
import threading
import types

_NAMES = ("opentelemetry", "opentelemetry.trace", "opentelemetry.propagate",
          "opentelemetry.context")
_ABSENT = object()


class FakeOpenTelemetry:
    """`with FakeOpenTelemetry() as otel:` the package importable as
    `opentelemetry` in the block; otel.spans are the ended spans."""

    def __init__(self, propagator="w3c"):
        self.propagator = propagator     # "w3c" or "other"
        self.spans = []
        self.tracers = []
        self.lock = threading.Lock()
        self._saved = {}
        self._build()

    # -- installing ------------------------------------------------------

    def __enter__(self):
        for name in _NAMES:
            self._saved[name] = sys.modules.get(name, _ABSENT)
        sys.modules.update(self.modules)
        return self

    def __exit__(self, *exc):
        for name, old in self._saved.items():
            if old is _ABSENT:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old

    def ended(self, name=None):
        with self.lock:
            return [s for s in self.spans if name is None or s.name == name]

    # -- the modules -----------------------------------------------------

    def _build(self):
        fake = self
        current = contextvars.ContextVar("fake_otel_context", default=None)

        # opentelemetry.context
        class Context(dict):
            pass

        def get_current():
            ctx = current.get()
            return ctx if ctx is not None else Context()

        def attach(context):
            return current.set(context)

        def detach(token):
            current.reset(token)

        # opentelemetry.trace
        class SpanKind(enum.Enum):
            INTERNAL = 0
            SERVER = 1
            CLIENT = 2
            PRODUCER = 3
            CONSUMER = 4

        class StatusCode(enum.Enum):
            UNSET = 0
            OK = 1
            ERROR = 2

        class Status:
            def __init__(self, status_code=StatusCode.UNSET, description=None):
                self.status_code = status_code
                self.description = description

        class TraceFlags(int):
            @property
            def sampled(self):
                return bool(self & 1)

        class TraceState(dict):
            @classmethod
            def from_header(cls, header_list):
                state = cls()
                state.header = ",".join(header_list)
                return state

            def to_header(self):
                return getattr(self, "header", "")

        class SpanContext:
            def __init__(self, trace_id, span_id, is_remote, trace_flags=TraceFlags(0),
                         trace_state=None):
                self.trace_id = trace_id
                self.span_id = span_id
                self.is_remote = is_remote
                self.trace_flags = trace_flags
                self.trace_state = trace_state if trace_state is not None else TraceState()

            @property
            def is_valid(self):
                return self.trace_id != 0 and self.span_id != 0

        invalid = SpanContext(0, 0, False)

        class Link:
            def __init__(self, context, attributes=None):
                self.context = context
                self.attributes = attributes

        class NonRecordingSpan:
            def __init__(self, context):
                self._context = context

            def get_span_context(self):
                return self._context

            def is_recording(self):
                return False

        class Span:
            def __init__(self, name, parent, kind, attributes, links):
                self.name = name
                self.kind = kind
                self.attributes = dict(attributes or {})
                self.links = list(links or [])
                self.status = Status()
                self.exceptions = []
                self.end_count = 0
                self.parent = parent if parent.is_valid else None
                trace_id = parent.trace_id if parent.is_valid else random.getrandbits(128) or 1
                state = parent.trace_state if parent.is_valid else TraceState()
                self._context = SpanContext(trace_id, random.getrandbits(64) or 1, False,
                                            TraceFlags(1), state)
                self.current_at_end = None

            def get_span_context(self):
                return self._context

            def is_recording(self):
                return self.end_count == 0

            def set_attribute(self, key, value):
                assert isinstance(key, str) and isinstance(value, (str, bool, int, float)), \
                    (key, value)
                self.attributes[key] = value

            def record_exception(self, exception, attributes=None, timestamp=None,
                                 escaped=False):
                self.exceptions.append(exception)

            def set_status(self, status, description=None):
                self.status = status

            def end(self, end_time=None):
                self.end_count += 1
                if self.end_count == 1:
                    with fake.lock:
                        fake.spans.append(self)

        class Tracer:
            def __init__(self, name, version):
                self.name = name
                self.version = version

            def start_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None,
                           links=None, start_time=None, record_exception=True,
                           set_status_on_exception=True):
                ctx = context if context is not None else get_current()
                parent = get_current_span(ctx).get_span_context()
                return Span(name, parent, kind, attributes, links)

        def get_tracer(instrumenting_module_name, instrumenting_library_version=None,
                       tracer_provider=None, schema_url=None, attributes=None):
            tracer = Tracer(instrumenting_module_name, instrumenting_library_version)
            with fake.lock:
                fake.tracers.append(tracer)
            return tracer

        def set_span_in_context(span, context=None):
            ctx = Context(context if context is not None else get_current())
            ctx["span"] = span
            return ctx

        def get_current_span(context=None):
            ctx = context if context is not None else get_current()
            return ctx.get("span") or NonRecordingSpan(invalid)

        # opentelemetry.propagate
        tp = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")

        def inject(carrier, context=None, setter=None):
            ctx = context if context is not None else get_current()
            sc = get_current_span(ctx).get_span_context()
            if sc.is_valid:
                if fake.propagator == "w3c":
                    carrier["traceparent"] = "00-%032x-%016x-%02x" % (
                        sc.trace_id, sc.span_id, sc.trace_flags)
                    if sc.trace_state.to_header():
                        carrier["tracestate"] = sc.trace_state.to_header()
                else:
                    carrier["x-other-trace"] = "%x:%x" % (sc.trace_id, sc.span_id)
            if ctx.get("baggage"):
                carrier["baggage"] = ",".join(f"{k}={v}" for k, v in ctx["baggage"].items())

        def extract(carrier, context=None, getter=None):
            ctx = Context(context if context is not None else get_current())
            value = carrier.get("traceparent")
            m = tp.fullmatch(value) if fake.propagator == "w3c" and value else None
            if m and int(m.group(1), 16) and int(m.group(2), 16):
                state = TraceState.from_header([carrier["tracestate"]]) \
                    if "tracestate" in carrier else TraceState()
                ctx["span"] = NonRecordingSpan(SpanContext(
                    int(m.group(1), 16), int(m.group(2), 16), True,
                    TraceFlags(int(m.group(3), 16)), state))
            if carrier.get("baggage"):
                ctx["baggage"] = dict(kv.split("=", 1) for kv in carrier["baggage"].split(","))
            return ctx

        package = types.ModuleType("opentelemetry")
        package.__path__ = []
        trace = types.ModuleType("opentelemetry.trace")
        for k, v in dict(SpanKind=SpanKind, Status=Status, StatusCode=StatusCode,
                         TraceFlags=TraceFlags, TraceState=TraceState, SpanContext=SpanContext,
                         Link=Link, NonRecordingSpan=NonRecordingSpan,
                         INVALID_SPAN_CONTEXT=invalid, get_tracer=get_tracer,
                         set_span_in_context=set_span_in_context,
                         get_current_span=get_current_span).items():
            setattr(trace, k, v)
        propagate = types.ModuleType("opentelemetry.propagate")
        propagate.inject = inject
        propagate.extract = extract
        context_mod = types.ModuleType("opentelemetry.context")
        context_mod.Context = Context
        context_mod.attach = attach
        context_mod.detach = detach
        context_mod.get_current = get_current
        package.trace = trace
        package.propagate = propagate
        package.context = context_mod
        self.modules = {"opentelemetry": package, "opentelemetry.trace": trace,
                        "opentelemetry.propagate": propagate,
                        "opentelemetry.context": context_mod}
        self.trace = trace
        self.context = context_mod
