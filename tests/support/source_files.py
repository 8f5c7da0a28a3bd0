"""The project's Python files as git sees them: tracked, and new ones it does not ignore (for the checks that read
every source file: the layers, the house measures)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools.harness import PROJECT_DIR


def tracked_python() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [PROJECT_DIR / name for name in listed if (PROJECT_DIR / name).is_file()]
