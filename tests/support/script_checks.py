"""The static checks every shell script of the project passes: each POSIX shell's `-n` and shellcheck."""

from __future__ import annotations

import pytest

from tests.support.litestream_lab import POSIX_SHELLS

SYNTAX_CHECKERS = [
    *(
        pytest.param([*argv, "-n"], id="-".join(argv), marks=[pytest.mark.real_tool(tool)] if tool else [])
        for argv, tool in POSIX_SHELLS
    ),
    # shellcheck --shell=sh also reports what is not POSIX sh (its SC3xxx checks: what checkbashisms looks for).
    pytest.param(["shellcheck", "--shell=sh"], id="shellcheck", marks=pytest.mark.real_tool("shellcheck")),
]
