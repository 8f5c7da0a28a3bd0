"""The database stages of docs/migration.md on the real engine, each `up` judged against the engine model's plan.

hydra is deployed by the real CLI into the lab (no API access), then moved to `migrating` and back, in the order
of tests/program/test_lifecycle.py's migration scenarios: entering `migrating` with a Job that fails, then again
(the CloudNativePG Cluster awaited Ready, the failed Job replaced and awaited Complete), a Litestream bump while
migrating (a new Job), the same `up` again, the rollback to `sqlite` (the Cluster kept), and entering `migrating`
again, which meets the kept Cluster as the plugin's release does and is adopted as the runbook says.
CloudNativePG's operator is a stand-in (tests/models/cnpg/standin_cnpg.py): the Ready condition and the objects it
generates, after a delay the engine must wait out. A Job's pod fails when the lab's kwok is set to fail them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.models.cnpg.standin_cnpg import StandinCnpg
from tests.models.engine.lifecycle import Lab as ModelLab
from tests.models.engine.lifecycle import migration_job
from tests.support.kube_lab import KubeLab
from tests.support.lab_sites import deploy
from tests.support.lifecycle_stages import MIGRATION_IMAGE, STORE, migrating
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, Run, cli_for, lab_kubernetes_release

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS)

UPSERT = "PULUMI_K8S_UPSERT_EXISTING_OBJECTS"
LITESTREAM_BUMP = {"headscale-ha:backup.litestream.image": "docker.io/litestream/litestream:0.5.18"}
#: Seconds the stand-in operator takes to report a Cluster Ready: the engine must wait them out before the Job.
READY_AFTER = 4.0
Steps = set[tuple[str, str]]


def _enter(cli: PulumiCli) -> None:
    for path, value in (
        ("database.stage", "migrating"),
        ("database.postgres.objectStore.destinationPath", STORE["destinationPath"]),
        ("database.postgres.objectStore.endpointUrl", STORE["endpointUrl"]),
        ("database.migration.image", MIGRATION_IMAGE),
    ):
        cli.run("config", "set", "-s", "hydra", "--path", path, value).check()
    for key, value in (("objectStoreAccessKeyId", "AKIA-offline"), ("objectStoreSecretAccessKey", "offline-secret")):
        cli.run("config", "set", "-s", "hydra", "--secret", key, value).check()


def _bump(cli: PulumiCli) -> None:
    cli.set_path("hydra", "backup.litestream.image", LITESTREAM_BUMP["headscale-ha:backup.litestream.image"])


def _stage(stage: str) -> Callable[[PulumiCli], None]:
    return lambda cli: cli.run("config", "set", "-s", "hydra", "--path", "database.stage", stage).check() and None


@dataclass(frozen=True)
class Move:
    """One `up`: its change to the real stack's config, the model's whole override set, the environment."""

    name: str
    real: Callable[[PulumiCli], None]
    model: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    #: The migration Job's pod fails (kwok fails it; the model's job runner reports a failure).
    job_fails: bool = False


MOVES = [
    Move("enter migrating, the Job fails", _enter, migrating(), job_fails=True),
    Move("enter migrating", lambda _cli: None, migrating()),
    Move("litestream bump while migrating", _bump, {**migrating(), **LITESTREAM_BUMP}),
    Move("the same up again", lambda _cli: None, {**migrating(), **LITESTREAM_BUMP}),
    Move("roll back to sqlite", _stage("sqlite"), {**migrating("sqlite"), **LITESTREAM_BUMP}),
    Move("enter migrating again", _stage("migrating"), {**migrating(), **LITESTREAM_BUMP}),
    Move("adopt the kept cluster", lambda _cli: None, {**migrating(), **LITESTREAM_BUMP}, {UPSERT: "true"}),
    Move("after the adoption", lambda _cli: None, {**migrating(), **LITESTREAM_BUMP}),
]
INDEX = {move.name: n for n, move in enumerate(MOVES)}


@dataclass
class Stages:
    real: list[Run]
    #: The model's plan of each move, or its error.
    modelled: list[Steps | str]
    cluster_ready_at: list[str]
    jobs: list[dict[str, Any]]


def _failing_job(_cluster: Any, _job: dict[str, Any]) -> str:
    return "migration: exit 1"


def _model_runs() -> list[Steps | str]:
    model = ModelLab()
    try:
        model.first_deployment()
        runs: list[Steps | str] = []
        for move in MOVES:
            model.world.env.update(move.env)
            model.hydra.job_runner = _failing_job if move.job_fails else migration_job
            up = model.run("up", "hydra", move.model)
            for key in move.env:
                del model.world.env[key]
            runs.append(up.error if up.error is not None else {(s.op, s.name) for s in up.changes()})
        return runs
    finally:
        model.close()


@pytest.fixture(scope="module")
def stages(lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> Stages:
    root: Path = tmp_path_factory.mktemp("migration-stage")
    cli = cli_for(lab, root)
    cli.identity()
    deploy(cli, lab, "hydra")
    real = []
    with StandinCnpg([lab.client("hydra")], ready_after=READY_AFTER):
        for move in MOVES:
            move.real(cli)
            cli.env.update(move.env)
            lab.cluster("hydra").set_failing_jobs(move.job_fails)
            real.append(cli.run("up", "--yes", "-s", "hydra"))
            for key in move.env:
                del cli.env[key]
        lab.cluster("hydra").set_failing_jobs(False)
    client = lab.client("hydra")
    cluster = client.get("/apis/postgresql.cnpg.io/v1/namespaces/headscale/clusters/headscale-db")
    ready_at = [c["lastTransitionTime"] for c in cluster["status"]["conditions"] if c["type"] == "Ready"]
    jobs = client.get("/apis/batch/v1/namespaces/headscale/jobs")["items"]
    return Stages(real, _model_runs(), ready_at, jobs)


AGREEING = [
    name
    for name in INDEX
    if name not in ("enter migrating, the Job fails", "enter migrating again", "adopt the kept cluster")
]


@pytest.mark.parametrize("name", AGREEING)
def test_the_real_engine_takes_the_steps_the_model_plans(stages: Stages, name: str) -> None:
    run = stages.real[INDEX[name]].check()
    real, modelled = run.plan(), stages.modelled[INDEX[name]]
    assert real == modelled, (sorted(real - set(modelled)), sorted(set(modelled) - real))


def test_the_job_ran_only_once_the_cluster_was_ready_and_completed(stages: Stages) -> None:
    """The engine awaited the Cluster's Ready condition (the stand-in reports it after READY_AFTER seconds) before
    it created the Job, and awaited the Job until Complete; the bump's Job replaced it, one is left."""
    (job,) = stages.jobs
    assert [c["type"] for c in job["status"]["conditions"] if c["status"] == "True"][-1] == "Complete"
    (ready_at,) = stages.cluster_ready_at
    assert job["metadata"]["creationTimestamp"] >= ready_at
    bump = stages.real[INDEX["litestream bump while migrating"]]
    job_steps = [s.op for s in bump.steps if s.type == "kubernetes:batch/v1:Job"]
    assert job_steps == ["create-replacement", "replace", "delete-replaced"], bump.ops()


def test_a_failed_job_fails_the_up_and_the_next_replaces_it_delete_first(stages: Stages) -> None:
    """The Job's pod fails (backoffLimit 0): the engine's await of the Job fails the `up`, as the model's does. The
    next `up`, with the same inputs, replaces the failed Job delete-first (`pulumi.com/replaceUnready`) rather than
    awaiting it again."""
    failed = stages.real[INDEX["enter migrating, the Job fails"]]
    assert failed.returncode != 0
    assert any("Job" in line or "job" in line for line in failed.diagnostics), failed.diagnostics
    assert isinstance(stages.modelled[INDEX["enter migrating, the Job fails"]], str)
    retried = stages.real[INDEX["enter migrating"]].check()
    job_steps = [s.op for s in retried.steps if s.type == "kubernetes:batch/v1:Job"]
    assert job_steps == ["delete-replaced", "replace", "create-replacement"], retried.ops()


def test_the_rollback_keeps_the_cluster(stages: Stages) -> None:
    rollback = stages.real[INDEX["roll back to sqlite"]]
    assert ("delete", "hydra-database-cluster") in rollback.plan()


def test_entering_migrating_again_meets_the_kept_cluster_as_its_plugin_release_does(stages: Stages) -> None:
    """pulumi-kubernetes 4.29 made a create of an existing object AlreadyExists (the model plays it, and the
    runbook adopts); the lab's 4.25 applies over it."""
    again = stages.real[INDEX["enter migrating again"]]
    modelled = stages.modelled[INDEX["enter migrating again"]]
    assert isinstance(modelled, str)
    assert "already exists" in modelled
    if lab_kubernetes_release() >= (4, 29):
        assert again.returncode != 0
        assert any("already exists" in line for line in again.diagnostics), again.diagnostics
    else:
        again.check()
        assert ("create", "hydra-database-cluster") in again.plan(), again.ops()


def test_the_adoption_and_the_up_after_it_update_the_provider(stages: Stages) -> None:
    """The variable is an input of the Kubernetes provider: an update when it appears and again when it goes. On
    4.29 and later the adoption also creates what the refused run did not (the model's plan)."""
    adopted = stages.real[INDEX["adopt the kept cluster"]].check()
    if lab_kubernetes_release() >= (4, 29):
        assert adopted.plan() == stages.modelled[INDEX["adopt the kept cluster"]], adopted.ops()
    else:
        assert [(s.op, s.name, s.diffs) for s in adopted.changed()] == [
            ("update", "hydra-kubernetes", ("upsertExistingObjects",))
        ], adopted.ops()
    after = stages.real[INDEX["after the adoption"]].check()
    assert [(s.op, s.name, s.diffs) for s in after.changed()] == [
        ("update", "hydra-kubernetes", ("upsertExistingObjects",))
    ], after.ops()
