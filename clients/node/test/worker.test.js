// Tests of the npm package against a real server, through pgbouncer in
// transaction mode (run by clients/test, which sets PGHOST, PGPORT,
// PGDATABASE for the pooler, CLAIMQ_TEST_WORKER_ROLE, CLAIMQ_TEST_SOCKET_DIR
// for the superuser and CLAIMQ_TEST_RESTART).  The tracing tests at the end
// need the OpenTelemetry packages of package.json's devDependencies beside
// the package under test, as an application installs them (clients/test
// does).
'use strict';

const test = require('node:test');
const assert = require('node:assert');
const { spawn, execSync, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { createRequire } = require('node:module');
const { setTimeout: sleep } = require('node:timers/promises');
// The package under test: as installed (clients/test), or this directory.
const PACKAGE = process.env.CLAIMQ_TEST_PACKAGE || path.join(__dirname, '..');
const { Client, Worker, Fail, Snooze } = require(PACKAGE);

const WORKER_ROLE = process.env.CLAIMQ_TEST_WORKER_ROLE || 'cq_worker';
const adminOptions = {
  host: process.env.CLAIMQ_TEST_SOCKET_DIR, port: 5432, user: 'postgres',
  database: process.env.PGDATABASE, max: 2,
};

const admin = () => new Client(adminOptions);
const worker = () => new Client({ user: WORKER_ROLE, max: 2 });

async function newQueue(name, options = {}) {
  const a = admin();
  try {
    const rows = await a.query('SELECT 1 FROM claimq.queue WHERE name = $1', [name]);
    if (rows.length) await a.dropQueue(name, true);
    await a.createQueue(name, options);
  } finally { await a.end(); }
}

async function states(queue) {
  const a = admin();
  try {
    const rows = await a.query(
      'SELECT j.state, count(*)::int AS n FROM claimq.job j JOIN claimq.queue q USING (queue_id)' +
      ' WHERE q.name = $1 GROUP BY 1 ORDER BY 1', [queue]);
    return Object.fromEntries(rows.map((r) => [r.state, r.n]));
  } finally { await a.end(); }
}

async function waitUntil(what, ms = 60000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await what()) return true;
    await sleep(100);
  }
  return false;
}

// A worker in a child process: node -e CHILD QUEUE MS [OPTIONS-JSON].  Its
// handler waits MS milliseconds without looking at its signal, as a handler
// that calls a slow service might.  With onCompleteMs in the options it has
// an onComplete that says "in onComplete" on stdout, runs a statement in
// the completion's transaction and then waits that long.  With logLevels,
// its logger writes each warn and error line to stdout after its level.
const CHILD = `
  const { Worker } = require(${JSON.stringify(PACKAGE)});
  const [queue, ms, options] = process.argv.slice(1);
  const { onCompleteMs, logLevels, ...rest } = JSON.parse(options || '{}');
  const wait = (t) => new Promise((r) => setTimeout(r, Number(t)));
  const onComplete = onCompleteMs === undefined ? null : async (job, result, client) => {
    await client.query('SELECT 1');
    console.log('in onComplete');
    await wait(onCompleteMs);
  };
  const logger = logLevels ? { debug() {}, info() {},
    warn(line) { console.log('warn ' + line); }, error(line) { console.log('error ' + line); } } : undefined;
  const w = new Worker({ queue, concurrency: 8, leaseMs: 3000, onComplete, logger, ...rest,
    pool: { user: ${JSON.stringify(WORKER_ROLE)} } },
    async (job) => { await wait(ms); return job.payload; });
  w.run().then(() => console.log('exited cleanly'));
`;
const child = (queue, ms, options = {}, stdio = 'ignore') => spawn(process.execPath,
  ['-e', CHILD, queue, String(ms), JSON.stringify(options)], { stdio });

// [jobs run more than once, the most runs of one job] in a queue.
async function reruns(queue) {
  const a = admin();
  try {
    const [r] = await a.query(
      'SELECT (count(*) FILTER (WHERE attempts > 1))::int AS many, coalesce(max(attempts), 0) AS most' +
      ' FROM claimq.job JOIN claimq.queue q USING (queue_id) WHERE q.name = $1', [queue]);
    return [r.many, r.most];
  } finally { await a.end(); }
}

async function jobRow(jobId) {
  const a = admin();
  try {
    const rows = await a.query('SELECT state, attempts FROM claimq.job WHERE job_id = $1', [jobId]);
    return rows.length ? `${rows[0].state} ${rows[0].attempts}` : null;
  } finally { await a.end(); }
}

test('ids and tokens above 2^53 make the round trip exactly; outcomes', async () => {
  await newQueue('js_client', { keep_done: '1 hour' });
  const a = admin();
  const w = worker();
  try {
    const jobId = await a.enqueue('js_client', { x: 1 });
    assert.ok(BigInt(jobId) > 2n ** 53n, `id ${jobId} is above 2^53`);
    const [job] = await w.claim('js_client', 5, { leaseMs: 30000 });
    assert.strictEqual(job.id, jobId);
    assert.strictEqual(typeof job.token, 'string');
    assert.strictEqual((await w.start([job]))[0].outcome, 'ok');
    // The job's queue goes with the call, and the server checks it.
    await newQueue('js_client_elsewhere');
    await assert.rejects(w.extend([{ ...job, queue: 'js_client_elsewhere' }]),
      (e) => e.code === '22023');
    assert.strictEqual((await w.status([job.id], 'js_client'))[0].state, 'running');
    const wrong = { id: BigInt(job.id), token: BigInt(job.token) + 1n };
    assert.strictEqual((await w.complete([wrong]))[0].outcome, 'stale');
    assert.strictEqual((await w.complete([job], [{ r: 2 }]))[0].outcome, 'ok');
    assert.deepStrictEqual((await a.query('SELECT result FROM claimq.job WHERE job_id = $1',
      [jobId]))[0].result, { r: 2 });
  } finally { await a.end(); await w.end(); }
});

test('a fair queue shares a claim by weight; setGroupWeight', async () => {
  await newQueue('js_fair', { fair: true });
  const a = admin();
  const w = worker();
  try {
    await a.setGroupWeight('js_fair', 'heavy', 3);
    await a.enqueueMany('js_fair', Array(20).fill({}), { groupKeys: Array(20).fill('light') });
    await a.enqueueMany('js_fair', Array(20).fill({}), { groupKeys: Array(20).fill('heavy') });
    const jobs = await w.claim('js_fair', 8, { leaseMs: 30000 });
    const keys = await a.query(
      'SELECT group_key, count(*)::int AS n FROM claimq.job WHERE job_id = ANY($1::bigint[])' +
      ' GROUP BY 1 ORDER BY 1', [jobs.map((j) => j.id)]);
    assert.deepStrictEqual(keys, [{ group_key: 'heavy', n: 6 }, { group_key: 'light', n: 2 }]);
    const weights = await a.query(
      "SELECT group_key, weight FROM claimq.group_stats WHERE queue = 'js_fair' ORDER BY 1");
    assert.deepStrictEqual(weights, [{ group_key: 'heavy', weight: 3 }, { group_key: 'light', weight: 1 }]);
    await a.setGroupWeight('js_fair', 'heavy', null);
    assert.strictEqual((await a.query(
      "SELECT weight FROM claimq.group_stats WHERE queue = 'js_fair' AND group_key = 'heavy'"))[0].weight, 1);
  } finally { await a.end(); await w.end(); }
});

test('a job after another waits until it is done; dependencies()', async () => {
  await newQueue('js_after', { keep_done: '1 hour' });
  const a = admin();
  const w = worker();
  try {
    const first = await a.enqueue('js_after', { n: 1 });
    const second = await a.enqueue('js_after', { n: 2 }, { after: [BigInt(first)] });
    assert.deepStrictEqual((await w.status([first, second])).map((r) => r.state), ['pending', 'waiting']);
    assert.deepStrictEqual(await w.dependencies([second, first]), [
      { job_id: second, after_id: first, state: 'pending', result: null, last_error: null }],
    'one row, for the job that has an after list');
    // The waiting job is not claimable: only the first comes.
    const jobs = await w.claim('js_after', 10, { leaseMs: 30000 });
    assert.deepStrictEqual(jobs.map((j) => j.id), [first]);
    assert.strictEqual((await w.complete(jobs, [{ r: 1 }]))[0].outcome, 'ok');
    assert.strictEqual((await w.status([second]))[0].state, 'pending');
    assert.deepStrictEqual(await w.dependencies([second]), [
      { job_id: second, after_id: first, state: 'done', result: { r: 1 }, last_error: null }]);
    assert.deepStrictEqual((await w.claim('js_after', 10, { leaseMs: 30000 })).map((j) => j.id), [second]);
    assert.deepStrictEqual(await w.dependencies([first]), [], 'no rows for a job without after');
  } finally { await a.end(); await w.end(); }
});

test('afterFailed: the jobs after a dead one are cancelled, or run', async () => {
  await newQueue('js_after_failed', { keep_done: '1 hour' });
  const a = admin();
  const w = worker();
  try {
    const doomed = await a.enqueue('js_after_failed', { doomed: true });
    const cancelled = await a.enqueueMany('js_after_failed', [{ n: 1 }, { n: 2 }], { after: [doomed] });
    const report = await a.enqueue('js_after_failed', { report: true },
      { after: [doomed, doomed], afterFailed: 'run' });
    const runMany = await a.enqueueMany('js_after_failed', [{ n: 3 }], { after: [doomed], afterFailed: 'run' });
    const all = [...cancelled, report, ...runMany];
    assert.deepStrictEqual((await w.status(all)).map((r) => r.state), ['waiting', 'waiting', 'waiting', 'waiting']);
    const [job, ...more] = await w.claim('js_after_failed', 10, { leaseMs: 30000 });
    assert.strictEqual(job.id, doomed);
    assert.strictEqual(more.length, 0);
    assert.strictEqual((await w.fail([job], 'boom', { permanent: true }))[0].state, 'dead');
    assert.deepStrictEqual((await w.status(all)).map((r) => r.state),
      ['cancelled', 'cancelled', 'pending', 'pending']);
    const dead = { after_id: doomed, state: 'dead', result: null, last_error: 'boom' };
    assert.deepStrictEqual(await w.dependencies([report, cancelled[0]]),
      [{ job_id: report, ...dead }, { job_id: cancelled[0], ...dead }], 'a repeated id counts once');
    // afterFailed is passed, and checked, without after too.
    await assert.rejects(a.enqueue('js_after_failed', {}, { afterFailed: 'sometimes' }), { code: '22023' });
    await assert.rejects(a.enqueueMany('js_after_failed', [{}], { after: [BigInt(doomed) + 1000000000n] }),
      { code: '23503' });
  } finally { await a.end(); await w.end(); }
});

test('a worker with concurrency 8 drains the queue; results are kept', async () => {
  await newQueue('js_drain', { keep_done: '1 hour' });
  const a = admin();
  await a.enqueueMany('js_drain', Array.from({ length: 600 }, (_, n) => ({ n })));
  await a.end();
  const w = new Worker({ queue: 'js_drain', concurrency: 8, pool: { user: WORKER_ROLE } },
    async (job) => ({ twice: job.payload.n * 2 }));
  const run = w.run();
  assert.ok(await waitUntil(async () => (await states('js_drain')).done === 600, 60000));
  w.stop();
  await run;
  const b = admin();
  const [{ n }] = await b.query("SELECT count(*)::int AS n FROM claimq.job WHERE result->>'twice' = ((payload->>'n')::int * 2)::text");
  await b.end();
  assert.strictEqual(n, 600);
});

test('cancel reaches the running handler; the job is never completed', async () => {
  await newQueue('js_cancel', { lease: '10 seconds' });
  const a = admin();
  const jobId = await a.enqueue('js_cancel', {});
  let reason = null;
  const w = new Worker({ queue: 'js_cancel', concurrency: 2, leaseMs: 10000, heartbeatMs: 300,
    pool: { user: WORKER_ROLE } }, async (job, { signal }) => {
    await new Promise((resolve) => signal.addEventListener('abort', resolve));
    reason = signal.reason;
    throw new Error('stopped');
  });
  const run = w.run();
  assert.ok(await waitUntil(async () => (await states('js_cancel')).running === 1, 10000));
  assert.strictEqual((await a.cancel([jobId]))[0].outcome, 'ok');
  assert.ok(await waitUntil(async () => reason !== null, 10000), 'the handler was told');
  assert.strictEqual(reason, 'cancelled');
  w.stop();
  await run;
  await a.end();
  assert.deepStrictEqual(await states('js_cancel'), { cancelled: 1 });
});

test('a lease lost to a stall: the handler is told, its complete refused', async () => {
  // One attempt: the reclaimer makes the job dead, so nothing runs it again.
  await newQueue('js_stall', { lease: '1 second', run_lease: '1 second', max_attempts: 1 });
  let told = null;
  let held = null;
  const w = new Worker({ queue: 'js_stall', concurrency: 1, leaseMs: 1000, heartbeatMs: 3000, 
    pool: { user: WORKER_ROLE } }, async (job, { signal }) => {
    held = job;
    await new Promise((resolve) => signal.addEventListener('abort', resolve));
    told = signal.reason;
    return 'late';
  });
  const a = admin();
  await a.enqueue('js_stall', {});
  await a.end();
  const run = w.run();
  assert.ok(await waitUntil(async () => told !== null, 20000), 'the handler was told');
  assert.strictEqual(told, 'stale');
  w.stop();
  await run;
  const c = worker();
  assert.strictEqual((await c.complete([held]))[0].outcome, 'stale', 'its complete is refused');
  await c.end();
  assert.deepStrictEqual(await states('js_stall'), { dead: 1 });
});

test('Fail and Snooze', async () => {
  await newQueue('js_fs', { keep_done: '1 hour' });
  const a = admin();
  const [dead, snoozed, retried] = await a.enqueueMany('js_fs', [{ k: 'dead' }, { k: 'snooze' }, { k: 'retry' }]);
  let snoozes = 0;
  const w = new Worker({ queue: 'js_fs', concurrency: 3, pool: { user: WORKER_ROLE } }, async (job) => {
    const { k } = job.payload;
    if (k === 'dead') throw new Fail('no use', { permanent: true });
    if (k === 'snooze' && snoozes++ === 0) throw new Snooze(200);
    if (k === 'retry' && job.attempts === 0) throw new Fail('again', { retryIn: 0 });
    return k;
  });
  const run = w.run();
  assert.ok(await waitUntil(async () => JSON.stringify(await states('js_fs')) === '{"dead":1,"done":2}', 20000));
  w.stop();
  await run;
  const rows = await a.query('SELECT job_id, attempts FROM claimq.job WHERE job_id = ANY($1::bigint[])',
    [[dead, snoozed, retried]]);
  await a.end();
  const attempts = Object.fromEntries(rows.map((r) => [r.job_id, r.attempts]));
  assert.strictEqual(attempts[snoozed], 1, 'the snooze used no attempt');
  assert.strictEqual(attempts[retried], 2, 'the failure with retryIn was retried');
});

test('a drain of thousands with concurrency 8, one worker killed mid-run: nothing lost', async () => {
  await newQueue('js_kill', { keep_done: '1 hour', lease: '2 seconds' });
  const a = admin();
  await a.enqueueMany('js_kill', Array.from({ length: 3000 }, (_, n) => ({ n })));
  await a.end();
  const victim = child('js_kill', 5);
  const survivor = child('js_kill', 5);
  const survivorExit = new Promise((resolve) => survivor.on('exit', (code) => resolve(code)));
  try {
    assert.ok(await waitUntil(async () => ((await states('js_kill')).done || 0) >= 300, 30000));
    victim.kill('SIGKILL');
    assert.ok(await waitUntil(async () => JSON.stringify(await states('js_kill')) === '{"done":3000}', 90000),
      `every job ends done: ${JSON.stringify(await states('js_kill'))}`);
    // Only what the victim held (8 handlers) ran again, once.
    const [many, most] = await reruns('js_kill');
    assert.ok(many <= 8 && most <= 2, `jobs run twice: ${many}, most runs: ${most}`);
  } finally {
    survivor.kill('SIGTERM');
    assert.strictEqual(await survivorExit, 0, 'the survivor exits 0 on SIGTERM');
  }
});

test('SIGTERM: running jobs are finished, the rest released, exit 0', async () => {
  await newQueue('js_term', { keep_done: '1 hour', lease: '30 seconds' });
  const a = admin();
  await a.enqueueMany('js_term', Array.from({ length: 40 }, (_, n) => ({ n })));
  await a.end();
  const p = child('js_term', 1500);
  const exited = new Promise((resolve) => p.on('exit', (code) => resolve(code)));
  assert.ok(await waitUntil(async () => (await states('js_term')).running === 8, 20000));
  p.kill('SIGTERM');
  assert.strictEqual(await exited, 0);
  const s = await states('js_term');
  assert.strictEqual((s.claimed || 0) + (s.running || 0), 0, JSON.stringify(s));
  assert.ok(s.done >= 8, JSON.stringify(s));
});

test('a server restart mid-run: the worker goes on', { skip: !process.env.CLAIMQ_TEST_RESTART }, async () => {
  await newQueue('js_restart', { keep_done: '1 hour', lease: '3 seconds' });
  const a = admin();
  await a.enqueueMany('js_restart', Array.from({ length: 1000 }, (_, n) => ({ n })));
  await a.end();
  const p = child('js_restart', 5);
  const exited = new Promise((resolve) => p.on('exit', (code) => resolve(code)));
  try {
    assert.ok(await waitUntil(async () => ((await states('js_restart')).done || 0) >= 100, 30000));
    execSync(process.env.CLAIMQ_TEST_RESTART, { stdio: 'ignore' });
    assert.ok(await waitUntil(async () => JSON.stringify(await states('js_restart')) === '{"done":1000}', 90000),
      'every job ends done');
    assert.strictEqual(p.exitCode, null, 'the worker kept running');
    // At most what was in flight at the restart (8 handlers) ran again, once.
    const [many, most] = await reruns('js_restart');
    assert.ok(many <= 8 && most <= 2, `jobs run twice: ${many}, most runs: ${most}`);
  } finally {
    p.kill('SIGTERM');
    assert.strictEqual(await exited, 0);
  }
});

test('a server restart while onComplete holds its transaction: the worker lives on, and warns', { skip: !process.env.CLAIMQ_TEST_RESTART }, async () => {
  // The restart ends the connection that onComplete's transaction holds
  // while no query is on it.  The worker must not die of it: the job comes
  // back when its lease runs out, and is done by the next run.  A lost
  // connection is a warning, as in Python, not an error: the job is not
  // lost, its lease decides.
  await newQueue('js_txrestart', { keep_done: '1 hour', lease: '3 seconds', retry_base: '100 milliseconds' });
  const a = admin();
  const jobId = await a.enqueue('js_txrestart', { n: 1 });
  await a.end();
  const p = child('js_txrestart', 1, { concurrency: 1, leaseMs: 3000, onCompleteMs: 1500, logLevels: true },
    ['ignore', 'pipe', 'inherit']);
  let out = '';
  p.stdout.on('data', (d) => { out += d; });
  const exited = new Promise((resolve) => p.on('exit', (code) => resolve(code)));
  try {
    assert.ok(await waitUntil(async () => out.includes('in onComplete'), 20000), 'onComplete began');
    execSync(process.env.CLAIMQ_TEST_RESTART, { stdio: 'ignore' });
    assert.ok(await waitUntil(async () => /^(done|dead)/.test(await jobRow(jobId)), 60000),
      `the job is finished: ${await jobRow(jobId)}`);
    assert.strictEqual(p.exitCode, null, 'the worker kept running');
    assert.strictEqual(await jobRow(jobId), 'done 2', 'done by the run after the restart');
    assert.match(out, new RegExp(`^warn job ${jobId}: connection lost while completing it`, 'm'), out);
    assert.doesNotMatch(out, /^error /m, 'nothing at error');
  } finally {
    p.kill('SIGTERM');
    assert.strictEqual(await exited, 0, 'the worker exits 0 on SIGTERM');
  }
});

test('a stalled worker that re-claims its own job keeps the new claim', async () => {
  // Issue #26: a 5 s handler, a 2 s lease, the worker stopped (SIGSTOP) past
  // its lease.  The reclaimer takes the job back (one failed attempt); the
  // worker, let go on, claims it again while the stale run is still in its
  // handler.  The stale run's end must not drop the new claim: the job runs
  // twice and is done.
  await newQueue('js_reclaim', { keep_done: '1 hour', lease: '2 seconds', max_attempts: 3,
    retry_base: '100 milliseconds' });
  const a = admin();
  const jobId = await a.enqueue('js_reclaim', { n: 1 });
  await a.end();
  const p = child('js_reclaim', 5000, { concurrency: 2, leaseMs: 2000 });
  try {
    assert.ok(await waitUntil(async () => (await jobRow(jobId)) === 'running 1', 20000));
    p.kill('SIGSTOP');
    assert.ok(await waitUntil(async () => !(await jobRow(jobId)).startsWith('running'), 20000),
      'the reclaimer took the job back');
    p.kill('SIGCONT');
    assert.ok(await waitUntil(async () => /^(done|dead)/.test(await jobRow(jobId)), 60000));
    assert.strictEqual(await jobRow(jobId), 'done 2', 'one stall, one run more: the new claim was kept');
  } finally {
    p.kill('SIGCONT');
    p.kill('SIGKILL');
  }
});

test('SIGTERM keeps a job longer than its lease and releases the waiting ones at once', async () => {
  // Issue #26: SIGTERM during a 7 s job with a 3 s lease, two more jobs
  // claimed and waiting their turn.  The waiting ones are released at once
  // (within 2 s, less than the lease: not by their leases running out), the
  // running one is kept alive by the heartbeat and completed.
  await newQueue('js_long', { keep_done: '1 hour', lease: '3 seconds' });
  const a = admin();
  const ids = await a.enqueueMany('js_long', [{ n: 0 }, { n: 1 }, { n: 2 }]);
  await a.end();
  const p = child('js_long', 7000, { concurrency: 1, batch: 3, leaseMs: 3000 });
  const exited = new Promise((resolve) => p.on('exit', (code) => resolve(code)));
  try {
    assert.ok(await waitUntil(async () => JSON.stringify(await states('js_long')) === '{"claimed":2,"running":1}', 20000));
    p.kill('SIGTERM');
    assert.ok(await waitUntil(async () => JSON.stringify(await states('js_long')) === '{"pending":2,"running":1}', 2000),
      `released within 2 s: ${JSON.stringify(await states('js_long'))}`);
    assert.strictEqual(await exited, 0, 'the worker exits 0');
  } finally {
    p.kill('SIGKILL');
  }
  const rows = [];
  for (const i of ids) rows.push(await jobRow(i));
  assert.deepStrictEqual(rows.sort(), ['done 1', 'pending 0', 'pending 0'],
    'the long job was done in one attempt; the others used none');
});

test('a shutdown deadline gives running jobs back, or leaves them to the lease', async () => {
  for (const [mode, after] of [['release', 'pending 0'], ['abandon', 'pending 1']]) {
    const q = `js_deadline_${mode}`;
    await newQueue(q, { lease: '2 seconds', retry_base: '1 hour' });
    const a = admin();
    const jobId = await a.enqueue(q, {});
    await a.end();
    let started = false;
    const w = new Worker({ queue: q, concurrency: 1, leaseMs: 2000, shutdownTimeoutMs: 1000,
      onShutdownTimeout: mode, pool: { user: WORKER_ROLE } }, async (job, { signal }) => {
      started = true;
      await new Promise((resolve) => signal.addEventListener('abort', resolve));
    });
    const run = w.run();
    assert.ok(await waitUntil(async () => started, 20000));
    w.stop();
    const t0 = Date.now();
    await run;
    assert.ok(Date.now() - t0 < 5000, 'run() resolved after the 1 s deadline');
    // release: pending at once, no attempt used; abandon: the lease runs out
    // and the reclaimer counts a failed attempt.
    assert.ok(await waitUntil(async () => (await jobRow(jobId)) === after, 20000),
      `${mode}: ${await jobRow(jobId)}`);
  }
});

test('several queues, a timeout, onFailure and job.attempt', async () => {
  await newQueue('js_mq_a', { keep_done: '1 hour' });
  await newQueue('js_mq_b', { keep_done: '1 hour', retry_base: '100 milliseconds' });
  const a = admin();
  const quick = await a.enqueueMany('js_mq_a', Array.from({ length: 20 }, (_, n) => ({ n })));
  const slow = await a.enqueue('js_mq_b', {});
  const now = { js_mq_a: 0, js_mq_b: 0 };
  const most = { js_mq_a: 0, js_mq_b: 0 };
  const failures = [];
  const counted = (fn) => async (job, ctx) => {
    now[job.queue] += 1;
    most[job.queue] = Math.max(most[job.queue], now[job.queue]);
    try { return await fn(job, ctx); } finally { now[job.queue] -= 1; }
  };
  const w = new Worker({
    queues: { js_mq_a: 3, js_mq_b: 1 }, timeoutMs: 1000, pool: { user: WORKER_ROLE },
    onFailure: (job, err, { dead }) => { failures.push([job.id, job.attempt, err.name, dead]); },
  }, {
    js_mq_a: counted(async (job) => { await sleep(50); return { queue: job.queue, attempt: job.attempt }; }),
    js_mq_b: counted(async (job, { signal }) => {
      if (job.attempt === 1) await new Promise((resolve) => signal.addEventListener('abort', resolve));
      return { queue: job.queue, attempt: job.attempt };
    }),
  });
  const run = w.run();
  try {
    assert.ok(await waitUntil(async () => JSON.stringify(await states('js_mq_a')) === '{"done":20}'
      && JSON.stringify(await states('js_mq_b')) === '{"done":1}', 30000));
  } finally {
    w.stop();
    await run;
  }
  const rows = await a.query('SELECT job_id, result FROM claimq.job WHERE job_id = ANY($1::bigint[])',
    [[...quick, slow]]);
  await a.end();
  const results = Object.fromEntries(rows.map((r) => [r.job_id, r.result]));
  for (const i of quick) assert.deepStrictEqual(results[i], { queue: 'js_mq_a', attempt: 1 });
  assert.deepStrictEqual(results[slow], { queue: 'js_mq_b', attempt: 2 });
  assert.deepStrictEqual(failures, [[slow, 1, 'JobTimeout', false]]);
  assert.ok(most.js_mq_a <= 3, `at most 3 at once in js_mq_a: ${most.js_mq_a}`);
  assert.strictEqual(most.js_mq_b, 1);
});

test('a result JSON cannot hold fails the job (not retried as a lost connection); problems go to stderr', { timeout: 40000 }, async () => {
  await newQueue('js_badresult', { max_attempts: 1 });
  const a = admin();
  const jobId = await a.enqueue('js_badresult', {});
  const lines = [];
  const write = process.stderr.write;
  process.stderr.write = (chunk, ...rest) => {
    if (String(chunk).startsWith('claimq: ')) { lines.push(String(chunk)); return true; }
    return write.call(process.stderr, chunk, ...rest);
  };
  const w = new Worker({ queue: 'js_badresult', leaseMs: 3000, pool: { user: WORKER_ROLE } },
    async () => ({ n: 1n }));     // JSON.stringify throws a TypeError, without a code
  const run = w.run();
  try {
    assert.ok(await waitUntil(async () => (await jobRow(jobId)) === 'dead 1', 20000),
      `the job failed once and is dead: ${await jobRow(jobId)}`);
  } finally {
    w.stop();
    await run;
    process.stderr.write = write;
  }
  const [{ last_error: lastError }] = await a.query('SELECT last_error FROM claimq.job WHERE job_id = $1', [jobId]);
  await a.end();
  assert.match(lastError, /^TypeError/);
  assert.ok(lines.some((l) => l.includes(`job ${jobId}`) && l.includes('failed: TypeError')),
    `the failure is on stderr: ${JSON.stringify(lines)}`);
  assert.ok(!lines.some((l) => /claimed|completed/.test(l)), 'claims are not');
});

test('an error on a connection the pool has just handed out does not end the process', async () => {
  const w = new Worker({ queue: 'js_client', pool: { user: WORKER_ROLE } }, async () => {});
  const c = await w.client.pool.connect();
  try {
    // The pool took its own listener off; without the Worker's, emitting
    // 'error' here throws, as an unheard 'error' event ends the process.
    assert.doesNotThrow(() => c.emit('error', new Error('server conn crashed?')));
  } finally {
    c.release(true);
    await w.client.end();
  }
});

test('which errors are connection errors', () => {
  const { isConnectionError } = require(PACKAGE);
  for (const err of [Object.assign(new Error('x'), { code: '08006' }), Object.assign(new Error('x'), { code: '57P01' }),
    Object.assign(new Error('x'), { code: 'ECONNRESET' }), new Error('Connection terminated unexpectedly'),
    new Error('timeout exceeded when trying to connect')]) {
    assert.ok(isConnectionError(err), err.message);
  }
  for (const err of [new TypeError('Do not know how to serialize a BigInt'), Object.assign(new Error('x'), { code: '23505' }),
    Object.assign(new Error('x'), { code: '57014' }), new Error('something else')]) {
    assert.ok(!isConnectionError(err), `${err.message} ${err.code}`);
  }
});

// -- Tracing.  OpenTelemetry as an application sets it up: the packages
// resolved from where the package under test is installed (so that the
// library's own require finds the same API), a W3C propagator, a context
// manager, and spans kept in memory.  Registered by the first tracing
// test; the tests before run with the API installed and nothing registered.
const fromPackage = createRequire(path.join(PACKAGE, 'index.js'));
let tracing = null;
function traced() {
  if (tracing) return tracing;
  const api = fromPackage('@opentelemetry/api');
  const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } =
    fromPackage('@opentelemetry/sdk-trace-base');
  const { W3CTraceContextPropagator } = fromPackage('@opentelemetry/core');
  const { AsyncLocalStorageContextManager } = fromPackage('@opentelemetry/context-async-hooks');
  const exporter = new InMemorySpanExporter();
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  api.trace.setGlobalTracerProvider(
    new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  tracing = { api, exporter, tracer: api.trace.getTracer('claimq-tests') };
  return tracing;
}

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const untilAborted = (signal) => new Promise((resolve) => {
  if (signal.aborted) resolve();
  else signal.addEventListener('abort', resolve);
});
const started = (s) => s.startTime[0] * 1e9 + s.startTime[1];
const parentOf = (s) => (s.parentSpanContext ? s.parentSpanContext.spanId : s.parentSpanId) || null;
const spanId = (s) => s.spanContext().spanId;
const traceId = (s) => s.spanContext().traceId;
// The finished spans about a queue (and the spans under them), in the order they started.
const spansOf = (queue, kind = null) => tracing.exporter.getFinishedSpans()
  .filter((s) => s.attributes['messaging.destination.name'] === queue && (kind === null || s.kind === kind))
  .sort((x, y) => started(x) - started(y));
const traceparent = (s) => `00-${traceId(s)}-${spanId(s)}-01`;
const linksOf = (s) => s.links.map((l) => `${l.context.traceId}/${l.context.spanId}`);
// run(span) inside an active span named name; its result.
const inSpan = (name, run) => tracing.tracer.startActiveSpan(name, async (span) => {
  try { return await run(span); } finally { span.end(); }
});

function processAttributes(queue, jobId, attempt, outcome) {
  return {
    'messaging.system': 'claimq', 'messaging.operation.name': 'process',
    'messaging.operation.type': 'process', 'messaging.destination.name': queue,
    'messaging.message.id': jobId, 'claimq.attempt': attempt, 'claimq.outcome': outcome,
  };
}

// The spans as a tree, trace by trace in the order they began: each span's
// name, kind, id, parent, links, status, attributes and events.
function spanTree(spans) {
  const { api } = tracing;
  const byId = new Map(spans.map((s) => [spanId(s), s]));
  const sorted = [...spans].sort((x, y) => started(x) - started(y));
  const lines = [];
  const show = (s, depth) => {
    const pad = '  '.repeat(depth);
    const status = api.SpanStatusCode[s.status.code] + (s.status.message ? ` "${s.status.message}"` : '');
    lines.push(`${pad}${s.name} [${api.SpanKind[s.kind]}] span ${spanId(s)} parent ${parentOf(s) ?? 'none'} status ${status}`);
    for (const l of s.links) {
      const to = byId.get(l.context.spanId);
      lines.push(`${pad}  link to trace ${l.context.traceId} span ${l.context.spanId}${to ? ` (${to.name})` : ''}`);
    }
    const attributes = Object.entries(s.attributes).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
    if (attributes.length) lines.push(`${pad}  attributes ${attributes.join(' ')}`);
    for (const e of s.events) {
      lines.push(`${pad}  event ${e.name} ${e.attributes['exception.type'] ?? ''}: ${e.attributes['exception.message'] ?? ''}`);
    }
    for (const c of sorted.filter((x) => parentOf(x) === spanId(s))) show(c, depth + 1);
  };
  const traces = [...new Set(sorted.map(traceId))];
  for (const t of traces) {
    lines.push(`trace ${t}`);
    for (const s of sorted.filter((x) => traceId(x) === t && !byId.has(parentOf(x)))) show(s, 1);
  }
  return lines;
}

test('tracing: a job retried twice has three process spans, each linked to its one creation context', async () => {
  const { api } = traced();
  const q = 'js_trace_retry';
  await newQueue(q, { keep_done: '1 hour', retry_base: '100 milliseconds' });
  const a = admin();
  const jobId = await inSpan('request', () => a.enqueue(q, { n: 1 }));
  await a.end();
  const [publish] = spansOf(q, api.SpanKind.PRODUCER);
  const request = tracing.exporter.getFinishedSpans().find((s) => spanId(s) === parentOf(publish));
  assert.strictEqual(request.name, 'request', 'the publish span is the request\'s child');
  assert.strictEqual(publish.name, `publish ${q}`);
  assert.strictEqual(traceId(publish), traceId(request));
  assert.deepStrictEqual(publish.attributes, {
    'messaging.system': 'claimq', 'messaging.operation.name': 'publish',
    'messaging.operation.type': 'send', 'messaging.destination.name': q, 'messaging.message.id': jobId,
  });
  const seen = [];              // per attempt: the headers, and the span the handler runs in
  const w = new Worker({ queue: q, concurrency: 1, logger: quiet, pool: { user: WORKER_ROLE } }, async (job) => {
    seen.push([job.headers, api.trace.getActiveSpan().spanContext().spanId]);
    if (job.attempt === 1) throw new TypeError('boom');
    if (job.attempt === 2) throw new Fail('again', { retryIn: 0 });
    return 'done';
  });
  const run = w.run();
  try {
    assert.ok(await waitUntil(async () => spansOf(q, api.SpanKind.CONSUMER).length === 3, 30000),
      `three attempts: ${spansOf(q, api.SpanKind.CONSUMER).length}`);
  } finally {
    w.stop();
    await run;
  }
  assert.strictEqual(await jobRow(jobId), 'done 3');
  const attempts = spansOf(q, api.SpanKind.CONSUMER);
  assert.deepStrictEqual(attempts.map((s) => s.name), Array(3).fill(`process ${q}`));
  assert.deepStrictEqual(attempts.map(parentOf), [null, null, null], 'each attempt is a trace of its own');
  assert.strictEqual(new Set(attempts.map(traceId)).size, 3);
  for (const s of attempts) {
    assert.deepStrictEqual(linksOf(s), [`${traceId(publish)}/${spanId(publish)}`], 'linked to the publish span');
  }
  assert.deepStrictEqual(attempts.map((s) => s.attributes), [
    { ...processAttributes(q, jobId, 1, 'failed'), 'error.type': 'TypeError' },
    { ...processAttributes(q, jobId, 2, 'failed'), 'error.type': 'Fail' },
    processAttributes(q, jobId, 3, 'completed'),
  ]);
  assert.deepStrictEqual(attempts.map((s) => [api.SpanStatusCode[s.status.code], s.status.message]),
    [['ERROR', 'TypeError: boom'], ['ERROR', 'Fail: again'], ['OK', undefined]]);
  assert.deepStrictEqual(seen, attempts.map((s) => [{ traceparent: traceparent(publish) }, spanId(s)]),
    'the handler saw the headers, and ran in its attempt\'s span');
});

test('tracing: the span tree of a job enqueued in a request and run twice (printed)', async (t) => {
  const { api, tracer } = traced();
  const q = 'js_trace_tree';
  await newQueue(q, { keep_done: '1 hour', retry_base: '100 milliseconds' });
  const a = admin();
  const jobId = await inSpan('POST /orders', () => a.enqueue(q, { order: 7 }, { headers: { tenant: 'acme' } }));
  await a.end();
  const w = new Worker({ queue: q, concurrency: 1, logger: quiet, pool: { user: WORKER_ROLE } }, async (job) => {
    await tracer.startActiveSpan('send email', async (span) => { await sleep(5); span.end(); });
    if (job.attempt === 1) throw new Error('mail server said 451');
    return { sent: true };
  });
  const run = w.run();
  try {
    assert.ok(await waitUntil(async () => spansOf(q, api.SpanKind.CONSUMER).length === 2, 30000));
  } finally {
    w.stop();
    await run;
  }
  const mine = spansOf(q);
  const ids = new Set(mine.map(spanId));
  const all = tracing.exporter.getFinishedSpans();
  // The request above the publish span, and the handler's spans below each attempt.
  const tree = all.filter((s) => ids.has(spanId(s)) || ids.has(parentOf(s))
    || mine.some((m) => parentOf(m) === spanId(s)));
  const lines = spanTree(tree);
  t.diagnostic(`span tree of job ${jobId}:`);
  for (const line of lines) t.diagnostic(line);
  assert.deepStrictEqual(tree.map((s) => s.name).sort(),
    ['POST /orders', `process ${q}`, `process ${q}`, `publish ${q}`, 'send email', 'send email']);
  const [publish] = spansOf(q, api.SpanKind.PRODUCER);
  const attempts = spansOf(q, api.SpanKind.CONSUMER);
  assert.deepStrictEqual(attempts.map((s) => s.attributes['claimq.outcome']), ['failed', 'completed']);
  for (const s of attempts) {
    assert.deepStrictEqual(linksOf(s), [`${traceId(publish)}/${spanId(publish)}`]);
    const [child] = tree.filter((c) => c.name === 'send email' && parentOf(c) === spanId(s));
    assert.ok(child, 'the handler\'s span is the attempt\'s child');
  }
  assert.strictEqual(attempts[0].events[0].name, 'exception');
  const c = worker();
  try {
    const [{ headers }] = await c.status([jobId]);
    t.diagnostic(`headers of job ${jobId}: ${JSON.stringify(headers)}`);
    assert.deepStrictEqual(headers, { tenant: 'acme', traceparent: traceparent(publish) });
  } finally { await c.end(); }
});

test('tracing: a batch claim of 10 jobs gives ten spans, each linked to its own job\'s creation', async () => {
  const { api } = traced();
  const q = 'js_trace_batch';
  await newQueue(q, { keep_done: '1 hour' });
  const a = admin();
  const ids = [];
  for (let n = 0; n < 10; n += 1) ids.push(await inSpan(`request ${n}`, () => a.enqueue(q, { n })));
  await a.end();
  const publishes = spansOf(q, api.SpanKind.PRODUCER);
  assert.deepStrictEqual(publishes.map((s) => s.attributes['messaging.message.id']), ids);
  const lines = [];
  const w = new Worker({ queue: q, concurrency: 10, pool: { user: WORKER_ROLE },
    logger: { ...quiet, debug: (line) => lines.push(line) } }, async (job) => job.payload.n);
  const run = w.run();
  try {
    assert.ok(await waitUntil(async () => spansOf(q, api.SpanKind.CONSUMER).length === 10, 30000));
  } finally {
    w.stop();
    await run;
  }
  assert.ok(lines.includes(`claimed 10 jobs of ${q}`), `one claim of 10: ${lines.filter((l) => l.startsWith('claimed'))}`);
  const attempts = spansOf(q, api.SpanKind.CONSUMER);
  const created = new Map(publishes.map((s) => [s.attributes['messaging.message.id'], `${traceId(s)}/${spanId(s)}`]));
  for (const s of attempts) {
    const jobId = s.attributes['messaging.message.id'];
    assert.deepStrictEqual(s.attributes, processAttributes(q, jobId, 1, 'completed'));
    assert.deepStrictEqual(linksOf(s), [created.get(jobId)], `job ${jobId} links to its own publish span`);
    assert.strictEqual(s.status.code, api.SpanStatusCode.OK);
  }
  assert.deepStrictEqual(attempts.map((s) => s.attributes['messaging.message.id']).sort(), [...ids].sort());
  assert.strictEqual(new Set(attempts.map((s) => linksOf(s)[0])).size, 10, 'ten links, all different');
});

test('tracing: headers carry the publish span\'s context over the caller\'s; enqueueMany; refused headers', async () => {
  const { api } = traced();
  const q = 'js_trace_headers';
  await newQueue(q, { keep_done: '1 hour' });
  const a = admin();
  const w = worker();
  try {
    const foreign = `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`;
    const [one, many] = await inSpan('request', async () => [
      await a.enqueue(q, { n: 0 }, { headers: { tenant: 'acme', traceparent: foreign, tracestate: 'x=1' } }),
      await a.enqueueMany(q, [{ n: 1 }, { n: 2 }], { headers: [{ tenant: 'beta' }, null] }),
    ]);
    const [single, batch] = spansOf(q, api.SpanKind.PRODUCER);
    assert.strictEqual(single.attributes['messaging.message.id'], one);
    assert.strictEqual(batch.attributes['messaging.batch.message_count'], 2);
    assert.strictEqual(batch.attributes['messaging.message.id'], undefined, 'a batch has no one message id');
    assert.strictEqual(batch.name, `publish ${q}`);
    const expected = {
      [one]: { tenant: 'acme', traceparent: traceparent(single) },
      [many[0]]: { tenant: 'beta', traceparent: traceparent(batch) },
      [many[1]]: { traceparent: traceparent(batch) },
    };
    const jobs = await w.claim(q, 10, { leaseMs: 30000 });
    assert.deepStrictEqual(Object.fromEntries(jobs.map((j) => [j.id, j.headers])), expected, 'claim returns them');
    assert.deepStrictEqual(Object.fromEntries((await w.status([one, ...many])).map((r) => [r.job_id, r.headers])),
      expected, 'status too');
    // The caller's headers near the limit: the trace context is left out
    // rather than have the server refuse the job.
    const big = { big: 'x'.repeat(8150) };
    const bigId = await inSpan('request', () => a.enqueue(q, {}, { headers: big }));
    assert.deepStrictEqual((await w.status([bigId]))[0].headers, big);
    // Headers the server refuses (a value that is not a string): the
    // publish span ends with the error.
    await assert.rejects(a.enqueue(q, {}, { headers: { n: 1 } }), { code: '22023' });
    const refused = spansOf(q, api.SpanKind.PRODUCER).at(-1);
    assert.strictEqual(refused.status.code, api.SpanStatusCode.ERROR);
    assert.strictEqual(refused.attributes['error.type'], '22023');
  } finally { await a.end(); await w.end(); }
});

test('tracing: a cancel, a lost lease and a stale settle end the attempt\'s span with an error; snooze, timeout', async () => {
  const { api } = traced();
  const queues = {
    js_trace_cancel: { lease: '10 seconds' },
    js_trace_lost: { lease: '1 second', run_lease: '1 second', max_attempts: 1 },
    js_trace_stale: { lease: '1 second', run_lease: '1 second', max_attempts: 1 },
    js_trace_snooze: { keep_done: '1 hour' },
    js_trace_timeout: { keep_done: '1 hour', retry_base: '100 milliseconds' },
  };
  const a = admin();
  const ids = {};
  for (const [q, options] of Object.entries(queues)) {
    await newQueue(q, options);
    ids[q] = await a.enqueue(q, {});
  }
  const options = (queue, more) => ({ queue, concurrency: 1, logger: quiet, pool: { user: WORKER_ROLE }, ...more });
  let snoozed = false;
  const workers = [
    // Cancelled while it runs: the heartbeat tells the handler.
    new Worker(options('js_trace_cancel', { leaseMs: 10000, heartbeatMs: 300 }), async (job, { signal }) => {
      await untilAborted(signal);
      throw new Error('stopped');
    }),
    // Its lease runs out before the first heartbeat, which finds it lost.
    new Worker(options('js_trace_lost', { leaseMs: 1000, heartbeatMs: 3000 }), async (job, { signal }) => {
      await untilAborted(signal);
      return 'late';
    }),
    // No heartbeat: the handler finishes after the reclaimer took the job
    // back, and its complete is refused as stale.
    new Worker(options('js_trace_stale', { leaseMs: 1000, heartbeatMs: 600000 }), async (job) => {
      await waitUntil(async () => (await jobRow(job.id)) === 'dead 1', 30000);
      return 'late';
    }),
    new Worker(options('js_trace_snooze', {}), async () => {
      if (!snoozed) {
        snoozed = true;
        throw new Snooze(100);
      }
      return 'ok';
    }),
    new Worker(options('js_trace_timeout', { timeoutMs: 500 }), async (job, { signal }) => {
      if (job.attempt === 1) await untilAborted(signal);
      return 'ok';
    }),
  ];
  const runs = workers.map((w) => w.run());
  const want = { js_trace_cancel: 1, js_trace_lost: 1, js_trace_stale: 1, js_trace_snooze: 2, js_trace_timeout: 2 };
  const done = () => Object.entries(want).every(([q, n]) => spansOf(q, api.SpanKind.CONSUMER).length === n);
  try {
    assert.ok(await waitUntil(async () => (await jobRow(ids.js_trace_cancel)) === 'running 1', 20000));
    assert.strictEqual((await a.cancel([ids.js_trace_cancel]))[0].outcome, 'ok');
    assert.ok(await waitUntil(async () => done(), 40000),
      JSON.stringify(Object.keys(want).map((q) => [q, spansOf(q, api.SpanKind.CONSUMER).length])));
  } finally {
    for (const w of workers) w.stop();
    await Promise.all(runs);
    await a.end();
  }
  const ended = (q) => spansOf(q, api.SpanKind.CONSUMER).map((s) => ({
    status: api.SpanStatusCode[s.status.code], outcome: s.attributes['claimq.outcome'],
    attempt: s.attributes['claimq.attempt'], errorType: s.attributes['error.type'],
  }));
  assert.deepStrictEqual(ended('js_trace_cancel'), [{ status: 'ERROR', outcome: 'cancelled', attempt: 1, errorType: undefined }]);
  assert.deepStrictEqual(ended('js_trace_lost'), [{ status: 'ERROR', outcome: 'lease_lost', attempt: 1, errorType: undefined }]);
  assert.deepStrictEqual(ended('js_trace_stale'), [{ status: 'ERROR', outcome: 'stale', attempt: 1, errorType: undefined }]);
  assert.deepStrictEqual(ended('js_trace_snooze'), [
    { status: 'UNSET', outcome: 'snoozed', attempt: 1, errorType: undefined },
    { status: 'OK', outcome: 'completed', attempt: 1, errorType: undefined }], 'a snooze is no error, and uses no attempt');
  assert.deepStrictEqual(ended('js_trace_timeout'), [
    { status: 'ERROR', outcome: 'failed', attempt: 1, errorType: 'JobTimeout' },
    { status: 'OK', outcome: 'completed', attempt: 2, errorType: undefined }]);
  for (const q of Object.keys(want)) {
    const [publish] = spansOf(q, api.SpanKind.PRODUCER);
    for (const s of spansOf(q, api.SpanKind.CONSUMER)) assert.deepStrictEqual(linksOf(s), [`${traceId(publish)}/${spanId(publish)}`]);
  }
});

test('tracing: without a propagator, the context is written and read as W3C traceparent all the same', async () => {
  const { api } = traced();
  const q = 'js_trace_nopropagator';
  await newQueue(q, { keep_done: '1 hour' });
  const a = admin();
  let jobId;
  api.propagation.disable();      // no propagator: propagation.inject and extract do nothing
  try {
    jobId = await inSpan('request', () => a.enqueue(q, {}, { headers: { tenant: 'acme' } }));
    const w = new Worker({ queue: q, concurrency: 1, logger: quiet, pool: { user: WORKER_ROLE } }, async () => 'ok');
    const run = w.run();
    try {
      assert.ok(await waitUntil(async () => spansOf(q, api.SpanKind.CONSUMER).length === 1, 20000));
    } finally {
      w.stop();
      await run;
    }
  } finally {
    api.propagation.setGlobalPropagator(new (fromPackage('@opentelemetry/core').W3CTraceContextPropagator)());
  }
  const [publish] = spansOf(q, api.SpanKind.PRODUCER);
  const [attempt] = spansOf(q, api.SpanKind.CONSUMER);
  const [{ headers }] = await a.status([jobId]);
  await a.end();
  assert.deepStrictEqual(headers, { tenant: 'acme', traceparent: traceparent(publish) });
  assert.deepStrictEqual(linksOf(attempt), [`${traceId(publish)}/${spanId(publish)}`]);
  assert.strictEqual(attempt.attributes['claimq.outcome'], 'completed');
});

// A worker and a client in a child process where @opentelemetry/api cannot
// be found: a copy of the package in a directory of its own, with pg beside
// it and nothing else.
const NO_OTEL_CHILD = `
  const { createRequire } = require('module');
  const [adminOptions, role, queue] = process.argv.slice(1);
  const { Client, Worker } = require('claimq');
  let found = true;
  try { createRequire(require.resolve('claimq'))('@opentelemetry/api'); } catch (err) { found = err.code !== 'MODULE_NOT_FOUND'; }
  const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  (async () => {
    const a = new Client(JSON.parse(adminOptions));
    const ids = [
      await a.enqueue(queue, { n: 1 }, { headers: { tenant: 'acme' } }),
      await a.enqueue(queue, { n: 2 }),
      ...await a.enqueueMany(queue, [{ n: 3 }, { n: 4 }]),
      ...await a.enqueueMany(queue, [{ n: 5 }, { n: 6 }], { headers: [null, { tenant: 'beta' }] }),
    ];
    const seen = {};
    const w = new Worker({ queue, concurrency: 2, pool: { user: role } }, async (job) => {
      seen[job.id] = job.headers;
      if (job.payload.n === 1 && job.attempt === 1) throw new Error('once');
      return job.payload.n;
    });
    const run = w.run();
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline && (await a.status(ids)).some((r) => r.state !== 'done')) await wait(100);
    w.stop();
    await run;
    const rows = await a.status(ids);
    await a.end();
    console.log(JSON.stringify({ found, seen: ids.map((i) => seen[i]), states: rows.map((r) => r.state),
      stored: rows.map((r) => r.headers), failed: w.failed, completed: w.completed }));
  })().catch((err) => { console.error(err); process.exit(1); });
`;

test('without @opentelemetry/api nothing is traced and nothing fails', async () => {
  const q = 'js_no_otel';
  await newQueue(q, { keep_done: '1 hour', retry_base: '100 milliseconds' });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'claimq-no-otel-'));
  try {
    const copy = path.join(dir, 'node_modules', 'claimq');
    fs.mkdirSync(copy, { recursive: true });
    for (const f of ['index.js', 'package.json']) fs.copyFileSync(path.join(PACKAGE, f), path.join(copy, f));
    fs.symlinkSync(path.dirname(fromPackage.resolve('pg/package.json')), path.join(dir, 'node_modules', 'pg'));
    const out = execFileSync(process.execPath, ['-e', NO_OTEL_CHILD, JSON.stringify(adminOptions), WORKER_ROLE, q],
      { cwd: dir, encoding: 'utf8', timeout: 60000, stdio: ['ignore', 'pipe', 'pipe'] });
    const r = JSON.parse(out.trim().split('\n').at(-1));
    assert.strictEqual(r.found, false, 'the API cannot be found there');
    const given = [{ tenant: 'acme' }, null, null, null, null, { tenant: 'beta' }];
    assert.deepStrictEqual(r.seen, given, 'the jobs have the caller\'s headers, and nothing more');
    assert.deepStrictEqual(r.stored, given);
    assert.deepStrictEqual(r.states, Array(6).fill('done'));
    assert.deepStrictEqual([r.failed, r.completed], [1, 6]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
