// A worker of the faulted run (run.py): the package's Worker, whose handler
// writes one line per run to the record file before its work (job id,
// token, attempt, pid, and in wall-clock milliseconds the moment it began
// and its claim's expiry) and whose onComplete writes
// (job id, token, pid) into faulted_done in the completion's own
// transaction, so that a row there is a complete that took effect.
//
//   node worker.js USER QUEUE CONCURRENCY LEASE_SECONDS HANDLER_MS RECORD
//
// The package is CLAIMQ_TEST_PACKAGE (as installed), or claimq.
'use strict';

const fs = require('node:fs');
const { setTimeout: sleep } = require('node:timers/promises');
const { Worker } = require(process.env.CLAIMQ_TEST_PACKAGE || 'claimq');

const [user, queue, concurrency, lease, ms, record] = process.argv.slice(2);
// An error that would end the process outside run() (an 'error' event no
// one listens to, a rejection no one awaits): its one line first, where
// the run's report (the log's tail) shows it, then its stack.
process.on('uncaughtExceptionMonitor', (err, origin) => {
  console.error(`uncaught (${origin}): ${err && err.code ? `${err.code} ` : ''}${err && err.message}`);
  console.error(err && err.stack);
});
const fd = fs.openSync(record, 'a');
const { pid } = process;

const worker = new Worker({
  queue, concurrency: Number(concurrency), leaseMs: Number(lease) * 1000,
  name: `faulted-${pid}`, pool: { user },
  onComplete: async (job, result, client) => {
    await client.query('INSERT INTO faulted_done (job_id, token, pid) VALUES ($1, $2, $3)',
      [job.id, job.token, pid]);
  },
}, async (job) => {
  // One write(2) per line, before the work: the line survives a kill -9.
  fs.writeSync(fd, `${job.id} ${job.token} ${job.attempt} ${pid} ${Date.now()} ${job.expiresAt.getTime()}\n`);
  await sleep(Number(ms));
  return { token: String(job.token), pid };
});
worker.run().then(() => console.log('exited cleanly'), (err) => {
  console.error(err);
  // Last, where the run's report (the log's tail) shows it.
  console.error(`run() failed: ${err && err.code ? `${err.code} ` : ''}${err && err.message}`);
  process.exit(1);
});
