"""A results file is input from strangers (issue 30): every string it carries reaches
the book as text. Each string field of each results kind of the fixture folder is
planted with markup (HTML, a MyST include block, download and glue roles, a colon
fence, a link to a local file); what the chapters' library functions make of the
folder is rendered through MyST and Sphinx (myst_nb, the book's MyST extensions,
warnings as errors), and the page shows the markup as text and reads no file outside
its source folder."""

from __future__ import annotations

import json
from pathlib import Path

from ampbook.results import (
    Ladder,
    LayerProfile,
    MatmulSweep,
    TrainRun,
    load_results_dir,
    read_file,
)

FIXTURES = Path(__file__).parent / "fixtures" / "results"
SECRET = "TOPSECRET-untrusted-4711"


def payload(secret_rel: str) -> str:
    return (
        "NVIDIA <script>alert(1)</script><img src=x onerror=alert(2)> "
        f"\n```{{include}} {secret_rel}\n```\n"
        f" {{download}}`{secret_rel}` {{glue:text}}`ch3_key` "
        "\n:::{note}\nfenced\n:::\n"
        f" [a link]({secret_rel}) *em* $x$ | cell"
    )


def _string_paths(obj, path=()):
    if isinstance(obj, str):
        yield path
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _string_paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _string_paths(v, (*path, i))


def _set(obj, path, value):
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def plant(folder: Path, secret_rel: str) -> dict[str, list]:
    """Each fixture file with every string field that its reader accepts as free
    text planted at once (a field the reader checks against a list, such as a
    precision or a status, is refused there: the file is ignored with a reason).
    Returns the planted fields per file."""
    text = payload(secret_rel)
    planted = {}
    for src in sorted(FIXTURES.glob("*.json")):
        record = json.loads(src.read_text())
        free = []
        probe = folder / "probe.json"
        for path in _string_paths(record):
            if path == ("schema",) or "version" in path:
                continue
            trial = json.loads(json.dumps(record))
            _set(trial, path, text)
            probe.write_text(json.dumps(trial))
            try:
                read_file(probe)
            except ValueError:
                continue  # checked against what is possible: refused, named
            free.append(path)
        probe.unlink()
        for path in free:
            _set(record, path, text)
        (folder / src.name).write_text(json.dumps(record))
        planted[src.name] = free
    return planted


def page_text(rs) -> str:
    """What the chapters show of a results folder, from the library functions that
    make it (provenance lines, tables, verdicts, the findings)."""
    from ampbook.chapters import ch2 as bm
    from ampbook.chapters import ch3, ch5, ch7, ch10
    from ampbook.core.devices import display_name, load_devices
    from ampbook.core.page import md_table_text

    devices = load_devices()
    parts = [r.provenance for r in rs.train_runs]
    parts += [lp.provenance for lp in rs.layer_profiles]
    parts += [bm.sweep_provenance(s.record) for s in rs.matmul_sweeps]
    parts += [ch7.source_line(x, False) for x in rs.ladders]
    pairs = rs.pairs()
    parts += [ch3.gpu_pair_verdict(p) for p in pairs]
    parts.append(ch5.gpu_in_short(pairs, rs.profile_pairs()))
    parts.append(ch10.gpu_findings(rs))
    parts.append(ch10.in_short(rs))
    parts.append(
        md_table_text(
            bm.records_table([s.record for s in rs.matmul_sweeps], devices),
            ["GPU", "dtype", "n", "TFLOP/s", "peak", "share"],
        )
    )
    parts.append(
        md_table_text(
            [
                (f"{display_name(lp.device_name)}, {lp.mode_label}", t.type, t.scope)
                for lp in rs.layer_profiles
                for t in lp.layers[:3]
            ],
            [display_name(rs.layer_profiles[0].device_name), "type", "scope"],
        )
    )
    parts.append(
        md_table_text(
            [(r.index, r.title, r.key) for x in rs.ladders for r in x.rungs],
            ["rung", "adds", "key"],
        )
    )
    return "\n\n".join(parts)


def build_page(src: Path, out: Path, text: str) -> Path:
    from sphinx.application import Sphinx

    (src / "conf.py").write_text(
        "extensions = ['myst_nb']\n"
        "myst_enable_extensions = ['dollarmath', 'amsmath', 'colon_fence', "
        "'deflist', 'substitution']\n"
        "nb_execution_mode = 'off'\n"
        "html_theme = 'basic'\n"
    )
    (src / "index.md").write_text("# Results\n\n" + text + "\n")
    app = Sphinx(
        str(src), str(src), str(out), str(out / ".doctrees"), "html",
        status=None, warning=None, warningiserror=True, freshenv=True,
    )  # fmt: skip
    app.build()
    return out / "index.html"


def test_planted_markup_in_every_string_field_shows_as_text(tmp_path):
    (tmp_path / "secret.txt").write_text(SECRET + "\n")
    folder = tmp_path / "results"
    folder.mkdir()
    # the page's folder is tmp_path/src: ../secret.txt is outside it
    planted = plant(folder, "../secret.txt")
    rs = load_results_dir(folder)
    kinds = (TrainRun, MatmulSweep, LayerProfile, Ladder)
    assert not rs.ignored, rs.ignored
    for kind, group in zip(
        kinds, (rs.train_runs, rs.matmul_sweeps, rs.layer_profiles, rs.ladders)
    ):
        assert group, f"no {kind.__name__} read from the planted folder"
    # the device name, the software and the dates are free text in every kind
    for name, fields in planted.items():
        assert ("environment", "device_name") in fields, (name, fields)
        assert ("environment", "torch") in fields, (name, fields)
    text = page_text(rs)
    assert text.count("script") >= 10
    src = tmp_path / "src"
    src.mkdir()
    html = build_page(src, tmp_path / "html", text).read_text()
    body = html[html.index('<div class="body"') : html.index("sphinxsidebar")]
    assert "<script>alert" not in body and "<img src=x" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "{download}" in body and "{glue:text}" in body and ":::{note}" in body
    assert "{include}" in body
    assert SECRET not in html
    assert not (tmp_path / "html" / "_downloads").exists()
    assert not list((tmp_path / "html").rglob("secret*"))
    assert "<em>em</em>" not in body and "<a " not in body.split("</h1>", 1)[1]
    assert "<math" not in body and "\\(x\\)" not in body


def test_ordinary_names_unchanged_escapes_idempotent_md_cells_kept():
    from ampbook.core.page import md, md_escape, md_table_text

    for name in ("NVIDIA H200", "2.5.1+cu124", "aten::conv2d", "max_pool2d", "12.4"):
        assert md_escape(name) == name
    for hostile in ("<b>x</b>", "{download}`a`", ":::{note}", "- item", "a\\", "_x_"):
        once = md_escape(hostile)
        assert once != hostile and md_escape(once) == once
    table = md_table_text([("`code`", md("`code`"))], ["<i>a</i>", "b"])
    assert "| \\`code\\` | `code` |" in table and "\\<i\\>a\\</i\\>" in table
