#!/usr/bin/env python3
"""Draw bench/run's results as PNG charts (python3-matplotlib).

    bench/charts.py OUTDIR RESULTS.json [RESULTS.json ...]

Each RESULTS.json is what one profile of `bench/run --json FILE` wrote
(bench/run writes FILE-<profile>.json).  For each profile it draws:

  <profile>-ratios.png     jobs/s as a ratio to the baseline of the same
                           flow and run, per batch size and client count:
                           claimq in one transaction and in the lease flow
                           (and its portable edition's, if measured),
                           and the oracle and write-only floor if measured;
  <profile>-sustained.png  for a --sustained run, per second: jobs
                           completed and enqueued, ready backlog, wait p99
                           (the claims of that second) and claimq.job's size.
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FLOWS = [("claimq-tx", "baseline-tx", "claimq, one transaction"),
         ("claimq-lease", "baseline-lease", "claimq, lease flow"),
         ("portable-tx", "baseline-tx", "portable edition, one transaction"),
         ("portable-lease", "baseline-lease", "portable edition, lease flow"),
         ("oracle", "baseline-lease", "oracle (lease flow)"),
         ("floor", "baseline-tx", "write-only floor")]


def ratios(results, out, profile):
    cells = results.get("cells", [])
    if not cells:
        return None
    variant = cells[0]["variant"]
    rate = {(c["method"], c["clients"], c["batch"]): c["jobs_per_s"]
            for c in cells if c["variant"] == variant}
    batches = sorted({c["batch"] for c in cells})
    clients = sorted({c["clients"] for c in cells})
    flows = [f for f in FLOWS if any(k[0] == f[0] for k in rate)]
    fig, axes = plt.subplots(1, len(batches), figsize=(4.2 * len(batches), 4), sharey=True,
                             squeeze=False)
    width = 0.8 / max(len(flows), 1)
    for ax, batch in zip(axes[0], batches):
        for i, (method, base, label) in enumerate(flows):
            ys = []
            for n in clients:
                a, b = rate.get((method, n, batch)), rate.get((base, n, batch))
                ys.append(a / b if a and b else 0)
            xs = [j + (i - (len(flows) - 1) / 2) * width for j in range(len(clients))]
            ax.bar(xs, ys, width, label=label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(clients)))
        ax.set_xticklabels(["%d clients" % n for n in clients])
        ax.set_title("batch %d" % batch)
    axes[0][0].set_ylabel("jobs/s, ratio to the hand-written SQL")
    axes[0][-1].legend(fontsize=8, loc="upper left")
    fig.suptitle("claimq against the same work in plain SQL, %s profile" % profile)
    fig.tight_layout()
    path = os.path.join(out, "%s-ratios.png" % profile)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def sustained(results, out, profile):
    s = results.get("extras", {}).get("sustained")
    if not s or not s.get("per_second"):
        return None
    rows = s["per_second"]
    t = [r["t"] for r in rows]
    fig, axes = plt.subplots(4, 1, figsize=(9, 9), sharex=True)
    axes[0].plot(t, [r["completed"] for r in rows], label="completed/s")
    axes[0].plot(t, [r["enqueued"] for r in rows], label="enqueued/s", alpha=0.7)
    axes[0].axhline(s["rate"], color="grey", linestyle=":", label="offered")
    axes[0].set_ylabel("jobs/s")
    axes[0].legend(fontsize=8)
    axes[1].plot(t, [r["ready"] for r in rows])
    axes[1].set_ylabel("ready jobs")
    axes[2].plot(t, [r["wait_p99_ms"] for r in rows])
    axes[2].set_ylabel("wait p99, ms")
    axes[3].plot(t, [r["size_mb"] for r in rows])
    axes[3].set_ylabel("claimq.job MB")
    axes[3].set_xlabel("seconds")
    fig.suptitle("sustained producers and consumers, %s profile, %d jobs/s offered"
                 % (profile, s["rate"]))
    fig.tight_layout()
    path = os.path.join(out, "%s-sustained.png" % profile)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:]:
        with open(name) as f:
            data = json.load(f)
        profile = data.get("profile") or os.path.splitext(os.path.basename(name))[0]
        for draw in (ratios, sustained):
            path = draw(data.get("results", {}), out, profile)
            if path:
                print("chart: " + path)


if __name__ == "__main__":
    main()
