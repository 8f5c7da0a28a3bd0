"""Stack names and the "lab" stack text shared by tests/conftest.py and the tests that plan or reference stacks,
and the project copies they plan."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

from tools.harness import PROJECT_DIR

#: A stack "lab" that runs the hydra site as the active one; tests append the keys they vary.
LAB_STACK = (
    "config:\n  headscale-ha:role: active\n"
    "  headscale-ha:cluster: {name: hydra, nodes: 3, apiServer: {host: 10.10.0.10}}\n"
    "  headscale-ha:networkPolicy: {apiServerCidrs: [10.10.0.0/24]}\n"
)

#: The stacks a site stack references, by the names the shipped Pulumi.yaml gives them.
IDENTITY_STACK = "organization/headscale-ha-identity/tailnet"
ACTIVE_STACK = "organization/headscale-ha/hydra"


def project_copier(directory: Path) -> Callable[..., Path]:
    """``copy(**stack_files)``: the project's Pulumi.yaml and stack files copied into ``directory``, plus
    ``Pulumi.<stack>.yaml`` for each (dedented) text given; returns ``directory`` (the ``project_copy`` fixture)."""

    def copy(**stack_files: str) -> Path:
        for path in PROJECT_DIR.glob("Pulumi*.yaml"):
            shutil.copy(path, directory / path.name)
        for stack, text in stack_files.items():
            (directory / f"Pulumi.{stack}.yaml").write_text(textwrap.dedent(text))
        return directory

    return copy
