#!/usr/bin/env python3
"""Windows per side that `trainbench compare` needs, by simulation: the tables of docs/statistics.md.
    source scripts/env.sh && "$TRAINBENCH_PYTHON" scripts/power-table.py [--trials 4000] [--seed 1] > tables.md
    source scripts/env.sh && "$TRAINBENCH_PYTHON" scripts/power-table.py --levels [--trials 4000] > levels.md

Each window's rate is mean * (1 + change) * (1 + cv * z), z standard normal, independent.
Table 1 (detect): the fewest windows per side at which the two-sided Mann-Whitney U test at
alpha = 0.05 rejects in the right direction with the given probability (power). That is compare's
test exactly: exact distribution up to 20 windows per side, normal approximation with continuity
correction beyond (continuous rates have no ties).
Table 2 (SAME): the fewest windows per side at which the 95% Hodges-Lehmann interval of an unchanged
profile lies within ±threshold, so that compare says SAME, with the given probability.
--levels: the tables by level of repetition. A run is P fresh processes of n windows each; a
window's rate is mean * (1 + change) * (1 + between * z_process) * (1 + within * z_window), the
process's z shared by its windows. compare's default test ranks each process's median window
(exact Mann-Whitney, P against P); the window-level test ranks all P * n windows as if independent.
Needs numpy only (the project's venv has it)."""
import argparse
import math

import numpy as np

ALPHA = 0.05
EXACT_LIMIT = 20


def u_distribution(n, m):
    """Counts of U for samples of sizes n and m without ties (as lib/trainbench/measure/rank_test.cpp)."""
    c = [[None] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 or j == 0:
                c[i][j] = np.zeros(i * j + 1)
                c[i][j][0] = 1
                continue
            row = np.zeros(i * j + 1)
            prev = c[i - 1][j]
            row[j:j + len(prev)] += prev
            row[:len(c[i][j - 1])] += c[i][j - 1]
            c[i][j] = row
    return c[n][m]


def normal_sf(z):
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def normal_quantile(q):
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 1.0 - normal_sf(mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def critical_u(n):
    """Largest u whose two-sided p (2 P(U <= u)) is below alpha, n per side; None if none is."""
    if n > EXACT_LIMIT:
        return None
    dist = u_distribution(n, n)
    cdf = np.cumsum(dist) / dist.sum()
    ok = np.nonzero(2 * cdf < ALPHA)[0]
    return int(ok[-1]) if len(ok) else -1


def interval_cut(n, confidence):
    tail = (1 - confidence) / 2
    if n <= EXACT_LIMIT:
        dist = u_distribution(n, n)
        cdf = np.cumsum(dist) / dist.sum()
        return int(np.sum(cdf <= tail * (1 + 1e-9)))  # as rank_test.cpp: a tail can equal the target exactly
    z = normal_quantile(1 - tail)
    return max(0, math.floor(n * n / 2 - z * math.sqrt(n * n * (2 * n + 1) / 12)))


def windows(rng, trials, n, change, cv):
    return (1.0 + change) * (1.0 + cv * rng.standard_normal((trials, n)))


def u_of_base(base, cand):
    """U of the base sample (pairs it wins), per trial."""
    n = base.shape[1]
    pooled = np.concatenate([base, cand], axis=1)
    ranks = pooled.argsort(axis=1).argsort(axis=1) + 1
    return ranks[:, :n].sum(axis=1) - n * (n + 1) / 2


def detect_power(rng, trials, n, change, cv):
    base = windows(rng, trials, n, 0.0, cv)
    cand = windows(rng, trials, n, -change, cv)  # slower: base wins most pairs, U large
    u = u_of_base(base, cand)
    crit = critical_u(n)
    if crit is not None:
        hits = (n * n - u) <= crit
    else:
        sd = math.sqrt(n * n * (2 * n + 1) / 12)
        hits = (u - n * n / 2 - 0.5) / sd > normal_quantile(1 - ALPHA / 2)
    return float(np.mean(hits))


def same_probability(rng, trials, n, threshold, cv):
    k = interval_cut(n, 1 - ALPHA)
    if k == 0:
        return 0.0
    trials = min(trials, max(200, 50_000_000 // (n * n)))  # fewer trials where each holds n^2 ratios
    inside = 0
    chunk = max(1, 4_000_000 // (n * n))
    for start in range(0, trials, chunk):
        t = min(chunk, trials - start)
        base = np.log(windows(rng, t, n, 0.0, cv)).astype(np.float32)
        cand = np.log(windows(rng, t, n, 0.0, cv)).astype(np.float32)
        d = (cand[:, :, None] - base[:, None, :]).reshape(t, -1)
        low = np.partition(d, k - 1, axis=1)[:, k - 1]
        high = np.partition(d, d.shape[1] - k, axis=1)[:, d.shape[1] - k]
        inside += int(np.sum((np.expm1(low) >= -threshold) & (np.expm1(high) <= threshold)))
    return inside / trials


def fewest(probability, target, seed, limit=2000):
    """Smallest n with probability(n) >= target: doubling, then bisection (each n its own seed)."""
    def at(n):
        return probability(np.random.default_rng([seed, n]), n)

    lo, hi = 1, 2
    while at(hi) < target:
        if hi >= limit:
            return None
        lo, hi = hi, min(hi * 2, limit)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


POWERS = [0.80, 0.95]


def print_table(title, corner, columns, cvs, probability, seed):
    """One Markdown table: a row per cv, a cell per column with the windows for each of POWERS."""
    print(title + "\n")
    print(f"| cv \\ {corner} | " + " | ".join(f"{c:.0%} (80% / 95%)" for c in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for cv in cvs:
        cells = []
        for c in columns:
            need = [fewest(lambda rng, n: probability(rng, n, c, cv), p, seed) for p in POWERS]
            cells.append(" / ".join(str(x) if x else "> 2000" for x in need))
        print(f"| {cv:.0%} | " + " | ".join(cells) + " |", flush=True)


def two_level(rng, trials, processes, windows_per_process, change, between, within):
    """Rates of `trials` runs: shape (trials, processes, windows)."""
    z_process = rng.standard_normal((trials, processes, 1))
    z_window = rng.standard_normal((trials, processes, windows_per_process))
    return (1.0 + change) * (1.0 + between * z_process) * (1.0 + within * z_window)


def rejects(base, cand):
    """Two-sided Mann-Whitney at ALPHA, per trial, in either direction: +1 candidate slower, -1 faster, 0 none."""
    n, m = base.shape[1], cand.shape[1]
    pooled = np.concatenate([base, cand], axis=1)
    ranks = pooled.argsort(axis=1).argsort(axis=1) + 1
    u = ranks[:, :n].sum(axis=1) - n * (n + 1) / 2  # pairs base wins: large when the candidate is slower
    if n == m and n <= EXACT_LIMIT:
        crit = critical_u(n)
        return np.where(n * m - u <= crit, 1, np.where(u <= crit, -1, 0))
    sd = math.sqrt(n * m * (n + m + 1) / 12)
    z = (np.abs(u - n * m / 2) - 0.5) / sd
    return np.where(z > normal_quantile(1 - ALPHA / 2), np.sign(u - n * m / 2), 0)


def level_outcomes(rng, trials, processes, windows_per_process, change, between, within):
    """(process-level outcomes, window-level outcomes) for a candidate `change` slower."""
    base = two_level(rng, trials, processes, windows_per_process, 0.0, between, within)
    cand = two_level(rng, trials, processes, windows_per_process, -change, between, within)
    by_process = rejects(np.median(base, axis=2), np.median(cand, axis=2))
    by_window = rejects(base.reshape(trials, -1), cand.reshape(trials, -1))
    return by_process, by_window


# (between-process cv, within-process cv, change): a quiet GPU-like split, one where the processes
# differ more than their windows, and the 2-core CPU machine's measured split.
LEVEL_CASES = [(0.005, 0.005, 0.02), (0.02, 0.005, 0.05), (0.053, 0.06, 0.10), (0.053, 0.06, 0.20)]


def print_levels(trials, seed):
    print(f"False alarms: an unchanged profile called SLOWER or FASTER, {ALPHA} two-sided, 5 processes x 5 windows "
          f"per side ({trials} trials)\n")
    print("| between-process cv | within-process cv | process level | window level |")
    print("|---:|---:|---:|---:|")
    for between, within in [(0.0, 0.01), (0.005, 0.005), (0.02, 0.005), (0.05, 0.01), (0.053, 0.06)]:
        p, w = level_outcomes(np.random.default_rng([seed, 1]), trials, 5, 5, 0.0, between, within)
        print(f"| {between:.1%} | {within:.1%} | {np.mean(p != 0):.1%} | {np.mean(w != 0):.1%} |", flush=True)
    for between, within, change in LEVEL_CASES:
        print(f"\nPower: {change:.0%} slower called SLOWER at the process level, between-process cv {between:.1%}, "
              f"within-process cv {within:.1%} ({trials} trials per cell)\n")
        columns = [1, 3, 5, 10]
        print("| processes per side \\ windows per process | " + " | ".join(str(c) for c in columns) + " |")
        print("|---|" + "---:|" * len(columns))
        for processes in (4, 5, 6, 8, 10, 15, 20):
            cells = []
            for n in columns:
                p, _ = level_outcomes(np.random.default_rng([seed, processes, n]), trials, processes, n, change,
                                      between, within)
                cells.append(f"{np.mean(p == 1):.0%}")
            print(f"| {processes} | " + " | ".join(cells) + " |", flush=True)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--levels", action="store_true", help="the tables by level: processes x windows per process")
    args = ap.parse_args()
    if args.levels:
        print_levels(args.trials, args.seed)
        return
    cvs = [0.01, 0.02, 0.05, 0.10]
    print_table(f"Detect: windows per side for p < {ALPHA} in the right direction ({args.trials} trials per count)",
                "change", [0.02, 0.03, 0.05, 0.10], cvs,
                lambda rng, n, change, cv: detect_power(rng, args.trials, n, change, cv), args.seed)
    print_table(f"\nSAME: windows per side for the {1 - ALPHA:.0%} interval of an unchanged profile to lie within "
                f"±threshold ({args.trials} trials per count)",
                "threshold", [0.01, 0.02, 0.03, 0.05], cvs,
                lambda rng, n, threshold, cv: same_probability(rng, args.trials, n, threshold, cv), args.seed)


if __name__ == "__main__":
    main()
