"""The README's first deployment with the real CLI, the real pulumi-kubernetes and two real API servers.

The runbook is docs/installation.md's, command for command: the identity stack, then each site with its own
kubeconfig as a secret, `pulumi preview --diff`, `pulumi up`, the `kubectl rollout status` check and the stack
outputs. Then a second `up` must change nothing, and the engine model (tests/models/engine) must have planned
the same steps as the real engine took.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.models.engine.lifecycle import Lab as ModelLab
from tests.support.kube_lab import KubeLab
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, Run, cli_for, kubectl

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS)
SITES = ("hydra", "cosmos")
STACK_REFERENCE = "pulumi:pulumi:StackReference"


@pytest.fixture(scope="module")
def deployed(lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> tuple[PulumiCli, dict[str, Run]]:
    """The documented first deployment, once for the module; every run kept by name."""
    cli = cli_for(lab, tmp_path_factory.mktemp("first-deployment"))
    runs = {"identity": cli.identity()}
    for site in SITES:
        cli.run("stack", "init", site).check()
        cli.run("config", "set", "--secret", "kubeconfig", stdin=lab.kubeconfig_path(site).read_text()).check()
        runs[f"{site}-preview"] = cli.run("preview", "--diff").check()
        runs[f"{site}-up"] = cli.run("up", "--yes").check()
    return cli, runs


def kubernetes_objects(cli: PulumiCli, stack: str) -> dict[str, dict[str, Any]]:
    """Every Kubernetes object in the stack's state by the UID the engine recorded: apiVersion, kind, metadata."""
    state = json.loads(cli.run("stack", "export", "-s", stack).check().stdout)
    found = {}
    for resource in state["deployment"]["resources"]:
        if not resource["type"].startswith("kubernetes:") or not resource.get("custom"):
            continue
        outputs = resource.get("outputs", {})
        metadata = {key: outputs["metadata"][key] for key in ("name", "namespace") if key in outputs["metadata"]}
        found[outputs["metadata"]["uid"]] = {
            "apiVersion": outputs["apiVersion"],
            "kind": outputs["kind"],
            "metadata": metadata,
        }
    return found


def live_uids(lab: KubeLab, context: str, objects: list[dict[str, Any]]) -> set[str]:
    """The UIDs of those objects as one cluster has them (one `kubectl get -f -`; missing ones are left out)."""
    done = kubectl(
        lab,
        "--context",
        context,
        "get",
        "-f",
        "-",
        "-o",
        "json",
        "--ignore-not-found",
        stdin=yaml.safe_dump_all(objects),
    )
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout or "{}")
    items = listed.get("items", [listed] if listed.get("metadata") else [])
    return {item["metadata"]["uid"] for item in items}


def test_the_first_up_of_each_stack_creates_what_its_preview_planned_once(deployed: tuple[PulumiCli, dict]) -> None:
    _, runs = deployed
    for stack in ("identity", *SITES):
        up = runs[f"{stack}-up"] if stack in SITES else runs["identity"]
        reads = {step.type for step in up.steps if step.op == "read"}
        assert reads <= {STACK_REFERENCE}, reads  # the identity stack's outputs, read each run
        assert {step.op for step in up.steps if step.op != "read"} == {"create"}, up.ops()
        urns = [step.urn for step in up.steps]
        assert len(urns) == len(set(urns)), f"{stack}: a resource created twice"
        if stack in SITES:
            preview = runs[f"{stack}-preview"]
            assert sorted((s.op, s.urn) for s in preview.steps) == sorted((s.op, s.urn) for s in up.steps), stack


def test_every_object_of_a_stack_is_in_its_own_cluster_and_only_there(
    deployed: tuple[PulumiCli, dict], lab: KubeLab
) -> None:
    cli, _ = deployed
    for site, other in (SITES, tuple(reversed(SITES))):
        objects = kubernetes_objects(cli, site)
        assert len(objects) > 20, f"{site}: {len(objects)} Kubernetes objects in the state"
        assert live_uids(lab, site, list(objects.values())) == set(objects), site
        assert live_uids(lab, other, list(objects.values())).isdisjoint(objects), f"{site}'s objects in {other}"


def test_headscale_rolls_out_as_the_installation_check_says(deployed: tuple[PulumiCli, dict], lab: KubeLab) -> None:
    cli, _ = deployed
    status = kubectl(lab, "--context", "hydra", "-n", "headscale", "rollout", "status", "deployment/headscale")
    assert status.returncode == 0, status.stderr
    assert "successfully rolled out" in status.stdout
    assert cli.stack_output("hydra")["endpoints"]
    follows = cli.stack_output("cosmos")["follows"]
    assert follows["stack"] == "organization/headscale-ha/hydra"
    hydra = cli.stack_output("hydra")
    assert follows["identityFingerprint"] == hydra["identityFingerprint"]
    assert (follows["headscaleVersion"], follows["databaseStage"]) == (hydra["headscaleVersion"], "sqlite")


def comparable(op: str, urn: str) -> tuple[str, str] | None:
    """A step as the engine model can be held to it, (op, URN); None for what the model leaves out: the root stack
    resource, StackReference reads and the `pulumi` provider behind them."""
    type_ = urn.split("::")[2].split("$")[-1]
    if type_ in ("pulumi:pulumi:Stack", "pulumi:providers:pulumi") or (op, type_) == ("read", STACK_REFERENCE):
        return None
    return op, urn


def test_the_engine_model_planned_the_steps_the_real_engine_took(deployed: tuple[PulumiCli, dict]) -> None:
    _, runs = deployed
    model = ModelLab()
    try:
        planned = model.first_deployment()
    finally:
        model.close()
    for stack, real_run in (("tailnet", runs["identity"]), *((site, runs[f"{site}-up"]) for site in SITES)):
        real = {comparable(step.op, step.urn) for step in real_run.steps} - {None}
        modelled = {comparable(step.op, step.urn) for step in planned[stack][1].steps} - {None}
        assert sorted(real - modelled) == [], f"{stack}: the real engine took steps the model did not plan"
        assert sorted(modelled - real) == [], f"{stack}: the model planned steps the real engine did not take"


def test_the_real_engine_qualifies_a_urn_with_every_ancestor_type(deployed: tuple[PulumiCli, dict]) -> None:
    """The rule the harness and the model follow (tools.harness.engine_urn): the whole chain, the root stack out."""
    _, runs = deployed
    urns = {step.urn.rsplit("::", 1)[-1]: step.urn for step in runs["hydra-up"].steps}
    chain = urns["hydra-headscale-backup-config"].split("::")[2]
    assert chain == (
        "headscale-ha:site:TailnetSite$headscale-ha:headscale:HeadscaleServer$"
        "headscale-ha:litestream:LitestreamBackup$kubernetes:core/v1:ConfigMap"
    )
    assert urns["hydra"] == "urn:pulumi:hydra::headscale-ha::headscale-ha:site:TailnetSite::hydra"


def test_a_second_up_of_each_stack_changes_nothing(deployed: tuple[PulumiCli, dict], tmp_path: Path) -> None:
    cli, _ = deployed
    for site in SITES:
        again = cli.run("up", "--yes", "-s", site).check()
        assert again.changed() == [], again.ops()


def test_a_site_previewed_before_its_identity_stack_fails_naming_it(lab: KubeLab, tmp_path: Path) -> None:
    """As the model has it (tests/program/test_lifecycle.py): the site's stack reference to the identity stack
    fails the preview, naming the stack the installation's first step creates; an `up` previews first, so it
    stops there and nothing reaches the state (or the cluster)."""
    cli = cli_for(lab, tmp_path)
    cli.run("stack", "init", "hydra").check()
    cli.run("config", "set", "--secret", "kubeconfig", stdin=lab.kubeconfig_path("hydra").read_text()).check()
    for early in (cli.run("preview"), cli.run("up", "--yes")):
        assert early.returncode != 0
        assert any("headscale-ha-identity/tailnet" in line for line in early.diagnostics), early.diagnostics
    state = json.loads(cli.run("stack", "export").check().stdout)
    assert [r["type"] for r in state["deployment"].get("resources") or []] == []
