"""Hints that name what the user typed: the tools run both from `make` (with make variables: `VERBOSE=1`,
`PLAN=1`, `CONFIRM=hydra`) and as `python -m tools.…` (with flags). A Makefile recipe sets :data:`VIA_MAKE_ENV`
for the tool it runs, so a hint names the make variable there and the flag elsewhere."""

from __future__ import annotations

import os

#: Set by the Makefile's recipes for the tools whose hints name an option.
VIA_MAKE_ENV = "HEADSCALE_HA_VIA_MAKE"


def knob(make: str, flag: str) -> str:
    """How the user sets an option, as they started the tool: a make variable or a command-line flag."""
    return make if os.environ.get(VIA_MAKE_ENV) else flag
