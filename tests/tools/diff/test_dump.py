"""tools/diff/dump.py, the dumper: a script of the running checkout that plans another tree with that tree's code.

The planned tree may be an old commit without tools/diff/. The script runs by its path with ``-P``, so the first
module path entries are the planned tree's import roots: not the script's own directory (whose modules could shadow
the standard library's or the tree's), not the running checkout (whose ``tools`` would plan the base with the head's
code). And it imports nothing at its top beyond the standard library, nothing of tools.diff at all.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from tools.diff.planning import DUMPER, DiffError, dump_tree

#: A planned tree's ``tools/__init__.py`` that writes down how the dumper's interpreter finds modules.
RECORDER = """\
import json
import sys
from pathlib import Path

seen = {"path": sys.path, "main": sys.modules["__main__"].__file__}
Path(__file__).with_name("seen.json").write_text(json.dumps(seen))
"""


def test_the_dumper_imports_the_planned_tree_first_and_runs_from_the_running_checkout(tmp_path: Path) -> None:
    tree = tmp_path / "old-tree"
    (tree / "tools").mkdir(parents=True)
    (tree / "Pulumi.yaml").write_text("name: headscale-ha\nruntime: python\n")
    (tree / "tools" / "__init__.py").write_text(RECORDER)
    init = re.escape(str((tree / "tools" / "__init__.py").resolve()))
    with pytest.raises(DiffError, match=rf"its tools lack what the diff needs \(cannot import name 'harness' .*{init}"):
        dump_tree(tree)
    seen = json.loads((tree / "tools" / "seen.json").read_text())
    assert Path(seen["main"]) == DUMPER, "the running checkout's dumper, which the planned tree does not have"
    assert seen["path"][0] == str(tree.resolve()), "the planned tree's import roots come first (-P)"
    assert str(DUMPER.parent) not in seen["path"]


def _imported(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return {node.module}
    return set()


def test_the_dumper_imports_the_standard_library_at_its_top_and_nothing_of_the_diff() -> None:
    module = ast.parse(DUMPER.read_text())
    top = {name.split(".")[0] for node in module.body for name in _imported(node)}
    assert top - {"__future__"} <= sys.stdlib_module_names
    everywhere = {name for node in ast.walk(module) for name in _imported(node)}
    assert not any(name == "tools.diff" or name.startswith("tools.diff.") for name in everywhere)
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(module)), "no relative import"
