"""The active site's Headscale API runbook with real actors: bootstrapApiKey, then a policy edit.

hydra is deployed by the real CLI into the lab; when its Headscale Deployment is ready, the real `headscale`
binary serves the config.yaml and policy the stack wrote into its ConfigMaps (tests/support/headscale_real.py).
docs/installation.md's API step follows: an API key made by that Headscale, `pulumi config set --secret
bootstrapApiKey`, `headscaleApiUrl` (the `kubectl port-forward` form: http to loopback) and `pulumi up`, so the
dynamic providers create the users on the real server, which serves the rendered policy (`file` mode, the
default). Then docs/lifecycle.md's policy edit: the rendered ConfigMap and Headscale's pod template update in
place, the rolled Headscale serves the new policy, and the engine model plans the same steps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.models.engine.lifecycle import Lab as ModelLab
from tests.support.headscale_real import RealHeadscale, headscale_configs, pod_files
from tests.support.kube_lab import KubeLab
from tests.support.policy_samples import edited_policy
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, Run, cli_for, kubectl

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS, "headscale")
USERS = ["alice", "bob", "carol"]


def live_objects(lab: KubeLab, site: str) -> list[dict[str, Any]]:
    """The ConfigMaps and Deployments of the site's headscale namespace, as its API server has them."""
    done = kubectl(lab, "--context", site, "-n", "headscale", "get", "configmaps,deployments", "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["items"]


def policy_of(lab: KubeLab, site: str) -> dict[str, Any]:
    (rendered,) = [o for o in live_objects(lab, site) if o["metadata"]["name"] == "headscale-policy-rendered"]
    return json.loads(rendered["data"]["policy.json"])


class ServedSite:
    """The active site as the lab runs it: the real CLI, and the real Headscale its Deployment would run."""

    def __init__(self, lab: KubeLab, cli: PulumiCli, root: Path) -> None:
        self.lab, self.cli, self.root = lab, cli, root
        self.server = self._start()

    def _start(self) -> RealHeadscale:
        objects = live_objects(self.lab, "hydra")
        ((_, config),) = headscale_configs(objects).items()
        return RealHeadscale(config, self.root, files=pod_files(objects)).start()

    def rollout(self) -> RealHeadscale:
        """What a rolled Deployment does: Headscale starts again, on the same data, with the files as they are now
        (a `file`-mode policy, the default, is read at start)."""
        self.server.close()
        self.server = self._start()
        return self.server


@pytest.fixture(scope="module")
def served(lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServedSite, Run]]:
    """hydra deployed, its rendered Headscale served for real, then the API step of the installation."""
    root = tmp_path_factory.mktemp("tailnet-api")
    cli = cli_for(lab, root)
    cli.identity()
    cli.run("stack", "init", "hydra").check()
    cli.run("config", "set", "--secret", "kubeconfig", stdin=lab.kubeconfig_path("hydra").read_text()).check()
    cli.run("up", "--yes").check()
    site = ServedSite(lab, cli, root / "headscale")
    try:
        cli.run("config", "set", "--secret", "bootstrapApiKey", site.server.create_api_key("2h")).check()
        cli.run("config", "set", "headscaleApiUrl", site.server.url).check()
        yield site, cli.run("up", "--yes").check()
    finally:
        site.server.close()


def headscale_json(server: RealHeadscale, *args: str) -> Any:
    done = server.cli(*args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_api_up_creates_the_users_and_headscale_serves_the_rendered_policy(
    served: tuple[ServedSite, Run], lab: KubeLab
) -> None:
    site, up = served
    server = site.server
    created = {step.name for step in up.changed() if step.op == "create"}
    assert {f"hydra-tailnet-user-{name}" for name in USERS} <= created, up.ops()
    assert sorted(user["name"] for user in headscale_json(server, "users", "list")) == USERS
    live = json.loads(server.cli("policy", "get").stdout)
    assert live == policy_of(lab, "hydra")


def modelled_policy_edit(policy: Path) -> set[tuple[str, str, str]]:
    """The engine model's preview of the same edit on hydra, after its own first deployment with the API."""
    model = ModelLab(api=True)
    try:
        model.first_deployment()
        preview = model.run("preview", "hydra", {"headscale-ha:policy.file": str(policy)})
    finally:
        model.close()
    return {(step.op, step.type, step.name) for step in preview.changes()}


def test_a_policy_edit_updates_in_place_and_the_model_agrees(
    served: tuple[ServedSite, Run], lab: KubeLab, tmp_path: Path
) -> None:
    site, _ = served
    cli = site.cli
    uid = next(o for o in live_objects(lab, "hydra") if o["metadata"]["name"] == "headscale-policy-rendered")
    policy = edited_policy(tmp_path)
    cli.run("config", "set", "--path", "policy.file", str(policy)).check()
    preview = cli.run("preview", "--diff").check()
    planned = {(step.op, step.type, step.name) for step in preview.changed()}
    assert {op for op, _, _ in planned} == {"update"}, preview.ops()
    diffs = {step.name: step.diffs for step in preview.changed()}
    assert planned == modelled_policy_edit(policy), diffs
    up = cli.run("up", "--yes").check()
    assert {(step.op, step.type, step.name) for step in up.changed()} == planned
    after = next(o for o in live_objects(lab, "hydra") if o["metadata"]["name"] == "headscale-policy-rendered")
    assert after["metadata"]["uid"] == uid["metadata"]["uid"]  # updated, never deleted while Headscale mounts it
    assert policy_of(lab, "hydra")["groups"]["group:ops"] == ["bob@"]
    live = json.loads(site.server.cli("policy", "get").stdout)
    assert live["groups"]["group:ops"] == ["bob@", "carol@"]  # file mode: the running Headscale keeps its policy
    assert json.loads(site.rollout().cli("policy", "get").stdout)["groups"]["group:ops"] == ["bob@"]
    assert sorted(user["name"] for user in headscale_json(site.server, "users", "list")) == USERS  # same data
