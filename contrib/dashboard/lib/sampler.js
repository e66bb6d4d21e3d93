'use strict';
// The last hour of claimq.counters() and claimq.queue_latency, sampled
// into memory every few seconds: one short query each, nothing written.
// The counters are cumulative, so throughput is the difference between two
// samples; a counter that went down (reset_counters(), a server restart)
// starts the series again rather than drawing a negative rate.  In the
// portable edition both return no rows: available stays false.

const KEEP_MS = 3600e3;

class Sampler {
	constructor(query, intervalMs) {
		this.query = query;
		this.intervalMs = intervalMs;
		this.samples = [];		// { t, counters: {queue: {...}}, latency: {queue: {...}} }
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
				`SELECT queue, claimed::float8, started::float8, completed::float8, failed::float8,
				        dead::float8, cancelled::float8
				   FROM claimq.counters() WHERE queue IS NOT NULL`);
			const l = await this.query(
				`SELECT queue, samples::float8,
				        extract(epoch FROM wait_p50)::float8 AS wait_p50,
				        extract(epoch FROM wait_p90)::float8 AS wait_p90,
				        extract(epoch FROM wait_p99)::float8 AS wait_p99,
				        extract(epoch FROM run_p50)::float8 AS run_p50,
				        extract(epoch FROM run_p90)::float8 AS run_p90,
				        extract(epoch FROM run_p99)::float8 AS run_p99
				   FROM claimq.queue_latency`);
			const s = { t: Date.now(), counters: {}, latency: {} };
			for (const r of c.rows) s.counters[r.queue] = r;
			for (const r of l.rows) s.latency[r.queue] = r;
			if (c.rows.length || l.rows.length) this.available = true;
			this.samples.push(s);
			while (this.samples.length && this.samples[0].t < s.t - KEEP_MS) this.samples.shift();
			this.lastError = null;
		} catch (e) {
			this.lastError = e.message;	// shown on the overview; the next tick tries again
		}
	}

	// Jobs per second completed and failed, between consecutive samples.
	throughput(queue) {
		const completed = [], failed = [];
		for (let i = 1; i < this.samples.length; i++) {
			const a = this.samples[i - 1], b = this.samples[i];
			const ca = a.counters[queue], cb = b.counters[queue];
			if (!ca || !cb) continue;
			const dt = (b.t - a.t) / 1000;
			const dc = cb.completed - ca.completed, df = cb.failed - ca.failed;
			if (dt <= 0 || dc < 0 || df < 0) continue;
			completed.push([b.t, dc / dt]);
			failed.push([b.t, df / dt]);
		}
		return { completed, failed };
	}

	latencySeries(queue, key) {
		return this.samples.filter((s) => s.latency[queue] && s.latency[queue][key] !== null)
			.map((s) => [s.t, s.latency[queue][key]]);
	}

	latest(queue) {
		const s = this.samples[this.samples.length - 1];
		return s ? s.latency[queue] : undefined;
	}
}

module.exports = { Sampler };
