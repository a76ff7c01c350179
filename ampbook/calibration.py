"""``python -m ampbook.calibration``: the references behind the doctor's calibrated AMP
speedups (chapter 6), their leave-one-out (``--predictions``), and ``--write`` to
retrace their bounds after a change to the cost model."""

import sys
from typing import Sequence

from ampbook.core import cli
from ampbook.predict.calibrate import COVER, GOAL_WIDTH, layout_text, leave_one_out
from ampbook.predict.references import Reference, references, write_bounds


def predictions_table(refs: Sequence[Reference]) -> str:
    """The leave-one-out as Markdown: per reference, the range the others predict for
    it, the references that set it, its measured speedup and whether the range holds
    it; then the share held and the median width."""
    loo = leave_one_out(refs)
    lines = [
        "| reference | from | layout (32-bit / AMP) | predicted by the others | "
        "set by | measured | inside |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in loo["rows"]:
        lines.append(
            f"| {r['label']} | {r['publisher']} | {layout_text(r['layouts'])} | "
            f"{r['point']:.2f}x ({r['low']:.2f}-{r['high']:.2f}x) | "
            f"{', '.join(r['basis'][:3])} | {r['measured']:.2f}x ({r['what']}) | "
            f"{'yes' if r['inside'] else 'no'} |"
        )
    lines.append("")
    if loo["n"]:
        lines.append(
            f"Leave-one-out: {sum(r['inside'] for r in loo['rows'])} of {loo['n']} "
            f"references inside the range the others predict ({loo['inside']:.0%}); "
            f"median width {loo['median_width']:.2f}x (high / low); goal: at least "
            f"{COVER:.0%} inside at a median width of at most {GOAL_WIDTH:g}x."
        )
    if loo["no_range"]:
        lines.append(f"No other reference applies to: {', '.join(loo['no_range'])}.")
    return "\n".join(lines)


def build_parser() -> cli.ArgumentParser:
    """The options of ``python -m ampbook.calibration`` (no torch imported)."""
    p = cli.ArgumentParser(
        prog="python -m ampbook.calibration",
        formatter_class=cli.HelpFormatter,
        description="The references behind the doctor's calibrated AMP speedups.",
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
        help="also write the table as Markdown here (unwrapped); the terminal gets it "
        "laid out for its width, as the doctor's tables",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a --markdown file that exists and holds something else",
    )
    return p


def references_markdown(refs) -> str:
    """The references as a Markdown table (the cost model's efficiencies beside the
    measured speedup) and what an efficiency is."""
    from ampbook.core.devices import display_name

    lines = [
        "| reference | GPU | kind | layout | fp32 eff. | AMP eff. | speedup |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in refs:
        fam = r.baseline_family
        e32, e16 = r.step_efficiency[fam], r.step_efficiency["16-bit"]
        lay = layout_text((r.layout.get(fam), r.layout.get("16-bit")))
        lines.append(
            f"| {r.network} | {display_name(r.gpu)} | {r.kind} | {lay} | {e32:.0%} | "
            f"{e16:.0%} | {r.measured_speedup:.2f} |"
        )
    return "\n".join(lines) + (
        "\n\nEfficiency: the cost model's bound over the measured time; a profile's "
        "is its kernel time, a published one's the whole step (host time included)."
    )


@cli.command("python -m ampbook.calibration")
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.markdown:  # before any work: never replace what another command wrote
        cli.check_output_file(a.markdown, "--markdown", overwrite=a.overwrite)
    if a.write:
        write_bounds()
    refs = references(a.results_dir)
    md = predictions_table(refs) if a.predictions else references_markdown(refs)
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
