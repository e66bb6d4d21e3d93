#!/usr/bin/env python3
"""A claimq producer in Python with psycopg 3.

    python3 producer.py --queue jobs --count 1000 [--ms 5]   # demo payloads
    python3 producer.py --queue jobs < payloads.jsonl          # one JSON object a line

Enqueues in chunks with claimq.enqueue_many (one statement, one round trip
per chunk) and prints the id of every job, one a line, in input order.
To enqueue as part of your own transaction, call claimq.enqueue() inside
it: the job exists if and only if your transaction commits.
"""

import argparse
import json
import os
import sys

import psycopg
from psycopg.types.json import Jsonb


def payloads(args):
    if args.count is not None:
        for n in range(args.count):
            yield {"n": n, "ms": args.ms}
    else:
        for line in sys.stdin:
            if line.strip():
                yield json.loads(line)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""))
    p.add_argument("--queue", required=True)
    p.add_argument("--count", type=int, default=None,
                   help="enqueue this many demo jobs instead of reading stdin")
    p.add_argument("--ms", type=int, default=0, help="work time of each demo job")
    p.add_argument("--chunk", type=int, default=500, help="jobs per enqueue_many call")
    args = p.parse_args()

    # Autocommit: every chunk is its own transaction.  No server-side
    # prepared statements, so that a transaction-mode pooler is fine.
    with psycopg.connect(args.dsn, autocommit=True, prepare_threshold=None,
                         application_name="claimq-producer") as conn:
        chunk = []
        for payload in payloads(args):
            chunk.append(Jsonb(payload))
            if len(chunk) == args.chunk:
                enqueue(conn, args.queue, chunk)
                chunk = []
        if chunk:
            enqueue(conn, args.queue, chunk)


def enqueue(conn, queue, chunk):
    rows = conn.execute(
        "SELECT id FROM claimq.enqueue_many(%s, %s::jsonb[]) AS t(id)",
        (queue, chunk)).fetchall()
    sys.stdout.write("".join(f"{job_id}\n" for (job_id,) in rows))


if __name__ == "__main__":
    main()
