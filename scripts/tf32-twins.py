#!/usr/bin/env python3
"""How far TF32 convolutions move two otherwise identical trainings apart, on the CPU.

The [gpu] test "graphed step matches an eager twin after 5 steps" failed on the first H200 run
(2026-12-04) with LibTorch's defaults, where cuDNN convolutions may run in TF32. This replays its
setup with torchvision's ResNet-18 (the same initialisation as trainbench's): eval mode, batches
of 8 at 32 px, SGD lr 0.01 momentum 0.9, 6 steps; once in float32, once with every convolution's
operands and the gradients through it rounded to TF32's 10-bit mantissa, and once more in float32
as a control.

  $TRAINBENCH_PYTHON scripts/tf32-twins.py
"""
import torch
import torch.nn.functional as F
import torchvision

torch.set_num_threads(1)


def tf32(x):
    i = x.contiguous().view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)  # round to nearest, 10 mantissa bits


class Round(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return tf32(x)

    @staticmethod
    def backward(ctx, g):
        return tf32(g)


def tf32_conv(conv):
    return lambda x: F.conv2d(Round.apply(x), Round.apply(conv.weight), None, conv.stride, conv.padding)


def train(emulate_tf32):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    if emulate_tf32:
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.forward = tf32_conv(m)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for i in range(6):
        torch.manual_seed(1000 + i)
        x, y = torch.randn(8, 3, 32, 32), torch.randint(10, (8,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item(), [p.detach().clone() for p in model.parameters()]


def largest(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


fp32_loss, fp32 = train(False)
tf32_loss, tf32_params = train(True)
_, again = train(False)
off = sum(not torch.allclose(x, y, 1e-4, 1e-4) for x, y in zip(fp32, tf32_params))
print(f"loss float32 {fp32_loss:.6f}, TF32 convolutions {tf32_loss:.6f}: "
      f"relative difference {abs(fp32_loss - tf32_loss) / fp32_loss:.2e}")
print(f"parameters: largest difference {largest(fp32, tf32_params):.2e}, "
      f"{off} of {len(fp32)} tensors off by more than 1e-4")
print(f"control, float32 twice: largest difference {largest(fp32, again):.2e}")
