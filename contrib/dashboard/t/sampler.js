'use strict';
// lib/sampler.js against a fake database: cumulative counters and latency
// histograms that grow, are reset and grow again.  Checks that the hour's
// figures are differences between samples (nothing counted before the
// first sample of the window), that a sample where a counter went down
// starts a new segment, and that what was counted after a reset still
// counts.  No server needed: node t/sampler.js; prints "ok N - ..." lines
// and exits 1 if any check failed.

const assert = require('node:assert/strict');
const { Sampler, quantile, bucketSeconds, parseFair } = require('../lib/sampler');
const { check, done } = require('./check');


// The fake claimq: one queue, q, its counters and its histograms.
const B1MS = Math.ceil(Math.log(1000) / Math.log(1.2));		// a bucket near 1 ms
const B100S = Math.ceil(Math.log(100e6) / Math.log(1.2));	// a bucket near 100 s
function fakeDb({ histograms = true } = {}) {
	const db = { completed: 0, failed: 0, wait: {}, run: {}, waitSum: 0, runSum: 0 };
	db.claim = (k, bucket, secs) => {
		db[k][bucket] = (db[k][bucket] || 0) + 1;
		if (k === 'wait') db.waitSum += secs; else db.runSum += secs;
	};
	db.reset = () => Object.assign(db, { completed: 0, failed: 0, wait: {}, run: {}, waitSum: 0, runSum: 0 });
	const total = (h) => Object.values(h).reduce((s, v) => s + v, 0);
	db.query = async (text) => {
		if (/FROM claimq\.counters\(\)/.test(text)) {
			const c = { queue: 'q', claimed: total(db.wait), started: total(db.run), completed: db.completed, failed: db.failed, dead: 0, cancelled: 0 };
			return { rows: c.claimed || c.completed ? [c] : [] };
		}
		if (/FROM claimq\.queue_latency\(\)/.test(text)) {
			const n = total(db.wait) + total(db.run);
			return { rows: n ? [{ queue: 'q', wait_n: total(db.wait), wait_sum: db.waitSum, run_n: total(db.run), run_sum: db.runSum }] : [] };
		}
		if (/has_function_privilege/.test(text)) return { rows: [{ ok: histograms }] };
		if (/FROM claimq\.latency_histogram\(\)/.test(text)) {
			if (!histograms) throw Object.assign(new Error('permission denied'), { code: '42501' });
			return { rows: ['wait', 'run'].flatMap((kind) => Object.entries(db[kind]).map(([bucket, v]) => ({ queue: 'q', kind, bucket: Number(bucket), n: v }))) };
		}
		if (/claimq\.metrics\(\)/.test(text)) {
			// A fair queue f: tenants a (weight 1), b (weight 3) and the
			// jobs without a group key; db.fair holds their counts.
			const line = (name, labels, v) => `claimq_fair_${name}{queue="f",${labels}} ${v}`;
			const lines = ['# HELP claimq_jobs ...', 'claimq_jobs{queue="f",state="ready"} 1'];
			for (const [labels, t] of Object.entries(db.fair)) {
				lines.push(line('handed_total', labels, t.handed), line('weight', labels, t.weight));
			}
			return { rows: [{ text: lines.join('\n') + '\n' }] };
		}
		throw new Error(`unexpected query: ${text}`);
	};
	db.fair = {};
	return db;
}

// Samples at t = 0, 10, 20, ... s (the clock is the sampler's: stubbed).
async function run(db, steps) {
	const s = new Sampler(db.query, 10000);
	const realNow = Date.now;
	let t = 1e12;
	try {
		for (const step of steps) {
			step(db);
			Date.now = () => t;
			await s.sample();
			assert.equal(s.lastError, null, s.lastError);
			t += 10000;
		}
	} finally {
		Date.now = realNow;
	}
	return s;
}

const slow = (db) => { for (let i = 0; i < 50; i++) db.claim('wait', B100S, 100); };	// before the window
const fast = (k) => (db) => { for (let i = 0; i < k; i++) { db.claim('wait', B1MS, 0.001); db.claim('run', B1MS, 0.001); } db.completed += k; };

(async () => {
	const plain = fakeDb();
	const s1 = await run(plain, [slow, fast(10), fast(10), fast(10)]);
	check('throughput: differences between consecutive samples, one segment', () => {
		const tp = s1.throughput('q');
		assert.equal(tp.completed.length, 1);
		assert.deepEqual(tp.completed[0].map((p) => p[1]), [1, 1, 1]);
		assert.deepEqual(s1.resets('q'), []);
	});
	check('window: claims and percentiles of the window only, not the 100 s waits before its first sample', () => {
		const w = s1.window('q');
		assert.equal(w.wait.n, 30);
		assert.equal(w.run.n, 30);
		assert.equal(w.completed, 30);
		assert.equal(w.percentiles, true);
		assert.equal(w.wait.p99, bucketSeconds(B1MS));
		assert.ok(w.wait.p99 < 0.002, `p99 ${w.wait.p99}`);
		assert.ok(Math.abs(w.wait.mean - 0.001) < 1e-9, `mean ${w.wait.mean}`);
	});

	const reset = fakeDb();
	const s2 = await run(reset, [slow, fast(10), fast(10), (db) => { db.reset(); fast(4)(db); }, fast(6), fast(6)]);
	check('a counter that went down starts a new segment: no point across it', () => {
		const tp = s2.throughput('q');
		assert.equal(tp.completed.length, 2, JSON.stringify(tp.completed));
		assert.deepEqual(tp.completed.map((seg) => seg.map((p) => p[1])), [[1, 1], [0.6, 0.6]]);
		assert.deepEqual(s2.resets('q'), [s2.samples[3].t]);
		assert.ok(tp.completed[0].every((p) => p[0] < s2.samples[3].t) && tp.completed[1].every((p) => p[0] > s2.samples[3].t));
		const lat = s2.latencySeries('q', 'wait');
		assert.equal(lat.length, 2);
	});
	check('window across a reset: before it, plus everything counted after it', () => {
		const w = s2.window('q');
		assert.equal(w.resets, 1);
		assert.equal(w.completed, 20 + 4 + 12);
		assert.equal(w.wait.n, 36);
		assert.equal(w.wait.p99, bucketSeconds(B1MS));
	});

	const nohist = fakeDb({ histograms: false });
	const s3 = await run(nohist, [slow, fast(10), fast(10)]);
	check('without the histograms: means of the window, no percentiles', () => {
		const w = s3.window('q');
		assert.equal(w.percentiles, false);
		assert.equal(w.wait.p99, null);
		assert.equal(w.wait.n, 20);
		assert.ok(Math.abs(w.wait.mean - 0.001) < 1e-9);
	});

	// A fair queue's share: samples every 10 s over 100 s; a gets 10 jobs
	// and b 30 per step, the keyless tenant 5 until it is forgotten (its
	// count goes back to 0) and comes back with 2 per step.
	const fair = fakeDb();
	fair.fair = { 'group_key="a"': { handed: 500, weight: 1 }, 'group_key="b"': { handed: 900, weight: 3 },
		'keyless="1"': { handed: 0, weight: 1 }, 'group_key="odd\\"key\\\\"': { handed: 7, weight: 0.5 } };
	const grow = (k) => (db) => {
		db.fair['group_key="a"'].handed += 10;
		db.fair['group_key="b"'].handed += 30;
		if (k === 'forget') db.fair['keyless="1"'].handed = 2;
		else db.fair['keyless="1"'].handed += k;
	};
	const s4 = await run(fair, [grow(5), grow(5), grow(5), grow(5), grow('forget'), grow(2), grow(2), grow(2), grow(2), grow(2)]);
	check('fair share: the last minute from the sample 60 s before the last, by tenant', () => {
		assert.deepEqual(s4.fairQueues(), ['f']);
		const sh = s4.share('f');
		assert.equal(sh.seconds, 60);
		assert.deepEqual(sh.tenants.map((t) => [t.key, t.weight, t.handed]),
			[[null, 1, 12], ['a', 1, 60], ['b', 3, 180], ['odd"key\\', 0.5, 0]]);
		assert.ok(Math.abs(sh.tenants[2].share - 180 / 252) < 1e-9);
		assert.ok(Math.abs(sh.tenants[2].part - 3 / 5.5) < 1e-9);
		assert.equal(s4.fair.length, 7);
	});
	check('fair share: none before two samples, and null shares when nothing was handed', () => {
		const s = new Sampler(fair.query, 10000);
		assert.equal(s.share('f'), null);
		s.addFair({ t: 0, tenants: parseFair('claimq_fair_handed_total{queue="f",group_key="a"} 3\n') });
		s.addFair({ t: 5000, tenants: parseFair('claimq_fair_handed_total{queue="f",group_key="a"} 3\n') });
		assert.deepEqual(s.share('f').tenants.map((t) => [t.handed, t.share, t.part]), [[0, null, 1]]);
	});

	check("quantile: nearest rank over buckets, the bucket's geometric middle", () => {
		assert.equal(quantile({ 3: 9, 40: 1 }, 0.9), bucketSeconds(3));
		assert.equal(quantile({ 3: 9, 40: 1 }, 0.99), bucketSeconds(40));
		assert.equal(quantile({}, 0.5), null);
	});

	done();
})();
