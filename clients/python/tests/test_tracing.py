"""Tests of trace context (contract 0.5) in the Python library.

Without a server: the W3C traceparent module (claimq.traceparent), and what
enqueue and the workers' spans do with and without the `opentelemetry`
package, on a recording stand-in for a connection.  The package is not
installable where these run: "with OpenTelemetry" is a stand-in for its API
(fake_opentelemetry.py) put into sys.modules; "without" blocks the name in
sys.modules, so it holds wherever the package is installed.

With a server (CLAIMQ_TEST_ADMIN set, as clients/test does): headers reach
the job and come back on claim, status and wait_for; a worker without the
package runs as before; with the stand-in, a job retried twice gives three
process spans linked to the one publish span, and a cancel, a lost lease
and a stale settle end their spans with an error.
"""

import asyncio
import os
import sys
import threading
import unittest

import claimq
import psycopg
from claimq import _tracing
from claimq import traceparent as tp
from fake_opentelemetry import FakeOpenTelemetry

ADMIN = os.environ.get("CLAIMQ_TEST_ADMIN")
needs_server = unittest.skipUnless(ADMIN, "needs a server (clients/test sets CLAIMQ_TEST_ADMIN)")

TRACE = "4a7c1e9b2d3f40718c5e6a9b0d1f2e3c"
PARENT = "9e8d7c6b5a4f3e21"
VALUE = f"00-{TRACE}-{PARENT}-01"


class NoOpenTelemetry:
    """`with NoOpenTelemetry():` the package cannot be imported in the block
    (None in sys.modules), installed or not."""

    NAMES = ("opentelemetry", "opentelemetry.trace", "opentelemetry.propagate",
             "opentelemetry.context")

    def __enter__(self):
        self.saved = {n: sys.modules.get(n) for n in self.NAMES if n in sys.modules}
        for n in self.NAMES:
            sys.modules[n] = None
        return self

    def __exit__(self, *exc):
        for n in self.NAMES:
            sys.modules.pop(n, None)
        sys.modules.update(self.saved)


class Cursor:
    def __init__(self, rows):
        self.rows = rows

    def fetchone(self):
        return self.rows[0]

    def fetchall(self):
        return self.rows


class Recorder:
    """A stand-in for a psycopg connection: it keeps each statement and its
    parameters and answers an enqueue with ids 1001, 1002, ... (or raises
    `error`)."""

    def __init__(self, error=None):
        self.calls = []
        self.error = error

    def execute(self, sql, params=None, prepare=None):
        self.calls.append((sql, params))
        if self.error is not None:
            raise self.error
        n = len(params[1]) if "enqueue_many" in sql else 1
        return Cursor([(1001 + i,) for i in range(n)])

    def close(self):
        pass

    def headers(self):
        """The last statement's headers argument: None if not passed, else
        the dict (enqueue) or the list of dicts or None (enqueue_many)."""
        sql, params = self.calls[-1]
        if "headers =>" not in sql:
            return None
        value = params[-1]
        if isinstance(value, list):
            return [v.obj if v is not None else None for v in value]
        return value.obj


def job(headers=None, attempt=1, queue="q"):
    return claimq.Job(7, 8, {}, attempt - 1, 0, None, None, attempt=attempt, queue=queue,
                      headers=headers)


class TraceParentTest(unittest.TestCase):
    def test_parse_reads_a_version_00_value(self):
        t = tp.parse(VALUE)
        self.assertEqual((t.trace_id, t.parent_id, t.flags, t.version), (TRACE, PARENT, 1, 0))
        self.assertTrue(t.sampled)
        self.assertFalse(t.random)
        self.assertFalse(tp.parse(f"00-{TRACE}-{PARENT}-02").sampled)
        self.assertTrue(tp.parse(f"00-{TRACE}-{PARENT}-02").random)

    def test_write_and_parse_round_trip(self):
        for flags in range(4):
            for _ in range(25):
                t = tp.TraceParent(os.urandom(16).hex(), os.urandom(8).hex(), flags)
                if t.trace_id == "0" * 32 or t.parent_id == "0" * 16:
                    continue
                value = tp.write(t)
                self.assertEqual(len(value), 55)
                self.assertEqual(tp.parse(value), t)
                self.assertEqual(str(tp.parse(value)), value)
        self.assertEqual(tp.write(tp.parse(VALUE)), VALUE)

    def test_write_sets_the_flags_version_00_does_not_define_to_zero(self):
        self.assertEqual(tp.write(tp.parse(f"00-{TRACE}-{PARENT}-ff")), f"00-{TRACE}-{PARENT}-03")
        self.assertEqual(tp.write(tp.parse(f"00-{TRACE}-{PARENT}-09")), f"00-{TRACE}-{PARENT}-01")
        self.assertEqual(tp.parse(f"00-{TRACE}-{PARENT}-ff").flags, 0xff, "read as it came")

    def test_a_higher_version_is_read_by_the_version_00_fields_and_written_as_00(self):
        for value in (f"cc-{TRACE}-{PARENT}-01", f"cc-{TRACE}-{PARENT}-01-more-fields",
                      f"01-{TRACE}-{PARENT}-01-", f"fe-{TRACE}-{PARENT}-00-x"):
            t = tp.parse(value)
            self.assertEqual((t.trace_id, t.parent_id), (TRACE, PARENT), value)
            self.assertEqual(tp.write(t)[:3], "00-", value)
        self.assertEqual(tp.parse(f"cc-{TRACE}-{PARENT}-01-x").version, 0xcc)

    def test_bad_values_are_rejected(self):
        bad = {
            "empty": "",
            "no dashes": VALUE.replace("-", "_"),
            "version ff": f"ff-{TRACE}-{PARENT}-01",
            "one-digit version": f"0-{TRACE}-{PARENT}-01",
            "three-digit version": f"000-{TRACE}-{PARENT}-01",
            "version not hex": f"0x-{TRACE}-{PARENT}-01",
            "uppercase version": f"0A-{TRACE}-{PARENT}-01",
            "00 with more after the flags": f"00-{TRACE}-{PARENT}-01-more",
            "00 with a character after the flags": f"00-{TRACE}-{PARENT}-01.",
            "higher version, no dash after the flags": f"cc-{TRACE}-{PARENT}-01.more",
            "higher version, too short": f"cc-{TRACE}-{PARENT}-1",
            "trace-id all zero": f"00-{'0' * 32}-{PARENT}-01",
            "trace-id too long": f"00-{TRACE}a-{PARENT}-01",
            "trace-id too short": f"00-{TRACE[1:]}-{PARENT}-01",
            "trace-id uppercase": f"00-{TRACE.upper()}-{PARENT}-01",
            "trace-id not hex": f"00-{TRACE[:-1]}g-{PARENT}-01",
            "parent-id all zero": f"00-{TRACE}-{'0' * 16}-01",
            "parent-id too long": f"00-{TRACE}-{PARENT}0-01",
            "parent-id too short": f"00-{TRACE}-{PARENT[1:]}-01",
            "parent-id uppercase": f"00-{TRACE}-{PARENT.upper()}-01",
            "parent-id not hex": f"00-{TRACE}-{PARENT[:-1]}.-01",
            "flags too long": f"00-{TRACE}-{PARENT}-001",
            "flags too short": f"00-{TRACE}-{PARENT}-1",
            "flags not hex": f"00-{TRACE}-{PARENT}-0.",
            "flags uppercase": f"00-{TRACE}-{PARENT}-0A",
            "a newline around it": VALUE + "\n",
            "fields swapped": f"00-{PARENT}-{TRACE}-01",
        }
        for why, value in bad.items():
            with self.assertRaises(tp.InvalidTraceParent, msg=why):
                tp.parse(value)
        for value in (None, 1, b"00-" + TRACE.encode()):
            with self.assertRaises(tp.InvalidTraceParent):
                tp.parse(value)
        self.assertTrue(issubclass(tp.InvalidTraceParent, ValueError))

    def test_spaces_and_tabs_around_the_value_are_ignored(self):
        for value in (" " + VALUE, "\t" + VALUE, VALUE + " ", " \t" + VALUE + "\t "):
            self.assertEqual(tp.parse(value), tp.parse(VALUE))

    def test_a_traceparent_checks_its_fields(self):
        for args in ((TRACE.upper(), PARENT), ("0" * 32, PARENT), (TRACE, "0" * 16),
                     (TRACE, PARENT[:-1]), (TRACE, PARENT, 256), (TRACE, PARENT, -1),
                     (TRACE, PARENT, 0, 0xff)):
            with self.assertRaises(tp.InvalidTraceParent, msg=repr(args)):
                tp.TraceParent(*args)

    def test_read_and_carry_a_context_from_headers(self):
        state = "vendor1=opaque value, vendor2=x"     # carried exactly, spaces and all
        self.assertEqual(tp.carry({"traceparent": VALUE, "tracestate": state, "other": "x"}),
                         {"traceparent": VALUE, "tracestate": state})
        self.assertEqual(tp.carry({"TraceParent": VALUE, "TRACESTATE": state}),
                         {"traceparent": VALUE, "tracestate": state}, "names in any case")
        self.assertEqual(tp.carry({"traceparent": VALUE}), {"traceparent": VALUE})
        self.assertEqual(tp.carry({"traceparent": f"cc-{TRACE}-{PARENT}-01-x",
                                   "tracestate": state}),
                         {"traceparent": VALUE, "tracestate": state}, "downgraded to 00")
        self.assertEqual(tp.carry({"traceparent": VALUE.upper(), "tracestate": state}), {},
                         "an invalid traceparent drops tracestate too")
        self.assertEqual(tp.carry({"tracestate": state}), {})
        self.assertEqual(tp.carry({"traceparent": VALUE, "TraceParent": VALUE}), {},
                         "two traceparents are none")
        self.assertEqual(tp.carry(None), {})
        self.assertIsNone(tp.read({}))
        self.assertEqual(tp.read({"traceparent": VALUE}).trace_id, TRACE)


class WithoutOpenTelemetryTest(unittest.TestCase):
    def test_enqueue_adds_no_headers(self):
        with NoOpenTelemetry():
            self.assertIsNone(_tracing.api())
            rec = Recorder()
            c = claimq.Client(connection=rec)
            self.assertEqual(c.enqueue("q", {"n": 1}), 1001)
            self.assertNotIn("headers", rec.calls[-1][0], "the statement is as before")
            self.assertEqual(c.enqueue_many("q", [{}, {}]), [1001, 1002])
            self.assertNotIn("headers", rec.calls[-1][0])
            self.assertIsNone(sys.modules["opentelemetry"], "nothing imported it")

    def test_headers_given_are_passed_as_given(self):
        with NoOpenTelemetry():
            rec = Recorder()
            c = claimq.Client(connection=rec)
            c.enqueue("q", {}, headers={"traceparent": VALUE, "k": "v"})
            self.assertEqual(rec.headers(), {"traceparent": VALUE, "k": "v"})
            c.enqueue_many("q", [{}, {}], headers=[{"k": "v"}, None])
            self.assertEqual(rec.headers(), [{"k": "v"}, None])
            self.assertIn("headers => %s::jsonb[]", rec.calls[-1][0])
            with self.assertRaises(ValueError):
                c.enqueue_many("q", [{}, {}], headers=[{"k": "v"}])

    def test_a_process_span_is_nothing(self):
        with NoOpenTelemetry():
            span = _tracing.Process(job({"traceparent": VALUE}))
            self.assertIsNone(span.span)
            with span.current():
                span.settle("failed", ValueError("x"))
            span.end()


class WithOpenTelemetryTest(unittest.TestCase):
    """The stand-in for the API: what claimq asks of it, and what it writes."""

    def test_enqueue_is_a_publish_span_whose_context_goes_into_the_headers(self):
        with FakeOpenTelemetry() as otel:
            c = claimq.Client(connection=Recorder())
            self.assertEqual(c.enqueue("emails", {}, headers={"k": "v"}), 1001)
            headers = c.conn.headers()
            [span] = otel.ended()
        self.assertEqual(span.name, "publish emails")
        self.assertEqual(span.kind.name, "PRODUCER")
        self.assertEqual(span.attributes, {
            "messaging.system": "claimq", "messaging.operation.name": "publish",
            "messaging.operation.type": "send", "messaging.destination.name": "emails",
            "messaging.message.id": "1001"})
        self.assertIsNone(span.parent, "no span was current: a trace of its own")
        sc = span.get_span_context()
        self.assertEqual(headers, {"k": "v", "traceparent": "00-%032x-%016x-01"
                                   % (sc.trace_id, sc.span_id)})
        self.assertEqual([(t.name, t.version) for t in otel.tracers],
                         [("claimq", claimq.__version__)])
        self.assertEqual(span.end_count, 1)

    def test_enqueue_in_the_callers_span_continues_its_trace(self):
        with FakeOpenTelemetry() as otel:
            parent = otel.trace.get_tracer("app").start_span("request")
            token = otel.context.attach(otel.trace.set_span_in_context(parent))
            try:
                claimq.Client(connection=Recorder()).enqueue("q", {})
            finally:
                otel.context.detach(token)
            [span] = otel.ended("publish q")
        self.assertIs(span.parent, parent.get_span_context())
        self.assertEqual(span.get_span_context().trace_id, parent.get_span_context().trace_id)

    def test_what_is_injected_replaces_the_callers_trace_context_only(self):
        with FakeOpenTelemetry() as otel:
            rec = Recorder()
            claimq.Client(connection=rec).enqueue("q", {}, headers={
                "TraceParent": VALUE, "tracestate": "a=b", "k": "v"})
            [span] = otel.ended()
        sc = span.get_span_context()
        self.assertEqual(rec.headers(), {"k": "v", "traceparent": "00-%032x-%016x-01"
                                         % (sc.trace_id, sc.span_id)})

    def test_enqueue_many_is_one_publish_span_for_every_job(self):
        with FakeOpenTelemetry() as otel:
            rec = Recorder()
            c = claimq.Client(connection=rec)
            ids = c.enqueue_many("q", [{}, {}, {}], headers=[{"k": "1"}, None, {}])
            given = rec.headers()
            c.enqueue_many("q", [{}, {}])
            bare = rec.headers()
            spans = otel.ended()
        self.assertEqual(ids, [1001, 1002, 1003])
        self.assertEqual(len(spans), 2, "one span a call")
        self.assertEqual([s.attributes["messaging.batch.message_count"] for s in spans], [3, 2])
        self.assertFalse([s for s in spans if "messaging.message.id" in s.attributes])
        first, second = ("00-%032x-%016x-01" % (s.get_span_context().trace_id,
                                                 s.get_span_context().span_id) for s in spans)
        self.assertEqual(given, [{"k": "1", "traceparent": first}, {"traceparent": first},
                                 {"traceparent": first}])
        self.assertEqual(bare, [{"traceparent": second}] * 2)

    def test_a_failed_enqueue_ends_its_span_with_an_error(self):
        with FakeOpenTelemetry() as otel:
            c = claimq.Client(connection=Recorder(psycopg.errors.InvalidParameterValue("no")))
            with self.assertRaises(psycopg.errors.InvalidParameterValue):
                c.enqueue("q", {})
            [span] = otel.ended()
        self.assertEqual(span.status.status_code.name, "ERROR")
        self.assertEqual(span.attributes["error.type"], "22023", "the SQLSTATE")
        self.assertEqual(len(span.exceptions), 1)
        self.assertNotIn("messaging.message.id", span.attributes)

        with FakeOpenTelemetry() as otel:
            c = claimq.Client(connection=Recorder(RuntimeError("down")))
            with self.assertRaises(RuntimeError):
                c.enqueue("q", {})
            self.assertEqual(otel.ended()[0].attributes["error.type"], "RuntimeError")

    def test_a_propagator_of_another_format_still_gets_a_traceparent(self):
        with FakeOpenTelemetry(propagator="other") as otel:
            rec = Recorder()
            claimq.Client(connection=rec).enqueue("q", {})
            sc = otel.ended()[0].get_span_context()
        self.assertEqual(rec.headers(), {
            "x-other-trace": "%x:%x" % (sc.trace_id, sc.span_id),
            "traceparent": "00-%032x-%016x-01" % (sc.trace_id, sc.span_id)})

    def test_injected_headers_past_the_servers_limit_are_left_out(self):
        big = "k=" + "v" * 9000
        self.assertEqual(_tracing.merge({"a": "b"}, {"traceparent": VALUE, "tracestate": big}),
                         {"a": "b", "traceparent": VALUE}, "the tracestate goes first")
        self.assertEqual(_tracing.merge({"a": "b" * 8170}, {"traceparent": VALUE}),
                         {"a": "b" * 8170}, "then the traceparent: the caller's are kept")
        self.assertIsNone(_tracing.merge(None, {"traceparent": VALUE * 200}))
        self.assertEqual(_tracing.text_size({"traceparent": VALUE}), len(
            '{"traceparent": "%s"}' % VALUE))
        with FakeOpenTelemetry() as otel:
            parent = otel.trace.get_tracer("app").start_span("request")
            parent.get_span_context().trace_state.header = big
            token = otel.context.attach(otel.trace.set_span_in_context(parent))
            try:
                rec = Recorder()
                claimq.Client(connection=rec).enqueue("q", {})
            finally:
                otel.context.detach(token)
        self.assertEqual(list(rec.headers()), ["traceparent"])

    def test_a_process_span_is_a_root_linked_to_the_creation_context(self):
        headers = {"traceparent": VALUE, "tracestate": "v=1", "baggage": "tenant=7"}
        for propagator in ("w3c", "other"):
            with FakeOpenTelemetry(propagator=propagator) as otel:
                span = _tracing.Process(job(headers, attempt=2, queue="emails"))
                with span.current():
                    current = otel.trace.get_current_span()
                    baggage = otel.context.get_current().get("baggage")
                span.settle("completed")
                span.end()
                span.end()
                [s] = otel.ended()
            self.assertIs(current, s, "current while the handler runs")
            self.assertEqual(baggage, {"tenant": "7"}, "the context the headers carried")
            self.assertEqual(s.name, "process emails")
            self.assertEqual(s.kind.name, "CONSUMER")
            self.assertIsNone(s.parent, "a trace of its own")
            [link] = s.links
            self.assertEqual(("%032x" % link.context.trace_id, "%016x" % link.context.span_id,
                              link.context.is_remote, int(link.context.trace_flags)),
                             (TRACE, PARENT, True, 1), propagator)
            self.assertEqual(link.context.trace_state.to_header(), "v=1")
            self.assertEqual(s.attributes, {
                "messaging.system": "claimq", "messaging.operation.name": "process",
                "messaging.operation.type": "process", "messaging.destination.name": "emails",
                "messaging.message.id": "7", "claimq.attempt": 2,
                "claimq.outcome": "completed"})
            self.assertEqual(s.status.status_code.name, "OK")
            self.assertEqual(s.end_count, 1)

    def test_no_link_without_a_valid_traceparent(self):
        for headers in (None, {}, {"traceparent": VALUE.upper()}, {"k": "v"}):
            with FakeOpenTelemetry() as otel:
                span = _tracing.Process(job(headers))
                span.settle("completed")
                span.end()
                self.assertEqual(otel.ended()[0].links, [], repr(headers))

    def test_what_came_of_an_attempt(self):
        cases = [
            (("completed",), "completed", "OK", None),
            (("snoozed",), "snoozed", "UNSET", None),
            (("failed", ValueError("bad")), "failed", "ERROR", "ValueError"),
            (("failed", claimq.JobTimeout("late")), "failed", "ERROR", "JobTimeout"),
            (("stale",), "stale", "ERROR", None),
            (("connection_lost", psycopg.OperationalError("gone")), "connection_lost", "ERROR",
             "OperationalError"),
            ((), "unsettled", "ERROR", None),
        ]
        for args, outcome, status, error in cases:
            with FakeOpenTelemetry() as otel:
                span = _tracing.Process(job({"traceparent": VALUE}))
                if args:
                    span.settle(*args)
                span.end()
                [s] = otel.ended()
            self.assertEqual((s.attributes["claimq.outcome"], s.status.status_code.name,
                              s.attributes.get("error.type")), (outcome, status, error))
            self.assertEqual(len(s.exceptions), 1 if error else 0)
        for reason, outcome in (("cancelled", "cancelled"), ("stale", "lease_lost"),
                                ("missing", "lease_lost"), ("timeout", "timeout"),
                                ("shutdown", "shutdown")):
            with FakeOpenTelemetry() as otel:
                span = _tracing.Process(job())
                span.stopped(reason)
                span.end()
                [s] = otel.ended()
            self.assertEqual((s.attributes["claimq.outcome"], s.status.status_code.name),
                             (outcome, "ERROR"), reason)
        with FakeOpenTelemetry() as otel:       # a timeout that failed the job
            span = _tracing.Process(job())
            span.settle("failed", claimq.JobTimeout("late"))
            span.stopped("timeout")
            span.end()
            self.assertEqual(otel.ended()[0].attributes["claimq.outcome"], "failed")


# -- with a server ------------------------------------------------------------

if ADMIN:
    from test_claimq import PRODUCER_ROLE, WORKER, admin, job_row, new_queue, states, wait_until


def run_worker(worker, until, seconds=30):
    """Run a Worker in a thread until until() holds: whether it did."""
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        return wait_until(until, seconds)
    finally:
        worker.stop()
        t.join(20)


@needs_server
class HeadersOnServerTest(unittest.TestCase):
    def test_headers_given_reach_the_job_and_come_back(self):
        new_queue("py_headers", keep_done="1 hour")
        given = {"traceparent": VALUE, "tracestate": "v=1", "x-tenant": "7"}
        with claimq.Client("user=" + PRODUCER_ROLE) as p, claimq.Client(WORKER) as w:
            with NoOpenTelemetry():
                one = p.enqueue("py_headers", {"n": 1}, headers=given)
                many = p.enqueue_many("py_headers", [{"n": 2}, {"n": 3}, {"n": 4}],
                                      headers=[{"k": "2"}, None, {}])
                bare = p.enqueue("py_headers", {"n": 5})
            jobs = {j.id: j for j in w.claim("py_headers", 10, lease=30)}
            self.assertEqual(jobs[one].headers, given)
            self.assertEqual([jobs[i].headers for i in many], [{"k": "2"}, None, {}])
            self.assertIsNone(jobs[bare].headers)
            rows = w.status([one, bare])
            self.assertEqual([r["headers"] for r in rows], [given, None])
            self.assertEqual(w.complete(list(jobs.values()))[0][1], claimq.Outcome.OK)
            self.assertEqual(w.wait_for([one], 5)[0]["headers"], given)

    def test_headers_the_server_refuses(self):
        new_queue("py_headers_bad")
        with admin() as a, NoOpenTelemetry():
            for bad in ({"k": 1}, {"k": {"nested": "x"}}, {"k": "v" * 9000}):
                with self.assertRaises(psycopg.errors.InvalidParameterValue, msg=repr(bad)):
                    a.enqueue("py_headers_bad", {}, headers=bad)
            with self.assertRaises(psycopg.errors.InvalidParameterValue):
                a.enqueue_many("py_headers_bad", [{}, {}], headers=[None, {"k": 2}])

    def test_without_opentelemetry_a_worker_runs_as_before(self):
        new_queue("py_untraced", keep_done="1 hour")
        seen = []
        with NoOpenTelemetry():
            with admin() as a:
                ids = a.enqueue_many("py_untraced", [{"n": i} for i in range(5)])
            w = claimq.Worker(WORKER, "py_untraced",
                              lambda job: seen.append(job.headers) or job.payload["n"])
            self.assertTrue(run_worker(w, lambda: states("py_untraced") == {"done": 5}))
        self.assertEqual(seen, [None] * 5)
        with admin() as a:
            self.assertEqual([r["headers"] for r in a.status(ids)], [None] * 5)


@needs_server
class TracedWorkerTest(unittest.TestCase):
    """The workers with the stand-in for the API."""

    def retried_twice(self, queue, kind):
        new_queue(queue, keep_done="1 hour", max_attempts=5, retry_base="100 milliseconds")
        seen = []

        def check(job):
            seen.append((job.attempt, job.headers, self.otel.trace.get_current_span()))
            if job.attempt < 3:
                raise ValueError(f"attempt {job.attempt}")
            return "done"

        async def acheck(job):
            return check(job)

        with FakeOpenTelemetry() as self.otel:
            with admin() as a:
                job_id = a.enqueue(queue, {}, headers={"k": "v"})
            [publish] = self.otel.ended(f"publish {queue}")
            done = lambda: len(self.otel.ended(f"process {queue}")) == 3  # noqa: E731
            if kind == "thread":
                ok = run_worker(claimq.Worker(WORKER, queue, check), done)
            else:
                async def main():
                    w = claimq.AsyncWorker(WORKER, queue, acheck)
                    task = asyncio.create_task(w.run())
                    ok = await asyncio.get_running_loop().run_in_executor(
                        None, lambda: wait_until(done, 30))
                    w.stop()
                    await asyncio.wait_for(task, 20)
                    return ok
                ok = asyncio.run(main())
            self.assertTrue(ok, repr(self.otel.ended()))
            spans = self.otel.ended(f"process {queue}")
        self.assertEqual(job_row(job_id), ("done", 3))
        created = publish.get_span_context()
        value = "00-%032x-%016x-01" % (created.trace_id, created.span_id)
        self.assertEqual([a for a, _, _ in seen], [1, 2, 3])
        self.assertEqual([h for _, h, _ in seen], [{"k": "v", "traceparent": value}] * 3)
        self.assertEqual([c for _, _, c in seen], spans, "the handler runs in its span")
        for attempt, span in enumerate(spans, 1):
            self.assertEqual(span.kind.name, "CONSUMER")
            [link] = span.links
            self.assertEqual((link.context.trace_id, link.context.span_id),
                             (created.trace_id, created.span_id), "one creation context")
            self.assertIsNone(span.parent)
            self.assertNotEqual(span.get_span_context().trace_id, created.trace_id)
            self.assertEqual(span.attributes, {
                "messaging.system": "claimq", "messaging.operation.name": "process",
                "messaging.operation.type": "process", "messaging.destination.name": queue,
                "messaging.message.id": str(job_id), "claimq.attempt": attempt,
                "claimq.outcome": "failed" if attempt < 3 else "completed",
                **({"error.type": "ValueError"} if attempt < 3 else {})})
            self.assertEqual(span.status.status_code.name, "ERROR" if attempt < 3 else "OK")
            self.assertEqual([str(e) for e in span.exceptions],
                             [f"attempt {attempt}"] if attempt < 3 else [])
        self.assertEqual(len({s.get_span_context().span_id for s in spans}), 3)

    def test_a_job_retried_twice_has_three_process_spans_linked_to_its_creation(self):
        self.retried_twice("py_traced", "thread")

    def test_the_same_with_the_async_worker(self):
        self.retried_twice("py_atraced", "async")

    def test_a_cancel_ends_the_span_with_an_error(self):
        new_queue("py_traced_cancel", lease="10 seconds")

        def handle(job):
            claimq.sleep(job, 30)

        with FakeOpenTelemetry() as otel:
            with admin() as a:
                job_id = a.enqueue("py_traced_cancel", {})

            def cancelled():
                if states("py_traced_cancel").get("running") == 1:
                    with admin() as a:
                        a.cancel([job_id])
                return bool(otel.ended("process py_traced_cancel"))
            w = claimq.Worker(WORKER, "py_traced_cancel", handle, heartbeat=0.3)
            self.assertTrue(run_worker(w, cancelled))
            [span] = otel.ended("process py_traced_cancel")
        self.assertEqual((span.attributes["claimq.outcome"], span.status.status_code.name),
                         ("cancelled", "ERROR"))

    def test_a_timeout_fails_the_attempt_in_its_span(self):
        for queue, kind in (("py_traced_timeout", "thread"), ("py_atraced_timeout", "async")):
            new_queue(queue, max_attempts=1)
            with FakeOpenTelemetry() as otel:
                with admin() as a:
                    a.enqueue(queue, {})
                ended = lambda: bool(otel.ended(f"process {queue}"))  # noqa: E731
                if kind == "thread":
                    ok = run_worker(claimq.Worker(WORKER, queue, lambda job: claimq.sleep(job, 30),
                                                  timeout=1), ended)
                else:
                    async def main():
                        w = claimq.AsyncWorker(WORKER, queue, lambda job: asyncio.sleep(30),
                                               timeout=1)
                        task = asyncio.create_task(w.run())
                        ok = await asyncio.get_running_loop().run_in_executor(
                            None, lambda: wait_until(ended, 30))
                        w.stop()
                        await asyncio.wait_for(task, 20)
                        return ok
                    ok = asyncio.run(main())
                self.assertTrue(ok, kind)
                [span] = otel.ended(f"process {queue}")
            self.assertEqual((span.attributes["claimq.outcome"], span.attributes["error.type"],
                              span.status.status_code.name), ("failed", "JobTimeout", "ERROR"),
                             kind)
            self.assertTrue(wait_until(lambda: states(queue) == {"dead": 1}, 10), kind)

    def test_a_lost_lease_and_a_stale_settle_end_the_span_with_an_error(self):
        # A lost lease: the heartbeat (3 s) comes after the lease (1 s) ran
        # out and the reclaimer took the job back; the handler is told.  A
        # stale settle: no heartbeat before the handler returns, after the
        # reclaimer took the job back; the complete is refused.
        for queue, heartbeat, outcome in (("py_traced_lost", 3, "lease_lost"),
                                          ("py_traced_stale", 600, "stale")):
            new_queue(queue, lease="1 second", run_lease="1 second", max_attempts=1)

            def handle(job, outcome=outcome):
                if outcome == "lease_lost":      # told by the heartbeat
                    wait_until(lambda: job.stop_reason is not None, 20)
                else:                            # taken back, and not told yet
                    wait_until(lambda: job_row(job.id)[0] != "running", 20)
                return "late"

            with FakeOpenTelemetry() as otel:
                with admin() as a:
                    a.enqueue(queue, {})
                w = claimq.Worker(WORKER, queue, handle, concurrency=1, lease=1,
                                  heartbeat=heartbeat)
                self.assertTrue(run_worker(w, lambda: bool(otel.ended(f"process {queue}"))))
                [span] = otel.ended(f"process {queue}")
            self.assertEqual((span.attributes["claimq.outcome"], span.status.status_code.name),
                             (outcome, "ERROR"), queue)
            self.assertEqual(states(queue), {"dead": 1})


if __name__ == "__main__":
    unittest.main()
