"""Cityscapes for semantic segmentation, read from the official layout::

    ROOT/leftImg8bit/{train,val,test}/CITY/CITY_SEQ_FRAME_leftImg8bit.png
    ROOT/gtFine/{train,val,test}/CITY/CITY_SEQ_FRAME_gtFine_labelIds.png

with labelIds mapped to the 19 training ids (255 = ignore) by the label table of
``cityscapesscripts.helpers.labels`` (M. Cordts et al., "The Cityscapes Dataset for
Semantic Urban Scene Understanding", CVPR 2016;
https://github.com/mcordts/cityscapesScripts). The root is an argument or
``CITYSCAPES_DATASET`` (as cityscapesscripts reads it). torchvision's Cityscapes
neither maps labelIds to trainIds nor checks the files, so the pairs are listed here
(to name an unpaired or broken file); torchvision decodes (libpng) and resizes image
and label together (``tv_tensors.Mask`` makes the label's resize nearest-neighbour).
"""

from __future__ import annotations

import os
import re
import stat
import warnings
import zlib
from pathlib import Path

import numpy as np
import torch
from cityscapesscripts.helpers.labels import labels as _CS_LABELS
from PIL import Image
from torch.utils.data import Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2

from ampbook.core import cli

try:
    from torchvision.io import ImageReadMode, decode_png
except ImportError:  # a torchvision without image codecs: Pillow decodes
    ImageReadMode = decode_png = None

NUM_CLASSES = 19
IGNORE_INDEX = 255
SPLITS = ("train", "val", "test")
IMAGE_SUFFIX, LABEL_SUFFIX = "_leftImg8bit.png", "_gtFine_labelIds.png"
# A synthetic set's marker, written last; and the one of a set being written (or
# stopped), written first: a root holding it is never read as data.
SYNTHETIC_MARKER = "SYNTHETIC.json"
SYNTHETIC_PARTIAL = "SYNTHETIC.partial"

# ImageNet statistics (the usual normalisation for convnets, as torchvision's models).
_MEAN_255 = torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1) * 255
_INV_STD_255 = 1.0 / (torch.tensor((0.229, 0.224, 0.225)).view(3, 1, 1) * 255)

# The table gives each trainId 0..18 one label; every other labelId maps to ignore.
_TRAINED = [next(l for l in _CS_LABELS if l.trainId == t) for t in range(NUM_CLASSES)]
CLASS_NAMES: tuple[str, ...] = tuple(lab.name for lab in _TRAINED)
TRAIN_TO_LABEL = np.array([lab.id for lab in _TRAINED], dtype=np.uint8)
LABEL_TO_TRAIN = np.full(256, IGNORE_INDEX, dtype=np.uint8)
LABEL_TO_TRAIN[TRAIN_TO_LABEL] = np.arange(NUM_CLASSES)
# The labelIds the table knows ('license plate', id -1, cannot occur in a uint8 image)
KNOWN_LABEL_IDS = np.isin(np.arange(256), [lab.id for lab in _CS_LABELS])

GET_CITYSCAPES = (
    "To get Cityscapes: register at https://www.cityscapes-dataset.com, download "
    "leftImg8bit_trainvaltest.zip and gtFine_trainvaltest.zip, unzip both into one "
    "folder and set CITYSCAPES_DATASET to it (or pass it as the root). Without it, "
    "use the synthetic stand-in: `python -m ampbook.data synthesize --root DIR "
    "--train 100 --val 20` and pass DIR, or call "
    "ampbook.segmentation.synthetic.synthetic_root(train, val, height, width) in "
    "Python."
)


class DataError(ValueError):
    """A dataset file that cannot be used (corrupt, wrong size, unknown ids)."""


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The Cityscapes root: ``root`` if given, else ``$CITYSCAPES_DATASET``; a folder
    without ``leftImg8bit`` and ``gtFine`` is a ``FileNotFoundError`` saying what is
    missing and how to get Cityscapes or the synthetic set."""
    origin = "root"
    if root is None or str(root) == "":
        env = os.environ.get("CITYSCAPES_DATASET")
        if not env:
            raise FileNotFoundError(
                "No Cityscapes root given and CITYSCAPES_DATASET is not set. "
                + GET_CITYSCAPES
            )
        root, origin = env, "CITYSCAPES_DATASET"
    path = Path(root).expanduser()
    if path.exists() and not path.is_dir():
        raise FileNotFoundError(
            f"Cityscapes root {str(path)!r} (from {origin}) is a file, not "
            "a folder; give the folder holding leftImg8bit/ and gtFine/"
        )
    if not path.is_dir():
        raise FileNotFoundError(
            f"Cityscapes root {str(path)!r} (from {origin}) does not exist. "
            + GET_CITYSCAPES
        )
    if (path / SYNTHETIC_PARTIAL).exists():
        raise FileNotFoundError(
            f"{str(path)!r} (from {origin}) holds a synthetic set whose writing was "
            "stopped before it finished; write it again: python -m ampbook.data "
            f"synthesize --root {path} --train N --val N"
        )
    missing = [d for d in ("leftImg8bit", "gtFine") if not (path / d).is_dir()]
    if missing:
        what = f"has no {' and no '.join(missing)} folder"
        what = what if any(path.iterdir()) else "is empty"
        raise FileNotFoundError(
            f"Cityscapes root {str(path)!r} (from {origin}) {what}; expected "
            f"leftImg8bit/ and gtFine/ in it. " + GET_CITYSCAPES
        )
    return path


def list_pairs(root: str | os.PathLike | None, split: str) -> list[tuple[Path, Path]]:
    """(image, labelIds) file pairs of a split, sorted; errors name unpaired files."""
    root = resolve_root(root)
    present = sorted(d.name for d in (root / "leftImg8bit").iterdir() if d.is_dir())
    if split not in SPLITS:
        raise ValueError(
            f"unknown split {split!r}: Cityscapes splits are {', '.join(SPLITS)}; "
            f"{root / 'leftImg8bit'} holds {', '.join(present) or 'none'}"
        )
    if split not in present:
        raise FileNotFoundError(
            f"split {split!r} is missing: {root / 'leftImg8bit'} holds "
            f"{', '.join(present) or 'no split'}, and no {split}/ folder. "
            "Unpack the whole leftImg8bit_trainvaltest.zip and "
            "gtFine_trainvaltest.zip there"
        )
    img_dir, gt_dir = root / "leftImg8bit" / split, root / "gtFine" / split
    if not gt_dir.is_dir():
        raise FileNotFoundError(
            f"split {split!r} has images in {img_dir} but no label folder {gt_dir}"
        )
    images, targets = (
        {
            f"{p.parent.name}/{p.name.removesuffix(suffix)}": p
            for p in d.glob("*/*" + suffix)
        }
        for d, suffix in ((img_dir, IMAGE_SUFFIX), (gt_dir, LABEL_SUFFIX))
    )
    if not images and not targets:
        raise FileNotFoundError(
            f"split {split!r} of {root} holds no *_leftImg8bit.png images "
            f"(looked in {img_dir}/CITY/). " + GET_CITYSCAPES
        )
    for have, other, what, folder, suffix in (
        (images, targets, "image {} has no label file", gt_dir, LABEL_SUFFIX),
        (targets, images, "label file {} has no image", img_dir, IMAGE_SUFFIX),
    ):
        for key in sorted(set(have) - set(other)):
            raise FileNotFoundError(
                f"{what.format(have[key])}: expected {folder / (key + suffix)}"
            )
    return [(images[k], targets[k]) for k in sorted(images)]


def _regular(path: Path) -> None:
    """Refuse to read a FIFO, a device or a socket (the read would block or never
    end): ``OSError``, which the readers turn into ``DataError``."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise OSError(f"not a regular file ({cli.mode_kind(mode)})")


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_damage(raw: bytes | memoryview) -> str | None:
    """What is wrong with a PNG file's bytes (no signature, a chunk cut short or failing
    its CRC), or None. torchvision's libpng decoder crashes the process (SIGSEGV) on a
    damaged stream instead of raising, so every file is checked before it is decoded:
    ``zlib.crc32`` over the chunks, a few percent of the decoding time."""
    mv = memoryview(raw)
    if bytes(mv[:8]) != _PNG_SIGNATURE:
        return "not a PNG file (no PNG signature)"
    pos, end = 8, len(mv)
    while pos < end:
        if pos + 12 > end:
            return "the file is cut short"
        kind = bytes(mv[pos + 4 : pos + 8])
        stop = pos + 8 + int.from_bytes(mv[pos : pos + 4], "big")
        if stop + 4 > end:
            return f"the file is cut short inside chunk {kind!r}"
        if zlib.crc32(mv[pos + 4 : stop]) != int.from_bytes(mv[stop : stop + 4], "big"):
            name = kind.decode("latin-1")
            return f"chunk {name} at byte {pos} fails its CRC (the file is damaged)"
        if kind == b"IEND":
            return None
        pos = stop + 4
    return "the file has no IEND chunk (cut short)"


def _decode_png(path: Path, rgb: bool) -> np.ndarray | torch.Tensor:
    """A PNG decoded by libpng through ``torchvision.io`` (the fastest decoder here;
    C x H x W), else by Pillow (H x W (x 3)); a damaged file raises before libpng, and
    every failure is a ``DataError`` without the C++ source location torchvision puts
    in front of its complaint."""
    try:
        _regular(path)
        if decode_png is None:
            with Image.open(path) as img:
                return np.array(img.convert("RGB") if rgb else img)
        raw = np.fromfile(path, dtype=np.uint8)
        damage = png_damage(raw.data)
        if damage:
            raise ValueError(damage)
        mode = ImageReadMode.RGB if rgb else ImageReadMode.UNCHANGED
        with warnings.catch_warnings():
            # torchvision 0.29 deprecates its image codecs in favour of TorchCodec; they
            # are still the fastest PNG decoder available to it.
            warnings.simplefilter("ignore", DeprecationWarning)
            return decode_png(torch.from_numpy(raw), mode=mode)
    except (RuntimeError, ValueError, OSError, SyntaxError) as err:
        why = re.sub(r"^.*?\.cpp:\d+, ", "", str(err)).strip()
        what = "image" if rgb else "label file"
        raise DataError(f"cannot decode {what} {path}: {why}") from None


def read_image(path: Path) -> torch.Tensor:
    """An RGB PNG as a uint8 3 x H x W tensor."""
    out = _decode_png(path, rgb=True)
    if isinstance(out, torch.Tensor):
        return out
    return torch.from_numpy(out).permute(2, 0, 1).contiguous()


def read_label_ids(path: Path) -> np.ndarray:
    """A labelIds PNG as an H x W uint8 array; ids outside the Cityscapes table are an
    error."""
    arr = _decode_png(path, rgb=False)
    if isinstance(arr, torch.Tensor):  # C x H x W, as Pillow's H x W (x C)
        arr = arr[0].numpy() if arr.shape[0] == 1 else arr.permute(1, 2, 0).numpy()
    _check_label(path, 1 if arr.ndim == 2 else arr.shape[-1])
    if arr.dtype != np.uint8:  # 16-bit PNG: ids above 255 are outside the table
        unknown = np.unique(arr[arr > 255])[:20]
        if not unknown.size:
            arr = arr.astype(np.uint8)
    if arr.dtype == np.uint8:
        if KNOWN_LABEL_IDS[: int(arr.max()) + 1].all():  # the table covers 0..33
            return arr
        present = np.bincount(arr.ravel(), minlength=256)
        unknown = np.flatnonzero((present > 0) & ~KNOWN_LABEL_IDS)
    raise DataError(
        f"label file {path} holds ids outside the Cityscapes label table "
        f"(cityscapesscripts.helpers.labels): {unknown.tolist()}"
    )


def _check_label(path: Path, channels: int, size=None, image=None, image_size=None):
    """A label file has one channel and (given its image's) its image's size (W, H)."""
    if channels != 1:
        raise DataError(
            f"label file {path} has {channels} channels; a labelIds PNG has one (the "
            "Cityscapes labelId of each pixel)"
        )
    if size != image_size:
        raise DataError(
            f"image {image} is {image_size[0]}x{image_size[1]} but its label file "
            f"{path} is {size[0]}x{size[1]} (W x H)"
        )


def check_headers(pairs: list[tuple[Path, Path]]) -> None:
    """Read only the PNG headers of (image, label) pairs (cheap, so a run checks every
    file before its first step): each file opens, each label has one channel and the
    size of its image; ``DataError`` names the first bad file."""

    def header(path: Path, what: str) -> tuple[tuple[int, int], int]:
        try:
            _regular(path)
            with Image.open(path) as img:
                return img.size, len(img.getbands())
        except (OSError, SyntaxError, ValueError) as err:
            raise DataError(f"cannot read {what} {path}: {err}") from None

    for image_path, label_path in pairs:
        size, _ = header(image_path, "image")
        lsize, channels = header(label_path, "label file")
        _check_label(label_path, channels, lsize, image_path, size)


def _to_float(images: torch.Tensor, normalize: bool) -> torch.Tensor:
    """uint8 images (C x H x W or N x C x H x W) as float: ``(x / 255 - mean) / std``
    with ImageNet's statistics (in two passes), or x / 255; the loader and the decoded
    cache both go through here, so their batches are identical."""
    images = images.float()
    if not normalize:
        return images.div_(255.0)
    mean, inv_std = _MEAN_255.to(images.device), _INV_STD_255.to(images.device)
    return images.sub_(mean).mul_(inv_std)


class Cityscapes(Dataset):
    """Cityscapes (or the synthetic set) for segmentation training. Item ``i`` is
    ``(image, label)``: image float32 3 x height x width, resized bilinearly (with
    antialiasing), scaled to [0, 1] or normalised with ImageNet's statistics; label
    int64 trainIds (255 = ignore), resized with nearest neighbour. ``flip`` flips both
    with probability 1/2 (one ``torch.rand(1)`` from torch's global generator per
    item). ``decode(i)`` is the uint8 item before flip and normalisation."""

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        height: int = 256,
        width: int = 512,
        flip: bool = False,
        normalize: bool = True,
    ):
        if height < 1 or width < 1:
            raise ValueError(f"height and width must be positive, got {height}x{width}")
        self.root = resolve_root(root)
        self.split = split
        self.height, self.width = int(height), int(width)
        self.flip, self.normalize = flip, normalize
        self.pairs = list_pairs(self.root, split)
        self.synthetic = (self.root / SYNTHETIC_MARKER).exists()
        # on uint8 images: resizing 1 byte per value is fastest
        self.resize = v2.Resize(
            (self.height, self.width),
            interpolation=v2.InterpolationMode.BILINEAR,
            antialias=True,
        )

    def __len__(self) -> int:
        return len(self.pairs)

    def decode(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Item ``index`` decoded and resized, in uint8 (label: trainIds)."""
        image_path, label_path = self.pairs[index]
        image = read_image(image_path)
        ids = read_label_ids(label_path)
        h, w = ids.shape
        _check_label(label_path, 1, (w, h), image_path, tuple(image.shape[:0:-1]))
        # Nearest-neighbour resizing and flipping only move pixels, so the labelId ->
        # trainId lookup can come after them, on the smaller label.
        image, mask = self.resize(
            tv_tensors.Image(image), tv_tensors.Mask(torch.from_numpy(ids))
        )
        label = np.take(LABEL_TO_TRAIN, mask.as_subclass(torch.Tensor).numpy())
        return image.as_subclass(torch.Tensor), torch.from_numpy(label)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = self.decode(index)
        if self.flip and torch.rand(1) < 0.5:  # as v2.RandomHorizontalFlip(p=0.5)
            image, label = image.flip(-1), label.flip(-1)
        return _to_float(image, self.normalize), label.long()


# --- the decoded cache ----------------------------------------------------------------


def decoded_bytes(images: int, height: int, width: int) -> int:
    """Bytes a decoded cache holds: a uint8 RGB image and label, 4 bytes per pixel."""
    return images * 4 * height * width


def available_bytes(device: torch.device) -> int:
    """Memory a cache could take on ``device``: free GPU memory on CUDA, the kernel's
    estimate of available memory (``MemAvailable``) on the host."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    import psutil

    return psutil.virtual_memory().available


# A cache may take this share of what is available: the run needs the rest (the GPU for
# activations and the allocator's slack; the host for the process and the page cache).
CACHE_SHARE = {"cuda": 0.5, "cpu": 0.8}


def check_cache_fits(nbytes: int, device: torch.device, copies: int = 1) -> int:
    """``nbytes`` when ``copies`` caches of that size fit on ``device`` (one per
    training process sharing the host's memory); else ``ValueError``."""
    free = available_bytes(device)
    share = CACHE_SHARE[device.type]
    if nbytes * copies > share * free:
        where = "GPU memory free" if device.type == "cuda" else "host memory available"
        each = f" in each of {copies} processes" if copies > 1 else ""
        fix = "--data-cache host, or" if device.type == "cuda" else "or"
        raise ValueError(
            f"the decoded cache needs {nbytes:,} bytes ({nbytes / 2**30:.2f} GiB)"
            f"{each}, more than {share:.0%} of the {free:,} bytes "
            f"({free / 2**30:.2f} GiB) of {where} ({device}); use fewer or smaller "
            f"images, {fix} --data-cache none"
        )
    return nbytes


class _Decoded(Dataset):
    def __init__(self, dataset: Cityscapes):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return self.dataset.decode(index)


class DecodedCache:
    """A dataset's items decoded once, at its training size, in uint8 on a device
    (host memory or a GPU). ``batch(indices, flips)`` returns what ``Cityscapes`` gives
    for those items, flipped and normalised on the target device with the very
    operations of ``Cityscapes.__getitem__`` (bit-identical batches)."""

    def __init__(self, dataset: Cityscapes, images: torch.Tensor, labels: torch.Tensor):
        self.dataset, self.images, self.labels = dataset, images, labels

    @property
    def nbytes(self) -> int:
        return self.images.nbytes + self.labels.nbytes

    @classmethod
    def build(
        cls, dataset: Cityscapes, device: torch.device | str = "cpu", workers: int = 0
    ) -> "DecodedCache":
        """Decode every item of ``dataset`` (``workers`` processes) onto ``device``
        (check the size first: ``check_cache_fits``)."""
        device = torch.device(device)
        n, h, w = len(dataset), dataset.height, dataset.width
        images = torch.empty((n, 3, h, w), dtype=torch.uint8, device=device)
        labels = torch.empty((n, h, w), dtype=torch.uint8, device=device)
        loader = torch.utils.data.DataLoader(
            _Decoded(dataset),
            batch_size=8,
            num_workers=workers,
            generator=torch.Generator(),  # not torch's global one: no draw from it
        )
        i = 0
        for image, label in loader:
            images[i : i + len(image)].copy_(image)
            labels[i : i + len(label)].copy_(label)
            i += len(image)
        return cls(dataset, images, labels)

    def batch(
        self,
        indices: list[int],
        flips: list[bool] | None = None,
        target: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Items ``indices`` as one batch on ``target`` (default: where the cache
        is), those with ``flips[k]`` flipped horizontally."""
        target = torch.device(target) if target is not None else self.images.device
        index = torch.tensor(indices, device=self.images.device)
        if self.images.device.type == "cpu" and target.type == "cuda":
            n = len(indices)
            images = torch.empty((n, *self.images.shape[1:]), dtype=torch.uint8)
            labels = torch.empty((n, *self.labels.shape[1:]), dtype=torch.uint8)
            images, labels = images.pin_memory(), labels.pin_memory()
            torch.index_select(self.images, 0, index, out=images)
            torch.index_select(self.labels, 0, index, out=labels)
        else:
            images, labels = self.images[index], self.labels[index]
        images = images.to(target, non_blocking=True)
        labels = labels.to(target, non_blocking=True)
        flipped = [k for k, f in enumerate(flips or ()) if f]
        if flipped:
            images[flipped] = images[flipped].flip(-1)
            labels[flipped] = labels[flipped].flip(-1)
        return _to_float(images, self.dataset.normalize), labels.long()


class CachedLoader:
    """A ``DataLoader`` stand-in over a ``DecodedCache``: batches in ``sampler``'s order
    (all items in order without one), on ``device``. ``flip`` draws as ``Cityscapes``
    draws (one ``torch.rand(1)`` per item, when the batch is taken), so a run gets the
    batches the dataset gives with 0 workers."""

    def __init__(
        self,
        cache: DecodedCache,
        batch_size: int,
        device: torch.device | str,
        sampler=None,
        flip: bool = False,
    ):
        self.cache, self.batch_size, self.dataset = cache, batch_size, cache.dataset
        self.sampler = range(len(self.dataset)) if sampler is None else sampler
        self.device, self.flip = torch.device(device), flip

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)

    def __iter__(self):
        order = list(self.sampler)
        for start in range(0, len(order), self.batch_size):
            indices = order[start : start + self.batch_size]
            flips = [bool(torch.rand(1) < 0.5) for _ in indices] if self.flip else None
            yield self.cache.batch(indices, flips, self.device)
