#!/usr/bin/env python3
"""Writes the image-folder test fixtures from torchvision itself (run with the project's venv):

  tests/fixtures/jpeg/*.jpg           small JPEGs: 4:2:0, 4:4:4, progressive, grayscale, CMYK
  tests/fixtures/torchvision_crops.json  for given crop boxes: torchvision.io.decode_jpeg (RGB), then
                                         v2.functional.resized_crop(..., antialias=True) [+ flip], or
                                         the eval Resize + CenterCrop; uint8 CHW values
  tests/fixtures/rrc_draws.json        10,000 RandomResizedCrop.get_params draws per image size
  tests/fixtures/cmyk_rgb.json         torchvision.io.decode_jpeg (RGB) of jpeg/cmyk_k.jpg (CMYK, K varying)

usage: $TRAINBENCH_PYTHON scripts/make-jpeg-fixture.py   (from the repository root)
"""
import io
import json
import math
import pathlib

import torch
import torchvision
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms import RandomResizedCrop
from torchvision.transforms.v2 import functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures"


def picture(h, w, seed):
    """Smooth shapes, an edge, a gradient and grain: enough structure to exercise the filters."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(h).view(-1, 1).float()
    x = torch.arange(w).view(1, -1).float()
    img = torch.zeros(3, h, w)
    for c in range(3):
        img[c] = 60 + 100 * (x / w) + 40 * torch.sin(y / (5 + 3 * c))
    for _ in range(6):
        cy, cx = torch.rand(2, generator=g) * torch.tensor([h, w])
        r = 4 + torch.rand(1, generator=g).item() * min(h, w) / 3
        col = torch.rand(3, generator=g) * 255
        inside = ((y - cy) ** 2 + (x - cx) ** 2) < r * r
        img[:, inside] = col.view(3, 1)
    img += torch.randn(3, h, w, generator=g) * 6
    return img.clamp(0, 255).round().to(torch.uint8)


def save(name, img, **kw):
    arr = img.permute(1, 2, 0).numpy()
    pil = Image.fromarray(arr)
    mode = kw.pop("mode", None)
    if mode:
        pil = pil.convert(mode)
    path = OUT / "jpeg" / name
    pil.save(path, "JPEG", **kw)
    return path


def cmyk_fixture():
    """A CMYK file whose black (K) varies, as PIL writes it (with an Adobe APP14 marker), and the RGB
    torchvision decodes from it, with and without the marker (the same: Adobe polarity is assumed)."""
    h, w = 24, 32
    y = torch.arange(h).view(-1, 1)
    x = torch.arange(w).view(1, -1)
    cmyk = torch.stack([(x * 8) % 256 + 0 * y, (y * 11) % 256 + 0 * x, ((x + y) * 5) % 256, (x * 3 + y * 7) % 256])
    path = OUT / "jpeg" / "cmyk_k.jpg"
    Image.fromarray(cmyk.permute(1, 2, 0).to(torch.uint8).numpy(), mode="CMYK").save(path, "JPEG", quality=95)
    data = path.read_bytes()
    at = data.index(b"\xff\xee")
    stripped = data[:at] + data[at + 2 + int.from_bytes(data[at + 2:at + 4], "big"):]
    rgb = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
    same = decode_jpeg(torch.frombuffer(bytearray(stripped), dtype=torch.uint8), mode=ImageReadMode.RGB)
    assert torch.equal(rgb, same), "torchvision reads CMYK without an Adobe marker differently"
    meta = f"torchvision {torchvision.__version__}: decode_jpeg(mode=RGB) of cmyk_k.jpg, HWC"
    (OUT / "cmyk_rgb.json").write_text(json.dumps({"generator": meta, "file": "cmyk_k.jpg", "height": h, "width": w,
                                                   "expected_hwc": rgb.permute(1, 2, 0).flatten().tolist()},
                                                  separators=(",", ":")))


def main():
    (OUT / "jpeg").mkdir(parents=True, exist_ok=True)
    files = {
        "color420.jpg": save("color420.jpg", picture(72, 96, 1), quality=90, subsampling=2),
        "color444.jpg": save("color444.jpg", picture(64, 80, 2), quality=90, subsampling=0),
        "progressive.jpg": save("progressive.jpg", picture(70, 90, 3), quality=90, progressive=True),
        "gray.jpg": save("gray.jpg", picture(60, 76, 4), quality=90, mode="L"),
        "cmyk.jpg": save("cmyk.jpg", picture(48, 64, 5), quality=90, mode="CMYK"),
    }
    # (file, top, left, height, width, size, flip); box None means the eval transform.
    boxes = [
        ("color420.jpg", 4, 6, 50, 70, 32, False),   # partial decode, downscale
        ("color420.jpg", 0, 0, 72, 96, 32, False),   # whole image: DCT scale 2 applies
        ("color420.jpg", 0, 0, 72, 96, 16, False),   # DCT scale 4 applies
        ("color420.jpg", 30, 41, 11, 13, 32, True),  # upsampling, flipped
        ("color420.jpg", 17, 9, 40, 33, 24, True),   # odd offsets, not on an iMCU boundary
        ("color444.jpg", 8, 8, 40, 60, 24, False),
        ("progressive.jpg", 10, 12, 45, 60, 24, True),
        ("gray.jpg", 5, 7, 48, 56, 24, False),
        ("cmyk.jpg", 3, 4, 40, 50, 24, False),
        ("color420.jpg", None, None, None, None, 32, False),  # eval: Resize(37) + CenterCrop(32)
        ("progressive.jpg", None, None, None, None, 24, False),
    ]
    cases = []
    for name, top, left, h, w, size, flip in boxes:
        data = torchvision.io.read_file(str(files[name]))
        img = decode_jpeg(data, mode=ImageReadMode.RGB)
        if top is None:
            resize = round(size * 256 / 224)
            out = F.center_crop(F.resize(img, resize, antialias=True), size)
        else:
            out = F.resized_crop(img, top, left, h, w, [size, size], antialias=True)
        if flip:
            out = F.horizontal_flip(out)
        cases.append({"file": name, "box": None if top is None else [top, left, h, w], "size": size, "flip": flip,
                      "expected_chw": out.flatten().tolist()})
    meta = f"torchvision {torchvision.__version__}: decode_jpeg(mode=RGB), v2.functional.resized_crop(antialias=True)"
    (OUT / "torchvision_crops.json").write_text(json.dumps({"generator": meta, "cases": cases}, separators=(",", ":")))

    torch.manual_seed(0)
    draws = []
    for h, w in [(375, 500), (100, 600)]:
        dummy = torch.empty(3, h, w)
        hs, ws = [], []
        for _ in range(10000):
            _, _, ch, cw = RandomResizedCrop.get_params(dummy, scale=[0.08, 1.0], ratio=[3 / 4, 4 / 3])
            hs.append(ch)
            ws.append(cw)
        draws.append({"height": h, "width": w, "crop_h": hs, "crop_w": ws})
    meta = f"torchvision {torchvision.__version__}: RandomResizedCrop.get_params, scale (0.08, 1), ratio (3/4, 4/3), seed 0"
    (OUT / "rrc_draws.json").write_text(json.dumps({"generator": meta, "images": draws}, separators=(",", ":")))
    cmyk_fixture()
    print("wrote", ", ".join(sorted(files)), "cmyk_k.jpg, torchvision_crops.json, rrc_draws.json and cmyk_rgb.json under",
          OUT)


if __name__ == "__main__":
    main()
