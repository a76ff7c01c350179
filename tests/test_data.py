"""Cityscapes dataset, label mapping, synthetic set, and the errors bad input gets."""

import os
import shutil

import numpy as np
import pytest
import torch
from cityscapesscripts.helpers.labels import labels as cs_labels
from PIL import Image

from ampbook import data as data_command
from ampbook.segmentation import cityscapes as data
from ampbook.segmentation.cityscapes import (
    CLASS_NAMES,
    IGNORE_INDEX,
    NUM_CLASSES,
    Cityscapes,
    DataError,
    resolve_root,
)
from ampbook.segmentation.synthetic import synthesize, synthetic_pair, synthetic_root


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    """A tiny synthetic set: 4 train, 2 val images of 64x128 (H x W)."""
    return synthesize(
        tmp_path_factory.mktemp("cs"), train=4, val=2, seed=1, height=64, width=128
    )


@pytest.fixture
def root_copy(small_root, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(small_root, dst)
    return dst


def _files(root, split, kind):
    sub, suffix = (
        ("leftImg8bit", "_leftImg8bit.png")
        if kind == "image"
        else ("gtFine", "_gtFine_labelIds.png")
    )
    return sorted((root / sub / split).glob(f"*/*{suffix}"))


# --- label table ----------------------------------------------------------------------


def test_class_names_are_the_19_train_ids_of_cityscapesscripts():
    expected = {l.trainId: l.name for l in cs_labels if 0 <= l.trainId < 19}
    assert NUM_CLASSES == 19 and IGNORE_INDEX == 255
    assert list(CLASS_NAMES) == [expected[i] for i in range(19)]


def test_label_ids_map_to_train_ids_as_the_table_says():
    for lab in cs_labels:
        if lab.id < 0:
            continue  # license plate (-1) cannot occur in a uint8 image
        want = (
            lab.trainId if 0 <= lab.trainId < 19 else 255
        )  # trainIds 255 and -1 are ignored
        assert data.LABEL_TO_TRAIN[lab.id] == want, lab.name
        assert data.KNOWN_LABEL_IDS[lab.id]
    table_ids = {l.id for l in cs_labels}
    assert not any(data.KNOWN_LABEL_IDS[i] for i in range(256) if i not in table_ids)
    ids = torch.tensor([[7, 26], [0, 33]])
    assert torch.from_numpy(data.LABEL_TO_TRAIN)[ids].tolist() == [[0, 13], [255, 18]]
    assert (
        data.TRAIN_TO_LABEL[data.LABEL_TO_TRAIN[data.TRAIN_TO_LABEL]].tolist()
        == data.TRAIN_TO_LABEL.tolist()
    )


# --- synthetic set --------------------------------------------------------------------


def test_synthetic_layout_and_names(small_root):
    assert (
        len(_files(small_root, "train", "image")) == 4
        and len(_files(small_root, "val", "image")) == 2
    )
    for split in ("train", "val"):
        for img, lab in zip(
            _files(small_root, split, "image"), _files(small_root, split, "label")
        ):
            city, seq, frame, kind = img.name.split("_")
            assert img.parent.name == city and kind == "leftImg8bit.png"
            assert (
                len(seq) == 6 and len(frame) == 6 and seq.isdigit() and frame.isdigit()
            )
            assert lab.name == f"{city}_{seq}_{frame}_gtFine_labelIds.png"
            assert lab.parent == small_root / "gtFine" / split / city
            im, ids = Image.open(img), Image.open(lab)
            assert (
                im.mode == "RGB"
                and ids.mode == "L"
                and im.size == ids.size == (128, 64)
            )
    assert (small_root / data.SYNTHETIC_MARKER).exists()


def test_synthetic_scenes_are_deterministic_and_street_like():
    a_img, a_ids = synthetic_pair(5, "train", 3, 96, 192)
    b_img, b_ids = synthetic_pair(5, "train", 3, 96, 192)
    assert np.array_equal(a_img, b_img) and np.array_equal(a_ids, b_ids)
    c_img, _ = synthetic_pair(6, "train", 3, 96, 192)
    assert not np.array_equal(a_img, c_img)
    present = set()
    for i in range(6):
        img, ids = synthetic_pair(0, "val", i, 96, 192)
        assert (
            img.shape == (96, 192, 3)
            and img.dtype == np.uint8
            and ids.shape == (96, 192)
        )
        assert data.KNOWN_LABEL_IDS[ids].all()
        present |= set(np.unique(ids).tolist())
        # textured and noisy: even the road, a single class, varies from pixel to pixel
        road = img[ids == 7].astype(float)
        assert road.std(axis=0).mean() > 3
    names = {l.id: l.name for l in cs_labels}
    found = {names[i] for i in present}
    for name in (
        "road",
        "sidewalk",
        "building",
        "sky",
        "vegetation",
        "car",
        "person",
        "pole",
        "ego vehicle",
        "static",
    ):  # the last two map to ignore
        assert name in found, name
    assert any(data.LABEL_TO_TRAIN[i] == 255 for i in present)


def test_synthesize_files_are_reproducible(tmp_path, small_root):
    again = synthesize(tmp_path / "again", train=4, val=2, seed=1, height=64, width=128)
    for split in ("train", "val"):
        for kind in ("image", "label"):
            for a, b in zip(
                _files(small_root, split, kind), _files(again, split, kind)
            ):
                assert a.relative_to(small_root) == b.relative_to(again)
                assert np.array_equal(np.array(Image.open(a)), np.array(Image.open(b)))


def test_synthetic_root_is_made_once_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("AMPBOOK_CACHE", str(tmp_path / "cache"))
    first = synthetic_root(train=2, val=1, height=32, width=64, seed=2)
    assert first.parent == tmp_path / "cache"
    stamp = os.stat(_files(first, "train", "image")[0]).st_mtime_ns
    second = synthetic_root(train=2, val=1, height=32, width=64, seed=2)
    assert second == first
    assert os.stat(_files(first, "train", "image")[0]).st_mtime_ns == stamp
    assert len(Cityscapes(first, "train", 32, 64)) == 2
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [
        first.name
    ]  # no temp left over


def test_synthesize_cli(tmp_path, capsys):
    assert (
        data_command.main(
            [
                "synthesize",
                "--root",
                str(tmp_path / "s"),
                "--train",
                "2",
                "--val",
                "1",
                "--seed",
                "4",
                "--height",
                "32",
                "--width",
                "64",
            ]
        )
        == 0
    )
    assert len(_files(tmp_path / "s", "train", "image")) == 2
    assert data_command.main(["info", "--root", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "train: 2 image/label pairs" in out and "val: 1 image/label pairs" in out


def test_synthesize_replaces_an_older_synthetic_set(tmp_path):
    synthesize(tmp_path, 3, 2, height=32, width=64)
    synthesize(tmp_path, 1, 1, seed=1, height=32, width=64)
    assert (
        len(_files(tmp_path, "train", "image")) == 1
        and len(_files(tmp_path, "val", "label")) == 1
    )


def test_synthesize_refuses_a_real_dataset_folder(tmp_path):
    (tmp_path / "leftImg8bit").mkdir()
    with pytest.raises(FileExistsError, match="not synthetic"):
        synthesize(tmp_path, 1, 1, height=32, width=64)


# --- the dataset ----------------------------------------------------------------------


def test_items_are_resized_and_mapped(small_root):
    ds = Cityscapes(small_root, "train", height=32, width=64, normalize=False)
    assert len(ds) == 4 and ds.synthetic
    image, label = ds[1]
    assert image.shape == (3, 32, 64) and image.dtype == torch.float32
    assert label.shape == (32, 64) and label.dtype == torch.int64
    assert 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    img_path, lab_path = ds.pairs[1]
    ids = np.array(Image.open(lab_path))
    # nearest neighbour halving keeps every other pixel; then the table maps labelIds
    expected = data.LABEL_TO_TRAIN[ids][::2, ::2]
    assert np.array_equal(label.numpy(), expected)
    assert set(np.unique(expected).tolist()) <= set(range(19)) | {255}
    # bilinear (antialiased) halving is close to the mean of each 2x2 block
    full = np.array(Image.open(img_path)).astype(np.float32) / 255
    blocks = full.reshape(32, 2, 64, 2, 3).mean(axis=(1, 3)).transpose(2, 0, 1)
    assert np.abs(image.numpy() - blocks).mean() < 0.03


def test_normalization_uses_imagenet_statistics(small_root):
    raw, _ = Cityscapes(small_root, "val", 64, 128, normalize=False)[0]
    norm, _ = Cityscapes(small_root, "val", 64, 128, normalize=True)[0]
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    torch.testing.assert_close(norm, (raw - mean) / std)


def test_flip_moves_image_and_label_together(small_root):
    plain = Cityscapes(small_root, "train", 32, 64)
    flipping = Cityscapes(small_root, "train", 32, 64, flip=True)
    ref_img, ref_lab = plain[0]
    torch.manual_seed(0)
    flipped = 0
    for _ in range(12):
        img, lab = flipping[0]
        if torch.equal(lab, ref_lab.flip(-1)) and torch.equal(img, ref_img.flip(-1)):
            flipped += 1
        else:
            assert torch.equal(lab, ref_lab) and torch.equal(img, ref_img)
    assert 0 < flipped < 12


def test_loads_through_a_dataloader_with_workers(small_root):
    loader = torch.utils.data.DataLoader(
        Cityscapes(small_root, "train", 32, 64), batch_size=2, num_workers=1
    )
    batches = list(loader)
    assert len(batches) == 2 and batches[0][0].shape == (2, 3, 32, 64)


def test_root_from_the_environment(small_root, monkeypatch):
    monkeypatch.setenv("CITYSCAPES_DATASET", str(small_root))
    assert resolve_root() == small_root
    assert len(Cityscapes(split="val", height=32, width=64)) == 2


# --- bad input ------------------------------------------------------------------------


def test_no_root_says_how_to_get_cityscapes(monkeypatch):
    monkeypatch.delenv("CITYSCAPES_DATASET", raising=False)
    with pytest.raises(FileNotFoundError) as err:
        resolve_root()
    msg = str(err.value)
    assert "CITYSCAPES_DATASET is not set" in msg
    assert "cityscapes-dataset.com" in msg and "gtFine_trainvaltest.zip" in msg
    assert "python -m ampbook.data synthesize" in msg


def test_missing_root_names_it(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=r"'.*nowhere'.*does not exist.*python -m ampbook.data synthesize",
    ):
        Cityscapes(tmp_path / "nowhere")


def test_empty_root_says_so(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("CITYSCAPES_DATASET", str(tmp_path / "empty"))
    with pytest.raises(
        FileNotFoundError,
        match=r"from CITYSCAPES_DATASET\) is empty.*leftImg8bit_trainvaltest.zip",
    ):
        Cityscapes()
    (tmp_path / "empty" / "leftImg8bit").mkdir()
    with pytest.raises(FileNotFoundError, match="has no gtFine folder"):
        Cityscapes(tmp_path / "empty")


def test_unknown_split(small_root):
    with pytest.raises(
        ValueError, match=r"unknown split 'trian'.*train, val, test.*holds train, val"
    ):
        Cityscapes(small_root, "trian")
    with pytest.raises(FileNotFoundError, match=r"split 'test' is missing: .*val"):
        Cityscapes(small_root, "test")


def test_image_without_label_names_the_image(root_copy):
    label = _files(root_copy, "train", "label")[2]
    image = _files(root_copy, "train", "image")[2]
    label.unlink()
    with pytest.raises(
        FileNotFoundError, match=f"image {image} has no label file: expected {label}"
    ):
        Cityscapes(root_copy, "train")


def test_label_without_image_names_the_label(root_copy):
    label = _files(root_copy, "val", "label")[0]
    image = _files(root_copy, "val", "image")[0]
    image.unlink()
    with pytest.raises(
        FileNotFoundError, match=f"label file {label} has no image: expected {image}"
    ):
        Cityscapes(root_copy, "val")


@pytest.mark.parametrize("kind", ["image", "label"])
@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_png_names_the_file(root_copy, kind, damage):
    victim = _files(root_copy, "train", kind)[1]
    content = victim.read_bytes()
    victim.write_bytes(
        b"this is not a PNG" * 10
        if damage == "garbage"
        else content[: len(content) // 2]
    )
    ds = Cityscapes(root_copy, "train", 32, 64)
    ds[0]  # the other files still load
    with pytest.raises(
        DataError,
        match=f"cannot decode {'image' if kind == 'image' else 'label file'} {victim}",
    ):
        ds[1]


def test_label_ids_outside_the_table_name_file_and_ids(root_copy):
    victim = _files(root_copy, "val", "label")[1]
    ids = np.array(Image.open(victim))
    ids[0, :3] = 200
    ids[5, 5] = 50
    Image.fromarray(ids).save(victim)
    with pytest.raises(
        DataError,
        match=rf"label file {victim} holds ids outside the Cityscapes label "
        r"table.*\[50, 200\]",
    ):
        Cityscapes(root_copy, "val")[1]


def test_image_and_label_of_different_sizes(root_copy):
    victim = _files(root_copy, "val", "label")[0]
    Image.fromarray(np.full((32, 64), 7, np.uint8)).save(victim)
    with pytest.raises(DataError, match="is 128x64 but its label file .* is 64x32"):
        Cityscapes(root_copy, "val")[0]


def test_pillow_fallback_decodes_the_same(root_copy, monkeypatch):
    image_path, label_path = Cityscapes(root_copy, "val").pairs[0]
    fast_image, fast_ids = data.read_image(image_path), data.read_label_ids(label_path)
    monkeypatch.setattr(
        data, "decode_png", None
    )  # as with a torchvision without image codecs
    assert torch.equal(data.read_image(image_path), fast_image)
    assert np.array_equal(data.read_label_ids(label_path), fast_ids)
    label_path.write_bytes(b"\x89PNG broken")
    with pytest.raises(DataError, match=f"cannot decode label file {label_path}"):
        data.read_label_ids(label_path)


# --- learnable ------------------------------------------------------------------------

# Low resolution, few images and epochs: about 20 s of one CPU core.
LEARN_H, LEARN_W, LEARN_EPOCHS = 48, 96, 12


@pytest.mark.slow
def test_erfnet_learns_the_synthetic_scenes(tmp_path):
    """A few epochs at low resolution take ERFNet's mIoU far above what guessing
    gets."""
    from ampbook.segmentation.metrics import SegmentationMetrics
    from ampbook.segmentation.model import ERFNet

    torch.manual_seed(0)
    root = synthesize(tmp_path, train=32, val=8, seed=0, height=LEARN_H, width=LEARN_W)
    train = Cityscapes(root, "train", LEARN_H, LEARN_W, flip=True)
    val = Cityscapes(root, "val", LEARN_H, LEARN_W)
    vx = torch.stack([val[i][0] for i in range(len(val))])
    vy = torch.stack([val[i][1] for i in range(len(val))])
    model = ERFNet()
    loader = torch.utils.data.DataLoader(train, batch_size=4, shuffle=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=5e-3, total_steps=LEARN_EPOCHS * len(loader), pct_start=0.15
    )
    for _ in range(LEARN_EPOCHS):
        model.train()
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(
                model(x), y, ignore_index=IGNORE_INDEX
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()
    metrics = SegmentationMetrics()
    with torch.no_grad():
        metrics.update(model(vx), vy)
    result = metrics.compute()
    # What guessing scores on the same targets: the most frequent class everywhere, and
    # classes drawn at random with their frequencies in these targets.
    counts = torch.bincount(vy[vy != 255], minlength=NUM_CLASSES)
    majority = SegmentationMetrics()
    majority.update(torch.full_like(vy, int(counts.argmax())), vy)
    guess = SegmentationMetrics()
    g = torch.Generator().manual_seed(0)
    guess.update(
        torch.multinomial(
            counts.double(), vy.numel(), replacement=True, generator=g
        ).view_as(vy),
        vy,
    )
    chance = max(majority.compute()["miou"], guess.compute()["miou"])
    assert result["miou"] > 0.15 and result["miou"] > 3 * chance, (result, chance)
    assert result["pixel_accuracy"] > 0.5
    learned = [name for name, iou in zip(CLASS_NAMES, result["iou"]) if iou > 0.1]
    assert {"road", "sidewalk", "building", "sky"} <= set(learned), learned
