#!/usr/bin/env node
// A claimq producer in Node.js with node-postgres (pg).
//
//   node producer.js --queue jobs --count 1000 [--ms 5]   # demo payloads
//   node producer.js --queue jobs < payloads.jsonl          # one JSON object a line
//   (connection from DATABASE_URL or the PG* environment variables)
//
// Enqueues in chunks with claimq.enqueue_many and prints the id of every
// job, one a line, in input order.  The ids are the strings pg returns for
// int8 columns: exact, whatever their size.
'use strict';

const readline = require('readline');
const { parseArgs } = require('util');
const pg = require('pg');

const { values: opt } = parseArgs({
  options: {
    queue: { type: 'string' },
    count: { type: 'string' },
    ms: { type: 'string', default: '0' },
    chunk: { type: 'string', default: '500' },
  },
});
if (!opt.queue) {
  console.error('usage: producer.js --queue NAME [--count N [--ms MS]] [< payloads.jsonl]');
  process.exit(2);
}

async function* payloads() {
  if (opt.count !== undefined) {
    for (let n = 0; n < Number(opt.count); n++) yield { n, ms: Number(opt.ms) };
    return;
  }
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (line.trim()) yield JSON.parse(line);
  }
}

async function enqueue(client, chunk) {
  // An array of JSON texts, cast to jsonb[] by the server.
  const { rows } = await client.query(
    'SELECT id FROM claimq.enqueue_many($1::text, $2::jsonb[]) AS t(id)',
    [opt.queue, chunk.map((p) => JSON.stringify(p))]);
  process.stdout.write(rows.map((r) => `${r.id}\n`).join(''));
}

async function main() {
  const client = new pg.Client({ application_name: 'claimq-producer' });
  await client.connect();
  try {
    let chunk = [];
    for await (const payload of payloads()) {
      chunk.push(payload);
      if (chunk.length === Number(opt.chunk)) {
        await enqueue(client, chunk);
        chunk = [];
      }
    }
    if (chunk.length > 0) await enqueue(client, chunk);
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(err.stack || err.message);
  process.exit(1);
});
