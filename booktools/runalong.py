"""The run-along copy of a chapter: run it in Jupyter and read its prose with this
run's numbers.

A chapter's source writes its numbers as ``{glue:text}`` roles, which only the book
build resolves; the reader's copy (``booktools.reader``) pastes in one run's values
and is frozen. The run-along copy is made from the source, without outputs, for a
reader who runs the chapter by hand:

- every markdown cell's MyST is converted as in the reader's copy (admonitions,
  dropdowns, math, labels; citations, figure, section and page references as text), but
  prose that quotes a glued value becomes a code cell, its input collapsed, that
  displays that prose (``prose``): each number reads "…" until the cell that glues it
  has run, and is then filled in where it stands (a display updated by id), also in the
  opening, above the cells that compute it;
- it reads before it runs: such a cell is saved with its prose already displayed (the
  numbers "…"), its collapsed first line a comment with no MyST in it, the headings
  of such prose kept as markdown cells of their own, and the chapter's title the first
  cell; the notebook carries the ``language_info`` a Python kernel reports, so
  JupyterLab opens it unmodified;
- a first collapsed cell (``start``) hooks the kernel: glued values are kept for the
  prose, their hidden records are not shown, and Markdown that a cell displays
  (``ampbook.core.page.md``, ``dropdown``) has its MyST converted and its roles
  resolved;
- the cells the book hides are collapsed, papermill's parameters stay as the source has
  them (the values a reader gets), figure captions sit under their figures, and no
  jupytext pairing is kept.

Nothing here needs a Jupyter extension: the displays are Markdown, which JupyterLab,
Notebook and VS Code render. ``python -m booktools.run`` writes one per chapter it
runs (``OUT/run-along/``).
"""

from __future__ import annotations

import platform
from pathlib import Path

from booktools import reader

RUN_ALONG_DIR = "run-along"
PENDING = "…"  # a glued value whose cell has not run yet
GLUE_ROLES = ("glue", "glue:", "glue:any", "glue:md", "glue:text")


# --- the copy ----------------------------------------------------------------------


def _static_roles(text: str, here: str, index: reader.BookIndex) -> str:
    """Every role but glue replaced (they do not depend on the run)."""
    import re

    def sub(m: re.Match) -> str:
        if m["name"] in GLUE_ROLES:
            return m[0]
        return reader.resolve_role(m["name"], m["content"], here, index)

    return "\n".join(
        chunk if code else reader._sub_outside_code(chunk, sub)
        for code, chunk in reader._chunks(text)
    )


def _has_glue(text: str) -> bool:
    return any(m["name"] in GLUE_ROLES for m in reader.ROLE.finditer(text))


def _python_string(text: str) -> str:
    """``text`` as a Python literal that reads like the Markdown it holds."""
    if '"""' not in text and not text.endswith(("\\", '"')):
        return f'r"""{text}"""'
    return repr(text)


def _code_cell(source: str, hidden: bool = True):
    import nbformat

    cell = nbformat.v4.new_code_cell(source)
    if hidden:
        cell.metadata["jupyter"] = {"source_hidden": True}
    return cell


PROSE_LINE = "# prose: its numbers fill in as the cells that compute them run"


def pending(text: str) -> str:
    """``text`` (static roles resolved) as it reads before the run: each glue role
    "…"."""

    def sub(m):
        return PENDING if m["name"] in GLUE_ROLES else m[0]

    return "\n".join(
        chunk if code else reader._sub_outside_code(chunk, sub)
        for code, chunk in reader._chunks(text)
    )


def _prose_cell(text: str):
    """A code cell that displays ``text`` with this run's numbers, saved with the
    display it shows before the run (every number "…"), so the copy reads unrun."""
    import nbformat

    cell = _code_cell(f"{PROSE_LINE}\nprose({_python_string(text)})")
    cell.metadata["ampbook"] = {"prose": True}
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={"text/markdown": pending(text)})
    ]
    return cell


def _split_headings(text: str) -> list[str]:
    """``text`` cut before and after each heading line outside fenced code: the
    headings and the prose between them, blank pieces dropped."""
    parts: list[list[str]] = [[]]
    for code, chunk in reader._chunks(text):
        if code:
            parts[-1].append(chunk)
            continue
        for line in chunk.split("\n"):
            if reader.HEADING.match(line):
                parts += [[line], []]
            else:
                parts[-1].append(line)
    pieces = ["\n".join(p).strip("\n") for p in parts]
    return [p for p in pieces if p.strip()]


def _prose_cells(text: str) -> list:
    """The cells of a markdown text that quotes glued values: each heading and each
    piece between them that quotes none a markdown cell, the others prose cells."""
    return [
        _prose_cell(part) if _has_glue(part) else reader._markdown_cell(part)
        for part in _split_headings(text)
    ]


LANGUAGE_INFO = {  # what ipykernel reports, less its version (added when written)
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}


def _title_first(cells: list) -> list:
    """The markdown cells right after the start cell moved above it: the chapter
    opens with its title, not with a collapsed code cell."""
    n = 1
    while n < len(cells) and cells[n].cell_type == "markdown":
        n += 1
    return cells[1:n] + cells[:1] + cells[n:]


def run_along_copy(nb, stem: str, index: reader.BookIndex):
    """The run-along copy of chapter ``stem`` from its source notebook ``nb`` (no
    outputs): a new notebook."""
    import copy

    here = f"chapters/{stem}"
    cells = [
        _code_cell(
            "# Run-along copy: run its cells (Run All) and the prose shows this "
            "run's numbers.\n"
            f"from booktools.runalong import prose, start\n\nstart({stem!r})"
        )
    ]
    cells[0].metadata["ampbook"] = {"run_along_start": True}
    cited: list[str] = []
    for cell in copy.deepcopy(nb).cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "injected-parameters" in tags:
            continue
        if "parameters" in tags:  # the knobs a reader turns: shown, as in the source
            cell.metadata["tags"] = ["parameters"]
            cells.append(cell)
            continue
        reader._collapse(cell)
        if cell.cell_type == "markdown":
            text = reader.convert_directives(cell.source)
            cited += reader._cited(text)
            text = _static_roles(text, here, index)
            if _has_glue(text):
                cells += _prose_cells(text)
            else:
                cell.source = text
                cells.append(cell)
            continue
        cells.append(cell)
        fig = cell.get("metadata", {}).get("mystnb", {}).get("figure")
        if cell.cell_type == "code" and fig and fig.get("caption"):
            caption = reader.convert_directives(fig["caption"])
            cited += reader._cited(caption)
            caption = _static_roles(caption, here, index)
            number = index.figures.get(fig.get("name"), "")
            label = f"**{reader.NUMFIG_FORMAT.format(number)}.** " if number else ""
            text = f"{label}{caption}"
            under = (
                _prose_cell(text) if _has_glue(text) else reader._markdown_cell(text)
            )
            under.metadata.setdefault("ampbook", {})["caption_of"] = fig.get("name")
            cells.append(under)
    sources = reader.sources_cited(cited, index)
    if sources:
        cells.append(reader._markdown_cell(sources))
    cells = _title_first(cells)
    for n, cell in enumerate(cells):
        cell.id = f"cell-{n}"
    out = copy.deepcopy(nb)
    out.cells = cells
    out.metadata.pop("jupytext", None)
    out.metadata.pop("papermill", None)
    out.metadata.setdefault(
        "kernelspec",
        {
            "name": "python3",
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
        },
    )
    out.metadata["language_info"] = {
        **LANGUAGE_INFO,
        "version": platform.python_version(),
    }
    meta = dict(out.metadata.get("ampbook") or {})
    meta["run_along"] = True
    out.metadata["ampbook"] = meta
    return out


def write_run_along_copies(
    sources: list[Path], out_dir: Path | str, errors: list[str] | None = None
) -> list[Path]:
    """The run-along copy of each chapter source (``notebooks/NN_topic.py``) in
    ``out_dir``, same stem. Figures, titles and labels of the other chapters are read
    from ``notebooks/``. A reference that does not resolve raises ReaderCopyError, or
    with ``errors`` given is appended to it and costs that copy only."""

    from booktools.sources import all_notebooks, read_source

    notebooks = {s.stem: read_source(s) for s in all_notebooks()}
    notebooks.update({Path(s).stem: read_source(Path(s)) for s in sources})
    index = reader.book_index(notebooks)
    stems = [Path(source).stem for source in sources]
    return reader.write_copies(
        lambda stem: run_along_copy(notebooks[stem], stem, index),
        stems,
        Path(out_dir),
        errors,
    )


# --- in the kernel -------------------------------------------------------------------


class _State:
    def __init__(self, stem: str):
        self.here = f"chapters/{stem}"
        self.stem = stem
        # the book's figures, titles and labels, for a role a cell displays (md()),
        # from the sources' .ipynb pairs (in sync, a test checks; quicker to read)
        import nbformat

        from booktools.sources import all_notebooks

        self.index = reader.book_index(
            {
                s.stem: nbformat.read(s.with_suffix(".ipynb"), as_version=4)
                for s in all_notebooks()
                if s.with_suffix(".ipynb").is_file()
            }
        )
        self.index.glue = {stem: {}}
        self.shown: list[tuple[object, str, set[str]]] = []  # handle, text, keys
        self.changed: set[str] = set()

    @property
    def values(self) -> dict:
        return self.index.glue[self.stem]

    def render(self, text: str) -> str:
        """``text`` with its glue roles replaced by this run's values, "…" for a
        value not glued yet (or glued in another chapter's run)."""

        def sub(m):
            try:
                return reader.resolve_role(
                    m["name"], m["content"], self.here, self.index
                )
            except reader.ReaderCopyError:
                if m["name"] in GLUE_ROLES:
                    return PENDING
                raise

        text = reader.convert_directives(text)
        return "\n".join(
            chunk if code else reader._sub_outside_code(chunk, sub)
            for code, chunk in reader._chunks(text)
        )


_state: _State | None = None


def _glue_keys(text: str) -> set[str]:
    keys = set()
    for m in reader.ROLE.finditer(text):
        if m["name"] in GLUE_ROLES:
            content = " ".join(m["content"].split())
            if m["name"] in ("glue:text", "glue:md"):
                content = content.rsplit(":", 1)[0] if ":" in content else content
            keys.add(content.rpartition("::")[2])
    return keys


def _keep_glue(msg):
    """A display publisher hook: a glued value's record is kept for the prose and
    not shown (papermill's ``application/papermill.record/*`` output)."""
    content = msg.get("content", {}) if isinstance(msg, dict) else {}
    meta = (content.get("metadata") or {}).get("scrapbook")
    if not meta or "data" not in content or _state is None:
        return msg
    prefix = len(meta.get("mime_prefix", ""))
    _state.values[meta["name"]] = {k[prefix:]: v for k, v in content["data"].items()}
    _state.changed.add(meta["name"])
    return None if prefix else msg


def _update_prose(*_args) -> None:
    """After each cell: the prose that quotes a value glued by it, shown again."""
    if _state is None or not _state.changed:
        return
    changed, _state.changed = _state.changed, set()
    for handle, text, keys in _state.shown:
        if keys & changed:
            handle.update({"text/markdown": _state.render(text)}, raw=True)


def _markdown_of(obj) -> str:
    data = obj._repr_markdown_() if hasattr(obj, "_repr_markdown_") else obj.data
    if isinstance(data, tuple):  # (data, metadata)
        data = data[0]
    if _state is None or not isinstance(data, str):
        return data
    try:
        return _state.render(data)
    except reader.ReaderCopyError:  # a reference the copy cannot resolve: as written
        return data


def start(stem: str) -> None:
    """Hook this kernel for chapter ``stem``'s run-along copy (its first cell)."""
    global _state
    from IPython import get_ipython
    from IPython.display import Markdown

    from ampbook.core.page import Dropdown

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("start() runs in a Jupyter kernel (IPython)")
    first = _state is None
    _state = _State(stem)
    if first:
        shell.display_pub.register_hook(_keep_glue)
        shell.events.register("post_run_cell", _update_prose)
        formatter = shell.display_formatter.formatters["text/markdown"]
        for cls in (Markdown, Dropdown):
            formatter.for_type(cls, _markdown_of)


def prose(text: str) -> None:
    """Display a markdown cell's prose with this run's values, updated in place as
    later cells glue them."""
    from IPython.display import display

    if _state is None:
        raise RuntimeError("run the copy's first cell (start) before its prose")
    handle = display({"text/markdown": _state.render(text)}, raw=True, display_id=True)
    _state.shown.append((handle, text, _glue_keys(text)))
