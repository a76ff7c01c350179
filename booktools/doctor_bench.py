"""How long the doctor's full report takes: ``python -m ampbook.doctor`` timed.

    python -m booktools.doctor_bench [--model torchvision:resnet50]
        [--input 3,224,224] [--batch 32] [--device cpu] [--target-s 60] [--json PATH]

runs ``ampbook.chapters.ch6.diagnosis.diagnose`` once, measured steps included (the doctor
times them at a small size on a CPU), and prints the wall time of each part (building
the model, tracing, roofline, the verdict, the timed steps), their total, the answer's
time (what the command takes to print its first screen), and the time since Python
started (imports included: what the user waits for, less printing), which is held
against the target: the whole report for ResNet-50 at 224x224, batch 32, in under 60 s
on a 2-core CPU. The report's CPU time and the machine's load are printed beside it (a
busy machine's wall times are not the machine's).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from unittest import mock

from ampbook.core import cli


def process_age_s() -> float | None:
    """Seconds since this process started (Linux's /proc; None elsewhere)."""
    import os

    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@cli.command("python -m booktools.doctor_bench")
def main(argv: list[str] | None = None) -> int:
    p = cli.ArgumentParser(
        prog="python -m booktools.doctor_bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=cli.HelpFormatter,
    )
    p.add_argument(
        "--model", default="torchvision:resnet50", help="the doctor's --model"
    )
    p.add_argument(
        "--input", default="3,224,224", help="one sample's shape (the doctor's)"
    )
    p.add_argument("--batch", type=cli.positive_int, default=32, help="batch size")
    p.add_argument(
        "--device", default="cpu", help="where the steps are timed: cpu or cuda"
    )
    p.add_argument(
        "--target-s",
        type=cli.positive_float,
        default=60.0,
        help="the seconds the whole report should take (exit 1 when over)",
    )
    p.add_argument("--json", default=None, help="also write the numbers to this file")
    p.add_argument(
        "--overwrite", action="store_true", help="replace a --json file that exists"
    )
    a = p.parse_args(argv)
    from ampbook.chapters.ch6.diagnosis import (
        DoctorConfig,
        DoctorError,
        diagnose,
    )
    from ampbook.doctor import parse_input
    from ampbook.measure.timing import machine_load

    if a.json:  # checked before the report is timed, written after
        cli.check_output_file(a.json, "--json", overwrite=a.overwrite)
    try:
        cfg = DoctorConfig(
            model=a.model,
            input=parse_input(a.input),
            batch=a.batch,
            device=a.device,
        )
        load = machine_load()
        # a first run's time: every step traced, no kept trace read back
        with (
            tempfile.TemporaryDirectory() as cold,
            mock.patch.dict(os.environ, {"AMPBOOK_CACHE": cold}),
        ):
            start, cpu = time.perf_counter(), time.process_time()
            report = diagnose(cfg)
            total, cpu = time.perf_counter() - start, time.process_time() - cpu
    except DoctorError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    parts = report["seconds"]
    print(f"doctor on {a.model}, {a.batch} x {a.input}, measured on {a.device}")
    print("  (every step traced, as a first run: no kept trace read)")
    for name, s in parts.items():
        print(f"  {name:<10} {s:7.2f} s")
    since = process_age_s()
    held = total if since is None else since
    verdict = "within" if held <= a.target_s else "OVER"
    print(f"  {'report':<10} {total:7.2f} s  (the parts above)")
    answer = sum(s for name, s in parts.items() if name != "measured")
    print(
        f"  {'answer':<10} {answer:7.2f} s  (the parts before measured: when the "
        "command prints its first screen)"
    )
    if since is not None:
        print(
            f"  {'process':<10} {since:7.2f} s  (since Python started, imports "
            "included: `python -m ampbook.doctor` end to end, less printing)"
        )
    print(
        f"  {'target':<10} {a.target_s:7.2f} s  ({held / a.target_s:.0%} of it, "
        f"{'process' if since is not None else 'report'} time: {verdict})"
    )
    print(f"  {'cpu time':<10} {cpu:7.2f} s  (the report, all threads)")
    level = "no load average" if load["load1"] is None else f"{load['load1']:.2f}"
    print(
        f"  machine load {level} on {load['cpus']} CPUs"
        + ("  (busy: timings are noisy)" if load["busy"] else "")
    )
    if a.json:
        cli.save_result(
            a.json,
            {"total_s": total, "answer_s": answer, "process_s": since, "cpu_s": cpu,
             "parts_s": parts, "load": load},
        )  # fmt: skip
    return 0 if held <= a.target_s else 1


if __name__ == "__main__":
    sys.exit(main())
