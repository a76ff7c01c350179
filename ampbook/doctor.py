"""Will AMP help *this* model? ``python -m ampbook.doctor``, chapter 6's command: the
answer as soon as the step is traced, then the steps timed (on a GPU by default) and
the sections. Its parser imports no torch (``--help`` answers at once)."""

from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path

from ampbook.core import cli

# The choices the help names (the diagnosis checks the values; a test, the names).
_HELP_PRECISIONS = "fp32-tf32, amp-fp16, amp-bf16"
_HELP_FORMATS = "channels_first or channels_last"
_HELP_LOSSES = "cross-entropy or mse"

# Why a CPU times no step unless asked (``--measure``): the help and section 4 say it.
CPU_TIMING_WHY = (
    "the answer is a prediction for GPUs, and steps timed on a CPU, at a small "
    "size, say how AMP does on that CPU, not on a GPU; they take a minute or more, "
    "fp16's most: a CPU runs its step many times slower than fp32's"
)


def build_parser() -> cli.ArgumentParser:
    """The doctor's options (no torch)."""
    p = cli.ArgumentParser(
        prog="python -m ampbook.doctor",
        formatter_class=cli.HelpFormatter,
        description="Will AMP help this model? The expected speedup per GPU first, "
        "then coverage, memory, roofline per GPU, steps timed here (on a GPU; on "
        "a CPU with --measure) and what to try.",
    )
    for add in (_setting_options, _step_options, _timing_options, _file_options):
        add(p)
    return p


def _setting_options(p: cli.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        help="'erfnet', 'torchvision:NAME' (no weights are downloaded) or "
        "'package.module:callable' (called with no arguments, returns an nn.Module)",
    )
    p.add_argument(
        "--input",
        help="one sample's shape, any rank: C,H,W, or C,T,H,W for video (default "
        "3,512,1024 for erfnet, else 3,224,224)",
    )
    p.add_argument(
        "--batch",
        type=cli.positive_int,
        help="batch size (default 6 for erfnet, else 32)",
    )
    p.add_argument(
        "--device",
        default="auto",
        help="where the steps are measured: auto (CUDA when there is one), cpu or "
        "cuda[:N]",
    )
    p.add_argument(
        "--precisions",
        default=_HELP_PRECISIONS.replace(" ", ""),
        help=f"comma-separated, from {_HELP_PRECISIONS} (fp32-tf32, the baseline, "
        "is always included: fp32 with TF32 on for convolutions and matrix products "
        "where the GPU has TF32; fp32 is accepted and means the same baseline here)",
    )
    p.add_argument(
        "--gpus",
        help="comma-separated GPUs of the device table: keys, short names or "
        "aliases such as a100,h200,4090 (default: every GPU of the table)",
    )
    p.add_argument(
        "--loader-images-per-s",
        type=cli.positive_float,
        help="what your input pipeline delivers: says which side bounds the epoch",
    )
    p.add_argument(
        "--memory-format",
        default="channels_first",
        help=f"the layout your training loop runs: {_HELP_FORMATS} (a loop that "
        "calls .to(memory_format=torch.channels_last) on the model and each batch); "
        "default channels_first, PyTorch's",
    )


def _step_options(p: cli.ArgumentParser) -> None:
    p.add_argument(
        "--loss",
        default="cross-entropy",
        help=f"the loss of the traced step: {_HELP_LOSSES} (default cross-entropy "
        "against random class targets)",
    )
    p.add_argument(
        "--output",
        help="which output the loss reads when the model returns several: a dict "
        "key, a tuple index or a named-tuple field (default: a dict's 'out' entry, "
        "else the first tensor)",
    )
    p.add_argument(
        "--forward-only",
        action="store_true",
        help="diagnose the forward pass alone (inference, or a model with no "
        "trainable parameter): no backward is traced or timed",
    )


def _timing_options(p: cli.ArgumentParser) -> None:
    timing = p.add_mutually_exclusive_group()
    timing.add_argument(
        "--measure",
        action="store_true",
        help="time the steps on this machine when it has no GPU too. Off by default "
        "on a CPU: " + CPU_TIMING_WHY,
    )
    timing.add_argument(
        "--no-measure",
        action="store_true",
        help="predict only: skip the timed steps on a GPU too",
    )
    p.add_argument(
        "--repeats",
        type=cli.positive_int,
        default=3,
        help="timed steps per variant on CUDA (default 3)",
    )
    p.add_argument(
        "--results-dir",
        help="committed GPU results to calibrate on (default data/results)",
    )


def _file_options(p: cli.ArgumentParser) -> None:
    p.add_argument("--json", help="also write the report's numbers as JSON here")
    p.add_argument(
        "--markdown", help="also write the report as Markdown here (unwrapped)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a --json or --markdown file that exists and holds something else",
    )


def measures_by_default(device: str) -> bool:
    """Whether steps are timed without ``--measure``: on a GPU, not on a CPU (a
    ``--device`` the diagnosis refuses counts as a GPU, so that its error is seen)."""
    d = str(device).strip().lower()
    if d == "cpu":
        return False
    if d != "auto":
        return True
    import torch

    return torch.cuda.is_available()


def parse_input(text: str) -> tuple[int, ...]:
    """``--input "3,224,224"`` -> (3, 224, 224): one sample's shape, of any rank."""
    from ampbook.predict.specs import DoctorError

    try:  # int() strips the spaces around each part
        dims = tuple(int(p) for p in str(text).replace("x", ",").split(","))
    except ValueError:
        dims = ()
    if not dims or min(dims) < 1:
        raise DoctorError(
            f"--input {text!r}: give one sample's shape as positive integers, e.g. "
            "3,224,224 (C,H,W) or 3,16,112,112 (C,T,H,W)"
        )
    return dims


@cli.command("python -m ampbook.doctor")
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    progress = cli.Progress("doctor", transient=True)
    progress("loading torch and the model")
    from ampbook.chapters.ch6.diagnosis import (
        REPORT_SCHEMA,
        DoctorConfig,
        DoctorError,
        diagnose,
    )  # fmt: skip
    from ampbook.chapters.ch6.report_text import report_body, report_head, to_markdown

    measure = a.measure or (not a.no_measure and measures_by_default(a.device))
    try:
        check_outputs(a.json, a.markdown, REPORT_SCHEMA, overwrite=a.overwrite)
        cfg = DoctorConfig(
            model=a.model,
            input=parse_input(a.input) if a.input else None,
            batch=a.batch,
            device=a.device,
            precisions=a.precisions,  # the diagnosis checks these two first
            gpus=a.gpus,
            loader_images_per_s=a.loader_images_per_s,
            loss=a.loss,
            measure=measure,
            repeats=a.repeats,
            results_dir=a.results_dir,
            output=a.output,
            memory_format=a.memory_format,
            backward=not a.forward_only,
            progress=progress,
            caller="cli",
        )

        def answer_first(predicted: dict) -> None:
            progress.clear()
            print(cli.terminal_text(report_head(predicted)), flush=True)

        report = diagnose(cfg, on_prediction=answer_first)
    except DoctorError as e:
        progress.clear()
        cli.say(e.headline if e.detail else str(e))
        if e.detail:  # the model's own words, wrapped under the error line
            print(textwrap.fill(e.detail, 79, initial_indent="  ",
                                subsequent_indent="  "), file=sys.stderr)  # fmt: skip
        return 2
    finally:
        progress.clear()
    if not measure and not a.no_measure:
        report["measured_skipped"] = (
            "No step was timed: this machine has no GPU, and on a CPU the doctor "
            f"times steps only with --measure: {CPU_TIMING_WHY}."
        )
    for w in report["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(cli.terminal_text(report_body(report)), flush=True)
    if a.json:
        cli.save_result(a.json, jsonable(report), "the report's numbers")
    if a.markdown:
        try:
            cli.write_text_atomic(a.markdown, to_markdown(report))
        except OSError as err:
            raise cli.Stopped(
                f"could not write {a.markdown}: {cli.os_error(err)[1]} (the report "
                "is printed above)"
            ) from None
    return 0


def check_outputs(
    json_path: str | None, markdown_path: str | None, schema: str, overwrite=False
) -> None:
    """``--json`` and ``--markdown`` checked before the diagnosis: two writable files,
    neither replacing a file the doctor did not write unless ``overwrite``."""
    from ampbook.predict.specs import DoctorError

    for flag, f, kind in (("--json", json_path, schema),
                          ("--markdown", markdown_path, None)):  # fmt: skip
        if f is not None:
            try:
                cli.check_output_file(
                    f, flag, create_parents=False, kind=kind, overwrite=overwrite
                )
            except cli.UserError as err:
                raise DoctorError(str(err)) from None
    if json_path and markdown_path:
        if Path(json_path).resolve() == Path(markdown_path).resolve():
            raise DoctorError(
                f"--json and --markdown both name {json_path}; give two files"
            )


def jsonable(value):
    """``value`` with every float that is not finite as None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
