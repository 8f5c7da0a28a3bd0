"""replicated_sqlite: the SQLite volume, its Litestream backup and its rehearsal, as one piece per application.

At the component seam: each test builds one replicated_sqlite (under a bare parent) from hand-written settings. The
stack-level checks (what each stack's applications rehearse, the stack file's `backup.rehearsal`) are in
tests/program/test_site_replicated_sqlite.py.
"""

from __future__ import annotations

import pulumi

from headscale_ha.components.rehearsal import cron_job_name
from headscale_ha.components.replicated_sqlite import replicated_sqlite
from headscale_ha.components.settings import BackupSettings, ClusterSettings, Nfs, RehearsalSettings
from tests.support.component_run import build_component
from tools.harness import ProgramRun


def _objects(run: ProgramRun, kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in run.kubernetes_objects() if o["kind"] == kind}


def _env(cron_job: dict) -> dict[str, str]:
    (container,) = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def _lone_volume(rehearsal: RehearsalSettings, *, app: str = "vaultwarden") -> ProgramRun:
    """replicated_sqlite alone, for one application in its own namespace, under a bare parent (no stack file)."""
    backup = BackupSettings(nfs=Nfs(server="nfs.example.org", path="/export/b"), rehearsal=rehearsal)

    def build() -> None:
        parent = pulumi.ComponentResource("test:index:App", "vault")
        replicated_sqlite(
            "vault",
            parent=parent,
            meta={"namespace": "apps", "labels": {"app.kubernetes.io/name": app}},
            backup=backup,
            storage_class=None,
            require_backup=False,
            app=app,
            size="1Gi",
            data_dir="/var/lib/vaultwarden",
            db_file="db.sqlite3",
            cluster=ClusterSettings(nodes=3),
        )

    return build_component(build)


def test_the_rehearsal_follows_the_settings_and_can_be_turned_off() -> None:
    run = _lone_volume(RehearsalSettings(schedule="5 3 * * 1", max_age="36h"))
    job = _objects(run, "CronJob")[cron_job_name("vaultwarden")]
    assert job["spec"]["schedule"] == "5 3 * * 1"
    assert _env(job)["MAX_AGE_SECONDS"] == str(36 * 3600)
    assert _env(job)["REPLICA_DIR"] == "/backup/vaultwarden/replica"
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (scratch,) = [v for v in pod["volumes"] if v["name"] == "scratch"]
    assert scratch["emptyDir"]["sizeLimit"] == "1Gi", "room for the whole database"
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["cpu"] == "2", "the restore's resources, not the sidecar's"
    off = _lone_volume(RehearsalSettings(enabled=False))
    assert _objects(off, "CronJob") == {}
    assert not [o for o in off.kubernetes_objects() if o["metadata"]["name"].endswith("-restore-rehearsal")]
