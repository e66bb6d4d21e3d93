#!/usr/bin/python3
"""Sums up an A/B sitting of bench/run --ab: one JSON file per build,
round and profile (DIR/rev-ROUND-PROFILE.json, DIR/cur-ROUND-PROFILE.json,
as the driver writes them with --json).

For every claimq method of the matrix (the C edition's claimq-* and the
portable edition's portable-*) it prints, per profile,
synchronous_commit variant, batch and clients: the ratio of its jobs/s to
the baseline run on the same server in the same round (so that the
machine's speed, which drifts on a shared machine, cancels out), for each
round of each build; their means; and the current build's mean over the
revision's.  WAL bytes per job likewise, as means.

Usage: ab.py REV-LABEL CUR-LABEL DIR
"""
import glob
import json
import os
import re
import statistics
import sys


def main(rev_label, cur_label, d):
    runs = {}       # (profile, variant, method, clients, batch) -> build -> [ratio, ...]
    sustained = []  # (profile, build, one sustained run)
    wal = {}
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        m = re.match(r"^(rev|cur)-(\d+)-(\w+)\.json$", os.path.basename(path))
        if not m:
            continue
        build, _, profile = m.groups()
        with open(path) as f:
            data = json.load(f)
        methods = {}
        for r in data["results"].get("extras", {}).get("sustained_runs", []):
            sustained.append((profile, build, r))
        for c in data["results"].get("cells", []):
            methods[(c["variant"], c["method"], c["clients"], c["batch"])] = c
        for (variant, method, clients, batch), c in methods.items():
            if not method.startswith(("claimq-", "portable-")):
                continue
            ref = methods.get((variant, "baseline-" + method.split("-", 1)[1], clients, batch))
            if not ref or not float(ref["jobs_per_s"] or 0):
                continue
            key = (profile, variant, method, clients, batch)
            runs.setdefault(key, {}).setdefault(build, []).append(float(c["jobs_per_s"]) / float(ref["jobs_per_s"]))
            if c.get("wal_per_job"):
                wal.setdefault(key, {}).setdefault(build, []).append(float(c["wal_per_job"]))
    if sustained:
        print_sustained(sustained, rev_label, cur_label)
    if not runs:
        if sustained:
            return 0
        print("ab.py: no results in %s" % d)
        return 1
    print()
    print("### A/B: ratio to the baseline on the same server; %s against %s" % (cur_label, rev_label))
    print()
    print("| profile | sync | method | batch | clients | %s (each round) | %s (each round) | %s mean | %s mean | %s / %s | WAL B/job %s → %s |"
          % (rev_label, cur_label, rev_label, cur_label, cur_label, rev_label, rev_label, cur_label))
    print("|---|---|---|---:|---:|---|---|---:|---:|---:|---|")
    for key in sorted(runs):
        profile, variant, method, clients, batch = key
        r = runs[key]
        a, b = r.get("rev", []), r.get("cur", [])
        ma = statistics.mean(a) if a else None
        mb = statistics.mean(b) if b else None
        w = wal.get(key, {})
        wa = "%.0f" % statistics.mean(w["rev"]) if w.get("rev") else "-"
        wb = "%.0f" % statistics.mean(w["cur"]) if w.get("cur") else "-"
        print("| %s | %s | %s | %d | %d | %s | %s | %s | %s | %s | %s → %s |" % (
            profile, variant, method, batch, clients,
            ", ".join("%.2f" % x for x in a) or "-",
            ", ".join("%.2f" % x for x in b) or "-",
            "%.2f×" % ma if ma else "-", "%.2f×" % mb if mb else "-",
            "%.3f" % (mb / ma) if ma and mb else "-", wa, wb))
    return 0


def print_sustained(sustained, rev_label, cur_label):
    """Each build's sustained runs at the same offered rate, and their
    means: what a build costs the server per job while it keeps up."""
    print()
    print("### A/B: sustained runs; %s against %s" % (cur_label, rev_label))
    print()
    print("| profile | build | offered/s | completed/s | most ready | ready at end | WAL B/job "
          "| server CPU ms per 1,000 jobs | heap-only updates | MB at end |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    label = {"rev": rev_label, "cur": cur_label}
    keys = sorted({(p, b) for p, b, _ in sustained})
    for profile, build in keys:
        rs = [r for p, b, r in sustained if (p, b) == (profile, build)]
        for r in rs:
            print("| %s | %s | %d | %.0f | %d | %d | %d | %.0f | %.0f%% | %.1f |" % (
                profile, label[build], r["rate"], r["completed_per_s"], r["most_ready"],
                r["ready_at_end"], r["wal_per_job"], r["cpu_ms_per_1000"],
                100 * r.get("hot_share", 0.0), r["size_at_end"] / 1048576.0))
        print("| %s | %s, mean | | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f%% | %.1f |" % (
            profile, label[build],
            statistics.mean(r["completed_per_s"] for r in rs),
            statistics.mean(r["most_ready"] for r in rs),
            statistics.mean(r["ready_at_end"] for r in rs),
            statistics.mean(r["wal_per_job"] for r in rs),
            statistics.mean(r["cpu_ms_per_1000"] for r in rs),
            100 * statistics.mean(r.get("hot_share", 0.0) for r in rs),
            statistics.mean(r["size_at_end"] for r in rs) / 1048576.0))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
