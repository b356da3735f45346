#!/usr/bin/env python3
"""A small history to look at: four series over 80 nightly commits, added the way CI adds them.

- resnet50-amp on 8 H100s: the driver moves from 570.86 to 575.51 at commit 30 and the series
  drops 6%; a code change at commit 60 wins back 4%.
- resnet18 on one H100: steady, with two runs that failed.
- cpu-00-baseline on a 2-core CPU: a 10% regression at commit 45, LibTorch unchanged.
- imagenet-loader on one H100: noisy (cv 3%), no change.
Then `trainbench history show --out OUT`. Usage:
  python3 scripts/history-demo.py --trainbench build/trainbench --db /tmp/demo.sqlite --out /tmp/demo-html
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile


def report(name, phash, gpu, world, cpu, rates, driver, libtorch, status, date, c):
    return {
        "schema_version": 1,
        "tool": {"name": "trainbench", "version": "0.1.0", "git": "demo"},
        "status": status,
        "error": None if status == "ok" else {"kind": "runtime", "message": "CUDA error: an illegal memory access"},
        "context": {"date": date, "host": "ci-runner-%d" % (c // 25 + 1), "cpu": {"model": cpu[0], "cores": cpu[1]},
                    "gpu": {"name": gpu, "uuid": "GPU-0", "driver": driver, "memory_bytes": 85899345920} if gpu else None,
                    "libtorch": libtorch, "cuda": "13.0", "cudnn": "9.19.0", "build_type": "Release"},
        "profile": {"name": name, "hash": phash},
        "results": {"repeats": [{"samples": 512, "elapsed_s": 512 / r, "samples_per_s": r, "process": i // 3}
                                for i, r in enumerate(rates)],
                    "distributed": {"world_size": world} if world > 1 else None},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainbench", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = random.Random(7)
    tmp = tempfile.mkdtemp(prefix="history-demo-")
    try:
        for c in range(80):
            folder = os.path.join(tmp, "c%02d" % c)
            os.makedirs(folder)
            date = "2026-10-%02dT02:%02d:00Z" % (1 + c // 3, c % 3 * 20)
            driver = "570.86" if c < 30 else "575.51"
            series = [
                ("resnet50-amp", "9f1c2a7b3d4e5f60", "NVIDIA H100 80GB HBM3", 8, ("AMD EPYC 9654", 192),
                 24100 * (0.94 if c >= 30 else 1) * (1.04 if c >= 60 else 1), 0.008, "ok"),
                ("resnet18", "1a2b3c4d5e6f7081", "NVIDIA H100 80GB HBM3", 1, ("AMD EPYC 9654", 192), 9800, 0.01,
                 "error" if c in (22, 51) else "ok"),
                ("cpu-00-baseline", "6ef08c308a1e3a2f", None, 1, ("AMD EPYC", 2), 76 * (0.9 if c >= 45 else 1), 0.015,
                 "ok"),
                ("imagenet-loader", "77aa88bb99cc00dd", "NVIDIA H100 80GB HBM3", 1, ("AMD EPYC 9654", 192), 5200,
                 0.03, "ok"),
            ]
            for name, phash, gpu, world, cpu, level, cv, status in series:
                rates = [level * (1 + rng.gauss(0, cv)) for _ in range(6)]
                if status != "ok":
                    rates = rates[:2]
                with open(os.path.join(folder, name + ".json"), "w") as f:
                    json.dump(report(name, phash, gpu, world, cpu, rates, driver, "2.11.0", status, date, c), f)
            subprocess.run([args.trainbench, "history", "add", "-q", "--db", args.db, "--commit",
                            "%07x%033x" % (0xa1b2c3d + 7919 * c, c), "--branch", "main", folder],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([args.trainbench, "history", "show", "--db", args.db, "--out", args.out], check=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
