#!/usr/bin/env python3
"""Writes the Markdown page for docs/results/ from gpu-check output folders: the article's ladder
next to the PyTorch reference and the article's numbers, the extra rungs, the two goals of the
first GPU run, the image-folder and ResNet-50 ladders, and everything that failed or was skipped.
    scripts/results-page.py --out-dir DIR [--out-dir DIR2 ...] > page.md
Several folders (say, two budgeted calls with different --only phases) are merged; for a part
present in more than one, the last folder given wins."""
import argparse
import glob
import json
import os

ARTICLE = {"00-baseline": 542.7, "01-workers": 797.8, "02-pin-memory": 964.5, "03-non-blocking": 1019.5,
           "04-amp": 1628.8, "05-batch-512": 2201.6, "06-cuda-graph": 2704.4, "07-stream-overlap": 3173.4}
ARTICLE["06-compile"] = ARTICLE["06-cuda-graph"]  # rung 06's name from 2026-12-05 on (backend.compile)
# NVIDIA DeepLearningExamples, ResNet-50 v1.5 training, one GPU (img/s): see configs/resnet50/00-baseline.yaml.
NVIDIA_R50 = "A100 80 GB: 2470 AMP, 938 TF32; V100 16 GB: 1200 AMP, 367 FP32"
STAGES = ["data_wait", "h2d", "preprocess", "forward", "backward", "allreduce", "optimizer"]


def load(folder):
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, "*.json"))):
        try:
            j = json.load(open(f))
        except (OSError, ValueError):
            continue
        if isinstance(j, dict) and "results" in j:  # a run report (not ladder.json or a summary)
            out[os.path.basename(f)[:-5]] = j
    return out


def median(r):
    """samples/s of a finished rung; also of a rung a time budget stopped after some of its rounds
    (status interrupted, with windows), which partial() marks."""
    s = (r.get("results") or {}).get("samples_per_s")
    return s["median"] if r.get("status") in ("ok", "interrupted") and s else None


def partial(r):
    return " (partial)" if r.get("status") == "interrupted" and median(r) else ""


def is_ceiling(r):
    """A rung on one batch made on the device: the step alone, not a training loop with input."""
    return "device-synthetic" in str((r.get("effective") or {}).get("dataset", ""))


def fmt(v, digits=1):
    return f"{v:.{digits}f}" if v is not None else "–"


def notes_of(r):
    """effective.notes in short: the switch names that had no effect, then any other note, clipped."""
    out = []
    for n in (r.get("effective") or {}).get("notes", []):
        if n.startswith("ladder: ") or n.startswith("the windows of "):
            continue  # the same on every pooled rung
        out.append(n.split(":")[0] + " (no effect)" if "ineffective" in n else (n if len(n) <= 90 else n[:87] + "..."))
    return "; ".join(out)


def failures_of(reports, part):
    return [f"{part} {n}: {(r.get('error') or {}).get('message', r.get('status'))}"
            for n, r in reports.items() if r.get("status") != "ok"]


def stage_sum_share(r):
    """Sum of the stage medians over the batch median; None where stages overlap by design."""
    eff, res = r.get("effective") or {}, r.get("results") or {}
    st = res.get("stages_s") or {}
    if eff.get("copy_stream") or eff.get("cuda_graph") or "batch" not in st:
        return None
    return sum(st[k]["median"] for k in STAGES if k in st) / st["batch"]["median"]


def ladder_section(ladder, ref):
    print("\n## The article's ladder\n")
    print("| rung | trainbench samples/s | PyTorch reference | article | trainbench / reference | IQR | stages / batch |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for name, r in ladder.items():
        tb, py = median(r), median(ref[name]) if name in ref else None
        s = (r.get("results") or {}).get("samples_per_s") or {}
        ratio = f"{tb / py:.2f}x" if tb and py else "–"
        iqr = f"{s.get('q1', 0):.0f}–{s.get('q3', 0):.0f}" if tb else "–"
        share = stage_sum_share(r)
        print(f"| {name}{partial(r)} | {fmt(tb)} | {fmt(py)} | {fmt(ARTICLE.get(name))} | {ratio} | {iqr} | "
              f"{fmt(100 * share) + '%' if share else '–'} |")
    print("\n`stages / batch`: the stage medians summed over the batch median, for rungs whose stages "
          "run one after another (no copy stream, no graph); the goal is within 2% of 100%.")


def plus_section(plus):
    print("\n## Beyond the article\n")
    print("| rung | samples/s | peak device memory | notes |\n|---|---:|---:|---|")
    for name, r in plus.items():
        mem = ((r.get("results") or {}).get("memory") or {}).get("device_peak_allocated_bytes")
        notes = notes_of(r)
        print(f"| {name}{partial(r)} | {fmt(median(r))} | {fmt(mem / 2**30, 2) + ' GiB' if mem else '–'} | {notes} |")


def goals_section(ladder, plus, ref, bottleneck_dir):
    print("\n## The two goals\n")
    # Training loops only: a device-synthetic rung is the step's ceiling, not a loop with input.
    ours = [(median(r), f"ladder/{n}") for n, r in ladder.items() if median(r) and not is_ceiling(r)]
    ours += [(median(r), f"ladder-plus/{n}") for n, r in plus.items() if median(r) and not is_ceiling(r)]
    theirs = ref.get("07-stream-overlap", {})
    if ours and theirs.get("status") == "ok":
        (a, an), b = max(ours), median(theirs)
        verdict = "met" if a >= 2 * b else "not met"
        print(f"1. Best trainbench rung {an}: {a:.1f} samples/s; the PyTorch reference's 07-stream-overlap "
              f"(torch.compile + overlap): {b:.1f} samples/s: **{a / b:.2f}x** (goal at least 2x: {verdict}).")
    else:
        why = "no finished trainbench rung" if not ours else \
            f"the reference's 07-stream-overlap is {theirs.get('status', 'missing')}"
        print(f"1. Not measured: {why}.")
    path = os.path.join(bottleneck_dir or "", "07-stream-overlap", "bottleneck.json")
    if os.path.exists(path):
        share = json.load(open(path))["share_of_ceiling"]
        print(f"2. The article's best rung (07-stream-overlap) against its device-resident ceiling: "
              f"**{100 * share:.1f}%** (goal at least 90%: {'met' if share >= 0.9 else 'not met'}). "
              "Other rungs' verdicts are in the bottleneck table.")
    else:
        print("2. Not measured: no bottleneck verdict for 07-stream-overlap.")


def imagenet_section(reports):
    print("\n## JPEG folders (configs/imagenet)\n")
    print("| rung | samples/s | decode | decode ms / image (host) | loader busy | notes |")
    print("|---|---:|---|---:|---:|---|")
    for name, r in reports.items():
        eff, res = r.get("effective") or {}, r.get("results") or {}
        loader = res.get("loader") or {}
        dec = ((loader.get("per_image_s") or {}).get("decode") or {}).get("median")
        busy = (loader.get("busy_share") or {}).get("median")
        notes = notes_of(r)
        print(f"| {name}{partial(r)} | {fmt(median(r))} | {eff.get('decode', '?')} | {fmt(1000 * dec, 3) if dec else '–'} | "
              f"{fmt(100 * busy) + '%' if busy is not None else '–'} | {notes} |")


def resnet50_section(reports):
    print("\n## ResNet-50 to NVIDIA's recipe (configs/resnet50)\n")
    print(f"NVIDIA's published figures: {NVIDIA_R50}.\n")
    print("| rung | samples/s | model TFLOP/s | share of tensor-core peak | batch | notes |")
    print("|---|---:|---:|---:|---:|---|")
    for name, r in reports.items():
        eff, c = r.get("effective") or {}, (r.get("results") or {}).get("compute") or {}
        fl, share = c.get("model_flops_per_s"), c.get("share_of_peak")
        notes = notes_of(r)
        print(f"| {name}{partial(r)} | {fmt(median(r))} | {fmt(fl / 1e12 if fl else None)} | "
              f"{fmt(100 * share) + '%' if share is not None else '–'} | {eff.get('batch_size', '?')} | {notes} |")


def dist_section(path):
    print("\n## Data-parallel\n")
    if not path:
        print("no report (not run, or it failed before writing one: see the log)")
        return []
    r = json.load(open(path))
    d = (r.get("results") or {}).get("distributed") or {}
    eff = d.get("scaling_efficiency")
    print(f"- status {r.get('status')}: {d.get('backend', '?')}, {d.get('world_size', '?')} rank(s) via "
          f"{d.get('launcher', '?')}, {fmt(median(r))} samples/s, all-reduce steps {d.get('allreduce_steps', '?')}, "
          f"buckets launched in backward {d.get('buckets_launched_in_backward', '?')}, scaling efficiency "
          + (f"{100 * eff:.1f}%" if eff is not None else "–"))
    return [] if r.get("status") == "ok" else [f"data-parallel: {(r.get('error') or {}).get('message', '?')}"]


def levels_section(ladders):
    """The third goal: each rung's noise within a process and between processes (its rounds are fresh
    processes; cuDNN's benchmark mode chooses per process), and a process's cost before its first window."""
    print("\n## Noise by level (each round a fresh process)\n")
    print("| ladder | rung | processes | within-process cv | between-process cv | ICC | s before first window |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for part, reports in ladders:
        for name, r in reports.items():
            p = (r.get("results") or {}).get("processes") or {}
            pct = lambda v: f"{100 * v:.2f}%" if isinstance(v, (int, float)) else "–"
            cost = (p.get("cost_s") or {}).get("before_first_window")
            print(f"| {part} | {name} | {p.get('measured', '–')} | {pct(p.get('within_process_cv'))} | "
                  f"{pct(p.get('between_process_cv'))} | {fmt(p.get('icc'), 2)} | {fmt(cost, 1)} |")
    print("\n`trainbench plan REPORT --budget 10m` turns a rung's split into processes x windows for a CI budget.")


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


def last_existing(dirs, *parts):
    found = [os.path.join(d, *parts) for d in dirs if os.path.exists(os.path.join(d, *parts))]
    return found[-1] if found else None


def parts(dirs, name):
    folder = last_existing(dirs, name)
    return load(folder) if folder else {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", action="append", required=True, help="a gpu-check --out folder (repeatable)")
    dirs = ap.parse_args().out_dir
    ladder, plus, ref = parts(dirs, "ladder"), parts(dirs, "ladder-plus"), parts(dirs, "pytorch")
    imagenet, r50 = parts(dirs, "imagenet"), parts(dirs, "resnet50")
    any_report = next(iter({**r50, **imagenet, **plus, **ladder}.values()), {})
    c = any_report.get("context") or {}
    gpu = c.get("gpu") or {}
    cpu = c.get("cpu") or {}
    print(f"# GPU run {c.get('date', '?')[:10]}: {gpu.get('name', '?')}\n")
    print(f"- GPU: {gpu.get('name', '?')}, driver {gpu.get('driver', '?')}, "
          f"{(gpu.get('memory_bytes') or 0) / 2**30:.0f} GiB")
    print(f"- LibTorch {c.get('libtorch', '?')}, CUDA {c.get('cuda', '?')}, cuDNN {c.get('cudnn', '?')}, "
          f"CPU {cpu.get('model', '?')} x {cpu.get('cores', '?')}")
    route = last_existing(dirs, "route.txt")
    print(f"- binaries: {open(route).read().strip() if route else '?'}")
    print(f"- trainbench {any_report.get('tool', {}).get('version', '?')} ({any_report.get('tool', {}).get('git', '?')}); "
          "data: " + ("generated (make-dataset)" if c.get("data_generated") else "as the profiles name it"))
    failures = []
    bdir = last_existing(dirs, "bottleneck")
    goals_section(ladder, plus, ref, bdir)
    ladder_section(ladder, ref)
    print("\n![ladder](ladder/ladder.svg)")
    plus_section(plus)
    levels_section([("ladder", ladder), ("ladder-plus", plus)])
    if bdir:
        failures += bottleneck_section(bdir)
    failures += dist_section(last_existing(dirs, "dist-nccl-1.json") or last_existing(dirs, "dist-gloo-1.json"))
    imagenet_section(imagenet)
    resnet50_section(r50)
    for part, reports in [("ladder", ladder), ("ladder-plus", plus), ("reference", ref), ("imagenet", imagenet),
                          ("resnet50", r50)]:
        failures += failures_of(reports, part)
    tests = last_existing(dirs, "gpu-tests.txt")
    if tests:
        lines = open(tests).read().strip().splitlines()
        print("\n## [gpu] tests\n\n```\n" + "\n".join(lines[-15:]) + "\n```")
    for tool in ["memcheck", "racecheck"]:
        f = last_existing(dirs, f"sanitizer-{tool}.txt")
        if f:
            lines = open(f).read().strip().splitlines()
            print(f"\n## compute-sanitizer {tool} (copy-stream test)\n\n```\n" + "\n".join(lines[-8:]) + "\n```")
    # A phase one call skipped and another ran is not skipped.
    output_of = {"tests": "gpu-tests.txt", "ladder": "ladder", "reference": "pytorch", "bottleneck": "bottleneck",
                 "plus": "ladder-plus", "dist": "dist-nccl-1.json", "imagenet": "imagenet", "resnet50": "resnet50",
                 "sanitizer": "sanitizer-memcheck.txt"}
    skipped = sorted({p for d in dirs if os.path.exists(os.path.join(d, "skipped.txt"))
                      for p in open(os.path.join(d, "skipped.txt")).read().split()
                      if not last_existing(dirs, output_of.get(p, p))})
    cut = sorted({p for d in dirs if os.path.exists(os.path.join(d, "cut.txt"))
                  for p in open(os.path.join(d, "cut.txt")).read().split()})
    print("\n## Time budget\n")
    print(f"- skipped: {', '.join(skipped) if skipped else 'none'}")
    print(f"- stopped before the end (rungs marked partial hold the rounds they finished): "
          f"{', '.join(cut) if cut else 'none'}")
    print("\n## Failures\n")
    print("\n".join(f"- {f}" for f in failures) if failures else "none")


if __name__ == "__main__":
    main()
