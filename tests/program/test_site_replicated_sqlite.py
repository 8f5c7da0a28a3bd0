"""The stack-level checks of replicated_sqlite: what each stack's applications rehearse, and the stack file's
`backup.rehearsal` reaching the CronJobs. The component's own behaviour is tested at its seam, in
tests/components/test_replicated_sqlite.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from headscale_ha.components.rehearsal import cron_job_name
from tools.harness import ProgramRun


def _objects(run: ProgramRun, kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in run.kubernetes_objects() if o["kind"] == kind}


def _with_backup(project: Path, **backup: object) -> Path:
    document = yaml.safe_load((project / "Pulumi.yaml").read_text())
    document["config"]["backup"]["value"].update(backup)
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return project


def _env(cron_job: dict) -> dict[str, str]:
    (container,) = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def test_each_application_rehearses_its_own_replica_on_both_sites(run_stack) -> None:
    for stack in ("hydra", "cosmos"):
        jobs = _objects(run_stack(stack), "CronJob")
        assert set(jobs) == {cron_job_name("headscale"), cron_job_name("headplane")}, stack
        for app in ("headscale", "headplane"):
            job = jobs[cron_job_name(app)]
            assert job["spec"]["schedule"] == "17 4 * * *"
            assert _env(job)["REPLICA_DIR"] == f"/backup/{app}/replica"
            assert _env(job)["MAX_AGE_SECONDS"] == str(168 * 3600)


def test_the_rehearsal_follows_the_config_and_can_be_turned_off(run_stack, project_copy) -> None:
    """`backup.rehearsal` in Pulumi.yaml reaches the stack's CronJobs, and `enabled: false` removes them."""
    project = _with_backup(project_copy(), rehearsal={"schedule": "5 3 * * 1", "maxAge": "36h"})
    run = run_stack("hydra", project_dir=project)
    job = _objects(run, "CronJob")[cron_job_name("headscale")]
    assert job["spec"]["schedule"] == "5 3 * * 1"
    assert _env(job)["MAX_AGE_SECONDS"] == str(36 * 3600)
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (scratch,) = [v for v in pod["volumes"] if v["name"] == "scratch"]
    assert scratch["emptyDir"]["sizeLimit"] == "1Gi", "room for the whole database"
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["cpu"] == "2", "the restore's resources, not the sidecar's"
    off = run_stack("hydra", project_dir=_with_backup(project_copy(), rehearsal={"enabled": False}))
    assert _objects(off, "CronJob") == {}
    assert not [o for o in off.kubernetes_objects() if o["metadata"]["name"].endswith("-restore-rehearsal")]
