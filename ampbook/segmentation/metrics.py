"""Confusion-matrix metrics for semantic segmentation (per-class IoU, mIoU, pixel
accuracy), accumulated on the tensors' device with one ``bincount`` per batch. The
conventions follow cityscapesscripts' ``evaluation/evalPixelLevelSemanticLabeling.py``
(the official Cityscapes evaluation):

* pixels whose target is the ignore index (255) are left out entirely;
* IoU of class c = TP / (TP + FP + FN); a class with TP + FP + FN = 0 (absent from the
  targets and never predicted on a counted pixel) gets NaN;
* mIoU is the mean over the classes whose IoU is not NaN, so a class predicted but
  absent from the targets counts as 0, a class absent from both does not count;
* a prediction that is not one of the classes (e.g. 255 or an id that maps to ignore) on
  a counted pixel is a false negative of that pixel's class and a false positive of no
  class;
* pixel accuracy = correctly predicted counted pixels / counted pixels.

``evaluate_folder`` scores a folder of prediction PNGs against the ground truth as
``python -m ampbook.evaluate`` does; ``save_predictions`` writes them.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ampbook.segmentation.cityscapes import (
    CLASS_NAMES,
    IGNORE_INDEX,
    LABEL_TO_TRAIN,
    NUM_CLASSES,
    TRAIN_TO_LABEL,
    DataError,
    read_label_ids,
    resolve_root,
)


def count_values(
    index: torch.Tensor, n: int, sort_based: bool | None = None
) -> torch.Tensor:
    """How often each of 0..n-1 occurs in ``index``. ``torch.bincount`` is
    nondeterministic on CUDA (it raises under ``torch.use_deterministic_algorithms``);
    then, or with ``sort_based``, ``torch.unique`` (a sort) counts."""
    if sort_based is None:
        sort_based = index.is_cuda and torch.are_deterministic_algorithms_enabled()
    if not sort_based:
        return torch.bincount(index, minlength=n)
    values, counts = torch.unique(index, return_counts=True)
    out = torch.zeros(n, dtype=torch.int64, device=index.device)
    out[values] = counts
    return out


class SegmentationMetrics:
    """A confusion matrix accumulated over batches: ``update(pred, target)`` takes
    class indices or logits (N x C x H x W, arg-maxed over C); ``compute()`` returns
    ``{"iou": [...], "miou": float, "pixel_accuracy": float}``."""

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
        c, device = self.num_classes, self.device or "cpu"
        # Column c collects predictions that are not a class (counted as misses).
        self._matrix = torch.zeros(c, c + 1, dtype=torch.int64, device=device)

    @property
    def confusion(self) -> torch.Tensor:
        """C x C int64: rows are target classes, columns predicted classes."""
        return self._matrix[:, : self.num_classes]

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
        counts = count_values(target * (c + 1) + pred, c * (c + 1))
        self._matrix += counts.reshape(c, c + 1)

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
        return dict(iou=[float(v) for v in iou], miou=miou, pixel_accuracy=accuracy)


GT_SUFFIX = "_gtFine_labelIds.png"


def ground_truth_files(root: str | os.PathLike | None, split: str) -> list[Path]:
    """The split's ``*_gtFine_labelIds.png`` files, sorted."""
    root = resolve_root(root)
    gt_dir = root / "gtFine" / split
    if not gt_dir.is_dir():
        present = sorted(d.name for d in (root / "gtFine").iterdir() if d.is_dir())
        what = "is missing" if split in ("train", "val", "test") else "is unknown"
        raise ValueError(
            f"split {split!r} {what}: {root / 'gtFine'} holds "
            f"{', '.join(present) or 'none'}"
        )
    files = sorted(gt_dir.glob(f"*/*{GT_SUFFIX}"))
    if not files:
        raise FileNotFoundError(f"no ground truth files *{GT_SUFFIX} in {gt_dir}/CITY/")
    return files


def _prediction_index(pred_dir: Path) -> list[Path]:
    if not pred_dir.is_dir():
        what = "is a file; give the folder of labelId PNG predictions"
        what = what if pred_dir.exists() else "does not exist"
        raise FileNotFoundError(f"prediction folder {pred_dir} {what}")
    return sorted(
        Path(r) / f
        for r, _, files in os.walk(pred_dir)
        for f in files
        if f.endswith(".png")
    )


def find_prediction(gt_file: Path, predictions: list[Path]) -> Path:
    """The one prediction named ``CITY_SEQ_FRAME*.png`` for a ground-truth file."""
    prefix = gt_file.name[: -len(GT_SUFFIX)]
    if len(prefix.split("_")) != 3:
        raise ValueError(
            f"ground truth {gt_file} is not named CITY_SEQ_FRAME{GT_SUFFIX}"
        )
    found = [p for p in predictions if p.name.startswith(prefix)]
    if not found:
        raise FileNotFoundError(
            f"no prediction for ground truth {gt_file}: expected one file "
            f"named {prefix}*.png in the prediction folder"
        )
    if len(found) > 1:
        raise ValueError(
            f"several predictions for ground truth {gt_file}: "
            + ", ".join(str(p) for p in found)
        )
    return found[0]


def evaluate_folder(
    pred_dir: str | os.PathLike,
    root: str | os.PathLike | None = None,
    split: str = "val",
    device: str | torch.device | None = None,
) -> dict:
    """Metrics of the labelId predictions in ``pred_dir`` against the split's ground
    truth."""
    pred_dir = Path(pred_dir)
    gts = ground_truth_files(root, split)
    predictions = _prediction_index(pred_dir)
    metrics = SegmentationMetrics(NUM_CLASSES, IGNORE_INDEX, device=device)
    for gt_file in gts:
        pred_file = find_prediction(gt_file, predictions)
        gt = read_label_ids(gt_file)
        pred = read_label_ids(pred_file)
        if pred.shape != gt.shape:
            raise DataError(
                f"prediction {pred_file} is {pred.shape[1]}x{pred.shape[0]} but its "
                f"ground truth {gt_file} is {gt.shape[1]}x{gt.shape[0]} (W x H)"
            )
        # Predicted ids that map to ignore (255) count as a miss of the truth's class
        metrics.update(
            torch.from_numpy(LABEL_TO_TRAIN[pred]), torch.from_numpy(LABEL_TO_TRAIN[gt])
        )
    r = metrics.compute()

    def clean(v: float) -> float | None:
        return None if math.isnan(v) else v

    return {
        "miou": clean(r["miou"]),
        "pixel_accuracy": clean(r["pixel_accuracy"]),
        "iou": {name: clean(v) for name, v in zip(CLASS_NAMES, r["iou"])},
        "images": len(gts),
        "split": split,
        "predictions": str(pred_dir),
    }


def save_prediction(
    train_ids: np.ndarray | torch.Tensor, path: str | os.PathLike
) -> Path:
    """Write an H x W array of trainIds as a labelId PNG the evaluation reads."""
    if isinstance(train_ids, torch.Tensor):
        train_ids = train_ids.detach().cpu().numpy()
    train_ids = np.asarray(train_ids)
    if train_ids.ndim != 2 or train_ids.min() < 0 or train_ids.max() >= NUM_CLASSES:
        raise ValueError(f"expected an H x W array of trainIds 0..{NUM_CLASSES - 1}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(TRAIN_TO_LABEL[train_ids]).save(path)
    return path


def prediction_path(folder: str | os.PathLike, image_path: str | os.PathLike) -> Path:
    """Where the prediction of a Cityscapes image goes:
    ``FOLDER/CITY/CITY_SEQ_FRAME_pred.png`` (``find_prediction`` finds it there)."""
    image_path = Path(image_path)
    stem = image_path.name.removesuffix("_leftImg8bit.png")
    return Path(folder) / image_path.parent.name / f"{stem}_pred.png"


def save_predictions(
    logits: torch.Tensor, pairs: list[tuple[Path, Path]], folder: str | os.PathLike
) -> list[Path]:
    """Write a batch's predictions: each image's logits upsampled bilinearly to its
    label file's size (``pairs``: the batch's paths), the arg-max as a labelId PNG."""
    written = []
    for one, (image_path, label_path) in zip(logits, pairs):
        with Image.open(label_path) as gt:
            w, h = gt.size  # the header only: no decoding
        full = torch.nn.functional.interpolate(
            one[None].float(), size=(h, w), mode="bilinear", align_corners=False
        )
        path = prediction_path(folder, image_path)
        written.append(save_prediction(full[0].argmax(0), path))
    return written
