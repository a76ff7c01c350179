"""The display helpers the chapters share (``ampbook.core.page``) and the environment
line every chapter opens with (``ampbook.core.env``)."""

from __future__ import annotations

import datetime

import pytest
from markdown_it import MarkdownIt

from ampbook.core.env import environment_display, environment_line
from ampbook.core.page import dropdown, md_table

DAY = datetime.date(2026, 12, 1)


def _html(markdown: str) -> str:
    """Markdown rendered as Jupyter and myst-nb do: CommonMark with raw HTML and
    tables."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


def test_dropdown_renders_its_markdown_inside_details():
    table = md_table([("a", 1.5), ("b", 2.0)], ["name", "value"], [None, ".1f"])
    d = dropdown("All rows", table, lead="Two rows; the larger is **b**.")
    html = _html(d._repr_markdown_())
    # the lead stays visible above; the table is a table, inside the details
    assert html.index("<strong>b</strong>") < html.index("<details")
    start, end = html.index("<details"), html.index("</details>")
    assert "<summary>All rows</summary>" in html[start:end]
    assert "<table>" in html[start:end] and "<td>1.5</td>" in html[start:end]


def test_dropdown_plain_text_and_bad_input():
    d = dropdown("Hint", "Try **bf16**.", plain="Try bf16.")
    assert repr(d) == "Hint:\nTry bf16."
    assert (
        "<summary>A &lt;b&gt; title</summary>"
        in dropdown("A <b> title", "x")._repr_markdown_()
    )
    with pytest.raises(ValueError, match="one non-empty line"):
        dropdown("two\nlines", "x")
    with pytest.raises(TypeError, match="Markdown text"):
        dropdown("t", 3)


CPU = {
    "torch": "2.14.1",
    "cuda": "13.0",
    "cudnn": 91900,
    "device": "cpu",
    "device_name": "AMD EPYC",
    "cpu_threads": 2,
}


def test_environment_line_names_the_profile_or_says_run_by_hand():
    assert environment_line(CPU, "smoke", DAY) == (
        "Ran on AMD EPYC (2 CPU threads), torch 2.14.1, with the smoke profile, "
        "2026-12-01."
    )
    shown = environment_display(CPU, "smoke", DAY)
    assert "| profile | smoke: tiny sizes that check the chapter runs" in str(
        shown._repr_markdown_()
    )
    by_hand = environment_line(CPU, None, DAY)
    assert "by hand, with the parameters cell's values" in by_hand
    assert "profile" not in by_hand


def test_environment_line_on_a_gpu_names_cuda_cudnn_and_the_gpu():
    gpu = dict(CPU, device="cuda:0", device_name="NVIDIA H200")
    line = environment_line(gpu, "gpu", DAY)
    # the GPU as the book names it (devices.display_name), not torch's name
    assert line.startswith("Ran on H200 SXM (2 CPU threads), torch 2.14.1, CUDA 13.0, ")
    assert "cuDNN 9.19" in line


def test_environment_display_is_one_line_and_a_dropdown():
    d = environment_display(dict(CPU, cpu_flags=["avx2", "amx_bf16"]), "cpu", DAY)
    markdown = d._repr_markdown_()
    first, rest = markdown.split("\n\n", 1)
    assert first == environment_line(CPU, "cpu", DAY)
    assert rest.startswith('<details class="ampbook-dropdown">')
    assert "| cpu_flags | avx2, amx_bf16 |" in rest
    assert repr(d).splitlines()[0] == first
