'use strict';
// lib/trace.js: the traceparent header parsed and checked as W3C Trace
// Context says, the link to a trace built from the operator's URL
// template, a job's headers rendered as text, and claimq-dashboard's
// --trace-url and $CLAIMQ_DASHBOARD_TRACE_URL refused when they are no
// http(s) template.  No server needed: node t/trace.js; prints
// "ok N - ..." lines and exits 1 if any check failed.

const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { parseTraceparent, checkTraceUrl, traceUrl, headerRows, traceCell, headersTable } = require('../lib/trace');
const { check, done } = require('./check');


// The example of the W3C recommendation.
const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT = '00f067aa0ba902b7';
const TP = `00-${TRACE}-${PARENT}-01`;

check('traceparent: version 00, its trace id, parent id and flags', () => {
	assert.deepEqual(parseTraceparent(TP), { version: '00', traceId: TRACE, parentId: PARENT, flags: '01', sampled: true });
	assert.equal(parseTraceparent(`00-${TRACE}-${PARENT}-00`).sampled, false);
	// Flags other than sampled are kept, not refused.
	assert.equal(parseTraceparent(`00-${TRACE}-${PARENT}-ff`).flags, 'ff');
});

check('traceparent: an all-zero trace id or parent id is invalid', () => {
	assert.equal(parseTraceparent(`00-${'0'.repeat(32)}-${PARENT}-01`), null);
	assert.equal(parseTraceparent(`00-${TRACE}-${'0'.repeat(16)}-01`), null);
	// One non-zero digit is enough.
	assert.equal(parseTraceparent(`00-${'0'.repeat(31)}1-${'0'.repeat(15)}1-01`).traceId, `${'0'.repeat(31)}1`);
});

check('traceparent: upper-case hex, wrong lengths, separators or characters are invalid', () => {
	for (const bad of [
		TP.toUpperCase(),
		`00-${TRACE.toUpperCase()}-${PARENT}-01`,
		`00-${TRACE}-${PARENT.toUpperCase()}-01`,
		`00-${TRACE}-${PARENT}-0A`,
		`0-${TRACE}-${PARENT}-01`,
		`000-${TRACE}-${PARENT}-01`,
		`00-${TRACE.slice(1)}-${PARENT}-01`,
		`00-${TRACE}0-${PARENT}-01`,
		`00-${TRACE}-${PARENT.slice(1)}-01`,
		`00-${TRACE}-${PARENT}0-01`,
		`00-${TRACE}-${PARENT}-1`,
		`00-${TRACE}-${PARENT}-011`,
		`00_${TRACE}_${PARENT}_01`,
		`00-${TRACE.slice(0, 31)}g-${PARENT}-01`,
		` ${TP}`, `${TP} `, `${TP}\n`,
		'', '00', 'not a traceparent',
	]) {
		assert.equal(parseTraceparent(bad), null, JSON.stringify(bad));
	}
	for (const notString of [null, undefined, 1, {}, [TP]]) assert.equal(parseTraceparent(notString), null);
});

check('traceparent: version 00 has nothing after the flags; version ff is invalid', () => {
	assert.equal(parseTraceparent(`${TP}-`), null);
	assert.equal(parseTraceparent(`${TP}-extra`), null);
	assert.equal(parseTraceparent(`ff-${TRACE}-${PARENT}-01`), null);
});

check('traceparent: a later version is read by its first four fields, and what follows a dash ignored', () => {
	assert.equal(parseTraceparent(`01-${TRACE}-${PARENT}-01`).traceId, TRACE);
	assert.equal(parseTraceparent(`cc-${TRACE}-${PARENT}-01-what-the-future-adds`).traceId, TRACE);
	assert.equal(parseTraceparent(`cc-${TRACE}-${PARENT}-01what`), null);
	assert.equal(parseTraceparent(`cc-${TRACE}-${PARENT}-0`), null);
	assert.equal(parseTraceparent(`Cc-${TRACE}-${PARENT}-01`), null);
});

check('link: every {trace_id} of the template replaced by the trace id, URL-encoded', () => {
	assert.equal(traceUrl('https://jaeger.example/trace/{trace_id}', TRACE), `https://jaeger.example/trace/${TRACE}`);
	assert.equal(traceUrl('https://t.example/?a={trace_id}&b={trace_id}', TRACE), `https://t.example/?a=${TRACE}&b=${TRACE}`);
	// Whatever it is given is encoded (a parsed trace id is hex and encodes to itself).
	assert.equal(traceUrl('https://t.example/{trace_id}', 'a/b?c&d="<e>'), 'https://t.example/a%2Fb%3Fc%26d%3D%22%3Ce%3E');
	// $ patterns of String.replace mean nothing here.
	assert.equal(traceUrl('https://t.example/$&/{trace_id}', '$&'), 'https://t.example/$&/%24%26');
});

check('template: must hold {trace_id} and be an http or https URL', () => {
	assert.equal(checkTraceUrl('https://jaeger.example/trace/{trace_id}'), null);
	assert.equal(checkTraceUrl('http://127.0.0.1:3000/explore?left={"queries":[{"query":"{trace_id}"}]}'), null);
	assert.match(checkTraceUrl('https://jaeger.example/trace/'), /must contain \{trace_id\}/);
	assert.match(checkTraceUrl('https://jaeger.example/trace/{traceid}'), /must contain \{trace_id\}/);
	assert.match(checkTraceUrl('javascript:alert("{trace_id}")'), /http or https/);
	assert.match(checkTraceUrl('data:text/html,{trace_id}'), /http or https/);
	assert.match(checkTraceUrl('/trace/{trace_id}'), /not a URL/);
	assert.match(checkTraceUrl('{trace_id}'), /not a URL/);
});

check('headers: in name order, values as text', () => {
	assert.deepEqual(headerRows({ tracestate: 'a=1', traceparent: TP, 'x-b': 'v' }),
		[['traceparent', TP], ['tracestate', 'a=1'], ['x-b', 'v']]);
	assert.deepEqual(headerRows({ n: 1, o: { p: true } }), [['n', '1'], ['o', '{"p":true}']]);
	assert.deepEqual(headerRows(null), []);
	assert.deepEqual(headerRows([TP]), []);
});

const KEY = '<img src=x onerror=alert(4)>';
const VALUE = '"><script>alert(5)</script>';
check('headers table: names and values escaped, no markup of theirs', () => {
	const out = String(headersTable({ [KEY]: VALUE, traceparent: TP }));
	assert.ok(!out.includes('<img') && !out.includes('<script'), out);
	assert.ok(out.includes('&lt;img src=x onerror=alert(4)&gt;'), out);
	assert.ok(out.includes('data-header="&lt;img src=x onerror=alert(4)&gt;"'), out);
	assert.ok(out.includes('&quot;&gt;&lt;script&gt;alert(5)&lt;/script&gt;'), out);
	assert.match(String(headersTable({})), /id="no-headers"/);
	assert.match(String(headersTable(null)), /id="no-headers"/);
});

check('trace cell: a link from the template, the bare trace id without one, nothing for an invalid or missing traceparent', () => {
	const linked = String(traceCell({ traceparent: TP }, 'https://tempo.example/explore?trace={trace_id}&org=ops'));
	assert.equal(linked, `<a href="https://tempo.example/explore?trace=${TRACE}&amp;org=ops" id="trace-link" rel="noopener noreferrer"><code id="trace-id">${TRACE}</code></a>`);
	assert.equal(String(traceCell({ traceparent: TP }, null)), `<code id="trace-id">${TRACE}</code>`);
	const invalid = String(traceCell({ traceparent: `00-${'0'.repeat(32)}-${PARENT}-01` }, 'https://j.example/{trace_id}'));
	assert.match(invalid, /id="trace-invalid"/);
	assert.ok(!invalid.includes('href') && !invalid.includes('trace-id'), invalid);
	assert.equal(traceCell({ tracestate: 'a=1' }, 'https://j.example/{trace_id}'), null);
	assert.equal(traceCell(null, 'https://j.example/{trace_id}'), null);
	// The header's name is traceparent exactly, as W3C Trace Context writes it.
	assert.equal(traceCell({ Traceparent: TP }, null), null);
	// A template's quotes and angle brackets stay inside the attribute.
	assert.ok(String(traceCell({ traceparent: TP }, 'https://j.example/{trace_id}?q="><b>')).includes('?q=&quot;&gt;&lt;b&gt;"'));
});

const bin = path.join(__dirname, '..', 'bin', 'claimq-dashboard.js');
const run = (args, env = {}) => spawnSync(process.execPath, [bin, ...args],
	{ encoding: 'utf8', env: { ...process.env, CLAIMQ_DASHBOARD_TRACE_URL: '', ...env } });
check('claimq-dashboard: --trace-url and $CLAIMQ_DASHBOARD_TRACE_URL that are no http(s) template are refused before it starts', () => {
	let r = run(['postgres://nobody@127.0.0.1:1/none', '--trace-url', 'https://jaeger.example/trace/']);
	assert.equal(r.status, 2);
	assert.match(r.stderr, /^claimq-dashboard: --trace-url: the URL template must contain \{trace_id\}/);
	r = run(['postgres://nobody@127.0.0.1:1/none', '--trace-url=javascript:alert({trace_id})']);
	assert.equal(r.status, 2);
	assert.match(r.stderr, /^claimq-dashboard: --trace-url: an http or https URL/);
	r = run(['postgres://nobody@127.0.0.1:1/none'], { CLAIMQ_DASHBOARD_TRACE_URL: 'ftp://x.example/{trace_id}' });
	assert.equal(r.status, 2);
	assert.match(r.stderr, /^claimq-dashboard: \$CLAIMQ_DASHBOARD_TRACE_URL: an http or https URL/);
	r = run(['--help'], { CLAIMQ_DASHBOARD_TRACE_URL: 'https://jaeger.example/trace/{trace_id}' });
	assert.equal(r.status, 0);
	assert.match(r.stdout, /--trace-url/);
});

done();
