"""The house measures ruff has no rule for: a module small enough to read whole (800 lines), a function short
enough to hold in mind (80 lines, docstring included), unless its docstring says why it is longer ("Long because").
ruff's complexity rules (C901, PLR0912, PLR0915) are on in pyproject.toml; docs/contributing.md says what to do
when a change trips one of them."""

from __future__ import annotations

import ast

import pytest

from tests.support.source_files import tracked_python
from tools.harness import PROJECT_DIR

MODULE_LINES = 800
FUNCTION_LINES = 80
#: The words a docstring uses to keep a longer function (followed by the reason).
LONG_BECAUSE = "Long because"


def long_functions(source: str) -> list[tuple[int, str, int]]:
    """(line, name, lines) of every function longer than FUNCTION_LINES that does not say why in its docstring."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1 if node.end_lineno else 0
            if lines > FUNCTION_LINES and LONG_BECAUSE not in (ast.get_docstring(node) or ""):
                found.append((node.lineno, node.name, lines))
    return found


def test_no_module_is_longer_than_a_reader_can_hold() -> None:
    sizes = {str(path.relative_to(PROJECT_DIR)): len(path.read_text().splitlines()) for path in tracked_python()}
    assert sizes, "no Python file found"
    assert {path: lines for path, lines in sizes.items() if lines > MODULE_LINES} == {}


def test_no_function_is_longer_than_a_screen_without_a_reason() -> None:
    found = {str(path.relative_to(PROJECT_DIR)): long_functions(path.read_text()) for path in tracked_python()}
    assert {path: functions for path, functions in found.items() if functions} == {}


@pytest.mark.parametrize(
    ("docstring", "flagged"), [('"""Short."""', True), ('"""Long because: a fixed table."""', False)]
)
def test_the_measure_sees_a_long_function_and_its_reason(docstring: str, flagged: bool) -> None:
    body = "\n".join(f"    x{n} = {n}" for n in range(FUNCTION_LINES))
    source = f"def f() -> None:\n    {docstring}\n{body}\n\n\ndef g() -> None:\n    return None\n"
    assert long_functions(source) == ([(1, "f", FUNCTION_LINES + 2)] if flagged else [])
