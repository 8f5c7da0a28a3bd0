"""The docs' generated blocks: each lives between a begin and an end marker and is replaced whole."""

from __future__ import annotations

from pathlib import Path

from tools.harness import PROJECT_DIR

README = PROJECT_DIR / "README.md"
DOCS = PROJECT_DIR / "docs"
CONFIGURATION = DOCS / "configuration.md"
ARCHITECTURE = DOCS / "architecture.md"
OPERATIONS = DOCS / "operations.md"


def write_block(begin: str, end: str, block: str, path: Path = README) -> bool:
    """Replace the text from ``begin`` to ``end`` (both kept in ``block``) with ``block``; True when it changed."""
    text = path.read_text(encoding="utf-8")
    if begin not in text or end not in text:
        raise ValueError(f"{path}: the markers {begin!r} and {end!r} must both be present")
    start, stop = text.index(begin), text.index(end) + len(end)
    updated = text[:start] + block + text[stop:]
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return updated != text
