"""``python -m ampbook.train``: the command line. Light: the options are parsed
(``--help``, a bad option) before torch is imported."""

from __future__ import annotations

import sys

from ampbook.core import cli
from ampbook.train.config import (
    ConfigError,
    Interrupted,
    NonFiniteLossError,
    TrainError,
    config_from_args,
    ranks,
)


@cli.command("python -m ampbook.train")
def main(argv: list[str] | None = None) -> int:
    """A known failure prints one ``error:`` line and exits nonzero (2: the settings,
    1: the run stopped, 130: Ctrl-C, 143: SIGTERM); what earlier epochs saved stays."""
    cfg = config_from_args(argv)  # no torch yet: --help and a bad option are quick
    from ampbook.train.loop import run_training

    rank, world, _ = ranks()
    error = f"error: rank {rank}: " if world > 1 else "error: "  # each process's own
    try:
        record = run_training(cfg)
    except (ConfigError, NonFiniteLossError, TrainError) as err:
        print(f"{error}{err}", file=sys.stderr)
        if isinstance(err, ConfigError):
            return 2
        return 130 if isinstance(err, Interrupted) else 1  # Interrupted: a TrainError
    except KeyboardInterrupt:
        print(
            f"{error}interrupted before the run started; nothing was written",
            file=sys.stderr,
        )
        return 130
    if not cfg.quiet and record.get("json_path"):
        print(f"results: {record['json_path']}")
    return 0
