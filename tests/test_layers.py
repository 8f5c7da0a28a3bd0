"""The layers import in one direction only: program → components → (guardrails, policy, provider); tools and tests
on top. The guard rails (the CrossGuard pack and the image pins the stack config also reads) share nothing with the
tailnet's ACL policy or the Headscale API's provider: neither side imports the other.

The library is one import name, ``headscale_ha``, over the repository's top-level folders (the layout rule,
tests/test_layout.py): nothing imports the folders by their own names, and nothing edits ``sys.path`` to find them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.source_files import tracked_python
from tools.harness import PROJECT_DIR

#: directory -> what its modules import it as.
LAYERS = {
    "components": "headscale_ha.components",
    "guardrails": "headscale_ha.guardrails",
    "provider": "headscale_ha.provider",
    "package": "headscale_ha.package",
    "policy": "headscale_ha.policy",
    "program": "headscale_ha.program",
    "migration": "migration",
    "tools": "tools",
}
#: layer -> layers it must never import (what would make it depend on a layer above it).
FORBIDDEN = {
    "headscale_ha.components": {"headscale_ha.program", "headscale_ha.package", "tools", "tests", "examples"},
    "headscale_ha.provider": {"headscale_ha.components", "headscale_ha.program", "headscale_ha.policy", "tools"}
    | {"headscale_ha.guardrails", "tests"},
    "headscale_ha.policy": {"headscale_ha.components", "headscale_ha.program", "headscale_ha.guardrails", "tools"}
    | {"tests"},
    "headscale_ha.guardrails": {"headscale_ha.components", "headscale_ha.program", "headscale_ha.policy", "tools"}
    | {"headscale_ha.package", "headscale_ha.provider", "tests", "examples"},
    # The component package wraps the components for other languages; the site program is not one of them.
    "headscale_ha.package": {"headscale_ha.program", "headscale_ha.provider", "tools", "tests", "examples"},
    "migration": {"headscale_ha", "headscale_ha.components", "headscale_ha.program", "tools", "tests"},
    "headscale_ha.program": {"headscale_ha.package", "tools", "tests", "examples"},
    "tools": {"tests", "examples"},
}
#: The folders' own names: importing one would load a second copy of a module (headscale_provider is an alias for
#: the state of release 0.1.0: headscale_ha/class_paths.py).
RETIRED = {"components", "guardrails", "package", "program", "policy", "provider", "headscale_provider"}


def _layer(module: str) -> str:
    """``headscale_ha.components.litestream`` -> ``headscale_ha.components``; ``tools.plan`` -> ``tools``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "headscale_ha" and len(parts) > 1 else parts[0]


def _imported(path: Path) -> set[str]:
    """The layers ``path`` imports (absolute imports; a relative one stays inside its package)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {_layer(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(_layer(node.module))
    return found


def _edits_sys_path(path: Path) -> list[int]:
    """Lines of ``path`` that change ``sys.path`` (a call of one of its methods, or an assignment to it)."""
    tree = ast.parse(path.read_text(), filename=str(path))

    def is_sys_path(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        )

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_sys_path(node.func.value):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(is_sys_path(target) or is_sys_path(getattr(target, "value", None)) for target in targets):
                lines.append(node.lineno)
    return sorted(lines)


@pytest.mark.parametrize("directory", sorted(LAYERS))
def test_no_package_imports_a_layer_above_it(directory: str) -> None:
    files = sorted((PROJECT_DIR / directory).rglob("*.py"))
    assert files
    forbidden = FORBIDDEN[LAYERS[directory]]
    wrong = {str(path.relative_to(PROJECT_DIR)): sorted(_imported(path) & forbidden) for path in files}
    assert {path: layers for path, layers in wrong.items() if layers} == {}


def test_every_library_folder_is_a_layer_the_check_knows() -> None:
    """The package's linked folders and this check's directories are one list: a new subpackage is checked too."""
    linked = {path.name for path in (PROJECT_DIR / "headscale_ha").iterdir() if path.is_symlink()}
    assert linked == {directory for directory, name in LAYERS.items() if name.startswith("headscale_ha.")}


def test_nothing_imports_a_directory_by_its_old_name() -> None:
    found = {
        str(path.relative_to(PROJECT_DIR)): sorted(_imported(path) & RETIRED)
        for path in tracked_python()
        if path.name != "test_layers.py"
    }
    assert {path: names for path, names in found.items() if names} == {}


def test_nothing_edits_sys_path() -> None:
    """The program, the examples, the tools, the benches and the tests import the installed package."""
    found = {str(path.relative_to(PROJECT_DIR)): _edits_sys_path(path) for path in tracked_python()}
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_only_the_program_knows_the_stack_config() -> None:
    """No component takes StackConfig: another program can build every component's Args by hand."""
    for path in sorted((PROJECT_DIR / "components").rglob("*.py")):
        assert "StackConfig" not in path.read_text(), path


def test_the_site_wires_components_from_its_args_alone() -> None:
    """One pass: program/site_args.py maps the config to SiteArgs; the site reads neither the config nor the mapping."""
    site = PROJECT_DIR / "program" / "site.py"
    modules = {
        node.module
        for node in ast.walk(ast.parse(site.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert not modules & {"headscale_ha.program.config", "headscale_ha.program.args"}
    assert "StackConfig" not in site.read_text()


def test_the_checks_see_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import sys\nfrom headscale_ha.program.config import StackConfig\nimport tools.plan\nimport components.pod\n"
        "sys.path.insert(0, '.')\nsys.path = []\nsys.path[0] = 'x'\nsys.path += ['y']\nprint(sys.path)\n"
    )
    assert _imported(bad) == {"sys", "headscale_ha.program", "tools", "components"}
    assert _edits_sys_path(bad) == [5, 6, 7, 8]


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in tests/support (and fixtures in conftest.py, which pytest loads): a test module that
    imports another runs that module's tests' setup at import and ties the two modules' names together."""
    found = {}
    for path in sorted((PROJECT_DIR / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        modules |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        wrong = sorted(
            m for m in modules if m.startswith("tests.") and m.rsplit(".", 1)[-1].startswith(("test_", "conftest"))
        )
        if wrong:
            found[str(path.relative_to(PROJECT_DIR))] = wrong
    assert found == {}
