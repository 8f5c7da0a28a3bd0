"""`make diff` (the Makefile's recipe around tools.diff): changes are what a diff is for, so the target succeeds
with them; a DATA LOSS or an error fails it. The tool is a stand-in that exits as told: the recipe is under test."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tools.harness import PROJECT_DIR


@pytest.mark.parametrize(("tool_exit", "make_exit"), [(0, 0), (1, 0), (3, 2), (2, 2)])
def test_make_diff_succeeds_with_changes_and_fails_on_data_loss_or_error(
    tmp_path: Path, tool_exit: int, make_exit: int
) -> None:
    tool = tmp_path / "tool"
    tool.write_text(f'#!/bin/sh\necho "diff ... exit {tool_exit}"\nexit {tool_exit}\n')
    tool.chmod(0o755)
    make = shutil.which("make") or "make"
    done = subprocess.run(
        [make, "-s", "--no-print-directory", "diff", f"PY={tool}", "RUNTIME_STAMP="],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == make_exit, done.stdout + done.stderr
    assert done.stdout == f"diff ... exit {tool_exit}\n"
    if make_exit:
        assert f"Error {tool_exit}" in done.stderr, "make names the tool's own status"
    else:
        assert done.stderr == ""
