"""Import a project tree's own code: the module path entries under which ``headscale_ha`` is that tree's.

The installed package (an editable install in ``.venv``) is the working tree's code. A tool that plans another tree
(``tools.diff`` planning a base commit) must import that tree's code instead, without installing it: this module
links the directories the tree's ``pyproject.toml`` maps to package names (``[tool.setuptools.package-dir]``) into a
scratch directory, so a subprocess given that directory first on ``PYTHONPATH`` (and ``-P``, so its working
directory is not searched first) imports the tree as its build backend would package it. A tree from before the
package (no mapping) imports its top-level directories as it always did: the tree itself is the path entry.
"""

from __future__ import annotations

import tomllib
from pathlib import Path


class SourceTreeError(Exception):
    """The tree's package mapping cannot be read or points outside the tree."""


def package_dirs(tree: Path) -> dict[str, Path]:
    """``package name -> directory`` as the tree's pyproject.toml maps them; empty for a tree without a mapping."""
    pyproject = tree / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    try:
        data = tomllib.loads(pyproject.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SourceTreeError(f"{pyproject}: not TOML ({exc})") from None
    mapping = data.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    dirs = {}
    for name, relative in mapping.items():
        path = (tree / relative).resolve()
        if not path.is_relative_to(tree.resolve()) or not path.is_dir():
            raise SourceTreeError(f"{pyproject}: package-dir {name!r} = {relative!r} is not a directory of the tree")
        dirs[name] = path
    return dirs


def import_roots(tree: Path, scratch: Path) -> list[Path]:
    """Module path entries, first to last, that import ``tree``'s code; links are made under ``scratch``.

    The tree itself is always an entry (its ``tools`` and ``tests`` are not packaged). A package whose mapped
    subpackages live outside its own directory (``headscale_ha``, whose ``components`` is the top-level
    ``components/``) becomes a real directory of links to its entries; every other package is one link.
    """
    dirs = package_dirs(tree)
    if not dirs:
        return [tree]
    for name in sorted(dirs, key=lambda package: package.count(".")):
        link = scratch.joinpath(*name.split("."))
        if link.exists():  # inside a directory already linked whole (a subpackage)
            continue
        outside = [
            other for other in dirs if other.startswith(f"{name}.") and not dirs[other].is_relative_to(dirs[name])
        ]
        link.parent.mkdir(parents=True, exist_ok=True)
        if outside:
            link.mkdir()
            for entry in sorted(dirs[name].iterdir()):
                (link / entry.name).symlink_to(entry)
        else:
            link.symlink_to(dirs[name], target_is_directory=True)
    return [scratch, tree]
