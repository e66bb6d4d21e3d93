'use strict';
// Traffic on queue "busy" while the browser checks run: a producer that
// enqueues a few jobs every 50 ms and a worker that claims, starts and
// completes them (one in eight fails, with one retry left, so some die);
// and a worker of the fair queue "tenants".
// Runs until SIGTERM; prints a progress line every second.

const { Pool } = require('pg');

const pool = new Pool({ connectionString: process.env.CLAIMQ_URL_TRAFFIC, max: 2 });
pool.on('error', () => {});
let running = true;
const n = { enqueued: 0, completed: 0, failed: 0, fair: 0, errors: 0 };
const pause = (ms) => new Promise((r) => setTimeout(r, ms));

async function producer() {
	while (running) {
		try {
			const r = await pool.query(
				"SELECT count(*)::int AS n FROM claimq.enqueue_many('busy', ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series(1, 4) i))");
			n.enqueued += r.rows[0].n;
		} catch (e) { n.errors++; }
		await pause(50);
	}
}

async function worker() {
	while (running) {
		try {
			const jobs = (await pool.query(
				"SELECT job_id, token FROM claimq.claim('busy', 10, worker => 'traffic', start => true)")).rows;
			const ok = jobs.filter((_, i) => i % 8 !== 7), bad = jobs.filter((_, i) => i % 8 === 7);
			if (ok.length) {
				await pool.query('SELECT * FROM claimq.complete($1::bigint[], $2::bigint[])',
					[ok.map((j) => j.job_id), ok.map((j) => j.token)]);
				n.completed += ok.length;
			}
			if (bad.length) {
				await pool.query("SELECT * FROM claimq.fail($1::bigint[], $2::bigint[], 'traffic: a failure')",
					[bad.map((j) => j.job_id), bad.map((j) => j.token)]);
				n.failed += bad.length;
			}
			if (!jobs.length) await pause(50);
		} catch (e) { n.errors++; await pause(50); }
	}
}

// A worker of the fair queue "tenants": claims of 4, completed at once.
async function fairWorker() {
	while (running) {
		try {
			const jobs = (await pool.query(
				"SELECT job_id, token FROM claimq.claim('tenants', 4, worker => 'traffic')")).rows;
			if (jobs.length) {
				await pool.query('SELECT * FROM claimq.complete($1::bigint[], $2::bigint[])',
					[jobs.map((j) => j.job_id), jobs.map((j) => j.token)]);
				n.fair += jobs.length;
			}
		} catch (e) { n.errors++; }
		await pause(50);
	}
}

const report = setInterval(() => console.log(
	`enqueued ${n.enqueued}, completed ${n.completed}, failed ${n.failed}, fair queue ${n.fair}, errors ${n.errors}`), 1000);
process.on('SIGTERM', () => { running = false; });
Promise.all([producer(), worker(), fairWorker()]).then(() => { clearInterval(report); return pool.end(); });
