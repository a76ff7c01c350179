"""``python -m ampbook.data``: write a synthetic Cityscapes, or count a root's pairs.
The parser imports no torch, so ``--help`` and a bad option answer at once."""

from __future__ import annotations

import sys

from ampbook.core import cli


def build_parser() -> cli.ArgumentParser:
    """``python -m ampbook.data``'s parser: ``synthesize`` and ``info``."""
    parser = cli.ArgumentParser(
        prog="python -m ampbook.data",
        description="Cityscapes data tools: write a synthetic Cityscapes in the "
        "official layout, or count the image/label pairs of a Cityscapes root.",
        epilog="python -m ampbook.data COMMAND --help lists a command's options.",
        formatter_class=cli.HelpFormatter,
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="one of:"
    )
    syn = sub.add_parser(
        "synthesize",
        help="write a synthetic Cityscapes in the official layout",
        description="Write a synthetic Cityscapes (images and labels painted from a "
        "seed) in the official folder layout, for running the book without the "
        "real data set.",
        formatter_class=cli.HelpFormatter,
    )
    syn.add_argument("--root", required=True, help="folder to write into (required)")
    for split, name in (("train", "training"), ("val", "validation")):
        syn.add_argument(
            f"--{split}",
            type=cli.nonnegative_int,
            required=True,
            help=f"number of {name} images (required)",
        )
    syn.add_argument(
        "--seed", type=cli.seed, default=0, help="the seed the images are drawn from"
    )
    for side, pixels in (("height", 1024), ("width", 2048)):
        syn.add_argument(
            f"--{side}",
            type=cli.positive_int,
            default=pixels,
            help=f"image {side} in pixels (the default is Cityscapes' own, {pixels})",
        )
    info = sub.add_parser(
        "info",
        help="count the image/label pairs of a Cityscapes root",
        description="Count the image/label pairs of each split of a Cityscapes root.",
        formatter_class=cli.HelpFormatter,
    )
    info.add_argument("--root", help="dataset root (default: $CITYSCAPES_DATASET)")
    return parser


@cli.command("python -m ampbook.data")
def main(argv: list[str] | None = None) -> int:
    """Write a synthetic Cityscapes, or count a root's image/label pairs per split."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "synthesize":
            from ampbook.segmentation.synthetic import synthesize_cli

            return synthesize_cli(args)
        from ampbook.segmentation.cityscapes import SPLITS, list_pairs, resolve_root

        root = resolve_root(args.root)
        for split in SPLITS:
            if (root / "leftImg8bit" / split).is_dir():
                print(f"{split}: {len(list_pairs(root, split))} image/label pairs")
    except (FileNotFoundError, FileExistsError, ValueError) as err:
        cli.say(str(err))  # the settings, or the data's folder
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
