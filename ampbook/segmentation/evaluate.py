"""Evaluate a folder of Cityscapes predictions the way the official evaluation does.

    python -m ampbook.evaluate PRED_DIR --data-root ROOT [--split val]

Predictions are PNGs of Cityscapes labelIds (not trainIds), one per ground-truth image,
at the ground truth's size. As in cityscapesscripts'
``evalPixelLevelSemanticLabeling.py``, the prediction of
``gtFine/SPLIT/CITY/CITY_SEQ_FRAME_gtFine_labelIds.png`` is the one file under PRED_DIR
(searched recursively) whose name matches ``CITY_SEQ_FRAME*.png``, e.g.
``CITY_SEQ_FRAME_leftImg8bit.png`` or ``CITY_SEQ_FRAME_pred.png``. The metrics are those
of ``ampbook.segmentation.metrics`` (IoU per class, its mean over the classes that
occur, pixel accuracy) and are printed as JSON.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ampbook.core import cli

if TYPE_CHECKING:  # imported where they are used: --help answers without them
    import numpy as np
    import torch

GT_SUFFIX = "_gtFine_labelIds.png"


def ground_truth_files(
    root: str | os.PathLike | None, split: str = "val"
) -> list[Path]:
    """The split's ``*_gtFine_labelIds.png`` files, sorted."""
    from ampbook.segmentation.cityscapes import resolve_root

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
    if pred_dir.exists() and not pred_dir.is_dir():
        raise FileNotFoundError(
            f"prediction folder {pred_dir} is a file; give the folder of "
            "labelId PNG predictions"
        )
    if not pred_dir.is_dir():
        raise FileNotFoundError(f"prediction folder {pred_dir} does not exist")
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
    import torch

    from ampbook.segmentation.cityscapes import (
        CLASS_NAMES,
        IGNORE_INDEX,
        LABEL_TO_TRAIN,
        NUM_CLASSES,
        DataError,
        read_label_ids,
    )
    from ampbook.segmentation.metrics import SegmentationMetrics

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
                "ground "
                f"truth {gt_file} is {gt.shape[1]}x{gt.shape[0]} (W x H)"
            )
        # Predicted ids that map to ignore become 255: a miss of the ground truth's
        # class.
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
    """Write an H x W array of trainIds (0..18) as a labelId PNG the evaluation
    reads."""
    import numpy as np
    import torch
    from PIL import Image

    from ampbook.segmentation.cityscapes import NUM_CLASSES, TRAIN_TO_LABEL

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
    """Write a batch's predictions: each image's logits (``N x C x h x w``) upsampled
    bilinearly to its label file's size, the arg-max written as a labelId PNG at
    ``prediction_path(folder, image)``. ``pairs``: the batch's (image, label) paths."""
    import torch
    from PIL import Image

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


def build_parser() -> cli.ArgumentParser:
    """The command's options (light: ``--help`` imports no torch)."""
    parser = cli.ArgumentParser(
        prog="python -m ampbook.evaluate",
        description="Evaluate a folder of Cityscapes predictions the way the "
        "official evaluation does: labelId PNGs, one per ground-truth image at its "
        "size, found by name (CITY_SEQ_FRAME*.png). Prints IoU per class, their "
        "mean and the pixel accuracy as JSON.",
        formatter_class=cli.HelpFormatter,
    )
    parser.add_argument(
        "pred_dir",
        metavar="PRED_DIR",
        help="folder of labelId PNG predictions (searched recursively)",
    )
    parser.add_argument(
        "--data-root",
        default=None,
        metavar="ROOT",
        help="Cityscapes root (default: $CITYSCAPES_DATASET)",
    )
    parser.add_argument(
        "--split", default="val", help="the split whose ground truth is compared"
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where the confusion matrix is accumulated (cpu, cuda or auto)",
    )
    return parser


@cli.command("python -m ampbook.evaluate")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ampbook.core.devices import pick_device

    try:
        device = pick_device(args.device)
    except (RuntimeError, ValueError) as err:  # no CUDA, or not a device name
        cli.say(f"--device {args.device}: {err}")
        return 2
    try:
        result = evaluate_folder(
            args.pred_dir, args.data_root, args.split, device=device
        )
    except (FileNotFoundError, ValueError) as err:  # the inputs (DataError too)
        cli.say(str(err))
        return 2
    print(json.dumps(result, indent=1))
    return 0
