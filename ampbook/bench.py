"""``python -m ampbook.bench NAME [options]``: the benchmark ``NAME`` (one module each,
imported only when chosen), measured side by side in one run and printed as ratios."""

from __future__ import annotations

import importlib
import sys

from ampbook.core import cli

COMMANDS = {
    "loader": "ampbook.chapters.ch5.bench_loader",
    "matmul": "ampbook.chapters.ch2.bench_matmul",
    "ladder": "ampbook.chapters.ch7.ladder_run",
}
SUMMARIES = {  # one line each, for --help (the modules are not imported for it)
    "loader": "the input pipeline: can the data loader feed the GPU?",
    "matmul": "matmul and elementwise speed by dtype (chapter 2)",
    "ladder": "the step from the post's setup to the optimised one, rung by rung",
}


def build_parser() -> cli.ArgumentParser:
    """The dispatcher's parser, for its ``--help`` (a benchmark parses its own)."""
    width = max(map(len, COMMANDS)) + 2
    listing = "\n".join(f"  {name:<{width}}{SUMMARIES[name]}" for name in COMMANDS)
    parser = cli.ArgumentParser(
        prog="python -m ampbook.bench",
        usage="python -m ampbook.bench NAME [options]",
        description="Benchmarks, measured side by side in one run and printed as "
        "ratios.",
        epilog=f"benchmarks:\n{listing}\n\n"
        "python -m ampbook.bench NAME --help lists a benchmark's options.",
        formatter_class=cli.HelpFormatter,
    )
    parser.add_argument(
        "name", metavar="NAME", help=f"the benchmark: {', '.join(COMMANDS)}"
    )
    return parser


@cli.command("python -m ampbook.bench")
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(build_parser().format_help().rstrip())
        if not argv:
            cli.say(f"name a benchmark: {', '.join(COMMANDS)}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        cli.say(f"unknown benchmark {name!r}; choose one of: {', '.join(COMMANDS)}")
        return 2
    module = importlib.import_module(COMMANDS[name])  # only the one chosen
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
