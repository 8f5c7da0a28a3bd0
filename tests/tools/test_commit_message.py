"""tools/commit_message.py: the rule of docs/contributing.md, checked on message files, on a range of real history,
and through the commit-msg hook git runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tools.commit_message import SUBJECT_LIMIT, main, message_problems
from tools.harness import PROJECT_DIR

GOOD = "Split the settings into one module per section\n\nWhy, what it costs, and how it was checked.\n"


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (GOOD, None),
        (GOOD + "# a comment git strips\n\n", None),
        ("x" * SUBJECT_LIMIT + "\n\nbody\n", None),
        ("x" * (SUBJECT_LIMIT + 1) + "\n\nbody\n", "73 characters, at most 72"),
        ("A subject alone\n", "no body"),
        ("A subject\nno blank line\nbody\n", "second line must be blank"),
        ("\n\nbody\n", "subject (first line) is empty"),
    ],
)
def test_a_message_is_checked_by_the_rule(message: str, problem: str | None) -> None:
    found = message_problems(message)
    assert found == [] if problem is None else any(problem in text for text in found), found


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout


def test_a_range_of_history_names_the_commits_that_break_the_rule(tmp_path: Path, monkeypatch, capsys) -> None:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "Base\n\nThe start.")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "Fine subject\n\nA body.")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "y" * 100)
    bad = _git(tmp_path, "rev-parse", "--short", "HEAD").strip()
    monkeypatch.chdir(tmp_path)
    assert main(["--range", "HEAD~2..HEAD"]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert errors
    assert all(line.startswith(f"{bad}: ") for line in errors)
    assert main(["--range", "HEAD~2..HEAD~1"]) == 0


def test_the_hook_refuses_a_bad_message_and_lets_a_good_one_through(tmp_path: Path) -> None:
    hook = PROJECT_DIR / ".githooks" / "commit-msg"
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("z" * 80 + "\n")
    refused = subprocess.run([str(hook), str(message)], cwd=PROJECT_DIR, capture_output=True, text=True)
    assert refused.returncode == 1
    assert "80 characters" in refused.stderr
    message.write_text(GOOD)
    assert subprocess.run([str(hook), str(message)], cwd=PROJECT_DIR, capture_output=True).returncode == 0
