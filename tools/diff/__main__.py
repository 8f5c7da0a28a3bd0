"""Offline preview of a change: plan a base (a git ref) and the working tree, and compare them stack by stack.

Usage: ``python -m tools.diff [--base REF] [--stack NAME]...`` (``make diff BASE=... STACK=...``). How the two trees
are planned and compared: tools/diff/__init__.py.

Exit status: 0 no change; 1 changes; 3 changes with DATA LOSS; 2 the diff could not be made (git, a base without
the planning API, a stack that does not plan in the working tree), whatever else it found.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.diff.planning import DiffError, base_worktree, collect, start_dump
from tools.diff.render import render
from tools.diff.report import EXIT_ERROR, exit_code
from tools.diff.stacks import diff_dumps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make diff", description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="git ref to compare the working tree with (default: HEAD)")
    parser.add_argument("--stack", action="append", help="stack to compare (repeatable); default: every stack")
    parser.add_argument(
        "--project-dir", type=Path, default=Path.cwd(), help="the project (Pulumi.yaml) in a git checkout (default: .)"
    )
    args = parser.parse_args(argv)
    project_dir = args.project_dir.resolve()
    if not (project_dir / "Pulumi.yaml").is_file():
        print(f"error: no Pulumi.yaml in {project_dir}", file=sys.stderr)
        return EXIT_ERROR
    try:
        with base_worktree(project_dir, args.base) as (base_project, commit):
            base_label = f"{args.base} ({commit[:12]})"
            pending = [
                start_dump(base_project, args.stack, base_label),
                start_dump(project_dir, args.stack, "the working tree"),
            ]
            base, head = collect(pending)
    except DiffError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    base["label"], head["label"] = base_label, "working tree"
    report = diff_dumps(base, head, args.stack)
    print(render(report))
    return exit_code(report)


if __name__ == "__main__":
    sys.exit(main())
