"""ampbook.measure.timing: agrees with torch.utils.benchmark, excludes warm-up, waits
for asynchronous work, rotates inputs, refuses zeros, and reports rates and spreads
correctly."""

from __future__ import annotations

import contextlib
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.utils.benchmark as tbench

from ampbook.measure import timing
from ampbook.measure.timing import (
    TimingResult,
    benchmark,
    buffers_needed,
    default_sync,
    random_tensor,
    time_elementwise,
    time_matmul,
    working_set_bytes,
)


@contextlib.contextmanager
def threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _compare_once(n: int, rounds: int) -> tuple[float, float]:
    """The fastest call of each timer over ``rounds`` alternating rounds."""
    ours, theirs = [], []
    a, b, c = (random_tensor((n, n)) for _ in range(3))
    timer = tbench.Timer(
        "torch.matmul(a, b, out=c)",
        globals={"torch": torch, "a": a, "b": b, "c": c},
        num_threads=torch.get_num_threads(),
    )
    for _ in range(rounds):  # alternate, so drifts in machine load hit both alike
        m = timer.blocked_autorange(min_run_time=0.3)
        theirs.append(min(m.times))  # per call, as ours
        # Same work (one input set, as the Timer has) and the same calls per timed
        # block, so that preemption by other processes hits both alike.
        ours.append(
            min(
                time_matmul(
                    n,
                    dtype="fp32",
                    device="cpu",
                    buffers=1,
                    number=m.number_per_run,
                    repeats=3,
                    min_time=0.3,
                ).times_s
            )
        )
    return min(ours), min(theirs)


def test_matmul_time_agrees_with_torch_utils_benchmark():
    """The same fastest call within 5%. Load from other processes only ever adds time,
    so the fastest timed block of each timer is its reading of the matmul itself: with
    two busy loops beside it on a 2-core machine, the two medians drifted 11-15% apart
    and the two minima 0.2%. One thread keeps a busy machine from stalling every
    parallel region on a descheduled sibling thread. The whole comparison is retried
    once (twice on a busy machine). (Warm-up and synchronisation have their own tests
    below: neither a median nor a minimum sees one slow warm-up call, and a CPU matmul
    is not asynchronous.)"""
    load = timing.machine_load()
    with threads(1):
        for attempt in range(
            3 if load["busy"] else 2
        ):  # a real error repeats; a burst of load does not
            ours, theirs = _compare_once(256, rounds=7)
            if abs(ours / theirs - 1) < 0.05:
                break
    assert abs(ours / theirs - 1) < 0.05, (
        f"ampbook {ours * 1e3:.4f} ms vs torch.utils.benchmark {theirs * 1e3:.4f} ms "
        f"(fastest call of each; load average {load['load1']} on {load['cpus']} CPUs)"
    )


def test_warmup_calls_are_run_but_never_timed():
    calls = []

    def fn():
        calls.append(None)
        time.sleep(
            0.03 if len(calls) <= 3 else 0.002
        )  # the first 3 calls are slow (cold)

    r = benchmark(fn, warmup=3, repeats=8, min_time=0, number=1)
    assert len(calls) == 3 + r.samples * r.number
    assert r.samples == 8
    assert max(r.times_s) < 0.02, (
        f"a slow warm-up call leaked into the samples: {r.times_s}"
    )
    # Without warm-up the cold calls are measured, which the test above would catch.
    calls.clear()
    cold = benchmark(fn, warmup=0, repeats=8, min_time=0, number=1)
    assert max(cold.times_s) > 0.025


def test_clock_waits_for_asynchronous_work():
    """Work that returns before it is done (as CUDA kernels do) is timed only when the
    clock stops after `sync`; without it the measurement is near zero."""
    pool = ThreadPoolExecutor(max_workers=1)
    pending = []
    work_s = 0.02

    def launch():
        pending.append(pool.submit(time.sleep, work_s))

    def sync():
        while pending:
            pending.pop().result()

    try:
        synced = benchmark(launch, warmup=1, repeats=5, min_time=0, number=1, sync=sync)
        assert synced.median_s >= 0.9 * work_s, synced
        unsynced = benchmark(
            launch, warmup=1, repeats=5, min_time=0, number=1, sync=lambda: None
        )
        assert unsynced.median_s < 0.2 * work_s, (
            "the fake is not asynchronous, the test proves nothing"
        )
    finally:
        sync()
        pool.shutdown()


def test_default_sync_and_clock_by_device():
    assert default_sync(torch.device("cpu"))() is None
    assert not timing._Clock(torch.device("cpu"), lambda: None).cuda
    assert timing._Clock(torch.device("cuda"), lambda: None).cuda  # CUDA events


@pytest.mark.cuda
def test_cuda_events_time_a_matmul():
    r = time_matmul(2048, dtype="fp16", device="cuda", min_time=0.05)
    host = []
    a, b = (random_tensor((2048, 2048), "fp16", "cuda") for _ in range(2))
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        host.append((time.perf_counter() - t) / 10)
    assert 0.7 < r.median_s / statistics.median(host) < 1.3
    assert 0 < r.tflops < 5000


def test_inputs_rotate_through_buffers_sized_from_the_cache():
    made = []

    def make():
        made.append(random_tensor(1024))  # 4 KiB
        return (made[-1],)

    seen = []
    r = benchmark(
        lambda x: seen.append(x.data_ptr()),
        make,
        warmup=0,
        repeats=10,
        min_time=0,
        number=1,
        cache_bytes=16 * 1024,
    )  # 2 x 16 KiB / 4 KiB = 8 sets
    assert r.buffers == len(made) == 8
    assert seen[:8] == [t.data_ptr() for t in made] and seen[8:10] == seen[:2]
    assert buffers_needed(1 << 20, 4 << 20) == 8
    assert buffers_needed(8 << 20, 4 << 20) == 1  # already twice the cache
    assert buffers_needed(1 << 10, 1 << 30, max_buffers=64) == 64
    assert buffers_needed(1 << 20, 1 << 30, max_total_bytes=4 << 20) == 4
    a = torch.ones(10)
    assert (
        working_set_bytes((a, a, [a[2:]], {"b": torch.ones(5, dtype=torch.float64)}))
        == 40 + 40
    )


def test_zero_inputs_are_refused():
    with pytest.raises(ValueError, match="all zeros"):
        benchmark(torch.neg, lambda: torch.zeros(8), warmup=0, repeats=1, min_time=0)
    r = benchmark(
        torch.neg,
        lambda: torch.zeros(8),
        warmup=0,
        repeats=1,
        min_time=0,
        check_inputs=False,
    )
    assert r.samples == 1
    assert (random_tensor((64, 64), "bf16") != 0).any()


def test_result_statistics_and_rates():
    r = TimingResult(
        name="x",
        device="cpu",
        times_s=tuple(float(i) for i in range(1, 12)),
        number=1,
        warmup=0,
        buffers=1,
        flops=6e12,
        bytes_moved=3e9,
    )
    assert (
        r.median_s == 6.0
        and r.p10_s == pytest.approx(2.0)
        and r.p90_s == pytest.approx(10.0)
    )
    d = r.to_dict()
    assert d["q75_s"] - d["q25_s"] == pytest.approx(5.0)  # the quartiles
    assert r.tflops == pytest.approx(1.0) and r.gbps == pytest.approx(0.5)
    assert d["median_s"] == 6.0 and d["tflops"] == pytest.approx(1.0)


def test_sampling_obeys_repeats_min_time_and_max_time():
    fn = lambda: time.sleep(0.005)  # noqa: E731
    r = benchmark(fn, warmup=1, repeats=2, min_time=0.06, number=1)
    assert r.samples >= 2 and sum(r.times_s) >= 0.06
    r = benchmark(fn, warmup=0, repeats=1000, min_time=0, max_time=0.03, number=1)
    assert 3 <= r.samples < 20
    r = benchmark(lambda: None, warmup=2, repeats=3, min_time=0, block_time=1e-3)
    assert r.number > 1  # fast calls are grouped into blocks of about block_time


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="callable"):
        benchmark(42)
    with pytest.raises(TypeError, match="make_inputs"):
        benchmark(torch.neg, torch.ones(3))
    with pytest.raises(ValueError, match="repeats"):
        benchmark(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="warmup"):
        benchmark(lambda: None, warmup=-1)
    with pytest.raises(ValueError, match="unknown dtype"):
        time_matmul(8, dtype="fp12", device="cpu")
    with pytest.raises(ValueError, match="tf32"):
        time_matmul(8, dtype="tf32", device="cpu")
    with pytest.raises(ValueError, match="fp8"):
        time_matmul(16, dtype="fp8", device="cpu")
    with pytest.raises(ValueError, match="positive integer"):
        time_matmul(0, device="cpu")
    with pytest.raises(ValueError, match="numel"):
        time_elementwise(-5, device="cpu")


def test_matmul_and_elementwise_conveniences_count_work():
    r = time_matmul(
        32, 16, 8, dtype="bf16", device="cpu", warmup=1, repeats=2, min_time=0
    )
    assert r.flops == 2 * 32 * 16 * 8
    assert r.bytes_moved == (32 * 8 + 8 * 16 + 32 * 16) * 2
    assert r.extra == {"kind": "matmul", "dtype": "bf16", "n": 32, "m": 16, "k": 8}
    e = time_elementwise(1000, "fp16", "cpu", warmup=1, repeats=2, min_time=0)
    assert e.bytes_moved == 3 * 1000 * 2 and e.flops == 1000 and e.gbps > 0
    assert e.to_dict()["kind"] == "elementwise"


def test_machine_load_reports_busy_by_load_per_cpu():
    load = timing.machine_load()
    assert load["cpus"] >= 1
    if load["load1"] is not None:
        assert load["busy"] == (load["load1"] > 1.5 * load["cpus"])


def test_last_level_cache_reads_the_largest_cache_the_os_lists(tmp_path, monkeypatch):
    for i, size in enumerate(("32K", "1024K", "32M", "512")):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    monkeypatch.setattr(timing, "CPU_CACHE_GLOB", str(tmp_path / "index*" / "size"))
    size, where = timing.last_level_cache("cpu")
    assert size == 32 * 2**20 and "/sys" in where
    monkeypatch.setattr(timing, "CPU_CACHE_GLOB", str(tmp_path / "none*" / "size"))
    assert timing.last_level_cache("cpu") == (
        timing.DEFAULT_CACHE_BYTES,
        "not exposed by the OS: assumed",
    )
