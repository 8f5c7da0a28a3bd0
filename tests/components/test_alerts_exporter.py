"""The state exporter (components/scripts/state-exporter.sh), run ``once`` under sh, dash and busybox sh (busybox:
only its applets on PATH, as in the Litestream image) against real replicas made by ``litestream replicate``: values
checked against ``litestream ltx``, output checked by ``promtool check metrics``, nothing written under BACKUP_ROOT,
bad environments refused (exit 2); and shellcheck.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from headscale_ha.components.alerts import state_exporter_script
from tests.support.litestream_lab import (
    STATE_EXPORTER_SCRIPT,
    App,
    insert_rows,
    litestream_bin,
    ltx_listing,
    newest_txid,
    replica_row_count,
    replicating,
    run_state_exporter,
    state_exporter_env,
    state_exporter_running,
    tree_state,
    wait_until,
)
from tests.support.prometheus_lab import check_metrics, parse_samples, sample
from tests.support.script_checks import SHELLS, SHELLS_ONLY, SYNTAX_CHECKERS, Shell, shell_for

LITESTREAM = litestream_bin()


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Shell:
    return shell_for(request.param, tmp_path_factory.getbasetemp() / "busybox-bin")


@pytest.fixture(params=SHELLS_ONLY)
def any_shell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Shell:
    return shell_for(request.param, tmp_path_factory.getbasetemp() / "busybox-bin")


@pytest.fixture(scope="module")
def replica_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real replica of two transactions (several LTX files), made by ``litestream replicate``."""
    assert LITESTREAM is not None
    app = App(tmp_path_factory.mktemp("replica"), sync_interval="100ms").create()
    insert_rows(app.db_path, 20)
    scratch = tmp_path_factory.mktemp("probe")
    with replicating(LITESTREAM, app, app.root / "replicate.log"):
        assert wait_until(lambda: replica_row_count(LITESTREAM, app, scratch) == 20, timeout=15)
        insert_rows(app.db_path, 10)
        assert wait_until(lambda: replica_row_count(LITESTREAM, app, scratch) == 30, timeout=15)
    return app.replica_dir


KEYS = (
    "# HELP headscale_ha_key_expiry_timestamp_seconds When a key the provider minted expires (Unix seconds).\n"
    "# TYPE headscale_ha_key_expiry_timestamp_seconds gauge\n"
    'headscale_ha_key_expiry_timestamp_seconds{kind="api",name="headplane"} 1.8e+09\n'
    'headscale_ha_key_expiry_timestamp_seconds{kind="preauth",name="router-0",user="tailnet-routers"} 1.7e+09\n'
)


@dataclass
class ExporterLab:
    """A backup root in the pod's layout, the pod's output directory, and how to run the exporter there."""

    root: Path
    shell: Shell

    @property
    def backup(self) -> Path:
        return self.root / "backup"

    @property
    def out_file(self) -> Path:
        return self.root / "www" / "metrics.prom"

    def env(self, apps: str, **kwargs: Any) -> dict[str, str]:
        assert LITESTREAM is not None
        return state_exporter_env(
            kwargs.pop("binary", LITESTREAM),
            apps=apps,
            backup_root=self.backup,
            out_file=self.out_file,
            path=self.shell.path,
            **kwargs,
        )


@pytest.fixture
def exporter_lab(tmp_path: Path, shell: Shell) -> ExporterLab:
    (tmp_path / "backup").mkdir()
    (tmp_path / "www").mkdir()
    return ExporterLab(tmp_path, shell)


def _epoch(stamp: str) -> int:
    return int(datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


@pytest.mark.parametrize("keys_text", [KEYS, KEYS.rstrip("\n")], ids=["keys", "keys-without-final-newline"])
def test_exporter_reports_each_replica(
    exporter_lab: ExporterLab, replica_template: Path, keys_text: str, tmp_path: Path
) -> None:
    assert LITESTREAM is not None
    lab = exporter_lab
    shutil.copytree(replica_template, lab.backup / "headscale" / "replica", copy_function=shutil.copy2)
    (lab.backup / "broken").mkdir()
    (lab.backup / "broken" / "replica").write_text("a regular file where the replica directory belongs\n")
    (lab.backup / "fresh" / "replica").mkdir(parents=True)
    keys_file = tmp_path / "keys" / "expiries.prom"
    keys_file.parent.mkdir()
    keys_file.write_text(keys_text)
    before = tree_state(lab.backup)
    started = int(time.time())
    result = run_state_exporter(
        lab.shell.argv, lab.env("headscale headplane broken fresh", keys_file=keys_file), "once"
    )
    finished = int(time.time())
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert tree_state(lab.backup) == before, "the exporter wrote under BACKUP_ROOT"
    assert sorted(path.name for path in lab.out_file.parent.iterdir()) == ["metrics.prom"], "a temporary file remains"
    text = lab.out_file.read_text()
    check = check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert text.endswith(keys_text if keys_text.endswith("\n") else keys_text + "\n"), "KEYS_FILE not verbatim"
    samples = parse_samples(text)
    listing = ltx_listing(LITESTREAM, lab.backup / "headscale" / "replica")
    assert listing
    expected = {
        "headscale": (1, newest_txid(LITESTREAM, lab.backup / "headscale" / "replica"), len(listing)),
        "headplane": (0, 0, 0),  # no directory
        "broken": (0, 0, 0),  # a file
        "fresh": (1, 0, 0),  # an empty replica: readable, nothing in it
    }
    for app, (up, txid, files) in expected.items():
        assert sample(samples, "headscale_ha_replica_up", app=app) == up, app
        assert sample(samples, "headscale_ha_replica_txid", app=app) == txid, app
        assert sample(samples, "headscale_ha_replica_ltx_files", app=app) == files, app
    assert expected["headscale"][1] == max(int(str(entry["max_txid"]), 16) for entry in listing) > 1
    newest = max(_epoch(str(entry["timestamp"])) for entry in listing)
    assert sample(samples, "headscale_ha_replica_newest_timestamp_seconds", app="headscale") == newest
    assert sample(samples, "headscale_ha_replica_newest_timestamp_seconds", app="fresh") == 0
    # `date +%s` reads the kernel's coarse clock (time(2)), which may still show the previous second for up to a
    # tick after Python's precise time.time() has passed it: one second of slack below, none above.
    assert started - 1 <= sample(samples, "headscale_ha_exporter_last_run_timestamp_seconds") <= finished
    assert "headplane: replica NOT readable" in result.stderr
    assert "broken: replica NOT readable" in result.stderr
    assert "headscale: replica readable" in result.stderr


def test_exporter_tolerates_a_missing_keys_file(exporter_lab: ExporterLab, replica_template: Path) -> None:
    lab = exporter_lab
    shutil.copytree(replica_template, lab.backup / "headplane" / "replica", copy_function=shutil.copy2)
    missing = lab.root / "keys" / "expiries.prom"
    result = run_state_exporter(lab.shell.argv, lab.env("headplane", keys_file=missing), "once")
    assert result.returncode == 0, result.stderr
    text = lab.out_file.read_text()
    assert f"# KEYS_FILE {missing} is missing or unreadable" in text
    check = check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert parse_samples(text)[("headscale_ha_replica_up", frozenset({("app", "headplane")}))] == 1
    assert "KEYS_FILE" in result.stderr


def test_exporter_with_no_application_exports_the_round_and_the_keys(exporter_lab: ExporterLab) -> None:
    keys_file = exporter_lab.root / "keys.prom"
    keys_file.write_text(KEYS)
    result = run_state_exporter(exporter_lab.shell.argv, exporter_lab.env("", keys_file=keys_file), "once")
    assert result.returncode == 0, result.stderr
    text = exporter_lab.out_file.read_text()
    assert check_metrics(text).returncode == 0
    assert {name for name, _ in parse_samples(text)} == {
        "headscale_ha_exporter_last_run_timestamp_seconds",
        "headscale_ha_key_expiry_timestamp_seconds",
    }


#: Line 3 of a manifest (the signer writes `signed_at <epoch>`) and what the exporter makes of it.
SIGNED_LINES = {
    "signed": ("signed_at 1700000000", 1700000000),
    "zero": ("signed_at 0", 0),
    "zeros": ("signed_at 001700000000", 1700000000),
    "letters": ("signed_at 17000abc00", 0),
    "empty": ("", 0),
    "extra": ("signed_at 1700000000 extra", 0),
    "nospace": ("signed_at1700000000", 0),
    "twospaces": ("signed_at  1700000000", 0),
    "negative": ("signed_at -1700000000", 0),
    "crlf": ("signed_at 1700000000\r", 0),
    "toolong": ("signed_at 1234567890123456", 0),
    "label": ('signed_at 1 } injected{app="x"} 2', 0),
}


def _manifest(app: str, line3: str, *, first: str = "headscale-ha-replica-manifest 1") -> str:
    return f"{first}\napp {app}\n{line3}\ntxid 0000000000000002\nfiles 0\nhmac {'0' * 64}\n"


def test_exporter_exports_the_manifests_signed_at(
    exporter_lab: ExporterLab, replica_template: Path, tmp_path: Path
) -> None:
    """headscale_ha_replica_signed_timestamp_seconds: line 3's digits, or 0 (absent, a link, not a regular file,
    malformed, beyond the bounded read); one application's bad manifest leaves every other's metrics alone."""
    assert LITESTREAM is not None
    lab = exporter_lab
    for app, (line3, _) in SIGNED_LINES.items():
        (lab.backup / app).mkdir()
        (lab.backup / app / "replica.manifest").write_bytes(_manifest(app, line3).encode())
    for app in ("signed", "letters", "absent"):  # real replicas beside a good, a bad and no manifest
        shutil.copytree(replica_template, lab.backup / app / "replica", copy_function=shutil.copy2)
    outside = tmp_path / "outside.manifest"  # a valid manifest outside the export: the link must not reach it
    outside.write_text(_manifest("symlinked", "signed_at 1234567890"))
    (lab.backup / "symlinked").mkdir()
    (lab.backup / "symlinked" / "replica.manifest").symlink_to(outside)
    (lab.backup / "dangling").mkdir()
    (lab.backup / "dangling" / "replica.manifest").symlink_to(tmp_path / "nonexistent")
    (lab.backup / "directory" / "replica.manifest").mkdir(parents=True)
    (lab.backup / "huge").mkdir()  # a valid line 3 beyond the first 1024 bytes: never read
    (lab.backup / "huge" / "replica.manifest").write_text(_manifest("huge", "signed_at 1700000000", first="x" * 4096))
    expected = {app: value for app, (_, value) in SIGNED_LINES.items()}
    expected |= {"absent": 0, "symlinked": 0, "dangling": 0, "directory": 0, "huge": 0}
    before = tree_state(lab.backup)
    result = run_state_exporter(lab.shell.argv, lab.env(" ".join(expected)), "once")
    assert result.returncode == 0, result.stderr
    assert tree_state(lab.backup) == before, "the exporter wrote under BACKUP_ROOT"
    text = lab.out_file.read_text()
    check = check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "injected" not in text
    assert "1234567890" not in text
    samples = parse_samples(text)
    for app, value in expected.items():
        assert sample(samples, "headscale_ha_replica_signed_timestamp_seconds", app=app) == value, app
    assert {labels for name, labels in samples if name == "headscale_ha_replica_signed_timestamp_seconds"} == {
        frozenset({("app", app)}) for app in expected
    }
    txid = newest_txid(LITESTREAM, lab.backup / "signed" / "replica")
    for app in ("signed", "letters", "absent"):  # the replica's metrics do not depend on its manifest
        assert sample(samples, "headscale_ha_replica_up", app=app) == 1, app
        assert sample(samples, "headscale_ha_replica_txid", app=app) == txid > 1, app
    assert sample(samples, "headscale_ha_replica_up", app="zeros") == 0  # no replica directory
    assert "signed: manifest readable (signed_at 1700000000" in result.stderr
    assert "symlinked: manifest signed_at NOT readable, exported as 0" in result.stderr
    assert "is a symbolic link (not followed)" in result.stderr
    assert "absent: manifest signed_at NOT readable, exported as 0: there is no manifest" in result.stderr
    assert "directory: manifest signed_at NOT readable, exported as 0" in result.stderr
    assert "not a regular file" in result.stderr
    assert "letters: manifest signed_at NOT readable, exported as 0: line 3" in result.stderr


def _listing_manifest(app: str, files: list[tuple[int, str]]) -> str:
    lines = "".join(f"f {level} {name} 1 {'0' * 64}\n" for level, name in files)
    return f"headscale-ha-replica-manifest 1\napp {app}\nsigned_at 1700000000\ntxid 0\nfiles {len(files)}\n{lines}"


def test_exporter_counts_the_files_the_manifest_does_not_list(
    exporter_lab: ExporterLab, replica_template: Path
) -> None:
    """headscale_ha_replica_unsigned_files: the entries at LTX names the manifest does not list and that end after
    the newest snapshot it lists (a planted file, and a FIFO too, unread); none for an older file, a name that is no
    LTX name, or an application whose manifest is absent (unsigned backups export no count)."""
    lab = exporter_lab
    for app in ("listed", "planted", "nomanifest"):
        shutil.copytree(replica_template, lab.backup / app / "replica", copy_function=shutil.copy2)
    files = sorted((int(p.parent.name), p.name) for p in replica_template.glob("ltx/[0-9]/*.ltx"))
    snapshot = max((name for level, name in files if level == 9), default=None)
    assert snapshot is not None, files
    top = int(snapshot[17:33], 16)
    newest = max(int(name[17:33], 16) for _, name in files)
    for app in ("listed", "planted"):
        (lab.backup / app / "replica.manifest").write_text(_listing_manifest(app, files))
    ltx = lab.backup / "planted" / "replica" / "ltx"
    (ltx / "0" / f"{newest + 1:016x}-{newest + 1:016x}.ltx").write_bytes(b"planted")
    (ltx / "8").mkdir()
    (ltx / "8" / f"{1:016x}-{newest + 5:016x}.ltx").write_bytes(b"crafted")
    os.mkfifo(ltx / "0" / f"{newest + 9:016x}-{newest + 9:016x}.ltx")
    (ltx / "8" / f"{1:016x}-{top:016x}.ltx").write_bytes(b"ends at the snapshot: never restored")
    (ltx / "0" / "notes.txt").write_text("not an LTX name")
    result = run_state_exporter(lab.shell.argv, lab.env("listed planted nomanifest"), "once", timeout=60)
    assert result.returncode == 0, result.stderr
    samples = parse_samples(lab.out_file.read_text())
    assert sample(samples, "headscale_ha_replica_unsigned_files", app="listed") == 0
    assert sample(samples, "headscale_ha_replica_unsigned_files", app="planted") == 3
    assert ("headscale_ha_replica_unsigned_files", frozenset({("app", "nomanifest")})) not in samples


BAD_ENV: list[tuple[str, dict[str, str | None], tuple[str, ...], str]] = [
    ("no-APPS", {"APPS": None}, ("once",), "APPS"),
    ("APPS-uppercase", {"APPS": "Headscale"}, ("once",), "APPS"),
    ("APPS-twice", {"APPS": "headscale headscale"}, ("once",), "APPS"),
    ("APPS-leading-dash", {"APPS": "-x"}, ("once",), "APPS"),
    ("BACKUP_ROOT-relative", {"BACKUP_ROOT": "backup"}, ("once",), "BACKUP_ROOT"),
    ("BACKUP_ROOT-slash", {"BACKUP_ROOT": "/"}, ("once",), "BACKUP_ROOT"),
    ("BACKUP_ROOT-dotdot", {"BACKUP_ROOT": "/backup/../etc"}, ("once",), "BACKUP_ROOT"),
    ("BACKUP_ROOT-space", {"BACKUP_ROOT": "/back up"}, ("once",), "BACKUP_ROOT"),
    ("no-OUT_FILE", {"OUT_FILE": None}, ("once",), "OUT_FILE"),
    ("OUT_FILE-relative", {"OUT_FILE": "metrics.prom"}, ("once",), "OUT_FILE"),
    ("OUT_FILE-directory", {"OUT_FILE": "/tmp/"}, ("once",), "OUT_FILE"),
    ("OUT_FILE-no-directory", {"OUT_FILE": "/nonexistent-dir/metrics.prom"}, ("once",), "OUT_FILE"),
    ("KEYS_FILE-relative", {"KEYS_FILE": "keys.prom"}, ("once",), "KEYS_FILE"),
    ("INTERVAL-zero", {"INTERVAL_SECONDS": "0"}, ("once",), "INTERVAL_SECONDS"),
    ("INTERVAL-word", {"INTERVAL_SECONDS": "thirty"}, ("once",), "INTERVAL_SECONDS"),
    ("INTERVAL-leading-zero", {"INTERVAL_SECONDS": "030"}, ("once",), "INTERVAL_SECONDS"),
    ("INTERVAL-huge", {"INTERVAL_SECONDS": "10000000"}, ("once",), "INTERVAL_SECONDS"),
    ("no-litestream", {"LITESTREAM_BIN": "/nonexistent/litestream"}, ("once",), "LITESTREAM_BIN"),
    ("unknown-argument", {}, ("twice",), "argument"),
    ("two-arguments", {}, ("once", "once"), "argument"),
]


@pytest.mark.parametrize(("overrides", "args", "named"), [case[1:] for case in BAD_ENV], ids=[c[0] for c in BAD_ENV])
def test_exporter_refuses_a_bad_environment(
    any_shell: Shell, tmp_path: Path, overrides: dict[str, str | None], args: tuple[str, ...], named: str
) -> None:
    (tmp_path / "backup").mkdir()
    (tmp_path / "www").mkdir()
    lab = ExporterLab(tmp_path, any_shell)
    true = "true" if any_shell.path is not None else shutil.which("true")
    assert true is not None
    env = lab.env("headscale", binary=true, extra_env=overrides)
    result = run_state_exporter(any_shell.argv, env, *args)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "bad invocation (exit 2)" in result.stderr
    assert not lab.out_file.exists()


def test_exporter_refuses_an_out_file_under_backup_root(any_shell: Shell, tmp_path: Path) -> None:
    (tmp_path / "backup").mkdir()
    lab = ExporterLab(tmp_path, any_shell)
    env = lab.env("headscale", binary="true", extra_env={"OUT_FILE": str(tmp_path / "backup" / "metrics.prom")})
    result = run_state_exporter(any_shell.argv, env, "once")
    assert result.returncode == 2, result.stderr
    assert "OUT_FILE" in result.stderr
    assert "under BACKUP_ROOT" in result.stderr


def test_exporter_loop_stops_at_once_on_sigterm(exporter_lab: ExporterLab, replica_template: Path) -> None:
    """The loop pauses in a background sleep, so SIGTERM (a pod stop) ends it at once, not after the interval."""
    lab = exporter_lab
    shutil.copytree(replica_template, lab.backup / "headscale" / "replica", copy_function=shutil.copy2)
    log = lab.root / "exporter.log"
    with state_exporter_running(lab.shell.argv, lab.env("headscale", interval=30), log) as proc:
        assert wait_until(lab.out_file.exists, timeout=10), log.read_text()
        time.sleep(0.2)  # into the pause
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 143
        assert time.monotonic() - stopped < 3
    assert sorted(path.name for path in lab.out_file.parent.iterdir()) == ["metrics.prom"]
    assert "watching the replicas of 'headscale'" in log.read_text()


@pytest.mark.parametrize("checker", SYNTAX_CHECKERS)
def test_exporter_script_passes_the_shell_checks(checker: list[str]) -> None:
    result = subprocess.run(
        [*checker, str(STATE_EXPORTER_SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_exporter_script_is_packaged() -> None:
    assert state_exporter_script() == STATE_EXPORTER_SCRIPT.read_text()
