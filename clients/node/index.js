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
'use strict';

const os = require('os');
const { setTimeout: sleep } = require('timers/promises');
const pg = require('pg');

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

// A lost connection or a server going away, not a refusal: worth a retry.
function isConnectionError(err) {
  const code = err && err.code;
  return !code || /^(08|57P0)/.test(code) || /^E[A-Z]+$/.test(code);
}

const id = (v) => (typeof v === 'bigint' ? v.toString() : String(v));
const secs = (ms) => (ms === null || ms === undefined ? null : `${Number(ms) / 1000} seconds`);
const pairs = (jobs) => [jobs.map((j) => id(j.id)), jobs.map((j) => id(j.token))];

function toJob(r) {
  return {
    id: r.job_id, token: r.token, payload: r.payload, attempts: r.attempts,
    priority: r.priority, enqueuedAt: r.enqueued_at, expiresAt: r.expires_at,
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
  async enqueue(queue, payload, o = {}) {
    const rows = await this.query(
      'SELECT claimq.enqueue($1, $2::jsonb, run_at => $3, priority => $4, dedup_key => $5,' +
      ' max_attempts => $6, on_duplicate => $7, group_key => $8) AS id',
      [queue, JSON.stringify(payload), o.runAt ?? null, o.priority ?? 0, o.dedupKey ?? null,
        o.maxAttempts ?? null, o.onDuplicate ?? 'keep', o.groupKey ?? null]);
    return rows[0].id;
  }

  async enqueueMany(queue, payloads, o = {}) {
    const rows = await this.query(
      'SELECT * FROM claimq.enqueue_many($1, $2::jsonb[], run_at => $3, priority => $4,' +
      ' dedup_keys => $5::text[], max_attempts => $6, on_duplicate => $7, group_keys => $8::text[])',
      [queue, payloads.map((p) => JSON.stringify(p)), o.runAt ?? null, o.priority ?? 0,
        o.dedupKeys ?? null, o.maxAttempts ?? null, o.onDuplicate ?? 'keep', o.groupKeys ?? null]);
    return rows.map((r) => r.enqueue_many);
  }

  async cancel(jobIds) {
    return this.query('SELECT * FROM claimq.cancel($1::bigint[])', [jobIds.map(id)]);
  }

  async status(jobIds) {
    return this.query('SELECT * FROM claimq.status($1::bigint[])', [jobIds.map(id)]);
  }

  async waitFor(jobIds, timeoutMs) {
    return this.query('SELECT * FROM claimq.wait_for($1::bigint[], $2::interval)',
      [jobIds.map(id), secs(timeoutMs)]);
  }

  // -- working (jobs are { id, token } objects, as claim returns them)
  async claim(queue, maxJobs = 1, o = {}) {
    const rows = await this.query(
      'SELECT * FROM claimq.claim($1, $2, lease => $3::interval, worker => $4, start => $5,' +
      ' wait => $6::interval)',
      [queue, maxJobs, secs(o.leaseMs), o.worker ?? null, o.start ?? false,
        secs(o.waitMs ?? 0)]);
    return rows.map(toJob);
  }

  async start(jobs, leaseMs = null) {
    return this.query('SELECT * FROM claimq.start($1::bigint[], $2::bigint[], $3::interval)',
      [...pairs(jobs), secs(leaseMs)]);
  }

  async extend(jobs, leaseMs = null) {
    return this.query('SELECT * FROM claimq.extend($1::bigint[], $2::bigint[], $3::interval)',
      [...pairs(jobs), secs(leaseMs)]);
  }

  async complete(jobs, results = null) {
    return this.query('SELECT * FROM claimq.complete($1::bigint[], $2::bigint[], $3::jsonb[])',
      [...pairs(jobs), results && results.map((r) => (r === undefined ? null : JSON.stringify(r)))]);
  }

  async fail(jobs, error = null, o = {}) {
    return this.query(
      'SELECT * FROM claimq.fail($1::bigint[], $2::bigint[], $3, $4::interval, $5)',
      [...pairs(jobs), error, secs(o.retryIn), o.permanent ?? false]);
  }

  async release(jobs) {
    return this.query('SELECT * FROM claimq.release($1::bigint[], $2::bigint[])', pairs(jobs));
  }

  async snooze(jobs, delayMs) {
    return this.query('SELECT * FROM claimq.snooze($1::bigint[], $2::bigint[], $3::interval)',
      [...pairs(jobs), secs(delayMs)]);
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
class Worker {
  constructor(options, handler) {
    if (typeof handler !== 'function') throw new TypeError('a handler function is needed');
    this.queue = options.queue;
    this.handler = handler;
    this.concurrency = options.concurrency ?? 4;
    this.batch = options.batch ?? this.concurrency;
    // Jobs held at most: a batch larger than the handlers waits its turn.
    this.prefetch = Math.max(this.batch, this.concurrency);
    this.onComplete = options.onComplete ?? null;
    this.leaseMs = options.leaseMs ?? 30000;
    this.heartbeatMs = options.heartbeatMs ?? this.leaseMs / 3;
    this.name = options.name ?? `js-${os.hostname()}-${process.pid}`;
    this.idleMs = options.idleMs ?? 100;
    this.maxIdleMs = options.maxIdleMs ?? 2000;
    this.maxBackoffMs = options.maxBackoffMs ?? 5000;
    this.log = options.log ?? (() => {});
    this.client = options.client ?? new Client({
      ...(options.pool ?? {}), max: (options.pool && options.pool.max) || 2,
      application_name: this.name,
    });
    this.client.pool.on('error', (err) => this.log(`idle connection error: ${err.message}`));
    this.held = new Map();       // id -> { job, abort, started }
    this.stopping = false;
    this.wake = new AbortController();
    this.completed = 0;
    this.failed = 0;
  }

  stop() {
    this.stopping = true;
    this.wake.abort();
  }

  // fn(client), again after a lost connection, with backoff.
  async db(fn, { retry = true } = {}) {
    let delay = 100;
    for (;;) {
      try {
        return await fn(this.client);
      } catch (err) {
        if (!retry || !isConnectionError(err)) throw err;
        this.log(`connection lost (${err.message}); retrying in ${delay} ms`);
        await sleep(delay);
        delay = Math.min(delay * 2, this.maxBackoffMs);
      }
    }
  }

  async run() {
    const stop = () => this.stop();
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    const running = new Set();
    const waiting = [];          // claimed, not yet started
    const pump = () => {
      while (running.size < this.concurrency && waiting.length > 0 && !this.stopping) {
        const job = waiting.shift();
        const p = this.runJob(job).finally(() => { running.delete(p); pump(); });
        running.add(p);
      }
    };
    const beat = this.heartbeatMs > 0 ? this.beat() : Promise.resolve();
    let idle = this.idleMs;
    try {
      while (!this.stopping) {
        const room = this.prefetch - this.held.size;
        if (this.held.size >= this.concurrency || room <= 0) {
          await Promise.race([...running, sleep(200)]);
          continue;
        }
        let jobs = [];
        try {
          jobs = await this.client.claim(this.queue, room,
            { leaseMs: this.leaseMs, worker: this.name });
        } catch (err) {
          this.log(`claim failed: ${err.message}`);
        }
        if (jobs.length === 0) {
          await sleep(idle, undefined, { signal: this.wake.signal }).catch(() => {});
          idle = Math.min(idle * 2, this.maxIdleMs);
          continue;
        }
        idle = this.idleMs;
        this.log(`claimed ${jobs.length} jobs`);
        for (const job of jobs) {
          this.held.set(job.id, { job, abort: new AbortController(), started: false });
          waiting.push(job);
        }
        pump();
      }
    } finally {
      await Promise.allSettled([...running]);
      const rest = waiting.splice(0).filter((j) => this.held.has(j.id));
      if (rest.length > 0) {
        try {
          const rows = await this.db((c) => c.release(rest));
          this.log(`released ${rows.filter((r) => r.outcome === 'ok').length} jobs it never started`);
        } catch (err) {
          this.log(`could not release ${rest.length} jobs: ${err.message}`);
        }
        for (const j of rest) this.held.delete(j.id);
      }
      this.stopping = true;
      this.wake.abort();
      await beat;
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      await this.client.end();
    }
  }

  async beat() {
    while (!this.stopping) {
      await sleep(this.heartbeatMs, undefined, { signal: this.wake.signal }).catch(() => {});
      if (this.stopping) return;
      const jobs = [...this.held.values()].map((h) => h.job);
      if (jobs.length === 0) continue;
      let rows;
      try {
        rows = await this.db((c) => c.extend(jobs, this.leaseMs), { retry: false });
      } catch (err) {
        this.log(`heartbeat failed: ${err.message}`);
        continue;
      }
      for (const { job_id: jobId, outcome } of rows) {
        const h = this.held.get(jobId);
        if (outcome !== 'ok' && h) {
          this.held.delete(jobId);
          this.log(`job ${jobId}: ${outcome}, stopping its handler`);
          h.abort.abort(outcome);
        }
      }
    }
  }

  async runJob(job) {
    const h = this.held.get(job.id);
    if (!h) return;              // lost or cancelled while it waited its turn
    try {
      h.started = true;
      const [{ outcome }] = await this.db((c) => c.start([job], this.leaseMs));
      if (outcome !== 'ok') {
        this.log(`job ${job.id}: ${outcome} at start, skipped`);
        return;
      }
      await this.handle(job, h.abort.signal);
    } catch (err) {
      this.log(`job ${job.id}: the worker failed to settle it: ${err.message}`);
    } finally {
      this.held.delete(job.id);
    }
  }

  refused(job, call, outcome) {
    this.log(outcome === 'stale'
      ? `job ${job.id}: stale at ${call}, someone else owns it now`
      : `job ${job.id}: ${outcome} at ${call}`);
  }

  // onComplete(job, result, client) and complete() in one transaction.
  async completeInTransaction(job, result) {
    const client = await this.client.pool.connect();
    let ok = false;
    try {
      await client.query('BEGIN');
      await this.onComplete(job, result, client);
      const { rows } = await client.query(
        'SELECT outcome FROM claimq.complete($1::bigint[], $2::bigint[], $3::jsonb[])',
        [[id(job.id)], [id(job.token)], [result === undefined ? null : JSON.stringify(result)]]);
      const outcome = rows.length ? rows[0].outcome : 'missing';
      ok = outcome === 'ok';
      await client.query(ok ? 'COMMIT' : 'ROLLBACK');
      return outcome;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }

  async handle(job, signal) {
    let result;
    try {
      result = await this.handler(job, { signal });
    } catch (err) {
      if (signal.aborted) {
        this.stopped(job, signal.reason);
        return;
      }
      if (err instanceof Snooze) {
        const [{ outcome }] = await this.db((c) => c.snooze([job], err.ms));
        if (outcome === 'ok') this.log(`job ${job.id}: snoozed for ${(err.ms / 1000).toFixed(1)} s`);
        else this.refused(job, 'snooze', outcome);
        return;
      }
      const message = err instanceof Fail ? err.message : `${err.name}: ${err.message}`;
      const [{ outcome }] = await this.db((c) => c.fail([job], message.slice(0, 2000), {
        retryIn: err instanceof Fail ? err.retryIn : null,
        permanent: err instanceof Fail ? err.permanent : false,
      }));
      if (outcome === 'ok') {
        this.failed += 1;
        this.log(`job ${job.id}: failed: ${message}`);
      } else {
        this.refused(job, 'fail', outcome);
      }
      return;
    }
    if (signal.aborted) {
      this.stopped(job, signal.reason);
      return;
    }
    const outcome = this.onComplete
      ? await this.completeInTransaction(job, result)
      : (await this.db((c) => c.complete([job], [result ?? null])))[0].outcome;
    if (outcome === 'ok') this.completed += 1;
    else this.refused(job, 'complete', outcome);
  }

  stopped(job, reason) {
    this.log(reason === 'cancelled'
      ? `job ${job.id}: cancelled while running, handler stopped, not completed`
      : `job ${job.id}: lease lost while running (${reason}), dropped`);
  }
}

module.exports = { Client, Worker, Fail, Snooze };
