#!/usr/bin/env python3
"""Checks the Python and JavaScript blocks of the Markdown files, and runs
the README's two worker snippets against a real server.

  - Every ```python block must compile; every ```js block must pass
    "node --check" (wrapped in an async function, so that a fragment may
    use await as it would inside one).
  - The README's worker snippets run as written, against the database
    "app" of the server libpq's environment names, with a deliver()
    defined in front of them (the one name they leave to the reader): each
    must complete the jobs enqueued into "email" with the result
    {"sent": true}, and then stop with status 0 on SIGTERM.

Usage: snippets.py NODE_PROJECT FILE...  NODE_PROJECT is a directory whose
node_modules holds the claimq package, installed as its README says.
Prints TAP lines; exits non-zero if any failed.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from examples import blocks_of  # noqa: E402
from tap import Tap  # noqa: E402

PSQL = os.environ.get("PSQL", "psql")
PYTHON = sys.executable
TAP = Tap()


def psql(db, sql):
    return subprocess.run([PSQL, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                           "-d", db, "-c", sql], check=True, text=True,
                          stdout=subprocess.PIPE).stdout.strip()


def syntax(paths, tmp):
    for path in paths:
        for b in blocks_of(path):
            if b.skip:
                continue
            src = "\n".join(b.lines) + "\n"
            if b.lang == "python":
                try:
                    compile(src, b.where(), "exec")
                    TAP.result(True, "%s (python): compiles" % b.where())
                except SyntaxError as e:
                    TAP.result(False, "%s (python): compiles" % b.where(),
                           "%s:%d: %s" % (path, b.line + (e.lineno or 1) - 1, e.msg))
            elif b.lang in ("js", "javascript"):
                f = os.path.join(tmp, "block.js")
                with open(f, "w") as out:
                    out.write("(async () => {\n" + src + "})();\n")
                p = subprocess.run(["node", "--check", f], text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                detail = re.sub(re.escape(f) + r":(\d+)",
                                lambda m: "%s:%d" % (path, b.line + int(m.group(1)) - 2),
                                p.stdout)
                TAP.result(p.returncode == 0, "%s (js): node --check" % b.where(), detail)


def run_worker(name, argv, cwd, env, db, deadline=60):
    """Enqueue two jobs into "email", run the worker until both are
    complete, then SIGTERM it: it must exit 0 within the deadline."""
    psql(db, "SELECT claimq.purge_queue('email')")
    ids = psql(db, """SELECT string_agg(id::text, ',') FROM (
                        SELECT claimq.enqueue('email', jsonb_build_object('to', t)) AS id
                          FROM unnest(ARRAY['%s-1@example.com', '%s-2@example.com']) AS t) s"""
               % (name, name))
    log = open(os.path.join(cwd, name + ".log"), "w+")
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    done = None
    until = time.monotonic() + deadline
    while time.monotonic() < until and proc.poll() is None:
        done = psql(db, "SELECT count(*) FILTER (WHERE state = 'done' AND result = '{\"sent\": true}')"
                        "  FROM claimq.status(ARRAY[%s]::bigint[])" % ids)
        if done == "2":
            break
        time.sleep(0.2)
    ok = done == "2"
    status = None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=max(until - time.monotonic(), 10))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    else:
        status = proc.returncode
    log.seek(0)
    out = log.read()
    delivered = all(("%s-%d@example.com" % (name, k)) in out for k in (1, 2))
    TAP.result(ok and delivered and status == 0,
           "README.md: the %s worker completes two jobs with its result, and stops on SIGTERM" % name,
           "jobs done with the result: %s of 2; delivered both: %s; exit status: %s\n%s"
           % (done, delivered, status, out[-3000:]))


def readme_snippet(lang):
    return next(b for b in blocks_of("README.md") if b.lang == lang)


def main():
    node_project = os.path.abspath(sys.argv[1])
    paths = sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        syntax(paths, tmp)

        db = "app"
        subprocess.run([PSQL, "-X", "-q", "-d", "postgres", "-c", "DROP DATABASE IF EXISTS app"],
                       check=True, env=dict(os.environ, PGOPTIONS="-c client_min_messages=warning"))
        psql("postgres", "CREATE DATABASE app")
        psql(db, "CREATE EXTENSION claimq")
        psql(db, "SELECT claimq.create_queue('email', keep_done => '1 hour')")
        env = dict(os.environ, PGDATABASE=db)

        py = readme_snippet("python")
        with open(os.path.join(tmp, "worker.py"), "w") as f:
            f.write("def deliver(to):\n    print('delivered', to, flush=True)\n\n")
            f.write("\n".join(py.lines) + "\n")
        pyenv = dict(env, PYTHONPATH=os.path.join(os.getcwd(), "clients", "python"))
        run_worker("python", [PYTHON, "worker.py"], tmp, pyenv, db)

        js = readme_snippet("js")
        with open(os.path.join(node_project, "worker.js"), "w") as f:
            f.write("async function deliver(to, { signal }) {\n"
                    "  if (signal.aborted) throw new Error('aborted');\n"
                    "  console.log('delivered', to);\n}\n\n")
            f.write("\n".join(js.lines) + "\n")
        run_worker("node", ["node", "worker.js"], node_project, env, db)
    return 1 if TAP.failed else 0


if __name__ == "__main__":
    sys.exit(main())
