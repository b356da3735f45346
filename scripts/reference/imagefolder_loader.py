#!/usr/bin/env python3
"""torchvision's ImageNet input pipeline alone, the side trainbench's bench-data is compared with:
ImageFolder + DataLoader with the train transform, decoded either by PIL (torchvision's default
loader with v1 transforms) or by torchvision.io.decode_jpeg with transforms.v2.

Prints one JSON line: {"side", "workers", "batch", "windows": [samples/s ...], "loadavg": [...]}.
usage: imagefolder_loader.py --root DIR --side pil|decode_jpeg --workers N [--batch 64]
                             [--size 224] [--warmup 2] [--batches 10] [--windows 3]
"""
import argparse
import json
import os
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms as v1
from torchvision.io import ImageReadMode, decode_jpeg, read_file
from torchvision.transforms import v2

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def decode_loader(path):
    return decode_jpeg(read_file(path), mode=ImageReadMode.RGB)


def dataset(root, side, size):
    if side == "pil":
        t = v1.Compose([v1.RandomResizedCrop(size), v1.RandomHorizontalFlip(), v1.ToTensor(), v1.Normalize(MEAN, STD)])
        return torchvision.datasets.ImageFolder(root, transform=t)
    t = v2.Compose([
        v2.RandomResizedCrop(size, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ])
    return torchvision.datasets.ImageFolder(root, transform=t, loader=decode_loader)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--side", choices=["pil", "decode_jpeg"], required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--windows", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)  # the loader alone: the main process only receives batches
    ds = dataset(a.root, a.side, a.size)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True, num_workers=a.workers,
                    persistent_workers=a.workers > 0, prefetch_factor=2 if a.workers > 0 else None)
    it = iter(dl)

    def next_batch():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(dl)
            return next(it)

    for _ in range(a.warmup):
        next_batch()
    rates = []
    for _ in range(a.windows):
        start = time.perf_counter()
        samples = 0
        for _ in range(a.batches):
            images, _ = next_batch()
            samples += images.shape[0]
        rates.append(samples / (time.perf_counter() - start))
    print(json.dumps({"side": a.side, "workers": a.workers, "batch": a.batch, "windows": rates,
                      "loadavg": os.getloadavg(), "torchvision": torchvision.__version__}))


if __name__ == "__main__":
    main()
