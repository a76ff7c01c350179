"""The book built from the smoke executions, opened in headless Chromium."""

from __future__ import annotations

import io
import os
import re
import shutil

import pytest

from booktools.bookcheck import (
    FIRST_SCREEN_PX,
    check_book,
    find_chromium,
    print_reports,
)

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


def test_book_has_every_chapter_and_offline_mathjax(built_book):
    from booktools.book import toc_chapters

    for stem in toc_chapters():
        assert (built_book / "chapters" / f"{stem}.html").exists()
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").exists()
    html = (built_book / "chapters" / f"{toc_chapters()[0]}.html").read_text()
    assert "https://cdn" not in html and "mathjax/tex-chtml.js" in html


@pytest.fixture(scope="module")
def book_reports(built_book, chromium):
    return check_book(built_book, chromium)


def test_book_in_browser(book_reports):
    """Images, math, links, no error output: on every page."""
    reports = book_reports
    other = {
        r.page: [p for p in r.problems if p not in r.layout_problems]
        for r in reports
        if len(r.problems) > len(r.layout_problems)
    }
    assert not other, other
    pages = {r.page for r in reports}
    assert "index.html" in pages and len(pages) >= 3
    assert sum(r.images for r in reports) > 0, "the book shows no figure at all"
    assert sum(r.math for r in reports) > 0, "the book typesets no math at all"


def test_book_pages_read_well(book_reports):
    """The page a reader sees (DEVELOPING.md): the first ## heading of every page on
    the first screen at 1300 px, nothing cut off at 1300 or 1000 px. The numbers of
    each page are printed (pytest -s shows them)."""
    print_reports(book_reports)
    layout = {r.page: r.layout_problems for r in book_reports if r.layout_problems}
    assert not layout, layout


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
    # the pages the plants touch (every page lost MathJax; one shows the image)
    pages = ["intro.html"] + [
        str(x.relative_to(broken))
        for x in sorted(broken.rglob("*.html"))
        if image.name in x.read_text()
    ][:1]
    problems = [p for r in check_book(broken, chromium, only=pages) for p in r.problems]
    text = "\n".join(problems)
    assert "math not typeset" in text or "MathJax did not load" in text
    assert "image does not load: " in text and image.name in text
    assert "broken link" in text and "nowhere.html" in text
    assert "shows an error output: 'ZeroDivisionError: division by zero'" in text


def test_browser_check_catches_content_cut_off_sideways(built_book, chromium, tmp_path):
    """A table wider than the content column fails the check, whether it sticks out of
    the column or scrolls inside a box of its own (issue 21: a reader at 1000 px must
    not have to scroll a table to read it)."""
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
    reports = {
        r.page: r.problems
        for r in check_book(planted, chromium, only=["intro.html", "reproducing.html"])
    }
    cut_off = [p for p in reports["intro.html"] if "cut off horizontally" in p]
    assert len(cut_off) == 1 and "column_00" in cut_off[0] and "<table>" in cut_off[0]
    scrolled = [p for p in reports["reproducing.html"] if "cut off" in p]
    assert len(scrolled) == 1 and scrolled[0].startswith("table cut off at 1000 px: ")
    assert re.search(r": (1 cell|\d+ cells) hidden in its scroll box", scrolled[0])


# --- the page a reader sees: planted pages ------------------------------------------

ARTICLE = re.compile(r'(<article class="bd-article"[^>]*>).*?(</article>)', re.S)
CELLS = "".join(f"<td>column_{i:02d}_planted_value</td>" for i in range(12))
PLANTED_PAGES = {
    # the lesson starts below the first screen
    "99_late": '<section><h1>Late</h1><div style="height: 1500px">set-up</div>'
    "<section><h2>The lesson</h2><p>text</p></section></section>",
    # a table whose columns hide in its scroll box (book CSS: .cell_output table)
    "98_table": "<section><h1>Table</h1><section><h2>Early</h2>"
    '<div class="cell_output"><table class="table"><tr><th>planted header</th>'
    "<th>b</th></tr><tr>" + CELLS + "</tr></table></div></section></section>",
    # an output line that does not wrap and runs past its box
    "97_output": "<section><h1>Output</h1><section><h2>Early</h2>"
    '<div class="cell_output"><div class="output stream">'
    '<pre style="white-space: pre">planted verdict: ' + "x" * 283 + "</pre>"
    "</div></div></section></section>",
    # a figure drawn wider than the column
    "96_figure": "<section><h1>Figure</h1><section><h2>Early</h2>"
    '<img alt="planted wide figure" src="{image}" '
    'style="width: 1400px; max-width: none"></section></section>',
    # what the book's pages should be: lesson first, output wraps, table fits
    "95_ok": "<section><h1>Fine</h1><p>The answer first.</p><section><h2>Lesson</h2>"
    '<div class="cell_output"><div class="output stream"><pre>planted verdict: '
    + "word "
    * 60
    + '</pre></div></div><div class="cell_output"><table class="table"><tr>'
    "<td>a</td><td>b</td></tr></table></div>"
    '<img alt="fits" src="{image}" style="width: 300px"></section></section>',
}


@pytest.fixture(scope="module")
def planted_pages(built_book, tmp_path_factory):
    """The built book with five planted pages, each in the theme's page of the
    glossary (a page without a table of contents of its own)."""
    html = tmp_path_factory.mktemp("planted") / "html"
    shutil.copytree(built_book, html)
    template = (html / "glossary.html").read_text()
    image = "_images/" + next((html / "_images").iterdir()).name
    for stem, body in PLANTED_PAGES.items():
        page = ARTICLE.sub(
            lambda m: m[1] + body.replace("{image}", image) + m[2], template, count=1
        )
        (html / f"{stem}.html").write_text(page)
    return html


def test_bookcheck_fails_each_planted_page_naming_what_and_by_how_much(
    planted_pages, chromium
):
    reports = {
        r.page[:-5]: r
        for r in check_book(
            planted_pages, chromium, only=[f"{s}.html" for s in PLANTED_PAGES]
        )
    }
    late = reports["99_late"]
    assert late.heading == "The lesson" and late.heading_px > FIRST_SCREEN_PX
    assert len(late.problems) == 1
    assert late.problems[0].startswith("first ## heading 'The lesson' starts at ")
    assert (
        f"{late.heading_px - FIRST_SCREEN_PX} px below the first screen"
        in (late.problems[0])
    )

    table = reports["98_table"]
    assert table.heading_px < FIRST_SCREEN_PX and table.clipped == {"table": 1}
    [problem] = table.problems
    assert problem.startswith("table cut off at 1000 px: ")
    assert "planted header" in problem and "first hidden: 'column_" in problem
    assert re.search(r"\d+ cells? hidden in its scroll box, \d+ px", problem)

    output = reports["97_output"]
    assert output.clipped == {"output": 1}
    [problem] = output.problems
    assert problem.startswith("output line cut off at 1000 px: 300 characters, ")
    assert "'planted verdict: xxx" in problem

    figure = reports["96_figure"]
    assert figure.clipped == {"figure": 1}
    assert figure.problems[0].startswith("figure cut off at 1000 px: ")
    assert "planted wide figure" in figure.problems[0]

    ok = reports["95_ok"]
    assert ok.problems == [] and ok.clipped == {}
    assert ok.heading == "Lesson" and ok.heading_px < FIRST_SCREEN_PX
    assert 0 < ok.table_share < 1 and 0 < ok.figure_share < 1


IN_SHORT = (
    '<div class="admonition tip"><p class="admonition-title">In short</p>{body}</div>'
)
ANSWER_PAGES = {
    # the "In short" box starts at the foot of the first screen: its title shows,
    # its text does not (chapter 3 before: 89 px below at 1000 px, 13 px at 1300)
    "94_in_short_late": '<section><h1>Late answer</h1><div style="height: 560px">'
    "opening</div>"
    + IN_SHORT.format(body="<p>" + "the planted answer " * 30 + "</p>")
    + "<section><h2>Lesson</h2><p>text</p></section></section>",
    # an "In short" item of many lines (the intro's "Measured." before: 8 lines)
    "93_long_item": "<section><h1>Long item</h1>"
    + IN_SHORT.format(
        body="<ul><li>short item</li><li>planted long item "
        + "word " * 150
        + "</li></ul>"
    )
    + "<section><h2>Lesson</h2><p>text</p></section></section>",
}


def test_bookcheck_wants_the_answer_on_the_first_screen(built_book, chromium, tmp_path):
    """An "In short" box whose first lines fall below the first screen (1300 x 900 or
    1000 x 800 px), an "In short" item longer than three lines at 1300 px, and the
    Findings chapter's first finding pushed below the first screen each fail, naming
    the width and by how many pixels."""
    from booktools import bookcheck

    html = tmp_path / "html"
    shutil.copytree(built_book, html)
    template = (html / "glossary.html").read_text()
    for stem, body in ANSWER_PAGES.items():
        page = ARTICLE.sub(lambda m: m[1] + body + m[2], template, count=1)
        (html / f"{stem}.html").write_text(page)
    findings = html / "chapters" / "10_findings.html"
    text = findings.read_text()
    opening = '<div style="height: 320px">planted opening</div><section'
    findings.write_text(
        text.replace("<section", opening, 2).replace(opening, "<section", 1)
    )
    pages = [f"{s}.html" for s in ANSWER_PAGES] + ["chapters/10_findings.html"]
    reports = {
        r.page: r.layout_problems for r in check_book(html, chromium, only=pages)
    }
    late = reports["94_in_short_late.html"]
    assert [p.split(":")[0] for p in late] == [
        "'In short' is below the first screen at 1300 x 900 px",
        "'In short' is below the first screen at 1000 x 800 px",
    ]
    assert re.search(r"first 3 lines end at \d+ px, \d+ px below", late[0])
    [long] = reports["93_long_item.html"]
    assert long.startswith("'In short' item of ") and "lines at 1300 px" in long
    assert "'planted long item word" in long
    finding = reports["chapters/10_findings.html"]
    assert finding and all(
        p.startswith("the first finding is below the first screen at ") for p in finding
    )
    assert bookcheck.ANSWER_LISTS["chapters/10_findings.html"] == "the first finding"


def test_bookcheck_prints_each_pages_numbers(planted_pages, chromium):
    reports = check_book(planted_pages, chromium, only=["98_table.html"])
    out = io.StringIO()
    assert print_reports(reports, out) == 1
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("98_table.html") and lines[0].endswith(" 1 problem")
    assert re.match(
        r"    first ## at \d+ px; tables \d+%, figures 0% of \d+ px; cut off: 1 table$",
        lines[1],
    )


def test_bookcheck_counts_in_words():
    """One problem, two problems: the report's counts in the right number (no
    browser needed)."""
    from booktools.bookcheck import PageReport

    reports = [
        PageReport("a.html", problems=["cut off"]),
        PageReport("b.html", problems=["x", "y"]),
        PageReport("c.html"),
    ]
    out = io.StringIO()
    assert print_reports(reports, out) == 3
    lines = out.getvalue().splitlines()
    heads = {x.split()[0]: x for x in lines if not x.startswith(" ")}
    assert heads["a.html"].endswith(" 1 problem")
    assert heads["b.html"].endswith(" 2 problems")
    assert heads["c.html"].endswith(" ok")
    assert lines[-1] == "3 pages checked, 3 problems"
    one = io.StringIO()
    print_reports(reports[:1], one)
    assert one.getvalue().splitlines()[-1] == "1 page checked, 1 problem"
