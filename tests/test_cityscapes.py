"""The decoded data cache (``--data-cache host|device``): images and labels decoded once
to uint8 at the training size, flipped and normalised per batch on the device. Its
batches are the loader's, bit for bit."""

import dataclasses

import pytest
import torch

from ampbook.segmentation.cityscapes import (
    CachedLoader,
    Cityscapes,
    DecodedCache,
    check_cache_fits,
    decoded_bytes,
)
from ampbook.segmentation.synthetic import synthetic_root
from ampbook.train import ConfigError, TrainConfig, run_name, run_training


@pytest.fixture(scope="module")
def root():
    return synthetic_root(5, 2, 64, 128)


@pytest.mark.parametrize("flip, normalize", [(True, True), (False, False)])
def test_cached_batches_are_the_loaders_bit_for_bit(root, flip, normalize):
    ds = Cityscapes(root, "train", 32, 64, flip=flip, normalize=normalize)
    cache = DecodedCache.build(ds, "cpu", workers=0)
    assert cache.nbytes == decoded_bytes(len(ds), 32, 64) == 5 * 4 * 32 * 64
    assert cache.images.dtype == cache.labels.dtype == torch.uint8
    sampler = torch.utils.data.DistributedSampler(
        ds, num_replicas=1, rank=0, shuffle=True, seed=4
    )
    loader = torch.utils.data.DataLoader(
        ds, batch_size=2, sampler=sampler, generator=torch.Generator()
    )
    cached = CachedLoader(cache, 2, "cpu", sampler=sampler, flip=flip)
    assert len(cached) == len(loader) == 3
    flipped = 0
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        torch.manual_seed(epoch)
        expected = list(loader)
        state = torch.get_rng_state()
        torch.manual_seed(epoch)
        got = list(cached)
        assert torch.equal(torch.get_rng_state(), state)  # the same draws
        order = list(sampler)
        for k, ((x, y), (cx, cy)) in enumerate(zip(expected, got, strict=True)):
            assert cx.dtype == x.dtype and cy.dtype == y.dtype == torch.int64
            assert torch.equal(cx, x) and torch.equal(cy, y)
            plain, _ = cache.batch(order[2 * k : 2 * k + 2])  # never flipped
            flipped += sum(not torch.equal(a, b) for a, b in zip(x, plain))
    assert (flipped > 0) == flip


def test_a_cache_that_does_not_fit_is_refused_with_its_size():
    with pytest.raises(ValueError, match=r"needs 4,000,000,000,000,000,000 bytes"):
        check_cache_fits(4 * 10**18, torch.device("cpu"))
    assert check_cache_fits(1000, torch.device("cpu")) == 1000
    with pytest.raises(ValueError, match="in each of 4 processes"):
        check_cache_fits(10**18, torch.device("cpu"), copies=4)


RUN = dict(
    device="cpu",
    height=32,
    width=64,
    workers=0,
    quiet=True,
    epochs=2,
    batch_size=2,
    synthetic_train=5,
    synthetic_val=2,
    flip=True,
    seed=2,
)


def test_a_cached_run_gives_the_numbers_of_the_loader_with_0_workers(tmp_path):
    runs = {}
    for cache in ("none", "host", "device"):
        cfg = TrainConfig(**RUN, data_cache=cache, out=str(tmp_path / cache))
        runs[cache] = run_training(cfg)
    numbers = ("train_loss", "val_loss", "val_miou", "val_iou", "optimizer_steps")
    ref = [{k: e[k] for k in numbers} for e in runs["none"]["epochs"]]
    for cache in ("host", "device"):
        r = runs[cache]
        assert [{k: e[k] for k in numbers} for e in r["epochs"]] == ref
        info = r["resolved"]["data_cache"]
        assert info["memory"] == "cpu"  # "device" on a CPU is host memory
        assert info["bytes"] == decoded_bytes(7, 32, 64) and info["images"] == 7
        assert info["build_s"] > 0 and r["resolved"]["workers"] == 0
        assert r["config"]["data_cache"] == cache
    assert runs["none"]["resolved"]["data_cache"] is None
    name = run_name(TrainConfig(**RUN))
    a = torch.load(tmp_path / "none" / f"{name}.ckpt", weights_only=True)["model"]
    b = torch.load(tmp_path / "host" / f"{name}.ckpt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)

    # resume: host and device hold the same bytes; a cache or none must match
    host = TrainConfig(**RUN, out=str(tmp_path / "host"))
    with pytest.raises(
        ConfigError, match="data_cache: checkpoint 'host' vs now 'none'"
    ):
        run_training(dataclasses.replace(host, resume=True, name=name))
    resumed = run_training(
        dataclasses.replace(host, resume=True, name=name, data_cache="device")
    )
    assert resumed["resolved"]["resumed_from_epoch"] == 2  # accepted


def test_a_cache_too_big_for_the_memory_stops_before_any_work(tmp_path, monkeypatch):
    import ampbook.segmentation.cityscapes

    monkeypatch.setattr(
        ampbook.segmentation.cityscapes, "available_bytes", lambda device: 10_000
    )
    cfg = TrainConfig(**RUN, data_cache="host", out=str(tmp_path / "o"))
    with pytest.raises(ConfigError) as err:
        run_training(cfg)
    assert f"needs {decoded_bytes(7, 32, 64):,} bytes" in str(err.value)
    assert "data_cache host" in str(err.value) and "10,000 bytes" in str(err.value)
    assert not list((tmp_path / "o").glob("*.json"))
