"""Inference under autocast (chapter 8): ``predict``; ``check_inference`` compares its
probabilities and memory with the fp32 forward's."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from ampbook.chapters.ch8.tiny import rounding_tolerance, tiny_batch, tiny_model
from ampbook.core.precision import torch_name
from ampbook.measure.memory import AllocatedBytesMeter


def predict(model, images, device_type, dtype):
    """Shown on the page in chapter 8 (08_amp_patterns)."""
    model.eval()  # batch norm uses its running statistics
    with torch.inference_mode(), torch.amp.autocast(device_type, dtype=dtype):
        return model(images).softmax(dim=1)  # fp32 on CUDA; on a CPU, its input's dtype


@dataclass
class InferenceCheck:
    dtype: str
    out_dtype: str
    difference: float  # max |p_amp - p_fp32| of the class probabilities
    tolerance: float
    fp32_bytes: int  # peak bytes of tensors made during the fp32 forward
    amp_bytes: int

    @property
    def ok(self) -> bool:
        return self.difference <= self.tolerance and self.amp_bytes < self.fp32_bytes

    def verdict(self) -> str:
        return (
            f"{self.dtype}: probabilities ({self.out_dtype}) differ from fp32's by at "
            f"most {self.difference:.2e} (tolerance {self.tolerance:.1e}); peak "
            f"allocated {self.amp_bytes / 2**10:.0f} KiB against fp32's "
            f"{self.fp32_bytes / 2**10:.0f} KiB "
            f"({self.amp_bytes / self.fp32_bytes:.2f}x)."
        )


def check_inference(
    infer=predict,
    dtype: torch.dtype = torch.bfloat16,
    batch: int = 4,
    size: int = 32,
    channels: int = 16,
    device_type: str = "cpu",
    seed: int = 0,
) -> InferenceCheck:
    """``infer`` against the fp32 eval-mode forward; it gets the model in train mode, so
    one that does not call ``model.eval()`` fails."""
    model = tiny_model(seed, channels=channels, batch_norm=True)
    images, _ = tiny_batch(batch, size, seed)
    model.norm.running_mean.uniform_(-0.5, 0.5)  # statistics unlike one batch's
    model.norm.running_var.uniform_(0.5, 2.0)
    reference_model = copy.deepcopy(model).eval()
    with torch.inference_mode(), AllocatedBytesMeter() as m32:
        reference = reference_model(images).softmax(dim=1)
    assert model.training  # as a training loop leaves it: infer must call eval()
    with AllocatedBytesMeter() as mamp:
        probs = infer(model, images, device_type, dtype)
    return InferenceCheck(
        torch_name(dtype),
        torch_name(probs.dtype),
        (probs.float() - reference).abs().max().item(),
        rounding_tolerance(dtype),
        m32.peak_bytes,
        mamp.peak_bytes,
    )
