"""The reader's copies (``booktools.reader``): a planted chapter executed by the
runner, then the copies of the smoke run and the book's download of them."""

from __future__ import annotations

import re
from html import unescape

import nbformat
import pytest

from booktools import reader
from booktools import run as runner

PLANTED = """# %% [markdown]
# # A planted chapter
#
# (planted-label)=
# ## The section
#
# Values: {glue:text}`x:.2f`, {glue:text}`n:d`, {glue:text}`x`, {glue:text}`share:.0%`.
# Sources: {cite:p}`romera2018erfnet,cordts2016cityscapes`;
# {cite:t}`williams2009roofline` drew it.
# See {numref}`fig-p-b`, {numref}`Figure %s <fig-p-a>`,
# {ref}`planted-label`, {ref}`that part <planted-label>`, {doc}`../glossary`,
# {doc}`01_floating_point`, {term}`loss scale`, {term}`scales <loss
# scale>` (a role over a line end), and {math}`2^{-24}`.
# Code stays code: `{glue:text}` is the role.
#
# :::{dropdown} A hint
# Use **bf16** ({glue:text}`x:.1f`).
# :::
#
# ```{note}
# A note.
# ```

# %% tags=["parameters", "remove-cell"]
n = 3

# %% tags=["remove-input"]
from ampbook.core.env import print_environment

print_environment("cpu")

# %% tags=["hide-cell"]
from ampbook.core.page import glue_all, md

glue_all(x=0.123456, n=n, share=0.4567)

# %% tags=["hide-input"]
md(
    ":::{admonition} In short\\n"
    "It took {glue:text}`x:.2f` s {cite:p}`micikevicius2018`.\\n:::"
)

# %% tags=["hide-input", "hide-output"]
print("a long table")

# %% mystnb={"figure": {"caption": "First: {glue:text}`x:.3f`.", "name": "fig-p-a"}}
import matplotlib.pyplot as plt

plt.plot([0, 1])
plt.show()

# %% mystnb={"figure": {"caption": "2 {cite:p}`micikevicius2018`.", "name": "fig-p-b"}}
plt.plot([1, 0])
plt.show()
"""


@pytest.fixture(scope="module")
def planted_source(tmp_path_factory):
    source = tmp_path_factory.mktemp("planted") / "99_planted.py"
    source.write_text(PLANTED)
    return source


@pytest.fixture(scope="module")
def planted(planted_source):
    """A chapter with every kind of role, run by the runner with the smoke profile, and
    its reader's copy."""
    source = planted_source
    out = source.parent / "executed"
    run = runner.execute(source, out, {"n": 7}, "smoke", log=lambda *a: None, threads=1)
    written = runner.write_reader_copies([run], out, "smoke", log=lambda *a: None)
    assert written == [out / "reader" / "99_planted.ipynb"]
    return nbformat.read(run.output, as_version=4), nbformat.read(written[0], 4)


def _markdown(nb) -> str:
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_glue_roles_become_their_formatted_values(planted):
    _, copy = planted
    text = _markdown(copy)
    assert "Values: 0.12, 7, 0.123456, 46%." in text
    assert "Use **bf16** (0.1)." in text


def test_citations_references_and_terms_become_text(planted):
    _, copy = planted
    text = _markdown(copy)
    assert (
        "Sources: (Romera *et al.*, 2018; Cordts *et al.*, 2016); Williams *et al.* "
        "(2009) drew it." in " ".join(text.split())
    )
    flat = " ".join(text.split())
    assert "See Fig. 99.2, Figure 99.1, “The section”, that part, Glossary," in flat
    assert "[Floating-point formats, computed](01_floating_point.ipynb)" in flat
    assert "loss scale, scales (a role over a line end), and $2^{-24}$." in flat
    assert "Code stays code: `{glue:text}` is the role." in flat


def test_directives_and_labels_become_markdown_jupyter_renders(planted):
    _, copy = planted
    text = _markdown(copy)
    assert "<details>\n<summary>A hint</summary>" in text
    assert "> **Note**\n>\n> A note." in text
    assert "(planted-label)=" not in text and ":::" not in text
    assert reader.leftover_roles(copy) == []


def test_each_figure_has_its_numbered_caption_under_it(planted):
    executed, copy = planted
    cells = copy.cells
    for name, caption in (
        ("fig-p-a", "**Fig. 99.1.** First: 0.123."),
        ("fig-p-b", "**Fig. 99.2.** 2 (Micikevicius *et al.*, 2018)."),
    ):
        i = next(
            i
            for i, c in enumerate(cells)
            if c.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name")
            == name
        )
        assert any("image/png" in o.get("data", {}) for o in cells[i].outputs)
        assert cells[i + 1].cell_type == "markdown"
        assert cells[i + 1].source == caption
    # the executed notebook itself is untouched
    assert "{glue:text}`x:.2f`" in _markdown(executed)


def test_sources_cited_and_the_note_on_what_the_copy_is(planted):
    _, copy = planted
    last = copy.cells[-1].source
    assert last.startswith("## Sources cited")
    for key in ("romera2018erfnet", "cordts2016cityscapes", "williams2009roofline"):
        assert key in copy.cells[-1].metadata["ampbook"]["sources"]
    assert "micikevicius2018" in copy.cells[-1].metadata["ampbook"]["sources"]
    assert copy.cells[1].metadata["ampbook"]["reader_note"]
    assert "with the `smoke` profile" in copy.cells[1].source
    assert copy.metadata["ampbook"]["reader_copy"] is True


def test_the_runner_tells_the_notebook_its_profile(planted):
    executed, _ = planted
    shown = [
        o["data"]["text/markdown"]
        for c in executed.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "text/markdown" in o.get("data", {})
    ]
    lines = [s.splitlines()[0] for s in shown if s.startswith("Ran on ")]
    assert len(lines) == 1 and "with the smoke profile" in lines[0]


def test_an_unresolvable_reference_is_an_error_naming_it(planted, tmp_path):
    executed, _ = planted
    bad = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T")])
    bad.cells.append(nbformat.v4.new_markdown_cell("{numref}`fig-nowhere`"))
    nbformat.write(bad, tmp_path / "98_bad.ipynb")
    with pytest.raises(reader.ReaderCopyError, match="98_bad: .*fig-nowhere"):
        reader.write_reader_copies(tmp_path)
    errors = []
    assert reader.write_reader_copies(tmp_path, errors=errors) == []
    assert errors and "fig-nowhere" in errors[0]
    bad.cells[1].source = "{cite:p}`no-such-key`"
    nbformat.write(bad, tmp_path / "98_bad.ipynb")
    with pytest.raises(reader.ReaderCopyError, match="no-such-key"):
        reader.write_reader_copies(tmp_path)


def reads_like_the_page(executed, copy) -> list[str]:
    """What in reader's copy ``copy`` of ``executed`` the page does not show so: raw
    MyST in markdown or Markdown outputs, a cell the book hides shown, a cell it
    removes kept, glue records, jupytext pairing, cell ids not ``cell-N``."""
    bad = reader.leftover_roles(copy)
    shown = {c.source: c for c in copy.cells if c.cell_type == "code"}
    for cell in executed.cells:
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        if "parameters" in tags:
            continue
        kept = shown.get(cell.source)
        if any(t in tags for t in reader.REMOVED):
            if kept is not None:
                bad.append(f"removed cell kept: {cell.source[:40]!r}")
            continue
        if kept is None:
            bad.append(f"cell missing: {cell.source[:40]!r}")
            continue
        hidden = kept.metadata.get("jupyter", {})
        if any(t in tags for t in reader.SOURCE_HIDDEN) and not hidden.get(
            "source_hidden"
        ):
            bad.append(f"hidden input shown: {cell.source[:40]!r}")
        if any(t in tags for t in reader.OUTPUTS_HIDDEN) and not hidden.get(
            "outputs_hidden"
        ):
            bad.append(f"hidden output shown: {cell.source[:40]!r}")
    params = [c for c in copy.cells if "parameters" in c.metadata.get("tags", [])]
    if len(params) != 1 or params[0].metadata.get("jupyter") != {
        "source_hidden": True,
        "outputs_hidden": True,
    }:
        bad.append("the parameters cell is not there once, collapsed")
    for cell in copy.cells:
        for output in cell.get("outputs", []):
            if any(k.startswith(reader.GLUE_PREFIX) for k in output.get("data", {})):
                bad.append(f"glue record in {cell.id}")
    if "jupytext" in copy.metadata:
        bad.append("jupytext pairing metadata kept")
    if [c.id for c in copy.cells] != [f"cell-{n}" for n in range(len(copy.cells))]:
        bad.append("cell ids are not cell-0, cell-1, ...")
    return bad


def test_the_copy_collapses_what_the_page_hides(planted):
    executed, copy = planted
    assert "jupytext" in executed.metadata  # what the copy drops was there
    assert any(
        k.startswith(reader.GLUE_PREFIX)
        for c in executed.cells
        for o in c.get("outputs", [])
        for k in o.get("data", {})
    )
    assert reads_like_the_page(executed, copy) == []
    [params] = [c for c in copy.cells if "parameters" in c.metadata.get("tags", [])]
    assert params.source.startswith("n = 3\n") and params.source.endswith("n = 7")
    assert "run with (the smoke profile)" in params.source
    assert not any(
        "injected-parameters" in c.metadata.get("tags", []) for c in copy.cells
    )
    [short] = [c for c in copy.cells if c.source.startswith("md(")]
    assert short.metadata.jupyter == {"source_hidden": True}
    [markdown] = [o["data"]["text/markdown"] for o in short.outputs]
    assert markdown == (
        "> **In short**\n>\n> It took 0.12 s (Micikevicius *et al.*, 2018).\n"
    )
    [table] = [c for c in copy.cells if c.source.startswith("print(")]
    assert table.metadata.jupyter == {"source_hidden": True, "outputs_hidden": True}


def test_the_run_along_copy_fills_in_the_numbers_of_a_run_by_hand(planted_source):
    """Run as a reader runs it (its own parameters, n = 3), the run-along copy shows
    that run's values in the prose, also above the cell that glues them."""
    import nbclient

    from booktools import runalong

    folder = planted_source.parent / "along"
    [path] = runalong.write_run_along_copies([planted_source], folder)
    nb = nbformat.read(path, as_version=4)
    assert "jupytext" not in nb.metadata
    assert reader.leftover_roles(nb) == []  # markdown cells: static roles resolved
    nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": folder}}
    ).execute()
    shown = [
        o["data"]["text/markdown"]
        for c in nb.cells
        for o in c.get("outputs", [])
        if "text/markdown" in o.get("data", {})
    ]
    flat = " ".join(" ".join(shown).split())
    assert "Values: 0.12, 3, 0.123456, 46%." in flat
    assert "See Fig. 99.2, Figure 99.1, “The section”" in flat
    assert "Use **bf16** (0.1)." in flat
    assert "> **In short**\n>\n> It took 0.12 s (Micikevicius *et al.*, 2018)." in (
        "\n".join(shown)
    )
    assert runalong.PENDING not in flat
    assert [reader.leftover_myst(text) for text in shown] == [[]] * len(shown)
    assert not any(
        k.startswith(reader.GLUE_PREFIX)
        for c in nb.cells
        for o in c.get("outputs", [])
        for k in o.get("data", {})
    )
    [params] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert params.source == "n = 3" and not params.metadata.get("jupyter")


def reads_before_it_runs(copy) -> list[str]:
    """What a reader of run-along copy ``copy`` misses before running it: prose or a
    heading not shown, a MyST role on a collapsed first line or in shown text, a
    chapter that does not open with its title, metadata JupyterLab would change."""
    import ast

    from booktools import runalong

    bad = []
    first = copy.cells[0]
    if first.cell_type != "markdown" or not first.source.startswith("# "):
        bad.append(f"does not open with its title: {first.source[:40]!r}")
    info = copy.metadata.get("language_info", {})
    if info.get("name") != "python" or not info.get("version"):
        bad.append("no language_info: JupyterLab opens it modified")
    for cell in copy.cells:
        hidden = cell.metadata.get("jupyter", {})
        line = cell.source.split("\n")[0]
        if hidden.get("source_hidden") and reader.ANY_ROLE.search(line):
            bad.append(f"{cell.id}: a role on its collapsed first line: {line[:50]!r}")
        if not cell.metadata.get("ampbook", {}).get("prose"):
            continue
        text = ast.literal_eval(cell.source[cell.source.index("prose(") + 6 : -1])
        shown = [o.get("data", {}).get("text/markdown") for o in cell.outputs]
        if hidden.get("outputs_hidden") or shown != [runalong.pending(text)]:
            bad.append(f"{cell.id}: prose not shown before it runs: {text[:40]!r}")
        elif reader.leftover_myst(shown[0]):
            bad.append(f"{cell.id}: MyST shown: {reader.leftover_myst(shown[0])}")
        if any(
            reader.HEADING.match(x)
            for c, t in reader._chunks(text)
            if not c
            for x in t.split("\n")
        ):
            bad.append(f"{cell.id}: a heading inside a code cell's display")
    return bad


def test_every_run_along_copy_reads_before_it_runs(tmp_path):
    """Opened to read first and run later, each chapter's run-along copy shows all
    its prose and headings (numbers "…"), opens with its title, and shows no MyST."""
    from booktools import runalong

    paths = runalong.write_run_along_copies(list(runner.all_notebooks()), tmp_path)
    assert len(paths) == len(runner.all_notebooks())
    bad = [
        f"{path.stem}: {problem}"
        for path in paths
        for problem in reads_before_it_runs(nbformat.read(path, as_version=4))
    ]
    assert bad == [], f"{len(bad)} problems: {bad[:8]}"


# --- the smoke run's copies and the book's downloads --------------------------------


def test_every_reader_copy_reads_like_the_page(executed_notebooks):
    for source in runner.all_notebooks():
        executed = nbformat.read(executed_notebooks / f"{source.stem}.ipynb", 4)
        path = executed_notebooks / reader.READER_DIR / f"{source.stem}.ipynb"
        assert reads_like_the_page(executed, nbformat.read(path, 4)) == [], source.stem


def test_two_copies_of_one_run_are_the_same_file(executed_notebooks, tmp_path):
    again = reader.write_reader_copies(
        executed_notebooks, out_dir=tmp_path, profile="smoke"
    )
    assert again
    for path in again:
        first = executed_notebooks / reader.READER_DIR / path.name
        assert path.read_bytes() == first.read_bytes(), path.name


# --- the smoke run's copies and the book's downloads --------------------------------


def test_every_chapter_has_a_reader_copy_with_values_and_captions(executed_notebooks):
    for source in runner.all_notebooks():
        path = executed_notebooks / reader.READER_DIR / f"{source.stem}.ipynb"
        assert path.exists(), f"no reader's copy of {source.stem}"
        copy = nbformat.read(path, as_version=4)
        assert reader.leftover_roles(copy) == [], source.stem
        assert "{glue:" not in _markdown(copy)
        for i, cell in enumerate(copy.cells):
            fig = cell.get("metadata", {}).get("mystnb", {}).get("figure")
            if cell.cell_type != "code" or not fig or not fig.get("caption"):
                continue
            under = copy.cells[i + 1]
            assert under.cell_type == "markdown", (source.stem, fig.get("name"))
            assert under.metadata.get("ampbook", {}).get("caption_of") == fig.get(
                "name"
            )
            assert re.match(r"\*\*Fig\. \d+\.\d+\.\*\* \S", under.source), under.source


def _chapter_html(built_book, stem: str) -> str:
    return (built_book / "chapters" / f"{stem}.html").read_text()


def test_figure_numbers_of_the_copies_are_the_books(executed_notebooks, built_book):
    """The reader's copy numbers each figure as the built book does."""
    notebooks = {
        s.stem: nbformat.read(executed_notebooks / f"{s.stem}.ipynb", as_version=4)
        for s in runner.all_notebooks()
    }
    index = reader.book_index(notebooks)
    assert index.figures, "the book has no named figures"
    number_span = r'<span class="caption-number">([^<]*)</span>'
    checked = 0
    for stem in notebooks:
        html = _chapter_html(built_book, stem)
        for name, number in index.figures.items():
            block = re.search(rf'id="{re.escape(name)}".*?{number_span}', html, re.S)
            if block is None:
                continue  # another chapter's figure
            assert block[1].strip() == reader.NUMFIG_FORMAT.format(number), name
            checked += 1
    assert checked == len(index.figures)


def test_download_button_serves_the_reader_copy(built_book):
    for source in runner.all_notebooks():
        html = _chapter_html(built_book, source.stem)
        href = f"../_static/notebooks/{source.stem}.ipynb"
        assert f'href="{href}"' in html, f"{source.stem}: no download of its copy"
        assert f'href="{href}" download="{source.stem}.ipynb"' in html
        assert f"_sources/chapters/{source.stem}.ipynb" not in html
        served = nbformat.read(
            built_book / "_static" / "notebooks" / f"{source.stem}.ipynb", 4
        )
        assert served.metadata["ampbook"]["reader_copy"] is True
        assert reader.leftover_roles(served) == []
        # papermill's injected parameters are not on the page
        assert "tag_injected-parameters" not in html


def test_citations_read_as_the_book_writes_them(built_book):
    """The reader's copy writes a citation as the book's author-year style does."""
    html = (built_book / "intro.html").read_text()
    sources = reader.bibliography()
    for key in ("romera2018erfnet", "cordts2016cityscapes", "rtx3070post"):
        expected = reader.cite_text("p", [key], sources).replace("*", "")
        text = unescape(re.sub(r"<[^>]+>", "", html))
        assert expected in " ".join(text.split()), expected
