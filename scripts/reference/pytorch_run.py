#!/usr/bin/env python3
"""The PyTorch cross-check: run a trainbench profile as the equivalent Python training loop.

Reads the same profile (resolved by `trainbench show`, so extends and --set behave the same and
the profile hash matches), runs the torchvision model of model.arch (with model.weights and
model.zero_init_residual) on torchvision's datasets through
torch.utils.data.DataLoader with the profile's workers / pin_memory, `.to(non_blocking=...)`,
torch.autocast + GradScaler, and torch.compile where the profile asks for a CUDA graph, and
writes a report in trainbench's schema (tool name "pytorch-reference") so that
`trainbench compare` can put the two side by side.

backend.compile is what a PyTorch user writes for the same: torch.compile(model), the model and
its input in channels_last, and torch.optim.SGD(fused=True) (scaled by GradScaler as a fused
optimizer is); backend.cuda_graph alone is torch.compile(model) as before. With
configs/ladder-plus (channels_last, cudnn.benchmark, TF32, fp16 or bf16, batch 512) and
configs/best, the reference offers PyTorch's best configuration of the workload.

    scripts/reference/pytorch_run.py --config F [--set key=value ...] [--out R.json] [--data-only]
                                     [--compile-mode MODE] [--compile-backend NAME]

Started by torchrun with a profile whose dist.backend is set, it trains with
DistributedDataParallel (bucket_cap_mb = dist.bucket_mb, broadcast_buffers=False as trainbench
does), a DistributedSampler, no_sync() on accumulating micro-batches, a barrier before each
window, and rank 0 reports the job's windows (samples summed, the slowest rank's time).
"""
import argparse
import contextlib
import datetime
import gzip
import hashlib
import json
import math
import os
import pickle
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torchvision
import yaml
from PIL import Image
from torch.utils.flop_counter import FlopCounterMode
from torchvision import transforms

ROOT = Path(__file__).resolve().parents[2]


def fnv1a64(text: str) -> str:
    h = 1469598103934665603
    for b in text.encode():
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def resolve(args):
    cmd = [str(args.trainbench), "show", "--config", args.config]
    for s in args.set:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"pytorch_run.py: trainbench show failed:\n{out.stdout}{out.stderr}")
    p = yaml.safe_load(out.stdout)
    # YAML 1.1 reads an unquoted off/on as a boolean; the profile means the words.
    for block, key in (("train", "amp"), ("train", "grad_scaler"), ("measure", "nvtx"), ("dist", "backend")):
        v = p[block][key]
        if isinstance(v, bool):
            p[block][key] = "on" if v else "off"
    return p, out.stdout


class CifarFromBinary(torchvision.datasets.CIFAR10):
    """torchvision's CIFAR10 (PIL images, same __getitem__) over the python-format copy we make of
    the binary files; the md5 check is skipped because generated data has no official checksum."""

    def _check_integrity(self):
        return True

    def _load_meta(self):
        with open(os.path.join(self.root, self.base_folder, self.meta["filename"]), "rb") as f:
            self.classes = pickle.load(f)[self.meta["key"]]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


def python_cifar_root(binary_dir: Path) -> Path:
    """torchvision reads the pickled 'cifar-10-batches-py' layout; convert the binary files once."""
    root = Path(os.environ.get("TRAINBENCH_CACHE", Path.home() / ".cache/trainbench")) / "torchvision-cifar"
    tag = hashlib.sha1(str(binary_dir.resolve()).encode()).hexdigest()[:12]
    key = root / f"{tag}-{int((binary_dir / 'data_batch_1.bin').stat().st_mtime)}"
    py = key / "cifar-10-batches-py"
    if not (py / "batches.meta").exists():
        py.mkdir(parents=True, exist_ok=True)
        names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
        for n in names:
            raw = np.fromfile(binary_dir / f"{n}.bin", dtype=np.uint8).reshape(-1, 3073)
            with open(py / n, "wb") as f:
                pickle.dump({"data": raw[:, 1:].copy(), "labels": raw[:, 0].astype(int).tolist()}, f)
        with open(py / "batches.meta", "wb") as f:
            pickle.dump({"label_names": [str(i) for i in range(10)]}, f)
    return key


def fashion_root(src: Path, name: str) -> Path:
    """torchvision's (Fashion)MNIST wants root/<Class>/raw/ with the files decompressed."""
    root = Path(os.environ.get("TRAINBENCH_CACHE", Path.home() / ".cache/trainbench")) / "torchvision-idx"
    raw = root / name / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for stem in ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]:
        if (raw / stem).exists():
            continue
        if (src / stem).exists():
            shutil.copy(src / stem, raw / stem)
        else:
            with gzip.open(src / f"{stem}.gz") as fin, open(raw / stem, "wb") as fout:
                shutil.copyfileobj(fin, fout)
    return root


class SyntheticImages(torch.utils.data.Dataset):
    def __init__(self, n, side, classes, seed, transform):
        g = np.random.default_rng(seed)
        self.data = g.integers(0, 256, size=(n, side, side, 3), dtype=np.uint8)
        self.labels = g.integers(0, classes, size=n).tolist()
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.data[i])), self.labels[i]


def make_dataset(p):
    d = p["data"]
    t = [transforms.Resize(d["image_size"]), transforms.ToTensor()]
    if d["source"] in ("fashion-mnist", "mnist"):
        t.append(transforms.Lambda(lambda x: x.expand(3, -1, -1)))  # grayscale replicated, as trainbench does
    t.append(transforms.Normalize(d["normalize"]["mean"], d["normalize"]["std"]))
    tf = transforms.Compose(t)
    train = d["split"] == "train"
    if d["source"] == "cifar10":
        path = Path(d["path"] or "data/cifar-10-batches-bin")
        return CifarFromBinary(str(python_cifar_root(path)), train=train, transform=tf, download=False)
    if d["source"] in ("fashion-mnist", "mnist"):
        default = "/usr/share/datasets/fashion-mnist" if d["source"] == "fashion-mnist" else "data/mnist"
        cls = torchvision.datasets.FashionMNIST if d["source"] == "fashion-mnist" else torchvision.datasets.MNIST
        root = fashion_root(Path(d["path"] or default), cls.__name__)
        return cls(str(root), train=train, transform=tf, download=False)
    if d["source"] == "synthetic":
        return SyntheticImages(d["samples"], d["source_size"], p["model"]["num_classes"], p["seed"], tf)
    if d["source"] != "device-synthetic":
        # No loader of this source here: one fixed device batch in its place would be measured as
        # if it were the profile's workload.
        sys.exit(f"pytorch_run.py: data.source {d['source']}: the reference has no loader for it "
                 "(cifar10, fashion-mnist, mnist, synthetic and device-synthetic only)")
    return None


def count_forward_flops(mp, side):
    """One sample's forward FLOPs, as torch's flop counter sees them (2 x the multiply-adds of
    convolutions and matmuls), on a copy of the model on the meta device: nothing is computed."""
    with torch.device("meta"):
        model = torchvision.models.get_model(mp["arch"], num_classes=mp["num_classes"]).eval()
        x = torch.empty(1, 3, side, side)
    with FlopCounterMode(display=False) as counter:
        model(x)
    return float(counter.get_total_flops())


def compute_block(forward_flops, rates, world):
    """results.compute as trainbench writes it; the GPU peak table lives in trainbench only."""
    if forward_flops is None or not rates:
        return None
    train = 3 * forward_flops
    return {"train_flops_per_sample": train, "model_flops_per_s": train * float(np.median(rates)), "devices": world,
            "peak_gpu": None, "peak_flops_per_s": None, "peak_source": None, "share_of_peak": None}


def infinite(loader, sampler=None):
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


def join_job(p):
    """DDP when a launcher started this process and the profile asks for it (trainbench's rule)."""
    if "RANK" not in os.environ or p["dist"]["backend"] == "none":
        return None
    backend = p["dist"]["backend"]
    if backend == "auto":
        backend = "nccl" if p["device"] != "cpu" and torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=p["dist"]["timeout_s"]))
    return {"backend": backend, "rank": dist.get_rank(), "world": dist.get_world_size(),
            "local": int(os.environ.get("LOCAL_RANK", "0")), "local_world": int(os.environ.get("LOCAL_WORLD_SIZE", "1"))}


def job_windows(job, windows):
    """Every rank's windows; the job's: samples summed over ranks, the slowest rank's time."""
    per_rank = [None] * job["world"]
    dist.all_gather_object(per_rank, windows)
    n = min(len(w) for w in per_rank)
    merged = []
    for i in range(n):
        samples = sum(w[i]["samples"] for w in per_rank)
        elapsed = max(w[i]["elapsed_s"] for w in per_rank)
        merged.append({"samples": samples, "elapsed_s": elapsed, "samples_per_s": samples / elapsed})
    return merged, per_rank


class StreamPrefetcher:
    """The article's rung 7: copy the next batch on a side stream while this one computes
    (bounded: one batch ahead, unlike the article's growing list)."""

    def __init__(self, it, device, non_blocking):
        self.it, self.device, self.nb = it, device, non_blocking
        self.stream = torch.cuda.Stream(device)
        self.next = None
        self._preload()

    def _preload(self):
        x, y = next(self.it)
        with torch.cuda.stream(self.stream):
            self.next = (x.to(self.device, non_blocking=self.nb), y.to(self.device, non_blocking=self.nb))

    def __next__(self):
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        x, y = self.next
        x.record_stream(torch.cuda.current_stream(self.device))
        y.record_stream(torch.cuda.current_stream(self.device))
        self._preload()
        return x, y


def describe_compile(kw):
    """torch.compile(model) as called: the arguments that differ from its defaults."""
    args = [f"{k}={v!r}" for k, v in kw.items() if (k, v) != ("backend", "inductor")]
    return "torch.compile(model" + "".join(", " + a for a in args) + ")"


def main():
    # A shell without job control starts background jobs with SIGINT ignored, and Python keeps it
    # so: a time limit's SIGINT would then never become the KeyboardInterrupt that writes the report.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--out")
    ap.add_argument("--data-only", action="store_true", help="loader and transfer only (like trainbench bench-data)")
    ap.add_argument("--trainbench", default=ROOT / "build/trainbench")
    ap.add_argument("--compile-mode", default=None,
                    help="torch.compile's mode (default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs); "
                         "default: torch.compile's own default")
    ap.add_argument("--compile-backend", default="inductor",
                    help="torch.compile's backend; 'aot_eager' traces forward and backward without generating "
                         "kernels (a quick check that a profile compiles, not a measurement)")
    args = ap.parse_args()

    p, resolved = resolve(args)
    job = join_job(p)
    torch.manual_seed(p["seed"])
    want = p["device"]
    device = torch.device("cuda" if want == "auto" and torch.cuda.is_available() else ("cpu" if want == "auto" else want))
    if job and device.type == "cuda" and want in ("auto", "cuda"):
        device = torch.device("cuda", job["local"])
    on_cuda = device.type == "cuda"
    if p["threads"] > 0:
        torch.set_num_threads(p["threads"])
    d, t, tr, be, m = p["data"], p["train"], p["transfer"], p["backend"], p["measure"]
    notes = []
    if args.data_only and not m.get("min_window_s"):
        # As trainbench bench-data: a few loader batches would time the clock more than the loader.
        m["min_window_s"] = 0.1
        notes.append("bench-data: measure.min_window_s 0 taken as 0.1 s")
    if on_cuda:
        torch.backends.cudnn.benchmark = be["cudnn_benchmark"]
        torch.backends.cuda.matmul.allow_tf32 = be["tf32"]
        torch.backends.cudnn.allow_tf32 = be["tf32"]
    batch = t["batch_size"]
    # backend.compile: as trainbench's switch, NHWC whatever model.channels_last says.
    compiled = bool(be.get("compile", False))
    graphed = be["cuda_graph"] or compiled
    fmt = torch.channels_last if p["model"]["channels_last"] or compiled else torch.contiguous_format
    if be["cuda_graph"] and not compiled and not args.data_only:
        # PyTorch has no switch for "the eager step as one CUDA graph"; torch.compile is what a user
        # reaches for, and it is not the same thing: compare such a rung with that in mind.
        notes.append("backend.cuda_graph: the reference runs torch.compile(model) (Inductor's kernels and layout; "
                     "no CUDA graph in its default mode), not a CUDA graph of the eager step")
    if d["preprocess"] == "device" and not args.data_only:
        notes.append("data.preprocess: device: the reference resizes and normalises on the host (torchvision transforms)")
    if be.get("pad_stem", False) and not args.data_only:
        notes.append("backend.pad_stem: the reference runs the stem convolution on 3 channels, as a PyTorch user does")
    if be.get("conv_fusion", False) and not args.data_only:
        notes.append("backend.conv_fusion: the reference runs batch norm, ReLU and the next convolution as PyTorch "
                     "does (torch.compile fuses what it can around cuDNN's convolution)")

    ds = make_dataset(p)
    it = None
    if ds is not None:
        kw = dict(batch_size=batch, shuffle=d["shuffle"], num_workers=d["workers"], drop_last=d["drop_last"],
                  pin_memory=d["pin_memory"] and on_cuda)
        if d["workers"] > 0:
            kw.update(prefetch_factor=d["prefetch_factor"], persistent_workers=True)
        sampler = None
        if job:
            sampler = torch.utils.data.DistributedSampler(ds, num_replicas=job["world"], rank=job["rank"],
                                                          shuffle=d["shuffle"], seed=p["seed"], drop_last=d["drop_last"])
            kw.update(shuffle=False, sampler=sampler)
        it = infinite(torch.utils.data.DataLoader(ds, **kw), sampler)
    nb = tr["non_blocking"] and on_cuda
    fetch = None
    if it is not None and on_cuda and tr["copy_stream"]:
        pre = StreamPrefetcher(it, device, True)
        fetch = lambda: next(pre)
    elif it is not None:
        def fetch():
            x, y = next(it)
            return x.to(device, non_blocking=nb), y.to(device, non_blocking=nb)
    else:
        fixed = (torch.randn(batch, 3, d["image_size"], d["image_size"], device=device).contiguous(memory_format=fmt),
                 torch.randint(p["model"]["num_classes"], (batch,), device=device))
        fetch = lambda: fixed

    params = 0
    forward_flops = None
    step = None
    amp = t["amp"]
    if not args.data_only:
        mp = p["model"]
        model = torchvision.models.get_model(mp["arch"], num_classes=mp["num_classes"],
                                             zero_init_residual=mp.get("zero_init_residual", False))
        if mp["weights"]:
            model.load_state_dict(torch.load(mp["weights"]))
        model = model.to(device, memory_format=fmt)
        model.train()
        params = sum(q.numel() for q in model.parameters())
        forward_flops = count_forward_flops(mp, d["image_size"])
        o = t["optimizer"]
        # fused=True: one multi-tensor kernel (torch._fused_sgd_), as trainbench's backend.compile.
        fused = {"fused": True} if compiled else {"foreach": o["foreach"]}
        opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"], weight_decay=o["weight_decay"],
                              **fused)
        if compiled and o["momentum"] != 0:
            # PyTorch 2.11's fused SGD makes its momentum buffers with empty_like on the first step and
            # lets the kernel fill them; a step GradScaler skips (an inf at the first scale, routine
            # in fp16) leaves them unwritten, and the next step reads them as momentum. Zeros give
            # the first real step exactly the gradient, as the unfused SGD does and as trainbench's
            # fused SGD (stages/fused_sgd.cpp) starts.
            for q in model.parameters():
                opt.state[q]["momentum_buffer"] = torch.zeros_like(q, memory_format=torch.preserve_format)
        scaler_on = t["grad_scaler"] == "on" or (t["grad_scaler"] == "auto" and amp == "fp16")
        scaler = torch.amp.GradScaler(device.type, enabled=scaler_on)
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(amp, torch.bfloat16)  # unused when amp is off
        if job:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if on_cuda else None, bucket_cap_mb=p["dist"]["bucket_mb"],
                broadcast_buffers=False)
            if graphed:
                notes.append("backend.cuda_graph: not combined with DDP here, as in trainbench")
        compile_kw = {"backend": args.compile_backend}
        if args.compile_mode:
            compile_kw["mode"] = args.compile_mode
        net = torch.compile(model, **compile_kw) if graphed and not job else model
        k = t["grad_accumulation"]
        state = {"n": 0, "loss": None}

        def step(x, y):
            accumulating = job is not None and (state["n"] + 1) % k != 0
            with net.no_sync() if accumulating else contextlib.nullcontext():
                with torch.autocast(device.type, dtype=dtype, enabled=amp != "off"):
                    loss = torch.nn.functional.cross_entropy(net(x.contiguous(memory_format=fmt)), y)
                scaler.scale(loss / k).backward()
            state["n"] += 1
            if state["n"] % k == 0:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
            state["loss"] = loss.detach()

    def sync():
        if on_cuda:
            torch.cuda.synchronize(device)

    waits, totals = [], []

    def one(record):
        t0 = time.perf_counter()
        x, y = fetch()
        t1 = time.perf_counter()
        if step:
            step(x, y)
        if record:
            waits.append(t1 - t0)

    loss_first = None
    status, error = "ok", None
    windows = []
    stop = {"by": "repeats"}

    def more_windows():
        # measure.max_repeats, as trainbench's runner: another window while the windows are noisier
        # than target_cv, up to max_repeats; ranks agree so all stop after the same window.
        if not m.get("max_repeats"):
            return False
        rates = [w["samples_per_s"] for w in windows]
        noisy = len(rates) > 1 and statistics.stdev(rates) / statistics.fmean(rates) > m["target_cv"]
        if job:
            flag = torch.tensor([1.0 if noisy else 0.0], device=device if job["backend"] == "nccl" else "cpu")
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            noisy = flag.item() > 0
        stop["by"] = "max_repeats" if noisy else "target_cv"
        return noisy and len(windows) < m["max_repeats"]
    def timed_window(batches, record):
        sync()
        if job:
            dist.barrier()
        start = time.perf_counter()
        for _ in range(batches):
            one(record)
        sync()
        return time.perf_counter() - start

    def calibrated_batches():
        # measure.min_window_s, as trainbench's runner: unrecorded windows grow the count (20% past
        # the minimum, at most 10x at a time) until one lasts that long; ranks take the largest.
        n, least = m["measured_batches"], m.get("min_window_s", 0.0)
        if not least:
            return n
        for _ in range(13):
            el = timed_window(n, False)
            want = n if el >= least else min(10 * n, math.ceil(1.2 * n * least / el) if el > 0 else 10 * n)
            if job:
                t = torch.tensor([float(want)], device=device if job["backend"] == "nccl" else "cpu")
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                want = int(t.item())
            if want <= n:
                break
            n = want
        return n

    window_batches = m["measured_batches"]
    # The DataLoader's workers prefetch while the model is set up and while the first batches take
    # long (torch.compile's first batch takes tens of seconds): windows served from those batches
    # would show an input-bound loop as compute-bound. trainbench's warmup takes as many batches
    # as its loader holds beyond the profile's, with a model or without, and so does this.
    prefetched = d["workers"] * d["prefetch_factor"] if it is not None and d["workers"] else 0
    if prefetched and fetch is not None and on_cuda and tr["copy_stream"]:
        prefetched += 1  # the side stream's batch ahead, as trainbench's copy stage lookahead
    try:
        for i in range(m["warmup_batches"] + prefetched):
            one(False)
            if i == 0 and step:
                loss_first = state["loss"].item()
        window_batches = calibrated_batches()
        while len(windows) < m["repeats"] or more_windows():
            el = timed_window(window_batches, True)
            n = batch * window_batches
            windows.append({"samples": n, "elapsed_s": el, "samples_per_s": n / el})
    except KeyboardInterrupt:
        status, error = "interrupted", {"kind": "interrupted", "message": "interrupted by signal"}
        stop["by"] = "interrupted"
    per_rank = None
    if job:
        windows, per_rank = job_windows(job, windows)
    rates = [w["samples_per_s"] for w in windows]

    def summ(v, full):
        if not v:
            return None
        q = np.quantile(v, [0.25, 0.5, 0.75])
        s = {"median": float(q[1]), "q1": float(q[0]), "q3": float(q[2]), "mean": statistics.fmean(v)}
        if full:
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            s.update(min=min(v), max=max(v), stdev=sd, cv=sd / s["mean"] if s["mean"] else 0.0, n=len(v), unit="samples/s")
        return s

    def noise(v):  # trainbench's results.noise: cv at 10% and 25%
        if not v:
            return None
        cv = summ(v, True)["cv"] if len(v) > 1 else 0.0
        return "ok" if cv <= 0.10 else "noisy" if cv <= 0.25 else "very_noisy"

    distributed = None
    if job:
        distributed = {
            "backend": job["backend"], "launcher": "torchrun", "world_size": job["world"], "rank": job["rank"],
            "local_world_size": job["local_world"], "global_batch_size": batch * job["world"],
            "bucket_cap_mb": p["dist"]["bucket_mb"], "bucket_bytes": [], "allreduce_steps": 0,
            "allreduce_span_s_median": None, "buckets_launched_in_backward": None,
            "ranks": [{"rank": r, "samples_per_s": summ([w["samples_per_s"] for w in ws], True), "allreduce_s_median": None}
                      for r, ws in enumerate(per_rank)],
            "baseline_report": None, "baseline_samples_per_s": None, "scaling_efficiency": None}
    gpu = None
    if on_cuda:
        pr = torch.cuda.get_device_properties(device)
        gpu = {"name": pr.name, "uuid": str(getattr(pr, "uuid", "")), "driver": "", "memory_bytes": pr.total_memory}
    report = {
        "schema_version": 1,
        "tool": {"name": "pytorch-reference", "version": torch.__version__, "git": ""},
        "status": status,
        "error": error,
        "context": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": socket.gethostname(),
            "cpu": {"model": platform.processor() or platform.machine(), "cores": os.cpu_count()},
            "gpu": gpu, "libtorch": torch.__version__.split("+")[0],
            "cuda": torch.version.cuda or "none", "cudnn": str(torch.backends.cudnn.version() or "none"),
            "build_type": "Release", "nvtx": False,
            "data_generated": d["source"] == "cifar10" and (Path(d["path"] or "data/cifar-10-batches-bin") / "GENERATED").exists(),
            "command_line": " ".join(sys.argv),
        },
        "profile": {"name": p["name"], "description": p["description"], "path": args.config,
                    "hash": fnv1a64(resolved), "workload_hash": "", "resolved": resolved},
        "effective": {
            "device": str(device), "device_name": gpu["name"] if gpu else "cpu",
            "intra_op_threads": torch.get_num_threads(), "loader_workers": d["workers"], "loader_slots": 0,
            "pin_memory": bool(d["pin_memory"] and on_cuda), "non_blocking": bool(nb), "copy_stream": bool(on_cuda and tr["copy_stream"]),
            "cuda_graph": False,
            "compile": (["channels_last", "torch.compile", "fused_sgd"] if compiled and not args.data_only else []),
            "cudnn_benchmark": bool(on_cuda and be["cudnn_benchmark"]), "tf32": bool(on_cuda and be["tf32"]),
            "amp": amp, "grad_scaler": bool(step and scaler_on), "channels_last": fmt == torch.channels_last,
            "preprocess": "host", "batch_size": batch, "dataset": type(ds).__name__ if ds is not None else "device-synthetic",
            "transfer": "DataLoader + .to()" + (" on a side stream" if on_cuda and tr["copy_stream"] else ""),
            "step": (describe_compile(compile_kw) if graphed and not job else "eager")
            + (", torch.optim.SGD(fused=True)" if compiled else ", torch.optim.SGD"),
            "clock": "time.perf_counter", "notes": notes,
        },
        "model": {"arch": p["model"]["arch"], "parameters": params, "input_shape": [3, d["image_size"], d["image_size"]],
                  "forward_flops_per_sample": forward_flops},
        "measure": {"warmup_batches": m["warmup_batches"], "measured_batches": m["measured_batches"], "repeats": m["repeats"],
                    "max_repeats": m.get("max_repeats", 0), "target_cv": m.get("target_cv", 0.02),
                    "min_window_s": m.get("min_window_s", 0.0)},
        "results": {
            "samples_per_s": summ(rates, True), "repeats": windows, "warmup_batches_done": m["warmup_batches"] + prefetched,
            "window_batches": window_batches,
            "stopped_by": stop["by"],
            "noise": noise(rates),
            "stages_s": {"data_wait": summ(waits, False)}, "h2d_overlap_share": None,
            "memory": {"device_peak_allocated_bytes": torch.cuda.max_memory_allocated(device) if on_cuda else None,
                       "device_peak_reserved_bytes": torch.cuda.max_memory_reserved(device) if on_cuda else None,
                       "host_peak_rss_bytes": None},
            "telemetry": None,
            "loss": {"first": loss_first, "last": state["loss"].item() if step and state["loss"] is not None else None},
            "amp": {"skipped_steps": None, "loss_scale": scaler.get_scale()} if step and scaler_on else None,
            "distributed": distributed,
            "compute": compute_block(forward_flops, rates, job["world"] if job else 1),
        },
    }
    out_text = args.out or f"reports/pytorch/{p['name']}.json"
    if job:
        dist.destroy_process_group()
        if job["rank"] != 0 and "{rank}" not in out_text:
            return 0 if status == "ok" else 130
        out_text = out_text.replace("{rank}", str(job["rank"]))
    out = Path(out_text)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out)
    if rates:
        print(f"{p['name']}: pytorch-reference {statistics.median(rates):.1f} samples/s (median of {len(rates)})")
    return 0 if status == "ok" else 130


if __name__ == "__main__":
    sys.exit(main())
