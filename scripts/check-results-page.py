#!/usr/bin/env python3
"""results-page.py on two calls of the GPU kit, as a GPU host writes them, without a GPU.

The page is what a session reads first after its GPU lease, and its CUDA branches (kernel
families, the goals' ratios, two calls merged) never run in a rehearsal, whose reports are the
CPU's. Here one real report of this build (a tiny CPU run) is the template of every rung, with
what only a GPU writes filled in: the device, samples/s, effective.compile and pad_stem, kernel
families, the decoder's counts. A first call finishes some rungs and cuts others, a second
finishes those, and the page must hold both: each goal as its ratio, bf16 set against its fp16
twin, every [gpu] case once with its last result, the decode modes and sanitizer runs of both
calls, and no phase called cut that the second call finished.

  usage: scripts/check-results-page.py --trainbench build/trainbench
"""
import argparse
import copy
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def template(tb, tmp):
    out = os.path.join(tmp, "template.json")
    subprocess.run([tb, "run", "-q", "-c", os.path.join(HERE, "..", "configs", "quickstart.yaml"),
                    "--set", "data.source=synthetic", "--set", "data.image_size=32", "--set", "train.batch_size=4",
                    "--set", "measure.warmup_batches=1", "--set", "measure.measured_batches=1",
                    "--set", "measure.repeats=2", "--set", "device=cpu", "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    r = json.load(open(out))
    r["context"]["gpu"] = {"name": "NVIDIA H200", "driver": "580.0", "memory_bytes": 150 * 2**30}
    r["context"]["cuda"] = "13.0"
    return r


def families(norm, conv=0.6):
    shares = {"convolution": conv, "norm_activation": norm, "optimizer": 0.05, "other": 1 - conv - norm - 0.05}
    per_batch = 0.02
    return {"measured": True, "source": "synthetic", "batches": 5, "dropped_records": 0,
            "kernel_s_per_batch": per_batch, "shares": shares,
            "s_per_batch": {k: v * per_batch for k, v in shares.items()},
            "top": {k: [{"name": f"{k}_kernel", "s_per_batch": v * per_batch}] for k, v in shares.items()}}


def rung(t, samples, amp="fp16", compile_parts=None, pad_stem=False, dataset="cifar10 train", norm=0.3,
         decode="none", status="ok"):
    r = copy.deepcopy(t)
    r["status"] = status
    s = r["results"]["samples_per_s"]
    s.update(median=samples, q1=samples * 0.99, q3=samples * 1.01, mean=samples)
    e = r["effective"]
    e.update(device="cuda", device_name="NVIDIA H200", amp=amp, compile=compile_parts or [], pad_stem=pad_stem,
             dataset=dataset, decode=decode, cuda_graph=bool(compile_parts), notes=[])
    r["results"]["kernel_families"] = families(norm)
    return r


def write(folder, name, report):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name + ".json"), "w") as f:
        json.dump(report, f)


def text(path, body):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(body)


COMPILED = ["channels_last", "batch norm + ReLU (cuDNN graph, bit mask)", "fused_sgd", "cuda_graph"]
SYNTHETIC = "device-synthetic (one batch made on the device)"
TSV = "status\tseconds\tcap_s\tname\n"


def first_call(t, d):
    write(f"{d}/ladder", "06-compile", rung(t, 18000, compile_parts=COMPILED))
    write(f"{d}/pytorch", "06-compile", rung(t, 17000))
    graphed = rung(t, 16000, compile_parts=["cuda_graph"])
    graphed["results"]["memory"] = {"device_peak_allocated_bytes": 2**29, "device_peak_reserved_bytes": 12 * 2**30,
                                    "host_peak_rss_bytes": 2**31}
    write(f"{d}/ladder-plus", "00-cuda-graph", graphed)
    write(f"{d}/best", "00-compile-fp16", rung(t, 20000, compile_parts=COMPILED, norm=0.30))
    write(f"{d}/best", "01-compile-bf16", rung(t, 19000, amp="bf16", compile_parts=COMPILED, norm=0.34))
    write(f"{d}/best", "02-compile-fp16-device-preprocess", rung(t, 20500, compile_parts=COMPILED))
    write(f"{d}/best", "03-compile-fp16-device-preprocess-pad-stem",
          rung(t, 21000, compile_parts=COMPILED, pad_stem=True, norm=0.05))
    best04 = rung(t, 20800, compile_parts=COMPILED, pad_stem=True)
    best04["effective"]["conv_fusion"] = ["batch norm + ReLU + convolution (cuDNN graphs, NHWC, fp16; 8 of 8 pairs)"]
    write(f"{d}/best", "04-compile-fp16-device-preprocess-pad-stem-conv-fusion", best04)
    write(f"{d}/pytorch-best", "00-compile-fp16", rung(t, 17500))
    write(f"{d}/resnet50", "09-compile", rung(t, 7000, compile_parts=COMPILED, dataset=SYNTHETIC))
    # The kit's rung 10 again with 35% of each batch decoded by the loader's workers.
    shared10 = rung(t, 6800, compile_parts=COMPILED, dataset="imagefolder", decode="device")
    shared10["profile"]["resolved"] = re.sub(r"device_decode_share: *[0-9.]+", "device_decode_share: 0.65",
                                             shared10["profile"]["resolved"])
    write(f"{d}/resnet50-share", "10-compile-imagefolder", shared10)
    write(f"{d}/resnet50", "11-compile-pad-stem",
          rung(t, 3000, compile_parts=COMPILED, pad_stem=True, dataset=SYNTHETIC, status="interrupted"))
    conv_fused = rung(t, 7200, compile_parts=COMPILED, dataset=SYNTHETIC)
    conv_fused["effective"]["conv_fusion"] = ["batch norm + ReLU + convolution (cuDNN graphs, NHWC, fp16; 32 of 32 pairs)"]
    write(f"{d}/resnet50", "12-compile-conv-fusion", conv_fused)
    host = rung(t, 5000, decode="host")
    dev = rung(t, 9000, decode="device")
    dev["results"]["device_decode"] = {"images_hardware": 900, "images_region": 800, "images_cuda": 100,
                                       "images_workers": 0, "host_fallbacks": 0}
    write(f"{d}/decode", "host", host)
    write(f"{d}/decode", "device", dev)
    # fusion-bench: ResNet-50 to its end (one shape refused), ResNet-18 cut after one shape.
    fused = {"input": [256, 64, 56, 56], "filter": [64, 64, 3, 3], "stride": 1, "padding": 1,
             "layers": ["layer1.0.conv2", "layer1.1.conv2", "layer1.2.conv2"], "unfused_median_ms": 1.0,
             "fused_median_ms": 0.8, "fused_over_unfused": 0.8, "max_relative_error": 0.003}
    refused = {"input": [256, 64, 56, 56], "filter": [256, 64, 1, 1], "stride": 1, "padding": 0,
               "layers": ["layer1.0.conv3"], "refused": "data gradient with dReLU: cuDNN check_support: no engine"}
    text(f"{d}/fusion-resnet50.json", json.dumps({
        "arch": "resnet50", "batch": 256, "dtype": "Half", "shapes": [fused, refused],
        "per_step": {"layers": 32, "measured_layers": 3, "unfused_ms": 3.0, "fused_ms": 2.4, "saved_ms": 0.6}}))
    text(f"{d}/fusion-resnet18.json", json.dumps({"status": "error", "error": "CUDA out of memory", "arch": "resnet18",
                                                  "batch": 512, "dtype": "Half", "shapes": [fused]}))
    text(f"{d}/gpu-tests.tsv", TSV + "fail\t3.0\t30\tcase A\npass\t1.0\t30\tcase B\nnot-run\t0\t60\tcase C\n")
    text(f"{d}/gpu-tests.txt", "== case A: fail\n")
    text(f"{d}/sanitizer-memcheck.txt", "== memcheck: trainbench_crop_check\nERROR SUMMARY: 0 errors (first call)\n")
    text(f"{d}/cut.txt", "tests\nresnet50\n")
    text(f"{d}/skipped.txt", "")
    text(f"{d}/phase-times.tsv", "phase\tplanned_s\tcap_s\ttaken_s\ntests\t125\t125\t125\nresnet50\t50\t50\t50\n")


def second_call(t, d):
    write(f"{d}/resnet50", "11-compile-pad-stem",
          rung(t, 7300, compile_parts=COMPILED, pad_stem=True, dataset=SYNTHETIC))
    dev = rung(t, 12000, decode="device")
    dev["results"]["device_decode"] = {"images_hardware": 950, "images_region": 900, "images_cuda": 50,
                                       "images_workers": 0, "host_fallbacks": 0}
    write(f"{d}/decode", "device", dev)
    shared = rung(t, 14000, decode="device")
    shared["results"]["device_decode"] = {"images_hardware": 600, "images_region": 550, "images_cuda": 50,
                                          "images_workers": 350, "host_fallbacks": 0}
    shared["profile"]["resolved"] = re.sub(r"device_decode_share: *[0-9.]+", "device_decode_share: 0.65",
                                           shared["profile"]["resolved"])
    write(f"{d}/decode", "device-share", shared)
    write(f"{d}/decode", "host", rung(t, 100, decode="host", status="interrupted"))  # cut: the first call's stays
    text(f"{d}/gpu-tests.tsv", TSV + "pass\t40.0\t60\tcase C\n")
    text(f"{d}/gpu-tests.txt", "== case C: pass\n")
    text(f"{d}/sanitizer-memcheck.txt", "== memcheck: the decode case\nERROR SUMMARY: 0 errors (second call)\n")
    text(f"{d}/cut.txt", "")
    text(f"{d}/skipped.txt", "")
    text(f"{d}/phase-times.tsv", "phase\tplanned_s\tcap_s\ttaken_s\ntests\t125\t125\t40\nresnet50\t50\t50\t30\n")


def expect(page, wanted, failures):
    for w in wanted:
        if w not in page:
            failures.append(f"missing: {w}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trainbench", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="check-results-page-")
    t = template(a.trainbench, tmp)
    c1, c2 = os.path.join(tmp, "gpu-1"), os.path.join(tmp, "gpu-2")
    first_call(t, c1)
    second_call(t, c2)
    run = subprocess.run([sys.executable, os.path.join(HERE, "results-page.py"), "--out-dir", c1, "--out-dir", c2],
                         capture_output=True, text=True)
    page = run.stdout
    failures = [] if run.returncode == 0 else [f"results-page.py exited {run.returncode}: {run.stderr[-2000:]}"]
    if "not an H200" in page:
        failures.append("an H200 run is said not to be one")
    # The device-share run on another GPU than the device run: not compared, and said; then one that
    # decoded on the host (no nvJPEG): no share line, and the goal takes the device run.
    page_of = lambda: subprocess.run([sys.executable, os.path.join(HERE, "results-page.py"), "--out-dir", c1,
                                      "--out-dir", c2], capture_output=True, text=True).stdout
    share_file = os.path.join(c2, "decode", "device-share.json")
    shared = json.load(open(share_file))
    shared["effective"]["device_name"] = "NVIDIA H100 80GB HBM3"
    json.dump(shared, open(share_file, "w"))
    apart = page_of()
    expect(apart, ["device-share ran on NVIDIA H100 80GB HBM3, device on NVIDIA H200: not compared.",
                   "decode images/s (bench-data): device / host: device 12000.0 / host 5000.0 = **2.40x**"], failures)
    shared["effective"].update(device_name="NVIDIA H200", decode="host")
    json.dump(shared, open(share_file, "w"))
    fallback = page_of()
    expect(fallback, ["decode images/s (bench-data): device / host: device 12000.0 / host 5000.0 = **2.40x**"],
           failures)
    if "all to the device" in fallback:
        failures.append("a device-share run that decoded on the host is compared as a share")
    # The same calls on another GPU: the MLPerf anchor is the H200's, and the page says so.
    for d in (c1, c2):
        for f in glob.glob(os.path.join(d, "resnet50", "*.json")):
            r = json.load(open(f))
            r["effective"]["device_name"] = "NVIDIA H100 80GB HBM3"
            json.dump(r, open(f, "w"))
    other = subprocess.run([sys.executable, os.path.join(HERE, "results-page.py"), "--out-dir", c1, "--out-dir", c2],
                           capture_output=True, text=True).stdout
    expect(other, ["This run's GPU is NVIDIA H100 80GB HBM3, not an H200: the anchor is the H200's"], failures)
    expect(page, [
        "# GPU run ", "NVIDIA H200",
        # The goals, each as its ratio.
        "compile rung / torch.compile (same profile): trainbench ladder/06-compile 18000.0 / reference 06-compile "
        "17000.0 = **1.06x** (goal at least 1.0x: met)",
        "best / PyTorch's best configuration: trainbench best/03-compile-fp16-device-preprocess-pad-stem 21000.0 / "
        "reference best/00-compile-fp16 17500.0 = **1.20x** (goal at least 1.25x: not met)",
        # The second call's finished 11 replaces the first call's partial one.
        "ResNet-50 recipe / MLPerf's 7,951 images/s on the H200: resnet50/11-compile-pad-stem 7300.0 / MLPerf 7951.0 "
        "= **0.92x**",
        "stem on 4 channels / on 3 (best): best/03-compile-fp16-device-preprocess-pad-stem 21000.0 / "
        "best/02-compile-fp16-device-preprocess 20500.0",
        "stem on 4 channels / on 3 (resnet50): resnet50/11-compile-pad-stem 7300.0 / resnet50/09-compile 7000.0",
        "convolution fusions / compiled step (resnet50): resnet50/12-compile-conv-fusion 7200.0 / resnet50/09-compile "
        "7000.0 = **1.03x**. Ran: batch norm + ReLU + convolution (cuDNN graphs, NHWC, fp16; 32 of 32 pairs).",
        "convolution fusions / compiled step (best): best/04-compile-fp16-device-preprocess-pad-stem-conv-fusion "
        "20800.0 / best/03-compile-fp16-device-preprocess-pad-stem 21000.0 = **0.99x**. Ran: batch norm + ReLU + "
        "convolution (cuDNN graphs, NHWC, fp16; 8 of 8 pairs).",
        # bf16 against its fp16 twin, not against the last fp16 rung.
        "best: 01-compile-bf16 against 00-compile-fp16",
        # A graphed rung's memory is in its pool: the reserved peak beside the allocated one.
        "| 00-cuda-graph | 16000.0 | 0.50 / 12.00 GiB |",
        # Kernel families and what the convolution fusions could buy.
        "## Where the step's device time goes (kernel families)",
        "- best/00-compile-fp16: norm_activation 30.0%",
        "- best/03-compile-fp16-device-preprocess-pad-stem: norm_activation 5.0%",
        # fusion-bench: per shape, a refusal's reason, the per-step total against the compiled rung's step.
        "## Convolution fusions measured (fusion-bench)",
        "| 64x56x56 -> 64 3x3 | 1 | 3 | 1.000 | 0.800 | 0.80x | 3.0e-03 |  |",
        "| 64x56x56 -> 256 1x1 | 1 | 1 | – | – | – | – | data gradient with dReLU: cuDNN check_support: no engine |",
        "Per step, 3 of 32 pairs measured: unfused 3.00 ms, fused 2.40 ms, saved 0.60 ms: 1.6% of "
        "resnet50/09-compile's step (36.6 ms).",
        "Failed after 1 shapes: CUDA out of memory",
        "Cut before its end: 3 pairs measured so far, unfused 3.00 ms, fused 2.40 ms per step.",
        # Both calls' decode modes: the host mode of the first, the device mode of the second.
        "| host | host | 5000.0 |", "| device | device | 12000.0 |", "950 (900) / 50 / 0 / 0",
        "| device-share | device | 14000.0 |", "600 (550) / 50 / 350 / 0",
        # The JPEG rung with the workers' share, against the same step on device-made input.
        "ResNet-50: JPEG / device-made input, same step: resnet50/10-compile-imagefolder (device_decode_share 0.65) "
        "6800.0 / resnet50/09-compile 7000.0 = **0.97x**",
        # The decode goal takes the faster device mode; the split with the workers against all to the device.
        "decode images/s (bench-data): device / host: device-share 14000.0 / host 5000.0 = **2.80x**",
        "decode images/s: device with 0.65 of each batch, the workers the rest / all to the device: device-share "
        "14000.0 / device 12000.0 = **1.17x**",
        # Every [gpu] case once, with its last result; the failure of the first call stays.
        "| fail | 3.0 | 30 | case A |", "| pass | 1.0 | 30 | case B |", "| pass | 40.0 | 60 | case C |",
        "[gpu] test fail: case A",
        "ERROR SUMMARY: 0 errors (first call)", "ERROR SUMMARY: 0 errors (second call)",
        # The phases the first call cut and the second finished are not called cut.
        "- stopped before the end (rungs marked partial hold the rounds they finished): none",
    ], failures)
    for unwanted in ["| not-run | 0 | 60 | case C |", "| device | device | 9000.0 |", "| host | host | 100.0 |",
                     "Traceback"]:
        if unwanted in page or unwanted in run.stderr:
            failures.append(f"unexpected: {unwanted}")
    if page.count("case C |") != 1:
        failures.append(f"case C listed {page.count('case C |')} times, not once")
    if failures:
        print(page)
        print("\n".join(failures), file=sys.stderr)
        print(f"the two calls' folders: {tmp}", file=sys.stderr)
        return 1
    shutil.rmtree(tmp)
    print(f"results-page.py: the two calls' page holds every check ({len(page.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
