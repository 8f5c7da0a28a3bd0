"""Registration downtime of the SQLite → PostgreSQL migration: what each step of the Job costs at scale.

For each size of ``--nodes`` (default 20,000 and 100,000, as many pre-auth keys unless ``--keys``), builds a
Headscale SQLite database (50 users, realistic host info JSON, in WAL mode as Headscale keeps it), starts a
throwaway PostgreSQL server holding the empty schema Headscale creates, and runs the Job's steps exactly as
``python -m migration run`` does: snapshot, preflight, target check and mark, pgloader load, sequences,
verify, mark verified. Headscale is scaled to 0 for all of it, so the total is the registration pause the
migration itself adds (rollout of the PostgreSQL-backed Headscale comes on top). Median of ``--runs`` runs,
each on a fresh database; seconds and rows per second (all rows of the source over the step's time) per step.

Usage: ``python -m bench.migration [--nodes 20000 100000] [--keys N] [--version 0.29.2] [--runs 3]``.
Needs PostgreSQL server binaries, psql and pgloader (run as root, the server runs as the postgres user).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from migration import check_target, preflight, reset_target, run_pgloader, schema_for, verify
from migration.load import continue_sequences
from migration.source import snapshot
from migration.target import UNVERIFIED, VERIFIED, write_mark
from tests.support import headscale_samples as sample_db
from tests.support.pg_lab import PgServer, missing_tools

STEPS = ("snapshot", "preflight", "target", "load", "sequences", "verify")


class Stopwatch:
    """Seconds per named step, each lap measured from the end of the previous one."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, step: str) -> None:
        now = time.monotonic()
        self.seconds[step] = now - self._last
        self._last = now


def one_run(server: PgServer, sqlite: Path, version: str, workdir: Path, name: str) -> dict[str, float]:
    """The Job's steps once, against a fresh database; seconds per step."""
    schema = schema_for(version)
    pg = server.headscale_database(name, version)
    copy = workdir / f"{name}.sqlite"
    watch = Stopwatch()
    snapshot(sqlite, copy)
    watch.lap("snapshot")
    report = preflight(copy, version=version)
    watch.lap("preflight")
    check_target(pg, schema)
    write_mark(pg, UNVERIFIED, "bench")
    watch.lap("target")
    run_pgloader(
        copy,
        pg,
        schema.table_names,
        workdir=workdir / name,
        expected_rows=report.row_counts,
        reset=lambda: reset_target(pg, schema),
    )
    watch.lap("load")
    continue_sequences(pg, schema, report.next_ids)
    watch.lap("sequences")
    verify(copy, pg, version=version)
    write_mark(pg, VERIFIED, "bench")
    watch.lap("verify")
    server.admin().query(f"DROP DATABASE {name} WITH (FORCE)")
    return watch.seconds


def source_rows(sqlite: Path, version: str) -> int:
    """Rows of every table the migration copies."""
    conn = sqlite3.connect(f"{sqlite.as_uri()}?mode=ro", uri=True)
    try:
        return sum(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in schema_for(version).table_names)
    finally:
        conn.close()


def wal_mode(sqlite: Path) -> None:
    """Headscale keeps its database in WAL mode: the snapshot copies and applies the -wal."""
    conn = sqlite3.connect(sqlite)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()


def bench_size(server: PgServer, workdir: Path, args: argparse.Namespace, nodes: int, keys: int) -> float:
    """One size: build, run ``--runs`` times, print the table; returns the median total seconds."""
    started = time.monotonic()
    sqlite = sample_db.build_large(workdir / f"hs-{nodes}.sqlite", args.version, nodes=nodes, keys=keys)
    wal_mode(sqlite)
    build_s = time.monotonic() - started
    rows = source_rows(sqlite, args.version)
    size_mb = sqlite.stat().st_size / 1e6
    print(
        f"\nHeadscale {args.version}: {nodes} nodes, {keys} pre-auth keys, 50 users ({rows} rows in all);"
        f" SQLite {size_mb:.1f} MB, WAL mode (built in {build_s:.1f} s)"
    )
    runs = [one_run(server, sqlite, args.version, workdir, f"bench{nodes}_{i}") for i in range(args.runs)]
    sqlite.unlink()
    totals = [sum(run.values()) for run in runs]
    print(f"seconds per step, median of {args.runs} run(s) (min-max), and rows/s over all {rows} rows:")
    for step in (*STEPS, "total"):
        values = totals if step == "total" else [run[step] for run in runs]
        median = statistics.median(values)
        rate = f"{rows / median:12,.0f} rows/s" if median > 0 else ""
        print(f"  {step:10s} {median:7.2f}   ({min(values):.2f}-{max(values):.2f})   {rate}")
    return statistics.median(totals)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--keys", type=int, help="pre-auth keys (default: as many as nodes)")
    parser.add_argument("--version", default="0.29.2", choices=sample_db.VERSIONS)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    reason = missing_tools()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-migration-") as tmp:
        server = PgServer.start()
        try:
            totals = {
                n: bench_size(server, Path(tmp), args, n, n if args.keys is None else args.keys) for n in args.nodes
            }
        finally:
            server.stop()
    for nodes, total in totals.items():
        print(
            f"\nregistration downtime added by the migration Job at {nodes} nodes: ~{total:.1f} s"
            " (Headscale scaled to 0 throughout; pod start-up on PostgreSQL comes on top)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
