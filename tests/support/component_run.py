"""One component, built from hand-written args, under the same mocks as a whole stack: what it registers.

Why: a component's contract is its args and what it registers for them; planning a whole stack to reach one
component ties its tests to the stack files and to every other component. ``build_component(lambda: X(...))``
runs only that callable (tools/harness.py accepts a program callable) and returns the ProgramRun.
"""

from __future__ import annotations

from collections.abc import Callable

from tools.harness import ProgramRun, run_program

#: The project and stack a lone component runs in; no stack file is read.
PROJECT, STACK = "component-test", "unit"


def build_component(build: Callable[[], object], *, config: dict[str, str] | None = None) -> ProgramRun:
    """Run ``build`` (which constructs the component) as a program of its own and return what it registered."""
    return run_program(project=PROJECT, stack=STACK, config=dict(config or {}), program=build)
