"""The GPU check's wheels: the packages the notebook runner needs beyond the device
image, carried as wheels in ``.whl/`` (``make gpu-wheels``, from the list
``wheel_closure`` makes) and installed into the work folder when they are not
importable there (``install_wheels``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

from ampbook.core.paths import REPO_ROOT

WHEEL_DIR = REPO_ROOT / ".whl"
# What the notebook runner needs beyond the device image (importable names).
RUNNER_MODULES = (
    "papermill",
    "jupytext",
    "nbformat",
    "nbclient",
    "ipykernel",
    "IPython",
    "matplotlib_inline",
    "cityscapesscripts",
    "myst_nb",
)


# Distributions the book needs on the GPU machine beyond its imports' own closure: the
# notebook runner (papermill, the kernel) and myst-nb (the chapters glue values for the
# book).
WHEEL_ROOTS = (
    "papermill",
    "jupytext",
    "nbformat",
    "nbclient",
    "jupyter-client",
    "ipykernel",
    "ipython",
    "matplotlib-inline",
    "cityscapesscripts",
    "myst-nb",
)
# Never carried: the Python < 3.5 backport of the standard library's typing
# (cityscapesscripts asks for it; a copy on PYTHONPATH would shadow the real one).
WHEEL_NEVER = ("typing",)
PY312_LINUX = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def wheel_closure(roots=WHEEL_ROOTS, image_list: Path | None = None) -> dict[str, str]:
    """NAME -> VERSION of ``roots`` and everything they require (installed metadata,
    markers for Python 3.12 on Linux, no extras) that the device image lacks: what
    gpu-wheels.txt
    lists (``python -m booktools.gpucheck --list-wheels`` prints it)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    image_list = (
        image_list or REPO_ROOT / "data" / "reference" / "device_image_packages.txt"
    )
    image = {
        norm(line.strip())
        for line in image_list.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    need: dict[str, str] = {}
    seen = {norm(n) for n in WHEEL_NEVER}
    stack = list(roots)
    while stack:
        name = norm(stack.pop())
        if name in seen:
            continue
        seen.add(name)
        if name in image:
            continue
        dist = md.distribution(name)
        need[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if not req.marker or req.marker.evaluate(PY312_LINUX):
                stack.append(req.name)
    return dict(sorted(need.items()))


def missing_modules(env: dict) -> list[str]:
    """The runner's modules (``RUNNER_MODULES``) a child process with ``env`` cannot
    import."""
    code = (
        "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] "
        "if importlib.util.find_spec(m) is None))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *RUNNER_MODULES],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.split()


def install_wheels(
    env: dict, wheel_dir: Path, target: Path, timeout: float, log: Callable
) -> str:
    """The carried wheels of ``wheel_dir`` installed into ``target`` when a runner's
    module is missing, ``target`` put first on ``env``'s ``PYTHONPATH``; what was
    done, in words. ``RuntimeError`` when there are no wheels or they do not help."""
    missing = missing_modules(env)
    if not missing:
        return "nothing to install: the runner's packages are importable"
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not wheels:
        raise RuntimeError(
            f"{', '.join(missing)} not importable and no wheels in "
            f"{wheel_dir}: "
            "run `make gpu-wheels` on a machine with PyPI and carry .whl"
        )
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--target",
        str(target),
        *map(str, wheels),
    ]
    log(f"installing {len(wheels)} wheels for {', '.join(missing)} into {target}")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.stdout or done.stderr:
        log((done.stdout + done.stderr).strip())
    if done.returncode:
        raise RuntimeError(
            f"pip install of the carried wheels failed (exit {done.returncode})"
        )
    env["PYTHONPATH"] = os.pathsep.join([str(target), env["PYTHONPATH"]])
    still = missing_modules(env)
    if still:
        raise RuntimeError(
            f"still not importable after installing the wheels: {', '.join(still)}"
        )
    return f"installed {len(wheels)} wheels"
