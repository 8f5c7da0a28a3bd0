"""The layout rule (docs/contributing.md, "Where code lives"): ``headscale_ha.<name>`` is the top-level folder
``<name>/``, linked into the package's folder as ``headscale_ha/<name>``; every other Python folder at the top imports
by its own name from the checkout. So the checkout imports as the wheel does with no mapping, a type checker reads
the folders as they are, and the editable install is a tree of links that it follows too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from tools.harness import PROJECT_DIR

PACKAGE = PROJECT_DIR / "headscale_ha"
#: Top-level folders that are not the library: the project's own tooling and examples, imported from the checkout,
#: and the alias that keeps the state of release 0.1.0 readable (headscale_ha/class_paths.py).
OWN_NAME = {"bench", "examples", "migration", "tests", "tools", "headscale_provider"}
#: Programs a Pulumi CLI runs from their folder (a ``__main__.py``), never imported: the identity stack and the
#: component package's plugin.
PROGRAMS = {"identity", "plugin"}


def _linked() -> dict[str, str]:
    """The links in ``headscale_ha/``: name -> what it points at."""
    return {path.name: os.readlink(path) for path in PACKAGE.iterdir() if path.is_symlink()}


def _python_folders() -> set[str]:
    """Top-level folders that hold Python modules (a namespace package, bench/, has no ``__init__.py``)."""
    return {path.name for path in PROJECT_DIR.iterdir() if path.is_dir() and path != PACKAGE and any(path.glob("*.py"))}


def _pyproject() -> dict:
    return tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())


def test_each_link_is_the_top_level_folder_of_its_name() -> None:
    links = _linked()
    assert links, "headscale_ha/ links the library's folders"
    assert links == {name: f"../{name}" for name in links}
    assert all((PROJECT_DIR / name / "__init__.py").is_file() for name in links)


def test_the_package_folder_holds_its_root_modules_and_the_links_alone() -> None:
    others = {path.name for path in PACKAGE.iterdir() if not path.is_symlink() and path.name != "__pycache__"}
    assert others == {path.name for path in PACKAGE.glob("*.py")}, "a folder of its own goes at the top, linked"


def test_every_python_folder_at_the_top_is_linked_or_imports_by_its_own_name() -> None:
    assert _python_folders() == set(_linked()) | OWN_NAME | PROGRAMS


def test_the_build_maps_nothing_and_ships_every_subpackage_of_the_linked_folders() -> None:
    """No package-dir: the links are the mapping. The wheel's package list names every subpackage, so a new one
    cannot be left out of the wheel unnoticed."""
    setuptools = _pyproject()["tool"]["setuptools"]
    assert "package-dir" not in setuptools
    found = {"headscale_ha", "headscale_provider"}
    for name in _linked():
        for init in sorted((PROJECT_DIR / name).rglob("__init__.py")):
            if "venv" not in init.relative_to(PROJECT_DIR).parts:  # guardrails/pack/venv: the pack's own environment
                found.add(".".join(("headscale_ha", *init.parent.relative_to(PROJECT_DIR).parts)))
    assert set(setuptools["packages"]) == found


def test_the_makefile_reinstalls_when_a_file_of_the_package_is_added() -> None:
    """The editable install lists the files when it is made; the Makefile's PACKAGE_DIRS are what it watches."""
    makefile = (PROJECT_DIR / "Makefile").read_text()
    watched = re.search(r"^PACKAGE_DIRS := (.*)$", makefile, re.MULTILINE)
    assert watched is not None
    assert set(watched.group(1).split()) == {"headscale_ha", "headscale_provider", *_linked()}
    assert re.search(r"^\$\(RUNTIME_STAMP\): .*\$\(PACKAGE_LIST\)", makefile, re.MULTILINE)
    assert re.search(r"^\$\(DEV_STAMP\): .*\$\(PACKAGE_LIST\)", makefile, re.MULTILINE)


def _static_roots() -> list[Path]:
    """The directories the environment's .pth files add to the path: what a type checker reads (an import hook,
    the editable default, is code only Python runs)."""
    site = Path(sysconfig.get_paths()["purelib"])
    roots = []
    for pth in sorted(site.glob("*.pth")):
        for line in pth.read_text().splitlines():
            if line and not line.startswith(("#", "import ")) and Path(line).is_dir():
                roots.append(Path(line))
    return roots


def test_the_editable_install_is_a_tree_a_type_checker_follows_to_the_checkout() -> None:
    roots = [root for root in _static_roots() if (root / "headscale_ha" / "__init__.py").exists()]
    assert len(roots) == 1, _static_roots()
    tree = roots[0] / "headscale_ha"
    assert (tree / "__init__.py").resolve() == PACKAGE / "__init__.py"
    for name in _linked():
        modules = {
            p.relative_to(PROJECT_DIR / name) for p in (PROJECT_DIR / name).rglob("*.py") if "venv" not in p.parts
        }
        linked = {p.relative_to(tree / name) for p in (tree / name).rglob("*.py")}
        assert modules <= linked, f"not in the install's tree (make reinstalls it): {sorted(modules - linked)}"
        assert (tree / name / "__init__.py").resolve() == PROJECT_DIR / name / "__init__.py"


def test_outside_the_checkout_the_package_is_the_checkouts(tmp_path: Path) -> None:
    probe = "import importlib, sys\nfor n in sys.argv[1:]: print(importlib.import_module(n).__file__)"
    names = [f"headscale_ha.{name}" for name in sorted(_linked())]
    done = subprocess.run(
        [sys.executable, "-P", "-c", probe, *names], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert [Path(line).resolve() for line in done.stdout.splitlines()] == [
        PROJECT_DIR / name / "__init__.py" for name in sorted(_linked())
    ]
