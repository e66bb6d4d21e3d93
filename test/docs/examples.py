#!/usr/bin/env python3
"""Runs the SQL examples of the Markdown documents and compares what they
show with what the server answers.

A fenced block is one of:

  ```psql     a psql session: a line starting with "=> " is input (a
              statement continues on lines starting with "-> "), every
              other line is what psql printed for the input above it,
              exactly as psql's default aligned format prints it (blank
              lines at the start and end of a statement's output do not
              count, nor do spaces at the end of a line).  A psql error
              shows as psql prints it in a terminal ("ERROR:  ...").
  ```sql      statements that must run without an error; what they
              print is not compared.

Values that vary from run to run (times, pids) are not shown by the
examples: the statements compute what is stable about them (for example
"run_at > now() AS later"), so that the reader sees what is checked.

Every block of a file runs in order in one psql session, as a reader
following the document would type it, against a database of its own
("docs_" and the file's name): blocks that share state (ids, tokens) may
rely on each other.  claimq is created in that database first, unless a
sql block of the file creates it.  A block preceded by the line
"<!-- not run: REASON -->" is skipped, and listed as such.

Usage: examples.py FILE...   (libpq's environment names the server; the
role must be a superuser).  Prints TAP lines, one per block, and exits
non-zero if any block failed.
"""

import difflib
import os
import re
import subprocess
import sys

from tap import Tap

FENCE = re.compile(r"^```\s*([A-Za-z0-9_+-]*)\s*$")
SKIP = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->\s*$")
MARK = "@@claimq-doc@@"
PSQL = os.environ.get("PSQL", "psql")


class Block:
    def __init__(self, path, line, lang, lines, skip):
        self.path = path
        self.line = line            # line number of the first content line
        self.lang = lang
        self.lines = lines
        self.skip = skip

    def where(self, offset=0):
        return "%s:%d" % (self.path, self.line + offset)


def blocks_of(path):
    """The fenced blocks of a Markdown file, with their languages."""
    with open(path, encoding="utf-8") as f:
        text = f.read().split("\n")
    out = []
    i = 0
    while i < len(text):
        m = FENCE.match(text[i])
        if not m:
            i += 1
            continue
        lang = m.group(1).lower()
        skip = None
        j = i - 1
        while j >= 0 and text[j].strip() == "":
            j -= 1
        if j >= 0 and SKIP.match(text[j]):
            skip = SKIP.match(text[j]).group(1)
        start = i + 1
        i += 1
        while i < len(text) and not text[i].startswith("```"):
            i += 1
        out.append(Block(path, start + 1, lang, text[start:i], skip))
        i += 1
    return out


def session_statements(block):
    """The statements of a psql block: (offset of input line, input text,
    expected output lines)."""
    stmts = []
    for k, line in enumerate(block.lines):
        if line.startswith("=> ") or line == "=>":
            stmts.append([k, [line[3:]], []])
        elif line.startswith("-> ") or line == "->":
            if not stmts or stmts[-1][2]:
                raise ValueError("%s: a continuation line (->) must follow input"
                                 % block.where(k))
            stmts[-1][1].append(line[3:])
        else:
            if not stmts:
                if line.strip():
                    raise ValueError("%s: output before the first input line (=>)"
                                     % block.where(k))
                continue
            stmts[-1][2].append(line)
    return stmts


def trimmed(lines):
    lines = [l.rstrip() for l in lines]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_file(path, tap):
    blocks = [b for b in blocks_of(path) if b.lang in ("psql", "sql")]
    if not blocks:
        return
    db = "docs_" + re.sub(r"[^a-z0-9]+", "_", os.path.splitext(path)[0].lower()).strip("_")
    def setup(database, *commands):
        subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", database]
                       + [a for c in commands for a in ("-c", c)],
                       check=True, stdout=subprocess.DEVNULL)

    setup("postgres", "SET client_min_messages = warning",
          "DROP DATABASE IF EXISTS %s" % db, "CREATE DATABASE %s" % db)
    creates = any(b.lang == "sql" and not b.skip and
                  re.search(r"CREATE\s+EXTENSION\s+claimq", "\n".join(b.lines), re.I)
                  for b in blocks)
    if not creates:
        setup(db, "CREATE EXTENSION claimq")

    # One script for the whole file: a marker before each statement of a
    # psql block and before each sql block, so that the output can be cut
    # back into pieces; line_of maps the script's lines to the file's.
    script = []
    line_of = {}
    pieces = []         # (block, statement or None)
    for b in blocks:
        if b.skip:
            tap.skip(b.where(), b.skip)
            continue
        if b.lang == "psql":
            try:
                stmts = session_statements(b)
            except ValueError as e:
                tap.result(False, b.where(), str(e))
                continue
            for stmt in stmts:
                script.append("\\echo %s %d" % (MARK, len(pieces)))
                for k, text in enumerate(stmt[1]):
                    script.append(text)
                    line_of[len(script)] = b.line + stmt[0] + k
                pieces.append((b, stmt))
        else:
            script.append("\\echo %s %d" % (MARK, len(pieces)))
            for k, text in enumerate(b.lines):
                script.append(text)
                line_of[len(script)] = b.line + k
            pieces.append((b, None))
    # Whatever a block left open (a transaction, a role) ends with the file.
    script.append("\\echo %s end" % MARK)

    env = dict(os.environ, LC_ALL="C", PGTZ="UTC", PGDATESTYLE="ISO, MDY",
               PGCLIENTENCODING="UTF8")
    proc = subprocess.run([PSQL, "-X", "-d", db, "-f", "-"],
                          input="\n".join(script) + "\n", text=True, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    outputs = {}
    current = None
    for line in proc.stdout.split("\n"):
        if line.startswith(MARK + " "):
            current = line.split()[1]
            outputs[current] = []
            continue
        if current is not None:
            # psql names the script's line in front of a message; a reader
            # typing into a terminal sees the message alone.
            m = re.match(r"^psql:<stdin>:(\d+): (.*)$", line)
            if m:
                line = m.group(2)
                if "ERROR:" in line:
                    outputs[current].append(("error", int(m.group(1))))
            outputs[current].append(line)

    by_block = {}
    for n, (b, stmt) in enumerate(pieces):
        by_block.setdefault(id(b), (b, []))[1].append((n, stmt))
    for b, parts in by_block.values():
        problems = []
        for n, stmt in parts:
            got = outputs.get(str(n), [])
            errors = [x for x in got if isinstance(x, tuple)]
            got = [x for x in got if not isinstance(x, tuple)]
            if stmt is None:
                for _, at in errors:
                    problems.append("%s:%d: the statement failed" %
                                    (b.path, line_of.get(at, b.line)))
                problems.extend(l for l in got if re.match(
                    r"^(ERROR|DETAIL|HINT|CONTEXT|LINE \d+):|^\s*\^$", l))
                continue
            want = trimmed(stmt[2])
            got = trimmed(got)
            if want != got:
                # The file's line of the first expected line that differs
                # (or of the statement, when only lines are missing).
                first = b.line + stmt[0]
                lead = next(k for k, l in enumerate(stmt[2]) if l.strip()) \
                    if want else 0
                ops = difflib.SequenceMatcher(None, want, got, autojunk=False).get_opcodes()
                i1 = next(op[1] for op in ops if op[0] != "equal")
                at = first + len(stmt[1]) + lead + i1 if i1 < len(want) else first
                problems.append("%s:%d: psql prints other than the document shows"
                                % (b.path, at))
                problems.extend(difflib.unified_diff(
                    want, got, "%s:%d (the document)" % (b.path, first),
                    "the server", lineterm="", n=2))
        tap.result(not problems, b.where() + " (%s)" % b.lang, "\n".join(problems))
    if "end" not in outputs:
        tap.result(False, path, "the session ended early:\n" + proc.stdout[-2000:])


class DocTap(Tap):
    """Also lists the blocks that were not run."""

    def __init__(self):
        super().__init__()
        self.skipped = []

    def skip(self, name, why):
        self.skipped.append("%s (%s)" % (name, why))


def main(paths):
    tap = DocTap()
    for path in paths:
        run_file(path, tap)
    print("# %d SQL examples checked, %d failed; %d not run%s" %
          (tap.n, tap.failed, len(tap.skipped),
           "".join("\n#   not run: " + s for s in tap.skipped)))
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
