"""Shared fixtures: run the real program for a stack under mocks and hand the captured run to tests.

Every run gets its own event loop and a reset Pulumi runtime (see tools.harness.run_program); the
autouse fixture below also resets the runtime after each test, so no test sees another's state.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pulumi
import pytest

from tests.support.stacks import LAB_STACK, project_copier
from tools import harness
from tools import pulumi_internals as sdk
from tools.harness import PROJECT_DIR, ProgramRun, StackOutputs
from tools.plan import offline_stack_outputs, plan_stack

SHARED_DIR = PROJECT_DIR.parent / "shared"
STACKS = ("hydra", "cosmos")


@pytest.fixture(autouse=True)
def _reset_pulumi_runtime() -> Iterator[None]:
    failed_before = harness.failed_runs
    yield
    sdk.reset_runtime()
    pulumi.runtime.set_all_config({}, [])
    if harness.failed_runs != failed_before:
        harness.collect_stranded_coroutines()  # now, not as warnings in the middle of a later test


@pytest.fixture
def shared_dir() -> Path:
    """../shared beside the checkout (reference data and the manifest validator)."""
    if not (SHARED_DIR / "tools" / "validate_manifests.py").is_file():
        if os.environ.get("REQUIRE_REAL_TOOLS") == "1":
            pytest.fail(f"{SHARED_DIR} is absent and REQUIRE_REAL_TOOLS=1: schema and admission checks may not skip")
        pytest.skip(f"{SHARED_DIR} is absent: the shared reference data and validator are not on this machine")
    return SHARED_DIR


@pytest.fixture
def project_copy(tmp_path: Path) -> Callable[..., Path]:
    """A scratch project: the real Pulumi.yaml (and stack files), plus stack files a test writes.

    ``project_copy(lab="config: ...")`` writes ``Pulumi.lab.yaml`` with that (dedented) text.
    """
    return project_copier(tmp_path)


@pytest.fixture
def lab_project(project_copy: Callable[..., Path]) -> Callable[[str], Path]:
    """``lab_project("  headscale-ha:headplane: {enabled: false}\\n")``: a scratch project with that stack "lab"."""

    def make(extra_config: str = "") -> Path:
        return project_copy(lab=LAB_STACK + extra_config)

    return make


@pytest.fixture(scope="session")
def planned_stack_outputs() -> StackOutputs:
    """What the identity stack and the active site (hydra) export, as planned offline once per session."""
    return offline_stack_outputs()


@pytest.fixture
def stack_outputs(planned_stack_outputs: StackOutputs) -> dict[str, dict]:
    """The ``stack_outputs`` of a site plan (the identity stack's and hydra's planned outputs): a fresh copy that a
    test may change, e.g. ``stack_outputs[ACTIVE_STACK]["databaseStage"] = "postgres"``."""
    return {name: dict(copy.deepcopy(outputs)) for name, outputs in planned_stack_outputs.items()}


@pytest.fixture
def run_stack(stack_outputs: dict[str, dict]) -> Callable[..., ProgramRun]:
    """Run the program for a stack: ``run_stack("hydra")`` or ``run_stack("lab", project_dir=...)``, referencing
    the ``stack_outputs`` fixture's stacks unless ``stack_outputs=`` says otherwise."""

    def run(stack: str, project_dir: Path = PROJECT_DIR, stack_outputs: StackOutputs | None = None) -> ProgramRun:
        references = default_outputs if stack_outputs is None else stack_outputs
        return plan_stack(stack, project_dir=project_dir, stack_outputs=references)

    default_outputs = stack_outputs
    return run


pytest_plugins = [
    "tests.real_tools",  # real-tool marker, skips naming the package, summary (tests/real_tools.py)
    "tests.workers",  # how pytest-xdist spreads the files and the real-actor tier over the cores
]
