"""Roles, failover modes and the standby: the right objects for every role and stage, one identity, the runbook.

The promotion itself, walked step by step through the stack files, is tests/program/test_promotion.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headscale_ha.program.failover import LOST_RISK
from tests.support.manifest_validator import validate
from tests.support.stack_snippets import POSTGRES, SQLITE_DB
from tests.support.stacks import ACTIVE_STACK, IDENTITY_STACK
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


@pytest.mark.parametrize("stage", ["sqlite", "postgres"])
@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_every_role_and_stage_renders_the_right_objects(
    stack: str, stage: str, run_stack, project_copy, stack_outputs
) -> None:
    project = project_copy()
    if stage == "postgres":
        instances = "3" if stack == "hydra" else "1"
        _with(project, stack, POSTGRES.replace("instances: 3", f"instances: {instances}"), replace=SQLITE_DB[stack])
        stack_outputs[ACTIVE_STACK]["databaseStage"] = "postgres"  # a PostgreSQL standby follows a PostgreSQL active
    run = run_stack(stack, project_dir=project, stack_outputs=stack_outputs)
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
        result = validate(shared_dir, files)
        assert result.returncode == 0, result.stdout


def test_every_site_takes_the_identity_stack_keys_whatever_its_role(run_stack) -> None:
    fingerprints = set()
    for stack in ("hydra", "cosmos"):
        run = run_stack(stack)
        assert "identity" not in run.outputs, "a site stack exports no keys: the identity stack owns them"
        references = {r.inputs["name"] for r in run.resources if r.type == "pulumi:pulumi:StackReference"}
        assert IDENTITY_STACK in references
        assert not [r for r in run.resources if r.type.startswith("random:index/randomBytes")], "no keys of its own"
        (secret,) = [o for o in run.kubernetes_objects() if o["metadata"]["name"] == "headscale-identity"]
        assert secret["stringData"] == {"noise.key": SECRET, "derp.key": SECRET}
        fingerprints.add(run.outputs["identityFingerprint"])
    assert len(fingerprints) == 1


def test_imported_keys_give_the_pair_one_identity(run_stack, project_copy, stack_outputs) -> None:
    keys = "  headscale-ha:noisePrivateKey:\n    secure: v1:AAAA\n  headscale-ha:derpPrivateKey:\n    secure: v1:BBBB\n"
    project = project_copy()
    _with(project, "hydra", keys)
    _with(project, "cosmos", keys)
    hydra = run_stack("hydra", project_dir=project, stack_outputs={})
    cosmos = run_stack("cosmos", project_dir=project, stack_outputs={ACTIVE_STACK: hydra.exports})
    for run in (hydra, cosmos):
        assert not [r for r in run.resources if r.type == "random:index/randomBytes:RandomBytes"]
        # Nothing to save first: the keys already live in both stacks' config.
        assert run.outputs["failover"]["cosmos"]["steps"][0]["step"] == "fence the old active"
    assert cosmos.outputs["follows"]["identityFingerprint"] == hydra.outputs["identityFingerprint"]


PODS = "app.kubernetes.io/name=headscale,app.kubernetes.io/part-of=headscale-ha"


def test_the_promotion_runbook_is_real_commands_in_order(run_stack) -> None:
    """The whole `failover` output of the standby: one command per runbook, then every command it runs."""
    failover = run_stack("cosmos").outputs["failover"]
    hydra, cosmos = "organization/headscale-ha/hydra", "organization/headscale-ha/cosmos"
    assert failover == {
        "cosmos": {
            "command": "make promote SITE=cosmos",
            "ifActiveLost": {
                "command": "make promote SITE=cosmos LOST=hydra",
                "risk": LOST_RISK.format(old="hydra"),
                "whenItReturns": "make demote SITE=hydra",
            },
            "steps": [
                {
                    "step": "fence the old active",
                    "why": "two Headscale writers on one registry diverge: the old active stops before the new one "
                    "starts",
                    "edits": [
                        {"file": "Pulumi.yaml", "key": "tailnet.activeSite", "value": "cosmos"},
                        {"file": "Pulumi.hydra.yaml", "key": "headscale-ha:role", "value": "standby"},
                    ],
                    "commands": [
                        {
                            "run": ".venv/bin/python -m tools.runbook set-active-site cosmos",
                            "expect": "Pulumi.yaml has tailnet.activeSite: cosmos",
                        },
                        {
                            "run": f"pulumi config set -s {hydra} headscale-ha:role standby",
                            "expect": "Pulumi.hydra.yaml has headscale-ha:role: standby",
                        },
                        {"run": f"pulumi up --yes -s {hydra}", "expect": "hydra's Headscale scales to 0"},
                        {
                            "run": f'kubectl --context hydra -n "$(pulumi stack output -s {hydra} namespace)" '
                            f"get pods -l {PODS} -o name",
                            "expect": "prints nothing: no Headscale pod left on hydra (repeat until it does)",
                        },
                    ],
                },
                {
                    "step": "promote the data",
                    "why": "the new active must serve the newest registry",
                    "edits": [{"file": "Pulumi.cosmos.yaml", "key": "headscale-ha:role", "value": "active"}],
                    "commands": [
                        {
                            "run": f"pulumi config set -s {cosmos} headscale-ha:role active",
                            "expect": "Pulumi.cosmos.yaml has headscale-ha:role: active",
                        },
                        {
                            "run": f"pulumi up --yes -s {cosmos}",
                            "expect": "the restore init container restores the latest Litestream replica before "
                            "serving",
                        },
                        {
                            "run": "kubectl --context cosmos -n headscale rollout status deployment/headscale "
                            "--timeout=900s",
                            "expect": "Headscale on cosmos rolled out and ready",
                        },
                    ],
                },
            ],
            "dns": "by hand: point the A record of headscale.example.com at cosmos (203.0.113.20)",
        }
    }
    commands = [c["run"] for step in failover["cosmos"]["steps"] for c in step["commands"]]
    assert not [line for line in commands if "#" in line], "no command inside a comment"
    assert list(run_stack("hydra").outputs["failover"]) == ["cosmos"], "the active lists every standby as a target"


def test_site_stacks_and_contexts_come_from_the_sites(run_stack, project_copy, stack_outputs) -> None:
    """`stack` and `kubeContext` of a site name its stack file, `-s` and `--context`; stackPrefix qualifies it."""
    project = project_copy()
    shared = project / "Pulumi.yaml"
    text = shared.read_text().replace("stackPrefix: organization/headscale-ha", "stackPrefix: acme/headscale-ha")
    text = text.replace("        - name: hydra\n", "        - name: hydra\n          kubeContext: admin@hydra\n")
    shared.write_text(text)
    stack_outputs["acme/headscale-ha/hydra"] = stack_outputs.pop(ACTIVE_STACK)
    runbook = run_stack("cosmos", project_dir=project, stack_outputs=stack_outputs).outputs["failover"]["cosmos"]
    steps = {s["step"]: [c["run"] for c in s["commands"]] for s in runbook["steps"]}
    assert "pulumi up --yes -s acme/headscale-ha/hydra" in steps["fence the old active"]
    assert steps["fence the old active"][-1].startswith("kubectl --context admin@hydra ")
    assert "pulumi up --yes -s acme/headscale-ha/cosmos" in steps["promote the data"]


def test_a_streaming_replica_connects_to_the_active_and_keeps_the_archive(
    run_stack, project_copy, shared_dir, tmp_path, stack_outputs
) -> None:
    project = project_copy()
    database = POSTGRES.replace("instances: 3", "instances: 1").replace(
        "      instances: 1\n",
        "      instances: 1\n      replicaSource: streaming\n      streamingHost: pg.hydra.tn.internal.example.com\n",
    )
    _with(project, "cosmos", database, replace=SQLITE_DB["cosmos"])
    stack_outputs[ACTIVE_STACK]["databaseStage"] = "postgres"
    run = run_stack("cosmos", project_dir=project, stack_outputs=stack_outputs)
    (cluster,) = _kinds(run, "Cluster")
    (source,) = cluster["spec"]["externalClusters"]
    assert source["connectionParameters"]["host"] == "pg.hydra.tn.internal.example.com"
    assert source["connectionParameters"]["sslmode"] == "verify-full"
    assert source["plugin"]["name"] == "barman-cloud.cloudnative-pg.io"
    files = [f for f in write_rendered(run, tmp_path) if f.suffix == ".yaml"]
    assert validate(shared_dir, files).returncode == 0
