"""Plan the two trees ``make diff`` compares: a git ref (checked out into a temporary worktree) and a directory.

Each tree is planned by its own code in a subprocess of this interpreter (same packages): tools/diff/dump.py, run as
a script by its path in this checkout, since an older base has no such file. The subprocess gets the tree as its
working directory, the tree's import roots first on ``PYTHONPATH`` (tools/source_tree.py) and ``-P``, so neither
the working directory nor the script's own directory is searched before them: it imports the planned tree's
``tools`` and package, never this checkout's. Both plans run at once; their dumps are read back here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.source_tree import SourceTreeError, import_roots

#: Bumped when the dump's shape changes; the dumper writes it, the comparison refuses another.
DUMP_VERSION = 1
#: Planning both trees takes seconds; a hung plan must still end the run.
DUMP_TIMEOUT_SECONDS = 600
#: The dumper script: this checkout's, whatever tree it plans.
DUMPER = Path(__file__).resolve().with_name("dump.py")


class DiffError(Exception):
    """The diff cannot be made: git fails, a tree cannot be planned or lacks the planning API."""


@dataclass
class PendingDump:
    """A dumper subprocess for one tree; ``result()`` waits for it and reads its dump."""

    label: str
    process: subprocess.Popen[str]
    out: Path
    links: Path  # the tree's import roots (tools.source_tree), removed with the dump

    def cancel(self) -> None:
        """Stop the subprocess (another plan failed) and drop its output file."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()
        self._drop()

    def _drop(self) -> None:
        self.out.unlink(missing_ok=True)
        shutil.rmtree(self.links, ignore_errors=True)

    def result(self) -> dict[str, Any]:
        try:
            _, stderr = self.process.communicate(timeout=DUMP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            self._drop()
            raise DiffError(f"planning {self.label} took longer than {DUMP_TIMEOUT_SECONDS} s") from None
        text = self.out.read_text() if self.out.is_file() else ""
        self._drop()
        if self.process.returncode != 0 or not text:
            tail = "\n".join(stderr.strip().splitlines()[-15:])
            raise DiffError(f"planning {self.label} failed (exit {self.process.returncode}):\n{tail}")
        dump = json.loads(text)
        if "fatal" in dump:
            raise DiffError(f"cannot plan {self.label}: {dump['fatal']}")
        if dump.get("version") != DUMP_VERSION:
            raise DiffError(f"{self.label}: dump version {dump.get('version')}, expected {DUMP_VERSION}")
        return dump


def start_dump(tree: Path, stacks: Sequence[str] | None, label: str) -> PendingDump:
    """Start planning ``tree`` with its own code, in a subprocess of this interpreter (same packages)."""
    handle, name = tempfile.mkstemp(prefix="headscale-ha-dump-", suffix=".json")
    os.close(handle)
    request = json.dumps({"out": name, "stacks": list(stacks) if stacks else None, "version": DUMP_VERSION})
    links = Path(tempfile.mkdtemp(prefix="headscale-ha-tree-"))
    try:
        roots = import_roots(tree.resolve(), links)
    except SourceTreeError as exc:
        shutil.rmtree(links)
        raise DiffError(f"cannot plan {label}: {exc}") from None
    inherited = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    process = subprocess.Popen(
        [sys.executable, "-P", str(DUMPER), request],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, roots), *inherited])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return PendingDump(label=label, process=process, out=Path(name), links=links)


def dump_tree(tree: Path, stacks: Sequence[str] | None = None, label: str | None = None) -> dict[str, Any]:
    """Plan ``tree`` (a project directory) in a subprocess and return its dump."""
    return start_dump(tree, stacks, label or str(tree)).result()


def collect(pending: Sequence[PendingDump]) -> list[dict[str, Any]]:
    """The dumps of plans started together; the first failure stops the others and is raised."""
    dumps = []
    for index, item in enumerate(pending):
        try:
            dumps.append(item.result())
        except BaseException:
            for other in pending[index + 1 :]:
                other.cancel()
            raise
    return dumps


def _git(args: Sequence[str], cwd: Path) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DiffError(f"git {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip()


@contextlib.contextmanager
def base_worktree(project_dir: Path, ref: str) -> Iterator[tuple[Path, str]]:
    """A detached worktree of ``ref`` in a temporary directory: (the project directory inside it, the commit).

    The project directory sits where it sits in the repository, and ``<project>/../shared`` resolves to this
    checkout's when that exists (the reference data; planning itself does not need it). The worktree is removed
    afterwards, also on errors.
    """
    project_dir = project_dir.resolve()
    toplevel = Path(_git(["rev-parse", "--show-toplevel"], project_dir)).resolve()
    try:
        commit = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], project_dir)
    except DiffError:
        raise DiffError(
            f"git rev-parse: {ref!r} is not a commit here (in CI, fetch it: a shallow checkout lacks the base)"
        ) from None
    relative = project_dir.relative_to(toplevel)
    scratch = Path(tempfile.mkdtemp(prefix="headscale-ha-diff-"))
    worktree = scratch / (toplevel.name or "base")
    added = False
    try:
        _git(["worktree", "add", "--detach", "--quiet", str(worktree), commit], project_dir)
        added = True
        base_project = worktree / relative
        if not (base_project / "Pulumi.yaml").is_file():
            raise DiffError(f"{ref} ({commit[:12]}) has no Pulumi.yaml in {relative or '.'}")
        shared = project_dir.parent / "shared"
        link = base_project.parent / "shared"
        if shared.is_dir() and not link.exists():
            link.symlink_to(shared, target_is_directory=True)
        yield base_project, commit
    finally:
        removed = not added
        if added:
            with contextlib.suppress(DiffError):
                _git(["worktree", "remove", "--force", str(worktree)], project_dir)
                removed = True
        shutil.rmtree(scratch, ignore_errors=True)
        if not removed:  # forget the worktree whose directory is gone (git's own cleanup of stale entries)
            with contextlib.suppress(DiffError):
                _git(["worktree", "prune"], project_dir)


def dump_ref(project_dir: Path, ref: str, stacks: Sequence[str] | None = None) -> dict[str, Any]:
    """Plan ``ref`` of the repository holding ``project_dir`` (its own code and stack files)."""
    with base_worktree(project_dir, ref) as (base_project, commit):
        return dump_tree(base_project, stacks, label=f"{ref} ({commit[:12]})")
