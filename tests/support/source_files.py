"""The project's files as git sees them: tracked, and new ones it does not ignore (for the checks that read every
source file, the layers and the house measures, and for the tests that run a copy of the checkout)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tools.harness import PROJECT_DIR


def _listed(*patterns: str) -> list[str]:
    """The paths git lists, relative to the checkout."""
    command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", *patterns]
    done = subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True, check=True)
    return [name for name in done.stdout.split("\0") if name]


def tracked_python() -> list[Path]:
    return [PROJECT_DIR / name for name in _listed("*.py") if (PROJECT_DIR / name).is_file()]


def copy_checkout(target: Path) -> Path:
    """A copy of the checkout's files in ``target``, as a clone would hold them: a link stays a link (the layout
    rule's ``headscale_ha/<name>`` links, relative, so they lead into the copy)."""
    for relative in _listed():
        source, copy = PROJECT_DIR / relative, target / relative
        if source.is_symlink():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.symlink_to(os.readlink(source))
        elif source.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
    return target
