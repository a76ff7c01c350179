"""``python -m ampbook.bench loader``: can the data loader feed the GPU? Images per
second of ``Cityscapes`` (decode, resize, label mapping, normalisation) through a
DataLoader per worker count, beside the bare decode + resize of the same files in one
process. Without ``--root`` (or ``$CITYSCAPES_DATASET``) a synthetic set of 2048x1024
images resized to 1024x512, the RTX 3070 blog post's setting. A loader slower than the
step (``python -m booktools.bench_step``) bounds the epoch: AMP cannot shorten it.
"""

from __future__ import annotations

import gc
import io
import os
import statistics
import time

from ampbook.core import cli
from ampbook.core.words import plural

DEFAULT_SYNTHETIC_IMAGES = 24
# torch, torchvision and the data modules are imported where they are used: --help
# answers without them.


def _decode_resize(pairs, height: int, width: int) -> None:
    import torch
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as TF

    from ampbook.segmentation.cityscapes import read_image, read_label_ids

    for image_path, label_path in pairs:
        image = read_image(image_path)
        TF.resize(
            image,
            [height, width],
            interpolation=InterpolationMode.BILINEAR,
            antialias=True,
        )
        ids = torch.from_numpy(read_label_ids(label_path))[None]
        TF.resize(ids, [height, width], interpolation=InterpolationMode.NEAREST)


def _steady(times: list[float]) -> float:
    """The median of the passes after the first (of all when there is one)."""
    return statistics.median(times[1:] if len(times) > 1 else times)


def _loader_passes(dataset, workers: int, batch_size: int, passes: int) -> list[float]:
    import torch

    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    pass_times = []
    try:
        for _ in range(max(passes, 1)):
            start = time.perf_counter()
            seen = 0
            for images, labels in loader:
                seen += images.shape[0]
            pass_times.append(time.perf_counter() - start)
    finally:
        # the persistent workers stopped here, after a stop too: a command that
        # stops ends its process without the interpreter's cleanup
        del loader
        gc.collect()
    assert seen == len(dataset)
    return pass_times


def _synthesis_time(source: tuple[int, int]) -> float:
    """Seconds to draw and encode one synthetic pair at the source (width, height)."""
    from PIL import Image

    from ampbook.segmentation.synthetic import synthetic_pair

    start = time.perf_counter()
    img, ids = synthetic_pair(0, "train", 0, source[1], source[0])
    Image.fromarray(img).save(io.BytesIO(), format="PNG", compress_level=1)
    Image.fromarray(ids).save(io.BytesIO(), format="PNG", compress_level=1)
    return time.perf_counter() - start


def measure_loader(
    root: str | os.PathLike | None = None,
    split: str = "train",
    height: int = 512,
    width: int = 1024,
    workers=(0, 1, 2),
    batch_size: int = 4,
    max_images: int | None = None,
    passes: int = 3,
    threads: int | None = None,
) -> dict:
    """Images per second per worker count (the median pass after the first, which
    starts the workers), and of decode + resize alone."""
    import torch
    from PIL import Image

    from ampbook.segmentation.cityscapes import SYNTHETIC_MARKER, Cityscapes
    from ampbook.segmentation.synthetic import synthetic_root

    if threads is not None:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return measure_loader(
                root, split, height, width, workers, batch_size, max_images, passes
            )
        finally:
            torch.set_num_threads(before)
    if root is None and not os.environ.get("CITYSCAPES_DATASET"):
        root = synthetic_root(
            train=DEFAULT_SYNTHETIC_IMAGES, val=0, height=1024, width=2048
        )
    dataset = Cityscapes(
        root, split=split, height=height, width=width, flip=False, normalize=True
    )
    if max_images is not None:
        dataset.pairs = dataset.pairs[:max_images]
    n = len(dataset)
    source = Image.open(dataset.pairs[0][0]).size

    times = []
    for _ in range(max(passes, 1)):
        start = time.perf_counter()
        _decode_resize(dataset.pairs, height, width)
        times.append(time.perf_counter() - start)
    decode_rate = n / _steady(times)
    rows = []
    for w in workers:
        pass_times = _loader_passes(dataset, w, batch_size, passes)
        rate = n / _steady(pass_times)
        rows.append(
            {
                "workers": w,
                "images_per_s": rate,
                "first_pass_s": pass_times[0],
                "pass_s": pass_times,
                "ratio_to_decode_resize": rate / decode_rate,
            }
        )

    result = {
        "root": str(dataset.root),
        "synthetic": (dataset.root / SYNTHETIC_MARKER).exists(),
        "split": split,
        "images": n,
        "source_width": source[0],
        "source_height": source[1],
        "width": width,
        "height": height,
        "batch_size": batch_size,
        "passes": passes,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "decode_resize_images_per_s": decode_rate,
        "results": rows,
    }
    if result["synthetic"]:
        result["synthesize_s_per_pair"] = _synthesis_time(source)
    return result


def format_table(result: dict) -> str:
    lines = [
        f"{'synthetic ' if result['synthetic'] else ''}Cityscapes {result['split']} "
        f"from {result['root']}: "
        f"{result['images']} images {result['source_width']}x{result['source_height']} "
        "-> "
        f"{result['width']}x{result['height']}, batch {result['batch_size']}, "
        f"{result['cpu_count']} CPUs, {result['torch_threads']} torch threads",
        f"{'pipeline':<34} {'images/s':>9} {'vs decode+resize':>17} {'1st pass s':>11}",
        f"{'decode + resize (1 process)':<34} "
        f"{result['decode_resize_images_per_s']:>9.1f} {1.0:>16.2f}x {'':>11}",
    ]
    for row in result["results"]:
        name = f"DataLoader, {plural(row['workers'], 'worker')}"
        lines.append(
            f"{name:<34} {row['images_per_s']:>9.1f} "
            f"{row['ratio_to_decode_resize']:>16.2f}x "
            f"{row['first_pass_s']:>11.2f}"
        )
    if "synthesize_s_per_pair" in result:
        lines.append(
            f"(making one synthetic image + label pair of this size took "
            f"{result['synthesize_s_per_pair']:.2f} s)"
        )
    return "\n".join(lines)


def build_parser() -> cli.ArgumentParser:
    """The command's options (light: ``--help`` imports no torch)."""
    parser = cli.ArgumentParser(
        prog="python -m ampbook.bench loader",
        description="Images per second of the Cityscapes input pipeline (decode, "
        "resize, label mapping, normalisation) through a DataLoader per worker "
        "count, beside the bare decode + resize of the same files.",
        formatter_class=cli.HelpFormatter,
    )
    parser.add_argument(
        "--root",
        help="Cityscapes root (default: $CITYSCAPES_DATASET, else a synthetic "
        f"set of {DEFAULT_SYNTHETIC_IMAGES} full-size images)",
    )
    parser.add_argument("--split", default="train", help="the split to read")
    parser.add_argument(
        "--height", type=cli.positive_int, default=512, help="height resized to"
    )
    parser.add_argument(
        "--width", type=cli.positive_int, default=1024, help="width resized to"
    )
    parser.add_argument(
        "--workers",
        default="0,1,2",
        metavar="LIST",
        help="comma-separated DataLoader worker counts",
    )
    parser.add_argument(
        "--batch-size", type=cli.positive_int, default=4, help="images per batch"
    )
    parser.add_argument(
        "--max-images",
        type=cli.positive_int,
        help="read at most this many images (default: all of the split)",
    )
    parser.add_argument(
        "--passes",
        type=cli.positive_int,
        default=3,
        help="passes over the images per worker count (the first starts the workers)",
    )
    parser.add_argument(
        "--threads",
        type=cli.positive_int,
        help="torch intra-op threads of the main process (default: torch's choice)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the result to PATH")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a --json file that exists"
    )
    return parser


@cli.command("python -m ampbook.bench loader")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        workers = tuple(int(w) for w in args.workers.split(","))
        if any(w < 0 for w in workers):
            raise ValueError
    except ValueError:
        parser.error(
            "--workers must be comma-separated non-negative integers, got "
            f"{args.workers!r}"
        )
    if args.json:  # checked before measuring, written after
        cli.check_output_file(args.json, "--json", overwrite=args.overwrite)
    from ampbook.segmentation.cityscapes import resolve_root

    try:
        if args.root is not None:
            resolve_root(args.root)
        result = measure_loader(
            args.root, args.split, args.height, args.width, workers, args.batch_size,
            args.max_images, args.passes, args.threads,
        )  # fmt: skip
    except (FileNotFoundError, ValueError) as err:  # the data: an input
        cli.say(str(err))
        return 2
    print(format_table(result))
    if args.json:
        cli.save_result(args.json, result)
    return 0
