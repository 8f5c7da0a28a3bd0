"""A serving pod of the witness lease that restores, replicates and writes for real: what the whole-site scenarios
judge "no acknowledged write lost" by.

Each site is a :class:`ReplicatedPod`: after the gate and with the renewer running, it restores the shared replica
(the NFS export both sites mount) into its own empty data directory with the real ``litestream restore``, starts the
real ``litestream replicate`` on the config the program renders (read, like the writer's, from the serving
directory the gate filled), and then a writer that commits one row per write with the ``sqlite3`` CLI and logs the
write only once it is committed: an acknowledged write. The fence's STOP names the writer and then Litestream, each
under a name of its own on this machine (the other site runs the same programs).

Not modelled: Litestream's startup probe (``caught-up``) that holds Headscale until the replica has its position;
the writer starts when Litestream has run for ``takeover_seconds``. The restore is Litestream's own, not the
product's restore script (its identity and signature checks have tests of their own).
"""

from __future__ import annotations

import secrets
import shutil
import sqlite3
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from headscale_ha.components.litestream_config import render_litestream_config
from tests.support.witness_pod import LeasePod, logged

#: Timing with room for two stops (the writer, then Litestream, 1 s each) between the fence and the takeover.
REPLICA_TIMING = {"LEASE_SECONDS": "6", "SKEW_SECONDS": "1", "RENEW_SECONDS": "0.5", "FENCE_AFTER_SECONDS": "2.5",
                  "RETRY_SECONDS": "0.2"}  # fmt: skip
STOP_GRACE_SECONDS = "1"

#: The writer: one committed row per write, logged "SITE FENCING UPTIME" after the commit (the row holds the same).
SQL_WRITER = """\
[ -f "$SERVE_DIR/config" ] || { echo "no config in $SERVE_DIR: not serving" >&2; exit 1; }
fencing=$(cat "$STATE_DIR/fencing")
sqlite3 "$DB" "PRAGMA busy_timeout=5000; CREATE TABLE IF NOT EXISTS writes (site TEXT, fencing INTEGER, at TEXT);" \\
    >/dev/null || exit 1
while :; do
    read -r now _ </proc/uptime
    sqlite3 "$DB" "PRAGMA busy_timeout=5000; INSERT INTO writes VALUES ('$SITE', $fencing, '$now');" >/dev/null \\
        || exit 1
    printf '%s %s %s\\n' "$SITE" "$fencing" "$now" >>"$WRITE_LOG"
    sleep 0.02
done
"""


@dataclass(frozen=True)
class Restore:
    """One pod's restore: when it ran (uptime) and how it ended."""

    started: float
    ended: float
    returncode: int


@dataclass
class ReplicatedPod(LeasePod):
    """A :class:`LeasePod` whose writer writes a real SQLite database that real Litestream replicates."""

    litestream: Path = field(default=Path("litestream"), kw_only=True)
    replica_dir: Path = field(default=Path("replica"), kw_only=True)
    sync_interval: str = field(default="1s", kw_only=True)
    takeover_seconds: float = field(default=1.0, kw_only=True)
    restores: list[Restore] = field(default_factory=list, init=False)
    litestream_name: str = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        bin_dir = self.site.root / "writer-bin"
        (bin_dir / "writer.sh").write_text(SQL_WRITER)
        self.litestream_name = f"l-{self.site.name[:6]}-{secrets.token_hex(3)}"
        shutil.copy(self.litestream, bin_dir / self.litestream_name)
        (self.site.root / "serve-from" / "litestream.yml").write_text(
            render_litestream_config(
                db_path=str(self.db_path), replica_path=str(self.replica_dir), sync_interval=self.sync_interval,
                retention="24h",
            )
        )  # fmt: skip
        self.site.env["STOP"] = f"{self.writer_name} {self.litestream_name}"  # the writer first: Litestream ships last
        self.site.env["DB"] = str(self.db_path)
        self.site.env["STOP_GRACE_SECONDS"] = STOP_GRACE_SECONDS

    @property
    def db_path(self) -> Path:
        return self.site.root / "data" / "headscale.sqlite"

    def _serve(self, pod_gone: threading.Event) -> None:
        """A new pod's empty data directory, the restore, Litestream restarted in place, then the writer."""
        shutil.rmtree(self.db_path.parent, ignore_errors=True)
        self.db_path.parent.mkdir(parents=True)
        config = Path(self.site.env["SERVE_DIR"]) / "litestream.yml"
        started = _uptime()
        restore = subprocess.run(
            [str(self.litestream), "restore", "-config", str(config), "-if-replica-exists", str(self.db_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        self.restores.append(Restore(started, _uptime(), restore.returncode))
        if restore.returncode != 0 or pod_gone.is_set():
            return  # an init container that failed: the pod never serves
        replicate = [str(self.site.root / "writer-bin" / self.litestream_name), "replicate", "-config", str(config)]
        threading.Thread(target=self._sidecar_restarts, args=(replicate, pod_gone), daemon=True).start()
        if not pod_gone.wait(self.takeover_seconds):
            self._writer_restarts(pod_gone)

    def _sidecar_restarts(self, argv: list[str], pod_gone: threading.Event) -> None:
        """A native sidecar, restarted in place until its pod is gone."""
        log = self.site.root / "litestream.log"
        while True:
            with self._lock:
                if pod_gone.is_set():
                    return
                with log.open("a") as out:
                    process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
                self._sidecars.append(process)
            process.wait()
            pod_gone.wait(self.restart_delay)


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def committed(db: Path) -> set[tuple[str, int, str]]:
    """The (site, fencing, uptime) of every row a database holds, read without changing it."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {(site, int(fencing), at) for site, fencing, at in connection.execute("SELECT * FROM writes")}
    finally:
        connection.close()


@dataclass(frozen=True)
class Loss:
    """What a takeover lost: the acknowledged writes of the earlier holders missing from the new holder's database,
    and how long before the old holder's last acknowledged write the first of them was (0 when none is missing)."""

    lost: int
    acknowledged: int
    window: float


def loss(log: Path, db: Path, below: int) -> Loss:
    """The acknowledged writes under fencing counters below ``below`` that ``db`` does not hold."""
    present = committed(db)
    earlier = [(write, raw) for write, raw in logged(log) if write.fencing < below]
    missing = [write for write, raw in earlier if (write.site, write.fencing, raw) not in present]
    last = max((write.at for write, _ in earlier), default=0.0)
    window = last - min(write.at for write in missing) if missing else 0.0
    return Loss(len(missing), len(earlier), round(window, 3))


def wait_for_rows(db: Path, site: str, timeout: float) -> None:
    """Until ``db`` holds a row written by ``site`` (its writer has started on the restored database)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(row[0] == site for row in committed(db)):
                return
        except sqlite3.Error:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{db} holds no write of {site} within {timeout} s")
