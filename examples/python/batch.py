#!/usr/bin/env python3
"""A batch of jobs with a completion job that reports how the batch went.

    python3 batch.py enqueue --queue batch --reports reports --count 1000 [--fail-every 10]
    python3 batch.py work --queue batch --reports reports [--concurrency 8]

enqueue (a role with the produce duty) adds the batch with enqueue_many
and, in the same transaction, one job to the reports queue that runs after
every job of the batch, even if some of them fail (after_failed "run").  It
prints the report job's id.  In one transaction, because a job of a queue
that keeps nothing is gone once it is completed, and the report job must
name jobs that exist.

work (a role with the work duty) runs the batch's handler and the report
handler in one process until SIGTERM or SIGINT.  The demo batch handler
fails a job for good (it goes dead) when its payload says {"fail": true};
enqueue marks every --fail-every'th job so.  The report handler reads the
outcome of every job of the batch with claimq.dependencies() on its own id,
logs one line ("report for job ...: 1000 jobs, 900 done, 100 dead,
0 cancelled") and returns the counts as its result.  The jobs of the batch
keep their final state for it, whatever their queue's keep_done, until the
report job is finished.
"""

import argparse
import collections
import logging
import os
import socket
import sys

# The package from this tree, unless it is installed.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "..", "..", "clients", "python"))
import claimq  # noqa: E402
import psycopg  # noqa: E402

log = logging.getLogger("batch")


def enqueue(args):
    payloads = [{"n": n, "fail": args.fail_every > 0 and n % args.fail_every == args.fail_every - 1}
                for n in range(args.count)]
    # One transaction: the batch and its report job commit together.  No
    # server-side prepared statements, so that a transaction-mode pooler is fine.
    with psycopg.connect(args.dsn, prepare_threshold=None,
                         application_name="claimq-batch") as conn:
        with conn.transaction():
            client = claimq.Client(connection=conn)
            ids = client.enqueue_many(args.queue, payloads)
            report = client.enqueue(args.reports, {"batch": args.queue, "jobs": len(ids)},
                                    after=ids, after_failed="run")
    print(report)


def work(args):
    def handle(job):
        """The demo handler of the batch's jobs.  Replace it with real work."""
        if job.payload.get("fail"):
            raise claimq.Fail(f"demo: job {job.payload['n']} fails for good", permanent=True)
        return {"n": job.payload["n"]}

    def report(job):
        """Runs once every job of the batch is finished: done, dead or cancelled."""
        with claimq.Client(args.dsn, application_name=args.worker) as client:
            rows = client.dependencies([job.id])
        states = collections.Counter(r["state"] for r in rows)
        counts = {"jobs": len(rows), "done": states["done"], "dead": states["dead"],
                  "cancelled": states["cancelled"],
                  # Never more than 0: the report job waits for all of them.
                  "unfinished": len(rows) - states["done"] - states["dead"]
                  - states["cancelled"]}
        log.info("report for job %s: %d jobs, %d done, %d dead, %d cancelled, %d unfinished",
                 job.id, counts["jobs"], counts["done"], counts["dead"], counts["cancelled"],
                 counts["unfinished"])
        return counts

    claimq.Worker(args.dsn, {args.queue: args.concurrency, args.reports: 1},
                  {args.queue: handle, args.reports: report}, name=args.worker).run()
    log.info("stopped")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["enqueue", "work"])
    p.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""),
                   help="libpq connection string (default: $DATABASE_URL, then PG* variables)")
    p.add_argument("--queue", default="batch", help="the batch's queue")
    p.add_argument("--reports", default="reports", help="the report job's queue")
    p.add_argument("--count", type=int, default=1000, help="enqueue: jobs in the batch")
    p.add_argument("--fail-every", type=int, default=10,
                   help="enqueue: every Nth job fails for good (0: none)")
    p.add_argument("--concurrency", type=int, default=8, help="work: handlers of the batch at once")
    p.add_argument("--worker", default=f"py-batch-{socket.gethostname()}-{os.getpid()}",
                   help="work: worker name, shown in claimq.jobs")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s {args.worker} %(levelname)s %(message)s")
    if args.command == "enqueue":
        enqueue(args)
    else:
        work(args)


if __name__ == "__main__":
    main()
