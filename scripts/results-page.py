#!/usr/bin/env python3
"""Writes the Markdown page for docs/results/ from a gpu-check run: the ladder next to the
PyTorch reference and the article's numbers, the extra rungs, and anything that failed.
    scripts/results-page.py --ladder DIR --plus DIR --pytorch DIR [--tests FILE] [--dist FILE]
                            [--bottleneck DIR] > page.md"""
import argparse
import glob
import json
import os

ARTICLE = {"00-baseline": 542.7, "01-workers": 797.8, "02-pin-memory": 964.5, "03-non-blocking": 1019.5,
           "04-amp": 1628.8, "05-batch-512": 2201.6, "06-cuda-graph": 2704.4, "07-stream-overlap": 3173.4}


def load(folder):
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, "*.json"))):
        out[os.path.basename(f)[:-5]] = json.load(open(f))
    return out


def median(r):
    s = r.get("results", {}).get("samples_per_s")
    return s["median"] if r.get("status") == "ok" and s else None


def fmt(v):
    return f"{v:.1f}" if v is not None else "–"


def dist_section(path):
    print("\n## Data-parallel\n")
    if not os.path.exists(path):
        print("no report: the run did not start")
        return [f"data-parallel: no report at {os.path.basename(path)}"]
    r = json.load(open(path))
    d = (r.get("results") or {}).get("distributed") or {}
    eff = d.get("scaling_efficiency")
    print(f"- status {r.get('status')}: {d.get('backend', '?')}, {d.get('world_size', '?')} rank(s) via "
          f"{d.get('launcher', '?')}, {fmt(median(r))} samples/s, all-reduce steps {d.get('allreduce_steps', '?')}, "
          f"buckets launched in backward {d.get('buckets_launched_in_backward', '?')}, scaling efficiency "
          + (f"{100 * eff:.1f}%" if eff is not None else "–"))
    return [] if r.get("status") == "ok" else [f"data-parallel: {(r.get('error') or {}).get('message', '?')}"]


def bottleneck_section(folder):
    print("\n## Input or compute? (`trainbench bottleneck`)\n")
    print("| rung | loop samples/s | ceiling samples/s | loop / ceiling | 95% CI of the change | verdict |")
    print("|---|---:|---:|---:|---:|---|")
    failures = []
    for sub in sorted(glob.glob(os.path.join(folder, "*"))):
        name, f = os.path.basename(sub), os.path.join(sub, "bottleneck.json")
        if not os.path.exists(f):
            print(f"| {name} | – | – | – | – | failed (see its loop.json / ceiling.json) |")
            failures.append(f"bottleneck {name}: no verdict")
            continue
        b = json.load(open(f))
        ci = b.get("interval")
        ci_text = f"{ci['low_pct']:+.1f}% to {ci['high_pct']:+.1f}%" if ci else "–"
        print(f"| {name} | {b['loop_samples_per_s']['median']:.1f} | {b['ceiling_samples_per_s']['median']:.1f} | "
              f"{100 * b['share_of_ceiling']:.1f}% | {ci_text} | {b['verdict']} |")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ladder", required=True)
    ap.add_argument("--plus", required=True)
    ap.add_argument("--pytorch", required=True)
    ap.add_argument("--tests")
    ap.add_argument("--dist", help="report of the data-parallel run")
    ap.add_argument("--bottleneck", help="folder of `trainbench bottleneck` outputs, one subfolder per rung")
    a = ap.parse_args()
    ladder, plus, ref = load(a.ladder), load(a.plus), load(a.pytorch)
    any_report = next(iter(ladder.values()), {})
    c = any_report.get("context", {})
    gpu = c.get("gpu") or {}
    print(f"# GPU run {c.get('date', '?')[:10]}: {gpu.get('name', '?')}\n")
    print(f"- GPU: {gpu.get('name', '?')}, driver {gpu.get('driver', '?')}, {gpu.get('memory_bytes', 0) / 2**30:.0f} GiB")
    print(f"- LibTorch {c.get('libtorch', '?')}, CUDA {c.get('cuda', '?')}, cuDNN {c.get('cudnn', '?')}, CPU {c.get('cpu', {}).get('model', '?')} x {c.get('cpu', {}).get('cores', '?')}")
    print(f"- trainbench {any_report.get('tool', {}).get('version', '?')} ({any_report.get('tool', {}).get('git', '?')}); data: "
          + ("random CIFAR-10-format images (make-dataset)" if c.get("data_generated") else "CIFAR-10"))
    print("\n## The article's ladder\n")
    print("| rung | trainbench samples/s | PyTorch reference | article | trainbench / reference | IQR |")
    print("|---|---:|---:|---:|---:|---|")
    failures = []
    for name, r in ladder.items():
        tb = median(r)
        py = median(ref[name]) if name in ref else None
        s = r.get("results", {}).get("samples_per_s") or {}
        ratio = f"{tb / py:.2f}x" if tb and py else "–"
        iqr = f"{s.get('q1', 0):.0f}–{s.get('q3', 0):.0f}" if tb else "–"
        print(f"| {name} | {fmt(tb)} | {fmt(py)} | {fmt(ARTICLE.get(name))} | {ratio} | {iqr} |")
        if r.get("status") != "ok":
            failures.append(f"{name}: {r.get('error', {}).get('message', '?')}")
    print("\n![ladder](ladder.svg)\n\n## Beyond the article\n")
    print("| rung | samples/s | peak device memory | notes |\n|---|---:|---:|---|")
    for name, r in plus.items():
        mem = (r.get("results", {}).get("memory") or {}).get("device_peak_allocated_bytes")
        notes = "; ".join(r.get("effective", {}).get("notes", []))
        print(f"| {name} | {fmt(median(r))} | {mem / 2**30:.2f} GiB | {notes} |" if mem else f"| {name} | {fmt(median(r))} | – | {notes} |")
        if r.get("status") != "ok":
            failures.append(f"{name}: {r.get('error', {}).get('message', '?')}")
    if a.dist:
        failures += dist_section(a.dist)
    if a.bottleneck:
        failures += bottleneck_section(a.bottleneck)
    if a.tests and os.path.exists(a.tests):
        lines = open(a.tests).read().strip().splitlines()
        print("\n## [gpu] tests\n\n```\n" + "\n".join(lines[-15:]) + "\n```")
    print("\n## Failures\n")
    print("\n".join(f"- {f}" for f in failures) if failures else "none")


if __name__ == "__main__":
    main()
