"""The speed verdict names the faster side and, on a CPU, its 16-bit hardware."""

import dataclasses
from pathlib import Path

from ampbook import results
from ampbook.verdicts import speed_verdict

FIXTURES = Path(__file__).parent / "fixtures" / "results"


def _pair(mode: str):
    return next(
        p for p in results.load_results_dir(FIXTURES).pairs() if p.amp.mode == mode
    )


def test_gpu_pair_says_faster_or_slower_by_the_step_ratio():
    p = _pair("amp-fp16")
    text = speed_verdict(p)
    ratio = p.amp.step_s / p.baseline.step_s
    assert f"{ratio:.2f} times" in text and p.setting.device_name in text
    assert ("faster" if ratio < 1 else "slower") in text
    assert "CPU" not in text  # no CPU-instruction sentence for a GPU pair


def test_cpu_pair_reports_whether_the_cpu_has_the_instructions():
    p = _pair("amp-bf16")
    cpu = dataclasses.replace(p, amp=dataclasses.replace(p.amp, device="cpu"))
    assert "reports avx512_bf16: native bf16" in speed_verdict(
        cpu, ["avx2", "avx512_bf16"]
    )
    assert "reports no bf16 instructions" in speed_verdict(cpu, ["avx2"])
    one = dataclasses.replace(cpu, amp=dataclasses.replace(cpu.amp, epochs_completed=1))
    assert "one-off start-up costs" in speed_verdict(one, [])
