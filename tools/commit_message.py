"""Check commit messages: a subject of at most 72 characters, a blank line, then a body that says why.

Usage:
    python -m tools.commit_message FILE            # a message file (the commit-msg hook passes one)
    python -m tools.commit_message --range A..B    # every commit of a range of history (a review, a branch)

Install the hook once per clone: ``git config core.hooksPath .githooks`` (.githooks/commit-msg runs this).
Exit status: 0 when every message passes, 1 otherwise (each problem printed with its commit), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

SUBJECT_LIMIT = 72


def message_problems(message: str) -> list[str]:
    """What is wrong with ``message`` (git's comment lines and trailing whitespace ignored)."""
    lines = [line.rstrip() for line in message.splitlines() if not line.startswith("#")]
    while lines and not lines[-1]:
        lines.pop()
    if not lines or not lines[0]:
        return ["the subject (first line) is empty"]
    problems = []
    subject = lines[0]
    if len(subject) > SUBJECT_LIMIT:
        problems.append(f"the subject has {len(subject)} characters, at most {SUBJECT_LIMIT}: {subject[:40]}...")
    if len(lines) < 3:
        problems.append("no body: after the subject, a blank line, then what changed, why, and how it was checked")
    elif lines[1]:
        problems.append("the second line must be blank (it separates the subject from the body)")
    return problems


def _range_messages(revisions: str) -> list[tuple[str, str]]:
    """(short hash, message) of every commit in ``revisions``, merges left out (git writes their messages)."""
    out = subprocess.run(
        ["git", "log", "--no-merges", "--format=%h%x00%B%x01", revisions], capture_output=True, text=True, check=True
    ).stdout
    commits = [entry.strip("\n") for entry in out.split("\x01") if entry.strip()]
    return [tuple(entry.split("\x00", 1)) for entry in commits]  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path, help="a commit message file")
    parser.add_argument("--range", dest="revisions", help="a range of commits, e.g. main..HEAD")
    args = parser.parse_args(argv)
    if (args.file is None) == (args.revisions is None):
        parser.print_usage(sys.stderr)
        return 2
    messages = [("message", args.file.read_text())] if args.file else _range_messages(args.revisions)
    failed = False
    for name, message in messages:
        for problem in message_problems(message):
            print(f"{name}: {problem}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
