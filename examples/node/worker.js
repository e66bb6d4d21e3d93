#!/usr/bin/env node
// A claimq worker in Node.js: the claimq package (clients/node) and a handler.
//
//   node worker.js --queue jobs [--batch 10] [--lease 30] [--results app.job_results]
//   (connection from DATABASE_URL or the PG* environment variables)
//
// The package claims, starts, heartbeats, completes or fails the jobs, and
// on SIGTERM or SIGINT finishes the job at hand, releases the ones it never
// started and returns (this script then exits 0).  All that is written here
// is the handler and the command line.  With --results TABLE, the row
// (job_id, worker) is written in the same transaction as the completion: it
// exists if and only if the completion took effect.
//
// Job ids and tokens are strings of digits, exact at any size; never install
// an int8 type parser that turns them into numbers.
'use strict';

const os = require('os');
const { parseArgs } = require('util');
const { setTimeout: sleep } = require('timers/promises');
const pg = require('pg');
const { Worker, Snooze } = require('claimq');

const { values: opt } = parseArgs({
  options: {
    queue: { type: 'string' },
    worker: { type: 'string', default: `js-${os.hostname()}-${process.pid}` },
    batch: { type: 'string', default: '10' },
    concurrency: { type: 'string', default: '1' },
    lease: { type: 'string', default: '30' },         // seconds
    heartbeat: { type: 'string' },                    // seconds, default lease/3, 0 = none
    results: { type: 'string' },                      // table (job_id bigint, worker text)
  },
});
if (!opt.queue) {
  console.error('usage: worker.js --queue NAME [--worker NAME] [--batch N] [--concurrency N] [--lease SECONDS] [--heartbeat SECONDS] [--results TABLE]');
  process.exit(2);
}
const log = (line) => console.log(new Date().toISOString(), opt.worker, line);

// The demo handler.  Replace it with real work.  payload {"ms": N} works
// N milliseconds (stopping at once if the job is cancelled or its lease
// lost), {"fail_first": N} fails the first N attempts, {"not_before": T}
// snoozes until the Unix time T (seconds).
async function handle(job, { signal }) {
  const payload = job.payload || {};
  const attempt = job.attempts + 1;   // start() counts this attempt
  if (attempt <= Number(payload.fail_first || 0)) {
    throw new Error(`demo failure on attempt ${attempt}`);
  }
  const wait = 1000 * Number(payload.not_before || 0) - Date.now();
  if (wait > 0) throw new Snooze(wait);
  await sleep(Number(payload.ms || 0), undefined, { signal });
  return { ok: true };
}

const resultsTable = opt.results
  ? opt.results.split('.').map((part) => pg.escapeIdentifier(part)).join('.')
  : null;

const worker = new Worker({
  queue: opt.queue,
  name: opt.worker,
  batch: Number(opt.batch),
  concurrency: Number(opt.concurrency),
  leaseMs: 1000 * Number(opt.lease),
  heartbeatMs: 1000 * (opt.heartbeat === undefined ? Number(opt.lease) / 3 : Number(opt.heartbeat)),
  log,
  onComplete: resultsTable && (async (job, result, client) => {
    await client.query(`INSERT INTO ${resultsTable} (job_id, worker) VALUES ($1, $2)`,
      [job.id, opt.worker]);
  }),
}, handle);

worker.run().then(() => log('stopped'), (err) => {
  log(`fatal: ${err.stack || err.message}`);
  process.exit(1);
});
