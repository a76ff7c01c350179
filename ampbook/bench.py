"""Benchmarks, measured side by side in one run and printed as ratios.

python -m ampbook.bench loader [...]  input pipeline (bench_loader)
python -m ampbook.bench matmul [...]  matmul, elementwise by dtype (bench_matmul)
python -m ampbook.bench step   [...]  training step: runner vs bare loop (bench_step)
python -m ampbook.bench doctor [...]  the doctor's full report, timed (bench_doctor)
python -m ampbook.bench ladder [...]  the step from the post's setup to the optimised
                                      one, rung by rung, per precision (bench_ladder)
"""

from __future__ import annotations

import importlib
import sys

from ampbook import cli

COMMANDS = {
    "loader": "ampbook.bench_loader",
    "matmul": "ampbook.bench_matmul",
    "step": "ampbook.bench_step",
    "doctor": "ampbook.bench_doctor",
    "ladder": "ampbook.bench_ladder",
}


@cli.command("python -m ampbook.bench")
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        if not argv:
            cli.say(f"name a benchmark: {', '.join(COMMANDS)}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"error: unknown benchmark {name!r}; choose one of: {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(COMMANDS[name])
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
