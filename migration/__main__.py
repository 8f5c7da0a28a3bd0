"""``python -m migration run``: the migration Job's entry point (snapshot, preflight, target, load, verify).

Each step prints one line; the first failure prints the step and why, and exits 1. The SQLite file is never
opened: it and its -wal are copied into the private work directory, and everything reads that copy, which is
deleted at the end (it and pgloader's reject files hold key material).

SIGTERM and SIGINT stop the run at once: pgloader's whole process group is killed and reaped, the target keeps
the ``unverified`` mark written before the first write, the work directory is removed, and the exit code is
128 + the signal number (143, 130). The next run refuses that target unless ``--force`` (wipe, load again).

A rerun against a target an earlier run verified (the Job is recreated on any change to its spec) loads
nothing and writes nothing: it verifies the target again against this run's snapshot and exits 0, or exits 1
naming what differs, the ``verified`` mark left as it was. ``--force`` wipes and reloads it as any other.

The target URL must not carry a password on the command line (``ps`` shows it): give the password in
PGPASSWORD or ``--password-file``, or pass the whole URL in the MIGRATION_PG_URL environment variable.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TypeVar
from urllib.parse import urlsplit

from migration.errors import MigrationError, PsqlError
from migration.load import LoadReport, continue_sequences, run_pgloader
from migration.preflight import PreflightReport, preflight
from migration.psql import PsqlConnection
from migration.source import snapshot
from migration.target import UNVERIFIED, VERIFIED, TargetReport, check_target, reset_target, reverify, write_mark
from migration.verify import VerifyReport, verify
from migration.versions import HeadscaleSchema, schema_for

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived; a BaseException so that no ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn the first SIGTERM/SIGINT into Interrupted; later ones are noted and ignored (cleanup is bounded)."""
    seen: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if seen:
            return
        seen.append(signum)
        raise Interrupted(signum)

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


class _Progress:
    """The step running now, and whether the target carries this run's unverified mark."""

    step = "snapshot"
    marked = False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m migration", description=__doc__ and __doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="preflight, check the target, load with pgloader, verify")
    check = commands.add_parser("preflight", help="only check the SQLite database")
    for sub in (run, check):
        sub.add_argument("--sqlite", type=Path, required=True, help="Headscale's SQLite database (read-only)")
        sub.add_argument("--version", required=True, help="pinned Headscale version, e.g. 0.29.2")
    run.add_argument("--pg-url", help="postgresql://user@host:port/db (default: $MIGRATION_PG_URL)")
    run.add_argument("--password-file", type=Path, help="file holding the PostgreSQL password")
    run.add_argument("--force", action="store_true", help="reset a target left non-empty (e.g. by a failed run)")
    run.add_argument("--workdir", type=Path, help="parent of the private work directory (default: $TMPDIR)")
    run.add_argument("--keep-workdir", action="store_true", help="do not delete the work directory")
    run.add_argument("--pgloader", default="pgloader", help="pgloader binary")
    run.add_argument("--psql", default="psql", help="psql binary")
    return parser


def _step(name: str, action: Callable[[], T], describe: Callable[[T], str]) -> T:
    """Run one step, print ``[name] ok (seconds): what``; a MigrationError propagates with its own step."""
    _Progress.step = name
    started = time.monotonic()
    result = action()
    print(f"[{name}] ok ({time.monotonic() - started:.2f} s): {describe(result)}", flush=True)
    return result


def _describe_preflight(report: PreflightReport) -> str:
    counts = " ".join(f"{table}={rows}" for table, rows in report.row_counts.items())
    older = f" (+{len(report.extra_migrations)} from older releases)" if report.extra_migrations else ""
    return f"Headscale {report.version}: {counts}; {len(report.migrations)} migration ids{older}"


def _connection(args: argparse.Namespace) -> PsqlConnection:
    url = args.pg_url
    if url is not None and urlsplit(url).password is not None:
        raise MigrationError(
            "target", "--pg-url must not contain the password (use PGPASSWORD, --password-file or MIGRATION_PG_URL)"
        )
    url = url or os.environ.get("MIGRATION_PG_URL")
    if not url:
        raise MigrationError("target", "no target: give --pg-url or set MIGRATION_PG_URL")
    password = args.password_file.read_text().strip() if args.password_file else os.environ.get("PGPASSWORD")
    return PsqlConnection.from_url(url, password=password, psql=args.psql)


def _mark_stopped(pg: PsqlConnection, why: str) -> None:
    """Best effort: say in the unverified mark why the run stopped (the mark itself is already there)."""
    if not _Progress.marked:
        return
    with contextlib.suppress(PsqlError):
        write_mark(replace(pg, timeout=15.0), UNVERIFIED, why)


def _check_and_mark(pg: PsqlConnection, args: argparse.Namespace) -> TargetReport:
    """The target step: refuse a target that is not Headscale's empty one, then mark it before any write.

    A target an earlier run verified is neither refused nor marked: the caller verifies it again instead.
    """
    schema = schema_for(args.version)
    target = check_target(pg, schema, force=args.force, accept_verified=True)
    if target.verified:
        return target
    try:
        write_mark(pg, UNVERIFIED, "loading (no verification yet; a rerun needs --force)")
    except PsqlError as error:
        raise MigrationError("target", f"cannot mark {pg.url()} before loading: {error}") from error
    _Progress.marked = True
    return target


def run(args: argparse.Namespace) -> None:
    """The whole migration; raises MigrationError at the first step that fails (Interrupted on a signal)."""
    schema = schema_for(args.version)
    pg = _connection(args)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="headscale-migration-", dir=args.workdir))  # 0700, ours to delete
    started = time.monotonic()
    _Progress.step, _Progress.marked = "snapshot", False
    try:
        reverified = _migrate(args, schema, pg, workdir)
    except Interrupted as interrupted:
        _mark_stopped(pg, f"interrupted by {interrupted} during {_Progress.step}; rerun with --force")
        raise
    except MigrationError as error:
        _mark_stopped(pg, f"{error.step} failed; rerun with --force once fixed")
        raise
    finally:
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(_closing(reverified, time.monotonic() - started), flush=True)


def _closing(reverified: VerifyReport | None, seconds: float) -> str:
    if reverified is None:
        return f"migration complete in {seconds:.2f} s"
    rows = sum(reverified.row_counts.values())
    return (
        f"target already migrated and verified against this source: {rows} rows verified again,"
        f" nothing loaded ({seconds:.2f} s)"
    )


def _describe_target(pg: PsqlConnection, target: TargetReport) -> str:
    if target.verified:
        return f"{pg.url()} is marked verified by an earlier run: verifying it again, nothing is loaded"
    return (
        f"{pg.url()} has Headscale's schema"
        + (", not empty or unverified: --force given, resetting it" if target.forced else ", empty")
        + "; marked unverified until verify passes"
    )


def _describe_verify(report: VerifyReport) -> str:
    return (
        f"{sum(report.row_counts.values())} rows, {len(report.checksums)} column checksums,"
        f" {len(report.foreign_keys)} foreign keys, {len(report.sequences)} sequences,"
        f" {report.migrations} migration ids"
    )


def _migrate(
    args: argparse.Namespace, schema: HeadscaleSchema, pg: PsqlConnection, workdir: Path
) -> VerifyReport | None:
    """snapshot, preflight, target; then load and verify, or only verify again (returned) a verified target."""
    copy = _step(
        "snapshot", lambda: snapshot(args.sqlite, workdir / "headscale.sqlite"), lambda p: f"{args.sqlite} -> {p}"
    )
    report = _step("preflight", lambda: preflight(copy, version=schema.version), _describe_preflight)
    target = _step("target", lambda: _check_and_mark(pg, args), lambda t: _describe_target(pg, t))
    if target.verified:
        return _step("verify", lambda: reverify(copy, pg, schema, target.mark), _describe_verify)
    _load_and_verify(args, schema, pg, workdir, copy, report, target)
    return None


def _load_and_verify(
    args: argparse.Namespace,
    schema: HeadscaleSchema,
    pg: PsqlConnection,
    workdir: Path,
    copy: Path,
    report: PreflightReport,
    target: TargetReport,
) -> None:
    """reset if forced, load, continue the sequences, verify, mark verified."""
    if target.forced:
        _step("reset", lambda: reset_target(pg, schema), lambda _: "data tables emptied, foreign keys in place")

    def load() -> tuple[LoadReport, dict[str, int]]:
        loaded = run_pgloader(
            copy,
            pg,
            schema.table_names,
            workdir=workdir,
            expected_rows=report.row_counts,
            pgloader=args.pgloader,
            reset=lambda: reset_target(pg, schema),
        )
        return loaded, continue_sequences(pg, schema, report.next_ids)

    _step(
        "load",
        load,
        lambda r: (
            f"pgloader exit {r[0].returncode}, {sum(filter(None, map(r[0].table_rows, schema.table_names)))}"
            f" rows; sequences continue at {' '.join(f'{t}={n}' for t, n in r[1].items())}"
            + "".join(f"; ran again after pgloader's monitor crashed ({cause})" for cause in r[0].reruns_after_crash)
        ),
    )
    checked = _step("verify", lambda: verify(copy, pg, version=schema.version), _describe_verify)
    try:
        write_mark(pg, VERIFIED, f"{sum(checked.row_counts.values())} rows verified against the SQLite source")
    except PsqlError as error:
        raise MigrationError("verify", f"verified, but the mark could not be set: {error}") from error


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: 0 on success, 1 when a step fails (step and reason on stderr), 2 on usage errors."""
    args = _parser().parse_args(argv)
    try:
        with _stop_on_signals():
            if args.command == "preflight":
                _preflight_only(args)
            else:
                run(args)
    except MigrationError as error:
        print(f"[{error.step}] FAILED: {error.message}", file=sys.stderr, flush=True)
        return 1
    except Interrupted as interrupted:
        marked = (
            "pgloader (if it was running) is stopped, the target stays marked unverified: rerun with --force"
            if _Progress.marked
            else "nothing was written to the target"
        )
        print(f"[{_Progress.step}] INTERRUPTED by {interrupted}: {marked}", file=sys.stderr, flush=True)
        return 128 + interrupted.signum
    return 0


def _preflight_only(args: argparse.Namespace) -> None:
    """``preflight``: on a snapshot in a temporary directory, so nothing is created beside the source."""
    with tempfile.TemporaryDirectory(prefix="headscale-preflight-") as tmp:
        copy = snapshot(args.sqlite, Path(tmp) / "headscale.sqlite")
        _step("preflight", lambda: preflight(copy, version=args.version), _describe_preflight)


if __name__ == "__main__":
    sys.exit(main())
