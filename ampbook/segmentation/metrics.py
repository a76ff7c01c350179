"""Confusion-matrix metrics for semantic segmentation: per-class IoU, mIoU, pixel
accuracy.

The confusion matrix is accumulated on the tensors' device with one ``bincount`` per
batch (no per-pixel Python loop). The conventions follow cityscapesscripts'
``evaluation/evalPixelLevelSemanticLabeling.py`` (the official Cityscapes evaluation):

* pixels whose target is the ignore index (255) are left out entirely;
* IoU of class c = TP / (TP + FP + FN); a class with TP + FP + FN = 0 (absent from the
  targets and never predicted on a counted pixel) gets NaN;
* mIoU is the mean over the classes whose IoU is not NaN, so a class predicted but
  absent from the targets counts as 0, a class absent from both does not count;
* a prediction that is not one of the classes (e.g. 255 or an id that maps to ignore) on
  a counted pixel is a false negative of that pixel's class and a false positive of no
  class;
* pixel accuracy = correctly predicted counted pixels / counted pixels.
"""

from __future__ import annotations

import math

import torch

from ampbook.segmentation.cityscapes import IGNORE_INDEX, NUM_CLASSES


def count_values(
    index: torch.Tensor, n: int, sort_based: bool | None = None
) -> torch.Tensor:
    """How often each of 0..n-1 occurs in ``index`` (int64, on its device).

    ``torch.bincount`` does it in one pass, but on CUDA PyTorch counts it among the
    nondeterministic operations, which raise (or warn) under
    ``torch.use_deterministic_algorithms(True)``; then, or when ``sort_based`` is true,
    the count comes from ``torch.unique`` (a sort), which is deterministic everywhere.
    """
    if sort_based is None:
        sort_based = index.is_cuda and torch.are_deterministic_algorithms_enabled()
    if not sort_based:
        return torch.bincount(index, minlength=n)
    values, counts = torch.unique(index, return_counts=True)
    out = torch.zeros(n, dtype=torch.int64, device=index.device)
    out[values] = counts
    return out


class SegmentationMetrics:
    """Accumulates a confusion matrix over batches.

    ``update(pred, target)``: ``pred`` holds class indices (N x H x W, or H x W) or
    logits (N x C x H x W, arg-maxed over C); ``target`` class indices with
    ``ignore_index`` for pixels left out. ``compute()`` returns ``{"iou": [...], "miou":
    float, "pixel_accuracy": float}``. ``confusion[t, p]`` counts pixels of target class
    t predicted as class p (int64, C x C).
    """

    def __init__(
        self,
        num_classes: int = NUM_CLASSES,
        ignore_index: int = IGNORE_INDEX,
        device: torch.device | str | None = None,
    ):
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.device = torch.device(device) if device is not None else None
        self.reset()

    def reset(self) -> None:
        c = self.num_classes
        # Column c collects predictions that are not a class (counted as misses).
        self._matrix = torch.zeros(
            c,
            c + 1,
            dtype=torch.int64,
            device=self.device if self.device is not None else "cpu",
        )

    @property
    def confusion(self) -> torch.Tensor:
        """C x C int64: rows are target classes, columns predicted classes."""
        return self._matrix[:, : self.num_classes]

    @property
    def missed(self) -> torch.Tensor:
        """Per target class, pixels whose prediction was not a class index (e.g.
        255)."""
        return self._matrix[:, self.num_classes]

    @torch.no_grad()
    def update(self, pred: torch.Tensor, target: torch.Tensor) -> None:
        c = self.num_classes
        if pred.is_floating_point():
            if pred.dim() != target.dim() + 1 or pred.shape[-3] != c:
                raise ValueError(
                    f"logits must be N x {c} x H x W for targets N x H x W; got "
                    f"logits {tuple(pred.shape)} and targets {tuple(target.shape)}"
                )
            pred = pred.argmax(dim=-3)
        if pred.shape != target.shape:
            raise ValueError(
                f"prediction shape {tuple(pred.shape)} differs from target shape "
                f"{tuple(target.shape)}"
            )
        if self.device is None:  # adopt the first batch's device
            self.device = target.device
            self._matrix = self._matrix.to(self.device)
        pred = pred.to(self.device, torch.int64).reshape(-1)
        target = target.to(self.device, torch.int64).reshape(-1)
        valid = target != self.ignore_index
        pred, target = pred[valid], target[valid]
        bad = (target < 0) | (target >= c)
        if bool(bad.any()):
            found = torch.unique(target[bad]).tolist()[:10]
            raise ValueError(
                f"targets hold values {found} outside 0..{c - 1} that are not the "
                f"ignore index {self.ignore_index}"
            )
        pred = torch.where((pred >= 0) & (pred < c), pred, torch.full_like(pred, c))
        self._matrix += count_values(target * (c + 1) + pred, c * (c + 1)).reshape(
            c, c + 1
        )

    def compute(self) -> dict:
        m = self._matrix.double().cpu()
        c = self.num_classes
        tp = m[:, :c].diagonal()
        target_total = m.sum(dim=1)  # all counted pixels of each target class
        predicted_total = m[:, :c].sum(dim=0)  # counted pixels predicted as each class
        denom = target_total + predicted_total - tp
        iou = torch.where(
            denom > 0, tp / denom.clamp(min=1), torch.full_like(tp, float("nan"))
        )
        valid = ~torch.isnan(iou)
        miou = float(iou[valid].mean()) if bool(valid.any()) else float("nan")
        total = float(m.sum())
        accuracy = float(tp.sum()) / total if total > 0 else float("nan")
        return {
            "iou": [float(v) for v in iou],
            "miou": miou,
            "pixel_accuracy": accuracy,
        }

    def __repr__(self) -> str:
        r = self.compute()

        def fmt(v: float) -> str:
            return "nan" if math.isnan(v) else f"{v:.4f}"

        return (
            f"SegmentationMetrics(num_classes={self.num_classes}, "
            f"miou={fmt(r['miou'])}, "
            f"pixel_accuracy={fmt(r['pixel_accuracy'])}, "
            f"pixels={int(self._matrix.sum())})"
        )
