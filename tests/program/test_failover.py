"""Roles, failover modes and the standby: the right objects for every role and stage, one identity per pair."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.components.test_postgres import POSTGRES
from tests.test_main import _validate
from tools.harness import SECRET, ProgramRun
from tools.plan import write_rendered


def _kinds(run: ProgramRun, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def _with(project: Path, stack: str, extra: str, *, replace: str | None = None) -> Path:
    path = project / f"Pulumi.{stack}.yaml"
    text = path.read_text()
    if replace is not None:
        assert replace in text
        text = text.replace(replace, "")
    path.write_text(text + extra)
    return project


SQLITE_DB = {
    "hydra": "  headscale-ha:database:\n    stage: sqlite\n    postgres:\n      instances: 3\n",
    "cosmos": "  headscale-ha:database:\n    stage: sqlite\n    postgres:\n      instances: 1\n",
}


@pytest.mark.parametrize("stage", ["sqlite", "postgres"])
@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_every_role_and_stage_renders_the_right_objects(stack: str, stage: str, run_stack, project_copy) -> None:
    project = project_copy()
    if stage == "postgres":
        instances = "3" if stack == "hydra" else "1"
        _with(project, stack, POSTGRES.replace("instances: 3", f"instances: {instances}"), replace=SQLITE_DB[stack])
    run = run_stack(stack, project_dir=project)
    active = stack == "hydra"
    headscale = next(o for o in _kinds(run, "Deployment") if o["metadata"]["name"] == "headscale")
    assert headscale["spec"]["replicas"] == (1 if active else 0), "no writer on a standby"
    clusters = _kinds(run, "Cluster")
    if stage == "postgres":
        (cluster,) = clusters
        assert ("replica" in cluster["spec"]) is (not active), "replica cluster only on a postgres standby"
        assert ("plugins" in cluster["spec"]) is active, "only the active cluster archives"
    else:
        assert clusters == []
        restore = headscale["spec"]["template"]["spec"]["initContainers"][0]
        assert {e["name"]: e["value"] for e in restore["env"]}["REQUIRE_BACKUP"] == str(not active).lower()
    assert _kinds(run, "DNSEndpoint") == []  # failover none on the shipped stacks


@pytest.mark.parametrize("mode", ["k8gb", "externalDns"])
def test_failover_modes_validate_and_only_the_active_publishes(
    mode: str, run_stack, project_copy, shared_dir, tmp_path
) -> None:
    project = project_copy()
    text = (project / "Pulumi.yaml").read_text().replace("failover: none", f"failover: {mode}")
    (project / "Pulumi.yaml").write_text(text)
    for stack in ("hydra", "cosmos"):
        run = run_stack(stack, project_dir=project)
        gslbs, records = _kinds(run, "Gslb"), _kinds(run, "DNSEndpoint")
        if mode == "k8gb":
            (gslb,) = gslbs
            assert gslb["spec"]["strategy"] == {"type": "failover", "primaryGeoTag": "hydra", "dnsTtlSeconds": 60}
            assert gslb["spec"]["resourceRef"]["name"] == "headscale-public"
            assert records == []
        else:
            assert gslbs == []
            if stack == "hydra":
                (record,) = records
                assert record["spec"]["endpoints"] == [
                    {
                        "dnsName": "headscale.example.com",
                        "recordType": "A",
                        "recordTTL": 60,
                        "targets": ["198.51.100.10"],
                    }
                ]
            else:
                assert records == [], "a standby never publishes the public record"
        assert run.outputs["endpoints"]["failover"] == mode
        files = [f for f in write_rendered(run, tmp_path / mode / stack) if f.suffix == ".yaml"]
        result = _validate(shared_dir, files)
        assert result.returncode == 0, result.stdout


def test_the_standby_takes_its_identity_from_the_active_stack(run_stack) -> None:
    hydra, cosmos = run_stack("hydra"), run_stack("cosmos")
    assert hydra.outputs["identity"] is SECRET, "the active exports its keys, as a secret"
    assert "identity" not in cosmos.outputs
    (reference,) = [r for r in cosmos.resources if r.type == "pulumi:pulumi:StackReference"]
    assert reference.inputs["name"] == "organization/headscale-ha/hydra"
    assert not [r for r in cosmos.resources if r.type.startswith("random:index/randomBytes")], "no keys of its own"
    (secret,) = [o for o in cosmos.kubernetes_objects() if o["metadata"]["name"] == "headscale-identity"]
    assert secret["stringData"] == {"noise.key": SECRET, "derp.key": SECRET}


def test_imported_keys_give_the_pair_one_identity(run_stack, project_copy) -> None:
    keys = "  headscale-ha:noisePrivateKey:\n    secure: v1:AAAA\n  headscale-ha:derpPrivateKey:\n    secure: v1:BBBB\n"
    project = project_copy()
    _with(project, "hydra", keys)
    _with(project, "cosmos", keys, replace="  headscale-ha:identityFrom: organization/headscale-ha/hydra\n")
    for stack in ("hydra", "cosmos"):
        run = run_stack(stack, project_dir=project)
        assert not [
            r
            for r in run.resources
            if r.type in ("random:index/randomBytes:RandomBytes", "pulumi:pulumi:StackReference")
        ]
        # Nothing to save first: the keys already live in both stacks' config.
        assert run.outputs["failover"][0]["step"] == "fence the old active"


def test_promotion_steps_are_ordered_and_name_the_sites(run_stack) -> None:
    steps = run_stack("cosmos").outputs["failover"]
    keep = steps.pop(0)
    assert keep["step"] == "keep the identity", "hydra generated its keys: they must be imported before a demotion"
    assert "pulumi stack output -s hydra --show-secrets identity" in keep["command"]
    assert "pulumi state unprotect -s hydra" in keep["command"]
    assert [s["step"] for s in steps] == ["fence the old active", "promote the data", "scale up", "move DNS"]
    assert "tailnet.activeSite: cosmos" in steps[0]["command"]
    assert "pulumi up -s hydra" in steps[0]["command"]
    assert "restores the latest Litestream replica" in steps[1]["command"]
    assert "this stack (cosmos) is the standby" in steps[0]["note"]


def test_both_stacks_render_in_both_roles(run_stack, project_copy, shared_dir, tmp_path) -> None:
    """After a promotion cosmos serves and hydra stands by; both still render and validate."""
    project = project_copy()
    shared = project / "Pulumi.yaml"
    shared.write_text(shared.read_text().replace("activeSite: hydra", "activeSite: cosmos"))
    cosmos = project / "Pulumi.cosmos.yaml"
    cosmos.write_text(
        cosmos.read_text()
        .replace("headscale-ha:role: standby", "headscale-ha:role: active")
        .replace("  headscale-ha:identityFrom: organization/headscale-ha/hydra\n", "")
    )
    _with(project, "hydra", "  headscale-ha:identityFrom: organization/headscale-ha/cosmos\n")
    hydra_file = project / "Pulumi.hydra.yaml"
    hydra_file.write_text(hydra_file.read_text().replace("headscale-ha:role: active", "headscale-ha:role: standby"))
    for stack, replicas in (("cosmos", 1), ("hydra", 0)):
        run = run_stack(stack, project_dir=project)
        headscale = next(o for o in _kinds(run, "Deployment") if o["metadata"]["name"] == "headscale")
        assert headscale["spec"]["replicas"] == replicas
        assert run.outputs["endpoints"]["activeSite"] == "cosmos"
        files = [f for f in write_rendered(run, tmp_path / stack) if f.suffix == ".yaml"]
        assert _validate(shared_dir, files).returncode == 0


def test_a_streaming_replica_connects_to_the_active_and_keeps_the_archive(
    run_stack, project_copy, shared_dir, tmp_path
) -> None:
    project = project_copy()
    database = POSTGRES.replace("instances: 3", "instances: 1").replace(
        "      instances: 1\n",
        "      instances: 1\n      replicaSource: streaming\n      streamingHost: pg.hydra.tn.internal.example.com\n",
    )
    _with(project, "cosmos", database, replace=SQLITE_DB["cosmos"])
    run = run_stack("cosmos", project_dir=project)
    (cluster,) = _kinds(run, "Cluster")
    (source,) = cluster["spec"]["externalClusters"]
    assert source["connectionParameters"]["host"] == "pg.hydra.tn.internal.example.com"
    assert source["connectionParameters"]["sslmode"] == "verify-full"
    assert source["plugin"]["name"] == "barman-cloud.cloudnative-pg.io"
    files = [f for f in write_rendered(run, tmp_path) if f.suffix == ".yaml"]
    assert _validate(shared_dir, files).returncode == 0
