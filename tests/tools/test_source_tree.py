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


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "headscale_ha", "components", "policy", "program", "headscale_provider", "tools"):
        source = PROJECT_DIR / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            tree.mkdir(exist_ok=True)
            shutil.copy(source, tree / name)
    release = tree / "components" / "release.py"
    release.write_text(release.read_text().replace('VERSION = "', 'VERSION = "9.9.9-tree-', 1))
    return tree


def _probe(roots: list[Path], cwd: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, roots))}
    done = subprocess.run(
        [sys.executable, "-P", "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def test_a_mapped_tree_imports_its_own_code_not_the_installed_package(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    links = tmp_path / "links"
    links.mkdir()
    version, release, provider, tools = _probe(import_roots(tree, links), tree)
    assert version.startswith("9.9.9-tree-")
    for path in (release, provider, tools):
        assert Path(path).resolve().is_relative_to(tree.resolve()), path


def test_the_checkout_mapping_is_what_the_build_backend_packages() -> None:
    assert {name: path.relative_to(PROJECT_DIR).as_posix() for name, path in package_dirs(PROJECT_DIR).items()} == {
        "headscale_ha": "headscale_ha",
        "headscale_ha.provider": "headscale_ha/provider",
        "headscale_ha.package": "headscale_ha/package",
        "headscale_ha.components": "components",
        "headscale_ha.policy": "policy",
        "headscale_ha.policy.pack": "policy/pack",
        "headscale_ha.program": "program",
        "headscale_provider": "headscale_provider",
    }


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
