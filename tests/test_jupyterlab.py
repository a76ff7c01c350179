"""A chapter run by hand in a real JupyterLab (headless Chromium): its run-along copy
(``booktools.runalong``) shows the prose with this run's numbers and MyST rendered
as Markdown. The browser harness is also what takes the README's screenshots
(``python -m tests.test_jupyterlab COPY.ipynb SHOT.png``)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from booktools import bookcheck, reader, runalong
from booktools import run as runner

CHAPTER = "01_floating_point"
TOKEN = "ampbook-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(root: Path):
    """A JupyterLab server on a free local port serving ``root`` (as root too); yields
    its base URL. Ended (its process group) on exit."""
    port = _free_port()
    settings = root / ".jupyterlab-settings"
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    # every cell rendered, not only those in view (JupyterLab 4's default windowing)
    (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    news = settings / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)  # no "get notified about Jupyter news?" (no network)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(root / ".jupyter-config"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(root / ".jupyterlab-workspaces"),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.root_dir={root}",
            f"--IdentityProvider.token={TOKEN}",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.disable_check_xsrf=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(root / "jupyterlab.log", "wb"),  # noqa: SIM115
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:  # the server answers its status once it listens
            try:
                with urllib.request.urlopen(
                    f"{url}/api/status?token={TOKEN}", timeout=5
                ):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = (root / "jupyterlab.log").read_text()[-2000:]
                    raise RuntimeError(f"JupyterLab did not start:\n{log}") from None
                time.sleep(0.2)  # polling the port, not waiting for an effect
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


@contextlib.contextmanager
def chromium_page(width: int = 1300, height: int = 900):
    from playwright.sync_api import sync_playwright

    chromium = bookcheck.find_chromium()
    if chromium is None:
        pytest.skip("Chromium not found")
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        browser = pw.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=bookcheck.CHROMIUM_FLAGS[1:],
            viewport={"width": width, "height": height},
            timeout=60_000,
        )
        browser.set_default_timeout(120_000)
        try:
            yield browser.pages[0] if browser.pages else browser.new_page()
        finally:
            browser.close()


def open_notebook(page, url: str, name: str) -> None:
    """Open ``name`` in JupyterLab and wait until its kernel is idle."""
    page.goto(f"{url}/lab/tree/{name}?token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.wait_for_function(
        """() => {
          const app = window.jupyterapp;
          const w = app && app.shell.currentWidget;
          const k = w && w.sessionContext && w.sessionContext.session
            && w.sessionContext.session.kernel;
          return k && k.status === 'idle';
        }"""
    )


def before_running(page) -> dict:
    """What JupyterLab shows of the open notebook before any cell runs: whether it
    is marked modified, the first cell's text, the headings rendered, all cells' text
    (collapsed first lines included)."""
    return page.evaluate(
        """() => {
          const w = window.jupyterapp.shell.currentWidget;
          const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
          const heads = document.querySelectorAll(
            '.jp-Cell .jp-RenderedMarkdown :is(h1, h2, h3, h4)');
          return {dirty: w.context.model.dirty,
                  first: cells[0].innerText,
                  headings: heads.length,
                  text: cells.map(c => c.innerText).join('\\n')};
        }"""
    )


def run_all(page) -> None:
    """Run every cell (the command's promise ends when the last one has run)."""
    ok = page.evaluate(
        "async () => await window.jupyterapp.commands.execute('notebook:run-all-cells')"
    )
    assert ok is not False, "a cell failed"
    page.evaluate(
        "async () => await window.jupyterapp.commands.execute('docmanager:save')"
    )


def screenshot(notebook: Path, png: Path, run: bool = False) -> None:
    """A 1300 px wide screenshot of ``notebook`` open in JupyterLab (run first when
    ``run``)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / notebook.name).write_bytes(notebook.read_bytes())
        with jupyterlab(root) as url, chromium_page() as page:
            open_notebook(page, url, notebook.name)
            if run:
                run_all(page)
                page.evaluate(
                    "() => window.jupyterapp.shell.currentWidget.content"
                    ".activeCellIndex = 0"
                )
                page.locator(".jp-Cell").first.scroll_into_view_if_needed()
            page.screenshot(path=str(png))


def _smoke_copy(folder: Path) -> Path:
    """Chapter 1's run-along copy, its parameters cell set to the smoke profile's
    values (as a reader would edit it)."""
    source = runner.resolve_notebook(CHAPTER)
    nb = runner.read_source(source)
    params = runner.profile_parameters(runner.load_profiles(), "smoke", source, nb)
    [path] = runalong.write_run_along_copies([source], folder)
    copy = nbformat.read(path, as_version=4)
    [cell] = [c for c in copy.cells if "parameters" in c.metadata.get("tags", [])]
    cell.source += "\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
    # Chapter 1 quotes each value below the cell that glues it; a chapter's opening
    # quotes them above (chapter 7's): the first prose cell again, right at the top.
    first = next(c for c in copy.cells if c.metadata.get("ampbook", {}).get("prose"))
    early = nbformat.from_dict(json.loads(json.dumps(first)))
    early.id = "early-prose"
    start = next(
        n
        for n, c in enumerate(copy.cells)
        if c.metadata.get("ampbook", {}).get("run_along_start")
    )
    copy.cells.insert(start + 1, early)
    nbformat.write(copy, path)
    return path


@pytest.mark.slow  # executes a chapter in a JupyterLab kernel: ~40 s on 2 cores
def test_a_chapter_run_by_hand_in_jupyterlab_reads_with_its_numbers(tmp_path):
    path = _smoke_copy(tmp_path)
    with jupyterlab(tmp_path) as url, chromium_page() as page:
        open_notebook(page, url, path.name)
        page.wait_for_timeout(2000)  # JupyterLab writes kernel metadata once idle
        unrun = before_running(page)
        run_all(page)
        prose = page.locator(".jp-Cell .jp-RenderedMarkdown").all_inner_texts()
        at = [c.id for c in nbformat.read(path, as_version=4).cells]
        early = page.locator(".jp-Cell").nth(at.index("early-prose")).inner_text()
        # MyST dropdowns rendered as HTML details (the exercises' hints)
        hints = page.locator(".jp-RenderedMarkdown details > summary").count()
    # Before running: unmodified, the title first, every heading and paragraph shown
    # (numbers "…"), no MyST role on a collapsed first line.
    copy = nbformat.read(path, as_version=4)
    headings = sum(
        len(re.findall(r"^#{1,4} ", c.source, re.M))
        for c in copy.cells
        if c.cell_type == "markdown"
    )
    assert not unrun["dirty"], "the copy opens marked modified"
    assert unrun["first"].startswith(copy.cells[0].source.lstrip("# ").split("\n")[0])
    assert unrun["headings"] >= headings > 5, (unrun["headings"], headings)
    assert "{glue" not in unrun["text"] and "prose(" not in unrun["text"]
    assert runalong.PENDING in unrun["text"]
    text = "\n".join(prose)
    assert "{glue" not in text and ":::" not in text and "```{" not in text
    assert runalong.PENDING not in text, "a number the run glued is still pending"
    assert re.search(r"\d", early) and runalong.PENDING not in early, early[:200]
    assert re.search(r"Fig\. 1\.\d", text), "no figure caption or reference"
    assert re.search(r"et al\.,? \(?\d{4}\)?", text), "no citation as author, year"
    assert hints >= 1, "no dropdown rendered"
    # The numbers shown are this run's: the saved notebook's prose outputs (written by
    # the kernel) carry the same text the browser shows.
    saved = nbformat.read(path, as_version=4)
    shown = [
        o["data"]["text/markdown"]
        for c in saved.cells
        if c.metadata.get("ampbook", {}).get("prose")
        for o in c.outputs
        if "text/markdown" in o.get("data", {})
    ]
    assert shown and all(runalong.PENDING not in s for s in shown)
    numbers = {n for s in shown for n in re.findall(r"\d+\.\d+|\d{2,}", s)}
    assert numbers, "no number in the prose"
    missing = sorted(n for n in numbers if n not in text)
    assert not missing, f"numbers of the run not shown in JupyterLab: {missing[:5]}"
    assert not any(
        any(k.startswith(reader.GLUE_PREFIX) for k in o.get("data", {}))
        for c in saved.cells
        for o in c.get("outputs", [])
    ), "glue records shown"
    assert json.dumps(saved.metadata).find("jupytext") == -1


if __name__ == "__main__":  # python -m tests.test_jupyterlab COPY.ipynb SHOT.png [run]
    screenshot(Path(sys.argv[1]), Path(sys.argv[2]), run="run" in sys.argv[3:])
