"""``python -m ampbook.evaluate PRED_DIR --data-root ROOT``: Cityscapes predictions
scored as cityscapesscripts' ``evalPixelLevelSemanticLabeling.py`` does."""

from __future__ import annotations

import json
import sys

from ampbook.core import cli


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
    args = build_parser().parse_args(argv)
    from ampbook.core.devices import pick_device
    from ampbook.segmentation.metrics import evaluate_folder

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


if __name__ == "__main__":
    sys.exit(main())
