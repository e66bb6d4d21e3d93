'use strict';
// The browser checks of contrib/dashboard/test: chromium (Debian's, never a
// downloaded one) driven by playwright-core against two running dashboards,
// DASH_ADMIN (administer + produce) and DASH_OBSERVER (observe), with SQL
// over the server's socket (CLAIMQ_SQL, pg's connection settings) to compare against.  Prints "ok N - ..." lines,
// numbered from TAP_START + 1; exits 1 if any check failed.

const http = require('node:http');
const path = require('node:path');
const assert = require('node:assert/strict');
const { chromium } = require('playwright-core');
const { Client } = require('pg');

const A = process.env.DASH_ADMIN.replace(/\/$/, '');
const O = process.env.DASH_OBSERVER.replace(/\/$/, '');
const SHOTS = process.env.SHOTS;
const TRACE_URL = process.env.DASH_TRACE_URL;	// the admin dashboard's --trace-url
const COUNTS = ['waiting', 'ready', 'scheduled', 'claimed', 'running', 'expired', 'dead', 'done', 'cancelled'];
let n = Number(process.env.TAP_START || 0);
let failures = 0;

async function check(name, fn) {
	n++;
	try {
		await fn();
		console.log(`ok ${n} - ${name}`);
	} catch (e) {
		failures++;
		console.log(`not ok ${n} - ${name}`);
		console.log(String(e.stack || e).split('\n').slice(0, 12).map((l) => `# ${l}`).join('\n'));
	}
}

// Poll fn until it returns a truthy value, or fail at the deadline.
async function until(what, fn, ms = 30000) {
	const end = Date.now() + ms;
	let last;
	for (;;) {
		try {
			const v = await fn();
			if (v) return v;
		} catch (e) { last = e; }
		if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
		await new Promise((r) => setTimeout(r, 200));
	}
}

async function main() {
	const sql = new Client(JSON.parse(process.env.CLAIMQ_SQL));
	await sql.connect();
	const one = async (text, values) => (await sql.query(text, values)).rows[0];
	const col = async (text, values) => (await sql.query(text, values)).rows.map((r) => Object.values(r)[0]);
	const edition = (await one('SELECT claimq.edition() AS e')).e;
	const jobId = async (dedup) => (await one('SELECT job_id::text AS id FROM claimq.jobs WHERE dedup_key = $1', [dedup])).id;

	const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
	const context = await browser.newContext({ viewport: { width: 1360, height: 900 } });
	const page = await context.newPage();
	const dialogs = [];
	page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
	const go = async (url, status = 200) => {
		const r = await page.goto(url);
		assert.equal(r.status(), status, `GET ${url}: status ${r.status()}: ${(await page.textContent('main').catch(() => '')).slice(0, 300)}`);
		return r;
	};
	const shot = (name) => page.screenshot({ path: path.join(SHOTS, `dashboard-${name}.png`), fullPage: true });
	const ids = () => page.$$eval('#jobs tbody tr[data-job]', (rows) => rows.map((r) => r.dataset.job));
	const confirm = async (button) => {	// click an action, check the confirmation step, confirm
		await Promise.all([page.waitForURL(/\/confirm\?/), page.click(button)]);
		assert.ok(await page.isVisible('#confirm-button'), 'a confirmation page');
		const [r] = await Promise.all([page.waitForURL(/\/action$/), page.click('#confirm-button')]);
		assert.equal(await page.title(), 'Done · claimq', `the action's page: ${await page.textContent('main')}`);
		return r;
	};
	const rowCounts = (sel) => page.$eval(sel, (tr) => Object.fromEntries(
		[...tr.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, td.textContent.trim()])));

	await check('overview renders every queue', async () => {
		await go(`${A}/`);
		const queues = await page.$$eval('#queues tbody tr', (rows) => rows.map((r) => r.dataset.queue));
		assert.deepEqual(queues, await col('SELECT queue FROM claimq.queue_stats ORDER BY queue'));
	});

	await check("overview: the quiet queue's counts are claimq.queue_stats's", async () => {
		await go(`${A}/`);
		const shown = await rowCounts('#queues tr[data-queue="quiet"]');
		const s = await one(`SELECT ${COUNTS.map((c) => `${c}::text`).join(', ')} FROM claimq.queue_stats WHERE queue = 'quiet'`);
		for (const c of COUNTS) assert.equal(shown[c], s[c], c);
		assert.equal(s.ready, '220');
		const busy = await rowCounts('#queues tr[data-queue="busy"]');
		for (const c of COUNTS) assert.match(busy[c], /^[0-9]+$/, `busy ${c}`);
	});

	await check(edition === 'c' ? 'overview: throughput chart and latency of the busy queue, sampled'
		: 'overview: charts "not available in this edition"', async () => {
		if (edition !== 'c') {
			await go(`${A}/`);
			assert.match(await page.textContent('#charts-na'), /not available in this edition/);
			await shot('overview');
			return;
		}
		await until('a throughput line with points and latency figures', async () => {
			await go(`${A}/`);
			const pts = await page.$eval('section[data-queue="busy"] polyline.s1', (p) => p.getAttribute('points')).catch(() => '');
			const lat = await page.$('section[data-queue="busy"] table.lat');
			return pts.split(' ').length >= 3 && lat;
		});
		await shot('overview');
	});

	// The "last hour" counts only what happened in it: queue lat's one
	// claim, made before the dashboards started, waited 1000 s (the
	// setup's); the three here wait milliseconds.  With the histograms
	// (cq_admin was granted EXECUTE on claimq.latency_histogram()) the
	// percentiles, without them (cq_observer) the mean.
	const secs = (text) => {
		const m = /^([0-9.]+) (ms|s)$/.exec(text.trim());
		assert.ok(m, `a duration: ${text}`);
		return Number(m[1]) / (m[2] === 'ms' ? 1000 : 1);
	};
	// Without waiting for the cell to appear, as textContent would.
	const latCell = (kind, c) => page.$eval(`section[data-queue="lat"] tr[data-kind="${kind}"] [data-col="${c}"]`, (e) => e.textContent);
	await check('overview: the last hour\'s latency comes from differences between samples, not since the server started', async () => {
		if (edition !== 'c') return;
		const before = await one(`SELECT samples::int AS n, extract(epoch FROM wait_p99)::float8 AS p99 FROM claimq.queue_latency WHERE queue = 'lat'`);
		assert.equal(before.n, 1);
		assert.ok(before.p99 > 900, `the setup's claim waited 1000 s: ${before.p99}`);
		await sql.query(`SELECT count(*) FROM claimq.enqueue_many('lat', ARRAY['{}', '{}', '{}']::jsonb[])`);
		await sql.query(`DO $$
			DECLARE c record;
			BEGIN
				FOR c IN SELECT * FROM claimq.claim('lat', 3, start => true) LOOP
					PERFORM claimq.complete(c.job_id, c.token);
				END LOOP;
			END $$`);
		assert.equal((await one(`SELECT samples::int AS n FROM claimq.queue_latency WHERE queue = 'lat'`)).n, 4);
		for (const base of [A, O]) {
			await until(`${base}: three claims of queue lat in the window`, async () => {
				await go(`${base}/`);
				return (await latCell('wait', 'n').catch(() => '')) === '3';
			});
			assert.ok(secs(await latCell('wait', 'mean')) < 1, 'mean wait');
			assert.equal(await latCell('run', 'n'), '3');
		}
		await go(`${A}/`);
		for (const c of ['p50', 'p90', 'p99']) assert.ok(secs(await latCell('wait', c)) < 1, `wait ${c}`);
		assert.equal(await page.$('section[data-queue="lat"] [data-note="percentiles"]'), null);
		await go(`${O}/`);
		assert.equal((await latCell('wait', 'p99')).trim(), '–');
		assert.match(await page.textContent('section[data-queue="lat"] [data-note="percentiles"]'), /GRANT EXECUTE ON FUNCTION claimq\.latency_histogram\(\)/);
	});

	await check('overview: reset_counters() breaks the charts, no line crosses it, and the window keeps what came before', async () => {
		if (edition !== 'c') return;
		await sql.query('SELECT claimq.reset_counters()');
		const shape = () => page.$eval('section[data-queue="busy"] figure.chart', (fig) => ({
			breaks: [...fig.querySelectorAll('line.break')].map((l) => Number(l.getAttribute('x1'))),
			lines: [...fig.querySelectorAll('polyline.s1')].map((p) => p.getAttribute('points').split(' ').map((xy) => Number(xy.split(',')[0]))),
		}));
		const got = await until('a break in the busy queue\'s throughput chart, and a line after it', async () => {
			await go(`${A}/`);
			const s = await shape();
			return s.breaks.length >= 1 && s.lines.length >= 2 && s;
		});
		for (const x of got.breaks) {
			for (const xs of got.lines) assert.ok(xs.every((v) => v < x) || xs.every((v) => v > x), `a line crosses the break at ${x}: ${xs}`);
		}
		// Queue lat's three claims were counted before the reset, in the window.
		assert.equal(await latCell('wait', 'n'), '3');
		assert.ok(await page.$('section[data-queue="lat"] line.break'), 'lat too went down');
	});

	await check("a queue's settings and limits, read from claimq.queue by a role that may", async () => {
		await go(`${A}/`);
		const limits = async (q) => (await rowCounts(`#queues tr[data-queue="${q}"]`)).limits;
		assert.equal(await limits('reports'), 'in flight ≤ 3, 50 per 00:01:00, group ≤ 2');
		assert.equal(await limits('quiet'), 'none');
		await go(`${A}/queues/reports`);
		const shown = await rowCounts('#settings tr:nth-child(2)');
		const want = await one(`SELECT lease::text, run_lease::text, max_attempts::text, retry_base::text, retry_max::text,
			keep_done::text, keep_dead::text, notify::text, group_limit::text, group_fifo::text, max_in_flight::text,
			rate_limit::text, rate_period::text FROM claimq.queue WHERE name = 'reports'`);
		for (const [c, v] of Object.entries(want)) assert.equal(shown[c], v === null ? '–' : v, c);
		assert.equal(shown.max_in_flight, '3');
		assert.equal(await page.$('#no-settings'), null);
	});

	const quietIds = await col(`SELECT job_id::text FROM claimq.jobs WHERE queue = 'quiet' ORDER BY job_id DESC`);
	await check('queue page: keyset paging through 250 jobs shows each once, in id order', async () => {
		await go(`${A}/queues/quiet`);
		await page.screenshot({ path: path.join(SHOTS, 'dashboard-queue.png') });
		const seen = [];
		let pages = 0;
		for (;;) {
			const got = await ids();
			assert.ok(got.length <= 50, 'at most 50 a page');
			seen.push(...got);
			pages++;
			if (!(await page.$('#next-page'))) break;
			await Promise.all([page.waitForURL(/before=/), page.click('#next-page')]);
		}
		assert.equal(pages, 5);
		assert.deepEqual(seen, quietIds);
	});

	await check('queue page: ids of different lengths in numeric order, not as text', async () => {
		await sql.query(`SELECT claimq.create_queue('digits')`);
		await sql.query(`INSERT INTO claimq.job (job_id, queue_id, state, run_at, enqueued_at, payload)
			SELECT i, q.queue_id, 'pending', now(), now(), '{}'
			  FROM claimq.queue q, unnest(ARRAY[9, 10, 99, 100]::bigint[]) i WHERE q.name = 'digits'`);
		await go(`${A}/queues/digits?limit=3`);
		assert.deepEqual(await ids(), ['100', '99', '10']);
		await Promise.all([page.waitForURL(/before=/), page.click('#next-page')]);
		assert.deepEqual(await ids(), ['9']);
	});

	await check('queue page: state filter (cancelled)', async () => {
		await go(`${A}/queues/quiet?state=cancelled`);
		assert.deepEqual(await ids(), await col(`SELECT job_id::text FROM claimq.jobs WHERE queue = 'quiet' AND state = 'cancelled' ORDER BY job_id DESC`));
	});

	await check('queue page: group and state filters from the form, paged 20 at a time', async () => {
		await go(`${A}/queues/quiet`);
		await page.selectOption('#filters select[name=state]', 'pending');
		await page.fill('#filters input[name=group]', 'g3');
		await page.fill('#filters input[name=limit]', '20');
		await Promise.all([page.waitForURL(/group=g3/), page.click('#filters button[type=submit]')]);
		const seen = [];
		for (;;) {
			seen.push(...(await ids()));
			if (!(await page.$('#next-page'))) break;
			await Promise.all([page.waitForURL(/before=/), page.click('#next-page')]);
		}
		const want = await col(`SELECT job_id::text FROM claimq.jobs WHERE queue = 'quiet' AND state = 'pending' AND group_key = 'g3' ORDER BY job_id DESC`);
		assert.ok(want.length > 20);
		assert.deepEqual(seen, want);
	});

	await check('queue page: dedup key and job id filters', async () => {
		await go(`${A}/queues/quiet?dedup=d-17`);
		const id = await jobId('d-17');
		assert.deepEqual(await ids(), [id]);
		await go(`${A}/queues/quiet?id=${quietIds[7]}`);
		assert.deepEqual(await ids(), [quietIds[7]]);
		await go(`${A}/queues/quiet?id=${quietIds[7]}&state=done`);
		assert.deepEqual(await ids(), []);
		// A key held by a live job and, before it, by a cancelled one: both,
		// newest first (from the live jobs' index and the finished jobs').
		const again = await col(`SELECT job_id::text FROM claimq.jobs WHERE dedup_key = 'again' ORDER BY job_id DESC`);
		assert.equal(again.length, 2);
		await go(`${A}/queues/flow?dedup=again`);
		assert.deepEqual(await ids(), again);
		await go(`${A}/queues/flow?dedup=again&state=cancelled`);
		assert.deepEqual(await ids(), again.slice(1));
		await go(`${A}/queues/flow?dedup=again&before=${again[0]}`);
		assert.deepEqual(await ids(), again.slice(1));
	});

	await check('job page: payload, timeline, the job it runs after and its dependents', async () => {
		const parent = await jobId('parent'), child = await jobId('child');
		await go(`${A}/jobs/${child}`);
		await shot('job');
		assert.match(await page.textContent('#payload'), /"step": "load"/);
		assert.equal(await page.textContent('[data-field=state]'), 'waiting');
		assert.match(await page.textContent('ol.timeline'), /enqueued/);
		assert.deepEqual(await page.$$eval('#headers tbody tr', (rows) => rows.map((r) => r.dataset.header)), ['traceparent', 'tracestate']);
		assert.equal(await page.textContent('[data-field=trace]'), '0af7651916cd43dd8448eb211c80319c');
		assert.match(await page.textContent(`#after tr[data-job="${parent}"]`), /pending/);
		await go(`${A}/jobs/${parent}`);
		assert.match(await page.textContent(`#dependents tr[data-job="${child}"]`), /waiting/);
		await go(`${A}/jobs/1`, 404);
	});

	// Headers (claimq.enqueue's headers): W3C trace context and a hostile
	// name and value.  The admin dashboard runs with --trace-url TRACE_URL.
	const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736', PARENT = '00f067aa0ba902b7';
	const headerRows = () => page.$$eval('#headers tbody tr', (rows) => rows.map((r) =>
		[r.querySelector('.header-name').textContent, r.querySelector('.header-value').textContent]));
	const enqueueWith = async (headers) => (await one(
		`SELECT claimq.enqueue('flow', '{"traced": true}', headers => $1::jsonb)::text AS id`, [JSON.stringify(headers)])).id;
	await check("job page: its headers as text, and the traceparent's trace id linked by the --trace-url template", async () => {
		assert.ok(TRACE_URL && TRACE_URL.includes('{trace_id}'), `DASH_TRACE_URL: ${TRACE_URL}`);
		const headers = {
			traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE',
			'<img src=x onerror=alert(4)>': '"><script>alert(5)</script><b>bold</b>',
			'x-tenant': "O'Brien & <Co>",
		};
		const id = await enqueueWith(headers);
		const stored = (await sql.query(`SELECT key, value FROM jsonb_each_text((SELECT headers FROM claimq.jobs WHERE job_id = $1))
			ORDER BY key COLLATE "C"`, [id])).rows.map((r) => [r.key, r.value]);
		assert.deepEqual(stored, Object.entries(headers).sort((a, b) => (a[0] < b[0] ? -1 : 1)), 'claimq keeps the headers as given');
		await go(`${A}/jobs/${id}`);
		assert.deepEqual(await headerRows(), stored);
		assert.equal(await page.textContent('[data-field=trace]'), TRACE);
		assert.equal(await page.getAttribute('[data-field=trace] a#trace-link', 'href'),
			TRACE_URL.split('{trace_id}').join(encodeURIComponent(TRACE)));
		assert.equal(await page.$$eval('main a#trace-link', (a) => a.length), 1);
		assert.equal(await page.$$eval('main img, main script, main b', (e) => e.length), 0, 'markup from the headers');
		assert.deepEqual(dialogs, []);
	});

	await check('job page: an invalid traceparent is shown as a header, with no trace id and no link; a job without headers says so', async () => {
		for (const bad of [`00-${'0'.repeat(32)}-${PARENT}-01`, `00-${TRACE}-${'0'.repeat(16)}-01`, `00-${TRACE.toUpperCase()}-${PARENT}-01`,
			`00-${TRACE}-${PARENT}-01-more`, `ff-${TRACE}-${PARENT}-01`, `00-${TRACE.slice(1)}-${PARENT}-01`]) {
			const id = await enqueueWith({ traceparent: bad });
			await go(`${A}/jobs/${id}`);
			assert.deepEqual(await headerRows(), [['traceparent', bad]], bad);
			assert.match(await page.textContent('[data-field=trace]'), /not valid W3C Trace Context/, bad);
			assert.equal(await page.$('#trace-link, #trace-id'), null, bad);
		}
		await go(`${A}/jobs/${await jobId('parent')}`);
		assert.equal(await page.textContent('#no-headers'), 'No headers.');
		assert.equal(await page.$('[data-field=trace]'), null);
	});

	// Bounded pages: a job's payload and result of 3 MB each, and jobs with
	// 250 jobs to run after and 250 dependents.
	const BOUND = 300000;	// bytes of HTML a job page may take: 2 x 64 KiB shown, escaped, and the rest
	await check('job page: a 3 MB payload and result are cut to a stated prefix, the page stays small', async () => {
		await sql.query(`SELECT claimq.create_queue('big', keep_done => '1 day')`);
		const id = (await one(`SELECT claimq.enqueue('big', jsonb_build_object('blob', repeat('<x>', 1000000)), dedup_key => 'big')::text AS id`)).id;
		await sql.query(`DO $$
			DECLARE c record;
			BEGIN
				SELECT * INTO c FROM claimq.claim('big', 1, start => true);
				PERFORM claimq.complete(c.job_id, c.token, jsonb_build_object('out', repeat('y', 3000000)));
			END $$`);
		const len = await one(`SELECT length(jsonb_pretty(payload))::text AS p, length(jsonb_pretty(result))::text AS r FROM claimq.jobs WHERE job_id = $1`, [id]);
		const r = await go(`${A}/jobs/${id}`);
		const body = await r.body();
		assert.ok(body.length < BOUND, `the page is ${body.length} bytes`);
		assert.equal(await page.textContent('[data-field=state]'), 'done');
		assert.match(await page.textContent('[data-cut=payload]'), new RegExp(`first 65,536 characters of ${Number(len.p).toLocaleString('en')}`));
		assert.match(await page.textContent('[data-cut=result]'), new RegExp(`first 65,536 characters of ${Number(len.r).toLocaleString('en')}`));
		assert.equal((await page.textContent('#payload')).length, 65536);
		assert.ok((await page.textContent('#payload')).includes('"blob": "<x><x>'));
		// The whole payload, as JSON, from the link the page gives.
		const whole = await page.request.get(`${A}${await page.getAttribute('[data-cut=payload] a', 'href')}`);
		assert.equal(whole.status(), 200);
		assert.equal((await whole.json()).blob.length, 3000000);
	});

	await check('job page: 250 jobs it runs after and 250 dependents, 100 a page, next links by id reach them all', async () => {
		const parent = (await one(`SELECT claimq.enqueue('big', '{"fan": "out"}')::text AS id`)).id;
		const mid = await col(`SELECT id::text FROM claimq.enqueue_many('big', ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series(1, 250) i),
			after => ARRAY[$1::bigint]) id ORDER BY id`, [parent]);
		const last = (await one(`SELECT claimq.enqueue('big', '{"fan": "in"}', after => $1::bigint[])::text AS id`, [mid])).id;
		const walk = async (url, table, next) => {
			const seen = [];
			let r = await go(url);
			for (;;) {
				assert.ok((await r.body()).length < BOUND, 'a bounded page');
				const got = await page.$$eval(`${table} tr[data-job]`, (rows) => rows.map((t) => t.dataset.job));
				assert.ok(got.length <= 100, `at most 100 a page: ${got.length}`);
				seen.push(...got);
				if (!(await page.$(next))) break;
				[r] = await Promise.all([page.waitForNavigation(), page.click(next)]);
			}
			return seen;
		};
		assert.deepEqual(await walk(`${A}/jobs/${last}`, '#after', '#after_gt-next'), mid);
		assert.deepEqual(await walk(`${A}/jobs/${parent}`, '#dependents', '#dependents_gt-next'), mid);
	});

	await check('bad addresses: bad percent-encoding is 400, an id beyond bigint 404, not a number 400; no stack trace', async () => {
		for (const [url, status] of [['/queues/%ZZ', 400], ['/queues/a%E0%A4%A', 400], ['/jobs/9999999999999999999', 404],
			['/jobs/99999999999999999999', 404], ['/jobs/12x', 400], ['/jobs/9999999999999999999/payload', 404],
			['/queues/quiet?id=9999999999999999999', 200], ['/queues/quiet?before=99999999999999999999', 200]]) {
			const r = await page.request.get(`${A}${url}`);
			assert.equal(r.status(), status, url);
			const text = await r.text();
			assert.doesNotMatch(text, /\bat [^ ]+ \(|node:internal|\.js:[0-9]+/, `${url}: a stack trace`);
			assert.doesNotMatch(text, /SQLSTATE/, `${url}: an error from the database`);
		}
		await go(`${A}/queues/quiet?id=9999999999999999999`);
		assert.deepEqual(await ids(), []);
		await go(`${A}/queues/quiet?before=99999999999999999999&limit=5`);
		assert.deepEqual(await ids(), quietIds.slice(0, 5));
	});

	await check('payloads and keys are shown as text: no script runs, no dialog', async () => {
		const id = await jobId('<b>xss</b>');
		await go(`${A}/jobs/${id}`);
		assert.ok((await page.textContent('#payload')).includes('<script>alert(1)</script>'));
		assert.equal(await page.textContent('[data-field="dedup key"]'), '<b>xss</b>');
		assert.equal(await page.textContent('[data-field="group key"]'), '"><svg onload=alert(3)>');
		for (const url of [`${A}/queues/flow`, `${A}/groups`, `${A}/queues/flow?group=${encodeURIComponent('"><svg onload=alert(3)>')}`]) {
			await go(url);
			assert.ok((await page.textContent('main')).includes('"><svg onload=alert(3)>'), url);
		}
		await go(`${A}/queues/flow`);
		assert.ok((await page.textContent('#jobs')).includes('<script>alert(1)</script>'));
		assert.equal(await page.$$eval('main script, main img, main b, main i, main svg[onload]', (e) => e.length), 0);
		await go(`${A}/queues/actions?state=dead`);
		assert.ok((await page.textContent('#jobs')).includes('boom: <i>markup</i>'));
		assert.deepEqual(dialogs, []);
	});

	await check("groups page: the quiet queue's groups are claimq.group_stats's", async () => {
		await go(`${A}/groups`);
		const shown = await page.$$eval('#groups tr[data-queue="quiet"]', (rows) => rows.map((r) =>
			[r.dataset.group, r.querySelector('[data-col=ready]').textContent, r.querySelector('[data-col=in_flight]').textContent]));
		const want = (await sql.query(`SELECT group_key, ready::text, in_flight::text FROM claimq.group_stats WHERE queue = 'quiet' ORDER BY group_key`)).rows
			.map((r) => [r.group_key, r.ready, r.in_flight]);
		assert.equal(want.length, 5);
		assert.deepEqual(shown, want);
	});

	await check("groups page: a fair queue's tenants, their share of the last minute's jobs against their weights (observe duty)", async () => {
		const tenants = () => page.$$eval('table.fair[data-queue="tenants"] tbody tr', (rows) => Object.fromEntries(rows.map((r) =>
			[r.dataset.tenant, Object.fromEntries([...r.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, td.textContent.trim()]))])));
		const t = await until('forty jobs of the fair queue in the window', async () => {
			await go(`${O}/groups`);
			const r = await tenants();
			return r.light && r.heavy && Number(r.light.handed) + Number(r.heavy.handed) >= 40 && r;
		}, 60000);
		await shot('groups');
		assert.deepEqual([t.light.weight, t.light.part, t.heavy.weight, t.heavy.part], ['3', '75.0%', '1', '25.0%']);
		const light = parseFloat(t.light.share);
		assert.ok(light >= 65 && light <= 85, `light's share ${t.light.share} (its weight's part: 75%), of ${t.light.handed} + ${t.heavy.handed} jobs`);
		assert.equal((parseFloat(t.light.share) + parseFloat(t.heavy.share)).toFixed(1), '100.0');
	});

	await check('schedules page: next and last run', async () => {
		await go(`${A}/schedules`);
		await shot('schedules');
		const s = await one(`SELECT next_run_at::text, COALESCE(last_run_at::text, '') AS last FROM claimq.schedules WHERE schedule = 'nightly-report'`);
		assert.equal(await page.textContent('tr[data-schedule="nightly-report"] [data-col=next_run_at]'), s.next_run_at);
		assert.equal(await page.textContent('tr[data-schedule="nightly-report"] [data-col=last_run_at]'), s.last);
		assert.equal(await page.textContent('tr[data-schedule="nightly-report"] [data-col=headers]'),
			(await one(`SELECT headers::text AS h FROM claimq.schedules WHERE schedule = 'nightly-report'`)).h);
	});

	await check('reclaimer page', async () => {
		await go(`${A}/reclaimer`);
		await shot('reclaimer');
		if (edition === 'c') {
			await until('the reclaimer to have run', async () => {
				await go(`${A}/reclaimer`);
				return /^[0-9]+$/.test(await page.textContent('[data-field=pid]')) && (await page.textContent('[data-field=last_run]')) !== '';
			});
		}
	});

	await check('metrics page: claimq.metrics() as text', async () => {
		await go(`${A}/metrics`);
		await shot('metrics');
		const text = await page.textContent('#metrics');
		assert.match(text, /# TYPE claimq_jobs gauge/);
		assert.ok(text.includes('claimq_jobs{queue="quiet",state="cancelled"} 30'), 'quiet has 30 cancelled jobs');
		const r = await page.request.get(`${A}/metrics.txt`);
		assert.match(await r.text(), /^# HELP/);
	});

	await check('cancel: select a job, confirm, and it is cancelled', async () => {
		const id = await jobId('to-cancel');
		await go(`${A}/queues/actions`);
		await page.check(`#jobs tr[data-job="${id}"] input[name=ids]`);
		await Promise.all([page.waitForURL(/\/confirm\?/), page.click('#cancel-selected')]);
		await shot('confirm');
		await Promise.all([page.waitForURL(/\/action$/), page.click('#confirm-button')]);
		assert.match(await page.textContent(`#outcomes tr[data-job="${id}"]`), /ok\s*cancelled/);
		assert.equal((await one('SELECT state FROM claimq.jobs WHERE job_id = $1', [id])).state, 'cancelled');
	});

	await check('retry a dead job from its page: it is pending again', async () => {
		const id = await jobId('to-die');
		await go(`${A}/jobs/${id}`);
		await confirm('button[data-action=retry_dead]');
		assert.match(await page.textContent('#outcome'), /^1 dead job made pending again/);
		assert.equal((await one('SELECT state FROM claimq.jobs WHERE job_id = $1', [id])).state, 'pending');
	});

	const paused = async () => (await one(`SELECT paused FROM claimq.queue_stats WHERE queue = 'actions'`)).paused;
	await check('pause and resume a queue from the overview', async () => {
		await go(`${A}/`);
		await confirm('#queues tr[data-queue="actions"] button[data-action=pause]');
		assert.equal(await paused(), true);
		await go(`${A}/`);
		assert.equal(await page.textContent('#queues tr[data-queue="actions"] [data-col=paused]'), 'paused');
		await confirm('#queues tr[data-queue="actions"] button[data-action=resume]');
		assert.equal(await paused(), false);
	});

	await check("run a schedule now: one job with its payload, priority and headers", async () => {
		const before = await col(`SELECT job_id::text FROM claimq.jobs WHERE queue = 'reports'`);
		await go(`${A}/schedules`);
		await confirm('tr[data-schedule="nightly-report"] button[data-action=run_schedule]');
		const after = (await sql.query(`SELECT job_id::text, payload, priority, headers FROM claimq.jobs WHERE queue = 'reports'`)).rows;
		assert.equal(after.length, before.length + 1);
		const job = after.find((j) => !before.includes(j.job_id));
		assert.deepEqual(job.payload, { report: 'daily' });
		assert.equal(job.priority, 5);
		assert.deepEqual(job.headers, { 'x-origin': '<nightly>' });
		assert.ok((await page.textContent('#outcome')).includes(job.job_id));
	});

	await check('fire due schedules', async () => {
		await go(`${A}/schedules`);
		await confirm('button[data-action=fire_schedules]');
		assert.match(await page.textContent('#outcome'), /^[0-9]+ jobs? enqueued\.$/);
	});

	const csrfOf = async (base) => {
		await go(`${base}/`);
		return page.getAttribute('meta[name=csrf-token]', 'content');
	};
	await check('a POST without the CSRF token, or from another origin, is refused; a GET changes nothing; a foreign Host is refused', async () => {
		const token = await csrfOf(A);
		let r = await page.request.post(`${A}/action`, { form: { action: 'pause', queue: 'actions' }, headers: { Origin: A } });
		assert.equal(r.status(), 403);
		assert.match(await r.text(), /CSRF token/);
		r = await page.request.post(`${A}/action`, { form: { action: 'pause', queue: 'actions', csrf: 'x'.repeat(64) } });
		assert.equal(r.status(), 403);
		r = await page.request.post(`${A}/action`, { form: { action: 'pause', queue: 'actions', csrf: token }, headers: { Origin: 'http://evil.example' } });
		assert.equal(r.status(), 403);
		assert.match(await r.text(), /cross-origin/);
		r = await page.request.get(`${A}/action?action=pause&queue=actions&csrf=${token}`);
		assert.equal(r.status(), 405);
		// DNS rebinding: a name other than the loopback's is refused.
		const status = await new Promise((resolve, reject) => {
			http.get(`${A}/`, { headers: { Host: 'attacker.example' } }, (res) => { res.resume(); resolve(res.statusCode); }).on('error', reject);
		});
		assert.equal(status, 421);
		assert.equal(await paused(), false);
	});

	// The observer: the observe duty only.
	await check('observe-only role: a read-only dashboard with the same counts and no actions', async () => {
		await go(`${O}/`);
		await shot('readonly');
		assert.match(await page.textContent('header'), /read-only/);
		const shown = await rowCounts('#queues tr[data-queue="quiet"]');
		const s = await one(`SELECT ${COUNTS.map((c) => `${c}::text`).join(', ')} FROM claimq.queue_stats WHERE queue = 'quiet'`);
		for (const c of COUNTS) assert.equal(shown[c], s[c], c);
		for (const p of ['/', '/queues/actions', '/schedules', '/groups', '/reclaimer', '/metrics']) {
			await go(`${O}${p}`);
			assert.equal(await page.$$eval('button[data-action], form[action="/confirm"]', (e) => e.length), 0, `no actions on ${p}`);
		}
		await go(`${O}/queues/actions`);
		assert.match(await page.textContent('#no-jobs'), /may not read/);
		assert.match(await page.textContent('#no-settings'), /grant this role SELECT on claimq\.queue/);
		await go(`${O}/`);
		assert.match(await page.textContent('#no-settings'), /grant this role SELECT on claimq\.queue/);
		assert.equal(await page.$('#queues td[data-col="limits"]'), null);
		await go(`${O}/jobs/${await jobId('parent')}`, 403);
		await go(`${O}/confirm?action=pause&queue=actions`, 403);
	});

	await check("observe-only role: forged POSTs with a valid CSRF token are refused by the database (403, 42501)", async () => {
		const token = await csrfOf(O);
		const target = await jobId('parent');
		for (const fields of [{ action: 'pause', queue: 'actions' }, { action: 'cancel', ids: target },
			{ action: 'retry_dead', queue: 'busy' }, { action: 'fire_schedules' }]) {
			await go(`${O}/`);
			// A form built in the dashboard's own page, as a forged request would be.
			const [r] = await Promise.all([page.waitForNavigation(), page.evaluate(({ f, csrf }) => {
				const form = document.createElement('form');
				form.method = 'post';
				form.action = '/action';
				for (const [k, v] of Object.entries({ ...f, csrf })) {
					const i = document.createElement('input');
					i.type = 'hidden'; i.name = k; i.value = v;
					form.appendChild(i);
				}
				document.body.appendChild(form);
				form.submit();
			}, { f: fields, csrf: token })]);
			assert.equal(r.status(), 403, fields.action);
			assert.equal(await page.textContent('#sqlstate'), '42501');
			assert.match(await page.textContent('#error'), /permission denied/);
		}
		assert.equal(await paused(), false);
		assert.equal((await one('SELECT state FROM claimq.jobs WHERE job_id = $1', [target])).state, 'pending');
		const r = await page.request.post(`${O}/action`, { form: { action: 'pause', queue: 'actions' } });
		assert.equal(r.status(), 403);
		assert.match(await r.text(), /CSRF token/);
	});

	await check('no dialog fired on any page', async () => assert.deepEqual(dialogs, []));

	await browser.close();
	await sql.end();
	process.exit(failures ? 1 : 0);
}

main().catch((e) => {
	console.log(`not ok ${n + 1} - the browser checks ran to the end`);
	console.log(String(e.stack || e).split('\n').map((l) => `# ${l}`).join('\n'));
	process.exit(1);
});
