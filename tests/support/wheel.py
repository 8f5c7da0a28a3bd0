"""The distribution as a user gets it: a wheel built from a clean copy, installed into a fresh virtual environment.

Why shared: the package's own tests (tests/test_package.py) and the component package's plugin tests both need
headscale-ha as `pip install` leaves it, not the checkout's editable install. The wheel is built by the pinned
backend (requirements-dev.txt installs it in .venv, so no download); the venv's other packages are the program's
pinned dependencies, through a ``.pth`` to .venv's site-packages: a path entry whose own ``.pth`` files, the
editable install among them, are not processed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tools.harness import PROJECT_DIR


def build_wheel(out: Path, source: Path) -> Path:
    """The wheel of the checkout, built in ``source`` (an empty directory: a clean copy, no stale build/)."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(PROJECT_DIR / name, source / name)
    # The layout rule (docs/contributing.md): headscale_ha/, the folders it links, and the release 0.1.0 alias.
    linked = sorted(path.name for path in (PROJECT_DIR / "headscale_ha").iterdir() if path.is_symlink())
    for directory in ("headscale_ha", "headscale_provider", *linked):
        ignore = shutil.ignore_patterns("__pycache__", "venv")
        shutil.copytree(PROJECT_DIR / directory, source / directory, symlinks=True, ignore=ignore)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), "."],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("*.whl")
    return built


def bare_venv(venv: Path) -> Path:
    """A fresh venv with the program's pinned dependencies and no headscale-ha; its python."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "pinned-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def installed_venv(wheel: Path, venv: Path) -> Path:
    """A fresh venv with the wheel installed (``pip install``, no index) and the pinned dependencies; its python."""
    python = bare_venv(venv)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return python
