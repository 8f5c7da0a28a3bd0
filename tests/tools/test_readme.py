"""write_block: a generated README block is replaced whole, and only when it changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.readme import write_block

BEGIN, END = "<!-- x:begin -->", "<!-- x:end -->"


def test_the_block_is_replaced_between_its_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{BEGIN}\nold\n{END}\nafter\n")
    assert write_block(BEGIN, END, f"{BEGIN}\nnew\n{END}", readme) is True
    assert readme.read_text() == f"before\n{BEGIN}\nnew\n{END}\nafter\n"
    assert write_block(BEGIN, END, f"{BEGIN}\nnew\n{END}", readme) is False, "unchanged: not rewritten"


def test_missing_markers_are_an_error_naming_them(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    with pytest.raises(ValueError, match="x:begin"):
        write_block(BEGIN, END, "anything", readme)
    assert readme.read_text() == "no markers here\n"
