"""A worker of the faulted run (run.py): the package's Worker, whose
handler writes one line per run to the record file before its work (job
id, token, attempt, pid, and in wall-clock milliseconds the moment it
began and its claim's expiry) and whose on_complete
writes (job id, token, pid) into faulted_done in the completion's own
transaction, so that a row there is a complete that took effect.

    python worker.py CONNINFO QUEUE CONCURRENCY LEASE_SECONDS HANDLER_MS RECORD
"""
import logging
import os
import sys
import time

import claimq

conninfo, queue, concurrency, lease, ms, record = sys.argv[1:7]
logging.basicConfig(level=logging.WARNING, format="%(asctime)s py %(process)d %(message)s")
pid = os.getpid()
fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def handle(job):
    # One write(2) per line, before the work: the line survives a kill -9.
    os.write(fd, f"{job.id} {job.token} {job.attempt} {pid} {time.time() * 1000:.1f}"
                 f" {job.expires_at.timestamp() * 1000:.1f}\n".encode())
    time.sleep(float(ms) / 1000)
    return {"token": str(job.token), "pid": pid}


def on_complete(job, result, conn):
    conn.execute("INSERT INTO faulted_done (job_id, token, pid) VALUES (%s, %s, %s)",
                 (job.id, job.token, pid))


claimq.Worker(conninfo, queue, handle, concurrency=int(concurrency), lease=float(lease),
              name=f"faulted-{pid}", on_complete=on_complete).run()
print("exited cleanly", flush=True)
