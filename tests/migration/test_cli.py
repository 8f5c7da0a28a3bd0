"""``python -m migration run`` stopped mid-load: pgloader goes with it, the target stays marked unverified.

Mid-load is made deterministic: a trigger makes pgloader's COPY into ``nodes`` wait on an advisory lock this test
holds, so the signal always arrives while pgloader is inside the load (of a source of 2,000 nodes and keys). All
waits are bounded. Then the next run refuses the target until ``--force``, which loads it again from the start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from migration import PsqlConnection
from tests.migration.helpers import cli, cli_env, mark, mutate, processes_mentioning, run_args, wait_for
from tests.support import headscale_samples as sample_db
from tests.support.pg_lab import PROJECT_DIR, PgServer

NewDb = Callable[..., PsqlConnection]
VERSION = "0.29.2"
LOCK = 4242


def _advisory(pg: PsqlConnection, *, granted: bool) -> bool:
    flag = "" if granted else "NOT "
    sql = f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {LOCK} AND {flag}granted"
    return pg.scalar(sql) != "0"


@contextlib.contextmanager
def _copy_into_nodes_blocked(pg: PsqlConnection) -> Iterator[None]:
    """Until the block ends, any INSERT into nodes (pgloader's COPY) waits on an advisory lock held here."""
    pg.execute(
        "CREATE FUNCTION wait_for_test() RETURNS trigger LANGUAGE plpgsql AS"
        f" $$ BEGIN PERFORM pg_advisory_xact_lock_shared({LOCK}); RETURN NEW; END $$;"
        " CREATE TRIGGER wait_for_test BEFORE INSERT ON nodes FOR EACH ROW EXECUTE FUNCTION wait_for_test();"
    )
    holder = subprocess.Popen(
        pg.argv(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=pg.env(), text=True
    )
    assert holder.stdin is not None
    holder.stdin.write(f"SELECT pg_advisory_lock({LOCK});\n")
    holder.stdin.flush()
    try:
        wait_for(lambda: _advisory(pg, granted=True), "the test's advisory lock")
        yield
    finally:
        holder.stdin.write(f"SELECT pg_advisory_unlock({LOCK});\n")
        holder.stdin.close()
        holder.wait(timeout=30)
        others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        wait_for(lambda: pg.scalar(others) == "0", "the target's other sessions to end")
        pg.execute("DROP TRIGGER wait_for_test ON nodes; DROP FUNCTION wait_for_test();")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signal_mid_load_stops_pgloader_and_the_next_run_refuses_until_forced(
    signum: signal.Signals, tmp_path: Path, new_db: NewDb, pg_server: PgServer
) -> None:
    sqlite = sample_db.build_large(tmp_path / "hs.sqlite", VERSION, nodes=2000, keys=2000)
    pg = new_db(VERSION)
    work = tmp_path / "work"
    with _copy_into_nodes_blocked(pg):
        proc = subprocess.Popen(
            [sys.executable, "-m", "migration", *run_args(sqlite, pg), "--workdir", str(work)],
            cwd=PROJECT_DIR,
            env=cli_env(pg_server.app_password),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda: _advisory(pg, granted=False), "pgloader to wait inside the COPY into nodes", 60)
            assert processes_mentioning(str(work)), "pgloader is not running"
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=60)
            # A killed process group goes at once: allow the kernel a moment, not the load's duration.
            with contextlib.suppress(AssertionError):
                wait_for(lambda: not processes_mentioning(str(work)), "pgloader to be gone", 5)
            survivors = processes_mentioning(str(work))
        finally:  # let no pgloader outlive the test, even when the assertions below fail
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            for pid in processes_mentioning(str(work)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        assert survivors == []
        if signum == signal.SIGKILL:
            assert proc.returncode == -signal.SIGKILL
        else:
            assert proc.returncode == 128 + signum, out + err
            assert f"[load] INTERRUPTED by {signum.name}: pgloader (if it was running) is stopped" in err
            assert sorted(work.iterdir()) == []  # the private work directory (key material) is gone
        found = mark(pg)
        assert found.startswith("headscale-migration: unverified since ")
        if signum != signal.SIGKILL:
            assert f"interrupted by {signum.name} during load" in found

    refused = cli(*run_args(sqlite, pg), password=pg_server.app_password)
    assert refused.returncode == 1
    assert "[target] FAILED" in refused.stderr
    assert "an earlier migration run stopped before verification passed (headscale-migration: unverified" in (
        refused.stderr
    )
    assert "rerun with --force" in refused.stderr

    forced = cli(*run_args(sqlite, pg, VERSION, "--force"), password=pg_server.app_password)
    assert forced.returncode == 0, forced.stderr
    assert "[reset] ok" in forced.stdout
    assert pg.scalar("SELECT count(*) FROM nodes") == "2000"
    assert mark(pg).startswith("headscale-migration: verified since ")


def test_a_failed_load_leaves_the_target_marked_and_a_refused_target_unmarked(
    tmp_path: Path, new_db: NewDb, pg_server: PgServer
) -> None:
    sqlite = sample_db.build(tmp_path / "hs.sqlite", VERSION)
    pg = new_db(VERSION)
    failed = cli(*run_args(sqlite, pg), "--pgloader", "/nonexistent/pgloader", password=pg_server.app_password)
    assert failed.returncode == 1
    assert "[load] FAILED: pgloader not found" in failed.stderr
    assert mark(pg).startswith("headscale-migration: unverified since ")
    assert mark(pg).endswith("load failed; rerun with --force once fixed")
    refused = cli(*run_args(sqlite, pg), password=pg_server.app_password)
    assert "an earlier migration run stopped before verification passed" in refused.stderr  # though empty

    untouched = new_db(VERSION)
    bad = mutate(sample_db.build(tmp_path / "bad.sqlite", VERSION), "UPDATE pre_auth_keys SET used = 2 WHERE id = 1")
    refused_early = cli(*run_args(bad, untouched), password=pg_server.app_password)
    assert "[preflight] FAILED" in refused_early.stderr
    assert mark(untouched) == ""
