"""ampbook.core.devices: the peak table is complete, sourced, internally consistent, and
maps the names PyTorch reports to the right entries."""

from __future__ import annotations

import pytest
import yaml

from ampbook.core.devices import (
    DEVICES_FILE,
    FIGURE_FIELDS,
    attainable_tflops,
    device_for,
    display_name,
    find_device,
    gpu_hits,
    gpu_key,
    load_devices,
)

REQUIRED = (
    "rtx3070-desktop",
    "rtx3070-laptop",
    "a100-sxm-80gb",
    "h100-sxm",
    "h200-sxm",
)


@pytest.fixture(scope="module")
def devices():
    return load_devices()


def test_required_devices_with_sourced_figures(devices):
    assert set(REQUIRED) <= set(devices)
    for d in devices.values():
        for fig in FIGURE_FIELDS:
            value = getattr(d, fig)
            if value is None:
                continue
            src = d.sources[fig]
            assert src["title"] and src["url"].startswith("https://"), (d.key, fig)
            assert d.source_of(fig).startswith(src["title"])
        assert d.segment in ("GeForce", "data centre", "workstation")


def test_published_peaks_agree_with_units_times_clock(devices):
    """fp32 = CUDA cores x 2 FLOP x clock; fp16 tensor = tensor cores x FMA/clock x 2 x
    clock. Catches a typo in any figure, count or clock."""
    # dense fp16 FMAs per clock per tensor core, per architecture (Ada's fourth
    # generation does a quarter of Hopper's)
    fma = {"Volta": 64, "Ada": 128, "Hopper": 512}
    for d in devices.values():
        assert d.fp32_tflops == pytest.approx(
            d.cuda_cores * 2 * d.boost_clock_mhz * 1e-6, rel=0.01
        ), d.key
        per_tc = d.fma_per_clock_per_tensor_core()
        assert per_tc == pytest.approx(round(per_tc), rel=0.01), (d.key, per_tc)
        if fma.get(d.architecture):
            assert round(per_tc) == fma[d.architecture], d.key
        assert d.tensor_cores == 4 * d.sms or (
            d.architecture == "Volta" and d.tensor_cores == 8 * d.sms
        )


def test_geforce_halves_fp32_accumulate_data_centre_does_not(devices):
    for d in devices.values():
        expected = 2.0 if d.segment == "GeForce" else 1.0
        assert d.fp16acc_over_fp32acc == pytest.approx(expected, rel=0.01), d.key
    desk = devices["rtx3070-desktop"]
    assert desk.tensor_cores == 184 and devices["rtx3070-laptop"].tensor_cores == 160
    assert desk.peak_tflops("fp16") == desk.fp16_tflops_fp32acc == 40.6
    assert desk.tensor_over_fp32 == pytest.approx(2.0, rel=0.01)
    assert devices["a100-sxm-80gb"].tensor_over_fp32 == pytest.approx(16.0, rel=0.01)


def test_h200_is_an_h100_with_faster_memory(devices):
    h100, h200 = devices["h100-sxm"], devices["h200-sxm"]
    for fig in (
        "fp32_tflops",
        "tf32_tflops",
        "fp16_tflops_fp32acc",
        "bf16_tflops",
        "fp8_tflops",
    ):
        assert getattr(h200, fig) == pytest.approx(getattr(h100, fig), rel=0.01), fig
    assert h200.mem_bandwidth_gbs / h100.mem_bandwidth_gbs == pytest.approx(
        4.8 / 3.35, rel=0.01
    )
    assert h200.ridge_point("fp16") < h100.ridge_point("fp16")
    assert (
        devices["a100-sxm-80gb"].fp8_tflops is None
        and devices["a100-sxm-80gb"].ridge_point("fp8") is None
    )


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA GeForce RTX 3070", "rtx3070-desktop"),
        ("NVIDIA GeForce RTX 3070 Laptop GPU", "rtx3070-laptop"),
        ("NVIDIA GeForce RTX 3070 Ti", None),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA A100 80GB PCIe", None),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA GeForce RTX 3090", "rtx3090"),
        ("NVIDIA GeForce RTX 3090 Ti", None),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L40", None),
        ("NVIDIA RTX 6000 Ada Generation", "rtx6000-ada"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H200 NVL", None),
        ("Tesla V100-SXM2-32GB", "v100-sxm2"),
        ("AMD EPYC", None),
    ],
)
def test_find_device_by_torch_name(devices, name, key):
    found = find_device(name, devices)
    assert (found.key if found else None) == key


def test_the_gpus_readers_own_with_their_dense_peaks(devices):
    """Issue 29's GPUs, each figure dense and from its datasheet: AMP's fp16 mode (fp32
    accumulate) at half the fp16-accumulate rate on GeForce cards only."""
    want = {  # fp32, TF32, fp16 with fp32 accumulate, GB/s, GB
        "rtx3090": (35.6, 35.6, 71, 936, 24),
        "rtx4090": (82.6, 82.6, 165.2, 1008, 24),
        "a10": (31.2, 62.5, 125, 600, 24),
        "l4": (30.3, 60, 121, 300, 24),
        "l40s": (91.6, 183, 362.05, 864, 48),
        "rtx6000-ada": (91.1, 182.1, 364.2, 960, 48),
        "a100-sxm-40gb": (19.5, 156, 312, 1555, 40),
        "a100-pcie-40gb": (19.5, 156, 312, 1555, 40),
        "h100-pcie": (51, 378, 756.5, 2000, 80),
    }
    for key, figures in want.items():
        d = devices[key]
        got = (d.fp32_tflops, d.tf32_tflops, d.fp16_tflops_fp32acc,
               d.mem_bandwidth_gbs, d.memory_gb)  # fmt: skip
        assert got == pytest.approx(figures), key
        assert d.bf16_tflops == d.fp16_tflops_fp32acc, key
    assert devices["rtx4090"].fp16_tflops_fp16acc == 330.3


def test_cpu_has_no_table_entry():
    assert device_for("cpu") is None


def test_peak_lookup_and_roofline(devices):
    d = devices["h100-sxm"]
    assert d.peak_tflops("fp8") == 1978.9 and d.peak_tflops("tf32") == 494.7
    with pytest.raises(ValueError, match="no peak for dtype"):
        d.peak_tflops("int8")
    ridge = d.ridge_point("fp16")
    assert attainable_tflops(ridge * 2, 989.4, d.mem_bandwidth_gbs) == 989.4
    assert attainable_tflops(ridge / 2, 989.4, d.mem_bandwidth_gbs) == pytest.approx(
        989.4 / 2
    )
    with pytest.raises(ValueError):
        attainable_tflops(0, 1, 1)


def _write(tmp_path, doc):
    path = tmp_path / "devices.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_bad_tables_get_clear_errors(tmp_path):
    doc = yaml.safe_load(DEVICES_FILE.read_text())
    broken = yaml.safe_load(DEVICES_FILE.read_text())
    del broken["devices"]["h100-sxm"]["sources"]["fp8_tflops"]
    with pytest.raises(
        ValueError, match="'h100-sxm' figure 'fp8_tflops' has no source"
    ):
        load_devices(_write(tmp_path, broken))
    broken = yaml.safe_load(DEVICES_FILE.read_text())
    broken["devices"]["h200-sxm"]["sources"]["fp32_tflops"] = "a-blog"
    with pytest.raises(ValueError, match="unknown source 'a-blog'"):
        load_devices(_write(tmp_path, broken))
    broken = yaml.safe_load(DEVICES_FILE.read_text())
    del broken["devices"]["rtx3070-desktop"]["mem_bandwidth_gbs"]
    with pytest.raises(ValueError, match="lacks field 'mem_bandwidth_gbs'"):
        load_devices(_write(tmp_path, broken))
    broken = yaml.safe_load(DEVICES_FILE.read_text())
    broken["devices"]["rtx3070-desktop"]["segment"] = "gaming"
    with pytest.raises(ValueError, match="segment"):
        load_devices(_write(tmp_path, broken))
    assert set(load_devices(_write(tmp_path, doc))) == set(doc["devices"])


def test_the_posts_tensor_core_claims_checked():
    from ampbook.chapters.ch2 import tensor_core_claims
    from ampbook.core.paths import load_reference

    rows = tensor_core_claims(load_reference("seed_post"))
    text = {r[0]: r[1] for r in rows}
    assert "no tensor cores" in text["Tesla P100 has tensor cores"]
    assert "RTX 20xx" in text["GTX 20xx has tensor cores"]
    assert (
        "RTX 3070 64 with fp32 accumulate" in text["64 FMA per clock per tensor core"]
    )
    speedup = text["fp16 throughput 2-8x fp32"]
    assert "V100 7.96x" in speedup and "P100 2x" in speedup and "RTX 3070 2x" in speedup
    assert all(r[2] for r in rows)  # every row names its source


@pytest.mark.parametrize(
    "given, shown",
    [
        ("h200-sxm", "H200 SXM"),
        ("rtx3070-desktop", "RTX 3070"),
        ("NVIDIA GeForce RTX 3070 Laptop GPU", "RTX 3070 Laptop"),
        ("NVIDIA L4", "L4"),
    ],
)
def test_display_name(devices, given, shown):
    assert display_name(given, devices) == shown


def test_display_name_refuses_empty(devices):
    with pytest.raises(ValueError, match="GPU name or table key"):
        display_name("  ", devices)


@pytest.mark.parametrize(
    "given, key",
    [
        ("h200-sxm", "h200-sxm"),  # a key
        ("h200", "h200-sxm"),  # an alias
        ("A100", "a100-sxm-80gb"),
        ("H100 SXM", "h100-sxm"),  # a short name, in any case and spacing
        ("RTX 6000 Ada", "rtx6000-ada"),
        ("NVIDIA H200", "h200-sxm"),  # the vendor's words dropped
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        (" rtx3070-laptop ", "rtx3070-laptop"),
        ("4090", "rtx4090"),  # a part of one key or short name
        ("3090", "rtx3090"),
        ("l4", "l4"),  # a key before the part of l40s it also is
        ("L40S", "l40s"),
    ],
)
def test_gpu_key_reads_keys_short_names_and_aliases(devices, given, key):
    assert gpu_key(given, devices) == key


def test_gpu_hits_stops_at_the_first_rule_that_matches(devices):
    assert gpu_hits("l4", devices) == ["l4"]
    assert gpu_hits("l40", devices) == ["l40s"]
    rtx30 = ["rtx3070-desktop", "rtx3070-laptop", "rtx3090"]
    assert gpu_hits("rtx30", devices) == rtx30
    assert gpu_hits("tpu", devices) == [] and gpu_hits("", devices) == []


@pytest.mark.parametrize(
    "given, message",
    [
        (
            "rtx30",
            "ambiguous GPU 'rtx30': it names rtx3070-desktop (RTX 3070), "
            "rtx3070-laptop (RTX 3070 Laptop), rtx3090 (RTX 3090)",
        ),
        (
            "H2000",
            "unknown GPU 'h2000'; did you mean h200-sxm? (a key, a short name or an "
            "alias)",
        ),
        # the nearest distance only: h300 is one edit from h100 and h200, not 3070
        (
            "h300",
            "unknown GPU 'h300'; did you mean h100-sxm or h200-sxm? (a key, a short "
            "name or an alias)",
        ),
        ("rtx5090", "unknown GPU 'rtx5090'; did you mean rtx3090 or rtx4090? "),
        ("zzzz", "unknown GPU 'zzzz'; the table knows RTX 3070, RTX 3070 Laptop, "),
        ("", "unknown GPU ''; the table knows RTX 3070, "),
    ],
)
def test_gpu_key_says_why_a_name_names_no_single_gpu(devices, given, message):
    with pytest.raises(ValueError) as err:
        gpu_key(given, devices)
    assert str(err.value).startswith(message)
    if "the table knows" in message:  # every GPU's short name, in table order
        assert str(err.value).endswith(
            ", ".join(d.short_name for d in devices.values())
        )


def test_pick_device_takes_the_cpu_or_a_cuda_gpu_this_machine_has(monkeypatch):
    """torch.device accepts mps, meta or cuda:7; the book runs on the CPU or a CUDA GPU
    the machine has, and says which before any work (the runner, the doctor and every
    notebook's device parameter go through here)."""
    import torch

    from ampbook.core.devices import pick_device
    from ampbook.train import TrainConfig
    from ampbook.train.config import ConfigError, _device

    for name in ("meta", "mps", "xpu:0", "cuda:x"):
        with pytest.raises(ValueError, match=f"'{name}' is not one of auto, cpu, cuda"):
            pick_device(name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pick_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(RuntimeError) as err:
        pick_device("cuda:2")
    assert str(err.value) == (
        "device 'cuda:2' does not exist: this machine has 2 CUDA devices (give cuda:0 "
        "to cuda:1)"
    )
    # one process per GPU; a third process on two GPUs has none of its own
    assert _device(TrainConfig(device="cuda"), 2, 1) == torch.device("cuda", 1)
    with pytest.raises(ConfigError) as err:
        _device(TrainConfig(device="cuda"), 3, 2)
    assert str(err.value) == (
        "process local_rank 2 of 3 has no GPU of its own: this machine has 2 CUDA "
        "devices; start at most 2 per machine"
    )
    # a torch.device is checked as its name is
    for bad in (torch.device("meta"), torch.device("cuda", 7)):
        with pytest.raises(ConfigError, match=f"'{bad}'"):
            _device(TrainConfig(device=bad), 1, 0)


def test_the_doctor_names_its_flag_once_and_hints_only_when_it_times(monkeypatch):
    from ampbook.chapters.ch6.diagnosis import DoctorConfig, _pick_device
    from ampbook.predict.specs import DoctorError

    with pytest.raises(DoctorError) as err:
        _pick_device(DoctorConfig("erfnet", device="mps"))
    assert str(err.value) == (
        "--device 'mps' is not one of auto, cpu, cuda or cuda:N; did you mean 'cpu'?; "
        "--no-measure predicts without timing"
    )
    with pytest.raises(DoctorError) as err:
        _pick_device(DoctorConfig("erfnet", device="meta", measure=False))
    assert "--no-measure" not in str(err.value)
