"""Faults met by the training, data and notebook-runner commands: stops during a
command's cleanup, the open-file limit, loader workers that die, absurd sizes,
``-p`` values that expand without end, the light command line of ``ampbook.train``."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ampbook import cli


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_stop_during_the_cleanup_lets_the_cleanup_finish(second):
    """Ctrl-C, then Ctrl-C or SIGTERM while the command cleans up after the first:
    the cleanup runs to its end and the status is the first stop's."""
    cleaned = []

    @cli.command("python -m ampbook.fake")
    def main(argv=None):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            os.kill(os.getpid(), second)  # lands inside the cleanup
            time.sleep(0.05)
            cleaned.append(True)
            raise
        return 0

    assert main([]) == 130
    assert cleaned == [True]
