'use strict';
// A job's headers on its page, and the trace id of its W3C Trace Context
// (https://www.w3.org/TR/trace-context/): the traceparent header parsed
// and checked as the recommendation says, and a link to the trace built
// from the operator's URL template (--trace-url), whose {trace_id} is
// replaced by the trace id, URL-encoded.  Header names and values are the
// producer's data: they reach the page through esc like everything else.

const { html } = require('./html');

const PLACEHOLDER = '{trace_id}';
// version-traceid-parentid-flags, lower-case hex; a version after 00 may
// carry more after a dash, which a reader of version 00 ignores.
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\s\S]*)?$/;
const ZEROS = /^0+$/;

// The fields of a traceparent value, or null if it is not a valid one:
// version ff is invalid, version 00 is exactly 55 characters, and neither
// the trace id nor the parent id may be all zeros.
function parseTraceparent(value) {
	if (typeof value !== 'string') return null;
	const m = TRACEPARENT.exec(value);
	if (!m) return null;
	const [, version, traceId, parentId, flags, rest] = m;
	if (version === 'ff') return null;
	if (version === '00' && rest !== undefined) return null;
	if (ZEROS.test(traceId) || ZEROS.test(parentId)) return null;
	return { version, traceId, parentId, flags, sampled: (parseInt(flags, 16) & 1) === 1 };
}

// Why a URL template cannot be used, or null if it can: it must hold
// {trace_id} and, with a trace id in its place, be an http or https URL.
function checkTraceUrl(template) {
	if (typeof template !== 'string' || !template.includes(PLACEHOLDER)) return `the URL template must contain ${PLACEHOLDER}`;
	let u;
	try {
		u = new URL(traceUrl(template, '4bf92f3577b34da6a3ce929d0e0e4736'));
	} catch (e) {
		return `not a URL: ${template}`;
	}
	if (u.protocol !== 'http:' && u.protocol !== 'https:') return `an http or https URL, not ${u.protocol}`;
	return null;
}

// The template with every {trace_id} replaced by the trace id, URL-encoded.
function traceUrl(template, traceId) {
	return template.split(PLACEHOLDER).join(encodeURIComponent(traceId));
}

// A job's headers in name order, each value as text (the values are
// strings; anything else is shown as JSON).
function headerRows(headers) {
	if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) return [];
	return Object.keys(headers).sort().map((k) => [k, typeof headers[k] === 'string' ? headers[k] : JSON.stringify(headers[k])]);
}

// The trace cell of a job's page: the trace id of a valid traceparent,
// a link if there is a template; null if the job has no traceparent.
function traceCell(headers, template) {
	const rows = headerRows(headers);
	const tp = rows.find(([k]) => k === 'traceparent');
	if (!tp) return null;
	const t = parseTraceparent(tp[1]);
	if (!t) return html`<span class="na" id="trace-invalid">the traceparent header is not valid W3C Trace Context</span>`;
	if (!template) return html`<code id="trace-id">${t.traceId}</code>`;
	return html`<a href="${traceUrl(template, t.traceId)}" id="trace-link" rel="noopener noreferrer"><code id="trace-id">${t.traceId}</code></a>`;
}

// The headers table of a job's page.
function headersTable(headers) {
	const rows = headerRows(headers);
	if (!rows.length) return html`<p class="empty" id="no-headers">No headers.</p>`;
	return html`<table class="grid" id="headers"><thead><tr><th>name</th><th>value</th></tr></thead><tbody>
${rows.map(([k, v]) => html`<tr data-header="${k}"><td class="header-name">${k}</td><td class="header-value">${v}</td></tr>`)}</tbody></table>`;
}

module.exports = { PLACEHOLDER, parseTraceparent, checkTraceUrl, traceUrl, headerRows, traceCell, headersTable };
