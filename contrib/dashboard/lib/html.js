'use strict';
// HTML for claimq-dashboard: one escaping function (esc), a tagged
// template (html) that passes every interpolated value through it, the
// page layout and the server-drawn SVG charts.  Payloads, keys and errors
// are user data: nothing reaches a page without going through esc, except
// markup that html itself built (a Safe).

class Safe {
	constructor(s) { this.s = s; }
	toString() { return this.s; }
}

const entities = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

function esc(v) {
	if (v instanceof Safe) return v.s;
	if (Array.isArray(v)) return v.map(esc).join('');
	if (v === null || v === undefined || v === false) return '';
	return String(v).replace(/[&<>"']/g, (c) => entities[c]);
}

function html(strings, ...values) {
	let out = strings[0];
	for (let i = 0; i < values.length; i++) out += esc(values[i]) + strings[i + 1];
	return new Safe(out);
}

// A query string from an object, leaving out empty values.
function qs(params) {
	const p = new URLSearchParams();
	for (const [k, v] of Object.entries(params)) {
		if (v !== null && v !== undefined && v !== '') p.set(k, String(v));
	}
	const s = p.toString();
	return s ? '?' + s : '';
}

const nav = [
	['/', 'Queues'], ['/groups', 'Groups'], ['/schedules', 'Schedules'],
	['/reclaimer', 'Reclaimer'], ['/metrics', 'Metrics'],
];

// The whole page.  ctx: { title, info: {edition, version, role}, can, csrf }.
function layout(ctx, body) {
	const info = ctx.info || {};
	const mode = ctx.readOnly ? html`<span class="badge">read-only</span>` : '';
	return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="${ctx.csrf}">
<title>${ctx.title} · claimq</title>
<link rel="stylesheet" href="/style.css">
</head><body>
<header><a class="brand" href="/">claimq</a>
<nav>${nav.map(([href, label]) => html`<a href="${href}">${label}</a>`)}</nav>
<span class="who">${info.role} @ ${info.database} · ${info.edition} edition ${info.version} ${mode}</span>
</header>
<main>
<h1>${ctx.title}</h1>
${body}
</main>
</body></html>
`.s;
}

// A line chart of one or more series over a time axis, as inline SVG.
// series: [{ name, cls, segments: [[[t ms, value], ...], ...] }]: one
// polyline per segment, none across the times of breaks (counters that
// went down), which are marked with a dashed line.
function lineChart(series, { width = 560, height = 140, unit = '', since, until, breaks = [] } = {}) {
	const pad = { l: 48, r: 8, t: 8, b: 20 };
	const all = series.flatMap((s) => s.segments.flat());
	const t1 = until || Date.now();
	const t0 = since || (all.length ? Math.min(...all.map((p) => p[0])) : t1 - 3600e3);
	const top = Math.max(0, ...all.map((p) => p[1]));
	const vmax = top > 0 ? top : 1;
	const x = (t) => pad.l + ((t - t0) / Math.max(1, t1 - t0)) * (width - pad.l - pad.r);
	const y = (v) => height - pad.b - (v / vmax) * (height - pad.t - pad.b);
	const fmt = (v) => (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toPrecision(2));
	const lines = series.map((s) => s.segments.map((seg, i) => {
		const pts = seg.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ');
		return html`<polyline class="${s.cls}" data-segment="${i}" fill="none" points="${pts}"><title>${s.name}</title></polyline>`;
	}));
	const marks = breaks.map((t) => html`<line class="break" x1="${x(t).toFixed(1)}" y1="${pad.t}" x2="${x(t).toFixed(1)}" y2="${height - pad.b}"><title>counters went down (reset_counters() or a server restart)</title></line>`);
	const span = (t1 - t0) / 1000;
	const ago = span < 120 ? `-${Math.round(span)} s` : `-${Math.round(span / 60)} min`;
	return html`<figure class="chart"><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${series.map((s) => s.name).join(', ')}">
<line class="axis" x1="${pad.l}" y1="${height - pad.b}" x2="${width - pad.r}" y2="${height - pad.b}"/>
<line class="axis" x1="${pad.l}" y1="${pad.t}" x2="${pad.l}" y2="${height - pad.b}"/>
<text x="${pad.l - 4}" y="${pad.t + 10}" text-anchor="end">${fmt(vmax)}${unit}</text>
<text x="${pad.l - 4}" y="${height - pad.b}" text-anchor="end">0</text>
<text x="${pad.l}" y="${height - 4}">${ago}</text>
<text x="${width - pad.r}" y="${height - 4}" text-anchor="end">now</text>
${marks}${lines}</svg>
<figcaption>${series.map((s) => html`<span class="key ${s.cls}">${s.name}</span> `)}</figcaption></figure>`;
}

module.exports = { Safe, esc, html, qs, layout, lineChart };
