#!/usr/bin/env python3
"""A claimq worker in Python: the claimq package (clients/python) and a handler.

    python3 worker.py --queue jobs [--dsn URL] [--batch 10] [--lease 30] [--results TABLE]

The package claims, starts, heartbeats, completes or fails the jobs, and on
SIGTERM or SIGINT finishes the job at hand, releases the ones it never
started and returns (this script then exits 0).  All that is written here is
the handler and the command line.

With --results TABLE, the handler records (job_id, worker) in TABLE in the
same transaction as the job's completion: the row exists if and only if the
completion took effect (a worker whose lease ran out writes nothing).
"""

import argparse
import logging
import os
import socket
import sys
import time

# The package from this tree, unless it is installed.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "..", "..", "clients", "python"))
import claimq  # noqa: E402
from psycopg import sql  # noqa: E402


def handle(job):
    """The demo handler.  Replace it with real work.

    payload {"ms": N} works N milliseconds (stopping at once if the job is
    cancelled or its lease lost); {"fail_first": N} fails the first N
    attempts; {"not_before": T} snoozes until the Unix time T.
    """
    payload = job.payload or {}
    attempt = job.attempts + 1  # start() counts this attempt
    if attempt <= int(payload.get("fail_first", 0)):
        raise RuntimeError(f"demo failure on attempt {attempt}")
    wait = float(payload.get("not_before", 0)) - time.time()
    if wait > 0:
        raise claimq.Snooze(wait)
    claimq.sleep(job, float(payload.get("ms", 0)) / 1000.0)
    return {"ok": True}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""),
                   help="libpq connection string (default: $DATABASE_URL, then PG* variables)")
    p.add_argument("--queue", required=True)
    p.add_argument("--worker", default=f"py-{socket.gethostname()}-{os.getpid()}",
                   help="worker name, shown in claimq.jobs and used by release_worker()")
    p.add_argument("--batch", type=int, default=10, help="jobs per claim")
    p.add_argument("--concurrency", type=int, default=1, help="handlers at once")
    p.add_argument("--lease", type=float, default=30.0, help="lease in seconds")
    p.add_argument("--heartbeat", type=float, default=None,
                   help="seconds between lease extensions (default lease/3, 0 = none)")
    p.add_argument("--results", default=None,
                   help="table (job_id bigint, worker text) to record completions in")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format=f"%(asctime)s {args.worker} %(levelname)s %(message)s")

    record = None
    if args.results:
        insert = sql.SQL("INSERT INTO {} (job_id, worker) VALUES (%s, %s)").format(
            sql.Identifier(*args.results.split(".")))

        def record(job, result, conn):  # in the completion's transaction
            conn.execute(insert, (job.id, args.worker))

    claimq.Worker(args.dsn, args.queue, handle, concurrency=args.concurrency,
                  batch=args.batch, lease=args.lease, heartbeat=args.heartbeat,
                  name=args.worker, on_complete=record).run()
    logging.getLogger("claimq.worker").info("stopped")


if __name__ == "__main__":
    main()
