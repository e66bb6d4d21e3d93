'use strict';
// The last hour of claimq.counters() and claimq.queue_latency(), sampled
// into memory every few seconds: one short query each, nothing written.
//
// Both are cumulative since the server started or reset_counters(), so
// every figure of the hour is a difference between samples: throughput
// between two consecutive ones, and the hour's claims, mean wait and run
// (and, where the role may call claimq.latency_histogram(), percentiles
// from the histograms' buckets subtracted) summed over the steps from the
// first sample of the hour to the last.  A step in which any of a queue's
// numbers went down (reset_counters(), a server restart) is a reset: what
// its second sample holds was counted after the reset, inside the step, so
// it counts whole; the charts draw no line across it and start a new
// segment.  In the portable edition both return no rows: available stays
// false.

const KEEP_MS = 3600e3;
const COUNTERS = ['claimed', 'started', 'completed', 'failed', 'dead', 'cancelled'];
const LATENCY = ['wait_n', 'wait_sum', 'run_n', 'run_sum'];
const KINDS = ['wait', 'run'];
// claimq's histogram buckets (src/claimq.h): bucket 0 holds durations
// under 1 microsecond, bucket b those below RATIO^b microseconds; a
// percentile is reported as its bucket's geometric middle, as
// claimq.queue_latency does.
const RATIO = 1.2;
const bucketSeconds = (b) => (b === 0 ? 0.5 : Math.pow(RATIO, b - 0.5)) / 1e6;

// A queue's numbers in a sample: counters, latency counts and sums, and
// histograms ({wait: {bucket: n}, run: {...}}) or null if not read.
const ZERO = Object.freeze({ ...Object.fromEntries([...COUNTERS, ...LATENCY].map((k) => [k, 0])), hist: null });

// True if any number of b is below a's: counters were reset in between.
function wentDown(a, b) {
	for (const k of [...COUNTERS, ...LATENCY]) if (b[k] < a[k]) return true;
	if (a.hist && b.hist) {
		for (const kind of KINDS) {
			for (const [bucket, n] of Object.entries(a.hist[kind])) if ((b.hist[kind][bucket] || 0) < n) return true;
		}
	}
	return false;
}

// b - a, number by number (a is ZERO after a reset).
function diff(a, b) {
	const d = {};
	for (const k of [...COUNTERS, ...LATENCY]) d[k] = b[k] - a[k];
	d.hist = null;
	if (b.hist && (a.hist || a === ZERO)) {
		d.hist = {};
		for (const kind of KINDS) {
			d.hist[kind] = {};
			for (const [bucket, n] of Object.entries(b.hist[kind])) {
				const m = n - ((a.hist && a.hist[kind][bucket]) || 0);
				if (m > 0) d.hist[kind][bucket] = m;
			}
		}
	}
	return d;
}

// The q-quantile (nearest rank) of a histogram {bucket: n}, in seconds.
function quantile(hist, q) {
	const buckets = Object.keys(hist).map(Number).sort((x, y) => x - y);
	const n = buckets.reduce((s, b) => s + hist[b], 0);
	if (n === 0) return null;
	const rank = Math.max(1, Math.ceil(q * n));
	let seen = 0;
	for (const b of buckets) {
		seen += hist[b];
		if (seen >= rank) return bucketSeconds(b);
	}
	return bucketSeconds(buckets[buckets.length - 1]);
}

// Fair queues' tenants from metrics(): claimq_fair_handed_total and
// claimq_fair_weight, one line per tenant, labelled queue and group_key
// (keyless="1" for the jobs without a group key).  Returns a Map from the
// line's labels to { queue, key, handed, weight }.
const FAIR_LINE = /^claimq_fair_(handed_total|weight)\{(.*)\} (\S+)$/;
const LABEL = /(\w+)="((?:[^"\\]|\\.)*)"/g;
const unescape = (v) => v.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
function parseFair(text) {
	const tenants = new Map();
	for (const line of text.split('\n')) {
		const m = FAIR_LINE.exec(line);
		if (!m) continue;
		const labels = {};
		for (const l of m[2].matchAll(LABEL)) labels[l[1]] = unescape(l[2]);
		if (labels.queue === undefined) continue;
		const t = tenants.get(m[2]) || { queue: labels.queue, key: labels.keyless === '1' ? null : (labels.group_key ?? ''), handed: 0, weight: 1 };
		if (m[1] === 'weight') t.weight = Number(m[3]); else t.handed = Number(m[3]);
		tenants.set(m[2], t);
	}
	return tenants;
}

// How long a fair queue's share is measured over.
const SHARE_MS = 60e3;

class Sampler {
	constructor(query, intervalMs) {
		this.query = query;
		this.intervalMs = intervalMs;
		this.samples = [];		// { t, queues: { name: {claimed, ..., wait_n, ..., hist} } }
		this.fair = [];			// { t, tenants: parseFair's Map }, the last minute and one before
		this.available = false;	// some sample had a row
		this.lastError = null;
		this.timer = null;
	}

	start() {
		const tick = async () => {
			await this.sample();
			this.timer = setTimeout(tick, this.intervalMs);
			this.timer.unref();
		};
		tick();
	}

	stop() { clearTimeout(this.timer); }

	async sample() {
		try {
			const c = await this.query(
				`SELECT queue, ${COUNTERS.map((k) => `${k}::float8`).join(', ')}
				   FROM claimq.counters() WHERE queue IS NOT NULL`);
			const l = await this.query(
				`SELECT queue, samples::float8 AS wait_n, wait_sum, run_samples::float8 AS run_n, run_sum
				   FROM claimq.queue_latency()`);
			// The histograms are private to claimq: read them only if this
			// role was granted EXECUTE on the function.
			const may = (await this.query(`SELECT COALESCE(has_function_privilege(
				to_regprocedure('claimq.latency_histogram()'), 'EXECUTE'), false) AS ok`)).rows[0].ok;
			const h = may ? await this.query(
				'SELECT queue, kind, bucket, samples::float8 AS n FROM claimq.latency_histogram()') : null;
			const s = { t: Date.now(), queues: {} };
			const of = (q) => (s.queues[q] = s.queues[q] || { ...ZERO, hist: h ? { wait: {}, run: {} } : null });
			for (const r of c.rows) for (const k of COUNTERS) of(r.queue)[k] = r[k];
			for (const r of l.rows) for (const k of LATENCY) of(r.queue)[k] = r[k];
			if (h) for (const r of h.rows) if (KINDS.includes(r.kind)) of(r.queue).hist[r.kind][r.bucket] = r.n;
			this.add(s);
			if (c.rows.length || l.rows.length) this.available = true;
			this.lastError = null;
		} catch (e) {
			this.lastError = e.message;	// shown on the overview; the next tick tries again
		}
		await this.sampleFair();
	}

	// The fair queues' tenants, from metrics() (the observe duty has it);
	// a role without it, or a failed read, leaves the shares unmeasured.
	async sampleFair() {
		try {
			const m = await this.query('SELECT claimq.metrics() AS text');
			this.addFair({ t: Date.now(), tenants: parseFair(m.rows[0].text) });
		} catch (e) {
			this.fair = [];
		}
	}

	addFair(s) {
		this.fair.push(s);
		// Keep the newest sample at least SHARE_MS old, and those after it.
		while (this.fair.length > 1 && this.fair[1].t <= s.t - SHARE_MS) this.fair.shift();
	}

	// A fair queue's share over the last minute (or since the first
	// sample, if that is later): { seconds, tenants: [{ key, weight,
	// handed, share, part }] } in key order (the keyless tenant first),
	// or null before two samples.  handed is the difference between the
	// samples (the whole count where it went down: the tenant was
	// forgotten and came back); share is its part of the queue's jobs in
	// the window (null if none); part, its weight's part of the weights of
	// the tenants with live jobs now.
	share(queue) {
		if (this.fair.length < 2) return null;
		const last = this.fair[this.fair.length - 1];
		const first = this.fair[0];
		const rows = [];
		for (const [labels, t] of last.tenants) {
			if (t.queue !== queue) continue;
			const before = first.tenants.get(labels);
			const handed = before && before.handed <= t.handed ? t.handed - before.handed : t.handed;
			rows.push({ key: t.key, weight: t.weight, handed });
		}
		const total = rows.reduce((n, r) => n + r.handed, 0);
		const weights = rows.reduce((n, r) => n + r.weight, 0);
		for (const r of rows) {
			r.share = total > 0 ? r.handed / total : null;
			r.part = r.weight / weights;
		}
		rows.sort((a, b) => (a.key === null ? -1 : b.key === null ? 1 : a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
		return { seconds: (last.t - first.t) / 1000, tenants: rows };
	}

	// The queues the last fair sample has tenants of, in name order.
	fairQueues() {
		if (!this.fair.length) return [];
		return [...new Set([...this.fair[this.fair.length - 1].tenants.values()].map((t) => t.queue))].sort();
	}

	add(s) {
		this.samples.push(s);
		while (this.samples.length && this.samples[0].t < s.t - KEEP_MS) this.samples.shift();
	}

	// Each step between consecutive samples for a queue: { t0, t, reset, d }
	// where d is the step's difference (after a reset: the second sample's
	// numbers whole).
	steps(queue) {
		const out = [];
		for (let i = 1; i < this.samples.length; i++) {
			const a = this.samples[i - 1].queues[queue] || ZERO;
			const b = this.samples[i].queues[queue] || ZERO;
			const reset = wentDown(a, b);
			out.push({ t0: this.samples[i - 1].t, t: this.samples[i].t, reset, d: diff(reset ? ZERO : a, b) });
		}
		return out;
	}

	// The times of the steps where counters went down, for the charts.
	resets(queue) {
		return this.steps(queue).filter((s) => s.reset).map((s) => s.t);
	}

	// Segments of [t, value] points, broken at resets; a step gives a
	// point if value(d, dt) returns a number.
	series(queue, value) {
		const segments = [[]];
		for (const s of this.steps(queue)) {
			if (s.reset) {
				if (segments[segments.length - 1].length) segments.push([]);
				continue;
			}
			const v = value(s.d, (s.t - s.t0) / 1000);
			if (v !== null && v !== undefined && Number.isFinite(v)) segments[segments.length - 1].push([s.t, v]);
		}
		return segments.filter((seg) => seg.length);
	}

	// Jobs per second completed and failed, between consecutive samples.
	throughput(queue) {
		return {
			completed: this.series(queue, (d, dt) => (dt > 0 ? d.completed / dt : null)),
			failed: this.series(queue, (d, dt) => (dt > 0 ? d.failed / dt : null)),
		};
	}

	// Each step's wait or run p90 where the histograms were read, else its
	// mean; no point for a step without a sample.
	latencySeries(queue, kind) {
		return this.series(queue, (d) => {
			if (!d[`${kind}_n`]) return null;
			return d.hist ? quantile(d.hist[kind], 0.9) : d[`${kind}_sum`] / d[`${kind}_n`];
		});
	}

	// The window's figures: from the first sample kept to the last.
	// { since, until, resets, claimed, completed, failed, wait: {n, mean,
	// p50, p90, p99}, run: {...} }; percentiles are null unless every
	// step had the histograms.
	window(queue) {
		const steps = this.steps(queue);
		const w = { since: this.samples.length ? this.samples[0].t : null, until: this.samples.length ? this.samples[this.samples.length - 1].t : null,
			resets: steps.filter((s) => s.reset).length, percentiles: steps.length > 0 };
		const sum = { ...ZERO, hist: { wait: {}, run: {} } };
		for (const { d } of steps) {
			for (const k of [...COUNTERS, ...LATENCY]) sum[k] += d[k];
			if (!d.hist) {
				if (d.wait_n || d.run_n) w.percentiles = false;
				continue;
			}
			for (const kind of KINDS) {
				for (const [b, n] of Object.entries(d.hist[kind])) sum.hist[kind][b] = (sum.hist[kind][b] || 0) + n;
			}
		}
		for (const k of COUNTERS) w[k] = sum[k];
		for (const kind of KINDS) {
			const n = sum[`${kind}_n`];
			w[kind] = { n, mean: n > 0 ? sum[`${kind}_sum`] / n : null, p50: null, p90: null, p99: null };
			if (w.percentiles && n > 0) {
				for (const [p, q] of [['p50', 0.5], ['p90', 0.9], ['p99', 0.99]]) w[kind][p] = quantile(sum.hist[kind], q);
			}
		}
		return w;
	}

	// Whether the window counted anything of the queue, or saw it reset.
	busy(w) {
		return w.resets > 0 || COUNTERS.some((k) => w[k] > 0) || w.wait.n > 0 || w.run.n > 0;
	}
}

module.exports = { Sampler, quantile, bucketSeconds, parseFair, SHARE_MS };
