"""``python -m ampbook.calibration``: the references behind the doctor's calibrated AMP
speedups (chapter 6) and how far they hold, their leave-one-out (``--predictions``),
and ``--write`` to retrace their bounds after a change to the cost model."""

import sys
from typing import Sequence

from ampbook.core import cli
from ampbook.predict.calibrate import (
    leave_one_out,
    leave_one_out_table,
    leave_one_out_text,
    profile_bound_lines,
    references_table,
    self_check_lines,
    unreferenced_text,
)
from ampbook.predict.hostmodel import host_model
from ampbook.predict.references import Reference, references, write_bounds
from ampbook.results import load_results_dir


def build_parser() -> cli.ArgumentParser:
    """The options of ``python -m ampbook.calibration`` (no torch imported)."""
    p = cli.ArgumentParser(
        prog="python -m ampbook.calibration",
        formatter_class=cli.HelpFormatter,
        description="The references behind the doctor's calibrated AMP speedups and "
        "how far they hold: each layer profile's self-check and stored bound, the "
        "GPUs no reference of their generation covers; --predictions: the "
        "leave-one-out.",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help="retrace the published references' bounds (after a change to the cost "
        "model) and write them to data/reference/",
    )
    p.add_argument(
        "--results-dir",
        help="the committed GPU results whose layer profiles are references "
        "(default data/results)",
    )
    p.add_argument(
        "--predictions",
        action="store_true",
        help="the leave-one-out: each reference predicted by the others, the share "
        "inside their range and the median width",
    )
    p.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write what is printed as Markdown here (unwrapped); the terminal "
        "gets it laid out for its width, as the doctor's tables",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a --markdown file that exists and holds something else",
    )
    return p


def calibration_text(refs: Sequence[Reference], results_dir=None) -> str:
    """The references, then how far they hold: each layer profile against its own
    setting and against the bound it recorded, and the GPUs of the device table that no
    reference of their generation covers."""
    from ampbook.core.devices import load_devices

    return "\n\n".join([
        references_table(refs),
        "A share is the cost model's bound over the measured time (an efficiency), "
        "the 32-bit one of the GPU's baseline (TF32, or fp32 where it has no TF32): "
        "a profile's measured time is its kernel time, a published one's the whole "
        "step (host time included).",
        "Each layer profile applied to its own setting (its efficiencies were fitted "
        f"on it):\n\n{self_check_lines(refs)}",
        "Each layer profile's AMP bound as the book's cost model traced it (stored by "
        "--write) against the one the profile recorded when it was measured:\n\n"
        + profile_bound_lines(results_dir),
        unreferenced_text(list(load_devices()), refs),
    ])  # fmt: skip


@cli.command("python -m ampbook.calibration")
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.markdown:  # before any work: never replace what another command wrote
        cli.check_output_file(a.markdown, "--markdown", overwrite=a.overwrite)
    if a.write:
        write_bounds()
    results = load_results_dir(a.results_dir)  # read once, for every part below
    refs = references(results)
    if a.predictions:
        loo = leave_one_out(refs, host=host_model(results))
        md = f"{leave_one_out_table(loo)}\n\n{leave_one_out_text(loo)}"
    else:
        md = calibration_text(refs, results)
    print(cli.terminal_text(md))
    if a.markdown:
        try:
            cli.write_text_atomic(a.markdown, md + "\n")
        except OSError as err:
            cli.say(f"could not write {a.markdown}: {cli.os_error(err)[1]}")
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
