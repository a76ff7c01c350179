"""What the machine's load (``ampbook.measure.timing.machine_load``) means for the
timings a benchmark or a chapter prints: one line."""

from __future__ import annotations


def load_verdict(load: dict, device_type: str) -> str:
    """One line: was the machine busy while CPU timings were taken?"""
    level = "unknown" if load.get("load1") is None else f"{load['load1']:.1f}"
    head = f"load average {level} on {load['cpus']} CPUs: "
    if device_type != "cpu":
        return head + "GPU timings do not depend on it much."
    if load.get("busy"):
        return head + "BUSY, read the CPU timings below as this busy machine's."
    if load.get("load1") is None or load["load1"] > 0.5 * load["cpus"]:
        return head + "shared with other work, expect noisy CPU timings below."
    return head + "quiet, the CPU timings below are the CPU's."
