#!/usr/bin/env python3
"""Scale figures for trainbench history, on synthetic reports (stdlib only).

1. `history add` of 1,000 reports in one call (50 profiles x 20 runs, each report shaped like a
   real one: the template is a report of the CPU ladder), into a fresh SQLite file; then the
   same call again (all present: the idempotent path).
2. A database of 50 series x 1,000 runs, built the way CI builds one: 1,000 `history add` calls,
   one per commit, each adding that commit's 50 reports (--commit, --time). Then
   `history show` over it: text, --format json, --out (index.html and 50 SVG charts), and once
   with other parameters (--max-p 0.0005), which recomputes and stores every series' change
   points.
3. `history gate` over that database: one pull request's 50 reports (one per series, five
   processes of two windows, at the level after the step) against main's runs since each
   series' change point; text, markdown and json.
Each timing is the wall time of the trainbench process. Usage:
  python3 scripts/bench-history.py --trainbench build/trainbench [--work /tmp/x] [--out docs/results/x.md]
"""
import argparse
import copy
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "docs", "results", "2026-11-29-cpu-2core", "cpu-ladder", "00-baseline.json")


def report(template, profile, commit_index, rng, level):
    r = copy.deepcopy(template)
    r["profile"]["name"] = "bench-%02d" % profile
    r["profile"]["hash"] = "%016x" % (0x1000 + profile)
    r["context"]["date"] = "2026-%02d-%02dT%02d:%02d:00Z" % (1 + commit_index // 600, 1 + commit_index // 24 % 25,
                                                           commit_index % 24, profile)
    rates = [level * (1 + rng.gauss(0, 0.02)) for _ in range(5)]
    r["results"]["repeats"] = [{"samples": 48, "elapsed_s": 48 / x, "samples_per_s": x, "process": i // 3}
                               for i, x in enumerate(rates)]
    return r


def timed(cmd, ok=(0,)):
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL)
    if r.returncode not in ok:
        raise SystemExit("%s: exit %d" % (" ".join(cmd), r.returncode))
    return time.perf_counter() - t


def candidate(template, profile, rng, level):
    r = report(template, profile, 1000, rng, level)
    rates = [level * (1 + rng.gauss(0, 0.02)) for _ in range(10)]
    r["results"]["repeats"] = [{"samples": 48, "elapsed_s": 48 / x, "samples_per_s": x, "process": i // 2}
                               for i, x in enumerate(rates)]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainbench", required=True)
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one, removed)")
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--profiles", type=int, default=50)
    ap.add_argument("--commits-per-add", type=int, default=1,
                    help="build the large database with this many commits' reports per history add call "
                         "(default 1, as CI adds; 20 builds it in minutes rather than half an hour)")
    ap.add_argument("--reuse", action="store_true",
                    help="with --work: use the 50 x 1,000-run database a previous run left there")
    ap.add_argument("--out", default=None, help="write the figures as a markdown table here")
    args = ap.parse_args()
    exe = os.path.abspath(args.trainbench)
    template = json.load(open(TEMPLATE))
    rng = random.Random(1)
    work = args.work or tempfile.mkdtemp(prefix="bench-history-")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        # 1. add 1,000 reports in one call
        folder = os.path.join(work, "thousand")
        os.makedirs(folder, exist_ok=True)
        for p in range(50):
            for c in range(20):
                with open(os.path.join(folder, "p%02d-c%02d.json" % (p, c)), "w") as f:
                    json.dump(report(template, p, c, rng, 1000 + 10 * p), f, indent=1)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        db = os.path.join(work, "thousand.sqlite")
        add = [exe, "history", "add", "-q", "--db", db, "--commit", "c0", "--branch", "main", folder]
        rows.append(("history add: 1,000 reports (%.1f MB) into a new database, one call" % (size / 1e6), timed(add)))
        rows.append(("history add: the same 1,000 again (all present)", timed(add)))

        # 2. 50 series x 1,000 runs, one add per commit
        big = os.path.join(work, "big.sqlite")
        commit_dir = os.path.join(work, "commit")
        adds = []
        levels = [1000 + 10 * p for p in range(args.profiles)]
        reuse = args.reuse and os.path.exists(big)
        if reuse:
            levels = [x * 0.95 for x in levels]
        per_add = args.commits_per_add
        for first in range(0, 0 if reuse else args.commits, per_add):
            shutil.rmtree(commit_dir, ignore_errors=True)
            os.makedirs(commit_dir)
            for c in range(first, min(first + per_add, args.commits)):
                if c == args.commits // 2:
                    levels = [x * 0.95 for x in levels]  # a 5% step half way
                for p in range(args.profiles):
                    with open(os.path.join(commit_dir, "c%04d-p%02d.json" % (c, p)), "w") as f:
                        json.dump(report(template, p, c, rng, levels[p]), f)
            # One commit per call as CI adds; with --commits-per-add N, N commits' reports per call,
            # each run at its report's date (the same order), all under the first commit's name.
            when = ["--time", str(1767225600 + 3600 * first)] if per_add == 1 else []
            adds.append(timed([exe, "history", "add", "-q", "--db", big, "--commit", "%040x" % first, "--branch",
                               "main"] + when + [commit_dir]))
        adds.sort()
        if adds and per_add == 1:
            rows.append(("history add: one commit's %d reports into the %d-run database, median of %d calls (max %.2f s)"
                         % (args.profiles, args.profiles * args.commits, len(adds), adds[-1]), adds[len(adds) // 2]))
        show = [exe, "history", "show", "--db", big]
        rows.append(("history show: %d series x %d runs, text" % (args.profiles, args.commits), timed(show)))
        rows.append(("history show --format json (all runs and change points)", timed(show + ["--format", "json"])))
        rows.append(("history show --out (index.html + %d SVG charts)" % args.profiles,
                     timed(show + ["--out", os.path.join(work, "html")])))
        rows.append(("history show --max-p 0.0005: every series' change points recomputed and stored",
                     timed(show + ["--max-p", "0.0005"])))
        # 3. the gate: one pull request's reports against main (exit 1 when a series is SLOWER)
        cand_dir = os.path.join(work, "candidate")
        shutil.rmtree(cand_dir, ignore_errors=True)
        os.makedirs(cand_dir)
        for p in range(args.profiles):
            with open(os.path.join(cand_dir, "p%02d.json" % p), "w") as f:
                json.dump(candidate(template, p, rng, levels[p]), f)
        gate = [exe, "history", "gate", "--db", big, "--branch", "main", cand_dir]
        for fmt in ("text", "markdown", "json"):
            times = sorted(timed(gate + ["--format", fmt], ok=(0, 1)) for _ in range(5))
            rows.append(("history gate --format %s: %d candidate series against %d runs each, median of 5 (max %.2f s)"
                         % (fmt, args.profiles, args.commits, times[-1]), times[2]))
        html = os.path.getsize(os.path.join(work, "html", "index.html"))
        dbsize = os.path.getsize(big)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    lines = ["| what | wall time (s) |", "|---|---:|"] + ["| %s | %.2f |" % (w, t) for w, t in rows]
    lines.append("")
    lines.append("Database of %d runs: %.1f MB; index.html: %.1f MB." % (args.profiles * args.commits, dbsize / 1e6,
                                                                        html / 1e6))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
