"""The routine lifecycle of both shipped stacks on the engine model (tests/models/engine): what `pulumi preview`,
`pulumi up` and `pulumi destroy` do to the clusters, the state and Headscale, run after run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.models.engine.apiserver import Cluster, object_key
from tests.models.engine.lifecycle import IDENTITY, SITES, DeployedLab, Lab
from tests.models.engine.state import RunResult
from tests.models.engine.world import kubeconfig_for
from tests.support.lifecycle_stages import migrating
from tests.support.operations_doc import kept_rows
from tests.support.policy_samples import edited_policy
from tests.support.state_surgery import child_urn, legacy_providers, provider_class
from tools.harness import PROJECT_DIR

#: The dynamic providers' default provider: the engine gives it the whole stack config as inputs, so every config
#: edit updates it (the real engine does: tests/real/test_tailnet_api.py), and nothing follows from that update.
CONFIG_PROVIDER = "default"
LITESTREAM_BUMP = {"headscale-ha:backup.litestream.image": "docker.io/litestream/litestream:0.5.18"}


@pytest.fixture(scope="module")
def deployed() -> Iterator[DeployedLab]:
    deployed = DeployedLab()
    yield deployed
    deployed.close()


@pytest.fixture(scope="module")
def api_deployed() -> Iterator[DeployedLab]:
    deployed = DeployedLab(api=True)
    yield deployed
    deployed.close()


@pytest.fixture
def lab(deployed: DeployedLab) -> Lab:
    """Both clusters with the first deployment done, without Headscale API access (a fresh install)."""
    return deployed.fresh()


@pytest.fixture
def api_lab(api_deployed: DeployedLab) -> Lab:
    """Both clusters deployed with bootstrapApiKey set, Headscale (the fake) behind hydra's public route."""
    return api_deployed.fresh()


def _kinds(result: RunResult) -> set[str]:
    return {step.op for step in result.changes()}


LIFECYCLE_DOC = PROJECT_DIR / "docs" / "lifecycle.md"


def _documented_counts() -> dict[bool, dict[str, int]]:
    """The step counts docs/lifecycle.md states for a first deployment, with and without bootstrapApiKey."""
    text = " ".join(LIFECYCLE_DOC.read_text().split())
    found = re.search(
        r"(\d+) for the identity stack, (\d+) for hydra and (\d+) for cosmos with `bootstrapApiKey` set "
        r"\((\d+) and (\d+) without\)",
        text,
    )
    assert found, "docs/lifecycle.md no longer states the first deployment's step counts"
    identity, hydra, cosmos, bare_hydra, bare_cosmos = map(int, found.groups())
    return {
        True: {IDENTITY: identity, "hydra": hydra, "cosmos": cosmos},
        False: {IDENTITY: identity, "hydra": bare_hydra, "cosmos": bare_cosmos},
    }


def _documented_steps(name: str) -> list[str]:
    block = LIFECYCLE_DOC.read_text().split(f"<!-- steps: {name} -->", 1)[1].split("<!-- /steps -->", 1)[0]
    return [line for line in block.strip().strip("`").strip("\n").splitlines() if line.strip()]


def _uid(cluster: Cluster, kind: str, name: str) -> str:
    found = cluster.find(kind, name)
    assert found is not None, f"{kind} {name} is not in the cluster"
    return found["metadata"]["uid"]


# ------------------------------------------------------------------------------------------------ first deployment


@pytest.mark.parametrize("api", [False, True], ids=["fresh", "with-api-key"])
def test_the_first_deployment_in_the_documented_order_creates_everything_once(api: bool) -> None:
    lab = Lab(api=api)
    try:
        runs = lab.first_deployment()
        documented = _documented_counts()[api]
        assert {stack: len(up.steps) for stack, (_, up) in runs.items()} == documented
        for stack, (preview, up) in runs.items():
            assert _kinds(preview) == {"create"}, preview.text()
            assert sorted(s.name for s in preview.steps) == sorted(s.name for s in up.steps), stack
            assert _kinds(up) == {"create"}
        hydra_objects = {key[1:] for key in lab.hydra.object_keys()}
        assert ("Deployment", "headscale", "headscale") in hydra_objects
        deployment = lab.hydra.find("Deployment", "headscale", "headscale")
        assert deployment["spec"]["replicas"] == 1
        assert lab.cosmos.find("Deployment", "headscale", "headscale")["spec"]["replicas"] == 0
        if api:
            assert lab.headscale is not None
            assert sorted(u.name for u in lab.headscale.users.values()) == ["alice", "bob", "carol"]
            keys = lab.cosmos.find("Secret", "subnet-router-authkey-0")
            assert keys is not None
            assert keys["stringData"]["authkey"].startswith("hskey-auth-")
    finally:
        lab.close()


def test_a_site_planned_before_its_identity_stack_fails_as_a_real_run_would() -> None:
    lab = Lab()
    try:
        result = lab.run("preview", "hydra")
        assert result.error is not None
        assert "headscale-ha-identity/tailnet" in result.error
    finally:
        lab.close()


@pytest.mark.parametrize("stack", SITES)
def test_a_second_up_with_no_change_is_all_same(api_lab: Lab, stack: str) -> None:
    for kind in ("preview", "up"):
        result = api_lab.run(kind, stack)
        assert result.error is None, result.text()
        assert result.changes() == [], result.text()
        assert {s.op for s in result.steps} == {"same"}


# ------------------------------------------------------------------------------------------------ routine changes


@pytest.mark.parametrize("stack", SITES)
def test_a_policy_edit_updates_in_place_and_rolls_headscale(api_lab: Lab, stack: str, tmp_path: Path) -> None:
    cluster = api_lab.world.clusters[stack]
    before = _uid(cluster, "ConfigMap", "headscale-policy-rendered")
    change = {"headscale-ha:policy.file": str(edited_policy(tmp_path))}
    preview = api_lab.run("preview", stack, change)
    assert preview.error is None, preview.text()
    assert _kinds(preview) == {"update"}, preview.text()
    updated = {s.name for s in preview.changes()}
    assert {f"{stack}-policy-rendered", f"{stack}-headscale-deployment"} <= updated
    if stack == "hydra":
        assert sorted(s.line() for s in preview.changes()) == _documented_steps("policy-edit hydra")
    rolled = preview.of(f"{stack}-headscale-deployment")
    assert rolled.fields == ('spec.template.metadata.annotations["checksum/policy"]',)
    up = api_lab.run("up", stack, change)
    assert up.error is None, up.text()
    assert _kinds(up) == {"update"}, up.text()
    live = cluster.find("ConfigMap", "headscale-policy-rendered")
    assert json.loads(live["data"]["policy.json"])["groups"]["group:ops"] == ["bob@"]
    assert live["metadata"]["uid"] == before  # the same object, updated: never deleted while Headscale mounts it


@pytest.mark.parametrize("stack", SITES)
def test_a_headscale_config_edit_updates_the_configmap_and_rolls_the_pod(lab: Lab, stack: str) -> None:
    cluster = lab.world.clusters[stack]
    before = _uid(cluster, "ConfigMap", "headscale-config")
    up = lab.run("up", stack, {"headscale-ha:headscale.logLevel": "debug"})
    assert up.error is None, up.text()
    assert sorted(s.name for s in up.changes()) == sorted(
        [CONFIG_PROVIDER, f"{stack}-headscale-config", f"{stack}-headscale-deployment"]
    )
    assert _kinds(up) == {"update"}
    assert "debug" in cluster.find("ConfigMap", "headscale-config")["data"]["config.yaml"]
    assert _uid(cluster, "ConfigMap", "headscale-config") == before


@pytest.mark.parametrize("stack", SITES)
def test_a_litestream_image_bump_updates_the_pods_only(lab: Lab, stack: str) -> None:
    up = lab.run("up", stack, LITESTREAM_BUMP)
    assert up.error is None, up.text()
    assert _kinds(up) == {"update"}, up.text()
    kinds = {s.type.rsplit(":", 1)[1] for s in up.changes() if s.name != CONFIG_PROVIDER}
    assert kinds <= {"Deployment", "CronJob"}
    assert up.of(CONFIG_PROVIDER).op == "update"
    assert lab.run("up", stack, LITESTREAM_BUMP).changes() == []


@pytest.mark.parametrize(("stack", "changed"), [("hydra", 3), ("hydra", 1)])
def test_router_replicas_up_and_down(api_lab: Lab, stack: str, changed: int) -> None:
    """Scaled to ``changed`` and back: every replica has its single-use key; a removed replica's key is deleted and
    its node state Secret retained (a later scale-up finds it)."""
    cluster = api_lab.world.clusters[stack]
    resources = api_lab.resources(stack)
    base = sum(1 for name in resources if name.startswith(f"{stack}-routers-statefulset-"))
    for replicas, previous in ((changed, base), (base, changed)):
        up = api_lab.run("up", stack, {"headscale-ha:gateway.routers.replicas": replicas})
        assert up.error is None, up.text()
        assert _kinds(up) <= {"create", "update", "delete"}, up.text()
        for n in range(replicas):
            assert cluster.find("Secret", f"subnet-router-authkey-{n}")["stringData"].keys() == {"authkey"}
        deleted = {s.name: s.how for s in up.changes() if s.op == "delete"}
        removed = range(replicas, previous)
        budget = {f"{stack}-routers-pdb": ""} if replicas == 1 < previous else {}  # one replica: no budget
        per_replica = ("tailnet-router-key", "tailnet-router-key-secret", "routers-statefulset", "routers-account")
        per_replica += ("routers-role", "routers-binding", "routers-headless")
        assert deleted == {f"{stack}-{what}-{n}": "" for n in removed for what in per_replica} | budget | {
            f"{stack}-routers-state-{n}": "retained" for n in removed
        }
        assert all(cluster.find("Secret", f"subnet-router-{n}") is not None for n in range(max(replicas, previous)))
        assert [cluster.find("StatefulSet", f"subnet-router-{n}") is not None for n in range(3)] == [
            n < replicas for n in range(3)
        ]
        assert all(cluster.find("Secret", f"subnet-router-authkey-{n}") is None for n in removed)


@pytest.mark.parametrize("stack", SITES)
def test_setting_kubeconfig_on_an_existing_stack_updates_its_provider_only(lab: Lab, stack: str) -> None:
    cluster = lab.world.clusters[stack]
    kubeconfig = {"headscale-ha:kubeconfig": kubeconfig_for(cluster)}
    preview = lab.run("preview", stack, kubeconfig)
    assert preview.error is None, preview.text()
    assert sorted((s.op, s.name) for s in preview.changes()) == sorted(
        [("update", f"{stack}-kubernetes"), ("update", CONFIG_PROVIDER)]
    )
    assert lab.run("up", stack, kubeconfig).error is None


@pytest.mark.parametrize("stack", SITES)
def test_a_rotated_kubeconfig_of_the_same_cluster_replaces_nothing(lab: Lab, stack: str) -> None:
    """A new CA or API address changes the kubeconfig's active cluster, which pulumi-kubernetes reads as another
    cluster: without the provider's clusterIdentifier every object would be replaced (and, having fixed names,
    fail with AlreadyExists)."""
    cluster = lab.world.clusters[stack]
    assert lab.run("up", stack, {"headscale-ha:kubeconfig": kubeconfig_for(cluster)}).error is None
    rotated = kubeconfig_for(cluster).replace(
        f"server: '{cluster.server}'", f"server: '{cluster.server}', certificate-authority-data: bmV3IENB"
    )
    assert rotated != kubeconfig_for(cluster)
    up = lab.run("up", stack, {"headscale-ha:kubeconfig": rotated})
    assert up.error is None, up.text()
    assert sorted((s.op, s.name) for s in up.changes()) == sorted(
        [("update", f"{stack}-kubernetes"), ("update", CONFIG_PROVIDER)]
    )


def test_a_kubeconfig_naming_another_cluster_is_trusted_not_a_move(lab: Lab) -> None:
    """The provider's clusterIdentifier is the site: a kubeconfig of another cluster is an update of the provider,
    and no object is created, moved or deleted anywhere (docs/lifecycle.md says so: it is no way to move a site)."""
    hydra_objects, cosmos_objects = sorted(lab.hydra.object_keys()), sorted(lab.cosmos.object_keys())
    up = lab.run("up", "hydra", {"headscale-ha:kubeconfig": kubeconfig_for(lab.cosmos)})
    assert up.error is None, up.text()
    assert sorted((s.op, s.name) for s in up.changes()) == sorted(
        [("update", "hydra-kubernetes"), ("update", CONFIG_PROVIDER)]
    )
    assert sorted(lab.hydra.object_keys()) == hydra_objects
    assert sorted(lab.cosmos.object_keys()) == cosmos_objects


def test_a_used_router_key_is_rotated_and_its_secret_updated_in_place(api_lab: Lab) -> None:
    assert api_lab.headscale is not None
    secret = api_lab.hydra.find("Secret", "subnet-router-authkey-0")
    other = api_lab.hydra.find("Secret", "subnet-router-authkey-1")
    used = secret["stringData"]["authkey"]
    api_lab.headscale.register_node("subnet-router-0", preauth_key=used)
    preview = api_lab.run("preview", "hydra")
    assert preview.error is None, preview.text()
    step = preview.of("hydra-tailnet-router-key-0")
    assert (step.op, step.how) == ("replace", "create-before-delete")
    assert preview.of("hydra-tailnet-router-key-secret-0").op == "update"
    assert [s.name for s in preview.changes() if "router-key-secret" in s.name] == ["hydra-tailnet-router-key-secret-0"]
    up = api_lab.run("up", "hydra")
    assert up.error is None, up.text()
    after = api_lab.hydra.find("Secret", "subnet-router-authkey-0")
    assert after["metadata"]["uid"] == secret["metadata"]["uid"]
    assert after["stringData"]["authkey"] not in (used, "")
    assert api_lab.hydra.find("Secret", "subnet-router-authkey-1") == other, "the other replica's key is untouched"


def test_rotating_the_identity_updates_the_retained_secret_in_place(lab: Lab) -> None:
    """The README's runbook: unprotect the identity keys, `pulumi up --replace` them, then `up` every site."""
    before = lab.hydra.find("Secret", "headscale-identity")
    keys = ("noise-key", "derp-key")
    refused = lab.run("up", IDENTITY, replace=keys)
    assert refused.error is not None
    assert "protection" in refused.error
    for name in keys:
        lab.unprotect(IDENTITY, name)
    rotated = lab.run("up", IDENTITY, replace=keys)
    assert rotated.error is None, rotated.text()
    for stack in SITES:
        up = lab.run("up", stack)
        assert up.error is None, up.text()
        assert ("update", f"{stack}-headscale-identity") in up.ops(), up.text()
        assert "replace" not in _kinds(up), up.text()
    after = lab.hydra.find("Secret", "headscale-identity")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["stringData"] != before["stringData"]


def _restore_env(cluster: Cluster) -> dict[str, str]:
    deployment = cluster.find("Deployment", "headscale", "headscale")
    (restore,) = [c for c in deployment["spec"]["template"]["spec"]["initContainers"] if c["name"] == "restore"]
    return {e["name"]: e.get("value") for e in restore["env"]}


def _as_release_0_1_0_routers(lab: Lab, stack: str) -> int:
    """Rewrite ``stack``'s state and cluster to the router layout of release 0.1.0: one StatefulSet `subnet-router`
    of N replicas, Pulumi name `<gateway>-statefulset`, in place of the N per-ordinal StatefulSets (their accounts,
    Roles and Services stay: the move under test is the StatefulSet's). Returns N."""
    (state,) = [s for s in lab.world.stacks.values() if s.name == stack]
    cluster = lab.hydra if stack == "hydra" else lab.cosmos
    ordinals = {
        urn: r
        for urn, r in state.resources.items()
        if r.type == "kubernetes:apps/v1:StatefulSet" and "-statefulset-" in urn
    }
    zero = next(r for urn, r in ordinals.items() if urn.endswith("-statefulset-0"))
    old = zero.copy()
    old.urn = zero.urn.removesuffix("-0")
    for section in (old.inputs, old.outputs):
        section["metadata"] = {**section["metadata"], "name": "subnet-router"}
        section["spec"] = {**section["spec"], "replicas": len(ordinals), "serviceName": "subnet-router"}
    for urn, resource in ordinals.items():
        del state.resources[urn]
        cluster.delete(object_key(resource.outputs))
    state.resources[old.urn] = old
    cluster.create({k: v for k, v in old.outputs.items() if k != "status"})
    return len(ordinals)


def test_the_routers_move_from_one_statefulset_to_one_per_replica_delete_first(lab: Lab) -> None:
    """Upgrading from 0.1.0: replica 0 takes the old StatefulSet over through its alias and replaces it
    delete-first (the old pods stop before a new one starts on the same node state); the others are created; the
    old resource is never a separate delete; a second `up` changes nothing."""
    replicas = _as_release_0_1_0_routers(lab, "hydra")
    assert replicas >= 2
    log = len(lab.hydra.log)
    up = lab.run("up", "hydra")
    assert up.error is None, up.text()
    moves = [(s.op, s.how, s.name.rsplit("-", 1)[-1]) for s in up.steps if "-statefulset" in s.name]
    assert moves == [("replace", "delete-before-replace", "0"), *[("create", "", str(n)) for n in range(1, replicas)]]
    writes = [line for line in lab.hydra.log[log:] if "statefulsets" in line]
    assert writes[:2] == [
        f"delete statefulsets.apps \"subnet-router\" in namespace '{_routers_namespace(lab)}'",
        f"create statefulsets.apps \"subnet-router-0\" in namespace '{_routers_namespace(lab)}'",
    ]
    names = {key[3] for key in lab.hydra.object_keys() if key[1] == "StatefulSet"}
    assert "subnet-router" not in names
    assert {f"subnet-router-{n}" for n in range(replicas)} <= names
    again = lab.run("up", "hydra")
    assert again.error is None, again.text()
    assert again.changes() == [], again.text()


def _as_release_0_1_0_providers(lab: Lab, stack: str) -> dict[str, str]:
    """Rewrite ``stack``'s state as release 0.1.0 wrote it: each dynamic resource's ``__provider``, in its inputs
    and its outputs, is the pickle 0.1.0 made (by its old class path, ``headscale_provider.resources.*`` and
    ``components.version_gate.*``; tests/support/legacy_providers.json). Returns resource name -> old path."""
    legacy = legacy_providers()
    by_class = {path.rsplit(".", 1)[1]: (path, value) for path, value in legacy.items()}
    (state,) = [s for s in lab.world.stacks.values() if s.name == stack]
    rewritten = {}
    for resource in state.resources.values():
        if not resource.type.startswith("pulumi-python:dynamic"):
            continue
        path, value = by_class[provider_class(resource.inputs["__provider"])]
        resource.inputs["__provider"] = resource.outputs["__provider"] = value
        rewritten[resource.name] = path
    return rewritten


def test_state_written_by_0_1_0_keeps_working_after_the_provider_moved(api_lab: Lab) -> None:
    """Release 0.1.0 pickled its providers as ``headscale_provider.resources.*`` and ``components.version_gate.*``;
    they are ``headscale_ha.*`` now. On the real dynamic provider host: `up` is all `same` (each diff reads its
    fields, not the pickle) and keeps the old outputs, and a destroy loads the old paths through their aliases
    (headscale_ha/class_paths.py) and deletes every one. (A refresh loads them the same way: tests/test_class_paths.py
    and the provider host test.)"""
    rewritten = _as_release_0_1_0_providers(api_lab, "hydra")
    assert {path.split(".")[0] for path in rewritten.values()} == {"components", "headscale_provider"}
    up = api_lab.run("up", "hydra")
    assert up.error is None, up.text()
    assert up.changes() == [], up.text()
    (state,) = [s for s in api_lab.world.stacks.values() if s.name == "hydra"]
    kept = {r.name: r.outputs["__provider"] for r in state.resources.values() if r.name in rewritten}
    legacy = legacy_providers()
    assert kept == {name: legacy[path] for name, path in rewritten.items()}  # a same step keeps the old outputs
    result = api_lab.run("destroy", "hydra")
    assert result.error is None, result.text()
    deleted = {s.name for s in result.steps if s.op == "delete"}
    assert set(rewritten) <= deleted
    assert api_lab.resources("hydra") == {}


def _as_release_0_1_0_live_policy(lab: Lab, stack: str) -> tuple[str, str]:
    """Rewrite ``stack``'s state to 0.1.0's tree: the live policy (HeadscalePolicy) a child of the TailnetPolicy
    component, where it is the site's child now. Returns (old URN, current URN)."""
    (state,) = [s for s in lab.world.stacks.values() if s.name == stack]
    (live,) = [r for r in state.resources.values() if r.type == "pulumi-python:dynamic/headscale:Policy"]
    (component,) = [r for r in state.resources.values() if r.type == "headscale-ha:policy:TailnetPolicy"]
    old = live.copy()
    old.urn = child_urn(component.urn, live.type, live.urn)
    old.parent = component.urn
    state.resources = {
        (old.urn if urn == live.urn else urn): (old if urn == live.urn else r) for urn, r in state.resources.items()
    }
    return old.urn, live.urn


def test_the_live_policy_moves_under_the_site_through_its_alias(api_lab: Lab) -> None:
    """0.1.0 made the live policy a child of TailnetPolicy after the component had registered its outputs; it is
    the site's child now (components are complete when their constructor returns). The alias takes the existing
    resource over: `up` is all `same` (no delete, no create, no call that writes the policy), the state holds it
    under its new URN with its id, and a second `up` changes nothing."""
    old_urn, new_urn = _as_release_0_1_0_live_policy(api_lab, "hydra")
    assert old_urn != new_urn
    (state,) = [s for s in api_lab.world.stacks.values() if s.name == "hydra"]
    before = state.resources[old_urn]
    assert api_lab.headscale is not None
    writes = [r for r in api_lab.headscale.requests if r.method != "GET"]
    up = api_lab.run("up", "hydra")
    assert up.error is None, up.text()
    assert up.changes() == [], up.text()
    assert old_urn not in state.resources
    assert state.resources[new_urn].id == before.id
    assert state.resources[new_urn].outputs == before.outputs
    assert [r for r in api_lab.headscale.requests if r.method != "GET"] == writes
    again = api_lab.run("up", "hydra")
    assert again.error is None, again.text()
    assert again.changes() == [], again.text()


def _as_release_0_1_0_witnesses(lab: Lab, stack: str) -> dict[str, str]:
    """Rewrite ``stack``'s state to 0.1.0's tree: each served witness (the ConfigMapPatch `<backup>-served`) a
    child of its LitestreamBackup component, where it is the child of the component that owns the Deployment now.
    Returns {old URN: current URN}."""
    (state,) = [s for s in lab.world.stacks.values() if s.name == stack]
    backups = {r.urn.rsplit("::", 1)[1]: r for r in state.resources.values() if r.type.endswith(":LitestreamBackup")}
    renamed: dict[str, tuple[str, object]] = {}
    for urn, resource in state.resources.items():
        if resource.type == "kubernetes:core/v1:ConfigMapPatch" and urn.endswith("-served"):
            backup = backups[urn.rsplit("::", 1)[1].removesuffix("-served")]
            old = resource.copy()
            old.urn = child_urn(backup.urn, resource.type, urn)
            old.parent = backup.urn
            renamed[urn] = (old.urn, old)
    state.resources = {
        (renamed[urn][0] if urn in renamed else urn): (renamed[urn][1] if urn in renamed else resource)
        for urn, resource in state.resources.items()
    }
    return {old_urn: urn for urn, (old_urn, _) in renamed.items()}


def test_the_served_witnesses_move_under_their_applications_through_their_aliases(lab: Lab) -> None:
    """0.1.0 wrote each served witness as a child of LitestreamBackup after that component had registered its
    outputs; it is the child of HeadscaleServer or Headplane now (the owners of the Deployments it waits for). The
    aliases take the existing witnesses over: `up` is all `same` (a witness deleted and written again would pass
    through a moment with no witness, and a retained one would be adopted, not replaced), and a second `up` changes
    nothing."""
    moved = _as_release_0_1_0_witnesses(lab, "hydra")
    assert sorted(urn.rsplit("::", 1)[1] for urn in moved.values()) == [
        "hydra-headplane-backup-served",
        "hydra-headscale-backup-served",
    ]
    (state,) = [s for s in lab.world.stacks.values() if s.name == "hydra"]
    before = {new: state.resources[old] for old, new in moved.items()}
    up = lab.run("up", "hydra")
    assert up.error is None, up.text()
    assert up.changes() == [], up.text()
    for old, new in moved.items():
        assert old not in state.resources
        assert state.resources[new].id == before[new].id
        assert state.resources[new].outputs == before[new].outputs
    again = lab.run("up", "hydra")
    assert again.error is None, again.text()
    assert again.changes() == [], again.text()


def _routers_namespace(lab: Lab) -> str:
    found = lab.hydra.find("StatefulSet", "subnet-router-0")
    assert found is not None
    return found["metadata"]["namespace"]


RECORDER = "headscale-ha-position-recorder"


def _record_position(cluster: Cluster, value: str) -> None:
    """What Headscale's position recorder does while the pod runs: a patch of the witness's key `position` under
    its own field manager (components/scripts/position-recorder.sh)."""
    witness = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "headscale-served", "namespace": "headscale"},
    }
    cluster.apply_patch({**witness, "data": {"position": value}}, manager=RECORDER, force=True)


def test_pulumi_never_overwrites_the_position_the_running_pod_recorded(lab: Lab) -> None:
    """The witness is Pulumi's (server-side apply of `served`) and the recorder's (`position`): a routine `up`, a
    stop and start of Headscale, and a demotion and promotion leave the recorded position where the pod put it."""
    _record_position(lab.hydra, "00000000000000a0 1700000000")
    same = lab.run("up", "hydra")
    assert same.error is None, same.text()
    assert same.changes() == [], same.text()
    stopped = lab.run("up", "hydra", {"headscale-ha:headscale.replicas": 0})
    assert stopped.error is None, stopped.text()
    started = lab.run("up", "hydra")
    assert started.error is None, started.text()
    witness = lab.hydra.find("ConfigMap", "headscale-served", "headscale")
    assert witness["data"] == {"served": "true", "position": "00000000000000a0 1700000000"}
    env = _restore_env(lab.hydra)
    assert env["POSITION_WITNESS_FILE"].endswith("/position"), "the restore compares with it"
    demoted = lab.run("up", "hydra", {"headscale-ha:tailnet.activeSite": "cosmos", "headscale-ha:role": "standby"})
    assert demoted.error is None, demoted.text()
    assert "POSITION_WITNESS_FILE" not in _restore_env(lab.hydra), "a standby's REQUIRE_BACKUP reads no witness"
    back = lab.run("up", "hydra")
    assert back.error is None, back.text()
    assert (
        lab.hydra.find("ConfigMap", "headscale-served", "headscale")["data"]["position"]
        == "00000000000000a0 1700000000"
    )


def test_promotion_with_the_active_gone_then_demotion_when_it_returns(lab: Lab) -> None:
    """The failover runbook with hydra lost: cosmos is promoted without touching hydra; its restore must find a
    backup (the witness its standby life wrote refuses an empty start). When hydra returns it is demoted and
    follows cosmos; nothing is replaced on either site."""
    witness = lab.cosmos.find("ConfigMap", "headscale-served", "headscale")
    assert witness is not None
    assert witness["data"] == {"served": "standby"}  # the tailnet has served, not this site: no position recorded
    cosmos_active = {"headscale-ha:tailnet.activeSite": "cosmos", "headscale-ha:role": "active"}
    promoted = lab.run("up", "cosmos", cosmos_active)
    assert promoted.error is None, promoted.text()
    assert lab.cosmos.find("ConfigMap", "headscale-served", "headscale")["data"] == {"served": "true"}
    assert "replace" not in _kinds(promoted), promoted.text()
    assert lab.cosmos.find("Deployment", "headscale", "headscale")["spec"]["replicas"] == 1
    env = _restore_env(lab.cosmos)
    assert env["REQUIRE_BACKUP"] == "false"
    assert env["SERVED_FILE"].endswith("/served")  # present: the restore refuses to start empty (exit 24)
    hydra_standby = {"headscale-ha:tailnet.activeSite": "cosmos", "headscale-ha:role": "standby"}
    demoted = lab.run("up", "hydra", hydra_standby)
    assert demoted.error is None, demoted.text()
    assert "replace" not in _kinds(demoted), demoted.text()
    assert lab.hydra.find("Deployment", "headscale", "headscale")["spec"]["replicas"] == 0
    assert _restore_env(lab.hydra)["REQUIRE_BACKUP"] == "true"
    assert lab.hydra.find("ConfigMap", "headscale-served", "headscale")["data"]["served"] == "standby"
    for stack, change in (("hydra", hydra_standby), ("cosmos", cosmos_active)):
        assert lab.run("up", stack, change).changes() == []


# ------------------------------------------------------------------------------------------------ migration


def test_the_migration_job_waits_for_the_database_and_survives_routine_changes(lab: Lab) -> None:
    up = lab.run("up", "hydra", migrating())
    assert up.error is None, up.text()
    jobs = [key for key in lab.hydra.object_keys() if key[1] == "Job"]
    assert len(jobs) == 1
    job = lab.hydra.get(jobs[0])
    assert job["status"]["conditions"][0]["type"] == "Complete"
    # The Job started only once CloudNativePG reported the Cluster ready: the engine waited for it.
    cluster = lab.hydra.find("Cluster", "headscale-db", "headscale")
    assert cluster["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    # An image bump while migrating is a new Job; it re-verifies the loaded target and succeeds.
    bumped = lab.run("up", "hydra", {**migrating(), **LITESTREAM_BUMP})
    assert bumped.error is None, bumped.text()
    (replaced,) = [s for s in bumped.changes() if s.type == "kubernetes:batch/v1:Job"]
    assert (replaced.op, replaced.how) == ("replace", "create-before-delete")
    assert len([key for key in lab.hydra.object_keys() if key[1] == "Job"]) == 1
    assert lab.run("up", "hydra", {**migrating(), **LITESTREAM_BUMP}).changes() == []


def test_a_job_that_failed_is_replaced_not_awaited_again(lab: Lab) -> None:
    outcomes = iter(["restore: no backup in /backup/headscale (exit 21)"])

    def runner(cluster: Cluster, job: dict) -> str | None:
        return next(outcomes, None)

    lab.hydra.job_runner = runner
    failed = lab.run("up", "hydra", migrating())
    assert failed.error is not None
    assert "exit 21" in failed.error
    again = lab.run("up", "hydra", migrating())
    assert again.error is None, again.text()
    (step,) = [s for s in again.changes() if s.type == "kubernetes:batch/v1:Job"]
    assert (step.op, step.how) == ("replace", "delete-before-replace")
    assert any("replaceUnready" in reason for reason in step.reasons)


def test_re_entering_migrating_after_a_rollback_adopts_the_kept_cluster_as_the_runbook_says(lab: Lab) -> None:
    assert lab.run("up", "hydra", migrating()).error is None
    rolled_back = lab.run("up", "hydra")
    assert rolled_back.error is None, rolled_back.text()
    assert ("delete", "hydra-database-cluster") in rolled_back.ops()
    assert lab.hydra.find("Cluster", "headscale-db", "headscale") is not None  # retained
    refused = lab.run("up", "hydra", migrating())
    assert refused.error is not None
    assert "already exists" in refused.error
    lab.world.env["PULUMI_K8S_UPSERT_EXISTING_OBJECTS"] = "true"  # the runbook: adopt once
    adopted = lab.run("up", "hydra", migrating())
    del lab.world.env["PULUMI_K8S_UPSERT_EXISTING_OBJECTS"]
    assert adopted.error is None, adopted.text()
    after = lab.run("up", "hydra", migrating())  # the provider's `upsertExistingObjects` goes, nothing else changes
    assert [(s.op, s.name) for s in after.changes()] == [("update", "hydra-kubernetes")], after.text()


# ------------------------------------------------------------------------------------------------ destroy


@pytest.mark.parametrize("stack", SITES)
def test_destroy_keeps_exactly_what_the_readme_table_says(api_lab: Lab, stack: str) -> None:
    cluster = api_lab.world.clusters[stack]
    result = api_lab.run("destroy", stack)
    assert result.error is None, result.text()
    assert api_lab.resources(stack) == {}
    rows = kept_rows()
    kept = sorted((key[1], key[3]) for key in cluster.object_keys())
    unlisted = [k for k in kept if not any(k[0] == kind and re.fullmatch(p, k[1]) for kind, p, _ in rows)]
    assert unlisted == [], f"kept by destroy but not in docs/operations.md's table: {unlisted}"
    conditional = ("persistent", "kernel", "CNPG", "RandomBytes", "served")
    for kind, name, line in rows:
        if not any(word in line for word in conditional):
            assert any(k == (kind, n) or (k == kind and re.fullmatch(name, n)) for k, n in kept), (kind, name)


def test_destroy_deletes_the_api_resources_before_the_server_and_keeps_users_with_nodes(api_lab: Lab) -> None:
    assert api_lab.headscale is not None
    api_lab.headscale.register_node("alice-laptop", user="alice")
    result = api_lab.run("destroy", "hydra")
    assert result.error is None, result.text()
    names = [s.name for s in result.steps]
    api = [i for i, s in enumerate(result.steps) if s.type.startswith("pulumi-python:dynamic/headscale:")]
    server = [names.index("hydra-headscale-deployment"), names.index("hydra-endpoint-route")]
    assert api
    assert max(api) < min(server)
    users = {u.name for u in api_lab.headscale.users.values()}
    assert users == {"alice"}  # kept with its node; bob and carol had none
    assert [n.given_name for n in api_lab.headscale.nodes.values()] == ["alice-laptop"]
    assert api_lab.headscale.preauth_keys == {} or all(k.expiration for k in api_lab.headscale.preauth_keys.values())


def test_destroying_the_identity_stack_is_refused_by_its_protection(lab: Lab) -> None:
    result = lab.run("destroy", IDENTITY)
    assert result.error is not None
    assert "protected" in result.error
    assert {"noise-key", "derp-key"} <= set(lab.resources(IDENTITY))


@pytest.mark.parametrize("stack", SITES)
def test_deploying_again_after_destroy_adopts_the_kept_objects_once_as_the_readme_says(lab: Lab, stack: str) -> None:
    assert lab.run("destroy", stack).error is None
    refused = lab.run("up", stack)
    assert refused.error is not None
    assert "already exists" in refused.error
    lab.world.env["PULUMI_K8S_UPSERT_EXISTING_OBJECTS"] = "true"
    adopted = lab.run("up", stack)
    del lab.world.env["PULUMI_K8S_UPSERT_EXISTING_OBJECTS"]
    assert adopted.error is None, adopted.text()
    # The variable is an input of the stack's Kubernetes provider (the SDK reads it): an update when it appears and
    # again when it goes, and nothing else changes (tests/real/test_destroy.py, with the real engine).
    provider_only = [("update", f"{stack}-kubernetes")]
    assert [(s.op, s.name) for s in adopted.changes() if s.op != "create"] == provider_only, adopted.text()
    again = lab.run("up", stack)
    assert again.error is None, again.text()
    assert [(s.op, s.name) for s in again.changes()] == provider_only, again.text()
