'use strict';
// claimq-dashboard's web server: plain node:http, one pg pool, pages
// rendered from claimq's views and functions as the connecting role.
//
// Every statement is a single parameterized statement in its own
// transaction (node-postgres sends it unnamed), so the dashboard keeps no
// session state and works through pgbouncer in transaction mode.  What the
// role may do is asked of the database (has_function_privilege) on every
// request, only to hide what it may not do: an action that is posted
// anyway still goes to the database, which decides (42501 becomes a 403
// page).  Only POST /action changes anything, and only with this
// process's CSRF token and a same-origin Origin.

const http = require('node:http');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { Pool } = require('pg');
const { Safe, html, qs, layout, lineChart } = require('./html');
const { Sampler } = require('./sampler');
const { checkTraceUrl, traceCell, headersTable } = require('./trace');

const css = fs.readFileSync(path.join(__dirname, 'style.css'));
const STATES = ['waiting', 'pending', 'claimed', 'running', 'dead', 'done', 'cancelled'];
const COUNTS = ['waiting', 'ready', 'scheduled', 'claimed', 'running', 'expired', 'dead', 'done', 'cancelled'];
// A queue's row of claimq.queue_stats, every count as text (bigint).
const STATS_SQL = `SELECT queue, paused, ${COUNTS.map((c) => `${c}::text`).join(', ')},
        date_trunc('milliseconds', oldest_ready_age)::text AS oldest_ready_age,
        date_trunc('milliseconds', oldest_claim_age)::text AS oldest_claim_age
   FROM claimq.queue_stats`;
// A queue's settings and limits.  claimq's SQL API has no view of them,
// so they are read from its table claimq.queue, and only by a role that
// may (the owner, or one granted SELECT on it).
const SETTINGS = ['lease', 'run_lease', 'max_attempts', 'retry_base', 'retry_max', 'keep_done', 'keep_dead', 'notify',
	'group_limit', 'group_fifo', 'max_in_flight', 'rate_limit', 'rate_period'];
const SETTINGS_SQL = `SELECT name, ${SETTINGS.map((c) => `${c}::text`).join(', ')} FROM claimq.queue`;
const NO_SETTINGS = 'claimq\'s SQL API does not show queue settings and limits; grant this role SELECT on claimq.queue to see them here';
function limitsText(q) {
	const l = [];
	if (q.max_in_flight !== null) l.push(`in flight ≤ ${q.max_in_flight}`);
	if (q.rate_limit !== null) l.push(`${q.rate_limit} per ${q.rate_period}`);
	if (q.group_limit !== null) l.push(`group ≤ ${q.group_limit}`);
	if (q.group_fifo === 'true') l.push('group FIFO');
	return l.length ? l.join(', ') : 'none';
}
// The states of job_dedup_idx (live) and of job_finished_idx.
const LIVE_FINISHED = ['{waiting,pending,claimed,running}', '{done,dead,cancelled}'];
// Job ids: digits, within bigint.  A number beyond it names no job (404
// on a job's page), anything else is no job id (400).
const DIGITS = /^[0-9]+$/;
const MAX_ID = 9223372036854775807n;
const isId = (v) => DIGITS.test(v) && BigInt(v) <= MAX_ID;
// A job's page shows at most this many characters of its payload, result
// and last error, and lists the jobs it runs after and its dependents this
// many at a time.
const SHOW_CHARS = 65536;
const LIST_PAGE = 100;
const MAX_IDS = 1000;

class HttpError extends Error {
	constructor(status, message) { super(message); this.status = status; }
}

function createDashboard({ db, port = 8080, listen = '127.0.0.1', sampleMs = 5000, traceUrl = null, log = console.error }) {
	if (traceUrl && checkTraceUrl(traceUrl)) throw new Error(`traceUrl: ${checkTraceUrl(traceUrl)}`);
	const pool = new Pool({ connectionString: db, max: 4, application_name: 'claimq-dashboard' });
	pool.on('error', (e) => log(`claimq-dashboard: idle connection: ${e.message}`));
	const query = (text, values = []) => pool.query({ text, values });
	const sampler = new Sampler(query, sampleMs);

	const secret = crypto.randomBytes(32);
	const csrf = crypto.createHmac('sha256', secret).update('claimq-dashboard form').digest('hex');
	let allowedHosts = null;	// set once listening: Host names that reach a loopback listener

	// Who we are and what we may do: asked of the database each request.
	async function whoami() {
		const r = await query(
			`SELECT current_user AS role, current_database() AS database,
			        has_schema_privilege('claimq', 'USAGE') AS usage,
			        (SELECT COALESCE(json_object_agg(proname, ok), '{}')
			           FROM (SELECT p.proname, bool_or(has_function_privilege(p.oid, 'EXECUTE')) AS ok
			                   FROM pg_catalog.pg_proc p
			                  WHERE p.pronamespace = 'claimq'::regnamespace
			                  GROUP BY p.proname) f) AS funcs,
			        (SELECT COALESCE(json_object_agg(relname, has_table_privilege(c.oid, 'SELECT')), '{}')
			           FROM pg_catalog.pg_class c
			          WHERE c.relnamespace = 'claimq'::regnamespace
			            AND (c.relkind = 'v' OR c.relname = 'queue')) AS relations`);
		const w = r.rows[0];
		const f = (n) => w.usage && !!w.funcs[n];
		const v = (n) => w.usage && !!w.relations[n];	// a view, or the table claimq.queue
		const can = {
			stats: v('queue_stats'), jobs: v('jobs'), groups: v('group_stats'),
			schedules: v('schedules'), reclaimer: v('reclaimer_status'), metrics: f('metrics'),
			deps: f('dependencies'), settings: v('queue'),
			cancel: f('cancel'), retry: f('retry_dead'), pause: f('pause_queue'), resume: f('resume_queue'),
			fire: f('fire_schedules'), run: f('enqueue') && v('schedules'),
		};
		const info = { role: w.role, database: w.database, edition: '?', version: '?' };
		if (f('edition') && f('version')) {
			const e = await query('SELECT claimq.edition() AS edition, claimq.version() AS version');
			Object.assign(info, e.rows[0]);
		}
		const readOnly = !(can.cancel || can.retry || can.pause || can.resume || can.fire || can.run);
		return { info, can, readOnly, csrf };
	}

	// Whether claimq's view has a column: a dashboard newer than the
	// claimq it reads does without the job and schedule headers.
	async function hasColumn(view, column) {
		return (await query(
			`SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
			                 WHERE c.relnamespace = 'claimq'::regnamespace AND c.relname = $1
			                   AND a.attname = $2 AND NOT a.attisdropped) AS h`,
			[view, column])).rows[0].h;
	}

	function page(res, ctx, status, title, body) {
		send(res, status, 'text/html; charset=utf-8', layout({ ...ctx, title }, body));
	}

	function send(res, status, type, body) {
		res.writeHead(status, {
			'Content-Type': type,
			'Cache-Control': 'no-store',
			'Content-Security-Policy': "default-src 'none'; style-src 'self'; img-src 'self'; " +
				"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
			'X-Content-Type-Options': 'nosniff',
			'Referrer-Policy': 'same-origin',
		});
		res.end(body);
	}

	// A form that leads to the confirmation page of an action.
	function actionButton(action, label, fields, cls = '') {
		return html`<form method="get" action="/confirm" class="inline">
<input type="hidden" name="action" value="${action}">
${Object.entries(fields).map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`)}
<button type="submit" class="${cls}" data-action="${action}">${label}</button></form>`;
	}

	// ---- pages ----------------------------------------------------------

	async function overview(ctx) {
		const { can } = ctx;
		if (!can.stats) throw new HttpError(403, 'this role may not read claimq.queue_stats (duty observe or administer)');
		const stats = (await query(`${STATS_SQL} ORDER BY queue`)).rows;
		const blocked = {};
		if (can.groups) {
			for (const r of (await query(
				`SELECT queue, count(*) FILTER (WHERE blocked)::text AS n FROM claimq.group_stats GROUP BY queue`)).rows)
				blocked[r.queue] = r.n;
		}
		const settings = {};
		if (can.settings) {
			for (const r of (await query(SETTINGS_SQL)).rows) settings[r.name] = r;
		}
		const rows = stats.map((s) => html`<tr data-queue="${s.queue}">
<td><a href="/queues/${encodeURIComponent(s.queue)}">${s.queue}</a></td>
<td data-col="paused">${s.paused ? html`<span class="badge warn">paused</span>` : 'no'}</td>
${COUNTS.map((c) => html`<td class="num" data-col="${c}">${s[c]}</td>`)}
<td data-col="oldest_ready_age">${s.oldest_ready_age}</td>
<td data-col="oldest_claim_age">${s.oldest_claim_age}</td>
<td class="num" data-col="blocked_groups">${blocked[s.queue] || (can.groups ? '0' : '')}</td>
${can.settings ? html`<td data-col="limits">${settings[s.queue] ? limitsText(settings[s.queue]) : ''}</td>` : ''}
<td>${s.paused ? (can.resume ? actionButton('resume', 'Resume', { queue: s.queue }) : '')
		: (can.pause ? actionButton('pause', 'Pause', { queue: s.queue }) : '')}</td></tr>`);
		const table = html`<table class="grid" id="queues"><thead><tr><th>queue</th><th>paused</th>
${COUNTS.map((c) => html`<th>${c}</th>`)}<th>oldest ready</th><th>oldest claim</th><th>blocked groups</th>${can.settings ? html`<th>limits</th>` : ''}<th></th></tr></thead>
<tbody>${rows}</tbody></table>
${stats.length ? '' : html`<p class="empty">No queues yet.</p>`}`;
		return html`${table}
<p class="note">Counts from <code>claimq.queue_stats</code> at ${new Date().toISOString()}. A group whose ready jobs
the queue's limits all hold back counts as blocked.${can.settings ? '' : html` <span id="no-settings">Limits: ${NO_SETTINGS}.</span>`}</p>
<h2>Last hour</h2>${charts(ctx, stats.map((s) => s.queue))}`;
	}

	function charts(ctx, queues) {
		if (ctx.info.edition === 'portable') {
			return html`<p class="na" id="charts-na">Throughput and latency are not available in this edition
(<code>claimq.counters()</code> and <code>claimq.queue_latency</code> return no rows without claimq's preloaded library).</p>`;
		}
		if (!ctx.can.metrics) return html`<p class="na">This role may not read <code>claimq.counters()</code>.</p>`;
		const err = sampler.lastError ? html`<p class="error">Sampling failed: ${sampler.lastError}</p>` : '';
		if (sampler.samples.length < 2) return html`${err}<p class="na">Collecting samples (every ${sampleMs / 1000} s)…</p>`;
		if (!sampler.available) return html`${err}<p class="na">No counts yet: no job has been claimed since the server started.</p>`;
		const since = sampler.samples[0].t;
		const sec = (v) => (v === null || v === undefined ? '–' : v < 1 ? `${(v * 1000).toPrecision(3)} ms` : `${v.toPrecision(3)} s`);
		const windows = Object.fromEntries(queues.map((q) => [q, sampler.window(q)]));
		const active = queues.filter((q) => sampler.busy(windows[q]));
		const idle = queues.filter((q) => !active.includes(q));
		const span = (sampler.samples[sampler.samples.length - 1].t - since) / 1000;
		return html`${err}<p class="note" id="window">Figures of the last ${span < 120 ? `${Math.round(span)} s` : `${Math.round(span / 60)} min`} (since ${new Date(since).toISOString()}):
differences between samples of <code>claimq.counters()</code> and <code>claimq.queue_latency()</code>, every ${sampleMs / 1000} s.
Where a queue's counters went down (<code>reset_counters()</code>, a server restart) the charts break (dashed line), and
what was counted after it still counts.</p><div class="charts">${active.map((q) => {
			const tp = sampler.throughput(q);
			const w = windows[q];
			const breaks = sampler.resets(q);
			const row = (kind) => html`<tr data-kind="${kind}"><th>${kind}</th>
<td data-col="p50">${sec(w[kind].p50)}</td><td data-col="p90">${sec(w[kind].p90)}</td><td data-col="p99">${sec(w[kind].p99)}</td>
<td data-col="mean">${sec(w[kind].mean)}</td><td class="num" data-col="n">${w[kind].n}</td></tr>`;
			return html`<section class="queue-charts" data-queue="${q}"><h3>${q}</h3>
${lineChart([{ name: 'completed/s', cls: 's1', segments: tp.completed }, { name: 'failed/s', cls: 's2', segments: tp.failed }], { since, breaks })}
${w.wait.n || w.run.n ? html`<table class="grid lat"><tr><th></th><th>p50</th><th>p90</th><th>p99</th><th>mean</th><th>samples</th></tr>
${row('wait')}${row('run')}</table>
${w.percentiles ? '' : html`<p class="na" data-note="percentiles">Percentiles need <code>claimq.latency_histogram()</code>:
<code>GRANT EXECUTE ON FUNCTION claimq.latency_histogram() TO ${ctx.info.role};</code></p>`}
${lineChart([{ name: `wait ${w.percentiles ? 'p90' : 'mean'} (s)`, cls: 's3', segments: sampler.latencySeries(q, 'wait') },
		{ name: `run ${w.percentiles ? 'p90' : 'mean'} (s)`, cls: 's4', segments: sampler.latencySeries(q, 'run') }], { since, breaks, height: 100 })}`
		: html`<p class="na" data-note="no-latency">No claim or run measured in this window.</p>`}</section>`;
		})}</div>${idle.length ? html`<p class="na" id="idle">No claims counted in the last hour: ${idle.join(', ')}.</p>` : ''}`;
	}

	async function queuePage(ctx, name, params) {
		const { can } = ctx;
		if (!can.stats) throw new HttpError(403, 'this role may not read claimq.queue_stats');
		const s = (await query(`${STATS_SQL} WHERE queue = $1`, [name])).rows[0];
		if (!s) throw new HttpError(404, `queue "${name}" does not exist`);
		let head = html`<table class="grid" id="queue-stats"><tr>${COUNTS.map((c) => html`<th>${c}</th>`)}<th>oldest ready</th><th>oldest claim</th></tr>
<tr data-queue="${s.queue}">${COUNTS.map((c) => html`<td class="num" data-col="${c}">${s[c]}</td>`)}<td>${s.oldest_ready_age}</td><td>${s.oldest_claim_age}</td></tr></table>
<p>${s.paused ? html`<span class="badge warn" id="paused">paused</span> ` : ''}
${s.paused ? (can.resume ? actionButton('resume', 'Resume queue', { queue: name }) : '')
		: (can.pause ? actionButton('pause', 'Pause queue', { queue: name }) : '')}
${can.retry && s.dead !== '0' ? actionButton('retry_dead', `Retry all ${s.dead} dead jobs`, { queue: name }) : ''}</p>`;
		let settings = html`<p class="na" id="no-settings">Settings and limits: ${NO_SETTINGS}.</p>`;
		if (can.settings) {
			const q = (await query(`${SETTINGS_SQL} WHERE name = $1`, [name])).rows[0];
			if (q) {
				settings = html`<table class="grid" id="settings"><tr>${SETTINGS.map((c) => html`<th>${c}</th>`)}</tr>
<tr>${SETTINGS.map((c) => html`<td data-col="${c}">${q[c] === null ? '–' : q[c]}</td>`)}</tr></table>`;
			}
		}
		head = html`${head}<h2>Settings</h2>${settings}`;
		if (!can.jobs) {
			return html`${head}<p class="na" id="no-jobs">This role may not read <code>claimq.jobs</code>: listing jobs needs the administer duty.</p>`;
		}
		const f = {
			state: STATES.includes(params.get('state')) ? params.get('state') : '',
			group: params.get('group') || '',
			dedup: params.get('dedup') || '',
			id: DIGITS.test(params.get('id') || '') ? params.get('id') : '',
			before: isId(params.get('before') || '') ? params.get('before') : '',
		};
		const limit = Math.min(500, Math.max(1, parseInt(params.get('limit'), 10) || 50));
		// Keyset paging: newest first, the next page starts below the last id
		// shown.  The order is the column's (k, the bigint id), not the text
		// shown, so that it is numeric and read from the primary key
		// backwards.
		const where = ['queue = $1'], values = [name];
		const add = (cond, v) => { values.push(v); where.push(cond.replace('?', `$${values.length}`)); };
		if (f.state) add('state = ?', f.state);
		if (f.group) add('group_key = ?', f.group);
		if (f.dedup) add('dedup_key = ?', f.dedup);
		if (f.id) add('job_id = ?::bigint', f.id);
		if (f.before) add('job_id < ?::bigint', f.before);
		values.push(limit + 1);
		// A dedup key without a state: the live job that holds the key from
		// its unique index, and the finished ones with it from the index of
		// finished jobs, rather than every job of the queue by id.
		const branches = f.dedup && !f.state ? LIVE_FINISHED.map((states) => [...where, `state = ANY ('${states}')`]) : [where];
		// An id beyond bigint matches no job.
		const jobs = f.id && !isId(f.id) ? [] : (await query(branches.map((w) =>
			`SELECT j.job_id AS k, j.job_id::text, state, priority, attempts, group_key, dedup_key, run_at::text,
			        enqueued_at::text, left(payload::text, 160) AS payload, left(last_error, 160) AS last_error
			   FROM claimq.jobs j WHERE ${w.join(' AND ')}`).join(' UNION ALL ') +
			` ORDER BY k DESC LIMIT $${values.length}`, values)).rows;
		const more = jobs.length > limit;
		if (more) jobs.pop();
		const filters = { state: f.state, group: f.group, dedup: f.dedup, id: f.id, limit: limit === 50 ? '' : limit };
		const selectable = can.cancel || can.retry;
		const form = html`<form method="get" class="filters" id="filters">
<label>state <select name="state"><option value="">any</option>${STATES.map((st) => html`<option${st === f.state ? new Safe(' selected') : ''}>${st}</option>`)}</select></label>
<label>group key <input name="group" value="${f.group}"></label>
<label>dedup key <input name="dedup" value="${f.dedup}"></label>
<label>job id <input name="id" value="${f.id}" inputmode="numeric"></label>
<label>per page <input name="limit" value="${limit}" size="4"></label>
<button type="submit">Filter</button> <a href="/queues/${encodeURIComponent(name)}">clear</a></form>`;
		const rows = jobs.map((j) => html`<tr data-job="${j.job_id}">
${selectable ? html`<td><input type="checkbox" name="ids" value="${j.job_id}" aria-label="select job ${j.job_id}"></td>` : ''}
<td><a href="/jobs/${j.job_id}">${j.job_id}</a></td><td class="state ${j.state}">${j.state}</td>
<td class="num">${j.priority}</td><td class="num">${j.attempts}</td><td>${j.group_key}</td><td>${j.dedup_key}</td>
<td>${j.run_at}</td><td>${j.enqueued_at}</td><td class="payload">${j.payload}</td><td class="payload">${j.last_error}</td></tr>`);
		const table = html`<table class="grid" id="jobs"><thead><tr>${selectable ? html`<th></th>` : ''}<th>job</th><th>state</th>
<th>priority</th><th>attempts</th><th>group</th><th>dedup key</th><th>run at</th><th>enqueued</th><th>payload</th><th>last error</th></tr></thead>
<tbody>${rows}</tbody></table>${jobs.length ? '' : html`<p class="empty">No jobs match.</p>`}`;
		const buttons = selectable ? html`<p><input type="hidden" name="queue" value="${name}">
${can.cancel ? html`<button type="submit" name="action" value="cancel" id="cancel-selected">Cancel selected</button> ` : ''}
${can.retry ? html`<button type="submit" name="action" value="retry_dead" id="retry-selected">Retry selected dead jobs</button>` : ''}</p>` : '';
		const pager = html`<p class="pager">${f.before ? html`<a href="/queues/${encodeURIComponent(name)}${qs(filters)}" id="first-page">First page</a> ` : ''}
${more ? html`<a href="/queues/${encodeURIComponent(name)}${qs({ ...filters, before: jobs[jobs.length - 1].job_id })}" id="next-page">Next page</a>` : ''}</p>`;
		return html`${head}<h2>Jobs</h2>${form}
${selectable ? html`<form method="get" action="/confirm">${table}${buttons}</form>` : table}${pager}`;
	}

	// A job's payload or result as JSON, whole (for a page that shows only
	// the first SHOW_CHARS of it).
	async function jobJson(ctx, id, which) {
		if (!ctx.can.jobs) throw new HttpError(403, 'this role may not read claimq.jobs: job pages need the administer duty');
		const j = (await query(`SELECT ${which === 'payload' ? 'payload' : 'result'}::text AS v FROM claimq.jobs WHERE job_id = $1::bigint`, [id])).rows[0];
		if (!j) throw new HttpError(404, `job ${id} does not exist`);
		return j.v === null ? 'null' : j.v;
	}

	async function jobPage(ctx, id, params) {
		const { can } = ctx;
		if (!can.jobs) throw new HttpError(403, 'this role may not read claimq.jobs: job pages need the administer duty');
		// Its headers (at most 8,192 bytes), if claimq.jobs has them.
		const hasHeaders = await hasColumn('jobs', 'headers');
		// Long texts are cut in the database: a page carries at most
		// SHOW_CHARS characters of each, and says how long the whole is.
		const j = (await query(
			`SELECT job_id::text, queue, state, left(x.payload, $2) AS payload, length(x.payload) AS payload_len,
			        priority, run_at::text, attempts, max_attempts, worker, expires_at::text, enqueued_at::text,
			        dedup_key, left(last_error, $2) AS last_error, length(last_error) AS last_error_len, group_key,
			        finished_at::text, left(x.result, $2) AS result, length(x.result) AS result_len, after_count, after_failed,
			        ${hasHeaders ? 'j.headers' : 'NULL::jsonb AS headers'}
			   FROM claimq.jobs j, LATERAL (SELECT jsonb_pretty(j.payload) AS payload, jsonb_pretty(j.result) AS result) x
			  WHERE job_id = $1::bigint`, [id, SHOW_CHARS])).rows[0];
		if (!j) throw new HttpError(404, `job ${id} does not exist (a job that completed in a queue that keeps nothing is gone)`);
		const trace = traceCell(j.headers, traceUrl);
		const cut = (what, len) => (len > SHOW_CHARS ? html`<p class="note" data-cut="${what}">Showing the first ${SHOW_CHARS.toLocaleString('en')} characters of ${Number(len).toLocaleString('en')}${what === 'last error' ? '' : html`;
the whole ${what} as JSON: <a href="/jobs/${j.job_id}/${what}">/jobs/${j.job_id}/${what}</a>`}.</p>` : '');
		// The jobs it runs after and its dependents, LIST_PAGE at a time,
		// keyed by id (after_gt, dependents_gt): no OFFSET.
		const from = (k) => (isId(params.get(k) || '') ? params.get(k) : '0');
		const pager = (k, rows) => {
			const more = rows.length > LIST_PAGE;
			if (more) rows.pop();
			const others = Object.fromEntries(['after_gt', 'dependents_gt'].filter((o) => o !== k).map((o) => [o, params.get(o)]));
			return html`<p class="pager">${from(k) !== '0' ? html`<a href="/jobs/${j.job_id}${qs(others)}" id="${k}-first">First ${LIST_PAGE}</a> ` : ''}
${more ? html`<a href="/jobs/${j.job_id}${qs({ ...others, [k]: rows[rows.length - 1].id })}" id="${k}-next">Next ${LIST_PAGE}</a>` : ''}</p>`;
		};
		let deps = html``;
		if (can.deps) {
			const after = (await query(
				`SELECT after_id AS k, after_id::text AS id, state, left(result::text, 200) AS result, left(last_error, 200) AS last_error
				   FROM claimq.dependencies(ARRAY[$1::bigint]) WHERE after_id > $2::bigint
				  ORDER BY after_id LIMIT $3`, [id, from('after_gt'), LIST_PAGE + 1])).rows;
			// Dependents: claimq keeps no reverse index readable by a role, so
			// look among the newest jobs that run after others.
			const dependents = (await query(
				`SELECT j.job_id::text AS id, j.queue, j.state FROM claimq.jobs j
				  WHERE j.job_id = ANY (ARRAY(
				        SELECT d.job_id FROM claimq.dependencies(ARRAY(
				               SELECT c.job_id FROM claimq.jobs c WHERE c.after_failed IS NOT NULL
				                ORDER BY c.job_id DESC LIMIT 10000)) d
				         WHERE d.after_id = $1::bigint AND d.job_id > $2::bigint))
				  ORDER BY j.job_id LIMIT $3`, [id, from('dependents_gt'), LIST_PAGE + 1])).rows;
			const afterPager = pager('after_gt', after), dependentsPager = pager('dependents_gt', dependents);
			deps = html`<h2>Runs after</h2>${after.length ? html`<table class="grid" id="after"><tr><th>job</th><th>state</th><th>result</th><th>last error</th></tr>
${after.map((a) => html`<tr data-job="${a.id}"><td><a href="/jobs/${a.id}">${a.id}</a></td><td>${a.state === null ? 'gone' : a.state}</td><td>${a.result}</td><td>${a.last_error}</td></tr>`)}</table>${afterPager}`
		: html`<p class="empty">No jobs.</p>`}
<h2>Dependents</h2>${dependents.length ? html`<table class="grid" id="dependents"><tr><th>job</th><th>queue</th><th>state</th></tr>
${dependents.map((d) => html`<tr data-job="${d.id}"><td><a href="/jobs/${d.id}">${d.id}</a></td><td>${d.queue}</td><td>${d.state}</td></tr>`)}</table>${dependentsPager}`
		: html`<p class="empty">None among the 10,000 newest jobs that run after others.</p>`}`;
		}
		const field = (k, v) => html`<tr><th>${k}</th><td data-field="${k}">${v}</td></tr>`;
		const timeline = [['enqueued', j.enqueued_at], ['run at', j.run_at], ['lease expires', j.expires_at], ['finished', j.finished_at]]
			.filter((t) => t[1]).sort((a, b) => (a[1] < b[1] ? -1 : 1));
		const live = ['waiting', 'pending', 'claimed', 'running'].includes(j.state);
		return html`<p>${live && can.cancel ? actionButton('cancel', 'Cancel job', { ids: j.job_id, queue: j.queue }) : ''}
${j.state === 'dead' && can.retry ? actionButton('retry_dead', 'Retry job', { ids: j.job_id, queue: j.queue }) : ''}</p>
<table class="fields" id="job">
${field('queue', html`<a href="/queues/${encodeURIComponent(j.queue)}">${j.queue}</a>`)}
${field('state', j.state)}${field('attempts', `${j.attempts}${j.max_attempts ? ` of ${j.max_attempts}` : ''}`)}
${field('priority', j.priority)}${field('worker', j.worker)}${field('group key', j.group_key)}${field('dedup key', j.dedup_key)}
${trace ? field('trace', trace) : ''}
${field('after', j.after_failed ? `${j.after_count} unfinished; if one fails: ${j.after_failed}` : '')}
${field('last error', j.last_error)}</table>${cut('last error', j.last_error_len)}
<h2>Timeline</h2><ol class="timeline">${timeline.map((t) => html`<li><span>${t[0]}</span> ${t[1]}</li>`)}</ol>
<h2>Headers</h2>${hasHeaders ? headersTable(j.headers) : html`<p class="na" id="headers-na">This claimq keeps no job headers (claimq.jobs has no column headers).</p>`}
<h2>Payload</h2>${cut('payload', j.payload_len)}<pre id="payload">${j.payload}</pre>
<h2>Result</h2>${cut('result', j.result_len)}<pre id="result">${j.result === null ? '(none)' : j.result}</pre>${deps}`;
	}

	async function groupsPage(ctx) {
		if (!ctx.can.groups) throw new HttpError(403, 'this role may not read claimq.group_stats');
		const rows = (await query(
			`SELECT queue, group_key, ready::text, in_flight::text, blocked FROM claimq.group_stats
			  ORDER BY queue, group_key LIMIT 1001`)).rows;
		const cut = rows.length > 1000;
		if (cut) rows.pop();
		return html`<table class="grid" id="groups"><thead><tr><th>queue</th><th>group key</th><th>ready</th><th>in flight</th><th>blocked</th></tr></thead><tbody>
${rows.map((g) => html`<tr data-queue="${g.queue}" data-group="${g.group_key}"><td><a href="/queues/${encodeURIComponent(g.queue)}">${g.queue}</a></td>
<td><a href="/queues/${encodeURIComponent(g.queue)}${qs({ group: g.group_key })}">${g.group_key}</a></td>
<td class="num" data-col="ready">${g.ready}</td><td class="num" data-col="in_flight">${g.in_flight}</td><td>${g.blocked ? 'blocked' : ''}</td></tr>`)}</tbody></table>
${rows.length ? '' : html`<p class="empty">No group has live jobs.</p>`}${cut ? html`<p class="note">The first 1,000 groups.</p>` : ''}
${fairShares()}`;
	}

	// Each fair queue's tenants: what they were handed over the last
	// minute, sampled from metrics(), against their weights' parts.
	function fairShares() {
		const queues = sampler.fairQueues();
		if (!queues.length) return '';
		const pct = (x) => (x === null ? '' : `${(100 * x).toFixed(1)}%`);
		const tables = queues.map((q) => {
			const s = sampler.share(q);
			if (!s) return html`<p class="na" data-queue="${q}">${q}: collecting samples (every ${sampleMs / 1000} s)…</p>`;
			return html`<table class="grid fair" data-queue="${q}"><caption><a href="/queues/${encodeURIComponent(q)}">${q}</a>, the last ${Math.round(s.seconds)} s</caption>
<thead><tr><th>tenant</th><th>weight</th><th>jobs handed</th><th>share</th><th>weight's part</th></tr></thead><tbody>
${s.tenants.map((t) => html`<tr data-tenant="${t.key === null ? '' : t.key}"${t.key === null ? html` data-keyless="1"` : ''}><td>${t.key === null ? html`<i>no group key</i>` : t.key}</td>
<td class="num" data-col="weight">${t.weight}</td><td class="num" data-col="handed">${t.handed}</td><td class="num" data-col="share">${pct(t.share)}</td><td class="num" data-col="part">${pct(t.part)}</td></tr>`)}</tbody></table>`;
		});
		return html`<h2 id="fair">Fair queues</h2>
<p class="note">Each tenant's jobs over the last minute, from <code>claimq.metrics()</code> (its
<code>claimq_fair_handed_total</code>, sampled every ${sampleMs / 1000} s), against its weight's part of the weights of
the tenants with live jobs: a tenant with a ready job throughout gets at least its weight's part.</p>
${tables}`;
	}

	async function schedulesPage(ctx) {
		const { can } = ctx;
		if (!can.schedules) throw new HttpError(403, 'this role may not read claimq.schedules');
		const withHeaders = await hasColumn('schedules', 'headers');
		const rows = (await query(
			`SELECT schedule, queue, cron, time_zone, payload::text, priority, missed, enabled,
			        next_run_at::text, last_run_at::text, last_job_id::text${withHeaders ? ', headers::text' : ''}
			   FROM claimq.schedules ORDER BY schedule`)).rows;
		return html`<p>${can.fire ? actionButton('fire_schedules', 'Fire due schedules now', {}) : ''}</p>
<table class="grid" id="schedules"><thead><tr><th>schedule</th><th>queue</th><th>cron</th><th>time zone</th><th>enabled</th>
<th>next run</th><th>last run</th><th>last job</th><th>missed</th><th>priority</th><th>payload</th>${withHeaders ? html`<th>headers</th>` : ''}<th></th></tr></thead><tbody>
${rows.map((s) => html`<tr data-schedule="${s.schedule}"><td>${s.schedule}</td><td><a href="/queues/${encodeURIComponent(s.queue)}">${s.queue}</a></td>
<td><code>${s.cron}</code></td><td>${s.time_zone}</td><td>${s.enabled ? 'yes' : 'no'}</td>
<td data-col="next_run_at">${s.next_run_at}</td><td data-col="last_run_at">${s.last_run_at}</td>
<td>${s.last_job_id && can.jobs ? html`<a href="/jobs/${s.last_job_id}">${s.last_job_id}</a>` : s.last_job_id}</td>
<td>${s.missed}</td><td class="num">${s.priority}</td><td class="payload">${s.payload}</td>${withHeaders ? html`<td class="payload" data-col="headers">${s.headers}</td>` : ''}
<td>${can.run ? actionButton('run_schedule', 'Run now', { schedule: s.schedule }) : ''}</td></tr>`)}</tbody></table>
${rows.length ? '' : html`<p class="empty">No schedules.</p>`}
<p class="note">"Run now" enqueues one job with the schedule's payload, priority and headers into its queue (claimq.enqueue: the
produce duty); the schedule's own next run is unchanged. "Fire due schedules" calls claimq.fire_schedules() (administer).</p>`;
	}

	async function reclaimerPage(ctx) {
		if (!ctx.can.reclaimer) throw new HttpError(403, 'this role may not read claimq.reclaimer_status');
		const rows = (await query(
			`SELECT database, pid, last_run::text, last_reclaimed::text, total_reclaimed::text, last_error
			   FROM claimq.reclaimer_status`)).rows;
		return html`<table class="fields" id="reclaimer">${rows.map((r) => html`
<tr><th>database</th><td>${r.database}</td></tr><tr><th>pid</th><td data-field="pid">${r.pid === null ? '(no worker running)' : r.pid}</td></tr>
<tr><th>last run</th><td data-field="last_run">${r.last_run}</td></tr><tr><th>last reclaimed</th><td>${r.last_reclaimed}</td></tr>
<tr><th>total reclaimed</th><td>${r.total_reclaimed}</td></tr><tr><th>last error</th><td data-field="last_error">${r.last_error}</td></tr>`)}</table>
${rows.length ? '' : html`<p class="empty">The reclaimer does not serve this database (claimq.databases).</p>`}`;
	}

	async function metricsText() {
		return (await query('SELECT claimq.metrics() AS m')).rows[0].m;
	}

	// ---- actions ----------------------------------------------------------

	function ids(p) {
		const list = p.getAll('ids').flatMap((v) => v.split(/[\s,]+/)).filter((v) => v !== '');
		for (const v of list) if (!isId(v)) throw new HttpError(400, `invalid job id "${v}"`);
		if (list.length > MAX_IDS) throw new HttpError(400, `at most ${MAX_IDS} jobs at a time`);
		return [...new Set(list)];
	}
	function need(p, k) {
		const v = p.get(k);
		if (!v) throw new HttpError(400, `${k} is required`);
		return v;
	}
	const back = (p) => (p.get('queue') ? html`<a href="/queues/${encodeURIComponent(p.get('queue'))}">back to queue ${p.get('queue')}</a>` : html`<a href="/">back to queues</a>`);

	const actions = {
		cancel: {
			allowed: (can) => can.cancel,
			describe: (p) => {
				const l = ids(p);
				if (!l.length) throw new HttpError(400, 'select at least one job');
				return html`Cancel ${l.length} job${l.length > 1 ? 's' : ''}: ${l.map((i) => html`<a href="/jobs/${i}">${i}</a> `)}`;
			},
			run: async (p) => {
				const l = ids(p);
				if (!l.length) throw new HttpError(400, 'select at least one job');
				const rows = (await query(
					'SELECT job_id::text, outcome, state FROM claimq.cancel($1::bigint[])', [l])).rows;
				return html`<table class="grid" id="outcomes"><tr><th>job</th><th>outcome</th><th>state</th></tr>
${rows.map((r) => html`<tr data-job="${r.job_id}"><td><a href="/jobs/${r.job_id}">${r.job_id}</a></td><td>${r.outcome}</td><td>${r.state}</td></tr>`)}</table>`;
			},
		},
		retry_dead: {
			allowed: (can) => can.retry,
			describe: (p) => {
				const l = ids(p);
				return l.length ? html`Retry ${l.length} dead job${l.length > 1 ? 's' : ''} of queue ${need(p, 'queue')}: ${l.map((i) => html`<a href="/jobs/${i}">${i}</a> `)}`
					: html`Retry every dead job of queue ${need(p, 'queue')}`;
			},
			run: async (p) => {
				const l = ids(p);
				const n = (await query('SELECT claimq.retry_dead($1, $2::bigint[])::text AS n',
					[need(p, 'queue'), l.length ? l : null])).rows[0].n;
				return html`<p id="outcome">${n} dead job${n === '1' ? '' : 's'} made pending again.</p>`;
			},
		},
		pause: {
			allowed: (can) => can.pause,
			describe: (p) => html`Pause queue ${need(p, 'queue')}: claims get nothing from it until it is resumed.`,
			run: async (p) => {
				await query('SELECT claimq.pause_queue($1)', [need(p, 'queue')]);
				return html`<p id="outcome">Queue ${p.get('queue')} is paused.</p>`;
			},
		},
		resume: {
			allowed: (can) => can.resume,
			describe: (p) => html`Resume queue ${need(p, 'queue')}.`,
			run: async (p) => {
				await query('SELECT claimq.resume_queue($1)', [need(p, 'queue')]);
				return html`<p id="outcome">Queue ${p.get('queue')} is resumed.</p>`;
			},
		},
		fire_schedules: {
			allowed: (can) => can.fire,
			describe: () => html`Enqueue the due occurrences of every schedule now (claimq.fire_schedules()).`,
			run: async () => {
				const n = (await query('SELECT claimq.fire_schedules()::text AS n')).rows[0].n;
				return html`<p id="outcome">${n} job${n === '1' ? '' : 's'} enqueued.</p>`;
			},
		},
		run_schedule: {
			allowed: (can) => can.run,
			describe: (p) => html`Enqueue one job of schedule ${need(p, 'schedule')} now, with its payload, priority and headers.`,
			run: async (p) => {
				const headers = (await hasColumn('schedules', 'headers')) ? ', headers => s.headers' : '';
				const r = (await query(
					`SELECT s.queue, claimq.enqueue(s.queue, s.payload, priority => s.priority${headers})::text AS job_id
					   FROM claimq.schedules s WHERE s.schedule = $1`, [need(p, 'schedule')])).rows[0];
				if (!r) throw new HttpError(404, `schedule "${p.get('schedule')}" does not exist`);
				return html`<p id="outcome">Job <a href="/jobs/${r.job_id}">${r.job_id}</a> enqueued into ${r.queue}.</p>`;
			},
		},
	};

	function actionOf(p) {
		const a = actions[p.get('action')];
		if (!a) throw new HttpError(400, 'unknown action');
		return a;
	}

	function confirmPage(ctx, p) {
		const a = actionOf(p);
		if (!a.allowed(ctx.can)) throw new HttpError(403, `role ${ctx.info.role} may not do this`);
		const fields = ['action', 'queue', 'schedule'].filter((k) => p.get(k));
		return html`<form method="post" action="/action" class="confirm" id="confirm">
<p>${a.describe(p)}</p>
<input type="hidden" name="csrf" value="${ctx.csrf}">
${fields.map((k) => html`<input type="hidden" name="${k}" value="${p.get(k)}">`)}
${ids(p).length ? html`<input type="hidden" name="ids" value="${ids(p).join(',')}">` : ''}
<button type="submit" class="danger" id="confirm-button">Confirm</button> ${back(p)}</form>`;
	}

	// Same origin and this process's token, or refuse before any SQL.
	function checkPost(req, p) {
		const host = req.headers.host;
		const origin = req.headers.origin;
		if (origin !== undefined && origin !== `http://${host}`) throw new HttpError(403, `cross-origin request refused (Origin ${origin})`);
		const site = req.headers['sec-fetch-site'];
		if (site !== undefined && site !== 'same-origin' && site !== 'none') throw new HttpError(403, 'cross-site request refused');
		const token = Buffer.from(p.get('csrf') || '');
		const want = Buffer.from(csrf);
		if (token.length !== want.length || !crypto.timingSafeEqual(token, want))
			throw new HttpError(403, 'missing or invalid CSRF token: submit the form from the dashboard');
	}

	function readBody(req) {
		return new Promise((resolve, reject) => {
			let size = 0;
			const chunks = [];
			req.on('data', (c) => {
				size += c.length;
				if (size > 1 << 20) { reject(new HttpError(413, 'request too large')); req.destroy(); } else chunks.push(c);
			});
			req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
			req.on('error', reject);
		});
	}

	// ---- routing ----------------------------------------------------------

	async function handle(req, res) {
		let ctx = { csrf, info: {}, can: {} };
		try {
			if (allowedHosts && !allowedHosts.includes(String(req.headers.host).toLowerCase()))
				throw new HttpError(421, 'unexpected Host header');
			const url = new URL(req.url, 'http://dashboard');
			const p = url.pathname;
			if (p === '/style.css' && req.method === 'GET') return send(res, 200, 'text/css; charset=utf-8', css);
			if (p === '/favicon.ico') return send(res, 404, 'text/plain', '');
			if (req.method === 'POST') {
				if (p !== '/action') throw new HttpError(404, 'not found');
				const type = String(req.headers['content-type'] || '');
				if (!type.startsWith('application/x-www-form-urlencoded')) throw new HttpError(415, 'form data expected');
				const form = new URLSearchParams(await readBody(req));
				checkPost(req, form);
				ctx = await whoami();
				const a = actionOf(form);
				// Not a.allowed(): the database decides; a refusal is a 403 page.
				const body = await a.run(form);
				return page(res, ctx, 200, 'Done', html`${body}<p>${back(form)}</p>`);
			}
			if (req.method !== 'GET' && req.method !== 'HEAD') throw new HttpError(405, 'method not allowed');
			if (p === '/action') throw new HttpError(405, 'actions are POSTed from their confirmation page');
			ctx = await whoami();
			let m;
			if (p === '/') return page(res, ctx, 200, 'Queues', await overview(ctx));
			if ((m = p.match(/^\/queues\/([^/]+)$/))) {
				let name;
				try {
					name = decodeURIComponent(m[1]);
				} catch (e) {
					throw new HttpError(400, 'the queue name in the address is not valid percent-encoding');
				}
				return page(res, ctx, 200, `Queue ${name}`, await queuePage(ctx, name, url.searchParams));
			}
			if ((m = p.match(/^\/jobs\/([^/]+?)(\/payload|\/result)?$/))) {
				if (!DIGITS.test(m[1])) throw new HttpError(400, 'a job id is a number');
				if (!isId(m[1])) throw new HttpError(404, `job ${m[1]} does not exist (job ids are at most ${MAX_ID})`);
				if (m[2]) return send(res, 200, 'application/json; charset=utf-8', await jobJson(ctx, m[1], m[2].slice(1)));
				return page(res, ctx, 200, `Job ${m[1]}`, await jobPage(ctx, m[1], url.searchParams));
			}
			if (p === '/groups') return page(res, ctx, 200, 'Groups', await groupsPage(ctx));
			if (p === '/schedules') return page(res, ctx, 200, 'Schedules', await schedulesPage(ctx));
			if (p === '/reclaimer') return page(res, ctx, 200, 'Reclaimer', await reclaimerPage(ctx));
			if (p === '/metrics') {
				if (!ctx.can.metrics) throw new HttpError(403, 'this role may not call claimq.metrics()');
				return page(res, ctx, 200, 'Metrics', html`<p><a href="/metrics.txt">as text</a></p><pre id="metrics">${await metricsText()}</pre>`);
			}
			if (p === '/metrics.txt') return send(res, 200, 'text/plain; version=0.0.4; charset=utf-8', await metricsText());
			if (p === '/confirm') return page(res, ctx, 200, 'Confirm', confirmPage(ctx, url.searchParams));
			throw new HttpError(404, 'not found');
		} catch (e) {
			let status = e.status, title = 'Error';
			if (!status && /^[0-9A-Z]{5}$/.test(e.code || '')) {	// a SQLSTATE: from PostgreSQL
				status = e.code === '42501' ? 403 : e.code === '42704' ? 404 : /^(22|23|2B|55)/.test(e.code) ? 409 : 500;
			}
			if (!status && e.syscall) status = 503;	// the database (or pgbouncer) cannot be reached
			if (!status) { status = 500; log(`claimq-dashboard: ${e.stack || e}`); }
			if (status === 403) title = 'Refused';
			if (status === 404) title = 'Not found';
			try {
				page(res, ctx, status, title, html`<div class="error" id="error"><p>${e.message}</p>
${e.code && !e.syscall ? html`<p>SQLSTATE <code id="sqlstate">${e.code}</code></p>` : ''}${e.detail ? html`<p>${e.detail}</p>` : ''}${e.hint ? html`<p>Hint: ${e.hint}</p>` : ''}</div>
<p><a href="/">back to queues</a></p>`);
			} catch (e2) {
				res.destroy();
			}
		}
	}

	const server = http.createServer((req, res) => { handle(req, res); });
	return {
		server, pool, sampler,
		start() {
			return new Promise((resolve, reject) => {
				server.once('error', reject);
				server.listen(port, listen, () => {
					const a = server.address();
					if (['127.0.0.1', '::1', 'localhost'].includes(listen)) {
						allowedHosts = [`127.0.0.1:${a.port}`, `localhost:${a.port}`, `[::1]:${a.port}`];
					}
					sampler.start();
					resolve(a);
				});
			});
		},
		async stop() {
			sampler.stop();
			await new Promise((r) => server.close(r));
			await pool.end();
		},
	};
}

module.exports = { createDashboard };
