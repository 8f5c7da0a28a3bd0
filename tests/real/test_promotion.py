"""Promotion with the active site gone, then its return, with real actors end to end.

Both sites are deployed by the real CLI into the lab, whose kubelet runs each Headscale pod for real on one NFS
export (tests/support/lab_sites.py). hydra serves and manages the users through the API at the default URL; its
backup reaches the export. Then hydra is lost: its pods are killed without grace, its address stops answering, its
API server dies. `make promote SITE=cosmos LOST=hydra` (tools/runbook.py, driving the real `pulumi` and `kubectl`)
must leave cosmos serving the registry hydra had, restored by the rendered script with real Litestream; cosmos's
`up` reaches its own Headscale although the public name was never moved. When hydra's control plane returns,
`make demote SITE=hydra` scales its Headscale to 0 and cosmos keeps every user.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.models.engine.lifecycle import Lab as ModelLab
from tests.support.kube_lab import KubeLab
from tests.support.lab_sites import (
    SITE_TOOLS,
    USERS,
    Runbook,
    Site,
    backed_up_key_ids,
    backed_up_users,
    deploy_both,
    describe,
    headscale_json,
    run_runbook,
    start_site,
    tailnet_cli,
)
from tests.support.litestream_lab import wait_until
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, kubectl

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS, *SITE_TOOLS)


@dataclass
class Tailnet:
    cli: PulumiCli
    sites: dict[str, Site]
    hydra_users: list[dict[str, Any]]
    hydra_keys: list[dict[str, Any]]
    promotion: Runbook
    #: The position hydra's recorder last wrote into its served witness before hydra was lost.
    hydra_position: str


def _witness(lab: KubeLab, site: str) -> dict[str, str]:
    done = kubectl(lab, "--context", site, "-n", "headscale", "get", "configmap", "headscale-served", "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["data"]


@pytest.fixture(scope="module")
def tailnet(site_lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tailnet]:
    """Both sites deployed, hydra serving with API access and backed up; hydra lost; cosmos promoted."""
    root = tmp_path_factory.mktemp("promotion")
    cli, certificate = tailnet_cli(site_lab, root)
    sites = {name: start_site(site_lab, root, name, certificate) for name in ("hydra", "cosmos")}
    try:
        key = deploy_both(cli, site_lab, sites)
        # The standby gets API access ahead of the day it is needed (docs/failover.md): its `up` mints its routers'
        # keys at the active's address.
        cli.run("config", "set", "-s", "cosmos", "--secret", "bootstrapApiKey", key).check()
        cli.run("up", "--yes", "-s", "cosmos").check()
        users = headscale_json(sites["hydra"], "users", "list")
        keys = headscale_json(sites["hydra"], "preauthkeys", "list")
        # hydra is lost only once its last write, cosmos's router key, is on the export: what was written after the
        # last replication is the documented RPO, not what this test is about.
        minted = {k["id"] for k in keys}
        assert wait_until(
            lambda: backed_up_users(root) == USERS and backed_up_key_ids(root) >= minted, timeout=60, interval=1
        ), (backed_up_users(root), backed_up_key_ids(root), minted)
        assert wait_until(lambda: bool(_witness(site_lab, "hydra").get("position")), timeout=60, interval=1)
        sites["hydra"].pods.lose()
        position = _witness(site_lab, "hydra").get("position", "")  # the last its recorder wrote
        sites["hydra"].ingress.stop()
        site_lab.stop_api_server("hydra")
        promotion = run_runbook(cli, "promote", "cosmos", "--lost", "hydra", "--confirm-lost", "hydra")
        yield Tailnet(cli, sites, users, keys, promotion, position)
    finally:
        for site in sites.values():
            site.close()


def test_the_promotion_runs_every_command_but_hydra_s(tailnet: Tailnet) -> None:
    promotion = tailnet.promotion
    assert promotion.code == 0, promotion.explain(tailnet.sites)
    skipped = [line for line in promotion.lines if line.lstrip().startswith("skip (hydra is lost)")]
    assert len(skipped) == 2  # hydra's `pulumi up` and its pod check: nothing reached hydra's cluster
    ((argv, up),) = promotion.runner.ups
    assert argv[-1].endswith("/cosmos")
    assert "replace" not in up.ops(), up.ops()
    assert "delete" not in up.ops(), up.ops()


def modelled_promotion() -> set[tuple[str, str]]:
    """The engine model's `up` of cosmos promoted, after its own first deployment with API access on both sites."""
    model = ModelLab(api=True)
    try:
        model.first_deployment()
        up = model.run("up", "cosmos", {"headscale-ha:tailnet.activeSite": "cosmos", "headscale-ha:role": "active"})
    finally:
        model.close()
    assert up.error is None, up.text()
    return {(step.op, step.name) for step in up.changes()}


def test_the_engine_model_plans_the_promotion_the_real_engine_ran(tailnet: Tailnet) -> None:
    ((_, up),) = tailnet.promotion.runner.ups
    real = up.plan()
    assert real == modelled_promotion(), up.ops()


def test_cosmos_serves_the_registry_hydra_had(tailnet: Tailnet) -> None:
    cosmos = tailnet.sites["cosmos"]
    assert len(cosmos.pods.history) == 1, [describe(pod) for pod in cosmos.pods.history]
    (pod,) = cosmos.pods.history
    assert pod.init_exits["restore"] == 0
    assert pod.exits == []  # served from its start on: no container of it stopped
    restore_log = (pod.root / "restore.log").read_text()
    assert "a standby's witness" in restore_log, restore_log
    same = [(u["id"], u["name"]) for u in tailnet.hydra_users]
    assert [(u["id"], u["name"]) for u in headscale_json(cosmos, "users", "list")] == same
    assert {k["id"] for k in headscale_json(cosmos, "preauthkeys", "list")} >= {k["id"] for k in tailnet.hydra_keys}


def test_the_promoted_up_adopted_the_users_through_cosmos_s_own_address(tailnet: Tailnet) -> None:
    ((_, up),) = tailnet.promotion.runner.ups
    created = {step.name for step in up.changed() if step.op == "create"}
    assert {f"cosmos-tailnet-user-{name}" for name in USERS} <= created, up.ops()
    assert tailnet.sites["cosmos"].ingress.handshakes


def test_the_witness_says_cosmos_has_served_once_it_rolled_out(tailnet: Tailnet, site_lab: KubeLab) -> None:
    done = kubectl(site_lab, "--context", "cosmos", "-n", "headscale", "get", "configmap", "headscale-served", "-o",
                   "jsonpath={.data.served}")  # fmt: skip
    assert done.stdout == "true", done.stderr


def test_hydra_returns_and_is_demoted_while_cosmos_keeps_its_users(tailnet: Tailnet, site_lab: KubeLab) -> None:
    site_lab.start_api_server("hydra")
    demotion = run_runbook(tailnet.cli, "demote", "hydra")
    assert demotion.code == 0, demotion.explain(tailnet.sites)
    done = kubectl(site_lab, "--context", "hydra", "-n", "headscale", "get", "deployment", "headscale", "-o",
                   "jsonpath={.spec.replicas}")  # fmt: skip
    assert done.stdout == "0"
    names = sorted(u["name"] for u in headscale_json(tailnet.sites["cosmos"], "users", "list"))
    assert names == USERS
    # Pulumi applies the witness's `served` only: the position hydra's recorder wrote survives the demotion's update
    assert tailnet.hydra_position
    assert _witness(site_lab, "hydra") == {"served": "standby", "position": tailnet.hydra_position}


def test_after_both_runbooks_a_second_up_of_each_site_changes_nothing(tailnet: Tailnet) -> None:
    """Run after the demotion (pytest keeps the file's order): cosmos active, hydra following it."""
    for stack in ("cosmos", "hydra"):
        again = tailnet.cli.run("up", "--yes", "-s", stack).check()
        assert again.changed() == [], again.ops()


def _hydra_kubernetes_resources(cli: PulumiCli) -> set[str]:
    """The names of the Kubernetes objects hydra's state holds (its providers left out)."""
    state = json.loads(cli.run("stack", "export", "-s", "hydra").check().stdout)
    kinds = (r for r in state["deployment"]["resources"] if r["type"].startswith("kubernetes:"))
    return {r["urn"].rsplit("::", 1)[-1] for r in kinds if r["type"] != "pulumi:providers:kubernetes"}


def test_a_rebuilt_hydra_is_invisible_to_a_plain_up_and_the_demotion_recreates_it(
    tailnet: Tailnet, site_lab: KubeLab
) -> None:
    """hydra's cluster is lost for good and built again empty (same address and CA). Its state still lists every
    object and no step of a plain `up` reads the cluster, so the engine plans nothing and would report success on an
    empty cluster. `make demote` refreshes the state from the cluster first: every object is created again."""
    site_lab.rebuild("hydra")
    blind = tailnet.cli.run("preview", "-s", "hydra").check()
    assert blind.changed() == [], blind.ops()
    expected = _hydra_kubernetes_resources(tailnet.cli)
    demotion = run_runbook(tailnet.cli, "demote", "hydra")
    assert demotion.code == 0, demotion.explain(tailnet.sites)
    ((argv, up),) = demotion.runner.ups
    assert "--refresh" in argv
    created = {step.name for step in up.changed() if step.op == "create"}
    assert expected <= created, sorted(expected - created)
    assert _hydra_kubernetes_resources(tailnet.cli) == expected
    done = kubectl(site_lab, "--context", "hydra", "-n", "headscale", "get", "deployment,secret", "-o", "name")
    assert {"deployment.apps/headscale", "secret/headscale-identity"} <= set(done.stdout.split()), done.stderr
    again = tailnet.cli.run("up", "--yes", "-s", "hydra").check()
    assert again.changed() == [], again.ops()
