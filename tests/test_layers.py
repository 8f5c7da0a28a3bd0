"""The layers import in one direction only: program → components → (policy, provider); tools and tests on top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tools.harness import PROJECT_DIR

#: package -> packages it must never import (what would make it depend on a layer above it).
FORBIDDEN = {
    "components": {"program", "tools", "tests", "examples"},
    "headscale_provider": {"components", "program", "tools", "tests"},
    "policy": {"components", "program", "tools", "tests"},
    "migration": {"components", "program", "tools", "tests"},
    "program": {"tools", "tests", "examples"},
    "tools": {"tests", "examples"},
}


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_a_layer_above_it(package: str) -> None:
    files = sorted((PROJECT_DIR / package).rglob("*.py"))
    assert files
    wrong = {
        str(path.relative_to(PROJECT_DIR)): sorted(_imported_packages(path) & FORBIDDEN[package]) for path in files
    }
    assert {path: packages for path, packages in wrong.items() if packages} == {}


def test_only_the_program_knows_the_stack_config() -> None:
    """No component takes StackConfig: another program can build every component's Args by hand."""
    for path in sorted((PROJECT_DIR / "components").rglob("*.py")):
        assert "StackConfig" not in path.read_text(), path


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from program.config import StackConfig\nimport tools.plan\n")
    assert _imported_packages(bad) == {"program", "tools"}
