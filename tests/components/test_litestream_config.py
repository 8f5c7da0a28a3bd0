"""litestream.yml renderer: the real Litestream 0.5.17 binary must parse it and replicate with it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from headscale_ha.components.litestream_config import parse_go_duration, render_litestream_config, restore_script
from headscale_ha.components.settings import LitestreamSettings
from tests.support.litestream_lab import (
    App,
    insert_rows,
    litestream_bin,
    read_rows,
    replica_row_count,
    replicating,
    restore_to,
    wait_until,
)
from tests.support.script_checks import shipped

LITESTREAM = litestream_bin()
needs_litestream = pytest.mark.real_tool("litestream")  # skipped, naming the package, when absent

ARGS = {
    "db_path": "/var/lib/headscale/db.sqlite",
    "replica_path": "/backup/headscale/replica",
    "sync_interval": "1s",
    "retention": "72h",
}


def _litestream(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    assert LITESTREAM is not None
    return subprocess.run([str(LITESTREAM), *args], capture_output=True, text=True, timeout=timeout, check=False)


def _render_in(tmp_path: Path) -> str:
    return render_litestream_config(
        db_path=str(tmp_path / "app.sqlite"),
        replica_path=str(tmp_path / "replica"),
        sync_interval="1s",
        retention="24h",
    )


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "litestream.yml"
    path.write_text(text)
    return path


def test_render_is_deterministic_and_reflects_every_argument() -> None:
    first = render_litestream_config(**ARGS)
    assert first == render_litestream_config(**ARGS)
    for key, value in {
        "db_path": "/data/other.sqlite",
        "replica_path": "/backup/other/replica",
        "sync_interval": "5s",
        "retention": "24h",
    }.items():
        changed = render_litestream_config(**{**ARGS, key: value})
        assert changed != first
        assert value in changed


def test_render_emits_the_expected_document() -> None:
    text = render_litestream_config(**ARGS)
    assert text.splitlines()[1:] == [
        "snapshot:",
        "  retention: 72h",
        "dbs:",
        '  - path: "/var/lib/headscale/db.sqlite"',
        "    replica:",
        "      type: file",
        '      path: "/backup/headscale/replica"',
        "      sync-interval: 1s",
    ]
    assert text.startswith("#")
    assert text.endswith("\n")


@pytest.mark.parametrize(
    ("overrides", "argument"),
    [
        ({"db_path": "var/lib/db.sqlite"}, "db_path"),
        ({"db_path": ""}, "db_path"),
        ({"db_path": "/"}, "db_path"),
        ({"db_path": "/var/lib/../db.sqlite"}, "db_path"),
        ({"db_path": "/var/lib/headscale/"}, "db_path"),
        ({"db_path": "/var/$HOME/db.sqlite"}, "db_path"),
        ({"db_path": "/var/lib/db\n.sqlite"}, "db_path"),
        ({"replica_path": "backup/replica"}, "replica_path"),
        ({"replica_path": "/backup//replica"}, "replica_path"),
        ({"replica_path": "/var/lib/headscale/db.sqlite"}, "replica_path"),
        ({"replica_path": "/var/lib/headscale/db.sqlite/replica"}, "replica_path"),
        ({"sync_interval": "1d"}, "sync_interval"),
        ({"sync_interval": "5"}, "sync_interval"),
        ({"sync_interval": ""}, "sync_interval"),
        ({"sync_interval": "0s"}, "sync_interval"),
        ({"sync_interval": "-1s"}, "sync_interval"),
        ({"sync_interval": "1s "}, "sync_interval"),
        ({"retention": "forever"}, "retention"),
        ({"retention": "0"}, "retention"),
        ({"retention": "7 days"}, "retention"),
    ],
)
def test_bad_arguments_raise_value_error_naming_the_argument(overrides: dict[str, str], argument: str) -> None:
    with pytest.raises(ValueError, match=rf"^{argument}:"):
        render_litestream_config(**{**ARGS, **overrides})


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("1s", 10**9),
        ("500ms", 5 * 10**8),
        ("1h30m", 5400 * 10**9),
        ("1.5s", 15 * 10**8),
        ("0", 0),
        ("-2m", -12 * 10**10),
    ],
)
def test_parse_go_duration_follows_go_syntax(text: str, nanoseconds: int) -> None:
    assert parse_go_duration(text, argument="x") == nanoseconds


def test_restore_script_is_the_packaged_posix_script() -> None:
    script = restore_script()
    path = Path(__file__).resolve().parents[2] / "components" / "scripts" / "litestream-restore.sh"
    assert script == shipped(path)  # the file, with its shared functions (components/shell_scripts.py) inlined
    assert script.startswith("#!/bin/sh\n")
    assert "\nset -eu\n" in script


@needs_litestream
def test_binary_accepts_rendered_config_and_lists_the_database(tmp_path: Path) -> None:
    db = tmp_path / "data dir #1: odd" / "app.sqlite"
    config = _write(
        tmp_path,
        render_litestream_config(
            db_path=str(db), replica_path=str(tmp_path / "replica"), sync_interval="1s", retention="24h"
        ),
    )
    result = _litestream("databases", "-json", "-config", str(config))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"path": str(db), "replica": "file"}]


@needs_litestream
@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("retention: 24h", "retention: 0s", "snapshot.retention"),
        ("sync-interval: 1s", "sync-interval: 0s", "sync-interval"),
    ],
)
def test_binary_reads_the_emitted_keys(tmp_path: Path, old: str, new: str, field: str) -> None:
    """Zeroing a value makes 0.5.17 reject the file: proof the key sits where the binary reads it."""
    text = _render_in(tmp_path)
    assert old in text
    result = _litestream("databases", "-config", str(_write(tmp_path, text.replace(old, new))))
    assert result.returncode != 0
    assert field in result.stderr


@needs_litestream
def test_binary_ignores_per_replica_retention_which_is_why_it_is_not_emitted(tmp_path: Path) -> None:
    """0.3-style replica keys are silently dropped by 0.5.17 (a bad value is not even parsed)."""
    text = _render_in(tmp_path)
    text += "      retention: not-a-duration\n      snapshot-interval: not-a-duration\n"
    assert _litestream("databases", "-config", str(_write(tmp_path, text))).returncode == 0
    global_bad = text.replace("  retention: 24h", "  retention: not-a-duration", 1)
    assert _litestream("databases", "-config", str(_write(tmp_path, global_bad))).returncode != 0


@needs_litestream
def test_replicate_uses_the_sync_interval_and_writes_a_restorable_file_replica(tmp_path: Path) -> None:
    assert LITESTREAM is not None
    app = App(tmp_path, sync_interval="250ms").create()
    insert_rows(app.db_path, 30)
    log = tmp_path / "replicate.log"
    with replicating(LITESTREAM, app, log):
        assert wait_until(lambda: replica_row_count(LITESTREAM, app, tmp_path) == 30, timeout=15)
    assert "sync-interval=250ms" in log.read_text()
    assert any(app.replica_dir.rglob("*.ltx")), "the file replica must hold LTX files under replica_path"
    restored = tmp_path / "restored.sqlite"
    assert restore_to(LITESTREAM, app, restored).returncode == 0
    assert read_rows(restored) == read_rows(app.db_path)


@needs_litestream
@pytest.mark.parametrize(
    ("sync_interval", "retention", "accepted"),
    [
        ("1ns", "1ns", True),
        ("2562047h", "2562047h", True),
        ("0s", "24h", False),
        ("1s", "0", False),
        ("3000000h", "24h", False),
        ("1s", "3000000h", False),
    ],
)
def test_binary_and_stack_config_refuse_the_same_durations(
    tmp_path: Path, sync_interval: str, retention: str, accepted: bool
) -> None:
    """Litestream 0.5.17 refuses a sync-interval or snapshot.retention that is not greater than 0, or longer than
    Go's time.Duration holds; backup.litestream.syncInterval/retention refuse exactly those at plan time."""
    text = _render_in(tmp_path).replace("retention: 24h", f"retention: {retention}")
    text = text.replace("sync-interval: 1s", f"sync-interval: {sync_interval}")
    binary_ok = _litestream("databases", "-config", str(_write(tmp_path, text))).returncode == 0
    try:
        LitestreamSettings(sync_interval=sync_interval, retention=retention)
        plan_ok = True
    except ValueError:
        plan_ok = False
    assert (binary_ok, plan_ok) == (accepted, accepted)
