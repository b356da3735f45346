#!/usr/bin/env python3
"""trainbench history's change points against apache-otava's, on the same series.

Makes series of run medians (steps of 1-15% at random runs, noise of 0.3-3%, outliers, A/A
series without any change, a slow drift), writes each value as a one-window run report, adds
them all with `trainbench history add` and reads the change points back with
`trainbench history show --format json`: the whole path a user's runs take. Otava's
compute_change_points (window 50, max_pvalue 0.001, min_magnitude 0: its defaults) runs on the
same values.

With --otava-compatible (population sd in the t-test, Otava's merge step) trainbench must find
exactly Otava's change points with the same p-values (relative 1e-6): any difference fails.
trainbench's defaults differ on purpose (docs/history.md): the script lists where they differ.

Run with the Python that has apache-otava (scripts/setup.sh installs it):
  ~/.cache/trainbench/venv-otava-0.8.0/bin/python scripts/otava-crosscheck.py --trainbench build/trainbench
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

from otava.analysis import compute_change_points

WINDOW, MAX_P, MIN_MAGNITUDE = 50, 0.001, 0.0


def make_series(rng, kind, n):
    level = rng.uniform(200, 3000)
    cv = rng.choice([0.003, 0.01, 0.02, 0.03])
    values, steps = [], []
    if kind == "steps":
        steps = sorted(rng.sample(range(5, n - 3), rng.randint(1, 4)))
    for i in range(n):
        if i in steps:
            level *= 1 + rng.choice([-1, 1]) * rng.uniform(0.01, 0.15)
        v = level * (1 + rng.gauss(0, cv))
        if kind == "outliers" and rng.random() < 0.03:
            v *= rng.choice([0.7, 1.3])
        if kind == "drift":
            v *= 1 + 0.0005 * i
        values.append(v)
    return values


def report(value, name, profile_hash, i):
    return {
        "schema_version": 1,
        "tool": {"name": "trainbench", "version": "0.1.0", "git": "crosscheck"},
        "status": "ok",
        "error": None,
        "context": {"date": "2026-01-01T%02d:%02d:%02dZ" % (i // 3600, i // 60 % 60, i % 60),
                    "host": "crosscheck", "cpu": {"model": "synthetic", "cores": 1}, "gpu": None,
                    "libtorch": "2.11.0", "cuda": "none", "cudnn": "none", "build_type": "Release"},
        "profile": {"name": name, "hash": profile_hash},
        "results": {"repeats": [{"samples": 1, "elapsed_s": 1 / value, "samples_per_s": value}]},
    }


def trainbench_change_points(exe, db, extra):
    out = subprocess.run([exe, "history", "show", "--db", db, "--format", "json"] + extra,
                         check=True, capture_output=True, text=True).stdout
    found = {}
    for s in json.loads(out)["series"]:
        index = {r["id"]: i for i, r in enumerate(s["runs"])}
        found[s["profile_name"]] = [(index[c["run_id"]], c["p_value"]) for c in s["change_points"]]
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainbench", required=True)
    ap.add_argument("--series", type=int, default=40)
    ap.add_argument("--length", type=int, default=160)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    kinds = ["steps", "steps", "steps", "aa", "outliers", "drift"]
    series = {}
    with tempfile.TemporaryDirectory() as tmp:
        reports = os.path.join(tmp, "reports")
        os.mkdir(reports)
        for k in range(args.series):
            kind = kinds[k % len(kinds)]
            name = "s%03d-%s" % (k, kind)
            series[name] = make_series(rng, kind, args.length)
            for i, v in enumerate(series[name]):
                with open(os.path.join(reports, "%s-%04d.json" % (name, i)), "w") as f:
                    json.dump(report(v, name, "hash-%s" % name, i), f)
        db = os.path.join(tmp, "history.sqlite")
        subprocess.run([args.trainbench, "history", "add", "-q", "--db", db, "--commit", "crosscheck",
                        "--branch", "main", reports], check=True, stdout=subprocess.DEVNULL)
        compat = trainbench_change_points(args.trainbench, db, ["--otava-compatible"])
        default = trainbench_change_points(args.trainbench, db, [])

    mismatches, differ, total = 0, [], 0
    for name, values in series.items():
        cps, _ = compute_change_points(list(values), window_len=WINDOW, max_pvalue=MAX_P, min_magnitude=MIN_MAGNITUDE)
        otava = [(int(c.index), float(c.stats.pvalue)) for c in cps]
        total += len(otava)
        ours = compat.get(name, [])
        same = [a for a, _ in ours] == [a for a, _ in otava] and all(
            abs(p - q) <= 1e-6 * max(abs(q), 1e-300) or abs(p - q) < 1e-15 for (_, p), (_, q) in zip(ours, otava))
        if not same:
            mismatches += 1
            print("MISMATCH %s: otava %s, trainbench --otava-compatible %s" % (name, otava, ours))
        d = [a for a, _ in default.get(name, [])]
        if d != [a for a, _ in otava]:
            differ.append("%s: otava %s, trainbench default %s" % (name, [a for a, _ in otava], d))
    print("%d series of %d runs, %d change points by otava %s" % (len(series), args.length, total, "0.8.0"))
    print("trainbench --otava-compatible: %s" % ("the same change points and p-values in every series"
                                                if mismatches == 0 else "%d series differ" % mismatches))
    print("trainbench defaults (sample sd, both neighbours retested, spread floor): %d series differ from otava%s"
          % (len(differ), ":" if differ else ""))
    for line in differ:
        print("  " + line)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
