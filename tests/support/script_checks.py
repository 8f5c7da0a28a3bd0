"""Running the project's shell scripts in tests: the static checks every one passes (each POSIX shell's `-n` and
shellcheck), and the shells they run under, busybox with only its applets on PATH as in the Litestream image."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.litestream_lab import POSIX_SHELLS, busybox_bin_dir

SYNTAX_CHECKERS = [
    *(
        pytest.param([*argv, "-n"], id="-".join(argv), marks=[pytest.mark.real_tool(tool)] if tool else [])
        for argv, tool in POSIX_SHELLS
    ),
    # shellcheck --shell=sh also reports what is not POSIX sh (its SC3xxx checks: what checkbashisms looks for); it
    # follows the shared functions a script sources from its folder (components/shell_scripts.py).
    pytest.param(
        ["shellcheck", "--shell=sh", "-x", "-P", "SCRIPTDIR"],
        id="shellcheck",
        marks=pytest.mark.real_tool("shellcheck"),
    ),
]


def _shell_param(argv: list[str], tool: str | None, *, litestream: bool = True) -> Any:
    tools = (["litestream"] if litestream else []) + ([tool] if tool else [])
    marks = [pytest.mark.real_tool(*tools)] if tools else []
    return pytest.param(argv, id="-".join(argv), marks=marks)


#: Every POSIX shell, with the real Litestream (a missing tool skips the test, naming the package).
SHELLS = [_shell_param(argv, tool) for argv, tool in POSIX_SHELLS]
#: Every POSIX shell, for runs that never reach litestream (bad invocations).
SHELLS_ONLY = [_shell_param(argv, tool, litestream=False) for argv, tool in POSIX_SHELLS]


@dataclass(frozen=True)
class Shell:
    """A shell to run the script with, and the PATH it gets (busybox: its applets only, like the image)."""

    argv: list[str]
    path: str | None


def shell_for(argv: list[str], bin_dir: Path) -> Shell:
    """busybox runs by its full path, with only its applets on PATH; the other shells with this process's PATH."""
    if argv[0] == "busybox":
        busybox = shutil.which("busybox")
        assert busybox is not None
        return Shell([busybox, *argv[1:]], str(busybox_bin_dir(bin_dir)))
    return Shell(argv, None)


def assert_passes(checker: list[str], script: Path) -> None:
    """``checker`` (a SYNTAX_CHECKERS entry) accepts ``script``."""
    result = subprocess.run([*checker, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def exit_codes(script: Path) -> tuple[set[int], set[int]]:
    """(documented, defined): the codes the header lists (``#   NN  meaning``) and the ``EX_*=NN`` it defines, after
    checking the script is /bin/sh with ``set -eu`` and defines each code once."""
    text = script.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert "\nset -eu\n" in text
    documented = {int(code) for code in re.findall(r"^#\s{2,}(\d+)\s{2}\S", text, flags=re.MULTILINE)}
    defined = [int(code) for code in re.findall(r"^EX_[A-Z_]+=(\d+)$", text, flags=re.MULTILINE)]
    assert len(defined) == len(set(defined)), "exit codes must be distinct"
    return documented, set(defined)


def shipped(script: Path) -> str:
    """What a pod runs of ``script``: its text with each pair of lines that take shared functions (a `shellcheck
    source=shared.sh` directive, then the line sourcing it, ``# shared: <names>``) replaced by those functions' text
    from shared.sh beside it. Read here by plain line matching, apart from components/shell_scripts.py's pattern."""
    library = (script.parent / "shared.sh").read_text().split("\n")
    functions: dict[str, str] = {}
    for start, line in enumerate(library):
        if line.endswith("() {"):
            functions[line.removesuffix("() {")] = "\n".join(library[start : library.index("}", start) + 1])
    lines, kept, index = script.read_text().split("\n"), [], 0
    while index < len(lines):
        taking = lines[index] == "# shellcheck source=shared.sh" and "# shared: " in lines[index + 1]
        if taking:
            names = lines[index + 1].split("# shared: ", 1)[1].split()
            kept.append("\n\n".join(functions[name] for name in names))
        else:
            kept.append(lines[index])
        index += 2 if taking else 1
    return "\n".join(kept)
