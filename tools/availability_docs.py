"""docs/availability/<stack>.md: every site stack's `availability` output as planned offline, as Markdown.

`python -m tools.availability_docs --write` (run by `make docs`) writes the pages, rewriting only the ones that
changed and removing the page of a stack that no longer exists; without arguments it says which pages are stale and
exits 1 if any is. A test fails when a committed page is stale. Nothing here is typed by hand: change the config,
the pods or the measurement, and regenerate.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from headscale_ha.components.settings import PROJECT
from headscale_ha.program.availability import availability_report
from headscale_ha.program.availability.page import render_markdown
from headscale_ha.program.config import StackConfig, parse_stack_config
from tools.harness import PROJECT_DIR
from tools.plan import PLACEHOLDERS, plan_all
from tools.stack_files import read_stack_settings

DOCS_DIR = PROJECT_DIR / "docs" / "availability"


def stack_config(stack: str, project_dir: Path = PROJECT_DIR) -> StackConfig:
    """The StackConfig a stack plans with offline (its files merged as the CLI does, secrets as placeholders)."""
    settings = read_stack_settings(project_dir, stack, placeholders=PLACEHOLDERS)
    prefix = f"{PROJECT}:"
    raw = {key.removeprefix(prefix): value for key, value in settings.config.items() if key.startswith(prefix)}
    secret = {key.removeprefix(prefix) for key in settings.secret_keys if key.startswith(prefix)}
    return parse_stack_config(raw, stack=stack, secret_keys=secret)


def report_of(stack: str, exports: Mapping[str, Any], project_dir: Path = PROJECT_DIR) -> dict[str, Any]:
    """The stack's whole availability report, from its config and its planned `recovery` output (the `availability`
    output is its summary; the page holds the rest)."""
    return availability_report(stack_config(stack, project_dir), exports["recovery"])


def documents(project_dir: Path = PROJECT_DIR) -> dict[str, str]:
    """Stack → Markdown page, for every site stack planned offline on its defaults (identity stacks have none)."""
    pages: dict[str, str] = {}
    for planned in plan_all(project_dir=project_dir):
        if planned.error is not None:
            raise planned.error
        if planned.project != PROJECT or planned.run is None or "recovery" not in planned.run.exports:
            continue
        pages[planned.stack] = render_markdown(
            planned.stack, report_of(planned.stack, planned.run.exports, project_dir)
        )
    return dict(sorted(pages.items()))


def stale(directory: Path = DOCS_DIR, pages: Mapping[str, str] | None = None) -> dict[Path, str]:
    """Page → why it is stale ("missing", "differs", "no such stack"); empty when the directory is current."""
    pages = documents() if pages is None else pages
    found: dict[Path, str] = {}
    for stack, text in pages.items():
        path = directory / f"{stack}.md"
        if not path.is_file():
            found[path] = "missing"
        elif path.read_text(encoding="utf-8") != text:
            found[path] = "differs"
    for path in sorted(directory.glob("*.md")) if directory.is_dir() else []:
        if path.stem not in pages:
            found[path] = "no such stack"
    return found


def write(directory: Path = DOCS_DIR, pages: Mapping[str, str] | None = None) -> list[Path]:
    """Bring ``directory`` up to date: write the pages that changed, remove those of stacks that no longer exist.
    Returns the paths written or removed (empty when everything was current)."""
    pages = documents() if pages is None else pages
    changed = []
    for path, why in stale(directory, pages).items():
        if why == "no such stack":
            path.unlink()
        else:
            directory.mkdir(parents=True, exist_ok=True)
            path.write_text(pages[path.stem], encoding="utf-8")
        changed.append(path)
    return changed


def _shown(path: Path) -> str:
    return str(path.relative_to(PROJECT_DIR)) if path.is_relative_to(PROJECT_DIR) else str(path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--write"]):
        print("usage: python -m tools.availability_docs [--write]", file=sys.stderr)
        return 2
    pages = documents()
    if argv == ["--write"]:
        changed = write(DOCS_DIR, pages)
        for path in changed:
            print(f"{'wrote' if path.exists() else 'removed'} {_shown(path)}")
        if not changed:
            print(f"{_shown(DOCS_DIR)}: already current")
        return 0
    problems = stale(DOCS_DIR, pages)
    for path, why in problems.items():
        print(f"{_shown(path)}: {why}")
        if why == "differs":
            old = path.read_text(encoding="utf-8").splitlines()
            new = pages[path.stem].splitlines()
            diff = list(difflib.unified_diff(old, new, lineterm="", n=0))
            added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
            removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
            print(f"  {added} line(s) to add, {removed} to remove")
    if problems:
        print("stale: run `make docs`", file=sys.stderr)
        return 1
    print(f"{_shown(DOCS_DIR)}: current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
