// claimq for Node.js: a Client with a method per SQL function, and a Worker
// that needs only a handler function.
//
//   const { Worker } = require('claimq');
//   const worker = new Worker({ queue: 'emails', concurrency: 8 },
//     async (job, { signal }) => sendEmail(job.payload, { signal }));
//   await worker.run();    // until SIGTERM or SIGINT, or worker.stop()
//
// Job ids and tokens are strings of digits (pg returns int8 that way):
// exact at any size, where a JavaScript number rounds above 2^53.  Pass
// them back as they came, or as BigInt.  Never install an int8 type parser
// that turns them into numbers.
//
// Every call is one statement on a pool of pg connections, so the library
// works through pgbouncer in transaction mode.  The worker claims when a
// handler would otherwise be idle, up to `batch` jobs (more than
// `concurrency` wait their turn, their leases kept alive), starts each, and
// runs the handler; a heartbeat extends the leases of every job it holds
// in one call, every third of a lease.  The handler's return value is the
// job's result; a thrown error fails the job with its message; a Fail says
// when to retry or that the job is dead; a Snooze puts the job back for a
// while without using up an attempt.  A job cancelled while it runs, or
// whose lease was lost, has its AbortSignal aborted (signal.reason says
// why), and is never completed by this worker.  Lost connections and
// server restarts are retried with backoff.  On SIGTERM or SIGINT the
// worker claims nothing more, releases what it claimed and has not started,
// lets the running handlers finish, settles them, and run() resolves.
//
// Tracing: where the application has @opentelemetry/api installed, enqueue
// and enqueueMany run in a `publish <queue>` span (kind PRODUCER) whose
// context goes into the jobs' headers (traceparent, tracestate), and each
// attempt the worker makes runs in a `process <queue>` span (kind CONSUMER)
// linked to that context (see "tracing" below).  Without the package
// nothing is traced.
'use strict';

const os = require('os');
const { setTimeout: sleep } = require('timers/promises');
const pg = require('pg');
const { version: VERSION } = require('./package.json');

// -- tracing, through the application's @opentelemetry/api if it has one
//
// enqueue and enqueueMany: a `publish <queue>` span (kind PRODUCER), the
// active span while the statement runs.  Its context goes into the jobs'
// headers through the application's propagator (propagation.inject, on a
// plain object); if that writes no valid W3C traceparent (no propagator,
// or one of another format), traceparent and tracestate are written here
// from the span.  What is injected replaces the caller's headers of the
// same names (in any case, and their tracestate with their traceparent);
// the caller's others are kept.
//
// Each attempt the worker makes: a `process <queue>` span (kind CONSUMER)
// from the job's start to its settling, the root of a trace of its own,
// linked to the context the job's headers carry: what the application's
// propagator reads there (propagation.extract), else their traceparent as
// read here.  The handler runs in that span, in the context read from the
// headers (baggage the application propagates reaches it).  claimq.outcome
// says what came of the attempt: completed, failed, snoozed, stale,
// cancelled, missing, started, lease_lost, timeout, shutdown,
// connection_lost or unsettled; the status is OK for completed, unset for
// snoozed, ERROR otherwise.
//
// The package is required on first use; without it every step here does
// nothing and a job gets no headers from it.  A tracing call that throws is
// told to OpenTelemetry's diagnostic logger (diag) and the work goes on.

const MAX_HEADERS = 8192;        // bytes of a job's headers as text (the server's rule)

let otelApi;                     // undefined: not looked for yet; null: none
function otel() {
  if (otelApi === undefined) {
    try {
      otelApi = require('@opentelemetry/api');
    } catch {
      otelApi = null;            // not installed (or broken): trace nothing
    }
  }
  return otelApi;
}

function safely(api, what, fn, fallback) {
  try {
    return fn();
  } catch (err) {
    try {
      api.diag.warn(`claimq: ${what} failed, going on without it: ${err && err.message}`);
    } catch { /* nowhere to tell it */ }
    return fallback;
  }
}

// fn() in ctx; fn alone if the context manager fails before calling it.
function within(api, ctx, fn) {
  let called = false;
  const inside = () => { called = true; return fn(); };
  try {
    return api.context.with(ctx, inside);
  } catch (err) {
    if (called) throw err;
    safely(api, 'entering a context', () => { throw err; });
    return fn();
  }
}

const tracer = (api) => api.trace.getTracer('claimq', VERSION);

// error.type: a SQLSTATE or a system error's code (ECONNRESET) where the
// error has one, else its class's name (Error, TypeError, Fail, JobTimeout).
function className(err) {
  const ctor = err && err.constructor && err.constructor.name;
  if (typeof ctor === 'string' && ctor !== '' && ctor !== 'Object') return ctor;
  return (err && typeof err.name === 'string' && err.name) || 'Error';
}
function errorType(err) {
  if (err && typeof err.code === 'string' && err.code !== '') return err.code;
  return className(err);
}
const describe = (err) => `${className(err)}: ${err && err.message}`;

// W3C Trace Context in a job's headers.  A header's name is matched in any
// case, the lowercase one's value first.
function valuesOf(headers, name) {
  if (!headers || typeof headers !== 'object') return [];
  const found = Object.keys(headers).filter((k) => k !== name && k.toLowerCase() === name)
    .map((k) => headers[k]);
  if (Object.prototype.hasOwnProperty.call(headers, name)) found.unshift(headers[name]);
  return found;
}

// The traceparent of headers ({ traceId, spanId, flags }), or null if there
// is none, more than one, or it is invalid: version 00 exactly as the
// specification writes it; a later version (01 to fe) by its first four
// fields, followed by the end or a dash; spaces and tabs around it ignored.
function traceparentOf(headers) {
  const values = valuesOf(headers, 'traceparent');
  if (values.length !== 1 || typeof values[0] !== 'string') return null;
  const m = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/s
    .exec(values[0].replace(/^[ \t]+|[ \t]+$/g, ''));
  if (!m) return null;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return null;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return null;
  return { traceId, spanId, flags: parseInt(flags, 16) };
}

// Written as version 00, with the flags it defines (sampled, random).
const traceparent = (traceId, spanId, flags) =>
  `00-${traceId}-${spanId}-${(flags & 0x03).toString(16).padStart(2, '0')}`;

// The bytes of headers as the server measures them (jsonb as text).
const textSize = (headers) => Buffer.byteLength(`{${Object.entries(headers)
  .map(([k, v]) => `${JSON.stringify(k)}: ${JSON.stringify(v)}`).join(', ')}}`);

// A job's headers: the caller's, with what tracing injected in place of
// those of the same names (in any case); an injected traceparent replaces
// the caller's tracestate too, which belongs to the caller's traceparent.
// Injected entries that would take the headers past the server's limit are
// left out, the largest first and traceparent last (with it, all of them);
// the caller's own are never cut (too large, the server refuses them).
function merge(given, injected) {
  const theirs = given === undefined || given === null ? null : given;
  if (theirs !== null && (typeof theirs !== 'object' || Array.isArray(theirs))) return theirs;
  const ours = { ...injected };
  while (Object.keys(ours).length > 0) {
    const names = new Set(Object.keys(ours).map((k) => k.toLowerCase()));
    if (names.has('traceparent')) names.add('tracestate');
    const out = {};
    for (const [k, v] of Object.entries(theirs ?? {})) if (!names.has(k.toLowerCase())) out[k] = v;
    Object.assign(out, ours);
    if (textSize(out) <= MAX_HEADERS) return out;
    const rest = Object.keys(ours).filter((k) => k.toLowerCase() !== 'traceparent');
    if (rest.length === 0) break;
    delete ours[rest.reduce((a, b) => (ours[b].length > ours[a].length ? b : a))];
  }
  return theirs;
}

// The context ctx (its span: the publish span) as headers.
function inject(api, ctx, span) {
  const carrier = {};
  api.propagation.inject(ctx, carrier);
  if (traceparentOf(carrier) === null) {
    // The application's propagator wrote no W3C trace context: the
    // contract's keys are written here.
    for (const k of Object.keys(carrier)) {
      if (['traceparent', 'tracestate'].includes(k.toLowerCase())) delete carrier[k];
    }
    const sc = span.spanContext();
    if (api.trace.isSpanContextValid(sc)) {
      carrier.traceparent = traceparent(sc.traceId, sc.spanId, sc.traceFlags);
      const state = sc.traceState ? sc.traceState.serialize() : '';
      if (state) carrier.tracestate = state;
    }
  }
  const out = {};
  for (const [k, v] of Object.entries(carrier)) if (typeof v === 'string') out[k] = v;
  return out;
}

// run(headersOf) inside a `publish <queue>` span for count jobs,
// headersOf(h) giving the headers to store for a job the caller gave h;
// ids(result) the job ids enqueued.
async function published(queue, count, run, ids) {
  const api = otel();
  const untouched = (h) => h ?? null;
  if (!api) return run(untouched);
  const attributes = {
    'messaging.system': 'claimq',
    'messaging.operation.name': 'publish',
    'messaging.operation.type': 'send',
    'messaging.destination.name': queue,
  };
  if (count !== 1) attributes['messaging.batch.message_count'] = count;
  const span = safely(api, 'starting a span', () => tracer(api).startSpan(`publish ${queue}`,
    { kind: api.SpanKind.PRODUCER, attributes }), null);
  if (!span) return run(untouched);
  const ctx = safely(api, 'making a span active', () => api.trace.setSpan(api.context.active(), span), null);
  let injected;
  const headersOf = (h) => {
    if (injected === undefined) injected = safely(api, 'injecting the trace context', () => inject(api, ctx, span), {});
    return Object.keys(injected).length ? merge(h, injected) : untouched(h);
  };
  let result;
  try {
    result = await (ctx ? within(api, ctx, () => run(headersOf)) : run(headersOf));
  } catch (err) {
    safely(api, 'ending a span', () => {
      span.setAttribute('error.type', errorType(err));
      span.recordException(err);
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: describe(err) });
      span.end();
    });
    throw err;
  }
  safely(api, 'ending a span', () => {
    const enqueued = ids(result);
    if (count === 1 && enqueued.length === 1 && enqueued[0] !== null && enqueued[0] !== undefined) {
      span.setAttribute('messaging.message.id', String(enqueued[0]));
    }
    span.end();
  });
  return result;
}

// (the context the application's propagator reads from a job's headers,
// the span context to link to or null): the one it read, else the
// headers' traceparent read here.
function linkOf(api, headers) {
  const created = safely(api, 'extracting a job\'s trace context',
    () => api.propagation.extract(api.ROOT_CONTEXT, { ...(headers ?? {}) }), api.ROOT_CONTEXT);
  const sc = api.trace.getSpanContext(created);
  if (sc && api.trace.isSpanContextValid(sc)) return [created, sc];
  const tp = traceparentOf(headers);
  if (tp === null) return [created, null];
  const state = valuesOf(headers, 'tracestate').filter((v) => typeof v === 'string').join(',');
  const link = { traceId: tp.traceId, spanId: tp.spanId, traceFlags: tp.flags & 0x03, isRemote: true };
  if (state && typeof api.createTraceState === 'function') {
    link.traceState = safely(api, 'reading a tracestate', () => api.createTraceState(state), undefined);
  }
  return [created, link];
}

// One attempt of a job in the worker: its `process <queue>` span and what
// came of it.  run(fn) runs fn in the span's context; the worker tells the
// outcome as it learns it (settle, stopped), and end() ends the span with it.
class Attempt {
  constructor(api, job, span, context) {
    this.api = api;
    this.span = span;
    this.context = context;
    this.result = null;          // claimq.outcome
    this.error = null;           // what failed the job or the worker, if something did
    this.ended = false;
  }

  run(fn) { return this.context ? within(this.api, this.context, fn) : fn(); }

  settle(result, err = null) {
    if (this.ended) return;
    this.result = result;
    this.error = err;
  }

  // The handler was stopped (signal.reason), unless what came of the
  // attempt is known already (a timeout that failed the job).
  stopped(reason) {
    if (this.result === null) {
      this.settle(['cancelled', 'timeout', 'shutdown'].includes(reason) ? reason : 'lease_lost');
    }
  }

  end() {
    if (this.ended) return;
    this.ended = true;
    const { span, api, error } = this;
    const result = this.result ?? 'unsettled';
    safely(api, 'ending a span', () => {
      span.setAttribute('claimq.outcome', result);
      if (error) {
        span.setAttribute('error.type', errorType(error));
        span.recordException(error);
      }
      if (result === 'completed') {
        span.setStatus({ code: api.SpanStatusCode.OK });
      } else if (result !== 'snoozed') {
        const message = error && ['failed', 'unsettled', 'connection_lost'].includes(result)
          ? describe(error) : result;
        span.setStatus({ code: api.SpanStatusCode.ERROR, message });
      }
      span.end();
    });
  }
}

// Without the API (or a span): nothing to record.
const untraced = { run: (fn) => fn(), settle() {}, stopped() {}, end() {} };

function attemptOf(job) {
  const api = otel();
  if (!api) return untraced;
  return safely(api, 'starting a span', () => {
    const [created, link] = linkOf(api, job.headers);
    const span = tracer(api).startSpan(`process ${job.queue}`, {
      kind: api.SpanKind.CONSUMER,
      links: link ? [{ context: link }] : [],
      attributes: {
        'messaging.system': 'claimq',
        'messaging.operation.name': 'process',
        'messaging.operation.type': 'process',
        'messaging.destination.name': job.queue,
        'messaging.message.id': id(job.id),
        'claimq.attempt': job.attempt,
      },
    }, api.ROOT_CONTEXT);
    // The handler's context: the span, in what the headers carried.
    const context = safely(api, 'making a span active', () => api.trace.setSpan(created, span), null);
    return new Attempt(api, job, span, context);
  }, untraced);
}

/** Raised by a handler: fail the job, retrying after retryIn ms, or never. */
class Fail extends Error {
  constructor(message, { retryIn = null, permanent = false } = {}) {
    super(message);
    this.name = 'Fail';
    this.retryIn = retryIn;
    this.permanent = permanent;
  }
}

/** Raised by a handler: run this job again in `ms`; no attempt is used. */
class Snooze extends Error {
  constructor(ms) {
    super(`snooze ${ms} ms`);
    this.name = 'Snooze';
    this.ms = ms;
  }
}

/** What a job that ran past the worker's timeoutMs is failed with. */
class JobTimeout extends Error {
  constructor(message) {
    super(message);
    this.name = 'JobTimeout';
  }
}

// A lost connection or a server going away, not a refusal: worth a retry.
// A SQLSTATE of class 08 (connection), 57P01-57P03 (shutdown, crash,
// cannot connect now) or 53300 (too many connections); a socket error
// (ECONNRESET ...); or one of the errors pg and pg-pool raise without a
// code when a connection ends.  Anything else (a TypeError from a result
// JSON cannot hold, a refused statement) is not retried.
function isConnectionError(err) {
  if (!err) return false;
  const { code } = err;
  if (typeof code === 'string' && code !== '') {
    return /^(08|57P0)/.test(code) || code === '53300' || /^E[A-Z]+$/.test(code);
  }
  return /^(Connection terminated|Client has encountered a connection error|Client was closed|timeout exceeded when trying to connect)/
    .test(String(err.message));
}

const id = (v) => (typeof v === 'bigint' ? v.toString() : String(v));
const secs = (ms) => (ms === null || ms === undefined ? null : `${Number(ms) / 1000} seconds`);
const pairs = (jobs) => [jobs.map((j) => id(j.id)), jobs.map((j) => id(j.token))];
// The queue every job of a batch is in, if they tell it and it is one: the
// working calls pass it (it routes them on Citus, and is checked on one
// server); else null, which checks nothing.
function queueOf(jobs) {
  const queues = new Set(jobs.map((j) => j.queue ?? null));
  return queues.size === 1 ? [...queues][0] : null;
}

// enqueue's and enqueueMany's options after and afterFailed: the named
// arguments to append, their values pushed onto params.  Only those given
// are passed (null or undefined: the function's default), so that a call
// without them reads as before.
function workflow(o, params) {
  let sql = '';
  if (o.after !== undefined && o.after !== null) {
    params.push(o.after.map(id));
    sql += `, after => $${params.length}::bigint[]`;
  }
  if (o.afterFailed !== undefined && o.afterFailed !== null) {
    params.push(o.afterFailed);
    sql += `, after_failed => $${params.length}`;
  }
  return sql;
}

// attempts: the attempts counted before this claim (with start: true,
// including this one); attempt: this run's, counting from 1.
function toJob(r, queue, started) {
  return {
    id: r.job_id, token: r.token, payload: r.payload, attempts: r.attempts,
    attempt: started ? r.attempts : r.attempts + 1, queue,
    priority: r.priority, enqueuedAt: r.enqueued_at, expiresAt: r.expires_at,
    headers: r.headers ?? null,
  };
}

/** One method per claimq function, on a pg.Pool (or a pool's options). */
class Client {
  constructor(poolOrOptions = {}) {
    this.pool = poolOrOptions instanceof pg.Pool ? poolOrOptions : new pg.Pool(poolOrOptions);
    this.ownsPool = !(poolOrOptions instanceof pg.Pool);
  }

  async end() { if (this.ownsPool) await this.pool.end(); }

  async query(sql, params) { return (await this.pool.query(sql, params)).rows; }

  // -- producing
  // headers: the job's headers, an object of strings; enqueue adds the
  // trace context (see published()).  Passed only when there are some.
  async enqueue(queue, payload, o = {}) {
    return published(queue, 1, async (headersOf) => {
      const params = [queue, JSON.stringify(payload), o.runAt ?? null, o.priority ?? 0,
        o.dedupKey ?? null, o.maxAttempts ?? null, o.onDuplicate ?? 'keep', o.groupKey ?? null];
      let more = workflow(o, params);
      const headers = headersOf(o.headers);
      if (headers !== null) {
        params.push(JSON.stringify(headers));
        more += `, headers => $${params.length}::jsonb`;
      }
      const rows = await this.query(
        'SELECT claimq.enqueue($1, $2::jsonb, run_at => $3, priority => $4, dedup_key => $5,' +
        ` max_attempts => $6, on_duplicate => $7, group_key => $8${more}) AS id`,
        params);
      return rows[0].id;
    }, (jobId) => [jobId]);
  }

  // headers: one per payload (null: none), or none at all.
  async enqueueMany(queue, payloads, o = {}) {
    return published(queue, payloads.length, async (headersOf) => {
      const params = [queue, payloads.map((p) => JSON.stringify(p)), o.runAt ?? null,
        o.priority ?? 0, o.dedupKeys ?? null, o.maxAttempts ?? null, o.onDuplicate ?? 'keep',
        o.groupKeys ?? null];
      let more = workflow(o, params);
      const headers = (o.headers ?? payloads.map(() => null)).map(headersOf);
      if ((o.headers !== undefined && o.headers !== null) || headers.some((h) => h !== null)) {
        params.push(headers.map((h) => (h === null ? null : JSON.stringify(h))));
        more += `, headers => $${params.length}::jsonb[]`;
      }
      const rows = await this.query(
        'SELECT * FROM claimq.enqueue_many($1, $2::jsonb[], run_at => $3, priority => $4,' +
        ' dedup_keys => $5::text[], max_attempts => $6, on_duplicate => $7,' +
        ` group_keys => $8::text[]${more})`,
        params);
      return rows.map((r) => r.enqueue_many);
    }, (jobIds) => jobIds);
  }

  async cancel(jobIds, queue = null) {
    return this.query('SELECT * FROM claimq.cancel($1::bigint[], $2)', [jobIds.map(id), queue]);
  }

  async status(jobIds, queue = null) {
    return this.query('SELECT * FROM claimq.status($1::bigint[], $2)', [jobIds.map(id), queue]);
  }

  // For each listed job, one row per job it runs after:
  // { job_id, after_id, state, result, last_error }.
  async dependencies(jobIds, queue = null) {
    return this.query('SELECT * FROM claimq.dependencies($1::bigint[], $2)',
      [jobIds.map(id), queue]);
  }

  async waitFor(jobIds, timeoutMs, queue = null) {
    return this.query('SELECT * FROM claimq.wait_for($1::bigint[], $2::interval, $3)',
      [jobIds.map(id), secs(timeoutMs), queue]);
  }

  // -- working (jobs are { id, token } objects, as claim returns them)
  async claim(queue, maxJobs = 1, o = {}) {
    const rows = await this.query(
      'SELECT * FROM claimq.claim($1, $2, lease => $3::interval, worker => $4, start => $5,' +
      ' wait => $6::interval)',
      [queue, maxJobs, secs(o.leaseMs), o.worker ?? null, o.start ?? false,
        secs(o.waitMs ?? 0)]);
    return rows.map((r) => toJob(r, queue, Boolean(o.start)));
  }

  async start(jobs, leaseMs = null) {
    return this.query(
      'SELECT * FROM claimq.start($1::bigint[], $2::bigint[], $3::interval, queue => $4)',
      [...pairs(jobs), secs(leaseMs), queueOf(jobs)]);
  }

  async extend(jobs, leaseMs = null) {
    return this.query(
      'SELECT * FROM claimq.extend($1::bigint[], $2::bigint[], $3::interval, queue => $4)',
      [...pairs(jobs), secs(leaseMs), queueOf(jobs)]);
  }

  async complete(jobs, results = null) {
    return this.query(
      'SELECT * FROM claimq.complete($1::bigint[], $2::bigint[], $3::jsonb[], queue => $4)',
      [...pairs(jobs), results && results.map((r) => (r === undefined ? null : JSON.stringify(r))),
        queueOf(jobs)]);
  }

  async fail(jobs, error = null, o = {}) {
    return this.query(
      'SELECT * FROM claimq.fail($1::bigint[], $2::bigint[], $3, $4::interval, $5, queue => $6)',
      [...pairs(jobs), error, secs(o.retryIn), o.permanent ?? false, queueOf(jobs)]);
  }

  async release(jobs) {
    return this.query('SELECT * FROM claimq.release($1::bigint[], $2::bigint[], queue => $3)',
      [...pairs(jobs), queueOf(jobs)]);
  }

  async snooze(jobs, delayMs) {
    return this.query(
      'SELECT * FROM claimq.snooze($1::bigint[], $2::bigint[], $3::interval, queue => $4)',
      [...pairs(jobs), secs(delayMs), queueOf(jobs)]);
  }

  async releaseWorker(queue, worker) {
    return (await this.query('SELECT claimq.release_worker($1, $2) AS n', [queue, worker]))[0].n;
  }

  // -- dedup key claims
  async claimKeys(scope, keys, ttlMs) {
    return this.query('SELECT * FROM claimq.claim_keys($1, $2::text[], $3::interval)',
      [scope, keys, secs(ttlMs)]);
  }

  async releaseKeys(scope, keys, tokens) {
    return this.query('SELECT * FROM claimq.release_keys($1, $2::text[], $3::bigint[])',
      [scope, keys, tokens.map(id)]);
  }

  // -- administration
  async createQueue(queue, options = {}) { await this.call('create_queue', [queue], options); }
  async alterQueue(queue, options = {}) { await this.call('alter_queue', [queue], options); }
  async setGroupWeight(queue, groupKey, weight) {
    await this.query('SELECT claimq.set_group_weight($1, $2, $3::real)', [queue, groupKey, weight]);
  }
  async dropQueue(queue, force = false) { await this.call('drop_queue', [queue], { force }); }
  async pauseQueue(queue) { await this.call('pause_queue', [queue]); }
  async resumeQueue(queue) { await this.call('resume_queue', [queue]); }
  async purgeQueue(queue) { return (await this.call('purge_queue', [queue]))[0].purge_queue; }
  async metrics() { return (await this.call('metrics', []))[0].metrics; }

  /** SELECT * FROM claimq.<fn>(args..., name => value...); undefined options are left out. */
  async call(fn, args = [], named = {}) {
    if (!/^[a-z_]+$/.test(fn)) throw new Error(`bad function name ${fn}`);
    const params = [...args];
    const parts = args.map((_, i) => `$${i + 1}`);
    for (const [name, value] of Object.entries(named)) {
      if (value === undefined) continue;
      if (!/^[a-z_]+$/.test(name)) throw new Error(`bad argument name ${name}`);
      params.push(value);
      parts.push(`${name} => $${params.length}`);
    }
    return this.query(`SELECT * FROM claimq.${fn}(${parts.join(', ')})`, params);
  }
}

/** Runs handler(job, { signal }) for the jobs of one queue. */
// A bell: wait(ms) resolves after ms, or at once when someone rings.
class Bell {
  constructor() { this.waiters = new Set(); }

  ring() {
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const done of waiters) done();
  }

  wait(ms) {
    return new Promise((resolve) => {
      const done = () => { clearTimeout(timer); this.waiters.delete(done); resolve(); };
      const timer = setTimeout(done, Math.max(0, Math.min(ms, 2 ** 31 - 1)));
      this.waiters.add(done);
    });
  }
}

// Problems to stderr; the rest nowhere (pass logger: console to see all).
const stderrLogger = {
  debug() {},
  info() {},
  warn(line) { process.stderr.write(`claimq: ${line}\n`); },
  error(line) { process.stderr.write(`claimq: ${line}\n`); },
};

function loggerOf(options) {
  if (options.logger) return options.logger;
  if (options.log) {             // the older option: one function for every line
    const f = options.log;
    return { debug: f, info: f, warn: f, error: f };
  }
  return stderrLogger;
}

// What a worker holds is keyed by claim, not by job: a job it claims again
// while a stale run of it is still in a handler is another entry.
const key = (job) => `${id(job.id)}:${id(job.token)}`;

/** Runs handler(job, { signal }) for the jobs of one queue, or of several. */
class Worker {
  constructor(options, handler) {
    const queues = options.queues
      ?? { [options.queue]: options.concurrency ?? 4 };
    const names = Object.keys(queues);
    if (names.length === 0 || names.includes('undefined')) throw new TypeError('a queue is needed');
    const handlerOf = (q) => {
      const h = typeof handler === 'function' ? handler : handler && handler[q];
      if (typeof h !== 'function') throw new TypeError(`a handler function is needed for queue ${q}`);
      return h;
    };
    this.idleMs = options.idleMs ?? 100;
    this.lanes = names.map((q) => {
      const concurrency = queues[q];
      if (!(concurrency >= 1)) throw new RangeError(`concurrency of ${q} must be at least 1`);
      const batch = options.batch ?? concurrency;
      return {
        queue: q, handler: handlerOf(q), concurrency, batch,
        // Jobs held at most: a batch larger than the handlers waits its turn.
        prefetch: Math.max(batch, concurrency),
        waiting: [],             // claimed, not yet started
        running: new Set(),
        idleMs: this.idleMs, nextClaim: 0,
      };
    });
    this.queue = names[0];
    this.handler = this.lanes[0].handler;
    this.concurrency = this.lanes.reduce((n, l) => n + l.concurrency, 0);
    this.batch = options.batch ?? this.lanes[0].batch;
    this.prefetch = this.lanes.reduce((n, l) => n + l.prefetch, 0);
    this.onComplete = options.onComplete ?? null;
    this.onFailure = options.onFailure ?? null;
    this.timeoutMs = options.timeoutMs ?? null;
    this.shutdownTimeoutMs = options.shutdownTimeoutMs ?? null;
    this.onShutdownTimeout = options.onShutdownTimeout ?? 'release';
    if (!['release', 'abandon'].includes(this.onShutdownTimeout)) {
      throw new RangeError("onShutdownTimeout must be 'release' or 'abandon'");
    }
    this.leaseMs = options.leaseMs ?? 30000;
    this.heartbeatMs = options.heartbeatMs ?? this.leaseMs / 3;
    this.name = options.name ?? `js-${os.hostname()}-${process.pid}`;
    this.maxIdleMs = options.maxIdleMs ?? 2000;
    this.maxBackoffMs = options.maxBackoffMs ?? 5000;
    this.logger = loggerOf(options);
    this.client = options.client ?? new Client({
      ...(options.pool ?? {}), max: (options.pool && options.pool.max) || 2,
      application_name: this.name,
    });
    this.client.pool.on('error', (err) => this.logger.warn(`idle connection error: ${err.message}`));
    // Every connection of the pool has a listener for 'error' from its
    // start: the pool hears its idle ones (above), a query its own, but a
    // connection the pool has just handed to completeInTransaction has
    // none until that function's next step, and an error read in the same
    // chunk as the query that freed it (a pooler's "server conn crashed?"
    // at a server restart) would end the process there.  Such an error
    // needs no more: the connection's next query fails, and the pool drops
    // a connection that is not queryable.
    this.client.pool.on('connect', (c) => c.on('error', () => {}));
    this.held = new Map();       // key(job) -> { job, lane, abort, started, timer }
    this.stopping = false;
    this.beatDone = false;
    this.freed = new Bell();     // a job left, or stop()
    this.beatBell = new Bell();  // the heartbeat's end
    this.completed = 0;
    this.failed = 0;
  }

  stop() {
    this.stopping = true;
    this.freed.ring();
  }

  // fn(client), again after a lost connection, with backoff.
  async db(fn, { retry = true } = {}) {
    let delay = 100;
    for (;;) {
      try {
        return await fn(this.client);
      } catch (err) {
        if (!retry || !isConnectionError(err)) throw err;
        this.logger.warn(`connection lost (${err.message}); retrying in ${delay} ms`);
        await sleep(delay);
        delay = Math.min(delay * 2, this.maxBackoffMs);
      }
    }
  }

  heldIn(lane) {
    let n = 0;
    for (const h of this.held.values()) if (h.lane === lane) n += 1;
    return n;
  }

  pump(lane) {
    while (lane.running.size < lane.concurrency && lane.waiting.length > 0 && !this.stopping) {
      const job = lane.waiting.shift();
      const p = this.runJob(lane, job).finally(() => {
        lane.running.delete(p);
        this.freed.ring();
        this.pump(lane);
      });
      lane.running.add(p);
    }
  }

  // One claim for each queue that has room and is due: true if any job came.
  async claimRound() {
    let got = false;
    for (const lane of this.lanes) {
      if (this.stopping) break;
      if (Date.now() < lane.nextClaim) continue;
      const n = this.heldIn(lane);
      const room = lane.prefetch - n;
      if (n >= lane.concurrency || room <= 0) continue;
      let jobs = [];
      try {
        jobs = await this.client.claim(lane.queue, room, { leaseMs: this.leaseMs, worker: this.name });
      } catch (err) {
        this.logger.warn(`claim from ${lane.queue} failed: ${err.message}`);
      }
      if (jobs.length === 0) {
        lane.nextClaim = Date.now() + lane.idleMs;
        lane.idleMs = Math.min(lane.idleMs * 2, this.maxIdleMs);
        continue;
      }
      got = true;
      lane.idleMs = this.idleMs;
      lane.nextClaim = 0;
      this.logger.debug(`claimed ${jobs.length} jobs of ${lane.queue}`);
      for (const job of jobs) {
        this.held.set(key(job), { job, lane, abort: new AbortController(), started: false, timer: null });
        lane.waiting.push(job);
      }
      if (this.stopping) break;
      this.pump(lane);
    }
    return got;
  }

  async run() {
    const stop = () => this.stop();
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    const beat = this.beat();
    try {
      while (!this.stopping) {
        if (!(await this.claimRound())) {
          const now = Date.now();
          const due = this.lanes.filter((l) => l.nextClaim > now).map((l) => l.nextClaim - now);
          await this.freed.wait(Math.min(200, ...due));
        }
      }
    } finally {
      this.stopping = true;
      await this.shutdown();
      this.beatDone = true;
      this.beatBell.ring();
      await beat;
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      await this.client.end();
    }
  }

  // Unstarted claims go back at once; the running jobs finish, their leases
  // kept by the heartbeat, until shutdownTimeoutMs (if set).
  async shutdown() {
    const rest = [];
    for (const lane of this.lanes) {
      for (const job of lane.waiting.splice(0)) {
        const h = this.held.get(key(job));
        if (h && !h.started) {
          this.held.delete(key(job));
          rest.push(job);
        }
      }
    }
    if (rest.length > 0) {
      try {
        const rows = await this.db((c) => c.release(rest));
        this.logger.info(`released ${rows.filter((r) => r.outcome === 'ok').length} jobs it never started`);
      } catch (err) {
        this.logger.warn(`could not release ${rest.length} jobs: ${err.message}`);
      }
    }
    const deadline = this.shutdownTimeoutMs === null ? Infinity : Date.now() + this.shutdownTimeoutMs;
    while (this.held.size > 0) {
      const left = deadline - Date.now();
      if (left <= 0) {
        await this.giveUpRunning();
        break;
      }
      await this.freed.wait(Math.min(left, 200));
    }
  }

  // The shutdown deadline passed: stop the running handlers, and give their
  // jobs back (a snooze of 0: no attempt used) or leave them to their leases.
  async giveUpRunning() {
    const jobs = [];
    for (const [k, h] of [...this.held]) {
      this.held.delete(k);
      clearTimeout(h.timer);
      h.abort.abort('shutdown');
      jobs.push(h.job);
    }
    if (jobs.length === 0) return;
    if (this.onShutdownTimeout === 'abandon') {
      this.logger.warn(`shutdown deadline: ${jobs.length} running jobs left to their leases`);
      return;
    }
    try {
      const rows = await this.db((c) => c.snooze(jobs, 0), { retry: false });
      this.logger.warn(`shutdown deadline: ${rows.filter((r) => r.outcome === 'ok').length} running jobs given back`);
    } catch (err) {
      this.logger.warn(`could not give back ${jobs.length} running jobs: ${err.message}`);
    }
  }

  // Extends every held lease every heartbeatMs, until run() has settled all.
  async beat() {
    let next = this.heartbeatMs > 0 ? Date.now() + this.heartbeatMs : Infinity;
    while (!this.beatDone) {
      await this.beatBell.wait(Math.min(next - Date.now(), 1000));
      if (this.beatDone) return;
      if (Date.now() < next) continue;
      next = Date.now() + this.heartbeatMs;
      const entries = [...this.held];
      if (entries.length === 0) continue;
      let rows;
      try {
        rows = await this.db((c) => c.extend(entries.map(([, h]) => h.job), this.leaseMs), { retry: false });
      } catch (err) {
        this.logger.warn(`heartbeat failed: ${err.message}`);
        continue;
      }
      // One row per job, in the order given.
      rows.forEach(({ outcome }, i) => {
        const [k, h] = entries[i];
        if (outcome !== 'ok' && this.held.get(k) === h) this.stopJob(k, h, outcome);
      });
    }
  }

  stopJob(k, h, reason) {
    this.held.delete(k);
    clearTimeout(h.timer);
    if (reason === 'cancelled' || reason === 'timeout') this.logger.info(`job ${h.job.id}: ${reason}, stopping its handler`);
    else this.logger.warn(`job ${h.job.id}: lease lost (${reason}): another worker may own it`);
    h.abort.abort(reason);
    this.freed.ring();
  }

  // timeoutMs passed: stop the handler as a cancel does, and fail the job.
  async timeOut(k, h) {
    if (this.held.get(k) !== h) return;
    const err = new JobTimeout(`timed out after ${this.timeoutMs} ms`);
    const attempt = h.attempt ?? untraced;
    attempt.settle('failed', err);   // the span may end before the fail returns
    this.stopJob(k, h, 'timeout');
    try {
      await this.failJob(h.job, err, attempt);
    } catch (e) {
      this.logger.warn(`job ${h.job.id}: could not fail it after its timeout: ${e.message}`);
    }
  }

  async runJob(lane, job) {
    const k = key(job);
    const h = this.held.get(k);
    if (!h || this.stopping) return;   // lost or cancelled while it waited; released at shutdown
    h.started = true;
    // The attempt's span (if tracing): from its start to its settling.
    const attempt = attemptOf(job);
    h.attempt = attempt;
    try {
      await attempt.run(async () => {
        const [{ outcome }] = await this.db((c) => c.start([job], this.leaseMs));
        if (outcome !== 'ok') {
          this.refused(job, 'start', outcome, attempt);
          return;
        }
        this.logger.debug(`job ${job.id}: started (${job.queue}, attempt ${job.attempt})`);
        if (this.timeoutMs !== null && this.held.get(k) === h) {
          h.timer = setTimeout(() => { this.timeOut(k, h); }, this.timeoutMs);
        }
        await this.handle(lane, job, h.abort.signal, attempt);
      });
    } catch (err) {
      attempt.settle('unsettled', err);
      this.logger.error(`job ${job.id}: the worker failed to settle it: ${err.message}`);
    } finally {
      clearTimeout(h.timer);
      // Only this claim: a newer claim of the same job is not ours to drop.
      if (this.held.get(k) === h) this.held.delete(k);
      attempt.end();
    }
  }

  // A call about the job was refused (outcome: stale, cancelled, ...).
  refused(job, call, outcome, attempt = untraced, err = null) {
    attempt.settle(outcome, err);
    if (outcome === 'stale') this.logger.warn(`job ${job.id}: stale at ${call}, someone else owns it now`);
    else if (outcome === 'cancelled') this.logger.info(`job ${job.id}: cancelled at ${call}`);
    else this.logger.warn(`job ${job.id}: ${outcome} at ${call}`);
  }

  // onComplete(job, result, client) and complete() in one transaction.
  async completeInTransaction(job, result) {
    const client = await this.client.pool.connect();
    // A checked-out client whose connection ends between two queries (a
    // server restart while onComplete awaits something else) emits 'error':
    // unheard, that would end the process.  Such a client is not given back
    // to the pool, and the job comes back when its lease runs out.
    let lost = null;
    const onError = (err) => { lost = err; };
    client.on('error', onError);
    let ok = false;
    try {
      await client.query('BEGIN');
      await this.onComplete(job, result, client);
      const { rows } = await client.query(
        'SELECT outcome FROM claimq.complete($1::bigint[], $2::bigint[], $3::jsonb[], queue => $4)',
        [[id(job.id)], [id(job.token)], [result === undefined ? null : JSON.stringify(result)],
          job.queue ?? null]);
      const outcome = rows.length ? rows[0].outcome : 'missing';
      ok = outcome === 'ok';
      await client.query(ok ? 'COMMIT' : 'ROLLBACK');
      return outcome;
    } catch (err) {
      if (!lost && isConnectionError(err)) lost = err;
      if (!lost) await client.query('ROLLBACK').catch(() => {});
      throw lost && !isConnectionError(err) ? lost : err;
    } finally {
      client.off('error', onError);
      client.release(lost ?? undefined);
    }
  }

  // Fail the job for err; onFailure(job, err, { dead }) if that took effect.
  async failJob(job, err, attempt = untraced) {
    const message = err instanceof Fail ? err.message : `${err.name}: ${err.message}`;
    const [row] = await this.db((c) => c.fail([job], message.slice(0, 2000), {
      retryIn: err instanceof Fail ? err.retryIn : null,
      permanent: err instanceof Fail ? err.permanent : false,
    }));
    if (row.outcome !== 'ok') {
      this.refused(job, 'fail', row.outcome, attempt, err);
      return;
    }
    attempt.settle('failed', err);
    this.failed += 1;
    this.logger.warn(`job ${job.id} (${job.queue}, attempt ${job.attempt}): failed: ${message}`);
    if (this.onFailure) {
      try {
        await this.onFailure(job, err, { dead: row.state === 'dead' });
      } catch (e) {
        this.logger.error(`job ${job.id}: onFailure threw: ${e.message}`);
      }
    }
  }

  async handle(lane, job, signal, attempt) {
    let result;
    try {
      result = await lane.handler(job, { signal });
    } catch (err) {
      if (signal.aborted) {
        this.stopped(job, signal.reason, attempt);
        return;
      }
      if (err instanceof Snooze) {
        const [{ outcome }] = await this.db((c) => c.snooze([job], err.ms));
        if (outcome === 'ok') {
          attempt.settle('snoozed');
          this.logger.debug(`job ${job.id}: snoozed for ${(err.ms / 1000).toFixed(1)} s`);
        } else {
          this.refused(job, 'snooze', outcome, attempt);
        }
        return;
      }
      await this.failJob(job, err instanceof Error ? err : new Error(String(err)), attempt);
      return;
    }
    if (signal.aborted) {
      this.stopped(job, signal.reason, attempt);
      return;
    }
    let outcome;
    try {
      outcome = this.onComplete
        ? await this.completeInTransaction(job, result)
        : (await this.db((c) => c.complete([job], [result ?? null])))[0].outcome;
    } catch (err) {
      // A result JSON cannot hold, an error in onComplete: the job failed.
      // A lost connection (onComplete's transaction; the plain complete
      // retries): the handler did not fail and the job is not lost, its
      // lease decides.  A warning, as every lost connection is.
      if (isConnectionError(err)) {
        attempt.settle('connection_lost', err);
        this.logger.warn(`job ${job.id}: connection lost while completing it (${err.message}); its lease decides`);
        return;
      }
      await this.failJob(job, err, attempt);
      return;
    }
    if (outcome === 'ok') {
      attempt.settle('completed');
      this.completed += 1;
      this.logger.debug(`job ${job.id}: completed`);
    } else {
      this.refused(job, 'complete', outcome, attempt);
    }
  }

  stopped(job, reason, attempt = untraced) {
    attempt.stopped(reason);
    if (reason === 'cancelled') this.logger.info(`job ${job.id}: cancelled while running, handler stopped, not completed`);
    else if (reason === 'timeout' || reason === 'shutdown') this.logger.info(`job ${job.id}: handler stopped (${reason})`);
    else this.logger.warn(`job ${job.id}: lease lost while running (${reason}), dropped`);
  }
}

module.exports = { Client, Worker, Fail, Snooze, JobTimeout, isConnectionError };
