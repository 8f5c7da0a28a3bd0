"""tools.source_tree: another tree's code imported as its build backend would package it, not the installed one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.harness import PROJECT_DIR
from tools.source_tree import SourceTreeError, import_roots, package_dirs

PROBE = (
    "import headscale_ha.components.release as release, headscale_ha.provider as provider, tools\n"
    "print(release.VERSION)\nprint(release.__file__)\nprint(provider.__file__)\nprint(tools.__file__)\n"
)


#: The library's folders (the layout rule: ``headscale_ha.<name>`` is ``<name>/``).
LIBRARY = ("components", "guardrails", "package", "policy", "program", "provider")
#: How trees from before the rule named them: pyproject.toml mapped each folder to its import name.
MAPPING = "\n".join(
    ["[tool.setuptools.package-dir]", '"headscale_ha" = "headscale_ha"']
    + [f'"headscale_ha.{name}" = "{name}"' for name in LIBRARY]
)


def _tree(tmp_path: Path, *, mapped: bool = False) -> Path:
    """A copy of the checkout's package, its version changed; ``mapped``: laid out as before the rule (no links in
    ``headscale_ha/``, a package-dir mapping instead)."""
    tree = tmp_path / "tree"
    for name in ("headscale_ha", "headscale_provider", "tools", *LIBRARY):
        shutil.copytree(PROJECT_DIR / name, tree / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = (PROJECT_DIR / "pyproject.toml").read_text()
    if mapped:
        for name in LIBRARY:
            (tree / "headscale_ha" / name).unlink()
        pyproject += "\n" + MAPPING + "\n"
    (tree / "pyproject.toml").write_text(pyproject)
    release = tree / "components" / "release.py"
    release.write_text(release.read_text().replace('VERSION = "', 'VERSION = "9.9.9-tree-', 1))
    return tree


def _probe(roots: list[Path], cwd: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, roots))}
    done = subprocess.run(
        [sys.executable, "-P", "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize("mapped", [False, True], ids=["linked", "mapped"])
def test_a_tree_imports_its_own_code_not_the_installed_package(tmp_path: Path, mapped: bool) -> None:
    tree = _tree(tmp_path, mapped=mapped)
    links = tmp_path / "links"
    links.mkdir()
    roots = import_roots(tree, links)
    assert roots == ([links, tree] if mapped else [tree])
    version, release, provider, tools = _probe(roots, tree)
    assert version.startswith("9.9.9-tree-")
    for path in (release, provider, tools):
        assert Path(path).resolve().is_relative_to(tree.resolve()), path


def test_the_checkout_maps_nothing_its_links_do() -> None:
    """The layout rule needs no mapping: the checkout is its own import root, as a tree from before the package."""
    assert package_dirs(PROJECT_DIR) == {}


def test_a_tree_from_before_the_package_is_its_own_import_root(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 120\n")
    assert import_roots(tmp_path, tmp_path / "unused") == [tmp_path]
    assert import_roots(tmp_path / "missing", tmp_path / "unused") == [tmp_path / "missing"]


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        ('"headscale_ha.components" = "../elsewhere"', "package-dir 'headscale_ha.components' = '../elsewhere'"),
        ('"headscale_ha.components" = "nothing-here"', "package-dir 'headscale_ha.components' = 'nothing-here'"),
    ],
)
def test_a_mapping_outside_the_tree_is_refused_by_name(tmp_path: Path, mapping: str, expected: str) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tree / "pyproject.toml").write_text(f"[tool.setuptools.package-dir]\n{mapping}\n")
    with pytest.raises(SourceTreeError, match="is not a directory of the tree") as caught:
        package_dirs(tree)
    assert expected in str(caught.value)


def test_a_pyproject_that_is_not_toml_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool\n")
    with pytest.raises(SourceTreeError, match="not TOML"):
        package_dirs(tmp_path)
