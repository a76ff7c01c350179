"""The reader's copy of an executed notebook: what the book shows, readable in Jupyter.

In the book, myst-nb pastes each ``{glue:text}`` value into the prose, Sphinx turns
``{cite:p}``, ``{numref}``, ``{ref}``, ``{doc}`` and ``{term}`` into text and links, and
captions each figure from its cell's metadata. Jupyter does none of that: it shows the
roles raw and no captions. The reader's copy does it ahead of time:

- every role is replaced by its text: a glued value formatted by its format spec exactly
  as myst-nb does (``myst_nb``'s own ``format_plain_text``), a citation as "(Author,
  Year)" or "Author (Year)" from ``book/references.bib`` (as the book's author-year
  style writes it), a figure reference as "Fig. 3.2", a section or page reference as its
  title (a link to the other chapter's reader copy), a glossary term as its text;
- MyST directives become what Jupyter renders: admonitions a quoted block with a bold
  title, dropdowns an HTML ``<details>``, math a ``$$`` block; labels such as
  ``(ch5-loader)=`` are dropped;
- each figure's caption (cell metadata ``mystnb.figure``) is a markdown cell under the
  figure, numbered as in the book;
- a note under the title says what the copy is, and a last cell lists the sources cited.

``python -m booktools.run`` writes one per executed notebook (``DIR/reader/``);
``python -m booktools.book`` offers them as each chapter's download.
"""

from __future__ import annotations

import copy
import posixpath
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ampbook.core.paths import BOOK_DIR
from ampbook.core.words import plural

READER_DIR = "reader"  # the reader's copies, beside the executed notebooks
GLUE_PREFIX = "application/papermill.record/"
NUMFIG_FORMAT = "Fig. {}"  # Sphinx's default numfig_format for figures

# A MyST role: {name}`content` (single backticks; the content has none).
ROLE = re.compile(r"\{(?P<name>[A-Za-z][\w:+-]*)\}`(?P<content>[^`]*)`")
# A role that can be left nowhere in a reader's copy.
ANY_ROLE = re.compile(r"\{[A-Za-z][\w:+-]*\}`")
FENCE_OPEN = re.compile(
    r"^(?P<indent> {0,3})(?P<fence>`{3,}|:{3,})\{(?P<name>[^}\s]+)\}[ \t]*(?P<arg>.*)$"
)
CODE_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")
LABEL = re.compile(r"^\s*\((?P<label>[^)\s]+)\)=\s*$")
HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<title>.+?)\s*#*\s*$")
TARGET = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>\s*$", re.S)

ADMONITIONS = {
    "note": "Note",
    "tip": "Tip",
    "hint": "Hint",
    "important": "Important",
    "warning": "Warning",
    "caution": "Caution",
    "attention": "Attention",
    "danger": "Danger",
    "error": "Error",
    "seealso": "See also",
}


class ReaderCopyError(RuntimeError):
    """A role or reference that the reader's copy cannot resolve."""


# --- the bibliography, as the book's author-year style writes it ----------------------


@dataclass(frozen=True)
class Source:
    key: str
    authors: str  # "Romera *et al.*", "Williams and Waterman", "PyTorch"
    year: str
    title: str
    url: str | None
    about: str = ""  # a source without a title (or address): what is known of it


@lru_cache(maxsize=1)
def _text_backend():
    """pybtex's plain-text backend, looked up once: ``render_as("text")`` looks it up
    through the installed packages' entry points on every call (~40 ms each here)."""
    import pybtex.plugin

    return pybtex.plugin.find_plugin("pybtex.backends", "text")()


def _latex_text(text: str) -> str:
    from pybtex.richtext import Text

    return Text.from_latex(text).render(_text_backend())


@lru_cache(maxsize=4)
def _bibliography(path: str) -> dict[str, Source]:
    import pybtex.plugin
    from pybtex.database import parse_file

    names = pybtex.plugin.find_plugin("pybtex.style.names", "last")()
    out = {}
    for key, entry in parse_file(path).entries.items():
        persons = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [names.format(p, True).format().render(_text_backend()) for p in persons]
        if not last:
            authors = _latex_text(entry.fields.get("title", key))
        elif len(last) == 1:
            authors = last[0]
        elif len(last) == 2:
            authors = f"{last[0]} and {last[1]}"
        else:  # the book's style: the first author and "et al." (in italics)
            authors = f"{last[0]} *et al.*"
        out[key] = Source(
            key,
            authors,
            entry.fields.get("year", "n.d."),
            _latex_text(entry.fields.get("title", "")),
            entry.fields.get("url"),
            _latex_text(entry.fields.get("howpublished", "")),
        )
    return out


def bibliography(path: Path | str = BOOK_DIR / "references.bib") -> dict[str, Source]:
    """The book's sources by key."""
    return _bibliography(str(Path(path).resolve()))


def cite_text(kind: str, keys: list[str], sources: dict[str, Source]) -> str:
    """``{cite:p}`` -> "(Romera *et al.*, 2018; Cordts *et al.*, 2016)", ``{cite:t}``
    -> "Romera *et al.* (2018)": the book's author-year style (``author_year_round``
    in ``booktools.sphinx_book``)."""
    missing = [k for k in keys if k not in sources]
    if missing:
        raise ReaderCopyError(
            f"{plural(len(missing), 'citation key')} {missing} not in "
            "book/references.bib"
        )
    found = [sources[k] for k in keys]
    if kind in ("t", "ts"):
        return "; ".join(f"{s.authors} ({s.year})" for s in found)
    return "(" + "; ".join(f"{s.authors}, {s.year}" for s in found) + ")"


# --- what the whole book knows: glue values, figure numbers, titles, labels ----------


@dataclass
class BookIndex:
    """What a role in one notebook may refer to, across the book."""

    glue: dict[str, dict[str, dict]] = field(
        default_factory=dict
    )  # stem -> key -> data
    figures: dict[str, str] = field(default_factory=dict)  # name -> "3.2"
    titles: dict[str, str] = field(default_factory=dict)  # docname -> title
    labels: dict[str, tuple[str, str]] = field(default_factory=dict)  # -> (doc, title)
    sources: dict[str, Source] = field(default_factory=dict)

    def glue_data(self, doc: str, key: str) -> dict:
        stem = doc.rsplit("/", 1)[-1]
        data = self.glue.get(stem, {})
        if key not in data:
            raise ReaderCopyError(f"no glued value {key!r} in {stem}")
        return data[key]


def glue_data(nb) -> dict[str, dict]:
    """Every value a notebook glued (``myst_nb.glue``), by key: its mime bundle, as
    myst-nb reads it (the papermill prefix of a hidden glue stripped)."""
    out = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get("scrapbook")
            if not meta or "data" not in output:
                continue
            prefix = len(meta.get("mime_prefix", ""))
            out[meta["name"]] = {k[prefix:]: v for k, v in output["data"].items()}
    return out


def _chapter_numbers(book_dir: Path) -> dict[str, int]:
    """Docname -> chapter number, from the numbered parts of ``_toc.yml``."""
    import yaml

    toc = yaml.safe_load((book_dir / "_toc.yml").read_text())
    numbered = []
    for part in toc.get("parts", []):
        if part.get("numbered"):
            numbered += [c["file"] for c in part.get("chapters", [])]
    return {doc: n for n, doc in enumerate(numbered, 1)}


def _markdown_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


def _figure_names(nb) -> list[str | None]:
    """The book's numbered figures of a notebook, in order: captioned figure cells and
    markdown ``{figure}`` directives (their ``:name:``)."""
    names: list[str | None] = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            fig = cell.get("metadata", {}).get("mystnb", {}).get("figure")
            if fig and fig.get("caption"):
                names.append(fig.get("name"))
        elif cell.cell_type == "markdown":
            lines = cell.source.splitlines()
            for i, line in enumerate(lines):
                m = FENCE_OPEN.match(line)
                if m and m["name"] in ("figure", "glue:figure"):
                    name = None
                    for opt in lines[i + 1 :]:
                        o = re.match(r"^\s*:name:\s*(\S+)", opt)
                        if o:
                            name = o[1]
                            break
                        if not opt.strip().startswith(":"):
                            break
                    names.append(name)
    return names


def _titles_and_labels(doc: str, texts: list[str], index: BookIndex) -> None:
    pending: list[str] = []
    for text in texts:
        for line in text.splitlines():
            label = LABEL.match(line)
            if label:
                pending.append(label["label"])
                continue
            heading = HEADING.match(line)
            if heading:
                title = heading["title"]
                if len(heading["hashes"]) == 1 and doc not in index.titles:
                    index.titles[doc] = title
                for name in pending:
                    index.labels[name] = (doc, title)
                pending = []
            elif line.strip():
                pending = []


def book_index(notebooks: dict[str, object], book_dir: Path = BOOK_DIR) -> BookIndex:
    """The index for ``notebooks`` (stem -> executed notebook) and the pages of
    ``book_dir``. A notebook is the book's ``chapters/<stem>``."""
    index = BookIndex(sources=bibliography(book_dir / "references.bib"))
    numbers = _chapter_numbers(book_dir)
    for page in sorted(book_dir.glob("*.md")):
        _titles_and_labels(page.stem, [page.read_text()], index)
    for stem, nb in notebooks.items():
        doc = f"chapters/{stem}"
        index.glue[stem] = glue_data(nb)
        _titles_and_labels(doc, _markdown_sources(nb), index)
        chapter = numbers.get(doc)
        if chapter is None and stem[:2].isdigit():
            chapter = int(stem[:2])
        for n, name in enumerate(_figure_names(nb), 1):
            if name:
                index.figures[name] = f"{chapter}.{n}" if chapter else str(n)
    return index


# --- roles ----------------------------------------------------------------------------


def _split_target(content: str) -> tuple[str | None, str]:
    """``"text <target>"`` -> ("text", "target"); ``"target"`` -> (None, "target")."""
    m = TARGET.match(content)
    if m:
        return m["text"].strip() or None, m["target"].strip()
    return None, content.strip()


def _docname(target: str, here: str) -> str:
    """A ``{doc}`` target as a docname, relative to document ``here`` unless
    absolute."""
    target = re.sub(r"\.(md|ipynb)$", "", target.strip())
    if target.startswith("/"):
        return target.lstrip("/")
    return posixpath.normpath(posixpath.join(posixpath.dirname(here), target))


def _glue_doc(path: str, here: str) -> str:
    return _docname(path, here)


def _plain_glue(data: dict, key: str, fmt: str) -> str:
    from myst_nb.core.variables import format_plain_text

    if "text/plain" not in data:
        raise ReaderCopyError(f"glued value {key!r} has no text/plain form")
    return format_plain_text(data["text/plain"], fmt)


def _doc_link(doc: str, here: str, text: str) -> str:
    """A page's title; for another chapter, a link to its reader's copy (the copies
    lie side by side)."""
    if doc.startswith("chapters/") and doc != here:
        return f"[{text}]({doc.split('/', 1)[1]}.ipynb)"
    return text


def resolve_role(name: str, content: str, here: str, index: BookIndex) -> str:
    """The text the book shows for one role, as Markdown. ``here`` is the docname of
    the page it sits in (``chapters/03_amp_training``)."""
    content = " ".join(content.split())  # a role may run over a line end
    if name == "glue:text":
        # myst-nb's parsing: the format spec after the last colon (default "s")
        parts = content.rsplit(":", 1)
        key, fmt = (parts[0], parts[1]) if len(parts) == 2 else (parts[0], "s")
        doc, _, bare = key.rpartition("::")
        source = _glue_doc(doc, here) if doc else here
        return _plain_glue(index.glue_data(source, bare), bare, fmt)
    if name in ("glue", "glue:", "glue:any", "glue:md"):
        doc, _, bare = content.rpartition("::")
        if name == "glue:md":
            bare = bare.rsplit(":", 1)[0] if ":" in bare else bare
        data = index.glue_data(_glue_doc(doc, here) if doc else here, bare)
        if "text/markdown" in data:
            return data["text/markdown"].strip()
        if name != "glue:md" and "text/plain" in data:
            return f"`{data['text/plain']}`"
        raise ReaderCopyError(f"glued value {bare!r} has no text form to paste")
    if name == "cite" or name.startswith("cite:"):
        kind = name.split(":", 1)[1] if ":" in name else "p"
        keys = [k.strip() for k in content.split(",") if k.strip()]
        return cite_text(kind, keys, index.sources)
    if name == "numref":
        text, target = _split_target(content)
        if target not in index.figures:
            raise ReaderCopyError(f"{{numref}} to {target!r}: no figure of that name")
        number = index.figures[target]
        if text:
            return text.replace("%s", number).replace("{number}", number)
        return NUMFIG_FORMAT.format(number)
    if name == "ref":
        text, target = _split_target(content)
        if text:
            return text
        if target not in index.labels:
            raise ReaderCopyError(f"{{ref}} to {target!r}: no such label")
        doc, title = index.labels[target]
        return _doc_link(doc, here, f"“{title}”")
    if name == "doc":
        text, target = _split_target(content)
        doc = _docname(target, here)
        if text is None:
            if doc not in index.titles:
                raise ReaderCopyError(f"{{doc}} to {target!r}: no such page")
            text = index.titles[doc]
        return _doc_link(doc, here, text)
    if name in ("math", "eq"):
        return f"${content}$" if name == "math" else f"({content})"
    # {term}, {abbr}, {sub-ref} and the like: the text the book shows.
    text, target = _split_target(content)
    return text or target


def _chunks(text: str) -> list[tuple[bool, str]]:
    """A markdown text cut into ``(is_code, chunk)`` pieces: fenced code blocks (not
    MyST directives, whose fences name a ``{directive}``) and the prose between them,
    each piece with its line ends, so that joining them gives the text back."""
    out: list[tuple[bool, str]] = []
    fenced, lines = None, []
    for line in text.split("\n"):
        fence = CODE_FENCE.match(line)
        if fenced is None and fence and not FENCE_OPEN.match(line):
            if lines:
                out.append((False, "\n".join(lines)))
            fenced, lines = fence["fence"], [line]
            continue
        lines.append(line)
        if (
            fenced
            and fence
            and fence["fence"][0] == fenced[0]
            and len(fence["fence"]) >= len(fenced)
            and len(lines) > 1
        ):
            out.append((True, "\n".join(lines)))
            fenced, lines = None, []
    if lines or not out:
        out.append((fenced is not None, "\n".join(lines)))
    return out


def replace_roles(text: str, here: str, index: BookIndex) -> str:
    """Every role of a markdown text replaced, outside code (fenced blocks and inline
    code spans); a role may run over a line end, as MyST allows."""

    def sub(m: re.Match) -> str:
        return resolve_role(m["name"], m["content"], here, index)

    return "\n".join(
        chunk if code else _sub_outside_code(chunk, sub)
        for code, chunk in _chunks(text)
    )


def _sub_outside_code(line: str, sub) -> str:
    """``line`` with each role replaced by ``sub(match)``; inline code spans (a run of
    backticks to the next run of the same length) are copied as they are."""
    out, pos, n = [], 0, len(line)
    while pos < n:
        role = ROLE.match(line, pos)
        if role:
            out.append(sub(role))
            pos = role.end()
            continue
        if line[pos] == "`":
            run = re.match(r"`+", line[pos:])[0]
            end = line.find(run, pos + len(run))
            stop = pos + len(run) if end == -1 else end + len(run)
            out.append(line[pos:stop])
            pos = stop
            continue
        nxt = [i for i in (line.find("{", pos + 1), line.find("`", pos + 1)) if i != -1]
        stop = min(nxt) if nxt else n
        out.append(line[pos:stop])
        pos = stop
    return "".join(out)


# --- directives -----------------------------------------------------------------------


def _directive_body(lines: list[str]) -> tuple[dict, list[str]]:
    """Options (``:key: value`` lines or a ``---`` YAML block) and the body."""
    options: dict = {}
    i = 0
    if lines and lines[0].strip() == "---":
        end = next((j for j in range(1, len(lines)) if lines[j].strip() == "---"), None)
        if end is not None:
            import yaml

            options = yaml.safe_load("\n".join(lines[1:end])) or {}
            i = end + 1
    while i < len(lines):
        m = re.match(r"^\s*:([\w-]+):\s*(.*)$", lines[i])
        if not m:
            break
        options[m[1]] = m[2]
        i += 1
    return options, lines[i:]


def _quote(text: str) -> str:
    return "\n".join(f"> {line}".rstrip() for line in text.split("\n"))


def convert_directives(text: str) -> str:
    """MyST directives as Markdown that Jupyter renders (nested ones too)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    fenced = None
    while i < len(lines):
        line = lines[i]
        m = FENCE_OPEN.match(line)
        if fenced is None and m:
            fence = m["fence"]
            close = next(
                (
                    j
                    for j in range(i + 1, len(lines))
                    if lines[j].strip()
                    and set(lines[j].strip()) == {fence[0]}
                    and len(lines[j].strip()) >= len(fence)
                ),
                None,
            )
            if close is None:
                close = len(lines)
            options, body = _directive_body(lines[i + 1 : close])
            inner = convert_directives("\n".join(body)).strip("\n")
            out.append(_render_directive(m["name"], m["arg"].strip(), options, inner))
            i = close + 1
            continue
        code = CODE_FENCE.match(line)
        if code and fenced is None:
            fenced = code["fence"]
        elif code and fenced and code["fence"][0] == fenced[0]:
            fenced = None
        if fenced is None and LABEL.match(line):
            i += 1  # a target label: nothing to show
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _render_directive(name: str, arg: str, options: dict, body: str) -> str:
    classes = str(options.get("class", ""))
    if name == "dropdown" or (
        name in ("admonition", *ADMONITIONS) and "dropdown" in classes
    ):
        title = arg or ADMONITIONS.get(name, "Details")
        return f"<details>\n<summary>{title}</summary>\n\n{body}\n\n</details>\n"
    if name in ADMONITIONS or name == "admonition":
        title = arg if name == "admonition" else ADMONITIONS[name]
        return _quote(f"**{title}**\n\n{body}" if title else body) + "\n"
    if name in ("math", "equation"):
        return f"$$\n{body}\n$$\n"
    if name in ("code-block", "code", "code-cell", "sourcecode"):
        return f"```{arg}\n{body}\n```\n"
    if name == "epigraph" or name == "blockquote":
        return _quote(body) + "\n"
    # figure, image and anything else: its body (a caption, a text) without the fence
    return (
        (f"*{arg}*\n\n" if arg and name not in ("figure", "image") else "")
        + body
        + "\n"
    )


# --- the copy -------------------------------------------------------------------------


def _markdown_cell(source: str):
    import nbformat

    return nbformat.v4.new_markdown_cell(source)


# The book's cell tags and what JupyterLab does for each: a removed cell is dropped, a
# hidden input or output collapsed (``metadata.jupyter``), as the page shows them.
REMOVED = ("remove-cell", "injected-parameters")
SOURCE_HIDDEN = ("hide-input", "remove-input", "hide-cell")
OUTPUTS_HIDDEN = ("hide-output", "remove-output", "hide-cell")


def _cited(text: str) -> list[str]:
    return [
        k.strip()
        for m in ROLE.finditer(text)
        if m["name"] == "cite" or m["name"].startswith("cite:")
        for k in m["content"].split(",")
        if k.strip()
    ]


def _page_text(text: str, here: str, index: BookIndex, cited: list[str]) -> str:
    """Markdown as the book shows it: directives converted, roles replaced (the keys
    cited appended to ``cited``)."""
    text = convert_directives(text)
    cited += _cited(text)
    return replace_roles(text, here, index)


def _glue_record(output) -> bool:
    """A glued value's record (papermill's hidden ``application/papermill.record/*``
    output): the book reads it, the page shows nothing."""
    data = output.get("data") or {}
    return bool(data) and all(k.startswith(GLUE_PREFIX) for k in data)


def _reader_outputs(cell, here: str, index: BookIndex, cited: list[str]) -> list:
    kept = []
    for output in cell.get("outputs", []):
        if _glue_record(output):
            continue
        data = output.get("data") or {}
        if isinstance(data.get("text/markdown"), str):
            data["text/markdown"] = _page_text(
                data["text/markdown"], here, index, cited
            )
        kept.append(output)
    return kept


def _parameters_of_the_run(cell, injected: str | None, profile: str | None) -> None:
    """The parameters cell, collapsed, with the values this run used (papermill's
    injected cell, dropped from the copy) under the defaults: the copy stays runnable
    from the top."""
    if injected:
        assignments = [
            line for line in injected.splitlines() if not line.startswith("#")
        ]
        how = f" (the {profile} profile)" if profile else ""
        cell.source = (
            cell.source.rstrip("\n")
            + f"\n\n# The values this copy was run with{how}\n"
            + "\n".join(assignments).strip("\n")
        )
    cell.metadata["tags"] = [
        t for t in cell.metadata.get("tags", []) if t not in REMOVED
    ]
    cell.metadata["jupyter"] = {"source_hidden": True, "outputs_hidden": True}


def _collapse(cell) -> None:
    tags = cell.get("metadata", {}).get("tags", [])
    jupyter = dict(cell.metadata.get("jupyter") or {})
    if any(t in tags for t in SOURCE_HIDDEN):
        jupyter["source_hidden"] = True
    if cell.cell_type == "code" and any(t in tags for t in OUTPUTS_HIDDEN):
        jupyter["outputs_hidden"] = True
    if jupyter:
        cell.metadata["jupyter"] = jupyter


def reader_copy(nb, stem: str, index: BookIndex, profile: str | None = None):
    """The reader's copy of executed notebook ``nb`` (chapter ``stem``): a new
    notebook, ``nb`` unchanged. It reads like the page: removed cells dropped (the
    parameters cell kept collapsed, with this run's values), hidden inputs and outputs
    collapsed, MyST in markdown cells and in Markdown outputs converted, glue records
    dropped; no jupytext pairing (saving a copy writes no ``.py``); cells numbered
    ``cell-N``, so that two copies of one run are the same file."""
    here = f"chapters/{stem}"
    out = copy.deepcopy(nb)
    cited: list[str] = []
    cells = []
    injected = next(
        (
            c.source
            for c in out.cells
            if "injected-parameters" in c.get("metadata", {}).get("tags", [])
        ),
        None,
    )
    for cell in out.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "parameters" in tags:
            _parameters_of_the_run(cell, injected, profile)
            cells.append(cell)
            continue
        if any(t in tags for t in REMOVED):
            continue
        _collapse(cell)
        if cell.cell_type == "markdown":
            cell.source = _page_text(cell.source, here, index, cited)
            cells.append(cell)
            continue
        if cell.cell_type == "code":
            cell.outputs = _reader_outputs(cell, here, index, cited)
        cells.append(cell)
        fig = cell.get("metadata", {}).get("mystnb", {}).get("figure")
        if cell.cell_type == "code" and fig and fig.get("caption"):
            caption = _page_text(fig["caption"], here, index, cited)
            number = index.figures.get(fig.get("name"), "")
            label = f"**{NUMFIG_FORMAT.format(number)}.** " if number else ""
            caption_cell = _markdown_cell(f"{label}{caption}")
            caption_cell.metadata["ampbook"] = {"caption_of": fig.get("name")}
            cells.append(caption_cell)
    how = f" with the `{profile}` profile" if profile else ""
    number = stem[:2].lstrip("0") if stem[:2].isdigit() else stem
    note = _markdown_cell(
        f"*The reader's copy of this chapter as executed for the book{how}: the "
        "numbers in the text are pasted in from this run's outputs, as in the book, "
        "and each figure has its caption under it; the code the book hides is "
        "collapsed (click the bar left of a cell to open it). Running "
        "a cell again updates its output, not the text. To run the chapter yourself "
        "and read your run's numbers in the text, open its run-along copy, "
        f"`run-along/{stem}.ipynb` beside the executed notebooks of `python -m "
        f"booktools.run {number}`.*"
    )
    note.metadata["ampbook"] = {"reader_note": True}
    first = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"), -1)
    cells.insert(first + 1, note)
    sources = sources_cited(cited, index)
    if sources:
        refs = _markdown_cell(sources)
        refs.metadata["ampbook"] = {"sources": list(dict.fromkeys(cited))}
        cells.append(refs)
    for n, cell in enumerate(cells):
        cell.id = f"cell-{n}"
    out.cells = cells
    out.metadata.pop("jupytext", None)  # no pairing: a saved copy stays one file
    meta = dict(out.metadata.get("ampbook") or {})
    meta["reader_copy"] = True
    out.metadata["ampbook"] = meta
    return out


def leftover_myst(text: str) -> list[str]:
    """Roles, directives and labels left in a markdown text (outside code)."""
    bad: list[str] = []
    for code, chunk in _chunks(text):
        if code:
            continue
        found: list[str] = []
        _sub_outside_code(chunk, lambda m: found.append(m[0]) or "")
        bad += [" ".join(role.split())[:80] for role in found]
        bad += [
            line.strip()[:80]
            for line in chunk.split("\n")
            if FENCE_OPEN.match(line) or LABEL.match(line)
        ]
    return bad


def leftover_roles(nb) -> list[str]:
    """Roles and directives left in a notebook's markdown cells and Markdown outputs
    (none in a reader's copy), as ``"cell N: {role}`..."`` lines."""
    bad = []
    for n, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            bad += [f"cell {n}: {found}" for found in leftover_myst(cell.source)]
        for output in cell.get("outputs", []):
            text = (output.get("data") or {}).get("text/markdown")
            if isinstance(text, str):
                bad += [f"cell {n} output: {found}" for found in leftover_myst(text)]
    return bad


def write_reader_copies(
    executed_dir: Path | str,
    stems: list[str] | None = None,
    out_dir: Path | str | None = None,
    book_dir: Path = BOOK_DIR,
    profile: str | None = None,
    errors: list[str] | None = None,
) -> list[Path]:
    """Write the reader's copy of each executed notebook ``stems`` (default: every
    ``.ipynb`` of ``executed_dir``) to ``out_dir`` (default
    ``executed_dir/reader``), same file names. Figures, titles and labels of chapters
    not executed there are read from their sources, so a reference to another chapter
    resolves; a glued value must come from an executed notebook. A reference that does
    not resolve raises ReaderCopyError, or with ``errors`` given is appended to it as
    one line and costs that notebook's copy only."""
    import nbformat

    from booktools.sources import all_notebooks, read_source

    executed_dir = Path(executed_dir)
    out_dir = Path(out_dir) if out_dir is not None else executed_dir / READER_DIR
    notebooks = {
        p.stem: nbformat.read(p, as_version=4)
        for p in sorted(executed_dir.glob("*.ipynb"))
        if not p.name.startswith(".")
    }
    context = dict(notebooks)
    for source in all_notebooks():
        if source.stem not in context:
            context[source.stem] = read_source(source)
    index = book_index(context, book_dir)
    stems = stems if stems is not None else list(notebooks)

    def make(stem: str):
        if stem not in notebooks:
            raise ReaderCopyError(f"no executed notebook {stem}.ipynb")
        return reader_copy(notebooks[stem], stem, index, profile)

    return write_copies(make, stems, out_dir, errors)


def sources_cited(cited, index) -> str | None:
    """The "Sources cited" section a copy ends with: each key of ``cited`` once, in
    order of first citation, as Markdown; None when nothing was cited."""
    seen = list(dict.fromkeys(cited))
    if not seen:
        return None
    lines = ["## Sources cited", ""]
    for key in seen:
        s = index.sources[key]
        link = f" <{s.url}>" if s.url else ""
        what = f"*{s.title}*." if s.title else f"{s.about}."
        lines.append(f"- {s.authors} ({s.year}). {what}{link}")
    return "\n".join(lines)


def write_copies(make, stems, out_dir: Path, errors: list[str] | None) -> list[Path]:
    """``make(stem)``'s notebook written to ``out_dir/stem.ipynb`` for each stem (to a
    temporary name first, so a stopped write leaves no half copy). A ReaderCopyError
    raises, naming the stem, or with ``errors`` given is appended to it and costs that
    copy only."""
    import nbformat

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stem in stems:
        try:
            nb = make(stem)
        except ReaderCopyError as err:
            if errors is None:
                raise ReaderCopyError(f"{stem}: {err}") from None
            errors.append(f"{stem}: {err}")
            continue
        path = out_dir / f"{stem}.ipynb"
        tmp = path.with_name(f".{path.name}.tmp")
        nbformat.write(nb, tmp)
        tmp.replace(path)
        written.append(path)
    return written
