"""A synthetic Cityscapes: street scenes painted from random shapes with their
labelIds, in the official layout and file names. ``synthetic_pair`` draws one scene;
``synthesize`` writes a set (``python -m ampbook.data synthesize``); ``synthetic_root``
makes one in the cache on first use. See ``data/README.md``.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from cityscapesscripts.helpers.labels import labels as _CS_LABELS
from PIL import Image

from ampbook.core import cli
from ampbook.segmentation.cityscapes import (
    IMAGE_SUFFIX,
    LABEL_SUFFIX,
    SPLITS,
    SYNTHETIC_MARKER,
    SYNTHETIC_PARTIAL,
)

SYNTHETIC_VERSION = 1
_TRAIN_CITIES = ("northvale", "eastbrook", "southport", "westmoor")
_VAL_CITIES = ("midhaven", "lakeford")

_ID = {label.name: label.id for label in _CS_LABELS}  # Cityscapes labelIds


def _smooth_noise(
    rng: np.random.Generator, h: int, w: int, gh: int, gw: int
) -> np.ndarray:
    """Values in [0, 1) varying smoothly over h x w: a gh x gw random grid, bilinear."""
    g = rng.random((gh + 1, gw + 1), dtype=np.float32)
    y = np.linspace(0, gh, h, endpoint=False, dtype=np.float32)
    x = np.linspace(0, gw, w, endpoint=False, dtype=np.float32)
    y0, x0 = y.astype(np.int64), x.astype(np.int64)
    fy, fx = (y - y0)[:, None], (x - x0)[None, :]
    rows = g[:, x0] * (1 - fx) + g[:, x0 + 1] * fx  # (gh + 1) x w: along x first
    out = rows[y0 + 1] - rows[y0]
    out *= fy
    out += rows[y0]
    return out


def _jitter(rng, color, amount=18.0):
    return np.clip(np.asarray(color, np.float32) + rng.normal(0, amount, 3), 0, 255)


_FACADES = [
    (200, 190, 170),
    (150, 150, 150),
    (150, 85, 65),
    (215, 215, 208),
    (185, 160, 120),
    (120, 110, 105),
]
_CAR_PAINTS = [
    (230, 230, 230),
    (30, 30, 35),
    (160, 160, 165),
    (150, 30, 30),
    (40, 60, 130),
    (40, 80, 50),
]
_SHIRTS = [(180, 40, 40), (40, 90, 160), (200, 180, 60), (60, 120, 60), (230, 230, 230)]
_LAMPS = [(255, 60, 40), (255, 190, 40), (60, 230, 90)]
_SIGN_DISCS = (((30, 70, 170), (40, 90, 200)), ((200, 30, 30), (240,) * 3))  # rim, face


class _Street:
    """A label image and an RGB image painted together, object by object, inside
    bounding boxes; with the scene's perspective: the horizon row, the vanishing
    point's column ``vx``, and ``unit``, the scale that sizes are fractions of."""

    def __init__(self, h: int, w: int, rng: np.random.Generator):
        self.h, self.w, self.rng = h, w, rng
        self.ids = np.zeros((h, w), dtype=np.uint8)
        self.rgb = np.zeros((h, w, 3), dtype=np.float32)
        self.horizon = h * rng.uniform(0.38, 0.5)
        self.vx = w * rng.uniform(0.38, 0.62)
        self.ground_h = h - self.horizon
        self.unit = min(h, w / 2)

    def road_edge(self, s, side):
        return self.vx + side * self.w * 0.3 * s

    def box(self, y0, y1, x0, x1):
        """Clipped integer bounds and local pixel-centre coordinates, or None."""
        iy0, iy1 = max(int(np.floor(y0)), 0), min(int(np.ceil(y1)), self.h)
        ix0, ix1 = max(int(np.floor(x0)), 0), min(int(np.ceil(x1)), self.w)
        if iy0 >= iy1 or ix0 >= ix1:
            return None
        ys = np.arange(iy0, iy1, dtype=np.float32)[:, None] + 0.5
        xs = np.arange(ix0, ix1, dtype=np.float32)[None, :] + 0.5
        return (slice(iy0, iy1), slice(ix0, ix1)), ys, xs

    def paint(self, sl, mask, label_id: int, color) -> None:
        """Set pixels of ``mask`` (local to slices ``sl``; None for all) to ``label_id``
        and ``color`` (an RGB triple, or an array of the box's shape h x w x 3)."""
        color = np.asarray(color, dtype=np.float32)
        if mask is None:
            self.ids[sl] = label_id
            self.rgb[sl] = color
        else:
            np.copyto(self.ids[sl], np.uint8(label_id), where=mask)
            np.copyto(self.rgb[sl], color, where=mask[..., None])

    def rect(self, y0, y1, x0, x1, label_id, color) -> None:
        if b := self.box(y0, y1, x0, x1):
            self.paint(b[0], None, label_id, color)

    def ellipse(self, cy, cx, ry, rx, label_id, color) -> None:
        if b := self.box(cy - ry, cy + ry, cx - rx, cx + rx):
            sl, ys, xs = b
            inside = ((ys - cy) / ry) ** 2 + ((xs - cx) / rx) ** 2 <= 1
            self.paint(sl, inside, label_id, color)


def _sky(c: _Street) -> None:
    """A vertical gradient with soft clouds."""
    rng, h, w = c.rng, c.h, c.w
    top, low = _jitter(rng, (70, 120, 190), 12), _jitter(rng, (185, 205, 225), 10)
    t = (np.arange(h, dtype=np.float32) / max(c.horizon, 1))[:, None, None].clip(0, 1)
    clouds = _smooth_noise(rng, h, w, 4, 8)[..., None]
    c.rgb[:] = top * (1 - t) + low * t
    c.rgb += np.clip(clouds - 0.55, 0, None) * 160
    c.ids[:] = _ID["sky"]


def _buildings(c: _Street) -> None:
    """Facades along the horizon with a grid of windows; gaps show the sky."""
    rng, h, w, horizon = c.rng, c.h, c.w, c.horizon
    x = -rng.uniform(0, 0.1) * w
    while x < w:
        bw = w * rng.uniform(0.08, 0.22)
        if rng.random() > 0.12:
            far = rng.random() < 0.85
            btop = h * rng.uniform(0.02, 0.3) if far else horizon - 0.15 * h
            if b := c.box(btop, horizon + 1, x, x + bw):
                _facade(c, b, x, bw, btop)
        x += bw


def _facade(c: _Street, b, x, bw, btop) -> None:
    rng = c.rng
    sl, ys, xs = b
    base = _jitter(rng, _FACADES[rng.integers(len(_FACADES))], 12)
    px, py = bw / rng.integers(3, 7), c.unit * rng.uniform(0.05, 0.09)
    win = (
        (((xs - x) % px) > 0.3 * px)
        & (((ys - btop) % py) > 0.4 * py)
        & (ys < c.horizon - 0.3 * py)
    )
    shade = 1 + 0.15 * (_smooth_noise(rng, ys.shape[0], xs.shape[1], 3, 3) - 0.5)
    color = np.broadcast_to(base, (ys.shape[0], xs.shape[1], 3)) * shade[..., None]
    glass = _jitter(rng, (60, 70, 85), 10) * rng.uniform(0.7, 1.2)
    c.paint(sl, None, _ID["building"], np.where(win[..., None], glass, color))


def _ground(c: _Street) -> None:
    """Sidewalk with perspective tiles, grass verges, a road with dashed lane marks."""
    rng, w, vx = c.rng, c.w, c.vx
    sl, ys, xs = c.box(c.horizon, c.h, 0, w)
    depth = c.ground_h / np.maximum(ys - c.horizon, 0.5)  # 1 at the bottom, large far
    u = (xs - vx) * depth / c.unit  # ground-plane coordinates
    near = (ys - c.horizon) / c.ground_h  # 0 at the horizon, 1 at the bottom
    road_half = w * rng.uniform(0.3, 0.5) * near
    off = np.abs(xs - vx)
    tiles = ((u * 4) % 1 < 0.08) | ((depth * 3) % 1 < 0.08)
    walk = _jitter(rng, (168, 160, 155), 10)
    color = np.where(tiles[..., None], walk * 0.75, walk).astype(np.float32)
    c.paint(sl, None, _ID["sidewalk"], color)
    for side in (-1, 1):
        if rng.random() < 0.5:
            verge = (
                (off >= road_half)
                & (off < road_half * rng.uniform(1.12, 1.3) + 1)
                & (np.sign(xs - vx) == side)
            )
            grass = (
                _jitter(rng, (110, 140, 60), 12)
                * (0.8 + 0.4 * rng.random(verge.shape, dtype=np.float32))[..., None]
            )
            c.paint(sl, verge, _ID["terrain"], grass)
    road = off < road_half
    asphalt = _jitter(rng, (78, 78, 84), 6)
    lane = (np.abs(xs - vx) < 0.012 * w * near + 0.5) & ((depth * 0.8) % 1 < 0.5)
    color = np.where(lane[..., None], np.float32(225), asphalt)
    c.paint(sl, road, _ID["road"], np.broadcast_to(color, road.shape + (3,)))


def _fence(c: _Street) -> None:
    """Sometimes a fence along the building line."""
    rng, horizon, unit = c.rng, c.horizon, c.unit
    if rng.random() >= 0.4:
        return
    x0 = rng.uniform(0, 0.6) * c.w
    x1, fh = x0 + c.w * rng.uniform(0.15, 0.35), 0.05 * unit
    if b := c.box(horizon - fh, horizon + 0.01 * unit, x0, x1):
        sl, ys, xs = b
        slats = ((xs - x0) % (0.02 * unit)) < 0.008 * unit
        rails = np.abs(ys - (horizon - 0.7 * fh)) < 0.006 * unit
        mask = np.broadcast_to(slats | rails, (ys.shape[0], xs.shape[1]))
        c.paint(sl, mask, _ID["fence"], _jitter(rng, (130, 120, 100), 10))


def _car(c: _Street, s, base, scale, side) -> None:
    rng, car = c.rng, _ID["car"]
    cx = c.vx + rng.uniform(-0.8, 0.8) * c.w * 0.3 * s
    cw, ch = 0.45 * scale, 0.3 * scale
    body = _jitter(rng, _CAR_PAINTS[rng.integers(6)], 10)
    c.rect(base - 0.6 * ch, base - 0.1 * ch, cx - cw / 2, cx + cw / 2, car, body)
    c.rect(base - ch, base - 0.55 * ch, cx - cw * 0.35, cx + cw * 0.35, car, body)
    window = _jitter(rng, (50, 60, 75), 8)
    c.rect(base - 0.93 * ch, base - 0.6 * ch, cx - cw * 0.3, cx + cw * 0.3, car, window)
    for wx in (-0.32, 0.32):
        c.ellipse(base - 0.12 * ch, cx + wx * cw, 0.14 * ch, 0.1 * cw, car, (20,) * 3)


def _person(c: _Street, s, base, scale, side) -> None:
    rng, person = c.rng, _ID["person"]
    px = c.road_edge(s, side) + side * rng.uniform(0.05, 0.3) * c.w * s + side * 2
    ph, pw = 0.38 * scale, 0.1 * scale
    legs = _jitter(rng, (45, 45, 60), 12)
    c.rect(base - 0.5 * ph, base, px - pw * 0.35, px + pw * 0.35, person, legs)
    shirt = _jitter(rng, _SHIRTS[rng.integers(5)], 15)
    c.rect(base - 0.85 * ph, base - 0.45 * ph, px - pw / 2, px + pw / 2, person, shirt)
    face = _jitter(rng, (210, 165, 130), 20)
    c.ellipse(base - 0.92 * ph, px, 0.08 * ph, 0.3 * pw, person, face)


def _tree(c: _Street, s, base, scale, side) -> None:
    rng, green = c.rng, _ID["vegetation"]
    tx = c.road_edge(s, side) + side * rng.uniform(0.1, 0.5) * c.w * max(s, 0.15)
    th = 0.9 * scale
    trunk = _jitter(rng, (90, 65, 40), 10)
    c.rect(base - 0.6 * th, base, tx - 0.02 * scale, tx + 0.02 * scale, green, trunk)
    if b := c.box(base - 1.2 * th, base - 0.35 * th, tx - 0.35 * th, tx + 0.35 * th):
        sl, ys, xs = b
        blob = _smooth_noise(rng, ys.shape[0], xs.shape[1], 4, 4)
        r2 = ((ys - (base - 0.78 * th)) / (0.42 * th)) ** 2
        r2 = r2 + ((xs - tx) / (0.33 * th)) ** 2
        mask = r2 + 0.6 * (blob - 0.5) < 1
        leaf = _jitter(rng, (60, 105, 40), 10)
        tex = 0.6 + 0.8 * rng.random(mask.shape, dtype=np.float32)
        c.paint(sl, mask, green, leaf * tex[..., None])


def _pole(c: _Street, s, base, scale, side) -> None:
    """A pole, and on top of it a traffic sign, a traffic light or nothing."""
    rng = c.rng
    qx = c.road_edge(s, side) + side * rng.uniform(0.03, 0.15) * c.w * max(s, 0.15)
    qh, qw = 1.1 * scale, max(0.018 * scale, 1.0)
    grey = _jitter(rng, (120, 120, 125), 10)
    c.rect(base - qh, base, qx - qw / 2, qx + qw / 2, _ID["pole"], grey)
    top = base - qh
    what = rng.random()
    if what < 0.45:
        _sign(c, top, qx, 0.07 * scale)
    elif what < 0.8:
        _traffic_light(c, top, qx, scale)


def _sign(c: _Street, top, qx, r) -> None:
    """A blue disc, a red-rimmed disc or a yellow plate."""
    rng, sign = c.rng, _ID["traffic sign"]
    style = rng.integers(3)
    if style == 2:
        plate = _jitter(rng, (235, 200, 30), 10)
        c.rect(top - r, top + r, qx - r, qx + r, sign, plate)
    else:
        rim, face = _SIGN_DISCS[style]
        c.ellipse(top, qx, r, r, sign, rim)
        c.ellipse(top, qx, 0.7 * r, 0.7 * r, sign, face)


def _traffic_light(c: _Street, top, qx, scale) -> None:
    """A dark housing with one lit lamp."""
    rng, light = c.rng, _ID["traffic light"]
    lw, lh = 0.07 * scale, 0.2 * scale
    housing = _jitter(rng, (35, 35, 30), 5)
    c.rect(top, top + lh, qx - lw / 2, qx + lw / 2, light, housing)
    lamp = rng.integers(3)
    cy = top + lh * (0.2 + 0.3 * lamp)
    c.ellipse(cy, qx, 0.28 * lw, 0.28 * lw, light, _LAMPS[lamp])


def _static(c: _Street, s, base, scale, side) -> None:
    """Bins, benches, boxes: labelled 'static' (ignored in training)."""
    rng = c.rng
    sx = c.road_edge(s, side) + side * rng.uniform(0.1, 0.4) * c.w * max(s, 0.15)
    sw, sh = 0.12 * scale, 0.1 * scale
    grey = _jitter(rng, (90, 95, 80), 20)
    c.rect(base - sh, base, sx - sw / 2, sx + sw / 2, _ID["static"], grey)


# Each kind of object: how many a scene has (numpy's integers(low, high)), the range of
# its nearness, and how it is drawn.
_OBJECTS = (
    ("tree", (2, 6), (0.05, 0.5), _tree),
    ("pole", (1, 5), (0.05, 0.7), _pole),
    ("car", (1, 5), (0.1, 0.95), _car),
    ("person", (0, 5), (0.1, 0.9), _person),
    ("static", (0, 3), (0.05, 0.6), _static),
)


def _objects(c: _Street) -> None:
    """Trees, poles, cars, people and static things, drawn far to near."""
    rng = c.rng
    objects = [
        (rng.uniform(*near), draw)
        for _, count, near, draw in _OBJECTS
        for _ in range(rng.integers(*count))
    ]
    objects.sort(key=lambda o: o[0])
    for s, draw in objects:
        scale = c.unit * (0.15 + s)  # nearer objects are bigger
        side = 1 if rng.random() < 0.5 else -1
        draw(c, s, c.horizon + s * c.ground_h, scale, side)  # s: 0 horizon, 1 bottom


def _bonnet(c: _Street) -> None:
    """The ego vehicle's bonnet at the bottom (ignored in training)."""
    h, w = c.h, c.w
    if b := c.box(h * 0.88, h, 0, w):
        sl, ys, xs = b
        hood = ys > h * (0.92 + 0.05 * ((xs - w / 2) / (w / 2)) ** 2)
        c.paint(sl, hood, _ID["ego vehicle"], _jitter(c.rng, (35, 38, 42), 5))


def _light_and_noise(c: _Street) -> None:
    """Uneven light, then sensor noise: the sum of two uniform 4-bit draws is
    triangular on -15..15 (sd 6.5), far cheaper to draw than Gaussian noise of the
    same spread."""
    light = 0.85 + 0.3 * _smooth_noise(c.rng, c.h, c.w, 3, 5)
    c.rgb *= light[..., None]
    bits = c.rng.integers(0, 256, size=c.rgb.shape, dtype=np.uint8)
    noise = (bits & 15).astype(np.float32)
    noise += bits >> 4
    noise -= 15
    c.rgb += noise
    np.clip(c.rgb, 0, 255, out=c.rgb)


# The scene, back to front.
_LAYERS = (_sky, _buildings, _ground, _fence, _objects, _bonnet, _light_and_noise)


def _check_size(height: int, width: int) -> None:
    if height < 16 or width < 16:
        raise ValueError(
            f"synthetic images need at least 16x16 pixels, got {width}x{height} (W x H)"
        )


def synthetic_pair(
    seed: int, split: str, index: int, height: int = 1024, width: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """Image (uint8 H x W x 3) and labelIds (uint8 H x W) of one synthetic scene; the
    same (seed, split, index) gives the same scene."""
    _check_size(height, width)
    rng = np.random.default_rng([seed, SPLITS.index(split), index])
    c = _Street(height, width, rng)
    for layer in _LAYERS:
        layer(c)
    return c.rgb.astype(np.uint8), c.ids


_LAYOUT = (("leftImg8bit", IMAGE_SUFFIX), ("gtFine", LABEL_SUFFIX))


def _write_scene(job: tuple) -> None:
    """Draw scene ``i`` of ``split``; write its image and labelIds PNGs in ``root``."""
    root, seed, split, i, height, width = job
    cities = _TRAIN_CITIES if split == "train" else _VAL_CITIES
    city = cities[i % len(cities)]
    stem = f"{city}_{i:06d}_000019"  # the 20th frame of a clip, as Cityscapes
    image, ids = synthetic_pair(seed, split, i, height, width)
    # zlib level 1: files about as large as well-compressed noisy photos, written fast
    for array, (folder, suffix) in zip((image, ids), _LAYOUT):
        out = root / folder / split / city
        out.mkdir(parents=True, exist_ok=True)
        Image.fromarray(array).save(out / (stem + suffix), compress_level=1)


# Below this many pixels in all, starting worker processes costs more than drawing
# serially.
_PARALLEL_MIN_PIXELS = 8 * 1024 * 2048


def check_synthesis(root, train: int, val: int, seed: int, height: int, width: int):
    """Every argument of ``synthesize`` checked before anything is written
    (``ValueError``, ``FileExistsError``); returns ``root`` as a Path."""
    if not str(root).strip():  # Path("") is ".": the current folder
        raise ValueError("root is an empty path; give the folder to write into")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise FileExistsError(
            f"root {root} is a file; give a folder to write the data set into"
        )
    try:  # long names, a file in the way, a read-only place
        cli.check_output_dir(root, "root")
    except cli.UserError as err:
        raise ValueError(str(err)) from None
    if train < 0 or val < 0 or train + val == 0:
        raise ValueError(
            f"need a positive number of images, got train={train}, val={val}"
        )
    _check_size(height, width)
    if seed < 0:
        raise ValueError(f"seed must be 0 or more, got {seed}")
    ours = (root / SYNTHETIC_MARKER).exists() or (root / SYNTHETIC_PARTIAL).exists()
    if any((root / sub).exists() for sub, _ in _LAYOUT) and not ours:
        raise FileExistsError(
            f"{root} already holds a dataset that is not synthetic; "
            "refusing to write synthetic images into it"
        )
    return root


def synthesize(
    root: str | os.PathLike,
    train: int,
    val: int,
    seed: int = 0,
    height: int = 1024,
    width: int = 2048,
    progress: bool = False,
    workers: int | None = None,
) -> Path:
    """Write a synthetic Cityscapes into ``root`` in the official layout; returns
    ``root``. ``workers`` processes draw (default: one per core for a set large enough
    to pay for them); each scene has its own random stream, so the files are the same
    byte for byte whatever the number of workers."""
    root = check_synthesis(root, train, val, seed, height, width)
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    # The marker of a set being written goes first and the set's marker goes before
    # anything is removed: a set stopped half-way is never taken for a whole one.
    root.mkdir(parents=True, exist_ok=True)
    (root / SYNTHETIC_PARTIAL).write_text(
        "being written by ampbook.segmentation.synthetic\n"
    )
    (root / SYNTHETIC_MARKER).unlink(missing_ok=True)
    for sub, _ in _LAYOUT:  # an older synthetic set: replace it whole
        shutil.rmtree(root / sub, ignore_errors=True)
    start = time.perf_counter()
    jobs = [
        (root, seed, split, i, height, width)
        for split, count in (("train", train), ("val", val))
        for i in range(count)
    ]
    if workers is None:
        big = len(jobs) * height * width >= _PARALLEL_MIN_PIXELS
        workers = min(os.cpu_count() or 1, len(jobs)) if big else 1
    workers = min(workers, len(jobs))
    if workers == 1:
        done = map(_write_scene, jobs)
        pool = None
    else:
        # fork where there is one (as torch's DataLoader does): a worker runs only
        # numpy, PIL and zlib, and a script without a __main__ guard is not run again in
        # each worker.
        fork = "fork" in multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if fork else "spawn")
        pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_quiet_worker
        )
        done = pool.map(_write_scene, jobs)
    try:
        for n, _ in enumerate(done, 1):
            if progress and n % 20 == 0:
                print(f"  {n}/{len(jobs)} images", file=sys.stderr)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    meta = {
        "synthetic": True,
        **_params(seed, train, val, height, width),
        "generator": "ampbook.segmentation.synthetic.synthesize",
    }
    cli.write_text_atomic(root / SYNTHETIC_MARKER, json.dumps(meta, indent=1) + "\n")
    (root / SYNTHETIC_PARTIAL).unlink()
    if progress:
        print(
            f"wrote {train + val} synthetic images ({width}x{height}) to {root} in "
            f"{time.perf_counter() - start:.1f} s with {workers} process"
            f"{'es' if workers > 1 else ''}",
            file=sys.stderr,
        )
    return root


def _params(seed: int, train: int, val: int, height: int, width: int) -> dict:
    """What a set's marker must say for the cache to reuse it."""
    return {"version": SYNTHETIC_VERSION, **locals()}


def _quiet_worker() -> None:
    """A drawing process leaves Ctrl-C and SIGTERM to its parent, which stops the
    pool: no worker's traceback on the terminal."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def set_matches(root: Path, meta: dict) -> bool:
    """Whether ``root`` holds the whole synthetic set ``meta`` describes: its marker
    says so, nothing marks it partial, and no file is missing or empty."""
    try:
        marker = json.loads((root / SYNTHETIC_MARKER).read_text())
        if not isinstance(marker, dict) or (root / SYNTHETIC_PARTIAL).exists():
            return False
        if any(marker.get(k) != v for k, v in meta.items()):
            return False
        for split in ("train", "val"):
            for folder, suffix in _LAYOUT:
                files = list((root / folder / split).glob("*/*" + suffix))
                if len(files) != meta[split] or not all(
                    f.stat().st_size for f in files
                ):
                    return False
    except (OSError, ValueError):
        return False
    return True


def synthetic_root(
    train: int, val: int, height: int = 1024, width: int = 2048, seed: int = 0
) -> Path:
    """A synthetic Cityscapes in ``cache_dir()``, written on first use and reused
    after (safe when several processes ask at once) unless it does not match its
    marker (files missing or empty, other parameters, stopped half-way)."""
    from ampbook.core.paths import cache_dir

    name = (
        f"synthetic-cityscapes-v{SYNTHETIC_VERSION}-seed{seed}-{train}train-{val}val-"
        f"{width}x{height}"
    )
    root = cache_dir() / name
    meta = _params(seed, train, val, height, width)
    if set_matches(root, meta):
        return root
    if root.exists():  # damaged or partial: moved out of the way, then removed
        stale = root.with_name(f"{name}.stale-{os.getpid()}")
        with contextlib.suppress(OSError):  # another process may have moved it first
            root.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=name + ".tmp-", dir=cache_dir()))
    try:
        synthesize(tmp, train, val, seed=seed, height=height, width=width)
        try:
            tmp.rename(root)
        except OSError:  # another process finished first
            if not set_matches(root, meta):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


SYNTHESIS_LOCK = ".synthesize.lock"  # held by python -m ampbook.data synthesize


def synthesize_cli(args) -> int:
    """``python -m ampbook.data synthesize``: arguments checked before anything is
    written; a run that stops half-way (Ctrl-C, SIGTERM, a full disk) removes what it
    began, so that a retry is not refused and nothing partial is read as data."""
    params = (args.train, args.val, args.seed, args.height, args.width)
    root = check_synthesis(args.root, *params)
    fresh = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise FileExistsError(
            f"cannot create {root}: {err.strerror}; choose another --root"
        ) from None
    lock = root / SYNTHESIS_LOCK
    try:  # one writer per folder, as one run per name (train's RunLock)
        fd = cli.hold_lock(lock)
    except cli.LockBusy as err:
        raise FileExistsError(
            f"{root} is being synthesized by another process ({err.holder}); wait "
            "for it to end, or choose another --root"
        ) from None
    try:
        synthesize(root, *params, progress=True)
        return 0
    except (KeyboardInterrupt, OSError) as stop:
        err = stop
    finally:  # before the clean-up: the lock file is in root
        cli.release_lock(lock, fd)
    if not (root / SYNTHETIC_MARKER).exists():  # ours, and not finished
        for folder, _ in _LAYOUT:
            shutil.rmtree(root / folder, ignore_errors=True)
        (root / SYNTHETIC_PARTIAL).unlink(missing_ok=True)
        if fresh:
            with contextlib.suppress(OSError):
                root.rmdir()
    if isinstance(err, KeyboardInterrupt):
        what = f"interrupted ({cli.signal_name()})"
    else:
        what = "failed: " + " ".join(cli.os_error(err)[1].split())
    print(
        f"error: synthesize {what}; the half-written images were removed, run it again",
        file=sys.stderr,
    )
    return cli.stop_code(err) if isinstance(err, KeyboardInterrupt) else 1
