#!/usr/bin/env python3
"""Checks that the facts stated in several places come from one.

The release.  Its version has one source: default_version in
claimq.control.  Everything else that names it must name the same:

  - META.json: "version" and provides.claimq.version; provides.claimq.file
    must be the current schema's source, sql/claimq.sql; the PostgreSQL
    majors it was tested on (x_tested_postgresql) must be the ones
    src/claimq.h builds for, its description must name them ("on
    PostgreSQL 15 and 18 only"), and its runtime requirement must be a
    bare minimum, the lowest of them (PGXN's ranges cannot leave out the
    majors between two);
  - debian/changelog: the version of its top entry;
    (these two, and the Debian package below, in three parts: 0.7.0 for
    a release 0.7, as PGXN and Debian want)
  - src/claimq.h: CQ_SCHEMA_VERSION;
  - README.md: every Debian package file name it shows
    (postgresql-NN-claimq_VERSION_ARCH.deb);
  - the client libraries: clients/python/claimq/__init__.py's __version__,
    clients/node/package.json's version and package-lock.json's own two;
  - README.md and docs/*.md: the statements that name the current release,
    which are written in one of these forms (CURRENT below; "X" is a
    version, optionally in backticks):
        "The current release is X", "the current version is X",
        "the current one, X" (also with ":" or "(")
        "Version X is reached from ..."
        "... updates step by step to X"
        "the library of X serves only the X schema"
    A version named otherwise (a history: "in 0.4", "the update to 0.4")
    is not checked.

The duties.  docs/reference.md's "### Privileges" subsection has a table
"| duty | functions | views |": one row per duty, with every function
(by name: overloads count once) and view (SELECT) that grant_duty grants,
each in backticks; a row whose first cell names no duty in backticks
lists functions that no duty grants (the extension's owner's alone).  On
a database of its own, the check creates a role per duty in a transaction
it rolls back, grants it the duty with claimq.grant_duty and asks the
catalogue (has_function_privilege, has_table_privilege) what the role may
use.  The documented duties must be the ones grant_duty knows (its hint
for an unknown duty names them); every claimq function must be in a duty,
be private (its comment starts with "private") or be in the owner's row.

The settings.  docs/reference.md's "## Settings" table (one table, with
its header) lists every claimq.* setting of pg_settings, and no other,
with its default (boot_val, compared in the setting's unit: "1s" is 1000
for a setting in ms); README.md's "## Shared memory" table states the
defaults of the sizing settings, which must be the same.

The job table's shape.  A statement in docs/*.md of the form
"`claimq.job` has N indexes and M checks" (N and M as words or digits)
must agree with the catalogue: its indexes, and its CHECK constraints.

The README's first screen.  Its first 25 lines say what claimq is and
how to start: a "# claimq" title, then the two commands for a fresh
Debian 12 machine in the first ```sh block, each under a comment line
("# Demo: ...", "# Tests: ..."), and nothing else in that block; then a
```sql block with CREATE EXTENSION claimq and a first enqueue, claim and
complete, all within those 25 lines (examples.py runs it).  The commands
are the ones the tree uses: the test command is what .ci/run (CI) runs,
the demo command the one examples/demo's header gives, and both scripts
exist.

Words a user should not see: "contract", "issue", "targets" (as words, in
any case) must not occur in README.md, docs/*.md or the catalogue comments
of claimq's objects.  Each occurrence is a failure of its own.

Usage: facts.py   (from the top of the tree; libpq's environment names
the server, which must have claimq installed and in
shared_preload_libraries, since the sizing settings exist only then; the
role must be a superuser; PSQL names psql).  Prints TAP lines, each
failure with the places ("FILE:LINE: ...") that disagree, and exits
non-zero if any failed.
"""

import glob
import json
import os
import re
import subprocess
import sys

from tap import Tap

PSQL = os.environ.get("PSQL", "psql")
DB = "claimq_facts"
VERSION = r"`?(\d+(?:\.\d+)+)`?"
CURRENT = [re.compile(p.replace(" ", r"\s+"), re.I) for p in (
    r"\bcurrent (?:release|version|one)(?:\s+is\s+|,\s*|:\s*|\s+\(|\s+)" + VERSION,
    r"\bVersion " + VERSION + r" is reached from",
    r"\bstep by step to " + VERSION,
    r"\bthe library of " + VERSION + r" serves only the " + VERSION + r" schema",
)]
WORDS = re.compile(r"\b(contract|issue|targets)\b", re.I)
DUTY_PATTERN = re.compile(r"The duties are ([a-z_, ]+?)\.?$", re.M)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def line_at(text, pos):
    return text.count("\n", 0, pos) + 1


def psql(sql, db=DB):
    """Rows of the last statement of sql, as lists of fields (tab-separated,
    unaligned)."""
    proc = subprocess.run([PSQL, "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1",
                           "-d", db, "-f", "-"], input=sql, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise RuntimeError("psql failed: %s" % proc.stderr.strip())
    return [l.split("\t") for l in proc.stdout.split("\n") if l != ""]


def psql_error(sql, db=DB):
    """What psql says on stderr for sql (expected to fail)."""
    proc = subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db, "-f", "-"],
                          input=sql, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=dict(os.environ, LC_MESSAGES="C"))
    return proc.returncode, proc.stderr


# --------------------------------------------------------------------------
# Markdown: sections and tables


def section(path, heading):
    """(first line number, lines) of the section under the heading line
    (exactly "## Name" or "### Name"), up to the next heading of the same
    or a higher level; None if there is none."""
    lines = read(path).split("\n")
    level = len(heading) - len(heading.lstrip("#"))
    fence = False
    for i, l in enumerate(lines):
        if l.startswith("```"):
            fence = not fence
        if not fence and l.rstrip() == heading:
            j = i + 1
            inner = False
            while j < len(lines):
                if lines[j].startswith("```"):
                    inner = not inner
                m = re.match(r"^(#+) ", lines[j])
                if not inner and m and len(m.group(1)) <= level:
                    break
                j += 1
            return i + 2, lines[i + 1:j]
    return None


def cells(row):
    """The cells of a Markdown table row; a | inside backticks or escaped
    does not split."""
    out, cur, code = [], "", False
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    i = 0
    while i < len(row):
        c = row[i]
        if c == "\\" and i + 1 < len(row) and row[i + 1] == "|":
            cur += "|"
            i += 2
            continue
        if c == "`":
            code = not code
        if c == "|" and not code:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    out.append(cur.strip())
    return out


def tables(first, lines):
    """The tables of a section: lists of (line number, cells); the first
    row is the header.  A run of table lines without a delimiter row under
    its first line is returned with header None."""
    out = []
    i = 0
    while i < len(lines):
        if not lines[i].lstrip().startswith("|"):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            j += 1
        rows = [(first + k, cells(lines[k])) for k in range(i, j)]
        if len(rows) >= 2 and all(re.match(r"^:?-+:?$", c) for c in rows[1][1]):
            out.append({"line": first + i, "header": [c.lower() for c in rows[0][1]],
                        "rows": rows[2:]})
        else:
            out.append({"line": first + i, "header": None, "rows": rows})
        i = j
    return out


def names(cell):
    """The names in backticks of a cell ("`claim`, `start()`")."""
    return [m.group(1) for m in re.finditer(r"`([A-Za-z_][A-Za-z0-9_.]*)(?:\(\))?`", cell)]


# --------------------------------------------------------------------------
# The release


def release_checks(tap):
    control = read("claimq.control")
    m = re.search(r"^default_version\s*=\s*'([^']*)'", control, re.M)
    if not m:
        tap.result(False, "claimq.control names the release (default_version)",
                   ["claimq.control: no default_version = '...' line"])
        return None
    release = m.group(1)
    tap.result(True, "the release is %s (claimq.control)" % release)
    # PGXN and Debian want three parts: 0.7 is 0.7.0 there.
    semver = ".".join((release.split(".") + ["0", "0"])[:max(3, len(release.split(".")))])

    # META.json
    text = read("META.json")
    problems = []
    try:
        meta = json.loads(text)
    except ValueError as e:
        tap.result(False, "META.json is JSON", [str(e)])
        meta = None
    if meta is not None:
        def where(key, value, after=0):
            m = re.compile(r'"%s"\s*:\s*"%s"' % (re.escape(key), re.escape(str(value)))).search(text, after)
            return "META.json:%d" % (line_at(text, m.start()) if m else 1)
        provides = max(text.find('"provides"'), 0)
        v = meta.get("version")
        if v != semver:
            problems.append("%s: version is %r, not the release's %r" % (where("version", v), v, semver))
        p = meta.get("provides", {}).get("claimq", {})
        v = p.get("version")
        if v != semver:
            problems.append("%s: provides.claimq.version is %r, not the release's %r"
                            % (where("version", v, provides), v, semver))
        f = p.get("file")
        if f != "sql/claimq.sql":
            problems.append("%s: provides.claimq.file is %r, not the current schema's source "
                            "sql/claimq.sql" % (where("file", f, provides), f))
        elif not os.path.isfile(f):
            problems.append("%s: provides.claimq.file %s does not exist" % (where("file", f, provides), f))
        tap.expect("META.json names release %s and the schema's source" % release, problems)
        majors = sorted(int(a) // 10000 for a, b in re.findall(
            r"PG_VERSION_NUM >= (\d+) && PG_VERSION_NUM < (\d+)", read("src/claimq.h")))
        words = " and ".join(str(m) for m in majors)
        problems = []
        if meta.get("x_tested_postgresql") != [str(m) for m in majors]:
            problems.append("%s: x_tested_postgresql is %r, src/claimq.h builds for %s"
                            % (where("x_tested_postgresql", ""), meta.get("x_tested_postgresql"), words))
        if ("on PostgreSQL %s only" % words) not in meta.get("description", ""):
            problems.append("META.json: the description does not say \"on PostgreSQL %s only\"" % words)
        need = meta.get("prereqs", {}).get("runtime", {}).get("requires", {}).get("PostgreSQL")
        if majors and need != "%d.0.0" % majors[0]:
            problems.append("META.json: prereqs.runtime.requires.PostgreSQL is %r, not the bare "
                            "minimum %d.0.0" % (need, majors[0]))
        tap.expect("META.json states the PostgreSQL majors src/claimq.h builds for (%s)" % words,
                   problems)

    # debian/changelog
    text = read("debian/changelog")
    m = re.match(r"^\S+ \(([^)]*)\)", text)
    if not m:
        tap.result(False, "debian/changelog's top entry is release %s" % release,
                   ["debian/changelog:1: not a changelog entry's first line"])
    else:
        tap.expect("debian/changelog's top entry is release %s" % release,
                   [] if m.group(1) == semver else
                   ["debian/changelog:1: the top entry is %s" % m.group(1)])

    # src/claimq.h
    text = read("src/claimq.h")
    m = re.search(r'^#define\s+CQ_SCHEMA_VERSION\s+"([^"]*)"', text, re.M)
    tap.expect("src/claimq.h's CQ_SCHEMA_VERSION is %s" % release,
               ["src/claimq.h: no CQ_SCHEMA_VERSION"] if not m else
               [] if m.group(1) == release else
               ["src/claimq.h:%d: CQ_SCHEMA_VERSION is %s" % (line_at(text, m.start()), m.group(1))])

    # README.md's Debian package
    text = read("README.md")
    debs = list(re.finditer(r"postgresql-\d+-claimq_([^_\s]+)_[A-Za-z0-9]+\.deb", text))
    problems = ["README.md:%d: %s names version %s" % (line_at(text, m.start()), m.group(0), m.group(1))
                for m in debs if m.group(1) != semver]
    if not debs:
        problems.append("README.md: no postgresql-NN-claimq_VERSION_ARCH.deb found")
    tap.expect("README.md's Debian package is release %s" % release, problems)

    # The client libraries
    problems = []
    path = "clients/python/claimq/__init__.py"
    text = read(path)
    m = re.search(r'^__version__\s*=\s*["\']([^"\']*)["\']', text, re.M)
    if not m:
        problems.append("%s: no __version__" % path)
    elif m.group(1) != release:
        problems.append("%s:%d: __version__ is %s" % (path, line_at(text, m.start()), m.group(1)))
    for path, keys in (("clients/node/package.json", [["version"]]),
                       ("clients/node/package-lock.json", [["version"], ["packages", "", "version"]])):
        text = read(path)
        data = json.loads(text)
        for key in keys:
            v = data
            for k in key:
                v = v.get(k, {}) if isinstance(v, dict) else {}
            if v != release:
                m = re.search(r'"version"\s*:\s*"%s"' % re.escape(str(v)), text)
                problems.append("%s:%d: %s is %r" % (path, line_at(text, m.start()) if m else 1,
                                                    ".".join(k or '""' for k in key), v))
    tap.expect("the client libraries are release %s" % release, problems)

    # Statements of the current release
    problems = []
    found = 0
    for path in markdown_docs():
        text = read(path)
        for pattern in CURRENT:
            for m in pattern.finditer(text):
                found += 1
                wrong = [v for v in m.groups() if v != release]
                if wrong:
                    problems.append("%s:%d: \"%s\" names %s" % (
                        path, line_at(text, m.start()), " ".join(m.group(0).split()), wrong[0]))
    tap.expect("the %d statements of the current release in README.md and docs/ name %s"
               % (found, release), problems)
    return release


def markdown_docs():
    return ["README.md"] + sorted(glob.glob("docs/*.md"))


# --------------------------------------------------------------------------
# The catalogue


def duty_checks(tap):
    path = "docs/reference.md"
    sec = section(path, "### Privileges")
    if sec is None:
        tap.result(False, "docs/reference.md has a Privileges subsection",
                   ["%s: no \"### Privileges\" heading" % path])
        return
    doc = {}           # duty -> (line, functions, views)
    owner = {}         # function -> line, for the rows of no duty
    problems = []
    for t in tables(*sec):
        if t["header"] is None or t["header"][:3] != ["duty", "functions", "views"]:
            continue
        for line, c in t["rows"]:
            c = c + [""] * (3 - len(c))
            duty = names(c[0])
            if duty:
                if duty[0] in doc:
                    problems.append("%s:%d: duty %s listed twice" % (path, line, duty[0]))
                doc[duty[0]] = (line, set(names(c[1])), set(names(c[2])))
            else:
                for f in names(c[1]):
                    owner[f] = line
    if not doc:
        tap.result(False, "docs/reference.md's Privileges lists the duties",
                   ["%s:%d: no table | duty | functions | views |" % (path, sec[0])])
        return

    # The duties there are: grant_duty's hint for an unknown one names them.
    status, err = psql_error("SELECT claimq.grant_duty('postgres', 'no such duty')")
    m = DUTY_PATTERN.search(err)
    if not m:
        problems.append("grant_duty's hint for an unknown duty names no duties: %s" % err.strip())
        duties = sorted(doc)
    else:
        duties = [d for d in re.split(r",\s*|\s+and\s+", m.group(1).strip()) if d]
        for d in duties:
            if d not in doc:
                problems.append("%s:%d: duty %s is not documented" % (path, sec[0], d))
        for d in doc:
            if d not in duties:
                problems.append("%s:%d: duty %s does not exist (grant_duty knows %s)"
                                % (path, doc[d][0], d, ", ".join(duties)))
    tap.expect("docs/reference.md documents the duties there are (%s)" % ", ".join(duties),
               problems)

    # What each duty grants, in a transaction that is rolled back.
    sql = ["BEGIN;"]
    for d in duties:
        sql.append("CREATE ROLE claimq_facts_%s;" % d)
        sql.append("SELECT claimq.grant_duty('claimq_facts_%s', '%s');" % (d, d))
    sql.append("""
SELECT r.d, 'f', p.proname,
       bool_and(has_function_privilege('claimq_facts_' || r.d, p.oid, 'EXECUTE'))::text,
       bool_or(has_function_privilege('claimq_facts_' || r.d, p.oid, 'EXECUTE'))::text
  FROM unnest(%(duties)s::text[]) AS r(d),
       pg_proc p
 WHERE p.pronamespace = 'claimq'::regnamespace
 GROUP BY r.d, p.proname
UNION ALL
SELECT r.d, 'r', c.relname,
       has_table_privilege('claimq_facts_' || r.d, c.oid, 'SELECT')::text,
       has_table_privilege('claimq_facts_' || r.d, c.oid,
                           'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')::text
  FROM unnest(%(duties)s::text[]) AS r(d),
       pg_class c
 WHERE c.relnamespace = 'claimq'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p', 'f', 'S')
UNION ALL
SELECT r.d, 's', 'claimq',
       has_schema_privilege('claimq_facts_' || r.d, 'claimq', 'USAGE')::text, 'false'
  FROM unnest(%(duties)s::text[]) AS r(d)
 ORDER BY 1, 2, 3;
ROLLBACK;""" % {"duties": "ARRAY[%s]" % ", ".join("'%s'" % d for d in duties)})
    try:
        rows = psql("\n".join(sql))
    except RuntimeError as e:
        tap.result(False, "each duty can be granted", [str(e)])
        return
    granted = {d: (set(), set()) for d in duties}
    in_some_duty = set()
    for d, kind, name, all_, any_ in rows:
        problems = []
        if kind == "f":
            if all_ == "true":
                granted[d][0].add(name)
                in_some_duty.add(name)
            elif any_ == "true":
                granted[d][0].add(name)
                in_some_duty.add(name)
                granted[d][1].add("!some overloads of %s only" % name)
        elif kind == "r":
            if all_ == "true":
                granted[d][1].add(name)
            if any_ == "true":
                granted[d][1].add("!more than SELECT on %s" % name)
        elif kind == "s" and all_ != "true":
            granted[d][1].add("!no USAGE on the schema claimq")
    for d in duties:
        if d not in doc:
            continue
        line, fdoc, vdoc = doc[d]
        fcat, vcat = granted[d]
        problems = []
        for x in sorted(v for v in vcat if v.startswith("!")):
            problems.append("grant_duty(role, '%s') grants %s" % (d, x[1:]))
        vcat = {v for v in vcat if not v.startswith("!")}
        for f in sorted(fcat - fdoc):
            problems.append("%s:%d: %s grants function %s, not listed" % (path, line, d, f))
        for f in sorted(fdoc - fcat):
            problems.append("%s:%d: %s does not grant function %s, listed" % (path, line, d, f))
        for v in sorted(vcat - vdoc):
            problems.append("%s:%d: %s grants SELECT on %s, not listed" % (path, line, d, v))
        for v in sorted(vdoc - vcat):
            problems.append("%s:%d: %s does not grant SELECT on %s, listed" % (path, line, d, v))
        tap.expect("duty %s grants what docs/reference.md lists (%d functions, %d views)"
                   % (d, len(fcat), len(vcat)), problems)

    # Every function: in a duty, private, or the owner's (documented).
    rows = psql("""
SELECT p.proname, bool_and(coalesce(obj_description(p.oid, 'pg_proc'), '') LIKE 'private%')::text,
       bool_or(coalesce(obj_description(p.oid, 'pg_proc'), '') LIKE 'private%')::text
  FROM pg_proc p
 WHERE p.pronamespace = 'claimq'::regnamespace
 GROUP BY p.proname ORDER BY 1""")
    problems = []
    functions = set()
    for name, all_private, any_private in rows:
        functions.add(name)
        if name in in_some_duty:
            if any_private == "true":
                problems.append("function %s is in a duty but its comment says private" % name)
            if name in owner:
                problems.append("%s:%d: function %s is in a duty, not the owner's alone"
                                % (path, owner[name], name))
        elif all_private == "true":
            if name in owner:
                problems.append("%s:%d: function %s is private (its comment says so), not "
                                "listed among the owner's" % (path, owner[name], name))
        elif any_private == "true":
            problems.append("function %s: some overloads' comments say private, some not" % name)
        elif name not in owner:
            problems.append("function %s is in no duty, and neither private (its comment) nor "
                            "documented as the owner's (%s:%d)" % (name, path, sec[0]))
    for name in sorted(set(owner) - functions):
        problems.append("%s:%d: there is no function %s" % (path, owner[name], name))
    tap.expect("every claimq function (%d by name) is in a duty, private or the owner's"
               % len(functions), problems)


UNITS = {
    "ms": {"us": 0.001, "ms": 1, "s": 1000, "min": 60000, "h": 3600000, "d": 86400000},
    "s": {"ms": 0.001, "s": 1, "min": 60, "h": 3600, "d": 86400},
    "min": {"min": 1, "h": 60, "d": 1440},
    "kB": {"B": 1 / 1024, "kB": 1, "MB": 1024, "GB": 1024 ** 2, "TB": 1024 ** 3},
    "8kB": {"kB": 1 / 8, "MB": 128, "GB": 128 * 1024},
}


def normal(value, unit, vartype):
    """A documented default in the setting's own terms (a string), or None
    if it cannot be read."""
    value = value.strip().strip("`").strip().strip("'")
    if vartype == "bool":
        v = value.lower()
        return {"on": "on", "true": "on", "yes": "on", "off": "off", "false": "off", "no": "off"}.get(v)
    if vartype in ("integer", "real"):
        m = re.match(r"^(-?[\d,]*\.?\d+)\s*([A-Za-z]*)$", value)
        if not m:
            return None
        n = float(m.group(1).replace(",", ""))
        u = m.group(2)
        if u:
            factor = UNITS.get(unit or "", {}).get(u)
            if factor is None:
                return None
            n *= factor
        return ("%d" % n) if n == int(n) else repr(n)
    return value


def settings_checks(tap):
    try:
        rows = psql("SELECT name, boot_val, coalesce(unit, ''), vartype FROM pg_settings "
                    "WHERE name LIKE 'claimq.%' ORDER BY name")
    except RuntimeError as e:
        tap.result(False, "pg_settings lists claimq's settings", [str(e)])
        return
    settings = {r[0]: (r[1], r[2], r[3]) for r in rows}

    def boot(name):
        v, unit, vartype = settings[name]
        return normal(v, unit, vartype) if vartype != "string" else v

    def compare(path, line, name, doc):
        v, unit, vartype = settings[name]
        got = normal(doc, unit, vartype)
        if got is None:
            return ["%s:%d: %s: cannot read the default %r" % (path, line, name, doc)]
        if got != boot(name):
            return ["%s:%d: %s: the default is %s%s, not %s" % (path, line, name, v,
                                                               unit and " " + unit, doc)]
        return []

    path = "docs/reference.md"
    sec = section(path, "## Settings")
    problems = []
    documented = {}
    if sec is None:
        problems.append("%s: no \"## Settings\" heading" % path)
    else:
        ts = tables(*sec)
        for t in ts:
            if t["header"] is None:
                problems.append("%s:%d: a table without a header (a blank line splits a table?)"
                                % (path, t["line"]))
            elif t["header"][:2] != ["setting", "default"]:
                continue
            for line, c in t["rows"]:
                n = names(c[0])
                if not n or not n[0].startswith("claimq."):
                    continue
                if n[0] in documented:
                    problems.append("%s:%d: %s is listed twice" % (path, line, n[0]))
                documented[n[0]] = True
                if n[0] not in settings:
                    problems.append("%s:%d: there is no setting %s" % (path, line, n[0]))
                elif len(c) < 2:
                    problems.append("%s:%d: %s has no default" % (path, line, n[0]))
                else:
                    problems.extend(compare(path, line, n[0], c[1]))
        if not [t for t in ts if t["header"] and t["header"][:2] == ["setting", "default"]]:
            problems.append("%s:%d: no table | setting | default | ... |" % (path, sec[0]))
        elif len(ts) > 1:
            problems.append("%s:%d: the settings are in %d tables, not one" % (path, sec[0], len(ts)))
        for name in sorted(settings):
            if name not in documented:
                problems.append("%s:%d: setting %s (default %s) is not documented"
                                % (path, sec[0], name, settings[name][0]))
    tap.expect("docs/reference.md documents the %d claimq settings and their defaults"
               % len(settings), problems)

    path = "README.md"
    sec = section(path, "## Shared memory")
    problems = []
    count = 0
    if sec is None:
        problems.append("%s: no \"## Shared memory\" heading" % path)
    else:
        for t in tables(*sec):
            if t["header"] is None or t["header"][:2] != ["setting", "default"]:
                continue
            for line, c in t["rows"]:
                n = names(c[0])
                if not n:
                    continue
                count += 1
                if n[0] not in settings:
                    problems.append("%s:%d: there is no setting %s" % (path, line, n[0]))
                else:
                    problems.extend(compare(path, line, n[0], c[1] if len(c) > 1 else ""))
        if not count:
            problems.append("%s:%d: no table | setting | default | ... |" % (path, sec[0]))
    tap.expect("README.md's Shared memory table states the defaults (%d settings)" % count,
               problems)


def word_checks(tap):
    found = 0
    for path in markdown_docs():
        for k, line in enumerate(read(path).split("\n"), 1):
            for m in WORDS.finditer(line):
                found += 1
                tap.result(False, "%s:%d: the word \"%s\"" % (path, k, m.group(1)),
                           [line.strip()])
    if not found:
        tap.result(True, "README.md and docs/*.md say no contract, issue or targets")
    try:
        rows = psql("""
SELECT pg_describe_object(d.classoid, d.objoid, d.objsubid), replace(d.description, E'\\n', ' ')
  FROM pg_description d,
       LATERAL pg_identify_object(d.classoid, d.objoid, d.objsubid) o
 WHERE o.schema = 'claimq'
    OR (o.type IN ('schema', 'extension') AND o.identity = 'claimq')
    OR (o.type = 'trigger' AND o.identity LIKE '% on claimq.%')
 ORDER BY 1""")
    except RuntimeError as e:
        tap.result(False, "the catalogue comments can be read", [str(e)])
        return
    found = 0
    for obj, text in rows:
        for m in WORDS.finditer(text):
            found += 1
            tap.result(False, "catalogue: the comment of %s: the word \"%s\"" % (obj, m.group(1)),
                       [text])
    if not found:
        tap.result(True, "the %d catalogue comments of claimq's objects say no contract, issue "
                   "or targets" % len(rows))


FIRST_SCREEN = 25


def readme_checks(tap):
    path = "README.md"
    lines = read(path).split("\n")
    problems = []
    if not lines or lines[0].rstrip() != "# claimq":
        problems.append("%s:1: the first line is not \"# claimq\"" % path)
    blocks = []             # (language, first content line number, lines)
    i = 0
    while i < len(lines):
        m = re.match(r"^```\s*([A-Za-z0-9_+-]*)\s*$", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append((m.group(1).lower(), i + 2, lines[i + 1:j]))
            i = j
        i += 1
    sh = next((b for b in blocks if b[0] == "sh"), None)
    commands = []
    if sh is None or sh[1] + len(sh[2]) > FIRST_SCREEN:
        problems.append("%s: no ```sh block of the two commands within the first %d lines"
                        % (path, FIRST_SCREEN))
    else:
        first, body = sh[1], sh[2]
        for k, l in enumerate(body):
            if l.strip() and not l.lstrip().startswith("#"):
                commands.append((first + k, l.strip()))
                if k == 0 or not body[k - 1].lstrip().startswith("#"):
                    problems.append("%s:%d: %s has no comment line above it" % (path, first + k, l.strip()))
        if [c for _, c in commands] != ["bash examples/demo", "bash test/run"]:
            problems.append("%s:%d: the first ```sh block's commands are %s, not the demo and the "
                            "test command (bash examples/demo, bash test/run)"
                            % (path, first, ", ".join(c for _, c in commands) or "none"))
        for label, k in (("# Demo:", 0), ("# Tests:", 2)):
            if len(body) <= k or not body[k].startswith(label):
                problems.append("%s:%d: the comment line \"%s ...\" is missing"
                                % (path, first + k, label))
    tap.expect("README.md's first %d lines show the two commands, each under its comment"
               % FIRST_SCREEN, problems)

    # What the tree runs: CI the test command, the demo's header its usage.
    problems = []
    given = dict(((c.split() + [""])[1], (n, c)) for n, c in commands)
    ci = [l.strip() for l in read(".ci/run").split("\n")
          if l.strip() and not l.lstrip().startswith("#")
          and not re.match(r"^(set|cd|export)\b", l.strip())]
    ci = [re.sub(r"^exec\s+", "", l) for l in ci]
    if "test/run" not in given:
        problems.append("%s: no test command to compare with .ci/run" % path)
    elif ci != [given["test/run"][1]]:
        problems.append(".ci/run runs %s, README.md:%d shows %s"
                        % (" and ".join(ci) or "nothing", given["test/run"][0], given["test/run"][1]))
    demo = re.findall(r"^#\s+(bash examples/demo)\b", read("examples/demo"), re.M) \
        if os.path.isfile("examples/demo") else []
    if "examples/demo" not in given:
        problems.append("%s: no demo command" % path)
    elif given["examples/demo"][1] not in demo:
        problems.append("examples/demo's header gives %s, README.md:%d shows %s"
                        % (" or ".join(demo) or "no usage line", given["examples/demo"][0],
                           given["examples/demo"][1]))
    for script in ("examples/demo", "test/run"):
        if not os.path.isfile(script):
            problems.append("%s: there is no %s" % (path, script))
    tap.expect("README.md's commands are the ones CI and examples/demo run", problems)

    # Install and a first enqueue, claim and complete, to paste.
    problems = []
    sql = next((b for b in blocks if b[0] == "sql" and sh is not None and b[1] > sh[1]), None)
    if sql is None:
        problems.append("%s: no ```sql block after the commands" % path)
    else:
        text = "\n".join(sql[2])
        for what, pattern in (("CREATE EXTENSION claimq", r"\bCREATE\s+EXTENSION\s+claimq\b"),
                              ("claimq.enqueue", r"\bclaimq\.enqueue\("),
                              ("claimq.claim", r"\bclaimq\.claim\("),
                              ("claimq.complete", r"\bclaimq\.complete\(")):
            if not re.search(pattern, text, re.I):
                problems.append("%s:%d: the first ```sql block does not run %s" % (path, sql[1], what))
        last = sql[1] + len(sql[2]) - 1
        if last > FIRST_SCREEN:
            problems.append("%s:%d: the first ```sql block ends on line %d, after the first %d"
                            % (path, sql[1], last, FIRST_SCREEN))
    tap.expect("README.md's first %d lines install claimq and enqueue, claim and complete a job"
               % FIRST_SCREEN, problems)


NUMBERS = {w: n for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
SHAPE = re.compile(r"`claimq\.job` has\s+(\w+)\s+indexes\s+and\s+(\w+)\s+checks")


def shape_checks(tap):
    try:
        rows = psql("""
SELECT (SELECT count(*) FROM pg_index WHERE indrelid = 'claimq.job'::regclass),
       (SELECT count(*) FROM pg_constraint
         WHERE conrelid = 'claimq.job'::regclass AND contype = 'c')""")
    except RuntimeError as e:
        tap.result(False, "the job table's indexes and checks can be counted", [str(e)])
        return
    indexes, checks = int(rows[0][0]), int(rows[0][1])
    for path in markdown_docs():
        text = read(path)
        for m in SHAPE.finditer(" ".join(text.split())):
            said = [NUMBERS.get(w.lower(), int(w) if w.isdigit() else -1) for w in m.groups()]
            tap.result(said == [indexes, checks],
                       "%s: claimq.job has %s indexes and %s checks" % (path, m.group(1), m.group(2)),
                       ["the catalogue: %d indexes, %d checks" % (indexes, checks)])


def main():
    tap = Tap()
    release_checks(tap)
    readme_checks(tap)
    try:
        subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "postgres",
                        "-c", "SET client_min_messages = warning",
                        "-c", "DROP DATABASE IF EXISTS %s" % DB, "-c", "CREATE DATABASE %s" % DB],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB,
                        "-c", "CREATE EXTENSION claimq"], check=True, stdout=subprocess.DEVNULL)
    except subprocess.CalledProcessError as e:
        tap.result(False, "a database with claimq", [str(e)])
        return 1
    try:
        duty_checks(tap)
        settings_checks(tap)
        shape_checks(tap)
        word_checks(tap)
    finally:
        subprocess.run([PSQL, "-X", "-q", "-d", "postgres", "-c", "DROP DATABASE IF EXISTS %s" % DB],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("# %d facts checked, %d failed" % (tap.n, tap.failed))
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
