"""The active site as it runs: its Headscale pod run for real, reached through its ingress at its public address.

hydra is deployed by the real CLI into the lab, whose kubelet runs Headscale's pod as the API server has it
(tests/support/kube_lab_pods.py): the restore init container (the rendered script, real Litestream), the
position recorder (a real service-account token, the stack's Role), the backup signer, Litestream replicating to
the NFS export, and Headscale on the pod's identity Secret. The site's ingress (tests/support/lab_ingress.py)
serves the public hostname at the site's `publicAddress` with a certificate of the lab's CA. The stack keeps the
default API URL, the public one, which nothing here resolves: the provider must reach Headscale at the active
site's address (provider/base.py), as a promotion needs before DNS has moved.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.models.engine.lifecycle import Lab as ModelLab
from tests.support.kube_lab import KubeLab
from tests.support.lab_sites import (
    SITE_TOOLS,
    USERS,
    Site,
    backed_up_users,
    deploy_serving,
    join_with_key,
    start_site,
    tailnet_cli,
)
from tests.support.litestream_lab import wait_until
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, Run, kubectl
from tests.support.state_surgery import (
    as_0_1_0_providers,
    as_0_1_0_routers,
    by_name,
    exported,
    imported,
    legacy_providers,
    move_under,
    names_of_type,
    resources,
)

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS, *SITE_TOOLS, "tailscale-node")


@dataclass
class Served:
    cli: PulumiCli
    site: Site
    root: Path
    first: Run
    api: Run
    #: The dynamic resources whose state was rewritten as 0.1.0 pickled their providers (name -> old class path).
    legacy: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def served(site_lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """hydra deployed and serving; then API access with the default URL and `pulumi up`."""
    root = tmp_path_factory.mktemp("served-site")
    cli, certificate = tailnet_cli(site_lab, root)
    site = start_site(site_lab, root, "hydra", certificate)
    try:
        yield Served(cli, site, root, *deploy_serving(cli, site_lab, site))
    finally:
        site.close()


def test_the_pod_ran_its_restore_and_serves_on_its_own_identity(served: Served) -> None:
    (pod,) = served.site.pods.history
    assert pod.failure is None
    assert pod.init_exits == {"restore": 0, "pre-upgrade": 0}
    noise = (pod.root / "containers/headscale/etc/headscale/identity/noise_private.key").read_text()
    secret = served.site.pods.client.get("/api/v1/namespaces/headscale/secrets/headscale-identity")
    assert noise.encode() == base64.b64decode(secret["data"]["noise.key"])


def test_the_default_url_reaches_the_active_site_and_creates_the_users(served: Served) -> None:
    created = {step.name for step in served.api.changed() if step.op == "create"}
    assert {f"hydra-tailnet-user-{name}" for name in USERS} <= created, served.api.ops()
    users = json.loads(served.site.server().cli("users", "list", "-o", "json").stdout)
    assert sorted(user["name"] for user in users) == USERS
    assert served.site.ingress.handshakes, "the provider never came through the site's ingress"


def test_the_backup_reaches_the_export_and_the_recorder_records_its_position(served: Served, site_lab: KubeLab) -> None:
    assert wait_until(lambda: backed_up_users(served.root) == USERS, timeout=60, interval=1), backed_up_users(
        served.root
    )

    def recorded() -> str:
        done = kubectl(site_lab, "--context", "hydra", "-n", "headscale", "get", "configmap", "headscale-served", "-o",
                       "jsonpath={.data.position}")  # fmt: skip
        return done.stdout if done.returncode == 0 else ""

    assert wait_until(lambda: bool(recorded()), timeout=60, interval=1), "no position recorded"
    txid, signed_at = recorded().split()
    assert len(txid) == 16
    assert int(txid, 16) > 0
    assert int(signed_at) > 0


def _router_key_secrets(lab: KubeLab) -> dict[str, dict[str, Any]]:
    listed = json.loads(kubectl(lab, "--context", "hydra", "get", "secrets", "-A", "-o", "json").stdout)["items"]
    return {s["metadata"]["name"]: s for s in listed if s["metadata"]["name"].startswith("subnet-router-authkey-")}


def _modelled_used_router_key() -> set[tuple[str, str]]:
    """The engine model's preview of hydra once router 0's key is used (its fake Headscale registers the node)."""
    model = ModelLab(api=True)
    try:
        model.first_deployment()
        secret = model.hydra.find("Secret", "subnet-router-authkey-0")
        assert model.headscale is not None
        model.headscale.register_node("subnet-router-0", preauth_key=secret["stringData"]["authkey"])
        preview = model.run("preview", "hydra")
        assert preview.error is None, preview.text()
        return {(step.op, step.name) for step in preview.changes()}
    finally:
        model.close()


def test_a_used_router_key_is_rotated_and_its_secret_updated_in_place(
    served: Served, site_lab: KubeLab, tmp_path: Path
) -> None:
    """tests/program/test_lifecycle.py's scenario with a real node: router 0's single-use key is spent by a real
    Tailscale node joining the real Headscale. The provider's diff sees it used: preview and `up` replace that key
    create-before-delete and update its Secret in place (same object, a new key), as the model plans (the exporter's
    list of keys follows); router 1's is untouched."""
    before = _router_key_secrets(site_lab)
    used = base64.b64decode(before["subnet-router-authkey-0"]["data"]["authkey"]).decode()
    joined = join_with_key(served.site.server(), used, "subnet-router-0", tmp_path / "node")
    assert joined.split()[0] == "Running", joined
    preview = served.cli.run("preview", "-s", "hydra").check()
    up = served.cli.run("up", "--yes", "-s", "hydra").check()
    modelled = _modelled_used_router_key()
    assert ("replace", "hydra-tailnet-router-key-0") in modelled
    for run in (preview, up):
        assert run.plan() == modelled, run.ops()
    key_steps = [s.op for s in up.steps if s.name == "hydra-tailnet-router-key-0"]
    assert key_steps == ["create-replacement", "replace", "delete-replaced"], up.ops()
    after = _router_key_secrets(site_lab)
    zero, one = after["subnet-router-authkey-0"], after["subnet-router-authkey-1"]
    assert zero["metadata"]["uid"] == before["subnet-router-authkey-0"]["metadata"]["uid"]
    assert base64.b64decode(zero["data"]["authkey"]).decode() not in (used, "")
    assert one["data"] == before["subnet-router-authkey-1"]["data"]
    assert one["metadata"]["resourceVersion"] == before["subnet-router-authkey-1"]["metadata"]["resourceVersion"]


# ------------------------------------------------------------------ state an older release wrote (as the model's)


def test_state_written_by_0_1_0_keeps_working_on_the_real_provider_host(served: Served) -> None:
    """tests/program/test_lifecycle.py's scenario on the real engine: every dynamic resource's `__provider` as
    0.1.0 pickled it (old class paths); `up` is all `same` and keeps the old outputs (the destroy below loads them)."""
    state = exported(served.cli, "hydra")
    served.legacy = as_0_1_0_providers(state)
    assert {path.split(".")[0] for path in served.legacy.values()} == {"components", "headscale_provider"}
    imported(served.cli, "hydra", state)
    up = served.cli.run("up", "--yes", "-s", "hydra").check()
    assert up.changed() == [], up.ops()
    after, legacy = exported(served.cli, "hydra"), legacy_providers()
    kept = {name: by_name(after, name)["outputs"]["__provider"] for name in served.legacy}
    assert kept == {name: legacy[path] for name, path in served.legacy.items()}


def test_the_live_policy_and_the_witnesses_move_through_their_aliases(served: Served) -> None:
    """0.1.0's tree: the live policy a child of TailnetPolicy, each served witness a child of its LitestreamBackup.
    Their aliases take them over: `up` is all `same`, each is kept under its current URN with its id and outputs,
    and nothing is left under the old one."""
    state = exported(served.cli, "hydra")
    (tailnet_policy,) = names_of_type(state, "headscale-ha:policy:TailnetPolicy")
    moves = [move_under(state, "hydra-policy-live", tailnet_policy)]
    moves += [
        move_under(state, f"hydra-{app}-backup-served", f"hydra-{app}-backup") for app in ("headscale", "headplane")
    ]
    before = {current: by_name(state, current.rsplit("::", 1)[1]) for _, current in moves}
    imported(served.cli, "hydra", state)
    up = served.cli.run("up", "--yes", "-s", "hydra").check()
    assert up.changed() == [], up.ops()
    after = {r["urn"]: r for r in resources(exported(served.cli, "hydra"))}
    for old, current in moves:
        assert old not in after
        assert (after[current]["id"], after[current]["outputs"]) == (before[current]["id"], before[current]["outputs"])


def _as_0_1_0_routers_in_the_cluster(lab: KubeLab, replicas: int) -> str:
    """The cluster's half of state_surgery.as_0_1_0_routers: the per-ordinal StatefulSets deleted, one
    `subnet-router` of ``replicas`` created from the first one's spec. Returns its namespace."""
    zero = json.loads(kubectl(lab, "--context", "hydra", "get", "statefulsets", "-A", "-o", "json").stdout)["items"]
    (first,) = [s for s in zero if s["metadata"]["name"] == "subnet-router-0"]
    namespace = first["metadata"]["namespace"]
    names = [f"subnet-router-{n}" for n in range(replicas)]
    done = kubectl(lab, "--context", "hydra", "-n", namespace, "delete", "statefulset", *names, "--wait")
    assert done.returncode == 0, done.stderr
    metadata = {k: v for k, v in first["metadata"].items() if k in ("labels", "annotations", "namespace")}
    old = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {**metadata, "name": "subnet-router"},
        "spec": {**first["spec"], "replicas": replicas, "serviceName": "subnet-router"},
    }
    done = kubectl(lab, "--context", "hydra", "create", "-f", "-", stdin=json.dumps(old))
    assert done.returncode == 0, done.stderr
    return namespace


def test_the_routers_move_from_one_statefulset_to_one_per_replica_delete_first(
    served: Served, site_lab: KubeLab
) -> None:
    """Upgrading from 0.1.0's single router StatefulSet, as the model plans it: replica 0 takes the old one over
    through its alias and replaces it delete-first (the old object is deleted before `subnet-router-0` is created),
    the others are created, and a second `up` changes nothing."""
    state = exported(served.cli, "hydra")
    old_urn, replicas = as_0_1_0_routers(state)
    assert replicas >= 2
    namespace = _as_0_1_0_routers_in_the_cluster(site_lab, replicas)
    imported(served.cli, "hydra", state)
    up = served.cli.run("up", "--yes", "-s", "hydra").check()
    gateway = old_urn.rsplit("::", 1)[1]
    moves = [(s.op, s.name.removeprefix(gateway)) for s in up.steps if s.name.startswith(gateway)]
    assert moves == [
        ("delete-replaced", ""),  # the engine names the deleted half by the URN it had: the alias's, 0.1.0's name
        ("replace", "-0"),
        ("create-replacement", "-0"),
        *[("create", f"-{n}") for n in range(1, replicas)],
    ], up.ops()
    listed = kubectl(site_lab, "--context", "hydra", "-n", namespace, "get", "statefulsets", "-o", "name").stdout
    names = {line.removeprefix("statefulset.apps/") for line in listed.split()}
    assert "subnet-router" not in names
    assert {f"subnet-router-{n}" for n in range(replicas)} <= names
    again = served.cli.run("up", "--yes", "-s", "hydra").check()
    assert again.changed() == [], again.ops()


def test_a_destroy_loads_0_1_0_s_providers_through_their_old_paths(served: Served) -> None:
    """The delete of a dynamic resource unpickles the provider its state holds: 0.1.0's old class paths load
    through headscale_ha/class_paths.py on the real provider host, and every one is deleted."""
    assert served.legacy, "runs after the 0.1.0 state test (the module's order)"
    destroyed = served.cli.run("destroy", "--yes", "-s", "hydra").check()
    deleted = {step.name for step in destroyed.steps if step.op == "delete"}
    assert set(served.legacy) <= deleted, sorted(set(served.legacy) - deleted)
