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


def test_a_p_value_with_aliases_is_refused_before_it_expands(tmp_path, capsys):
    """``-p NAME VALUE`` is YAML without anchors and aliases: a few hundred bytes
    whose aliases repeat one another stand for 9**9 items (out of memory when the
    parameters cell spells them out); the error names -p."""
    from ampbook.build import run

    bomb = "[&a [x,x,x,x,x,x,x,x,x]," + ",".join(
        f"&{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")
    ) + "]"
    with pytest.raises(run.RunError, match="-p value .*aliases"):
        run.parse_value(bomb)
    assert run.parse_value("[1, {a: b}]") == [1, {"a": "b"}]  # plain YAML is read
    out = tmp_path / "ex"
    code = run.main(["--profile", "smoke", "--out", str(out), "-p", "n_samples", bomb])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and "-p" in err, err
    assert not out.exists()
