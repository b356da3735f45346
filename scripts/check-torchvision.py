#!/usr/bin/env python3
"""trainbench's ResNets against torchvision's: parameters, FLOPs and eval-mode logits.

For each architecture: build torchvision's model, give every batch norm random running
statistics and affine parameters (so each buffer matters in eval mode), save its state dict,
and let trainbench load it through model.weights (as a run does) and run it in eval mode on the
same fixed input (`trainbench logits`, fp32 on the CPU). Checked, per architecture:
  - the parameter count equals torchvision's (and, with 1000 classes, its weights' num_params);
  - trainbench's forward FLOPs per sample equal torch.utils.flop_counter.FlopCounterMode's on
    the same input (2 x multiply-adds of conv and linear layers);
  - the logits agree: max |trainbench - torchvision| / max |torchvision| <= --rtol (1e-5).

    scripts/check-torchvision.py [--size 64] [--batch 2] [--classes 1000] [--rtol 1e-5]
                                 [--trainbench build/trainbench] [ARCH ...]   (default: every one)

Run it with the project's Python (scripts/env.sh: $TRAINBENCH_PYTHON). Exit 0 when every
architecture matches, 1 when one differs, 2 when trainbench refuses the input.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torchvision
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "resnext101_32x8d",
         "resnext101_64x4d", "wide_resnet50_2", "wide_resnet101_2"]


def randomise_batch_norms(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
                m.num_batches_tracked.fill_(7)


def check(arch, args, work):
    torch.manual_seed(0)
    model = torchvision.models.get_model(arch, num_classes=args.classes)
    randomise_batch_norms(model)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    weights = work / f"{arch}.pt"
    torch.save(dict(model.state_dict()), weights)
    x = torch.randn(args.batch, 3, args.size, args.size)
    torch.save(x, work / "input.pt")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        expected = model(x)
    flops = counter.get_total_flops() / args.batch

    profile = work / f"{arch}.yaml"
    profile.write_text(f"name: check-{arch}\ndevice: cpu\n"
                       f"model: {{arch: {arch}, num_classes: {args.classes}, weights: '{weights}'}}\n"
                       f"data: {{source: synthetic, image_size: {args.size}}}\n")
    out = subprocess.run([str(args.trainbench), "logits", "--config", str(profile), "--input",
                          str(work / "input.pt"), "--out", str(work / "logits.pt")], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{arch}: trainbench logits failed (exit {out.returncode}):\n{out.stdout}{out.stderr}")
        return out.returncode
    got = json.loads(out.stdout.strip().splitlines()[-1])
    logits = torch.load(work / "logits.pt")
    weights.unlink()

    problems = []
    if got["parameters"] != params:
        problems.append(f"parameters {got['parameters']} vs torchvision's {params}")
    if args.classes == 1000:
        documented = torchvision.models.get_model_weights(arch).DEFAULT.meta["num_params"]
        if params != documented:
            problems.append(f"torchvision's model has {params} parameters, its weights document {documented}")
    if got["forward_flops_per_sample"] != flops:
        problems.append(f"forward FLOPs/sample {got['forward_flops_per_sample']:.0f} vs FlopCounterMode's {flops:.0f}")
    rel = ((logits - expected).abs().max() / expected.abs().max()).item() if logits.shape == expected.shape else None
    if rel is None:
        problems.append(f"logits shape {tuple(logits.shape)} vs {tuple(expected.shape)}")
    elif not rel <= args.rtol:
        problems.append(f"logits differ: max relative {rel:.2e} > {args.rtol:.0e}")
    rel_text = f"{rel:.1e}" if rel is not None else "n/a"
    print(f"{arch}: {'ok' if not problems else 'DIFFERS'}  parameters {params:,}  forward {flops / 1e9:.3f} GFLOPs/sample "
          f"at {args.size}px  logits max rel diff {rel_text}" + "".join(f"\n  - {p}" for p in problems))
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("archs", nargs="*", default=ARCHS)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--trainbench", type=Path, default=ROOT / "build/trainbench")
    args = ap.parse_args()
    unknown = [a for a in args.archs if a not in ARCHS]
    if unknown:
        print(f"check-torchvision.py: unknown architecture(s) {', '.join(unknown)}; known: {', '.join(ARCHS)}")
        return 2
    worst = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tb-torchvision-") as tmp:
        for arch in args.archs:
            worst = max(worst, check(arch, args, Path(tmp)))
    print(f"{len(args.archs)} architecture(s) in {time.perf_counter() - start:.1f} s: "
          f"{'all match torchvision' if worst == 0 else 'MISMATCH'}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
