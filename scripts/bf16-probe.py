#!/usr/bin/env python3
"""Why bf16 trains slower than fp16 at the same rung: times batch norm and convolution forward +
backward in NHWC through PyTorch, fp16 against bf16, at the shapes of the ladder's ResNet-18
(CIFAR-10 resized to 224, batch 512) or any other, says which batch-norm backend PyTorch picks
for each dtype, and lists the GPU kernels of one whole training step per dtype by time.

usage: bf16-probe.py [--batch 512] [--image 224] [--arch resnet18] [--iters 20] [--json OUT]
Runs on a GPU host with the project's venv (torch, torchvision): scripts/env.sh's TRAINBENCH_PYTHON.
Prints a table per part; --json writes the same numbers. No output is a measurement the project
keeps: it is evidence for docs/fused-batch-norm.md.
"""
import argparse
import json
import os
import sys

import torch


def timed(fn, iters):
    """Median milliseconds of fn() over iters runs, after 3 warm-up runs, by CUDA events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def bn_backend(x, bn):
    """The backend PyTorch's batch_norm picks for this input (aten/src/ATen/native/Normalization.cpp)."""
    try:
        b = torch._C._select_batch_norm_backend(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, True, bn.eps)
        return str(b).split(".")[-1]
    except Exception as e:  # an internal entry point: say so rather than fail
        return f"unknown ({type(e).__name__})"


def shapes_of(model, x):
    """The input shape of every BatchNorm2d and Conv2d of one forward pass, in order, deduplicated."""
    seen, out = set(), []

    def hook(mod, inp, _):
        key = (type(mod).__name__, tuple(inp[0].shape), getattr(mod, "stride", None),
               getattr(mod, "kernel_size", None), getattr(mod, "out_channels", None), getattr(mod, "groups", None))
        if key not in seen:
            seen.add(key)
            out.append((mod, tuple(inp[0].shape)))

    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.Conv2d))]
    with torch.no_grad():
        model(x)
    for h in hs:
        h.remove()
    return out


def part_ops(model, x, dtypes, iters, on_row):
    rows = []
    for mod, shape in shapes_of(model, x):
        row = {"op": type(mod).__name__, "shape": list(shape)}
        if isinstance(mod, torch.nn.Conv2d):
            row["conv"] = f"{mod.in_channels}->{mod.out_channels} k{mod.kernel_size[0]} s{mod.stride[0]}"
        for dt in dtypes:
            m = type(mod)(**({"num_features": mod.num_features} if isinstance(mod, torch.nn.BatchNorm2d) else dict(
                in_channels=mod.in_channels, out_channels=mod.out_channels, kernel_size=mod.kernel_size,
                stride=mod.stride, padding=mod.padding, groups=mod.groups, bias=mod.bias is not None))).cuda()
            if isinstance(mod, torch.nn.Conv2d):
                m = m.to(dt)  # autocast casts conv weights to the autocast dtype
            m = m.to(memory_format=torch.channels_last)
            inp = torch.randn(shape, device="cuda", dtype=dt).contiguous(memory_format=torch.channels_last)
            inp.requires_grad_()
            with torch.no_grad():
                grad = torch.randn_like(m(inp))

            def step():
                y = m(inp)
                y.backward(grad)

            name = "fp16" if dt == torch.float16 else "bf16"
            row[f"{name}_ms"] = timed(step, iters)
            if isinstance(mod, torch.nn.BatchNorm2d):
                row[f"{name}_backend"] = bn_backend(inp, m)
        rows.append(row)
        on_row(row)
    return rows


def part_step(arch, batch, image, dtypes, iters, on_dtype):
    """One training step (autocast, channels_last, SGD) per dtype: its time and its top kernels."""
    import torchvision
    from torch.profiler import ProfilerActivity, profile

    out = {}
    for dt in dtypes:
        name = "fp16" if dt == torch.float16 else "bf16"
        torch.manual_seed(0)
        model = getattr(torchvision.models, arch)(num_classes=10).cuda().to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(batch, 3, image, image, device="cuda").contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (batch,), device="cuda")

        def step():
            with torch.autocast("cuda", dtype=dt):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        ms = timed(step, iters)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        kernels = []
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None)
            if t is None:
                t = getattr(e, "cuda_time_total", 0)
            if t > 0:
                kernels.append({"kernel": e.key[:110], "ms_per_step": t / 1000.0 / 5, "calls_per_step": e.count / 5})
        kernels.sort(key=lambda k: -k["ms_per_step"])
        out[name] = {"step_ms": ms, "kernels": kernels[:25]}
        on_dtype(name, out[name])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="resnet18")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--image", type=int, default=224)  # the ladder resizes to 224
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bf16-probe.py: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    import torchvision

    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    dtypes = [torch.float16, torch.bfloat16]
    model = getattr(torchvision.models, a.arch)(num_classes=10).cuda().to(memory_format=torch.channels_last)
    x = torch.randn(a.batch, 3, a.image, a.image, device="cuda").contiguous(memory_format=torch.channels_last)
    # Each row and each part is printed and saved as it ends: a cut run keeps what it measured.
    found = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
             "device": torch.cuda.get_device_name(), "arch": a.arch, "batch": a.batch, "image": a.image,
             "ops": [], "step": {}}

    def save():
        if a.json:
            with open(a.json + ".tmp", "w") as f:
                json.dump(found, f, indent=1)
            os.replace(a.json + ".tmp", a.json)

    print(f"\n## per op, forward + backward, NHWC, {a.arch} at batch {a.batch}, {a.image}x{a.image} (median ms)")
    print(f"{'op':12} {'input':22} {'conv':22} {'fp16':>8} {'bf16':>8} {'bf16/fp16':>9}  backend fp16 / bf16", flush=True)

    def on_row(r):
        be = f"{r.get('fp16_backend', '')} / {r.get('bf16_backend', '')}" if r["op"] == "BatchNorm2d" else ""
        print(f"{r['op']:12} {'x'.join(map(str, r['shape'])):22} {r.get('conv', ''):22} {r['fp16_ms']:8.3f} "
              f"{r['bf16_ms']:8.3f} {r['bf16_ms'] / r['fp16_ms']:9.2f}  {be}", flush=True)
        found["ops"].append(r)
        save()

    ops = part_ops(model, x, dtypes, a.iters, on_row)
    tot = {"BatchNorm2d": [0.0, 0.0], "Conv2d": [0.0, 0.0]}
    for r in ops:
        tot[r["op"]][0] += r["fp16_ms"]
        tot[r["op"]][1] += r["bf16_ms"]
    for k, (f, b) in tot.items():
        print(f"sum of distinct {k} shapes: fp16 {f:.3f} ms, bf16 {b:.3f} ms ({b / f:.2f}x)", flush=True)

    def on_dtype(name, s):
        print(f"\n## one training step in {name}: {s['step_ms']:.3f} ms; kernels by time per step")
        for k in s["kernels"]:
            print(f"{k['ms_per_step']:8.3f} ms {k['calls_per_step']:6.1f}x  {k['kernel']}")
        sys.stdout.flush()
        found["step"][name] = s
        save()

    part_step(a.arch, a.batch, a.image, dtypes, a.iters, on_dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
