"""Question 18 of chapter 9: fp8 slower than bf16 on small models. A prediction (fp8
needs an Ada, Hopper or later GPU): a linear layer's training step, three matrix
products, on chapter 2's roofline of a GPU's ceilings (each kernel the longer of its
compute and memory time, at least one launch). fp8 with dynamic tensor-wise scaling,
as torchao's float8 training does, adds two operand scalings per product: an amax
pass (read 16-bit) and a cast (read 16-bit, write fp8), each a kernel."""

from __future__ import annotations

from dataclasses import dataclass

from ampbook.core.devices import Device

LAUNCH_S = 4e-6  # assumed: one kernel's launch latency on a GPU, in seconds


def fp8_gpu_key(name: str, value) -> str:
    """The chapter's GPU parameter for the fp8 prediction: the table's key of a GPU
    with fp8 tensor cores, else a ``ParameterError`` naming it and those with them."""
    from ampbook.core import params
    from ampbook.core.devices import load_devices
    from ampbook.core.words import and_list

    devices, key = load_devices(), params.gpu(name, value)
    if devices[key].fp8_tflops is None:
        with_fp8 = and_list(d.short_name for d in devices.values() if d.fp8_tflops)
        params.fail(
            name, value, f"the {devices[key].short_name} has no fp8 tensor cores; the "
            f"table's GPUs with them: {with_fp8}"
        )  # fmt: skip
    return key


@dataclass
class Fp8Row:
    width: int  # the layer's in and out features
    tokens: int  # rows of the activation matrix
    bf16_s: float
    fp8_s: float

    @property
    def speedup(self) -> float:
        return self.bf16_s / self.fp8_s


def _kernel(flops: float, nbytes: float, peak_tflops: float, gbs: float) -> float:
    return max(flops / (peak_tflops * 1e12), nbytes / (gbs * 1e9), LAUNCH_S)


def predict_linear(device: Device, width: int, tokens: int) -> Fp8Row:
    """Predicted seconds of one training step of a ``width x width`` linear layer on
    ``tokens`` rows, in bf16 and in fp8 with dynamic scaling, on ``device``.
    Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""
    bw = device.mem_bandwidth_gbs
    flops = 2.0 * tokens * width * width
    # the three products' operands (m x k, k x n) and outputs, as element counts
    shapes = [
        (tokens * width, width * width, tokens * width),  # y = x W^T
        (tokens * width, width * width, tokens * width),  # dx = dy W
        (tokens * width, tokens * width, width * width),  # dW = dy^T x
    ]
    bf16 = sum(
        _kernel(flops, 2 * (a + b + c), device.bf16_tflops, bw) for a, b, c in shapes
    )
    fp8 = 0.0
    for a, b, c in shapes:
        fp8 += _kernel(flops, 1 * (a + b) + 2 * c, device.fp8_tflops, bw)
        for n in (a, b):  # amax (read 2 bytes), then cast (read 2, write 1)
            fp8 += _kernel(n, 2 * n, device.fp32_tflops, bw)
            fp8 += _kernel(n, 3 * n, device.fp32_tflops, bw)
    return Fp8Row(width, tokens, bf16, fp8)


def crossover(device: Device, tokens: int, widths=tuple(2**k for k in range(6, 16))):
    """The smallest width at which fp8 is predicted faster than bf16 (None: none)."""
    return next(
        (w for w in widths if predict_linear(device, w, tokens).speedup > 1), None
    )
