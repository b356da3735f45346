#!/usr/bin/env python3
"""All-reduce time against message size, the alpha-beta model fitted to it, and what it predicts.

  alpha-beta.py measure --out FILE [--reps N]   under a launcher (torchrun): every rank times
                                                Gloo all-reduces of 4 KiB ... 64 MiB; rank 0 writes FILE
  alpha-beta.py fit FILE                        fits t = alpha + f * n / bw to FILE, prints it (JSON too)
  alpha-beta.py check FIT REPORT --compute S    the fit against a trainbench two-rank report: predicted
                                                all-reduce of its buckets and step time against measured
  alpha-beta.py predict                         scaling efficiency of ResNet-18 and ResNet-50 with their
                                                real buckets at 8, 64, 512 GPUs on NVLink and InfiniBand

The measurement uses torch.distributed from the project's PyTorch: its ProcessGroupGloo is the same
C++ class, from the same LibTorch, that trainbench's group is, and it all-reduces any size asked
for, which trainbench (a training benchmark) has no command for. f = 2(p - 1)/p is what a ring
all-reduce sends per byte of message (reduce-scatter, then all-gather): 1 for two ranks.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def ring_factor(p):
    return 2.0 * (p - 1) / p


def measure(args):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = [4096 * 2**k for k in range(15)]  # 4 KiB ... 64 MiB
    rows = []
    for n in sizes:
        t = torch.ones(n // 4, dtype=torch.float32)
        for _ in range(2):  # warm up the pairs' buffers for this size
            dist.all_reduce(t)
        times = []
        for _ in range(args.reps):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - start)
        # The slowest rank's time is the collective's.
        mine = torch.tensor([statistics.median(times), min(times)], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        rows.append({"bytes": n, "median_s": mine[0].item(), "min_s": mine[1].item(), "reps": args.reps})
    if rank == 0:
        host = os.uname().nodename
        with open(args.out, "w") as f:
            json.dump({"world_size": world, "host_of_rank0": host, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


def fit_rows(rows, world):
    """Least squares on relative error (each size weighs alike): t = alpha + f * n / bw."""
    f = ring_factor(world)
    xs = [f * r["bytes"] for r in rows]
    ts = [r["median_s"] for r in rows]
    w = [1.0 / t**2 for t in ts]
    sw = sum(w)
    sx = sum(wi * x for wi, x in zip(w, xs))
    st = sum(wi * t for wi, t in zip(w, ts))
    sxx = sum(wi * x * x for wi, x in zip(w, xs))
    sxt = sum(wi * x * t for wi, x, t in zip(w, xs, ts))
    slope = (sw * sxt - sx * st) / (sw * sxx - sx * sx)
    alpha = (st - slope * sx) / sw
    model = [alpha + slope * x for x in xs]
    worst = max(abs(m - t) / t for m, t in zip(model, ts))
    return {"alpha_s": alpha, "bandwidth_bytes_per_s": 1.0 / slope, "ring_factor": f,
            "worst_relative_error": worst}


def fit(args):
    data = json.load(open(args.file))
    result = fit_rows(data["rows"], data["world_size"])
    print(f"{'bytes':>10} {'measured ms':>12} {'model ms':>10} {'error':>7}")
    for r in data["rows"]:
        m = result["alpha_s"] + result["ring_factor"] * r["bytes"] / result["bandwidth_bytes_per_s"]
        print(f"{r['bytes']:>10} {1e3 * r['median_s']:>12.3f} {1e3 * m:>10.3f} {100 * (m / r['median_s'] - 1):>6.1f}%")
    print(f"alpha (latency) {1e6 * result['alpha_s']:.0f} us, bandwidth {result['bandwidth_bytes_per_s'] / 1e9:.3f} GB/s"
          f" (ring factor {result['ring_factor']:g} for {data['world_size']} ranks), "
          f"worst error {100 * result['worst_relative_error']:.0f}%")
    print(json.dumps(result))


def allreduce_s(n, p, alpha, bw, alpha_per_step=False):
    """Ring all-reduce of n bytes over p ranks: 2(p-1) steps of latency, 2(p-1)/p n bytes per rank."""
    steps = 2 * (p - 1) if alpha_per_step else 1
    return steps * alpha + ring_factor(p) * n / bw


def check(args):
    fitted = json.loads(open(args.fit).read().strip().splitlines()[-1])
    report = json.load(open(args.report))
    d = report["results"]["distributed"]
    p = d["world_size"]
    buckets = d["bucket_bytes"]
    comm = sum(allreduce_s(n, p, fitted["alpha_s"], fitted["bandwidth_bytes_per_s"]) for n in buckets)
    stages = report["results"]["stages_s"]
    step = stages["batch"]["median"]
    exposed = stages["allreduce"]["median"]
    span = d["allreduce_span_s_median"]
    print(f"buckets {[round(n / 2**20, 1) for n in buckets]} MiB: model all-reduce {1e3 * comm:.1f} ms "
          f"(alpha {1e6 * fitted['alpha_s']:.0f} us, {fitted['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s)")
    print(f"measured: first bucket launched -> last done {1e3 * span:.1f} ms, exposed (allreduce stage) "
          f"{1e3 * exposed:.1f} ms, step {1e3 * step:.1f} ms")
    if args.compute:
        print(f"one rank alone, same per-rank batch: step {1e3 * args.compute:.1f} ms; "
              f"model step without overlap {1e3 * (args.compute + comm):.1f} ms")


# Published figures the predictions use (see docs/distributed.md for the sources).
FABRICS = {
    # NVLink 4 (H100/H200 SXM): 18 links x 25 GB/s per direction = 450 GB/s per direction per GPU.
    "NVLink 4": {"bw": 450e9, "alpha": 2e-6},
    # InfiniBand NDR, one 400 Gb/s adapter per GPU (DGX H100): 50 GB/s per direction.
    "IB NDR": {"bw": 50e9, "alpha": 5e-6},
}
# NVIDIA DeepLearningExamples, ResNet-50 v1.5, PyTorch, A100 80 GB, AMP, batch 256: 2470 img/s.
RN50_A100_IMG_S = 2470.0
BATCH = 256


def model_profile(arch, cap_mb):
    """Bucket sizes by DDP's rule (reverse parameter order, close at >= cap) and, for each bucket,
    the share of backward done when its last gradient is ready (backward time taken as
    proportional to each layer's forward FLOPs, layers in reverse order)."""
    import torch
    import torchvision

    model = getattr(torchvision.models, arch)(num_classes=1000)
    flops = {}

    def hook(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1] * module.in_channels // module.groups
            flops[module] = 2 * k * output.numel()
        elif isinstance(module, torch.nn.Linear):
            flops[module] = 2 * module.in_features * module.out_features

    for m in model.modules():
        m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.zeros(1, 3, 224, 224))
    total = sum(flops.values())
    # Each parameter's module, in registration (forward) order.
    owner = []
    for m in model.modules():
        for p in m.parameters(recurse=False):
            owner.append((p, m))
    # Backward reaches parameter i once every module after it (and its own) is done.
    done_after = []
    later = 0.0
    seen = set()
    for p, m in reversed(owner):
        if m not in seen:
            later += flops.get(m, 0)
            seen.add(m)
        done_after.append(later / total)
    done_after.reverse()
    cap = cap_mb * 2**20
    buckets, ready = [], []
    size = cap
    for i in range(len(owner) - 1, -1, -1):
        if size >= cap:
            buckets.append(0)
            ready.append(0.0)
            size = 0
        n = owner[i][0].numel() * 4
        buckets[-1] += n
        size += n
        ready[-1] = done_after[i]
    return buckets, ready, total / 2  # multiply-adds counted twice: FLOPs


def step_time(buckets, ready, t_compute, p, fabric, overlap=True):
    """Forward (1/3 of the step), backward (2/3) with buckets launched as they are ready and sent
    one after another over the link; without overlap they all go after backward."""
    t_fwd, t_bwd = t_compute / 3, 2 * t_compute / 3
    end = 0.0
    for n, r in zip(buckets, ready):
        start = max(end, t_fwd + (r * t_bwd if overlap else t_bwd))
        end = start + allreduce_s(n, p, fabric["alpha"], fabric["bw"], alpha_per_step=True)
    return max(t_compute, end)


def predict(args):
    rn50 = model_profile("resnet50", 25)
    rates = {"resnet50": RN50_A100_IMG_S}
    # ResNet-18's rate taken as ResNet-50's scaled by the FLOPs (an assumption: small models run
    # further below peak, so this errs towards a faster step, which is the harder case here).
    rn18 = model_profile("resnet18", 25)
    rates["resnet18"] = RN50_A100_IMG_S * rn50[2] / rn18[2]
    print("compute per GPU: A100 AMP batch 256 (published for ResNet-50; ResNet-18 by FLOPs), and 2x that")
    for arch in ("resnet18", "resnet50"):
        buckets, ready, _ = model_profile(arch, 25)
        print(f"{arch}: 1000 classes, 25 MiB cap: buckets {[round(n / 2**20, 1) for n in buckets]} MiB, "
              f"ready after {[round(r, 2) for r in ready]} of backward")
    print(f"\n{'model':9} {'GPU speed':10} {'fabric':9} {'p':>4} {'comm ms':>8} {'step ms':>8} "
          f"{'eff overlap':>12} {'eff none':>9}")
    for arch in ("resnet18", "resnet50"):
        buckets, ready, _ = model_profile(arch, 25)
        for speed in (1, 2):
            t_compute = BATCH / (rates[arch] * speed)
            for name, fabric in FABRICS.items():
                for p in (8, 64, 512):
                    comm = sum(allreduce_s(n, p, fabric["alpha"], fabric["bw"], True) for n in buckets)
                    with_overlap = step_time(buckets, ready, t_compute, p, fabric, True)
                    without = step_time(buckets, ready, t_compute, p, fabric, False)
                    print(f"{arch:9} {'A100' if speed == 1 else '2x A100':10} {name:9} {p:>4} {1e3 * comm:>8.2f} "
                          f"{1e3 * with_overlap:>8.1f} {100 * t_compute / with_overlap:>11.1f}% "
                          f"{100 * t_compute / without:>8.1f}%")
    print("\nbucket cap against efficiency, IB NDR, 2x A100 compute (the hardest case above), with overlap / none"
          " (number of buckets):")
    for arch in ("resnet18", "resnet50"):
        t_compute = BATCH / (rates[arch] * 2)
        for p in (64, 512):
            cells = []
            for cap in (1, 5, 25, 100, 1000):
                buckets, ready, _ = model_profile(arch, cap)
                a = step_time(buckets, ready, t_compute, p, FABRICS["IB NDR"], True)
                b = step_time(buckets, ready, t_compute, p, FABRICS["IB NDR"], False)
                cells.append(f"{cap} MiB: {100 * t_compute / a:.0f}/{100 * t_compute / b:.0f}% ({len(buckets)})")
            print(f"  {arch} p={p}: " + ", ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--reps", type=int, default=20)
    f = sub.add_parser("fit")
    f.add_argument("file")
    c = sub.add_parser("check")
    c.add_argument("fit")
    c.add_argument("report")
    c.add_argument("--compute", type=float, default=0.0, help="one rank's step time alone, seconds")
    sub.add_parser("predict")
    args = ap.parse_args()
    {"measure": measure, "fit": fit, "check": check, "predict": predict}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
