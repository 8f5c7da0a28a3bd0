"""The restore rehearsal: the script run for real (POSIX shells, the real Litestream, real replicas) and the CronJob.

Replicas are produced by running ``litestream replicate`` against WAL-mode databases written with sqlite3: one good
replica and one whose LTX files are intact but whose database fails SQLite's full integrity check, both built once
per module (concurrently) and copied into each test's own directory in the pod's layout (`backup/<app>/replica`).
Under busybox the script sees only busybox applets on its PATH, as in the alpine Litestream image.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from headscale_ha.components.pod import checksum, selector
from headscale_ha.components.rehearsal import (
    REHEARSAL_SCRIPT_KEY,
    SCRIPT_CHECKSUM_ANNOTATION,
    SCRIPT_MOUNT,
    RestoreRehearsalArgs,
    rehearse_script,
)
from headscale_ha.components.settings import ClusterSettings, ComputeResources, ResourceAmounts
from tests.support.litestream_lab import (
    REHEARSE_SCRIPT,
    App,
    ScriptResult,
    break_index,
    busybox_bin_dir,
    insert_rows,
    litestream_bin,
    ltx_listing,
    read_rows,
    replica_row_count,
    replicating,
    restore_plan,
    run_rehearsal_script,
    tree_state,
    wait_until,
)
from tests.support.manifest_validator import validate
from tests.support.script_checks import SHELLS, SHELLS_ONLY, Shell, shell_for
from tools.harness import ProgramRun, run_program
from tools.plan import write_rendered
from tools.wiring import check_wiring
from tools.wiring.selectors import selector_matches

LITESTREAM = litestream_bin()
APP = "headscale"
EXIT = {"ok": 0, "usage": 2, "replica_dir": 50, "no_backup": 51, "stale": 52, "restore_failed": 53, "listing": 54}
EXIT |= {"unauthenticated": 55}
BACKUP_ROWS = 75
#: The pod's user: the script must work without any write permission on the replica.
POD_USER = 65532
#: Who the unprivileged runs run as: the pod's user when the tests run as root, else the current (non-root) user.
LAB_USER = POD_USER if os.geteuid() == 0 else None
SUMMARY = re.compile(
    r"restore rehearsal ok: app=(?P<app>[a-z0-9-]+) bytes=(?P<bytes>\d+) seconds=(?P<seconds>\d+(?:\.\d{3})?) "
    r"last_transaction_age_seconds=(?P<age>\d+) max_age_seconds=(?P<max_age>\d+) ltx_files=(?P<ltx_files>\d+)"
)


@dataclass(frozen=True)
class Templates:
    """The module's replicas, each in the pod's layout under its root."""

    good: Path  # BACKUP_ROWS rows
    bad_index: Path  # intact LTX files of a database that fails `PRAGMA integrity_check`


def _replica(root: Path) -> Path:
    return root / "backup" / APP / "replica"


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Templates:
    """A good replica (BACKUP_ROWS rows, two transactions) and one of a database with an index that does not match
    its table (intact LTX files, `PRAGMA quick_check` ok, `integrity_check` not), replicated side by side."""
    assert LITESTREAM is not None
    good = App(tmp_path_factory.mktemp("good"), sync_interval="100ms").create()
    bad = App(tmp_path_factory.mktemp("bad"), sync_interval="100ms").create()
    insert_rows(good.db_path, 50, pad=300)
    insert_rows(bad.db_path, 50, pad=300)
    break_index(bad.db_path)
    check = sqlite3.connect(f"file:{bad.db_path}?mode=ro", uri=True)
    try:
        assert check.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        assert check.execute("PRAGMA integrity_check").fetchall() != [("ok",)]
    finally:
        check.close()
    scratch = tmp_path_factory.mktemp("probe")
    with (
        replicating(LITESTREAM, good, good.root / "replicate.log"),
        replicating(LITESTREAM, bad, bad.root / "replicate.log"),
    ):
        assert wait_until(lambda: replica_row_count(LITESTREAM, good, scratch) == 50, timeout=15)
        insert_rows(good.db_path, BACKUP_ROWS - 50)
        assert wait_until(lambda: replica_row_count(LITESTREAM, good, scratch) == BACKUP_ROWS, timeout=15)
        assert wait_until(lambda: any((bad.replica_dir / "ltx" / "9").glob("*.ltx")), timeout=15)
    templates = {}
    for name, app in (("good", good), ("bad_index", bad)):
        root = tmp_path_factory.mktemp(f"{name}-template")
        shutil.copytree(app.replica_dir, _replica(root), copy_function=shutil.copy2)
        templates[name] = root
    assert len(read_rows(good.db_path)) == BACKUP_ROWS
    return Templates(templates["good"], templates["bad_index"])


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Shell:
    return shell_for(request.param, tmp_path_factory.getbasetemp() / "busybox-bin")


@pytest.fixture(params=SHELLS_ONLY)
def any_shell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Shell:
    return shell_for(request.param, tmp_path_factory.getbasetemp() / "busybox-bin")


@dataclass
class Lab:
    """One test's copy of a replica (pod layout) and scratch directory."""

    root: Path
    shell: Shell

    @property
    def replica(self) -> Path:
        return _replica(self.root)

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"

    def run(self, max_age_seconds: int | str = 3600, **kwargs: Any) -> ScriptResult:
        assert LITESTREAM is not None
        kwargs.setdefault("replica_dir", self.replica)
        return run_rehearsal_script(
            self.shell.argv,
            kwargs.pop("binary", LITESTREAM),
            scratch_dir=kwargs.pop("scratch_dir", self.scratch),
            max_age_seconds=max_age_seconds,
            path=self.shell.path,
            **kwargs,
        )


@pytest.fixture
def lab(tmp_path: Path, shell: Shell) -> Callable[..., Lab]:
    """``lab(template)``: this test's copy of ``template`` (None: no replica directory) and an empty scratch dir."""

    def make(template: Path | None) -> Lab:
        root = tmp_path / "pod"
        if template is not None:
            shutil.copytree(template, root, copy_function=shutil.copy2)
        root.mkdir(exist_ok=True)
        (root / "scratch").mkdir()
        return Lab(root, shell)

    return make


@pytest.fixture
def unprivileged_lab(shell: Shell) -> Iterator[Callable[..., Lab]]:
    """Like ``lab``, in a directory the pod's user can reach; runs pass ``user=LAB_USER`` (root drops to 65532, so
    permissions are enforced as in the pod). Permissions are restored and the directory removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="rehearsal-"))
    base.chmod(0o755)

    def make(template: Path) -> Lab:
        root = base / "pod"
        shutil.copytree(template, root, copy_function=shutil.copy2)
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        scratch = root / "scratch"
        scratch.mkdir()
        scratch.chmod(0o777)
        # busybox's applets where the pod's user can reach them
        shell_path = str(busybox_bin_dir(base / "busybox-bin")) if shell.path is not None else None
        return Lab(root, Shell(shell.argv, shell_path))

    try:
        yield make
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(base)


def _as(user: int | None) -> dict[str, Any]:
    return {"user": user, "group": user, "extra_groups": []} if user is not None else {}


def _read_only(tree: Path) -> None:
    """chmod a-w, as the NFS export is mounted read-only in the pod."""
    for path in [tree, *tree.rglob("*")]:
        path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)


def _writable(tree: Path) -> None:
    for path in [tree, *tree.rglob("*")]:
        path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o200)


def _assert_exit(result: ScriptResult, code: str, *phrases: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == EXIT[code], output
    for phrase in phrases:
        assert phrase in output, f"{phrase!r} missing from: {output}"
    if code != "ok":
        assert result.stdout == "", "only success prints on stdout"
        assert f"RESTORE REHEARSAL FAILED (exit {EXIT[code]})" in result.stderr


def _summary(result: ScriptResult) -> dict[str, str]:
    _assert_exit(result, "ok")
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    match = SUMMARY.fullmatch(lines[0])
    assert match is not None, lines[0]
    return match.groupdict()


def _newest_age(replica: Path) -> float:
    """Seconds since the newest LTX timestamp of ``replica`` (whole seconds, as listed)."""
    assert LITESTREAM is not None
    stamps = [str(entry["timestamp"]) for entry in ltx_listing(LITESTREAM, replica)]
    newest = max(datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")) for stamp in stamps)
    return time.time() - newest.timestamp()


def _restored_size(replica: Path, out_dir: Path) -> int:
    """Size of a direct ``litestream restore`` of ``replica`` (what the script should report)."""
    assert LITESTREAM is not None
    out = out_dir / "direct.sqlite"
    subprocess.run(
        [str(LITESTREAM), "restore", "-o", str(out), f"file://{replica}"], capture_output=True, timeout=30, check=True
    )
    assert len(read_rows(out)) == BACKUP_ROWS
    return out.stat().st_size


# --- the script, run for real -----------------------------------------------------------------------------------------


def test_a_good_replica_restores_and_is_reported_on_one_line(lab, templates: Templates, tmp_path: Path) -> None:
    pod = lab(templates.good)
    before = tree_state(pod.replica)
    result = pod.run(max_age_seconds=86400)
    age_after = _newest_age(pod.replica)
    summary = _summary(result)
    assert summary["app"] == APP
    assert int(summary["bytes"]) == _restored_size(pod.replica, tmp_path) > 0
    assert int(summary["ltx_files"]) == len(ltx_listing(LITESTREAM, pod.replica)) >= 1
    assert 0 <= float(summary["seconds"]) < result.seconds + 1
    assert int(summary["max_age"]) == 86400
    assert age_after - result.seconds - 2 <= int(summary["age"]) <= age_after + 1
    assert list(pod.scratch.iterdir()) == [], "the restored copy is removed"
    assert tree_state(pod.replica) == before, "nothing under the replica changed"
    assert "post-restore integrity check passed" in result.stderr, "full integrity check ran"


def test_a_leftover_restored_copy_does_not_block_the_next_run(lab, templates: Templates) -> None:
    """A run killed before its trap ran leaves its copy behind in a reused scratch dir; litestream would refuse it."""
    pod = lab(templates.good)
    for leftover in (f"{APP}.sqlite", f"{APP}.sqlite-wal", f"{APP}.sqlite.tmp"):
        (pod.scratch / leftover).write_text("from an earlier run")
    _summary(pod.run())
    assert list(pod.scratch.iterdir()) == []


def test_a_read_only_replica_is_enough_and_stays_untouched(unprivileged_lab, templates: Templates) -> None:
    """The pod mounts the backup read-only and runs as 65532: run as that user over a tree nobody can write."""
    pod = unprivileged_lab(templates.good)
    before = tree_state(pod.replica)
    _read_only(pod.root / "backup")
    try:
        result = pod.run(user=LAB_USER)
        # The control: the same user really cannot write there (so a write by the script would have failed it).
        probe = subprocess.run(
            ["sh", "-c", 'touch "$1/probe"', "sh", str(pod.replica)], capture_output=True, check=False, **_as(LAB_USER)
        )
        assert probe.returncode != 0, "the replica tree is writable for the run's user"
    finally:
        _writable(pod.root / "backup")
    _summary(result)
    assert list(pod.scratch.iterdir()) == []
    assert tree_state(pod.replica) == before, "nothing written, whatever the permissions (the tests may run as root)"


def test_a_stale_replica_fails_naming_its_age_and_the_threshold(lab, templates: Templates) -> None:
    pod = lab(templates.good)
    # Listed timestamps are whole seconds: 3 s after the newest, the age is at least 2, more than the threshold 1.
    assert wait_until(lambda: _newest_age(pod.replica) >= 3, timeout=10)
    before = tree_state(pod.replica)
    result = pod.run(max_age_seconds=1)
    _assert_exit(result, "stale", "is stale", "MAX_AGE_SECONDS=1 s", "backup.rehearsal.maxAge", "replication stopped")
    match = re.search(r"is (\d+) s old", result.stderr)
    assert match is not None, result.stderr
    assert int(match.group(1)) >= 2
    assert "does restore and passes the integrity check" in result.stderr
    assert list(pod.scratch.iterdir()) == []
    assert tree_state(pod.replica) == before
    _summary(pod.run(max_age_seconds=3600))  # the same replica, a threshold it meets


def _flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


CORRUPTIONS: dict[str, tuple[Callable[[Path], None], Callable[[list[Path]], Path]]] = {
    # The biggest file the restore reads (a superseded LTX file, even a bigger one, is never read by a restore).
    "flipped-bytes-in-the-biggest": (_flip_middle, lambda plan: max(plan, key=lambda p: p.stat().st_size)),
    "truncated-newest": (_truncate, lambda plan: plan[-1]),
    "garbage-newest": (_garbage, lambda plan: plan[-1]),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupt_replica_fails_the_restore(lab, templates: Templates, corruption: str) -> None:
    assert LITESTREAM is not None
    pod = lab(templates.good)
    damage, pick = CORRUPTIONS[corruption]
    plan = restore_plan(LITESTREAM, pod.replica)
    assert plan
    assert all(path.is_file() for path in plan), plan
    damage(pick(plan))
    before = tree_state(pod.replica)
    result = pod.run()
    _assert_exit(result, "restore_failed", "does NOT restore", "Error:", str(pod.replica))
    assert list(pod.scratch.iterdir()) == [], "a failed restore leaves nothing behind"
    assert tree_state(pod.replica) == before


def test_a_database_that_fails_the_full_integrity_check_fails_the_rehearsal(lab, templates: Templates) -> None:
    """Intact LTX files, a restorable database, but an index that does not match its table: only SQLite's full
    integrity check (not quick_check) finds it."""
    pod = lab(templates.bad_index)
    result = pod.run()
    _assert_exit(result, "restore_failed", "integrity check failed", "missing from index rows_pad")
    assert list(pod.scratch.iterdir()) == []


@pytest.mark.parametrize("layout", ["empty", "empty-level-dirs"])
def test_a_replica_without_ltx_files_is_no_backup(lab, layout: str) -> None:
    pod = lab(None)
    pod.replica.mkdir(parents=True)
    if layout == "empty-level-dirs":
        (pod.replica / "ltx" / "0").mkdir(parents=True)
        (pod.replica / "ltx" / "9").mkdir(parents=True)
    result = pod.run()
    _assert_exit(result, "no_backup", "There is no backup", "holds no LTX file", str(pod.replica))
    assert list(pod.scratch.iterdir()) == []


def test_a_missing_replica_directory_names_the_mount(lab) -> None:
    pod = lab(None)
    result = pod.run()
    _assert_exit(result, "replica_dir", "does not exist", f"REPLICA_DIR='{pod.replica}'", "NFS backup volume")
    assert not pod.replica.exists(), "nothing created"
    not_a_dir = pod.root / "replica-file"
    not_a_dir.write_text("a file where the directory should be")
    _assert_exit(pod.run(replica_dir=not_a_dir), "replica_dir", "is not a directory")


def test_an_unreadable_replica_directory_or_listing_fails_distinctly(unprivileged_lab, templates: Templates) -> None:
    pod = unprivileged_lab(templates.good)
    pod.replica.chmod(0o000)
    try:
        unreadable = pod.run(user=LAB_USER)
    finally:
        pod.replica.chmod(0o755)
    _assert_exit(unreadable, "replica_dir", "cannot be read", str(pod.replica))
    level = pod.replica / "ltx" / "0"
    level.chmod(0o000)
    try:
        unlisted = pod.run(user=LAB_USER)
    finally:
        level.chmod(0o755)
    _assert_exit(unlisted, "listing", "litestream cannot list the replica", "permission denied")


FAKE_LISTINGS = {
    "not-a-list": "level  min_txid  max_txid  size  created",
    "timestamp-missing": '[\n  {\n    "level": 0,\n    "min_txid": "0000000000000001"\n  }\n]',
    "timestamp-not-rfc3339": '[\n  {\n    "min_txid": "0000000000000001",\n    "timestamp": "yesterday"\n  }\n]',
}


@pytest.mark.parametrize("listing", list(FAKE_LISTINGS))
def test_a_listing_the_script_does_not_understand_is_refused(any_shell: Shell, tmp_path: Path, listing: str) -> None:
    """Another Litestream's listing must fail loudly, not pass as 'no backup' or as a fresh one."""
    fake = tmp_path / "litestream"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{FAKE_LISTINGS[listing]}\nEOF\n")
    fake.chmod(0o755)
    (tmp_path / "replica").mkdir()
    (tmp_path / "scratch").mkdir()
    result = run_rehearsal_script(
        any_shell.argv,
        fake,
        replica_dir=tmp_path / "replica",
        scratch_dir=tmp_path / "scratch",
        max_age_seconds=60,
        path=any_shell.path,
    )
    _assert_exit(result, "listing", "pinned Litestream version")


BAD_INVOCATIONS: dict[str, tuple[dict[str, str | None], str]] = {  # overrides, a phrase of the message
    "replica-relative": ({"REPLICA_DIR": "backup/headscale/replica"}, "REPLICA_DIR must be an absolute path"),
    "replica-unset": (
        {"REPLICA_DIR": None},
        "REPLICA_DIR must be an absolute path, e.g. /backup/headscale/replica (got '')",
    ),
    "replica-root": ({"REPLICA_DIR": "/"}, "REPLICA_DIR must not be '/'"),
    "replica-url-unsafe": ({"REPLICA_DIR": "/backup/head scale#x"}, "REPLICA_DIR must be a plain absolute path"),
    "replica-dotdot": ({"REPLICA_DIR": "/backup/../etc"}, "REPLICA_DIR must be a plain absolute path"),
    "scratch-relative": (
        {"SCRATCH_DIR": "scratch"},
        "SCRATCH_DIR must be an absolute path, e.g. /scratch (got 'scratch')",
    ),
    "scratch-missing": (
        {"SCRATCH_DIR": "/nonexistent/scratch"},
        "SCRATCH_DIR '/nonexistent/scratch' is not a writable",
    ),
    "max-age-word": ({"MAX_AGE_SECONDS": "abc"}, "MAX_AGE_SECONDS must be a positive whole number of seconds"),
    "max-age-zero": ({"MAX_AGE_SECONDS": "0"}, "(got '0')"),
    "max-age-octal": ({"MAX_AGE_SECONDS": "010"}, "MAX_AGE_SECONDS must be a positive whole number"),
    "max-age-negative": ({"MAX_AGE_SECONDS": "-5"}, "MAX_AGE_SECONDS must be a positive whole number"),
    "max-age-unset": ({"MAX_AGE_SECONDS": None}, "MAX_AGE_SECONDS must be a positive whole number"),
    "max-age-huge": ({"MAX_AGE_SECONDS": "99999999999"}, "MAX_AGE_SECONDS must be at most 10 digits"),
    "app-unset": ({"APP": None}, "APP must be the application's name"),
    "app-path": ({"APP": "../headscale"}, "APP must be the application's name"),
    "no-litestream": ({"LITESTREAM_BIN": "/nonexistent/litestream"}, "LITESTREAM_BIN='/nonexistent/litestream'"),
}


@pytest.mark.parametrize("case", list(BAD_INVOCATIONS))
def test_a_bad_invocation_exits_2_naming_the_variable(any_shell: Shell, tmp_path: Path, case: str) -> None:
    overrides, phrase = BAD_INVOCATIONS[case]
    replica = tmp_path / "backup" / APP / "replica"
    replica.mkdir(parents=True)
    (tmp_path / "scratch").mkdir()
    result = run_rehearsal_script(
        any_shell.argv,
        "/bin/true",  # never reached: the invocation is refused first
        replica_dir=replica,
        scratch_dir=tmp_path / "scratch",
        max_age_seconds=60,
        path=any_shell.path,
        extra_env=overrides,
    )
    _assert_exit(result, "usage", phrase, "rehearsal CronJob's environment")
    assert list((tmp_path / "scratch").iterdir()) == []


def test_the_scratch_dir_must_not_be_inside_the_replica(any_shell: Shell, tmp_path: Path) -> None:
    replica = tmp_path / "replica"
    (replica / "scratch").mkdir(parents=True)
    result = run_rehearsal_script(
        any_shell.argv,
        "/bin/true",
        replica_dir=replica,
        scratch_dir=replica / "scratch",
        max_age_seconds=60,
        path=any_shell.path,
    )
    _assert_exit(result, "usage", "is inside REPLICA_DIR", "never writes under the replica")


@pytest.mark.real_tool("shellcheck")
def test_the_script_passes_shellcheck() -> None:
    result = subprocess.run(
        ["shellcheck", "--shell=sh", "-x", "-P", "SCRIPTDIR", "--severity=style", str(REHEARSE_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_script_documents_every_exit_code_it_uses() -> None:
    text = REHEARSE_SCRIPT.read_text()
    header = text.split("\nset -eu\n", 1)[0]
    codes = {int(value) for value in re.findall(r"^EX_[A-Z_]+=(\d+)$", text, flags=re.MULTILINE)}
    assert codes == set(EXIT.values()) - {0}
    for code in EXIT.values():
        assert re.search(rf"^#\s+{code}\s+\S", header, flags=re.MULTILINE), f"exit {code} is not documented"
    # The environment it reads is the documented one: no test-only knob (a clock override, say).
    read = set(re.findall(r"^([A-Z_]+)=\$\{\1:-", text, flags=re.MULTILINE))
    assert read == {"APP", "REPLICA_DIR", "SCRATCH_DIR", "MAX_AGE_SECONDS", "LITESTREAM_BIN", "BACKUP_KEY_FILE"} | {
        "MANIFEST_FILE",
        "MANIFEST_SCRIPT",
        "MANIFEST_MAX_AGE_SECONDS",
    }
    for name in read:
        assert re.search(rf"^#   {name}\s", header, flags=re.MULTILINE), f"{name} is not documented"
    # ... and no other variable comes from the environment: every one it uses, it assigns.
    used = set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", text))
    assigned = set(re.findall(r"(?:^|\s)([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))
    assert used - assigned == set()


# --- the CronJob, rendered under mocks --------------------------------------------------------------------------------

RESOURCES = ComputeResources(
    requests=ResourceAmounts(cpu="10m", memory="32Mi"), limits=ResourceAmounts(cpu="500m", memory="256Mi")
)


def _args(**changes: Any) -> RestoreRehearsalArgs:
    values: dict[str, Any] = {
        "app": APP,
        "namespace": "headscale",
        "image": "docker.io/litestream/litestream:0.5.17",
        "backup_claim": "headscale-backup",
        "schedule": "17 4 * * *",
        "max_age_seconds": 86400,
        "resources": RESOURCES,
        "cluster": ClusterSettings(nodes=3),
        "scratch_size": "1Gi",
    }
    return RestoreRehearsalArgs(**(values | changes))


#: A program of its own: the namespace (restricted), the backup claim and one rehearsal per application.
PROGRAM = """
    import pulumi
    import pulumi_kubernetes as k8s

    from headscale_ha.components.backup_volume import BackupVolume, BackupVolumeArgs
    from headscale_ha.components.rehearsal import RestoreRehearsal, RestoreRehearsalArgs
    from headscale_ha.components.settings import ClusterSettings, ComputeResources, Nfs, ResourceAmounts

    namespace = k8s.core.v1.Namespace(
        "ns",
        metadata={"name": "headscale", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    )
    backup = BackupVolume(
        "backup",
        BackupVolumeArgs(
            namespace="headscale", part_of="headscale-ha", nfs=Nfs(server="nfs.example.org", path="/export/headscale")
        ),
    )
    outputs = {}
    for app, cron in (("headscale", "17 4 * * *"), ("headplane", "47 4 * * *")):
        rehearsal = RestoreRehearsal(
            f"{app}-rehearsal",
            RestoreRehearsalArgs(
                app=app,
                namespace="headscale",
                image="docker.io/litestream/litestream:0.5.17",
                backup_claim=backup.claim_name,
                schedule=cron,
                max_age_seconds=172800,
                resources=ComputeResources(
                    requests=ResourceAmounts(cpu="10m", memory="32Mi"),
                    limits=ResourceAmounts(cpu="500m", memory="256Mi"),
                ),
                cluster=ClusterSettings(nodes=3, exclude_nodes=["gpu-1"]),
                scratch_size="2Gi",
            ),
        )
        outputs[app] = {
            "cronJob": rehearsal.cron_job.metadata.apply(lambda m: m.name),
            "configMap": rehearsal.config_map.metadata.apply(lambda m: m.name),
        }
    pulumi.export("rehearsals", outputs)
    pulumi.export("backupClaim", backup.claim_name)
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> ProgramRun:
    program = tmp_path_factory.mktemp("program") / "__main__.py"
    program.write_text(textwrap.dedent(PROGRAM))
    return run_program(project="vpn", stack="dev", config={}, program=program)


def _cron_job(run: ProgramRun, app: str) -> dict[str, Any]:
    (cron_job,) = [
        o
        for o in run.kubernetes_objects()
        if o["kind"] == "CronJob" and o["metadata"]["name"] == app + "-restore-rehearsal"
    ]
    return cron_job


def test_one_cronjob_and_script_per_application_as_children(rendered: ProgramRun) -> None:
    components = rendered.of_type("headscale-ha:litestream:RestoreRehearsal")
    assert sorted(c.name for c in components) == ["headplane-rehearsal", "headscale-rehearsal"]
    for component in components:
        children = sorted((r.type, r.name) for r in rendered.resources if r.parent_urn == component.urn)
        assert children == [
            ("kubernetes:batch/v1:CronJob", f"{component.name}-cronjob"),
            ("kubernetes:core/v1:ConfigMap", f"{component.name}-script"),
        ]
    assert rendered.outputs["rehearsals"] == {
        app: {"cronJob": f"{app}-restore-rehearsal", "configMap": f"{app}-restore-rehearsal"}
        for app in ("headscale", "headplane")
    }


def test_the_cronjob_rehearses_read_only_once_at_a_time_and_keeps_failures(rendered: ProgramRun) -> None:
    cron_job = _cron_job(rendered, APP)
    spec = cron_job["spec"]
    assert spec["schedule"] == "17 4 * * *"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] > 0
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (1, 3)
    skipped = {value.split("=", 1)[0] for value in cron_job["metadata"]["annotations"].values()}
    assert skipped == {"CKV_K8S_15", "CKV_K8S_43"}, "only checkov's image rules, as for every workload (tag pin)"
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    assert job["activeDeadlineSeconds"] == 900
    template = job["template"]
    assert template["metadata"]["labels"]["app.kubernetes.io/component"] == "rehearsal"
    # Never the application's selector: the rehearsal pod must not become an endpoint of the application's Service.
    assert not selector_matches({"matchLabels": selector("headscale")}, template["metadata"]["labels"])
    assert template["metadata"]["annotations"][SCRIPT_CHECKSUM_ANNOTATION] == checksum(rehearse_script())
    pod = template["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    expressions = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-1"]} in (
        expressions["nodeSelectorTerms"][0]["matchExpressions"]
    )
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["image"] == "docker.io/litestream/litestream:0.5.17"
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["APP"] == APP
    assert env["MAX_AGE_SECONDS"] == "172800"
    assert "NOW" not in env
    # The backup: read-only (mount and claim), the application's own sub-directory, the replica the env names.
    backup = mounts[f"/backup/{APP}"]
    assert backup["readOnly"] is True
    assert backup["subPath"] == APP
    claim = rendered.outputs["backupClaim"]
    assert volumes[backup["name"]]["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
    assert env["REPLICA_DIR"] == f"{backup['mountPath']}/replica"
    # The script: the ConfigMap and key the volume references, run from its mount.
    script = mounts[SCRIPT_MOUNT]
    assert script["readOnly"] is True
    config_map = volumes[script["name"]]["configMap"]
    assert config_map["defaultMode"] == 0o444
    (rendered_map,) = [
        o
        for o in rendered.kubernetes_objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == config_map["name"]
    ]
    assert rendered_map["data"] == {REHEARSAL_SCRIPT_KEY: rehearse_script()}
    assert container["command"] == ["/bin/sh", f"{script['mountPath']}/{REHEARSAL_SCRIPT_KEY}"]
    # Scratch and /tmp: emptyDirs (the root filesystem is read-only), scratch bounded by scratch_size.
    scratch = mounts[env["SCRATCH_DIR"]]
    assert volumes[scratch["name"]]["emptyDir"] == {"sizeLimit": "2Gi"}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert not any(m.get("readOnly") for m in (scratch, mounts["/tmp"]))


def test_the_rendered_objects_are_admitted_under_restricted_and_wired(
    rendered: ProgramRun, shared_dir: Path, tmp_path: Path
) -> None:
    files = [f for f in write_rendered(rendered, tmp_path / "rendered") if f.suffix == ".yaml"]
    kinds = sorted(yaml.safe_load(f.read_text())["kind"] for f in files)
    assert kinds == [
        "ConfigMap",
        "ConfigMap",
        "CronJob",
        "CronJob",
        "Namespace",
        "PersistentVolume",
        "PersistentVolumeClaim",
    ]
    result = validate(shared_dir, files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"{len(files)} passed, 0 failed"
    assert check_wiring(rendered.kubernetes_objects()) == []


def test_the_validator_would_refuse_a_privileged_rehearsal(
    rendered: ProgramRun, shared_dir: Path, tmp_path: Path
) -> None:
    """The admission check above can fail: the same CronJob with a root container is refused."""
    files = [f for f in write_rendered(rendered, tmp_path / "rendered") if f.suffix == ".yaml"]
    (path,) = [f for f in files if f.name.startswith("cronjob-") and APP + "-" in f.name]
    cron_job = yaml.safe_load(path.read_text())
    pod = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod["containers"][0]["securityContext"] = {"runAsUser": 0, "allowPrivilegeEscalation": True}
    path.write_text(yaml.safe_dump(cron_job))
    result = validate(shared_dir, files)
    assert result.returncode == 1, result.stdout


INVALID_ARGS = {
    "schedule-six-fields": ({"schedule": "0 17 4 * * *"}, "schedule '0 17 4 * * *'"),
    "schedule-empty": ({"schedule": ""}, "schedule ''"),
    "schedule-macro": ({"schedule": "@daily"}, "schedule '@daily'"),
    "max-age-zero": ({"max_age_seconds": 0}, "max_age_seconds 0"),
    "max-age-negative": ({"max_age_seconds": -60}, "max_age_seconds -60"),
    "max-age-text": ({"max_age_seconds": "86400"}, "max_age_seconds '86400'"),
    "deadline-zero": ({"deadline_seconds": 0}, "deadline_seconds 0"),
    "app-not-a-label": ({"app": "Head_scale"}, "app 'Head_scale'"),
    "app-too-long": ({"app": "a" * 40}, "app '" + "a" * 40 + "'"),
    "namespace-empty": ({"namespace": ""}, "namespace ''"),
    "scratch-not-a-quantity": ({"scratch_size": "lots"}, "scratch_size 'lots'"),
    "scratch-zero": ({"scratch_size": "0"}, "scratch_size '0'"),
    "no-claim": ({"backup_claim": ""}, "backup_claim ''"),
}


@pytest.mark.parametrize("case", list(INVALID_ARGS))
def test_invalid_args_are_refused_naming_the_field_and_value(case: str) -> None:
    changes, phrase = INVALID_ARGS[case]
    with pytest.raises(ValueError, match=re.escape(phrase)):
        _args(**changes)


def test_valid_args_are_accepted() -> None:
    args = _args(schedule="*/30 1-5 * * MON-FRI", max_age_seconds=1, deadline_seconds=60)
    assert args.schedule == "*/30 1-5 * * MON-FRI"
