"""The book built from the smoke executions, opened in headless Chromium."""

from __future__ import annotations

import os
import shutil

import pytest

from ampbook.build.bookcheck import check_book, find_chromium

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def chromium():
    path = find_chromium()
    if path is None:
        if IN_CI:
            pytest.fail(
                "Chromium is required in CI for the book check (.ci/run installs it)"
            )
        pytest.skip("Chromium not installed (apt-get install chromium)")
    return path


def _problems(reports):
    return {r.page: r.problems for r in reports if r.problems}


def test_book_has_every_chapter_and_offline_mathjax(built_book):
    from ampbook.build.book import toc_chapters

    for stem in toc_chapters():
        assert (built_book / "chapters" / f"{stem}.html").exists()
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").exists()
    html = (built_book / "chapters" / f"{toc_chapters()[0]}.html").read_text()
    assert "https://cdn" not in html and "mathjax/tex-chtml.js" in html


def test_book_in_browser(built_book, chromium):
    reports = check_book(built_book, chromium)
    assert not _problems(reports), _problems(reports)
    pages = {r.page for r in reports}
    assert "index.html" in pages and len(pages) >= 3
    assert sum(r.images for r in reports) > 0, "the book shows no figure at all"
    assert sum(r.math for r in reports) > 0, "the book typesets no math at all"


def test_browser_check_catches_broken_books(built_book, chromium, tmp_path):
    """The check fails when MathJax is missing, an image is gone, a link is broken or a
    cell shows an error."""
    broken = tmp_path / "html"
    shutil.copytree(built_book, broken)
    shutil.rmtree(broken / "_static" / "mathjax")
    image = next((broken / "_images").iterdir())
    image.unlink()
    page = broken / "intro.html"
    page.write_text(
        page.read_text().replace("</main>", '<a href="nowhere.html">x</a></main>', 1)
    )
    # A failed cell: MyST-NB renders an error output as <div class="output traceback">
    failed = (
        '<div class="output traceback"><pre>Traceback (most recent call last):\n'
        "ZeroDivisionError: division by zero</pre></div></main>"
    )
    page.write_text(page.read_text().replace("</main>", failed, 1))
    problems = [p for r in check_book(broken, chromium) for p in r.problems]
    text = "\n".join(problems)
    assert "math not typeset" in text or "MathJax did not load" in text
    assert "image does not load: " in text and image.name in text
    assert "broken link" in text and "nowhere.html" in text
    assert "shows an error output: 'ZeroDivisionError: division by zero'" in text


def test_browser_check_catches_content_cut_off_sideways(built_book, chromium, tmp_path):
    """A table wider than the content column fails the check unless it scrolls inside
    its own box; a wide table that scrolls passes."""
    planted = tmp_path / "html"
    shutil.copytree(built_book, planted)
    row = "".join(f"<td>column_{i:02d}_of_a_planted_table</td>" for i in range(30))
    cut = f'<table id="planted-cut"><tr>{row}</tr></table>'
    scrolls = (
        f'<div style="overflow-x: auto"><table id="planted-ok"><tr>{row}</tr>'
        "</table></div>"
    )
    page = planted / "intro.html"
    html = page.read_text()
    assert "</article>" in html
    page.write_text(html.replace("</article>", cut + "</article>", 1))
    page = planted / "reproducing.html"
    page.write_text(page.read_text().replace("</article>", scrolls + "</article>", 1))
    reports = {r.page: r.problems for r in check_book(planted, chromium)}
    cut_off = [p for p in reports["intro.html"] if "cut off horizontally" in p]
    assert len(cut_off) == 1 and "column_00" in cut_off[0] and "<table>" in cut_off[0]
    assert not [p for p in reports["reproducing.html"] if "cut off" in p]
