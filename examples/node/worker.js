#!/usr/bin/env node
// A claimq worker in Node.js with node-postgres (pg).
//
//   node worker.js --queue jobs [--batch 10] [--lease 30] [--results app.job_results]
//   (connection from DATABASE_URL or the PG* environment variables)
//
// The loop: claim a batch, then for each job in turn start it, run the
// handler while a heartbeat keeps the leases of the whole batch alive, and
// complete or fail it.  Every call is one statement (or one short
// transaction), so it works through pgbouncer in transaction mode.  On
// SIGTERM or SIGINT the job at hand is finished, the jobs of the batch that
// were never started are released, and the process exits 0.
//
// A job cancelled while we hold it answers "cancelled": the heartbeat hears
// it and aborts the handler, and the job is never completed.  A handler
// that cannot run its job yet throws new Snooze(ms): the job goes back to
// the queue for that long, and the attempt is not counted.
//
// Job ids and tokens are bigints.  pg returns int8 columns as strings, and
// they stay strings here, all the way back into the next call: a JavaScript
// number cannot hold every bigint (2^53 + 1 rounds to 2^53), and a rounded
// token would fence nothing but our own calls.  Never install an int8 type
// parser that turns them into numbers.
'use strict';

const os = require('os');
const { parseArgs } = require('util');
const { setTimeout: sleep } = require('timers/promises');
const pg = require('pg');

const { values: opt } = parseArgs({
  options: {
    queue: { type: 'string' },
    worker: { type: 'string', default: `js-${os.hostname()}-${process.pid}` },
    batch: { type: 'string', default: '10' },
    lease: { type: 'string', default: '30' },         // seconds
    heartbeat: { type: 'string' },                    // seconds, default lease/3, 0 = none
    idle: { type: 'string', default: '0.1' },         // first pause when the queue is empty
    results: { type: 'string' },                      // table (job_id bigint, worker text)
  },
});
if (!opt.queue) {
  console.error('usage: worker.js --queue NAME [--worker NAME] [--batch N] [--lease SECONDS] [--heartbeat SECONDS] [--results TABLE]');
  process.exit(2);
}
const lease = `${Number(opt.lease)} seconds`;
const heartbeatMs = 1000 * (opt.heartbeat === undefined ? Number(opt.lease) / 3 : Number(opt.heartbeat));
const resultsTable = opt.results
  ? opt.results.split('.').map((part) => pg.escapeIdentifier(part)).join('.')
  : null;

const log = (...args) => console.log(new Date().toISOString(), opt.worker, ...args);

// Two connections at most: the heartbeat must not wait for the handler.
const pool = new pg.Pool({ max: 2, application_name: opt.worker });
pool.on('error', (err) => log('idle connection error:', err.message));

class LeaseLost extends Error {}
class Snooze extends Error {
  constructor(ms) { super(`snooze ${ms} ms`); this.ms = ms; }
}

// The demo handler.  Replace it with real work.  payload {"ms": N} works
// N milliseconds, {"fail_first": N} fails the first N attempts,
// {"not_before": T} snoozes until the Unix time T (seconds).  The signal
// aborts when the lease is lost (someone else owns the job then) or the job
// was cancelled.
async function handle(job, signal) {
  const payload = job.payload || {};
  const attempt = job.attempts + 1;   // start() counts this attempt
  if (attempt <= Number(payload.fail_first || 0)) {
    throw new Error(`demo failure on attempt ${attempt}`);
  }
  const wait = 1000 * Number(payload.not_before || 0) - Date.now();
  if (wait > 0) throw new Snooze(wait);
  try {
    await sleep(Number(payload.ms || 0), undefined, { signal });
  } catch (err) {
    if (err.name === 'AbortError') throw new LeaseLost();
    throw err;
  }
  return { ok: true };
}

let stopping = false;
const stopped = new AbortController();   // cuts an idle pause short
const held = new Map();      // job_id (string) -> token (string): ours, claimed or running
let running = null;          // { jobId, abort: AbortController, why: outcome that ended it }

async function claim() {
  const { rows } = await pool.query(
    'SELECT job_id, token, payload, attempts' +
    '  FROM claimq.claim($1::text, $2::int, lease => $3::interval, worker => $4::text)',
    [opt.queue, Number(opt.batch), lease, opt.worker]);
  return rows;
}

// The outcome: ok, stale or cancelled.
async function start(job) {
  const { rows } = await pool.query(
    'SELECT outcome FROM claimq.start(ARRAY[$1::bigint], ARRAY[$2::bigint], $3::interval)',
    [job.job_id, job.token, lease]);
  return rows[0].outcome;
}

// One statement extends every job we hold: the running one and those
// waiting their turn.  Stale ones leave the batch; the running one is
// aborted.
async function extendHeld() {
  const ids = [...held.keys()];
  if (ids.length === 0) return;
  const { rows } = await pool.query(
    'SELECT job_id, outcome FROM claimq.extend($1::bigint[], $2::bigint[], $3::interval)',
    [ids, ids.map((id) => held.get(id)), lease]);
  for (const { job_id: jobId, outcome } of rows) {
    if (outcome !== 'ok' && held.has(jobId)) {
      log(outcome === 'cancelled'
        ? `job ${jobId}: cancelled, stopping its handler`
        : `job ${jobId}: lease lost (${outcome}), someone else owns it now`);
      held.delete(jobId);
      if (running && running.jobId === jobId) {
        running.why = outcome;
        running.abort.abort();
      }
    }
  }
}

async function complete(job) {
  if (!resultsTable) {
    const { rows } = await pool.query(
      'SELECT claimq.complete($1::bigint, $2::bigint) AS ok', [job.job_id, job.token]);
    return rows[0].ok;
  }
  // One statement, so one transaction: the result row is written if and
  // only if complete() returned true.  A handler that writes its own tables
  // does the same in a transaction on one client of the pool: BEGIN, its
  // writes, complete(), then COMMIT if that returned true, else ROLLBACK.
  const { rowCount } = await pool.query(
    `INSERT INTO ${resultsTable} (job_id, worker)` +
    ' SELECT $1::bigint, $2::text WHERE claimq.complete($1::bigint, $3::bigint)',
    [job.job_id, opt.worker, job.token]);
  return rowCount === 1;
}

async function fail(job, error) {
  const { rows } = await pool.query(
    'SELECT claimq.fail($1::bigint, $2::bigint, $3::text) AS ok',
    [job.job_id, job.token, String(error).slice(0, 1000)]);
  return rows[0].ok;
}

async function snooze(job, ms) {
  const { rows } = await pool.query(
    'SELECT claimq.snooze($1::bigint, $2::bigint, make_interval(secs => $3::float8)) AS ok',
    [job.job_id, job.token, ms / 1000]);
  return rows[0].ok;
}

async function releaseRest() {
  const ids = [...held.keys()];
  const tokens = ids.map((id) => held.get(id));
  held.clear();
  if (ids.length === 0) return 0;
  const { rows } = await pool.query(
    'SELECT outcome FROM claimq.release($1::bigint[], $2::bigint[])', [ids, tokens]);
  return rows.filter((r) => r.outcome === 'ok').length;
}

async function runJob(job) {
  const outcome = await start(job);
  if (outcome !== 'ok') {
    log(outcome === 'cancelled'
      ? `job ${job.job_id}: cancelled before it started, skipped`
      : `job ${job.job_id}: stale at start, someone else owns it now`);
    held.delete(job.job_id);
    return;
  }
  running = { jobId: job.job_id, abort: new AbortController(), why: null };
  try {
    await handle(job, running.abort.signal);
  } catch (err) {
    if (err instanceof LeaseLost) {
      log(running.why === 'cancelled'
        ? `job ${job.job_id}: cancelled while running, handler stopped, not completed`
        : `job ${job.job_id}: lease lost while running, dropped`);
    } else if (err instanceof Snooze) {
      log(await snooze(job, err.ms)
        ? `job ${job.job_id}: snoozed for ${(err.ms / 1000).toFixed(1)} s`
        : `job ${job.job_id}: stale or cancelled at snooze`);
    } else if (await fail(job, `${err.name}: ${err.message}`)) {
      log(`job ${job.job_id}: failed: ${err.message}`);
    } else {
      log(`job ${job.job_id}: stale at fail, someone else owns it now`);
    }
    return;
  } finally {
    running = null;
    held.delete(job.job_id);
  }
  if (!(await complete(job))) {
    log(`job ${job.job_id}: stale at complete, someone else owns it now`);
  }
}

async function main() {
  const stop = (signal) => {
    log(`got ${signal}: finishing the job at hand, then releasing the rest`);
    stopping = true;
    stopped.abort();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);

  const firstIdle = 1000 * Number(opt.idle);
  let idle = firstIdle;
  while (!stopping) {
    const batch = await claim();
    if (batch.length === 0) {
      await sleep(idle, undefined, { signal: stopped.signal }).catch(() => {});
      idle = Math.min(idle * 2, 2000);
      continue;
    }
    idle = firstIdle;
    log(`claimed ${batch.length} jobs`);
    for (const job of batch) held.set(job.job_id, job.token);
    let beating = Promise.resolve();
    const timer = heartbeatMs > 0
      ? setInterval(() => {
        beating = beating.then(extendHeld).catch((err) => log('heartbeat failed:', err.message));
      }, heartbeatMs)
      : null;
    try {
      for (const job of batch) {
        if (stopping) break;
        if (held.has(job.job_id)) await runJob(job);
      }
    } finally {
      if (timer) clearInterval(timer);
      await beating;
    }
    const released = await releaseRest();
    if (released > 0) log(`released ${released} jobs it never started`);
  }
  await pool.end();
  log('stopped');
}

main().catch((err) => {
  log('fatal:', err.stack || err.message);
  process.exit(1);
});
