"""Open the built book in headless Chromium and check what a reader would see.

    python -m booktools.bookcheck [HTML_DIR]

For every page: it loads from disk with the network blocked; every image loads; MathJax
has typeset every math element and no raw TeX delimiters are left in the text; every
internal link points to an existing page and anchor; nothing asked for the network; no
cell shows an error (a traceback output, or papermill's "encountered an exception"
banner).

And the page a reader sees (DEVELOPING.md, "The page a reader sees"), at 1300 and
1000 px wide:

- the lesson first: on a chapter page the first ``##`` heading starts within the first
  screen, ``FIRST_SCREEN_PX`` (1200 px) from the top at 1300 px wide; on another page
  that has one, too;
- the answer on the first screen (``SCREENS``: 1300 x 900 and 1000 x 800 px): the
  first ``ANSWER_LINES`` lines of an "In short" box's text, and on a page of
  ``ANSWER_LISTS`` of the first list item under the first ``##`` heading, within the
  screen's height; each list item of an "In short" box at most ``IN_SHORT_LINES``
  lines at 1300 px (read at a glance);
- nothing cut off, at either width, with every dropdown and hidden cell opened: no
  table with cells hidden in its scroll box, no line of output or code wider than its
  box, no figure wider than the column, nothing past the column's edge. Each is named
  by its text's start and by how much it is cut.

Per page it prints the first heading's position, the share of the page's height in
tables and in figures, and the number of elements cut off; then one line per problem.
Exits 1 when there is any problem; a folder without pages or no Chromium is one
``error:`` line and exit 2. Chromium: ``$CHROMIUM``, else
``chromium`` or ``chromium-browser`` on PATH (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from ampbook.core import cli
from ampbook.core.words import plural

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
RAW_TEX = re.compile(r"(\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\\frac\{|\\mathrm\{)")
SKIP_PAGES = {"genindex.html", "search.html"}

_PAGE_JS = """
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const imgs = Array.from(document.images).map(i => ({src: i.getAttribute('src'),
      ok: i.complete && i.naturalWidth > 0}));
  const maths = Array.from(document.querySelectorAll('.math'));
  const untypeset = maths.filter(m => !m.querySelector('mjx-container'))
      .map(m => m.textContent.slice(0, 80));
  const root = document.querySelector('main') || document.body;
  const clone = root.cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, mjx-container, .highlight')
      .forEach(e => e.remove());
  const links = Array.from(document.querySelectorAll('a[href]')).map(a => a.href);
  const ids = Array.from(document.querySelectorAll('[id]')).map(e => e.id)
      .concat(Array.from(document.querySelectorAll('a[name]'))
          .map(e => e.getAttribute('name')));
  const failed = '.output.traceback, #papermill-error-cell';
  const errors = Array.from(document.querySelectorAll(failed)).map(
      e => e.textContent.trim().split('\\n').filter(l => l.trim()).slice(-1)[0] || '');
  return {imgs, nmath: maths.length, untypeset, text: clone.textContent, links, ids,
          errors,
          title: document.title, mathjax: !!(window.MathJax && MathJax.version), };
}
"""


class CheckError(RuntimeError, cli.UserError):
    """The check cannot run: no pages, no Chromium."""


WIDTHS = (1300, 1000)  # the page is read at these widths (px)
FIRST_SCREEN_PX = 1200  # a chapter's first ## heading starts above this, at 1300 px
# The first screen a reader sees at each width: a laptop's window (px, width: height).
SCREENS = {1300: 900, 1000: 800}
# Pages whose answer is a list under the first ## heading: its first item is the
# answer, on the first screen at every width, as an "In short" box is.
ANSWER_LISTS = {"chapters/10_findings.html": "the first finding"}
IN_SHORT_LINES = 3  # an "In short" box's list items, at most, at the widest width
ANSWER_LINES = 3  # the answer's first lines (all, if fewer) on the first screen


@dataclass
class PageReport:
    page: str
    images: int = 0
    math: int = 0
    links: int = 0
    problems: list = field(default_factory=list)
    # the page a reader sees, at 1300 px wide (``layout``)
    heading_px: int | None = None  # top of the first ## heading, from the page's top
    heading: str | None = None  # its text
    page_px: int = 0  # the page's height
    table_share: float = 0.0  # of the page's height, in tables (dropdowns closed)
    figure_share: float = 0.0  # in figures
    # elements cut off, by kind ("table", "output", "code", "figure", "other"), at the
    # width where each kind had the most
    clipped: dict = field(default_factory=dict)
    # the problems of the page a reader sees (also in ``problems``)
    layout_problems: list = field(default_factory=list)

    def summary(self) -> str:
        """The page's layout numbers on one line."""
        heading = "-" if self.heading_px is None else f"{self.heading_px} px"
        clipped = (
            ", ".join(f"{n} {kind}" for kind, n in sorted(self.clipped.items()))
            or "none"
        )
        return (
            f"first ## at {heading}; tables {self.table_share:.0%}, figures "
            f"{self.figure_share:.0%} of {self.page_px} px; cut off: {clipped}"
        )


def find_chromium() -> str | None:
    """``$CHROMIUM`` (checked: an executable file), else Chromium or Chrome on PATH;
    None when there is none."""
    env = os.environ.get("CHROMIUM", "").strip()
    if env:
        path = shutil.which(env) or env
        if not (Path(path).is_file() and os.access(path, os.X_OK)):
            raise CheckError(
                f"environment variable CHROMIUM={env!r} is not an executable file; "
                "point it at a Chromium binary, or unset it to use chromium on PATH"
            )
        return path
    for cand in (
        "chromium",
        "chromium-browser",
        "google-chrome",
    ):
        if cand and (shutil.which(cand) or Path(cand).exists()):
            return shutil.which(cand) or cand
    return None


def check_book(
    html_dir: Path | str, chromium: str | None = None, only: list[str] | None = None
) -> list[PageReport]:
    """Check every page of the built book in ``html_dir`` (``only``: just these pages,
    paths relative to it); one report per page."""
    from playwright.sync_api import sync_playwright

    html_dir = Path(html_dir).resolve()
    pages = _pages(html_dir, only)
    chromium = chromium or find_chromium()
    if chromium is None:
        raise CheckError(
            "Chromium not found: apt-get install chromium, or set $CHROMIUM"
        )
    reports: list[PageReport] = []
    page_info: dict[Path, dict] = {}
    # Chromium's children can still be writing its profile as a stop ends the check:
    # the folder's removal then must not replace the stop with "Directory not empty".
    profile = tempfile.TemporaryDirectory(
        prefix="ampbook-chromium-", ignore_cleanup_errors=True
    )
    with sync_playwright() as pw, profile as profile_dir:
        browser = _launch(pw, profile_dir, chromium)
        for path in pages:
            report = PageReport(str(path.relative_to(html_dir)))
            reports.append(report)
            page_info[path] = _check_page(browser, path, report)
        browser.close()
    _check_links(reports, pages, page_info)
    return reports


def _pages(html_dir: Path, only: list[str] | None) -> list[Path]:
    """The book's pages to check."""
    if not html_dir.is_dir():
        raise CheckError(
            f"{html_dir} is not a folder; give the book's HTML folder "
            "(OUT/_build/html of python -m booktools.book)"
        )
    pages = sorted(
        p
        for p in html_dir.rglob("*.html")
        if p.name not in SKIP_PAGES
        and "_static" not in p.parts
        and "_sources" not in p.parts
    )
    if only is not None:
        wanted = {str(Path(p)) for p in only}
        pages = [p for p in pages if str(p.relative_to(html_dir)) in wanted]
    if not pages:
        raise CheckError(
            f"no HTML pages under {html_dir}; build the book first "
            "(python -m booktools.book) and give its OUT/_build/html"
        )
    return pages


def _launch(pw, profile_dir, chromium: str):
    """Headless Chromium with its own profile, or ``CheckError``."""
    try:
        browser = pw.chromium.launch_persistent_context(
            profile_dir,
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_FLAGS[1:],
            timeout=60_000,
        )
        # a loaded 2-core machine can take far longer than Playwright's 30 s
        browser.set_default_timeout(180_000)
    except Exception as err:  # noqa: BLE001 -- playwright's Error: no browser
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise CheckError(
            f"{chromium} could not be started as Chromium ({first[:200]}); "
            "install chromium or point CHROMIUM at it"
        ) from None
    return browser


def _check_page(browser, path: Path, report: PageReport) -> dict:
    """Load one page offline, check it and its layout into ``report``; returns what
    the page script read (its links and ids among it)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = browser.new_page()
    network: list[str] = []
    failed: list[str] = []
    errors: list[str] = []

    def route(r):
        url = r.request.url
        if url.startswith("file:") or url.startswith("data:"):
            return r.continue_()
        network.append(url)
        return r.abort()

    page.route("**/*", route)
    page.on(
        "requestfailed",
        lambda req: failed.append(req.url) if req.url.startswith("file:") else None,
    )
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    response = page.goto(path.as_uri(), wait_until="load")
    if response is not None and not response.ok:
        report.problems.append(f"page did not load (status {response.status})")
    try:  # late requests (fonts, MathJax's parts): best effort, all local
        page.wait_for_load_state("networkidle", timeout=20_000)
    except PlaywrightTimeout:
        pass
    info = page.evaluate(_PAGE_JS)
    layout(page, report, chapter=report.page.startswith("chapters/"))
    page.close()
    report.images = len(info["imgs"])
    report.math = info["nmath"]
    report.links = len(info["links"])
    report.problems += [
        f"image does not load: {i['src']}" for i in info["imgs"] if not i["ok"]
    ]
    report.problems += [
        f"math not typeset by MathJax: {t!r}" for t in info["untypeset"]
    ]
    if info["nmath"] and not info["mathjax"]:
        report.problems.append("page has math but MathJax did not load")
    for m in RAW_TEX.finditer(info["text"]):
        context = info["text"][max(0, m.start() - 40) : m.end() + 40]
        context = context.replace("\n", " ")
        report.problems.append(f"raw TeX left in the text: ...{context}...")
    report.problems += [f"asked the network for {u}" for u in network]
    report.problems += [f"resource failed to load: {u}" for u in failed]
    report.problems += [f"JavaScript error: {e}" for e in errors]
    report.problems += [f"shows an error output: {e[:160]!r}" for e in info["errors"]]
    return info


def _check_links(reports, pages, page_info: dict[Path, dict]) -> None:
    """Internal links: the target file exists and, with a fragment, has that id."""
    by_path = {p.resolve(): info for p, info in page_info.items()}
    for report, path in zip(reports, pages):
        for href in page_info[path]["links"]:
            url = urlparse(href)
            if url.scheme != "file":
                continue
            target = Path(unquote(url.path))
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                report.problems.append(f"broken link: {href}")
                continue
            if (
                url.fragment
                and target.suffix == ".html"
                and target.resolve() in by_path
            ):
                if unquote(url.fragment) not in by_path[target.resolve()]["ids"]:
                    report.problems.append(f"broken anchor: {href}")


# --- the page a reader sees: the lesson first, nothing cut off ------------------------

_LAYOUT_JS = """
() => {
  const col = document.querySelector('article.bd-article')
      || document.querySelector('main') || document.body;
  const top = e => e.getBoundingClientRect().top + window.scrollY;
  const height = e => e.getBoundingClientRect().height;
  const page = document.documentElement.scrollHeight;
  const h2 = col.querySelector('h2');
  const heading = h2 ? {top: Math.round(top(h2)),
      text: h2.textContent.replace(/[\\s#¶]+$/, '').trim().slice(0, 60)} : null;
  const outer = sel => Array.from(col.querySelectorAll(sel))
      .filter(e => !e.parentElement.closest(sel));
  const tables = outer('table').reduce((a, t) => a + height(t), 0);
  const figures = outer('img').reduce((a, f) => a + height(f), 0);
  return {page, heading, tables, figures};
}
"""

# Everything the reader can open is opened before the check for content cut off:
# dropdowns (<details>), hidden cells and toggled admonitions.
_OPEN_ALL_JS = """
() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach(
      e => e.classList.remove('toggle-hidden'));
  document.querySelectorAll('.toggle-details__summary, button.toggle-button')
      .forEach(b => b.setAttribute('aria-expanded', 'true'));
  return document.querySelectorAll('details').length;
}
"""

_CLIPPED_JS = """
() => {
  const col = document.querySelector('article.bd-article')
      || document.querySelector('main') || document.body;
  const colBox = col.getBoundingClientRect();
  const squash = t => (t || '').trim().replace(/\\s+/g, ' ').slice(0, 60);
  const out = [];
  // 1. boxes that scroll or clip sideways and hide part of what they hold
  for (const el of col.querySelectorAll('*')) {
    // inline math: its box is as wide as the formula; MathJax's hidden screen-reader
    // copy inside it only makes it look wider
    if (el.closest('mjx-container, span.math')) continue;
    const style = getComputedStyle(el);
    // overflow does not apply to an inline box (and its clientWidth is 0)
    if (style.overflowX === 'visible' || style.display === 'inline') continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const hidden = el.scrollWidth - el.clientWidth;
    if (hidden <= 1) continue;
    const right = r.left + el.clientLeft + el.clientWidth;
    const table = el.tagName === 'TABLE' ? el : el.querySelector('table');
    const pre = el.tagName === 'PRE' ? el : el.querySelector('pre');
    const img = el.tagName === 'IMG' ? el : el.querySelector('img');
    if (table) {
      const cells = Array.from(table.querySelectorAll('th, td'));
      const cut = cells.filter(c => c.getBoundingClientRect().right > right + 1);
      if (!cut.length) continue;
      const head = Array.from(table.querySelectorAll('th')).map(c => c.textContent)
          .join(' | ');
      out.push({kind: 'table', px: Math.round(hidden),
                width: Math.round(el.clientWidth),
                text: squash(head || table.textContent), cells: cut.length,
                first: squash(cut[0].textContent)});
    } else if (pre) {
      const lines = pre.textContent.split('\\n');
      const longest = lines.reduce((a, l) => (l.length > a.length ? l : a), '');
      const output = !!pre.closest('.cell_output, .output');
      out.push({kind: output ? 'output' : 'code', px: Math.round(hidden),
                width: Math.round(el.clientWidth), text: squash(longest),
                chars: longest.length});
    } else if (img) {
      out.push({kind: 'figure', px: Math.round(hidden),
                width: Math.round(el.clientWidth),
                text: squash(img.getAttribute('alt') || img.getAttribute('src'))});
    } else {
      out.push({kind: 'other', px: Math.round(hidden),
                width: Math.round(el.clientWidth), text: squash(el.textContent)});
    }
  }
  // 2. figures wider than the column (scaled images never are; fixed-size ones can be)
  for (const img of col.querySelectorAll('img')) {
    const r = img.getBoundingClientRect();
    if (r.width === 0) continue;
    const past = Math.max(r.right - colBox.right, colBox.left - r.left);
    if (past > 1) {
      out.push({kind: 'figure', px: Math.round(past), width: Math.round(colBox.width),
                text: squash(img.getAttribute('alt') || img.getAttribute('src'))});
    }
  }
  return out;
}
"""


def _describe(cut: dict, width: int) -> str:
    """One problem line for an element cut off at ``width`` px."""
    where = f"at {width} px"
    if cut["kind"] == "table":
        return (
            f"table cut off {where}: {plural(cut['cells'], 'cell')} hidden in its "
            "scroll box, "
            f"{cut['px']} px of the table beyond its {cut['width']} px (first hidden: "
            f"{cut['first']!r}): {cut['text']!r}"
        )
    if cut["kind"] in ("output", "code"):
        what = "output line" if cut["kind"] == "output" else "code line"
        return (
            f"{what} cut off {where}: {cut['chars']} characters, {cut['px']} px past "
            f"its {cut['width']} px box: {cut['text']!r}"
        )
    if cut["kind"] == "figure":
        return (
            f"figure cut off {where}: {cut['px']} px wider than its {cut['width']} px "
            f"box: {cut['text']!r}"
        )
    if "tag" in cut:  # sticks out of the column, or out of a box that clips
        how = "clipped by its container" if cut["clipped"] else "past the column"
        return (
            f"cut off horizontally {where} by {cut['px']} px ({how}): "
            f"<{cut['tag']}> {cut['text']!r}"
        )
    return f"content cut off {where}: {cut['px']} px hidden in its box: {cut['text']!r}"


def layout(page, report: PageReport, chapter: bool) -> None:
    """Measure the loaded ``page`` at each of ``WIDTHS`` into ``report``: its first
    heading, its tables' and figures' share of the height (at the first width), and
    what is cut off (at every width, everything opened). ``chapter`` pages must have a
    ``##`` heading."""
    for n, width in enumerate(WIDTHS):  # the first screens, nothing opened yet
        page.set_viewport_size({"width": width, "height": SCREENS[width]})
        page.wait_for_timeout(50)  # let the layout settle
        report.layout_problems += first_screen_problems(
            page.evaluate(_FIRST_SCREEN_JS, ANSWER_LINES), report.page, width, n == 0
        )
    found: dict[int, list] = {}
    for n, width in enumerate(WIDTHS):
        page.set_viewport_size({"width": width, "height": SCREENS[width]})
        page.wait_for_timeout(50)  # let the layout settle
        if n == 0:
            info = page.evaluate(_LAYOUT_JS)
            report.page_px = int(info["page"])
            report.table_share = info["tables"] / max(info["page"], 1)
            report.figure_share = info["figures"] / max(info["page"], 1)
            if info["heading"] is not None:
                report.heading_px = info["heading"]["top"]
                report.heading = info["heading"]["text"]
                if report.heading_px > FIRST_SCREEN_PX:
                    report.layout_problems.append(
                        f"first ## heading {report.heading!r} starts at "
                        f"{report.heading_px} px at {width} px wide, "
                        f"{report.heading_px - FIRST_SCREEN_PX} px below the first "
                        f"screen ({FIRST_SCREEN_PX} px): move plumbing off the page"
                    )
            elif chapter:
                report.layout_problems.append("chapter page has no ## heading")
            page.evaluate(_OPEN_ALL_JS)
            page.wait_for_timeout(50)
        found[width] = page.evaluate(_CLIPPED_JS) + [
            dict(o, kind="other") for o in page.evaluate(_OVERFLOW_JS)
        ]
    # Each element once: as cut at the narrowest width, or at a wider one where only
    # that one cuts it.
    seen: set = set()
    for width in sorted(found):
        for cut in found[width]:
            key = (cut["kind"], cut["text"])
            if key in seen:
                continue
            seen.add(key)
            report.layout_problems.append(_describe(cut, width))
            report.clipped[cut["kind"]] = report.clipped.get(cut["kind"], 0) + 1
    report.problems += report.layout_problems


# --- the answer on the first screen ---------------------------------------------------

_FIRST_SCREEN_JS = """
(n) => {
  const col = document.querySelector('article.bd-article')
      || document.querySelector('main') || document.body;
  const top = e => e.getBoundingClientRect().top + window.scrollY;
  const lineHeight = e => {
    const style = getComputedStyle(e);
    return parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize);
  };
  // the bottom of an element's first n lines of text (all, if fewer), from the top
  const firstLines = (e, n) => Math.round(top(e) + lineHeight(e) * Math.min(n,
      Math.max(1, Math.round(e.getBoundingClientRect().height / lineHeight(e)))));
  const squash = t => (t || '').trim().replace(/\\s+/g, ' ').slice(0, 60);
  const box = Array.from(col.querySelectorAll('.admonition')).find(a => {
    const t = a.querySelector('.admonition-title');
    return t && t.textContent.trim() === 'In short';
  });
  let inShort = null, items = [];
  if (box) {
    const body = Array.from(box.children)
        .find(c => !c.classList.contains('admonition-title')) || box;
    const text = body.matches('ul, ol') ? body.querySelector('li') || body : body;
    inShort = {line: firstLines(text, n), text: squash(body.textContent)};
    items = Array.from(box.querySelectorAll('li')).map(li => ({
      lines: Math.round(li.getBoundingClientRect().height / lineHeight(li)),
      text: squash(li.textContent)}));
  }
  const h2 = col.querySelector('h2');
  const section = h2 && (h2.closest('section') || h2.parentElement);
  const li = section && section.querySelector('li');
  const item = li ? {line: firstLines(li, n), text: squash(li.textContent)} : null;
  return {inShort, items, item};
}
"""


def first_screen_problems(info: dict, page: str, width: int, widest: bool) -> list[str]:
    """What of the answer is not on the first screen at ``width`` (``SCREENS``): an
    "In short" box's first ``ANSWER_LINES`` lines, those of the first item of an
    ``ANSWER_LISTS`` page; and, at the ``widest`` width, an "In short" list item
    longer than ``IN_SHORT_LINES``."""
    screen = SCREENS[width]
    out = []
    box = info.get("inShort")
    if box and box["line"] > screen:
        out.append(
            f"'In short' is below the first screen at {width} x {screen} px: its "
            f"first {ANSWER_LINES} lines end at {box['line']} px, "
            f"{box['line'] - screen} px below (shorten what comes before it): "
            f"{box['text']!r}"
        )
    what = ANSWER_LISTS.get(page)
    item = info.get("item")
    if what and item is None:
        out.append(f"{what} not found: no list under the first ## heading")
    elif what and item["line"] > screen:
        out.append(
            f"{what} is below the first screen at {width} x {screen} px: its first "
            f"{ANSWER_LINES} lines end at {item['line']} px, {item['line'] - screen} "
            f"px below (shorten what comes before it): {item['text']!r}"
        )
    if widest:
        out += [
            f"'In short' item of {i['lines']} lines at {width} px (at most "
            f"{IN_SHORT_LINES}: read at a glance): {i['text']!r}"
            for i in info.get("items", [])
            if i["lines"] > IN_SHORT_LINES
        ]
    return out


# --- horizontal overflow: nothing on a page may be cut off sideways -------------------

_OVERFLOW_JS = """
() => {
  const col = document.querySelector('article.bd-article')
      || document.querySelector('main') || document.body;
  const edge = col.getBoundingClientRect();
  const out = [];
  const seen = new Set();
  for (const el of col.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if (el.closest('mjx-assistive-mml')) continue;  // MathJax's screen-reader copy
    if (el.tagName === 'IMG') continue;  // figures: layout() checks them
    let box = null;
    for (let a = el.parentElement; a && a !== col.parentElement; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== 'visible') { box = a; break; }
    }
    const scrolls = box && ['auto', 'scroll'].includes(getComputedStyle(box).overflowX);
    if (scrolls) continue;  // it scrolls inside its own box: the reader can reach it
    const limit = box ? box.getBoundingClientRect() : edge;
    const past = Math.max(r.right - limit.right, limit.left - r.left);
    if (past <= 1) continue;
    let parent = el.parentElement, inner = false;
    for (; parent; parent = parent.parentElement) {
      if (seen.has(parent)) { inner = true; break; }
    }
    seen.add(el);
    if (inner) continue;  // report the outermost element only
    const text = (el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 60);
    out.push({tag: el.tagName.toLowerCase(), px: Math.round(past),
              width: Math.round((box || col).getBoundingClientRect().width),
              clipped: !!box, text});
  }
  return out;
}
"""


def build_parser() -> cli.ArgumentParser:
    """The command's options."""
    from booktools.book import DEFAULT_OUT

    parser = cli.ArgumentParser(
        prog="python -m booktools.bookcheck",
        description=" ".join(__doc__.split("\n\n")[0].split()),
        formatter_class=cli.HelpFormatter,
    )
    parser.add_argument(
        "html_dir",
        nargs="?",
        metavar="HTML_DIR",
        default=str(DEFAULT_OUT / "_build" / "html"),
        help="the built book's HTML folder (python -m booktools.book writes it)",
    )
    return parser


@cli.command("python -m booktools.bookcheck")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        reports = check_book(args.html_dir)
    except CheckError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 1 if print_reports(reports) else 0


def print_reports(reports: list[PageReport], out=None) -> int:
    """Print one line per page, its layout numbers, and its problems; the number of
    problems."""
    out = out or sys.stdout
    problems = 0
    for r in reports:
        status = "ok" if not r.problems else plural(len(r.problems), "problem")
        print(
            f"{r.page:<40} images {r.images:>3}  math {r.math:>4}  links {r.links:>4}  "
            f"{status}",
            file=out,
        )
        print(f"    {r.summary()}", file=out)
        for p in r.problems:
            print(f"    {p}", file=out)
        problems += len(r.problems)
    print(
        f"{plural(len(reports), 'page')} checked, {plural(problems, 'problem')}",
        file=out,
    )
    return problems


if __name__ == "__main__":
    sys.exit(main())
