"""Registration downtime of the SQLite → PostgreSQL migration: what each step of the Job costs at scale.

Builds a Headscale SQLite database with ``--nodes`` nodes and ``--keys`` pre-auth keys (50 users, realistic
host info JSON), starts a throwaway PostgreSQL server holding the empty schema Headscale creates, and runs the
Job's steps exactly as ``python -m migration run`` does: snapshot, preflight, target check, pgloader load,
verify. Headscale is scaled to 0 for all of it, so the total is the registration pause the migration itself
adds (rollout of the PostgreSQL-backed Headscale comes on top). Median of ``--runs`` runs, each on a fresh
database.

Usage: ``python bench/migration.py [--nodes 20000] [--keys 20000] [--version 0.29.2] [--runs 3]``.
Needs PostgreSQL server binaries, psql and pgloader (run as root, the server runs as the postgres user).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from migration import check_target, preflight, run_pgloader, schema_for, verify
from migration.source import snapshot
from tests.support import headscale_samples as sample_db
from tests.support.pg_lab import PgServer, missing_tools

STEPS = ("snapshot", "preflight", "target", "load", "verify")


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
    watch.lap("target")
    run_pgloader(copy, pg, schema.table_names, workdir=workdir / name, expected_rows=report.row_counts)
    watch.lap("load")
    verify(copy, pg, version=version)
    watch.lap("verify")
    server.admin().query(f"DROP DATABASE {name} WITH (FORCE)")
    return watch.seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--version", default="0.29.2", choices=sample_db.VERSIONS)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    reason = missing_tools()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-migration-") as tmp:
        workdir = Path(tmp)
        started = time.monotonic()
        sqlite = sample_db.build_large(workdir / "hs.sqlite", args.version, nodes=args.nodes, keys=args.keys)
        build_s = time.monotonic() - started
        size_mb = sqlite.stat().st_size / 1e6
        print(
            f"Headscale {args.version}: {args.nodes} nodes, {args.keys} pre-auth keys, 50 users;"
            f" SQLite {size_mb:.1f} MB (built in {build_s:.1f} s)"
        )
        server = PgServer.start()
        try:
            runs = [one_run(server, sqlite, args.version, workdir, f"bench{i}") for i in range(args.runs)]
        finally:
            server.stop()
    print(f"\nseconds per step, median of {args.runs} run(s) (min-max):")
    totals = [sum(run.values()) for run in runs]
    for step in STEPS:
        values = [run[step] for run in runs]
        print(f"  {step:10s} {statistics.median(values):7.2f}   ({min(values):.2f}-{max(values):.2f})")
    print(f"  {'total':10s} {statistics.median(totals):7.2f}   ({min(totals):.2f}-{max(totals):.2f})")
    print(
        f"\nregistration downtime added by the migration Job: ~{statistics.median(totals):.1f} s"
        " (Headscale scaled to 0 throughout; pod start-up on PostgreSQL comes on top)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
