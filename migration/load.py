"""Copy the rows with pgloader into the schema Headscale created, and never take its word for success.

pgloader 3.6 exits 0 when a value does not fit (the whole batch, usually the whole table, is left out), when it
cuts text at a NUL byte, and when a foreign key cannot be re-created after the load (the constraint is simply
gone). ``--on-error-stop`` changes none of that. So this step reads pgloader's CSV summary and log too, and the
verify step compares the result with the source on its own.

pgloader runs in a process group of its own, asked by the kernel to die with its parent: when the migration is
stopped (SIGTERM, SIGINT: the caller's exception reaches ``run_pgloader``) the whole group is killed and
reaped, and even a SIGKILLed migration leaves no pgloader writing into the target.

``reset sequences`` moves each id sequence just past max(id); Headscale's SQLite tables are AUTOINCREMENT and
continue past the highest id ever handed out (``sqlite_sequence``), so ``continue_sequences`` then sets every
sequence where SQLite would have gone on: the id of a deleted node (its stable id for clients) is never reused.

pgloader 3.6.9 (Debian's, built with SBCL 2.2.9) now and then dies of a race in its own logger: its monitor thread
fails (``FATAL: Failed to start the monitor thread.`` and the condition on the next line), no summary is written,
it exits 1, and how much it loaded is unknown. Given a ``reset``, ``run_pgloader`` empties the target with it and
runs pgloader once more; the report names the crash, and verify judges the result as always.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from migration.errors import MigrationError, step_errors
from migration.psql import PsqlConnection
from migration.versions import HeadscaleSchema

_SAFE_PATH = re.compile(r"/[A-Za-z0-9_./\-]*")
_SAFE_TABLE = re.compile(r"[a-z_][a-z0-9_]*")
_QUOTED = re.compile(r'"[^"]*"')
_PROBLEM = re.compile(r"\b(ERROR|FATAL|KABOOM)\b")
_MONITOR_CRASH = "FATAL: Failed to start the monitor thread."
MONITOR_CRASH_RERUNS = 1  # one more run after a crash of pgloader's monitor; a second crash fails the load


def render_pgloader(sqlite_path: Path, pg_url: str, tables: Sequence[str]) -> str:
    """The pgloader command file: data only into Headscale's own schema, UTC, Headscale's tables only.

    ``data only`` keeps the tables, indexes and defaults Headscale created; ``truncate`` empties them first
    (Headscale's own ``migrations`` rows included, replaced by the source's); ``reset sequences`` moves every
    id sequence past the copied ids (``continue_sequences`` then moves it past SQLite's AUTOINCREMENT mark).
    Only the named tables are read (Litestream's ``_litestream_*`` tables otherwise break the load). A password
    in ``pg_url`` is dropped: pgloader reads PGPASSWORD.
    """
    path = str(Path(sqlite_path).resolve())
    if not _SAFE_PATH.fullmatch(path):
        raise MigrationError("load", f"SQLite path {path!r} has characters a pgloader command file cannot carry")
    bad = [table for table in tables if not _SAFE_TABLE.fullmatch(table)]
    if bad or not tables:
        raise MigrationError("load", f"invalid table list {list(tables)!r}")
    parts = urlsplit(pg_url)
    netloc = parts.netloc.rsplit("@", 1)
    if len(netloc) == 2:
        netloc[0] = netloc[0].split(":", 1)[0]
    target = urlunsplit(parts._replace(netloc="@".join(netloc)))
    names = ", ".join(f"'{table}'" for table in tables)
    return (
        "LOAD DATABASE\n"
        f"  FROM sqlite://{path}\n"
        f"  INTO {target}\n"
        "\n"
        "WITH data only, truncate, reset sequences\n"
        "\n"
        "SET PostgreSQL PARAMETERS timezone to 'UTC'\n"
        "\n"
        f"INCLUDING ONLY TABLE NAMES LIKE {names};\n"
    )


@dataclass(frozen=True)
class SummaryLine:
    """One line of pgloader's summary: a table or a phase (Truncate, Create Foreign Keys, ...)."""

    name: str
    read: int
    rows: int
    errors: int


@dataclass
class LoadReport:
    """What pgloader did, by its own account (checked against the source counts when ``check``)."""

    returncode: int
    seconds: float
    summary: dict[str, SummaryLine] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # ERROR lines of the output, quoted values redacted
    output_path: Path | None = None
    monitor_crashed: bool = False  # pgloader's monitor thread died: its account (summary, log) is incomplete
    reruns_after_crash: list[str] = field(default_factory=list)  # the cause of each earlier run's monitor crash

    def table_rows(self, table: str) -> int | None:
        """Rows pgloader says it wrote into ``table`` (None when the summary has no line for it)."""
        line = self.summary.get(table)
        return None if line is None else line.rows

    def problems(self, tables: Sequence[str], expected_rows: Mapping[str, int] | None) -> list[str]:
        """Everything in pgloader's own account that shows the load is incomplete, exit code 0 or not."""
        found: list[str] = []
        if self.returncode < 0:
            found.append(f"pgloader was killed by signal {signal.Signals(-self.returncode).name}")
        elif self.returncode != 0:
            found.append(f"pgloader exited with {self.returncode}")
        if self.monitor_crashed:
            found.append(
                "pgloader's monitor thread crashed (a race inside pgloader), so how much it loaded is unknown"
                + (
                    f"; it crashed on every one of {1 + len(self.reruns_after_crash)} runs"
                    if self.reruns_after_crash
                    else ""
                )
            )
        if not self.summary and self.returncode == 0:
            found.append("pgloader wrote no summary")
        for line in self.summary.values():
            if line.errors:
                found.append(f"pgloader counted {line.errors} error(s) in {line.name!r}")
        for table in tables:
            rows = self.table_rows(table)
            if self.summary and rows is None:
                found.append(f"pgloader's summary has no line for table {table}")
            elif rows is not None and rows != self.summary[table].read:
                found.append(f"{table}: pgloader read {self.summary[table].read} rows and wrote {rows}")
            elif expected_rows is not None and rows is not None and rows != expected_rows.get(table):
                found.append(f"{table}: pgloader wrote {rows} rows, the source has {expected_rows.get(table)}")
        found.extend(self.errors[:10])
        return found


def run_pgloader(
    sqlite_path: Path,
    pg: PsqlConnection,
    tables: Sequence[str],
    *,
    workdir: Path,
    expected_rows: Mapping[str, int] | None = None,
    pgloader: str = "pgloader",
    timeout: float = 3600.0,
    check: bool = True,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
    reset: Callable[[], None] | None = None,
) -> LoadReport:
    """Run pgloader on a command file in ``workdir`` and read back its summary and log.

    With ``check`` (the default) any sign of trouble raises MigrationError("load"): a non-zero exit, an
    ERROR line, a per-table error count, or row counts that differ from ``expected_rows``. ``check=False``
    returns pgloader's account as is (tests use it to show what pgloader alone would have let through).
    ``on_start`` receives the running process (tests use it to kill pgloader mid-load). ``reset`` empties the
    target: when pgloader's monitor crashes it is called and pgloader runs again (without one, no second run).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    command_file = workdir / "headscale.load"
    command_file.write_text(render_pgloader(sqlite_path, pg.pgloader_url(), tables))
    crashes: list[str] = []
    while True:
        report = _run_once(command_file, pg, keep=set(tables), pgloader=pgloader, timeout=timeout, on_start=on_start)
        report.reruns_after_crash = list(crashes)
        if not (report.monitor_crashed and reset is not None and len(crashes) < MONITOR_CRASH_RERUNS):
            break
        crashes.append(_crash_cause(report.errors))
        if report.output_path is not None:  # kept beside the next run's output, for the record
            report.output_path.rename(workdir / f"pgloader-output.crash-{len(crashes)}.log")
        reset()
    if check:
        found = report.problems(tables, expected_rows)
        if found:
            raise MigrationError("load", "pgloader did not load everything:\n  " + "\n  ".join(found))
    return report


def _run_once(
    command_file: Path,
    pg: PsqlConnection,
    *,
    keep: set[str],
    pgloader: str,
    timeout: float,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None,
) -> LoadReport:
    """One pgloader run on ``command_file``, its own process group killed on any exception; its account read."""
    workdir = command_file.parent
    summary_file = workdir / "pgloader-summary.csv"
    output_file = workdir / "pgloader-output.log"
    root_dir = workdir / "pgloader-root"  # its log and reject files: row data, kept out of /tmp/pgloader
    summary_file.unlink(missing_ok=True)
    argv = [pgloader, "--root-dir", str(root_dir), "--summary", str(summary_file), str(command_file)]
    started = time.monotonic()
    try:
        with output_file.open("wb") as output:
            proc = subprocess.Popen(
                argv,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=pg.pgloader_env(),
                start_new_session=True,  # its own process group: killed as a whole, untouched by a tty's ^C
                preexec_fn=_die_with_parent(),  # the caller is single-threaded; the hook only calls prctl
            )
            try:
                if on_start is not None:
                    on_start(proc)
                returncode = proc.wait(timeout=timeout)
            except BaseException:  # timeout, SIGTERM/SIGINT (the CLI raises), anything: nothing keeps loading
                stop_group(proc)
                raise
    except FileNotFoundError as error:
        raise MigrationError("load", f"pgloader not found ({pgloader})") from error
    except subprocess.TimeoutExpired as error:
        raise MigrationError("load", f"pgloader did not finish within {timeout:.0f} s") from error
    output_text = output_file.read_text(errors="replace")
    return LoadReport(
        returncode=returncode,
        seconds=time.monotonic() - started,
        summary=_read_summary(summary_file),
        errors=_error_lines(output_text, pg.password, keep=keep),
        output_path=output_file,
        monitor_crashed=returncode != 0 and _MONITOR_CRASH in output_text,
    )


def _crash_cause(errors: Sequence[str]) -> str:
    """The condition pgloader printed under its monitor crash (the line after the FATAL one), redacted."""
    for line, after in zip(errors, [*errors[1:], ""], strict=True):
        if line == _MONITOR_CRASH:
            return after or "no cause printed"
    return "no cause printed"


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec hook asking Linux to SIGKILL the child when this process dies (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def hook() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


def stop_group(proc: subprocess.Popen[bytes], *, grace: float = 30.0) -> None:
    """SIGKILL ``proc``'s process group and reap it (bounded: ``grace`` seconds)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)


def continue_sequences(pg: PsqlConnection, schema: HeadscaleSchema, next_ids: Mapping[str, int]) -> dict[str, int]:
    """Set each table's id sequence to hand out ``next_ids[table]`` next (SQLite's next id, from preflight).

    One statement for all tables; returns the id each sequence now hands out next. A table whose id owns no
    sequence is skipped here and reported by verify.
    """
    settings = [
        (table.name, max(next_ids[table.name] - 1, 1), next_ids[table.name] > 1)
        for table in schema.tables
        if table.serial and table.name in next_ids
    ]
    if not settings:
        return {}
    sql = " UNION ALL ".join(
        f"SELECT '{name}', coalesce(setval(pg_get_serial_sequence('public.\"{name}\"', 'id'), {value},"
        f" {str(called).lower()})::text, 'none')"
        for name, value, called in settings
    )
    with step_errors("load"):
        rows = dict(pg.query(sql))
    return {
        name: value + 1 if called else value for name, value, called in settings if rows.get(name, "none") != "none"
    }


def _read_summary(path: Path) -> dict[str, SummaryLine]:
    """pgloader's ``--summary x.csv``: ``"name";read;rows;errors;bytes;"time"`` (its JSON summary is invalid)."""
    if not path.is_file():
        return {}
    lines: dict[str, SummaryLine] = {}
    for row in csv.reader(path.read_text(errors="replace").splitlines(), delimiter=";"):
        if len(row) < 4:
            continue
        name = row[0].split(".")[-1].strip('"')
        try:
            lines[name] = SummaryLine(name, int(row[1]), int(row[2]), int(row[3]))
        except ValueError:
            continue
    return lines


def _error_lines(output: str, password: str | None, *, keep: set[str]) -> list[str]:
    """ERROR lines (and the condition under a FATAL one), quoted values (maybe key material) and password blanked.

    Quoted table and constraint names (``keep``, ``public``, ``fk_*``) stay: they say where the load broke.
    """

    def redact(match: re.Match[str]) -> str:
        word = match.group(0).strip('"')
        return match.group(0) if word in keep or word == "public" or word.startswith("fk_") else '"…"'

    found = []
    after_fatal = False
    for line in output.splitlines():
        if _PROBLEM.search(line) or (after_fatal and line.strip()):
            after_fatal = "FATAL" in line and not after_fatal  # pgloader prints the condition under it
            line = _QUOTED.sub(redact, line.strip())
            if password:
                line = line.replace(password, "***")
            found.append(line[:300])
    return found
