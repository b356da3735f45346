#!/usr/bin/env python3
"""Writes the Markdown page for docs/results/ from gpu-check output folders: the article's ladder
next to the PyTorch reference and the article's numbers, the extra rungs, the two goals of the
first GPU run, the image-folder and ResNet-50 ladders, and everything that failed or was skipped.
    scripts/results-page.py --out-dir DIR [--out-dir DIR2 ...] [--raw-dir NAME] [--append FILE] > page.md
Several folders (say, two budgeted calls with different --only phases) are merged; for a part
present in more than one, the last folder given wins. --raw-dir: the folder beside the page that
holds the raw reports (docs/results/<page>/), so that the page's links (the charts, the per-test
list) point into it. --append: a Markdown file added at the end as it is (what the run's failures
turned out to be, written after the run)."""
import argparse
import glob
import json
import os
import re

ARTICLE = {"00-baseline": 542.7, "01-workers": 797.8, "02-pin-memory": 964.5, "03-non-blocking": 1019.5,
           "04-amp": 1628.8, "05-batch-512": 2201.6, "06-cuda-graph": 2704.4, "07-stream-overlap": 3173.4}
ARTICLE["06-compile"] = ARTICLE["06-cuda-graph"]  # rung 06's name from 2026-12-05 on (backend.compile)
# NVIDIA DeepLearningExamples, ResNet-50 v1.5 training, one GPU (img/s): see configs/resnet50/00-baseline.yaml.
NVIDIA_R50 = "A100 80 GB: 2470 AMP, 938 TF32; V100 16 GB: 1200 AMP, 367 FP32"
STAGES = ["data_wait", "h2d", "preprocess", "forward", "backward", "allreduce", "optimizer"]
# NVIDIA's MLPerf Training v4.0 ResNet-50 on the H200, images/s per GPU (the goal of the ResNet-50 recipe).
MLPERF_R50_H200 = 7951.0
PHASES = ["setup", "build", "data", "tests", "ladder", "reference", "plus", "decode", "resnet50", "bottleneck",
          "dist", "sanitizer", "imagenet", "fusion"]
RAW = ""   # --raw-dir with a trailing slash, or ""
BASE = ""  # the folder the raw-dir stands for: the out dirs' common parent (or the one out dir)


def link(path):
    """A link from the page to a file of an out dir: through --raw-dir when given."""
    return RAW + os.path.relpath(path, BASE) if RAW else os.path.relpath(path, BASE)


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
    print("| rung | samples/s | peak device memory: allocated / reserved | notes |\n|---|---:|---:|---|")
    for name, r in plus.items():
        mem = (r.get("results") or {}).get("memory") or {}
        gib = lambda key: fmt(mem[key] / 2**30, 2) if mem.get(key) else "–"
        notes = notes_of(r)
        peaks = (f"{gib('device_peak_allocated_bytes')} / {gib('device_peak_reserved_bytes')} GiB"
                 if mem.get("device_peak_allocated_bytes") else "–")
        print(f"| {name}{partial(r)} | {fmt(median(r))} | {peaks} | {notes} |")
    print("\nThe peaks are over the measured windows. A CUDA graph's step allocates its activations in "
          "the graph's private pool when it is captured, before the windows, and replays without "
          "allocating: for a graphed rung the step's memory is in the reserved figure, not in the "
          "allocated one.")


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
    print("| rung | samples/s | decode | decode ms / image (host) | loader busy | copy stream beside the step | notes |")
    print("|---|---:|---|---:|---:|---:|---|")
    for name, r in reports.items():
        eff, res = r.get("effective") or {}, r.get("results") or {}
        loader = res.get("loader") or {}
        dec = ((loader.get("per_image_s") or {}).get("decode") or {}).get("median")
        busy = (loader.get("busy_share") or {}).get("median")
        notes = notes_of(r)
        print(f"| {name}{partial(r)} | {fmt(median(r))} | {eff.get('decode', '?')} | {fmt(1000 * dec, 3) if dec else '–'} | "
              f"{fmt(100 * busy) + '%' if busy is not None else '–'} | {overlap_text(r)} | {notes} |")
    print("\n`copy stream beside the step`: `results.h2d_overlap_share`, the share of the copy stream's time (with "
          "`data.decode: device`, the decode and crop) that ran while the step ran.")


def overlap_text(r):
    """results.h2d_overlap_share, and with device decoding how often and how long the host waited
    before the JPEG engines wrote an arena (results.device_decode.arena_waits and host_wait_s, which
    counts the state waits too; docs/device-decode.md)."""
    res = r.get("results") or {}
    share = res.get("h2d_overlap_share")
    text = f"{100 * share:.1f}%" if isinstance(share, (int, float)) else "–"
    d = res.get("device_decode") or {}
    waits = d.get("arena_waits")
    if not waits:
        return text
    wait_s = d.get("host_wait_s")
    return text + f" (arena waits: {waits}" + (f", {1000 * wait_s:.1f} ms" if wait_s is not None else "") + ")"


def resnet50_section(reports):
    print("\n## ResNet-50 to NVIDIA's recipe (configs/resnet50)\n")
    print(f"NVIDIA's published figures: {NVIDIA_R50}.\n")
    print("| rung | samples/s | model TFLOP/s | share of tensor-core peak | batch | fp16 steps skipped "
          "(input / forward / backward) | copy stream beside the step | notes |")
    print("|---|---:|---:|---:|---:|---|---:|---|")
    for name, r in reports.items():
        eff, c = r.get("effective") or {}, (r.get("results") or {}).get("compute") or {}
        fl, share = c.get("model_flops_per_s"), c.get("share_of_peak")
        notes = notes_of(r)
        print(f"| {name}{partial(r)} | {fmt(median(r))} | {fmt(fl / 1e12 if fl else None)} | "
              f"{fmt(100 * share) + '%' if share is not None else '–'} | {eff.get('batch_size', '?')} | "
              f"{skipped_text(r)} | {overlap_text(r)} | {notes} |")


def skipped_text(r):
    """results.amp.skipped_steps and why (reports before 2026-12-06 lack the causes)."""
    amp = (r.get("results") or {}).get("amp") or {}
    if amp.get("skipped_steps") is None:
        return "–"
    causes = amp.get("skipped_by_cause")
    split = f" ({causes['input']} / {causes['forward']} / {causes['backward']})" if causes else ""
    top = amp.get("input_abs_max")
    inputs = "" if not causes else (f"; max \\|input\\| {top:.3g}" if top is not None else "; an input held inf/nan")
    return f"{amp['skipped_steps']}{split}{inputs}"


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


def ratio_line(label, num, den, goal=None, fmt_goal=""):
    """One goal: the two figures, their ratio, and the verdict when a goal is given."""
    (a, an), (b, bn) = num, den
    if a is None or b is None:
        missing = an if a is None else bn
        return f"- {label}: not measured ({missing}: no finished report)."
    r = a / b
    verdict = "" if goal is None else f" (goal {fmt_goal}: {'met' if r >= goal else 'not met'})"
    return f"- {label}: {an} {a:.1f} / {bn} {b:.1f} = **{r:.2f}x**{verdict}."


def step_of(r):
    """What a rung's step runs: compiled, graphed, its precision and batch."""
    eff = r.get("effective") or {}
    return bool(eff.get("compile")), bool(eff.get("cuda_graph")), eff.get("amp"), eff.get("batch_size")


def jpeg_vs_device_made(r50):
    """Each ResNet-50 JPEG rung against the rung on device-made input whose step is the same (08
    against 06 eager, 10 against 09 compiled): what decoding the JPEGs costs that step."""
    jpegs = [(n, r) for n, r in r50.items() if "imagefolder" in n and median(r)]
    if not jpegs:
        print("- ResNet-50: JPEG / device-made input: not measured (resnet50 on JPEGs: no finished report).")
    for n, r in jpegs:
        twin = next(((median(s), f"resnet50/{m}{partial(s)}") for m, s in r50.items()
                     if median(s) and is_ceiling(s) and step_of(s) == step_of(r)),
                    (None, "resnet50 on device-made input with the same step"))
        print(ratio_line("ResNet-50: JPEG / device-made input, same step", (median(r), f"resnet50/{n}{partial(r)}"),
                         twin, 0.9, "at least 0.9x"))


def route_of(r):
    """The batch-norm route a compiled rung ran, from effective.compile: graph, Ex call, or both."""
    parts = " ".join((r.get("effective") or {}).get("compile") or [])
    kinds = [k for k, marker in (("graph", "(cuDNN graph"), ("Ex call", "(cuDNN batch-norm Ex call")) if marker in parts]
    return " and ".join(kinds) or "unfused"


def fused_routes_line(best):
    """The fp16 compiled step with the ReLU fusions on cuDNN's batch-norm Ex call (the kit's
    best/00-compile-fp16-ex) against the same profile with the default route."""
    ex = next(((n, r) for n, r in best.items() if n.endswith("-ex") and median(r)), None)
    base = best.get(ex[0][:-3]) if ex else None
    if not ex or not base or not median(base):
        print("- batch norm's routes (best fp16, compiled): not measured (best/00-compile-fp16 and its -ex twin: "
              "no finished pair).")
        return
    print(ratio_line(f"batch norm's routes, best fp16 compiled: {route_of(ex[1])} / {route_of(base)}",
                     (median(ex[1]), f"best/{ex[0]}{partial(ex[1])}"), (median(base), f"best/{ex[0][:-3]}{partial(base)}")))


def switch_lines(title, key, did_not, pairs, name_ran=False):
    """A switch's rung against the same profile without it, one line per (part, reports, with, without)
    prefix pair; did_not is said where the rung's effective.<key> shows the switch did not run, and
    with name_ran what it ran."""
    for part, reports, with_prefix, without_prefix in pairs:
        pick = lambda prefix: next(((median(r), f"{part}/{n}{partial(r)}") for n, r in reports.items()
                                    if n.startswith(prefix) and median(r)), (None, f"{part}/{prefix[:-1]}"))
        rung_with = next((r for n, r in reports.items() if n.startswith(with_prefix)), None)
        ran = ((rung_with or {}).get("effective") or {}).get(key)
        note = "" if rung_with is None or ran else f" {did_not}"
        if ran and name_ran:
            note = f" Ran: {'; '.join(ran)}."
        print(ratio_line(f"{title} ({part})", pick(with_prefix), pick(without_prefix)) + note)


def pad_stem_lines(best, r50):
    """backend.pad_stem against the same profile without it: best/03 against 02, resnet50/11 against 09."""
    switch_lines("stem on 4 channels / on 3", "pad_stem", "The padded rung did not pad (its notes say why).",
                 (("best", best, "03-", "02-"), ("resnet50", r50, "11-", "09-")))


def conv_fusion_lines(best, r50):
    """backend.conv_fusion against the same compiled step without it: best/04 against 03, resnet50/12 against 09."""
    switch_lines("convolution fusions / compiled step", "conv_fusion",
                 "The fused rung ran no fused pair (its notes say why).",
                 (("best", best, "04-", "03-"), ("resnet50", r50, "12-", "09-")), name_ran=True)


def goals_open_section(ladder, plus, ref, ref_plus, r50, decode, best=None, ref_best=None, imagenet=None):
    """The goals of the compiled-step and GPU-input work, each as the ratio this run measured."""
    imagenet = imagenet or {}
    print("\n## The goals of the compiled step and GPU input, as measured here\n")
    loops = {f"ladder/{n}": median(r) for n, r in ladder.items() if median(r) and not is_ceiling(r)}
    loops.update({f"ladder-plus/{n}": median(r) for n, r in plus.items() if median(r) and not is_ceiling(r)})
    loops.update({f"best/{n}": median(r) for n, r in (best or {}).items() if median(r) and not is_ceiling(r)})
    comp_tb = next(((median(r), f"trainbench ladder/{n}") for n, r in ladder.items() if n.startswith("06-")),
                   (None, "trainbench ladder/06"))
    comp_py = next(((median(r), f"reference {n}") for n, r in ref.items() if n.startswith("06-")),
                   (None, "the reference's 06 (torch.compile)"))
    print(ratio_line("compile rung / torch.compile (same profile)", comp_tb, comp_py, 1.0, "at least 1.0x"))
    best_tb = max(((v, f"trainbench {k}") for k, v in loops.items()), default=(None, "trainbench's best rung"))
    refs = {f"reference {n}": median(r) for n, r in {**ref, **ref_plus}.items() if median(r)}
    refs.update({f"reference best/{n}": median(r) for n, r in (ref_best or {}).items() if median(r)})
    best_refs = {k: v for k, v in refs.items() if "best" in k}
    best_py = max(((v, k) for k, v in best_refs.items()),
                  default=(None, "PyTorch's best configuration (torch.compile + channels_last)"))
    print(ratio_line("best / PyTorch's best configuration", best_tb, best_py, 1.25, "at least 1.25x")
          + " The reference runs torch.compile's default mode (no CUDA graphs; docs/compile.md says why).")
    syn = [(median(r), f"resnet50/{n}{partial(r)}") for n, r in r50.items() if median(r) and is_ceiling(r)]
    best_syn = max(syn, default=(None, "resnet50 on device-made input"))
    gpus = {(r.get("effective") or {}).get("device_name") or "" for r in r50.values()
            if median(r) and str((r.get("effective") or {}).get("device", "")).startswith("cuda")}
    other = sorted(g for g in gpus if g and "H200" not in g)
    print(ratio_line("ResNet-50 recipe / MLPerf's 7,951 images/s on the H200", best_syn,
                     (MLPERF_R50_H200, "MLPerf"), 1.0, "at least 1.0x")
          + (f" This run's GPU is {', '.join(other)}, not an H200: the anchor is the H200's, so this ratio is not "
             "the goal's." if other else ""))
    jpeg_vs_device_made(r50)
    host = next(((median(r), f"imagenet/{n}{partial(r)}") for n, r in imagenet.items()
                 if n.startswith("04-") and median(r)), (None, "imagenet/04 (host decode)"))
    dev = next(((median(r), f"imagenet/{n}{partial(r)}") for n, r in imagenet.items()
                if n.startswith("05-") and median(r)), (None, "imagenet/05 (device decode)"))
    print(ratio_line("ResNet-18 on JPEGs: device decode / host decode, same step", dev, host, 1.0, "at least 1.0x"))
    decoded = [(f"{part}/{n}", r) for part, reports in (("imagenet", imagenet), ("resnet50", r50))
               for n, r in reports.items() if (r.get("effective") or {}).get("decode") == "device" and median(r)]
    for name, r in decoded:
        share = (r.get("results") or {}).get("h2d_overlap_share")
        verdict = "not measured" if share is None else ("met" if share >= 0.9 else "not met")
        print(f"- decode beside the step (`h2d_overlap_share`), {name}: {overlap_text(r)} (goal at least 90%: {verdict}).")
    fp16 = next(((median(r), f"ladder-plus/{n}") for n, r in plus.items()
                 if (r.get("effective") or {}).get("amp") == "fp16" and not is_ceiling(r) and "tf32" in n),
                (None, "ladder-plus fp16 rung"))
    bf16 = next(((median(r), f"ladder-plus/{n}") for n, r in plus.items()
                 if (r.get("effective") or {}).get("amp") == "bf16" and not is_ceiling(r)),
                (None, "ladder-plus bf16 rung"))
    print(ratio_line("bf16 / fp16 (ladder-plus)", bf16, fp16, 0.95, "within 5%"))
    # The twins that differ in amp alone: best/00 (fp16) and 01 (bf16); 02 and 03 change more.
    twin = lambda prefix, amp: next(((median(r), f"best/{n}{partial(r)}") for n, r in (best or {}).items()
                                     if n.startswith(prefix) and not n.endswith("-ex") and median(r)
                                     and (r.get("effective") or {}).get("amp") == amp), (None, f"best {amp} rung"))
    print(ratio_line("bf16 / fp16, compiled step (best)", twin("01-", "bf16"), twin("00-", "fp16"), 0.95, "within 5%"))
    fused_routes_line(best or {})
    pad_stem_lines(best or {}, r50)
    conv_fusion_lines(best or {}, r50)
    rate = lambda r: (((r or {}).get("results") or {}).get("samples_per_s") or {}).get("median") \
        if (r or {}).get("status") == "ok" else None
    dev, host, shared = decode.get("device"), decode.get("host"), decode.get("device-share")
    # The goal's device side: the faster of all-to-the-device and the split with the workers, where
    # both ran on the same GPU (a second call may find another machine) and nvJPEG decoded.
    gpu_of = lambda r: ((r or {}).get("effective") or {}).get("device_name")
    on_device = lambda r: ((r or {}).get("effective") or {}).get("decode") == "device"
    one_gpu = rate(dev) is None or gpu_of(shared) == gpu_of(dev)
    candidates = ["device"] + (["device-share"] if one_gpu and on_device(shared) else [])
    best_dev = max((m for m in candidates if rate(decode.get(m))), key=lambda m: rate(decode.get(m)),
                   default="device")
    if dev or host or shared:
        shared_won = best_dev == "device-share" and rate(host)
        print(ratio_line("decode images/s (bench-data): device / host", (rate(decode.get(best_dev)), best_dev),
                         (rate(host), "host"))
              + (" (device-share decodes part of each batch on the host's cores too)" if shared_won else ""))
        if shared and not one_gpu:
            print(f"  device-share ran on {gpu_of(shared)}, device on {gpu_of(dev)}: not compared.")
        elif shared and on_device(shared) and rate(dev):
            print(ratio_line(f"decode images/s: device with {decode_share_of(shared)} of each batch, the workers the "
                             "rest / all to the device", (rate(shared), "device-share"), (rate(dev), "device")))
        whole = decode.get("device-whole")
        if whole:
            print(ratio_line("decode images/s: regions of interest / whole images (device)", (rate(dev), "device"),
                             (rate(whole), "device-whole")))
        general = decode.get("device-general")
        if general:
            print(ratio_line("decode images/s: engines' misses on the workers / on nvJPEG's general backend (device)",
                             (rate(dev), "device"), (rate(general), "device-general")))
        goal_dev = decode.get(best_dev)
        if rate(goal_dev) and not on_device(goal_dev):
            print("  The device run decoded on the host (nvJPEG unavailable or no GPU: its notes say why): "
                  "the ratio compares the host with itself.")
    else:
        print("- decode images/s (bench-data): not measured (no decode/ reports: the kit's decode phase did not run; "
              "the JPEG ladder's rungs train as well as decode).")


def merged_test_rows(dirs):
    """gpu-tests.tsv over the calls: a second call reruns only the cases the first left, so a
    case's row is the last call's that ran it (a later `not-run` keeps the earlier result), in the
    first call's order."""
    rows = {}
    for d in dirs:
        path = os.path.join(d, "gpu-tests.tsv")
        if not os.path.exists(path):
            continue
        for line in list(open(path))[1:]:
            r = line.rstrip("\n").split("\t")
            if len(r) < 4:
                continue
            if r[0] == "not-run" and r[3] in rows:
                continue
            rows[r[3]] = r
    return list(rows.values())


def tests_section(dirs):
    """The [gpu] test cases: the per-case list when the kit ran each in its own process, else the
    one process's output with repeated lines counted."""
    tsv = last_existing(dirs, "gpu-tests.tsv")
    if tsv:
        rows = merged_test_rows(dirs)
        counts = {}
        for r in rows:
            counts[r[0]] = counts.get(r[0], 0) + 1
        print("\n## [gpu] test cases (each in a process of its own)\n")
        print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" of {len(rows)}; "
              f"every case's output: [gpu-tests.txt]({link(last_existing(dirs, 'gpu-tests.txt') or tsv)})\n")
        print("| status | seconds | cap (s) | test case |\n|---|---:|---:|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")
        return [f"[gpu] test {r[0]}: {r[3]}" for r in rows if r[0] not in ("pass", "rehearsed")]
    tests = last_existing(dirs, "gpu-tests.txt")
    if not tests:
        return []
    collapsed = []
    for line in open(tests).read().strip().splitlines():
        if collapsed and collapsed[-1][0] == line:
            collapsed[-1][1] += 1
        else:
            collapsed.append([line, 1])
    print("\n## [gpu] tests (one process, failures only)\n")
    print(f"Repeated lines are counted (`(x N)`); the whole output: [gpu-tests.txt]({link(tests)}).\n")
    print("```\n" + "\n".join(t + (f"  (x {n})" if n > 1 else "") for t, n in collapsed[-25:]) + "\n```")
    return []


def phase_times(d):
    """A call's phases and seconds: phase-times.tsv, else the log's '-- PHASE: N s' lines."""
    tsv = os.path.join(d, "phase-times.tsv")
    if os.path.exists(tsv):
        rows = [line.rstrip("\n").split("\t") for line in open(tsv)][1:]
        return [(r[0], r[3], r[1], r[2]) for r in rows]
    log = os.path.join(d, "gpu-check.log")
    if not os.path.exists(log):
        return []
    return [(m.group(1), m.group(2), "", "") for m in re.finditer(r"^-- ([\w ]+): (\d+) s \(total", open(log).read(), re.M)
            if m.group(1) != "start"]


def ran_phases(d):
    """The phases a call started (not skipped), from its phase-times.tsv or its log."""
    return {p for p, *_ in phase_times(d)}


def last_existing(dirs, *parts):
    found = [os.path.join(d, *parts) for d in dirs if os.path.exists(os.path.join(d, *parts))]
    return found[-1] if found else None


def parts(dirs, name):
    """The reports of one part (a folder name) over the calls, rung by rung: a later call's report
    of a rung replaces an earlier one unless only the earlier finished (a second call skips the
    rungs the first finished, and may be cut before others)."""
    out = {}
    for d in dirs:
        folder = os.path.join(d, name)
        if not os.path.isdir(folder):
            continue
        for rung, r in load(folder).items():
            if rung not in out or median(r) or not median(out[rung]):
                out[rung] = r
    return dict(sorted(out.items()))  # in the folder's order, as one call's


def decode_share_of(r):
    """data.device_decode_share as the report's resolved profile gives it ("?" where it does not)."""
    found = re.search(r"device_decode_share: *([0-9.eE+-]+)", (r.get("profile") or {}).get("resolved") or "")
    return found.group(1) if found else "?"


def decode_reports(dirs):
    """decode/<mode>.json over the calls: a mode's report from the last call that wrote one, unless
    only an earlier one finished (a second call's cut decode phase leaves the first call's modes
    standing)."""
    out = {}
    for mode in ("device", "host", "device-share", "device-whole", "device-general"):
        for d in dirs:
            f = os.path.join(d, "decode", f"{mode}.json")
            try:
                r = json.load(open(f))
            except (OSError, ValueError):
                continue
            if mode in out and out[mode].get("status") == "ok" and r.get("status") != "ok":
                continue
            out[mode] = r
    return out


def decode_section(decode):
    if not decode:
        return []
    print("\n## Decoding JPEGs: host against GPU (`bench-data`, configs/imagenet/05-device-decode.yaml)\n")
    print("| data.decode | decoded on | images/s | IQR | processes | images: engines (regions) / CUDA / workers / "
          "host | notes |\n|---|---|---:|---|---:|---|---|")
    failures = []
    for mode, r in decode.items():
        s = (r.get("results") or {}).get("samples_per_s") or {}
        p = ((r.get("results") or {}).get("processes") or {}).get("measured", "–")
        iqr = f"{s.get('q1', 0):.0f}–{s.get('q3', 0):.0f}" if median(r) else "–"
        d = (r.get("results") or {}).get("device_decode")
        split = (f"{d.get('images_hardware', 0)} ({d.get('images_region', 0)}) / {d.get('images_cuda', 0)} / "
                 f"{d.get('images_workers', 0)} / {d.get('host_fallbacks', 0)}") if d else "–"
        if d and d.get("hardware_refusals"):
            split += (f"; engines refused {d['hardware_refusals']} calls whole, "
                      f"{d.get('hardware_refused_files', 0)} files found")
        if d and d.get("arena_waits"):
            split += f"; arena waits: {d['arena_waits']}"
            if d.get("host_wait_s") is not None:
                split += f" ({1000 * d['host_wait_s']:.1f} ms of host waits)"
        print(f"| {mode} | {(r.get('effective') or {}).get('decode', '?')} | {fmt(median(r))} | {iqr} | {p} | "
              f"{split} | {notes_of(r)} |")
        if r.get("status") != "ok":
            failures.append(f"decode {mode}: {(r.get('error') or {}).get('message', r.get('status'))}")
    return failures


def compile_section(groups):
    """What backend.compile ran in each rung that asked for it: effective.compile, in the order a step
    meets the parts (the batch-norm fusions with the form cuDNN took), and its notes (what did not run,
    shapes cuDNN refused)."""
    rows = [(f"{part}/{n}", r.get("effective") or {}) for part, reports in groups for n, r in reports.items()
            if (r.get("effective") or {}).get("compile")]
    if not rows:
        return
    print("\n## What the compiled step ran\n")
    for name, eff in rows:
        print(f"- {name}: " + "; ".join(eff["compile"]))
        for n in eff.get("notes", []):
            if n.startswith("backend.compile: "):
                print(f"  - not run: {n[len('backend.compile: '):]}")


FAMILIES = ["convolution", "norm_activation", "optimizer", "other"]


def kernel_families_of(r):
    k = (r.get("results") or {}).get("kernel_families") or {}
    return k if k.get("measured") else None


def kernel_families_section(groups):
    """Where each rung's step spends its device time, by kernel family (results.kernel_families)."""
    rows = [(f"{part}/{n}", k) for part, reports in groups for n, r in reports.items()
            if (k := kernel_families_of(r))]
    if not rows:
        return
    print("\n## Where the step's device time goes (kernel families)\n")
    print("| rung | kernel ms / batch | " + " | ".join(FAMILIES) + " | dropped records |")
    print("|---|---:|" + "---:|" * len(FAMILIES) + "---:|")
    for name, k in rows:
        shares = k.get("shares") or {}
        print(f"| {name} | {fmt(1000 * k.get('kernel_s_per_batch', 0), 2)} | "
              + " | ".join(f"{100 * shares.get(f, 0):.1f}%" for f in FAMILIES) + f" | {k.get('dropped_records', 0)} |")
    print("\nShares of kernel time summed over streams ([compile.md](../compile.md#kernel-families)); "
          "each report's `results.kernel_families.top` names the kernels behind each family.")
    conv_fusions_lines(groups)


def conv_fusions_verdict(norm_share):
    """docs/fused-batch-norm.md's rule: the convolution fusions remove the batch-norm and activation
    passes left after the batch-norm fusions, so they can buy at most that family's share."""
    if norm_share <= 0.10:
        return "they would buy under a tenth: the gap to a goal is in the convolutions (engines, layout, batch)"
    if norm_share >= 0.25:
        return "a quarter or more: they are the next step"
    return "between a tenth and a quarter: worth it where a goal's gap is larger than this share"


def conv_fusions_lines(groups):
    """For each compiled rung: what the convolution fusions could buy at most, by the kernel shares
    (fusion-bench measures them: fusion_bench_section)."""
    rows = [(f"{part}/{n}", k) for part, reports in groups for n, r in reports.items()
            if (r.get("effective") or {}).get("compile") and (k := kernel_families_of(r)) and not is_ceiling(r)]
    if not rows:
        return
    print("\nWhat convolution fusions could buy at most in the compiled rungs: the normalisation and activation "
          "kernels' share left after the batch-norm fusions ([fused-batch-norm.md](../fused-batch-norm.md#what-is-left)):\n")
    for name, k in rows:
        shares = k.get("shares") or {}
        norm = shares.get("norm_activation", 0)
        print(f"- {name}: norm_activation {100 * norm:.1f}%, convolution {100 * shares.get('convolution', 0):.1f}%: "
              f"{conv_fusions_verdict(norm)}.")


# fusion-bench's JSON per model (scripts/gpu-check.sh's fusion phase) and the rung whose step it is
# read against.
FUSION_BENCHES = [("resnet50", "resnet50", "09-compile"), ("resnet18", "best", "00-compile-fp16")]


def fusion_bench_section(dirs, parts_by_name):
    """fusion-bench: MLPerf's convolution fusions against what backend.compile runs, per shape, and
    what they would save per step, against the compiled rung's step where the kit measured it."""
    found = [(name, f, part, rung) for name, part, rung in FUSION_BENCHES
             if (f := last_existing(dirs, f"fusion-{name}.json"))]
    if not found:
        return
    print("\n## Convolution fusions measured (fusion-bench)\n")
    print("Every \"batch norm, ReLU, convolution\" pair of the model, per shape: the cuDNN graphs that fold the batch "
          "norm into the convolutions (MLPerf's) against what `backend.compile` runs, forward and backward, "
          "alternating ([fused-batch-norm.md](../fused-batch-norm.md#convolution-fusions-measured-before-they-are-built)). A shape whose fused result "
          "differs from the reference is not counted.")
    for name, f, part, rung in found:
        try:
            j = json.load(open(f))
        except (OSError, ValueError):
            print(f"\n{name}: [{os.path.basename(f)}]({link(f)}) unreadable")
            continue
        print(f"\n### {j.get('arch', name)}, batch {j.get('batch', '?')}, {j.get('dtype', '?')} "
              f"([{os.path.basename(f)}]({link(f)}))\n")
        print("| input -> filter | stride | layers | unfused ms | fused ms | fused / unfused | rel. error | note |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for row in j.get("shapes", []):
            n, c, h, w = row.get("input", [0, 0, 0, 0])
            k, _, r, _ = row.get("filter", [0, 0, 0, 0])
            note = row.get("refused") or row.get("wrong") or ""
            ratio = row.get("fused_over_unfused")
            err = row.get("max_relative_error")
            print(f"| {c}x{h}x{w} -> {k} {r}x{r} | {row.get('stride', '?')} | {len(row.get('layers', []))} | "
                  f"{fmt(row.get('unfused_median_ms'), 3)} | {fmt(row.get('fused_median_ms'), 3)} | "
                  f"{f'{ratio:.2f}x' if ratio else '–'} | {f'{err:.1e}' if err is not None else '–'} | "
                  f"{note[:120].replace('|', '/')} |")
        if j.get("status") == "error":
            print(f"\nFailed after {len(j.get('shapes', []))} shapes: {str(j.get('error', '?'))[:300]}")
        step = j.get("per_step")
        if not step:
            # Shapes run largest first: what a cut run measured is the larger part.
            done = [row for row in j.get("shapes", []) if "fused_median_ms" in row and "wrong" not in row]
            u = sum(len(row["layers"]) * row["unfused_median_ms"] for row in done)
            f = sum(len(row["layers"]) * row["fused_median_ms"] for row in done)
            print(f"\nCut before its end: {sum(len(row['layers']) for row in done)} pairs measured so far, unfused "
                  f"{u:.2f} ms, fused {f:.2f} ms per step.")
            continue
        line = (f"\nPer step, {step['measured_layers']:.0f} of {step['layers']} pairs measured: unfused "
                f"{step['unfused_ms']:.2f} ms, fused {step['fused_ms']:.2f} ms, saved {step['saved_ms']:.2f} ms")
        r = parts_by_name.get(part, {}).get(rung)
        sps = median(r) if r else None
        if sps and j.get("batch"):
            step_ms = 1000.0 * j["batch"] / sps
            line += f": {100 * step['saved_ms'] / step_ms:.1f}% of {part}/{rung}'s step ({step_ms:.1f} ms)"
        print(line + ".")


# The twins that differ in the dtype alone: (fp16 rung, bf16 rung) by the start of the name.
PRECISION_TWINS = {"best": ("00-", "01-"), "ladder-plus": ("02-", "03-")}


def precision_section(groups):
    """bf16 against fp16 of the same rung (PRECISION_TWINS: best 00 and 01, ladder-plus 02 and 03;
    not the last of each dtype, which may differ in more than the dtype): per family the time per
    batch and its ratio, and the longest kernels of the family that grew most."""
    pairs = []
    for part, reports in groups:
        fp16_prefix, bf16_prefix = PRECISION_TWINS[part]

        def twin(prefix, amp):
            return next(((n, r) for n, r in reports.items() if n.startswith(prefix) and "-ex" not in n
                         and (r.get("effective") or {}).get("amp") == amp and kernel_families_of(r)
                         and not is_ceiling(r)), None)
        fp16, bf16 = twin(fp16_prefix, "fp16"), twin(bf16_prefix, "bf16")
        if fp16 and bf16:
            pairs.append((part, fp16, bf16))
    if not pairs:
        return
    print("\n## bf16 against fp16, by kernel family\n")
    for part, (fn, f), (bn, b) in pairs:
        kf, kb = kernel_families_of(f), kernel_families_of(b)
        pf, pb = kf.get("s_per_batch") or {}, kb.get("s_per_batch") or {}
        print(f"{part}: {bn} against {fn}; samples/s {fmt(median(b))} / {fmt(median(f))}\n")
        print("| family | fp16 ms / batch | bf16 ms / batch | bf16 / fp16 |\n|---|---:|---:|---:|")
        for fam in FAMILIES:
            a, c = pf.get(fam, 0), pb.get(fam, 0)
            print(f"| {fam} | {fmt(1000 * a, 3)} | {fmt(1000 * c, 3)} | {f'{c / a:.2f}x' if a else '–'} |")
        grew = max(FAMILIES, key=lambda fam: pb.get(fam, 0) - pf.get(fam, 0))
        print(f"\nThe family that grew most, {grew}: its longest kernels\n")
        for label, k in [("fp16", kf), ("bf16", kb)]:
            for t in (k.get("top") or {}).get(grew, [])[:5]:
                print(f"- {label}: {1000 * t.get('s_per_batch', 0):.3f} ms, {t.get('kernels_per_batch', 0):.1f} a batch: "
                      f"`{t.get('name', '?')}`")
        print()


def sanitizer_section(dirs):
    """Each tool's runs over the calls (a second call runs only what the first did not finish)."""
    for tool in ["memcheck", "racecheck"]:
        files = [os.path.join(d, f"sanitizer-{tool}.txt") for d in dirs
                 if os.path.exists(os.path.join(d, f"sanitizer-{tool}.txt"))]
        if not files:
            continue
        lines = [t for f in files for t in open(f).read().strip().splitlines()]
        keep = [t for t in lines if t.startswith("== ") or "ERROR SUMMARY" in t or "RACECHECK SUMMARY" in t
                or t.startswith("compute-sanitizer ") or "skipped" in t or "LEAK SUMMARY" in t
                or t.startswith("crop check:")]
        print(f"\n## compute-sanitizer {tool}\n\n```\n" + "\n".join(keep or lines[-8:]) + "\n```")


def main():
    global RAW, BASE
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", action="append", required=True, help="a gpu-check --out folder (repeatable)")
    ap.add_argument("--raw-dir", default="", help="the folder beside the page holding the raw reports")
    ap.add_argument("--append", help="a Markdown file to add at the end")
    args = ap.parse_args()
    dirs = args.out_dir
    RAW = args.raw_dir.rstrip("/") + "/" if args.raw_dir else ""
    BASE = os.path.commonpath([os.path.abspath(d) for d in dirs]) if len(dirs) > 1 else os.path.abspath(dirs[0])
    dirs = [os.path.abspath(d) for d in dirs]
    ladder, plus, ref = parts(dirs, "ladder"), parts(dirs, "ladder-plus"), parts(dirs, "pytorch")
    ref_plus = parts(dirs, "pytorch-ladder-plus")
    best, ref_best = parts(dirs, "best"), parts(dirs, "pytorch-best")
    imagenet, r50 = parts(dirs, "imagenet"), parts(dirs, "resnet50")
    # The kit's rung 10 again with part of each batch decoded by the workers: a JPEG rung of its own.
    r50.update({f"{n} (device_decode_share {decode_share_of(r)})": r
                for n, r in parts(dirs, "resnet50-share").items()})
    decode = decode_reports(dirs)
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
    missing = [line.split()[3] for d in dirs if os.path.exists(os.path.join(d, "libs-missing.txt"))
               for line in open(os.path.join(d, "libs-missing.txt")) if line.startswith("the host lacks ")]
    if missing:
        print(f"- libraries this host lacked, put on its path from the carried ones: {', '.join(sorted(set(missing)))}")
    if RAW:
        print(f"- raw reports, logs and the per-call pages of the kit: [{RAW}]({RAW})")
    print(f"- trainbench {any_report.get('tool', {}).get('version', '?')} ({any_report.get('tool', {}).get('git', '?')}); "
          "data: " + ("generated (make-dataset)" if c.get("data_generated") else "as the profiles name it"))
    failures = []
    bdir = last_existing(dirs, "bottleneck")
    goals_section(ladder, plus, ref, bdir)
    goals_open_section(ladder, plus, ref, ref_plus, r50, decode, best, ref_best, imagenet)
    ladder_section(ladder, ref)
    svg = last_existing(dirs, "ladder", "ladder.svg")
    if svg:
        print(f"\n![ladder]({link(svg)})")
    plus_section(plus)
    for title, theirs, ours in [("ladder-plus profiles", ref_plus, plus),
                                ("the best configuration (configs/best)", ref_best, best)]:
        if not theirs and (not ours or ours is plus):  # ladder-plus alone has its own table above
            continue
        print(f"\n### trainbench and the PyTorch reference on {title}\n")
        print("| profile | trainbench samples/s | reference samples/s | trainbench / reference |\n|---|---:|---:|---:|")
        for name in sorted(set(theirs) | set(ours)):
            tb = median(ours[name]) if name in ours else None
            py = median(theirs[name]) if name in theirs else None
            print(f"| {name} | {fmt(tb)} | {fmt(py)} | {f'{tb / py:.2f}x' if tb and py else '–'} |")
    levels_section([("ladder", ladder), ("ladder-plus", plus)])
    if bdir:
        failures += bottleneck_section(bdir)
    failures += dist_section(last_existing(dirs, "dist-nccl-1.json") or last_existing(dirs, "dist-gloo-1.json"))
    failures += decode_section(decode)
    imagenet_section(imagenet)
    resnet50_section(r50)
    compile_section([("ladder", ladder), ("ladder-plus", plus), ("best", best), ("resnet50", r50)])
    kernel_families_section([("ladder", ladder), ("ladder-plus", plus), ("best", best), ("resnet50", r50)])
    fusion_bench_section(dirs, {"resnet50": r50, "best": best})
    precision_section([("best", best), ("ladder-plus", plus)])
    for part, reports in [("ladder", ladder), ("ladder-plus", plus), ("best", best), ("reference", ref),
                          ("reference ladder-plus", ref_plus), ("reference best", ref_best), ("imagenet", imagenet),
                          ("resnet50", r50)]:
        failures += failures_of(reports, part)
    failures += tests_section(dirs)
    sanitizer_section(dirs)
    # A phase one call skipped or cut and a later call ran to its end is neither.
    output_of = {"tests": "gpu-tests.txt", "ladder": "ladder", "reference": "pytorch", "bottleneck": "bottleneck",
                 "plus": "ladder-plus", "dist": "dist-nccl-1.json", "imagenet": "imagenet", "resnet50": "resnet50",
                 "sanitizer": "sanitizer-memcheck.txt", "decode": "decode", "data": "route.txt",
                 "fusion": "fusion-resnet50.json"}
    skipped = sorted({p for d in dirs if os.path.exists(os.path.join(d, "skipped.txt"))
                      for p in open(os.path.join(d, "skipped.txt")).read().split()
                      if not last_existing(dirs, output_of.get(p, p))})
    cut = set()
    for i, d in enumerate(dirs):
        f = os.path.join(d, "cut.txt")
        for p in (open(f).read().split() if os.path.exists(f) else []):
            if not any(p in ran_phases(later) for later in dirs[i + 1:]):
                cut.add(p)
        for p in ran_phases(d):
            if i > 0 and p in cut and p not in (open(f).read().split() if os.path.exists(f) else []):
                cut.discard(p)
    print("\n## Time budget\n")
    print(f"- skipped: {', '.join(skipped) if skipped else 'none'}")
    print(f"- stopped before the end (rungs marked partial hold the rounds they finished): "
          f"{', '.join(sorted(cut)) if cut else 'none'}")
    for i, d in enumerate(dirs):
        times = phase_times(d)
        if not times:
            continue
        print(f"\nCall {i + 1}: seconds per phase" + (" (planned, cap)" if any(t[2] for t in times) else "") + "\n")
        print("| phase | seconds |" + (" planned | cap |" if any(t[2] for t in times) else "") + "\n|---|---:|"
              + ("---:|---:|" if any(t[2] for t in times) else ""))
        for p, taken, planned, cap in times:
            print(f"| {p} | {taken} |" + (f" {planned or '–'} | {cap or '–'} |" if any(t[2] for t in times) else ""))
    print("\n## Failures\n")
    print("\n".join(f"- {f}" for f in failures) if failures else "none")
    if args.append:
        print("\n" + open(args.append).read().strip())


if __name__ == "__main__":
    main()
