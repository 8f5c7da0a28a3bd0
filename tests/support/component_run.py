"""One component, built from hand-written args, under the same mocks as a whole stack: what it registers.

Why: a component's contract is its args and what it registers for them; planning a whole stack to reach one
component ties its tests to the stack files and to every other component. ``build_component(lambda: X(...))``
runs only that callable (tools/harness.py accepts a program callable) and returns the ProgramRun.
"""

from __future__ import annotations

from collections.abc import Callable

from pulumi.errors import InputPropertyError

from tools.harness import ProgramRun, RegisteredResource, StackOutputs, run_program

#: The project and stack a lone component runs in; no stack file is read.
PROJECT, STACK = "component-test", "unit"


def build_component(
    build: Callable[[], object], *, config: dict[str, str] | None = None, stack_outputs: StackOutputs | None = None
) -> ProgramRun:
    """Run ``build`` (which constructs the component) as a program of its own and return what it registered;
    ``stack_outputs``: the other stacks it may reference (tools.harness.run_program's)."""
    return run_program(
        project=PROJECT, stack=STACK, config=dict(config or {}), program=build, stack_outputs=stack_outputs
    )


def refused(build: Callable[[], object]) -> InputPropertyError:
    """Run ``build``, which must raise InputPropertyError before registering anything (a component checks every
    input before it registers itself); the error, for its path and reason."""
    registered: list[RegisteredResource] = []
    try:
        run_program(project=PROJECT, stack=STACK, config={}, program=build, registered=registered)
    except InputPropertyError as error:
        assert registered == [], f"registered before refusing: {[r.name for r in registered]}"
        return error
    raise AssertionError("the inputs were accepted")
