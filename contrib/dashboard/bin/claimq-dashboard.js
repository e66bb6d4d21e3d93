#!/usr/bin/env node
'use strict';
// claimq-dashboard [--db] postgres://... [--port 8080] [--listen 127.0.0.1] [--sample-interval 5] [--trace-url URL]

const { createDashboard } = require('../lib/server');
const { checkTraceUrl } = require('../lib/trace');

const usage = `usage: claimq-dashboard [--db] CONNECTION_STRING [--port 8080] [--listen 127.0.0.1] [--sample-interval SECONDS]
                        [--trace-url URL_TEMPLATE]

Serves claimq's operator dashboard for the database of CONNECTION_STRING
(or $DATABASE_URL), acting as the role it connects as.  With --trace-url
(or $CLAIMQ_DASHBOARD_TRACE_URL), a job's trace id (from its traceparent
header) links to the template with {trace_id} replaced by it, e.g.
'https://jaeger.example/trace/{trace_id}'.`;

function parse(argv) {
	const o = { db: process.env.DATABASE_URL, port: 8080, listen: '127.0.0.1', sampleMs: 5000,
		traceUrl: process.env.CLAIMQ_DASHBOARD_TRACE_URL || null };
	let traceFrom = '$CLAIMQ_DASHBOARD_TRACE_URL';
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const [flag, inline] = a.startsWith('--') && a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
		const value = () => {
			const v = inline !== undefined ? inline : argv[++i];
			if (v === undefined) fail(`${flag} needs a value`);
			return v;
		};
		if (flag === '--db') o.db = value();
		else if (flag === '--port') o.port = Number(value());
		else if (flag === '--listen') o.listen = value();
		else if (flag === '--sample-interval') o.sampleMs = Number(value()) * 1000;
		else if (flag === '--trace-url') { o.traceUrl = value() || null; traceFrom = '--trace-url'; }
		else if (flag === '-h' || flag === '--help') { console.log(usage); process.exit(0); }
		else if (!a.startsWith('-')) o.db = a;
		else fail(`unknown option ${a}`);
	}
	if (!o.db) fail('no connection string');
	if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) fail('--port: 0 to 65535');
	if (!(o.sampleMs >= 500 && o.sampleMs <= 3600e3)) fail('--sample-interval: 0.5 to 3600 seconds');
	if (o.traceUrl && checkTraceUrl(o.traceUrl)) fail(`${traceFrom}: ${checkTraceUrl(o.traceUrl)}`);
	return o;
}

function fail(msg) {
	console.error(`claimq-dashboard: ${msg}\n${usage}`);
	process.exit(2);
}

async function main() {
	const o = parse(process.argv.slice(2));
	const d = createDashboard(o);
	const a = await d.start();
	const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
	console.log(`claimq-dashboard listening on http://${host}:${a.port}/`);
	const stop = () => { d.stop().finally(() => process.exit(0)); };
	process.on('SIGINT', stop);
	process.on('SIGTERM', stop);
}

process.on('unhandledRejection', (e) => console.error(`claimq-dashboard: ${e && e.stack ? e.stack : e}`));
main().catch((e) => { console.error(`claimq-dashboard: ${e.message}`); process.exit(1); });
