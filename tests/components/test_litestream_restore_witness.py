"""The restore-before-serve script's served witness, run for real: a site that has served never starts empty by
accident.

The markers live on the two volumes they protect; the witness (a ConfigMap Pulumi writes after the first ready
rollout, mounted optional) lives outside both. Losing both volumes of a site that has served is refused (exit 24)
unless ALLOW_EMPTY_START holds today's UTC date. The rest of the script's cases: test_litestream_restore.py.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.litestream_lab import App, insert_rows, read_rows
from tests.support.restore_script import (
    SHELLS,
    Identity,
    app_maker,
    assert_exit,
    build_backup_template,
    local_state,
    new_identity,
    record_fingerprint,
    run_script,
)


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> list[str]:
    return request.param


@pytest.fixture(scope="module")
def backup_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, float]]]:
    """A real backup of BACKUP_ROWS rows written in two transactions while ``litestream replicate`` ran."""
    return build_backup_template(tmp_path_factory)


@pytest.fixture
def new_app(tmp_path: Path) -> Callable[..., App]:
    """``new_app(with_backup=True)``: this test's copy of the template (local DB and replica), config re-rendered."""
    return app_maker(tmp_path)


@pytest.fixture
def identity(tmp_path: Path) -> Identity:
    return new_identity(tmp_path / "noise_private.key")


def _today() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()


def _same_day(before: str) -> None:
    if _today() != before:
        pytest.skip("the UTC date changed during the run")


def _assert_nothing_written(app: App) -> None:
    assert not app.db_path.exists()
    assert not (app.data_dir / ".backup-identity.sha256").exists()
    assert not (app.data_dir / ".backup-initialised").exists()
    assert not (app.backup_dir / "identity.sha256").exists()
    assert not (app.backup_dir / ".backup-initialised").exists()


@pytest.mark.parametrize("backup_dir", ["missing", "empty"])
def test_g_served_site_that_lost_both_volumes_is_refused(shell, new_app, identity, backup_dir) -> None:
    app = new_app()
    if backup_dir == "empty":
        app.backup_dir.mkdir()  # an empty export mounted in place of the real one looks the same
    today = _today()
    result = run_script(shell, app, identity_file=identity.path, served=True)
    _same_day(today)
    assert_exit(
        result,
        "served_no_backup",
        "REFUSING TO START (exit 24)",
        "has served before",
        str(app.served_file),
        "Not starting empty",
        f"headscale.allowEmptyStart to {today}",
        key=identity,
    )
    _assert_nothing_written(app)
    assert app.backup_dir.exists() is (backup_dir == "empty")


def test_g_served_site_without_identity_is_refused_too(shell, new_app) -> None:
    """Headplane's restore (no identity contract) has its own witness and the same refusal."""
    app = new_app()
    result = run_script(shell, app, served=True)
    assert_exit(result, "served_no_backup", "has served before", "allowEmptyStart")
    _assert_nothing_written(app)


def test_g_override_of_today_starts_empty_and_says_so_loudly(shell, new_app, identity) -> None:
    app = new_app()
    today = _today()
    result = run_script(shell, app, identity_file=identity.path, served=True, allow_empty_start=today)
    _same_day(today)
    assert_exit(
        result,
        "ok",
        f"!!! OVERRIDE: ALLOW_EMPTY_START={today}",
        "!!! STARTING EMPTY",
        "!!! Remove headscale.allowEmptyStart",
        "!!! STARTED EMPTY",
        key=identity,
    )
    assert "first start: no local database" not in result.stderr, "not reported as an ordinary first start"
    assert not app.db_path.exists(), "the application creates its database, the script does not"
    # Recorded like any first start, so the next restart restores or serves instead of asking again.
    assert (app.backup_dir / "identity.sha256").read_text() == identity.fingerprint + "\n"
    assert (app.data_dir / ".backup-identity.sha256").read_text() == identity.fingerprint + "\n"
    # The application then writes its database; a restart with the override still set serves it and says so.
    insert_rows(app.db_path, 3)
    again = run_script(shell, app, identity_file=identity.path, served=True, allow_empty_start=today)
    assert_exit(again, "ok", "serving existing database", "ALLOW_EMPTY_START", "Remove the override", key=identity)
    assert "STARTING EMPTY" not in again.stderr


@pytest.mark.parametrize("stale", ["2000-01-01", "2999-12-31"])
def test_g_an_override_left_set_on_another_day_has_no_effect(shell, new_app, identity, stale) -> None:
    app = new_app()
    result = run_script(shell, app, identity_file=identity.path, served=True, allow_empty_start=stale)
    assert_exit(result, "served_no_backup", f"ALLOW_EMPTY_START={stale} is not today's date", "no effect", key=identity)
    _assert_nothing_written(app)


def test_g_not_served_yet_first_starts_as_before(shell, new_app, identity) -> None:
    """The witness ConfigMap is absent before the first ready rollout: the kubelet mounts an empty directory."""
    app = new_app()
    result = run_script(shell, app, identity_file=identity.path, served=False)
    assert_exit(result, "ok", "first start: no local database and no backup", key=identity)
    assert "OVERRIDE" not in result.stderr
    assert (app.backup_dir / "identity.sha256").read_text() == identity.fingerprint + "\n"


def test_g_served_site_with_a_backup_restores_as_before(shell, new_app, identity, backup_template) -> None:
    template, rows = backup_template
    app = new_app(with_backup=True, template=template)
    record_fingerprint(app, identity.fingerprint)
    result = run_script(shell, app, identity_file=identity.path, served=True)
    assert_exit(result, "ok", "restored", key=identity)
    assert read_rows(app.db_path) == rows


def test_g_served_site_with_its_database_serves_it_as_before(shell, new_app, identity, backup_template) -> None:
    app = new_app(with_backup=True, with_local_db=True, template=backup_template[0])
    record_fingerprint(app, identity.fingerprint)
    before = local_state(app)
    result = run_script(shell, app, identity_file=identity.path, served=True)
    assert_exit(result, "ok", "serving existing database", key=identity)
    assert local_state(app) == before


def test_g_a_standby_keeps_its_own_refusal(shell, new_app, identity) -> None:
    app = new_app()
    result = run_script(shell, app, identity_file=identity.path, require_backup=True, served=True)
    assert_exit(result, "backup_required", "REQUIRE_BACKUP", key=identity)


def test_g_markers_still_decide_before_the_witness(shell, new_app, identity) -> None:
    """A local marker with the backup directory gone keeps its own refusal (20) and remedy."""
    app = new_app()
    (app.data_dir / ".backup-identity.sha256").write_text(identity.fingerprint + "\n")
    result = run_script(shell, app, identity_file=identity.path, served=True, allow_empty_start=_today())
    assert_exit(result, "backup_dir_unavailable", "does not exist", key=identity)


@pytest.mark.parametrize(
    ("setup", "phrase"),
    [
        ("garbage", "holds neither 'true' nor 'standby'"),
        ("no-mount", "Check the witness volume mount"),
        ("relative", "SERVED_FILE must be an absolute path"),
        ("bad-date", "ALLOW_EMPTY_START must be empty or a UTC date"),
    ],
)
def test_g_a_broken_witness_or_override_is_a_usage_error(shell, new_app, backup_template, setup, phrase) -> None:
    """Fail closed even when a database is there: a broken witness must be fixed, never read as "not served"."""
    app = new_app(with_backup=True, with_local_db=True, template=backup_template[0])
    env: dict[str, str] = {}
    kwargs: dict[str, Any] = {}
    if setup == "garbage":
        app.witness(True, value="privkey:" + "a" * 64)
        env["SERVED_FILE"] = str(app.served_file)
    elif setup == "no-mount":
        env["SERVED_FILE"] = str(app.root / "not-mounted" / "served")
    elif setup == "relative":
        env["SERVED_FILE"] = "served-witness/served"
    else:
        kwargs["allow_empty_start"] = "tomorrow"
    result = run_script(shell, app, extra_env=env, **kwargs)
    assert_exit(result, "usage", phrase)
    assert "privkey" not in result.stderr, "the content of a malformed witness is never shown"
