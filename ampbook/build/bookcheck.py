"""Open the built book in headless Chromium and check what a reader would see.

    python -m ampbook.build.bookcheck [HTML_DIR]

For every page: it loads from disk with the network blocked; every image loads; MathJax
has typeset every math element and no raw TeX delimiters are left in the text; every
internal link points to an existing page and anchor; nothing asked for the network; no
cell shows an error (a traceback output, or papermill's "encountered an exception"
banner). Prints one line per problem and exits 1 when there is any; a folder without
pages or no Chromium is one ``error:`` line and exit 2. Chromium: ``$CHROMIUM``, else
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

from ampbook import cli

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


@dataclass
class PageReport:
    page: str
    images: int = 0
    math: int = 0
    links: int = 0
    problems: list = field(default_factory=list)


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


def check_book(html_dir: Path | str, chromium: str | None = None) -> list[PageReport]:
    from playwright.sync_api import sync_playwright

    html_dir = Path(html_dir).resolve()
    if not html_dir.is_dir():
        raise CheckError(
            f"{html_dir} is not a folder; give the book's HTML folder "
            "(OUT/_build/html of python -m ampbook.build.book)"
        )
    pages = sorted(
        p
        for p in html_dir.rglob("*.html")
        if p.name not in SKIP_PAGES
        and "_static" not in p.parts
        and "_sources" not in p.parts
    )
    if not pages:
        raise CheckError(
            f"no HTML pages under {html_dir}; build the book first "
            "(python -m ampbook.build.book) and give its OUT/_build/html"
        )
    chromium = chromium or find_chromium()
    if chromium is None:
        raise CheckError(
            "Chromium not found: apt-get install chromium, or set $CHROMIUM"
        )
    reports: list[PageReport] = []
    page_info: dict[Path, dict] = {}
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile_dir:
        try:
            browser = pw.chromium.launch_persistent_context(
                profile_dir,
                executable_path=chromium,
                headless=True,
                args=CHROMIUM_FLAGS[1:],
                timeout=60_000,
            )
        except Exception as err:  # noqa: BLE001 -- playwright's Error: no browser
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise CheckError(
                f"{chromium} could not be started as Chromium ({first[:200]}); "
                "install chromium or point CHROMIUM at it"
            ) from None
        for path in pages:
            report = PageReport(str(path.relative_to(html_dir)))
            reports.append(report)
            page = browser.new_page()
            network: list[str] = []
            failed: list[str] = []
            errors: list[str] = []

            def route(r, network=network):
                if r.request.url.startswith("file:") or r.request.url.startswith(
                    "data:"
                ):
                    return r.continue_()
                network.append(r.request.url)
                return r.abort()

            page.route("**/*", route)
            page.on(
                "requestfailed",
                lambda req, failed=failed: (
                    failed.append(req.url) if req.url.startswith("file:") else None
                ),
            )
            page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
            response = page.goto(path.as_uri(), wait_until="load")
            if response is not None and not response.ok:
                report.problems.append(f"page did not load (status {response.status})")
            page.wait_for_load_state("networkidle")
            info = page.evaluate(_PAGE_JS)
            report.problems += overflow_problems(page)
            page.close()
            page_info[path] = info
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
                context = info["text"][max(0, m.start() - 40) : m.end() + 40].replace(
                    "\n", " "
                )
                report.problems.append(f"raw TeX left in the text: ...{context}...")
            report.problems += [f"asked the network for {u}" for u in network]
            report.problems += [f"resource failed to load: {u}" for u in failed]
            report.problems += [f"JavaScript error: {e}" for e in errors]
            report.problems += [
                f"shows an error output: {e[:160]!r}" for e in info["errors"]
            ]
        browser.close()
    # Internal links: the target file exists and, with a fragment, has that id.
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
    return reports


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
    out.push({tag: el.tagName.toLowerCase(), past: Math.round(past),
              clipped: !!box, text});
  }
  return out;
}
"""


def overflow_problems(page) -> list[str]:
    """Elements of the page's content column that stick out sideways and cannot be
    scrolled to: past the column's edge, or clipped by an ancestor that hides its
    overflow. An element inside a box that scrolls (a code block, a wide table) is
    fine."""
    return [
        f"cut off horizontally by {o['past']} px: <{o['tag']}> {o['text']!r}"
        + (" (clipped by its container)" if o["clipped"] else " (past the column)")
        for o in page.evaluate(_OVERFLOW_JS)
    ]


@cli.command("python -m ampbook.build.bookcheck")
def main(argv: list[str] | None = None) -> int:
    from ampbook.build.book import DEFAULT_OUT

    parser = cli.ArgumentParser(
        prog="python -m ampbook.build.bookcheck", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "html_dir", nargs="?", default=str(DEFAULT_OUT / "_build" / "html")
    )
    args = parser.parse_args(argv)
    try:
        reports = check_book(args.html_dir)
    except CheckError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    problems = 0
    for r in reports:
        status = "ok" if not r.problems else f"{len(r.problems)} problem(s)"
        print(
            f"{r.page:<40} images {r.images:>3}  math {r.math:>4}  links {r.links:>4}  "
            f"{status}"
        )
        for p in r.problems:
            print(f"    {p}")
        problems += len(r.problems)
    print(f"{len(reports)} pages checked, {problems} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
