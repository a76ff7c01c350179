"""The README's claims about the commands, checked by running them in their cheap
forms: every command it shows answers ``--help`` and knows every option the README
gives it; the doctor's example prints what the README says it prints (the verdict's
words, no step timed on a CPU without ``--measure``, text and tables within the
terminal's width, Markdown only in the ``--markdown`` file); the ladder's targets."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from ampbook.core.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
PROSE = " ".join(README.split())


def readme_commands() -> list[list[str]]:
    """The ``.venv/bin/python -m ...`` commands of the README's code blocks, each as
    its words after ``python`` (continued lines joined, comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    out = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#")[0].strip()
            if line.startswith(".venv/bin/python -m "):
                out.append(line.split()[1:])
    return out


def module_of(words: list[str]) -> list[str]:
    """``-m ampbook.bench ladder ...`` -> ``["ampbook.bench", "ladder"]``."""
    name = words[1]
    if name == "ampbook.bench":
        return [name, words[2]]
    return [name]


def run(argv: list[str], columns: int = 80, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS=str(columns), PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", *argv], capture_output=True, text=True, env=env,
        cwd=REPO_ROOT, timeout=300, **kw,
    )  # fmt: skip


COMMANDS = readme_commands()


def test_the_readme_shows_the_commands_a_reader_needs():
    shown = {" ".join(module_of(c)) for c in COMMANDS}
    for needed in ("booktools.run", "ampbook.doctor", "ampbook.bench ladder"):
        assert needed in shown, needed
    doctor = [c for c in COMMANDS if c[1] == "ampbook.doctor"]
    assert "--no-measure" in PROSE and "--measure" in PROSE
    assert any(c[2:4] == ["--model", "torchvision:r3d_18"] for c in doctor)


@pytest.mark.parametrize(
    "module",
    sorted({tuple(module_of(c)) for c in COMMANDS}),
    ids=lambda m: " ".join(m),
)
def test_every_readme_command_answers_help_and_knows_its_options(module):
    """Each command the README shows: ``--help`` exits 0, and every option the README
    passes it (in its code blocks) is one the help lists."""
    done = run([*module, "--help"])
    assert done.returncode == 0, done.stderr
    known = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", done.stdout))
    for words in COMMANDS:
        if tuple(module_of(words)) != module:
            continue
        for flag in [w for w in words if w.startswith("-")]:
            assert flag in known, (" ".join(words), flag)


def test_make_book_picks_the_gpu_profile_with_cuda():
    """README: "With an NVIDIA GPU, make book picks the gpu profile by itself"."""
    assert "`make book` picks the `gpu` profile by itself" in PROSE
    done = run(["booktools.run", "--help"], columns=200)
    assert "default: gpu with CUDA, else cpu" in " ".join(done.stdout.split())


def test_the_verdict_words_are_the_doctors():
    """The README names the four words the first screen uses, each only where the
    doctor uses it (``verdict.gist``)."""
    from ampbook.chapters.ch6.verdict import gist

    words = {gist(1.1, 1.3), gist(0.7, 0.9), gist(0.9, 1.2, 1.05), gist(0.8, 1.1, 0.9)}
    assert words == {"a gain", "a loss", "no clear gain", "no clear loss"}
    for w in words:
        assert f'"{w}"' in PROSE, w
    assert (
        'recommends AMP only where the verdict does not call it a loss ("keep fp32"'
        in (PROSE)
    )


def test_the_doctor_example_prints_what_the_readme_says(tmp_path):
    """The README's first doctor command at an 80-column terminal, on two GPUs (the
    cheap form): the verdict's lines first; on a CPU no step timed and the reason
    given, with --measure named; no line wider than 80 columns and no Markdown
    table; the --markdown file keeps Markdown tables."""
    example = next(c for c in COMMANDS if "torchvision:r3d_18" in c)
    md = tmp_path / "report.md"
    done = run([*example[1:], "--gpus", "h200,a100", "--markdown", str(md)])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    verdicts = [x for x in lines[:12] if re.match(r"- (H200 SXM|A100 SXM 80GB): ", x)]
    assert len(verdicts) == 2
    assert all(len(x) <= 80 for x in lines), [x for x in lines if len(x) > 80]
    assert not [x for x in lines if x.lstrip().startswith("|")]
    assert "On a CPU the doctor times no step unless you pass `--measure`" in PROSE
    if not torch.cuda.is_available():
        text = " ".join(done.stdout.split())
        assert "No step was timed: this machine has no GPU" in text
        assert "only with --measure" in text
    tables = [x for x in md.read_text().splitlines() if x.startswith("| ")]
    assert tables, "the --markdown file has no Markdown table"
    assert "`--markdown FILE` writes the report as Markdown, with Markdown tables" in (
        PROSE
    )


def test_the_ladder_prints_targets_for_a_gpus_ladder_only():
    """README: the targets are printed on a GPU, none on a CPU (they are a GPU's).
    ``--show`` of a GPU's ladder (the test fixture's) prints them; the same ladder
    said to be a CPU's, through the one printer a run and ``--show`` share, none."""
    import contextlib
    import dataclasses
    import io
    import json

    from ampbook.chapters.ch7 import ladder_run
    from ampbook.results import read_ladder

    assert "on a CPU it prints none, since the targets are a GPU's" in PROSE
    fixture = REPO_ROOT / "tests" / "fixtures" / "results" / "ladder_fixture-gpu.json"
    done = run(["ampbook.bench", "ladder", "--show", str(fixture)], columns=200)
    assert done.returncode == 0, done.stderr
    assert "target" in done.stdout.lower()
    gpu = read_ladder(json.loads(fixture.read_text()), str(fixture))
    for ladder, targets in (
        (gpu, True),
        (dataclasses.replace(gpu, device="cpu"), False),
    ):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ladder_run._print_ladder(ladder)
        assert ("target" in out.getvalue().lower()) == targets, ladder.device


def test_the_chapter_list_names_every_chapter_of_the_book():
    from booktools.book import toc_chapters

    for stem in toc_chapters():
        number = int(stem.split("_")[0])
        assert re.search(rf"^{number}\. \*\*", README, re.M), stem
    assert re.search(r"^9\. \*\*When AMP goes wrong\*\*", README, re.M)


def test_the_gpu_lease_procedure_lives_in_developing():
    """The README speaks to readers: the lease of a lent GPU is DEVELOPING.md's."""
    assert "--lease" not in README and "gpu-wheels" not in README
    developing = (REPO_ROOT / "DEVELOPING.md").read_text()
    assert "python3 -m booktools.gpucheck --lease" in developing
    assert "make gpu-wheels" in developing


# Options the README's prose names for each command (not only those its code blocks
# pass): each must be one the command's --help lists.
PROSE_OPTIONS = {
    ("ampbook.doctor",): ["--model", "--input", "--gpus", "--output", "--loss",
                          "--forward-only", "--measure", "--no-measure", "--markdown",
                          "--json"],
    ("ampbook.bench", "ladder"): ["--rungs", "--precisions", "--show", "--json",
                                  "--device"],
    ("booktools.run",): ["--profile", "--out", "-p"],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(PROSE_OPTIONS), ids=" ".join)
def test_the_options_the_prose_names_are_the_commands(module):
    done = run([*module, "--help"], columns=200)
    assert done.returncode == 0, done.stderr
    known = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", done.stdout))
    for flag in PROSE_OPTIONS[module]:
        named = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", README)
        assert named, (module, flag)  # the README names it...
        assert flag in known, (module, flag)  # ...and the command knows it


def test_the_cpu_ladder_is_the_size_the_readme_gives():
    """README: ``ladder --device cpu`` times "rungs 0, 4 at 64x32"; its help gives the
    CPU defaults."""
    assert "rungs 0, 4 at 64x32:" in README
    done = run(["ampbook.bench", "ladder", "--help"], columns=200)
    text = " ".join(done.stdout.split())
    for default in ("0,4 on a CPU", "32 on a CPU", "64 on a CPU"):
        assert default in text, default


def test_the_gpu_profile_and_its_h200_times_are_the_gpu_checks():
    """README, "On your own GPU": the gpu profile's chapter 3 (size, batch, epochs,
    images) is notebooks/profiles.yml's, and each H200 chapter time it quotes is the
    stage time of a finished notebook in data/gpucheck/'s reports, run at that
    profile; chapters 4 and 5 were stopped unfinished."""
    from booktools.run import load_profiles

    ch3 = load_profiles()["gpu"]["03_amp_training"]
    assert (ch3["width"], ch3["height"], ch3["batch_size"]) == (1024, 512, 6)
    assert f"(1024x512 images, batch {ch3['batch_size']})" in PROSE
    assert f"{ch3['num_epochs']} epochs of {ch3['train_images']} training" in PROSE
    reports = sorted((REPO_ROOT / "data" / "gpucheck").glob("*.report.json"))
    stages = {}
    for path in reports:
        log = path.with_name(path.name.replace(".report.json", ".log")).read_text()
        for stage in json.loads(path.read_text())["stages"]:
            if stage["status"] == "not selected":
                continue
            stem = {"01": "01_floating_point", "02": "02_tensor_cores",
                    "03": "03_amp_training", "04": "04_loss_scaling",
                    "05": "05_rtx3070"}.get(stage["name"][2:])  # fmt: skip
            if stage["name"].startswith("nb") and stem:
                assert f"{stem}: profile gpu," in log, (path.name, stem)
                stages.setdefault(int(stage["name"][2:]), []).append(stage)
    quoted = re.findall(r"(\d+) s \(chapter (\d+)\)", PROSE)
    assert len(quoted) == 3, quoted
    for seconds, chapter in quoted:
        done = [s["seconds"] for s in stages[int(chapter)] if s["status"] == "ok"]
        assert done and round(done[-1]) == int(seconds), (chapter, seconds, done)
    for chapter in (4, 5):
        assert all(s["status"] == "cut short" for s in stages[chapter]), chapter
    assert "it stopped chapters 4 and 5 unfinished" in PROSE


def test_the_readme_reads_at_an_80_column_terminal():
    """Read raw (``less README.md``) at 80 columns, no line wraps mid-word (the README
    before this test: 132 of 261 lines over 80 columns)."""
    long = [n for n, x in enumerate(README.splitlines(), 1) if len(x) > 80]
    assert not long, f"README lines over 80 columns: {long}"
