"""`pulumi destroy` of the active site, and its deployment again, with real actors end to end.

hydra is deployed by the real CLI into the lab, whose kubelet runs its Headscale pod for real; with API access its
`up` creates the tailnet's users and mints the routers' keys in the real Headscale, and alice enrols a laptop. Then
`pulumi destroy --exclude-protected` (docs/operations.md, "What `pulumi destroy` keeps"): the real engine must
delete the Headscale objects while Headscale still serves, and keep in the cluster exactly the table's objects;
the identity stack's `destroy` must be refused by its protection. Deploying hydra again must adopt the kept objects
as the page says, restore the registry from the backup the destroy kept, and take a routine change afterwards.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.models.engine.lifecycle import Lab as ModelLab
from tests.support.kube_lab import KubeLab
from tests.support.lab_sites import SITE_TOOLS, USERS, Site, deploy_serving, start_site, tailnet_cli
from tests.support.operations_doc import kept_rows
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, Run, kubectl, lab_kubernetes_release

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS, *SITE_TOOLS)

#: The engine's type of the dynamic providers' resources (headscale_ha.provider).
DYNAMIC = "pulumi-python:dynamic/headscale:"
UPSERT = "PULUMI_K8S_UPSERT_EXISTING_OBJECTS"
#: The routers' replicas, scaled up from hydra's 2 and back before the destroy.
SCALES = (3, 2)
#: The identity stack's protected keys.
KEYS = ("noise-key", "derp-key")


@dataclass(frozen=True, order=True)
class Object:
    """A Kubernetes object a stack's state holds: what kubectl needs to find it."""

    kind: str
    group_version: str
    namespace: str
    name: str

    @property
    def resource(self) -> str:
        group = self.group_version.rpartition("/")[0]
        return f"{self.kind.lower()}.{group}" if group else self.kind.lower()


@dataclass
class Destroyed:
    cli: PulumiCli
    site: Site
    database: Path
    before: dict[str, Any]
    objects: list[Object]
    destroy: Run
    after: dict[str, Any]
    identity_uid: str
    #: `up`s with the routers scaled to 3, then back to 2 (with API access: each replica's key minted, then deleted).
    scaled: list[Run]


def state_objects(cli: PulumiCli, stack: str) -> list[Object]:
    """Every Kubernetes object in the stack's state (`pulumi stack export`), by kind, namespace and name."""
    exported = json.loads(cli.run("stack", "export", "-s", stack).check().stdout)
    found = []
    for resource in exported["deployment"].get("resources") or []:
        if not resource["type"].startswith("kubernetes:") or resource["type"].startswith("kubernetes:pulumi"):
            continue
        outputs = resource.get("outputs") or {}
        metadata = outputs.get("metadata") or {}
        if "kind" in outputs and "name" in metadata:
            where = metadata.get("namespace", "")
            found.append(Object(outputs["kind"], outputs["apiVersion"], where, metadata["name"]))
    return sorted(found)


def still_there(lab: KubeLab, objects: list[Object]) -> list[Object]:
    """The objects among ``objects`` that hydra's API server still holds (one kubectl per namespace)."""
    kept = []
    for namespace in sorted({o.namespace for o in objects}):
        mine = [o for o in objects if o.namespace == namespace]
        scope = ["-n", namespace] if namespace else []
        args = [f"{o.resource}/{o.name}" for o in mine]
        done = kubectl(lab, "--context", "hydra", *scope, "get", *args, "--ignore-not-found", "-o", "json")
        assert done.returncode == 0, done.stderr
        items = json.loads(done.stdout or '{"items": []}').get("items") or []
        present = {(item["kind"], item["metadata"]["name"]) for item in items}
        kept += [o for o in mine if (o.kind, o.name) in present]
    return kept


def registry(database: Path) -> dict[str, Any]:
    """What Headscale's own database holds: users (soft-deleted left out), nodes, and pre-auth keys."""
    with sqlite3.connect(database) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(users)")}
        live = " WHERE deleted_at IS NULL" if "deleted_at" in columns else ""
        return {
            "users": sorted(row[0] for row in db.execute(f"SELECT name FROM users{live}")),
            "nodes": sorted(row[0] for row in db.execute("SELECT given_name FROM nodes")),
            "keys": [row[0] for row in db.execute("SELECT id FROM pre_auth_keys")],
        }


def identity_secret_uid(lab: KubeLab) -> str:
    done = kubectl(lab, "--context", "hydra", "-n", "headscale", "get", "secret", "headscale-identity", "-o",
                   "jsonpath={.metadata.uid}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def enrol_laptop(site: Site, user: str) -> None:
    """A node of ``user``'s, as `tailscale up` would enrol it: cached by `debug create-node`, then registered."""
    auth = "hskey-authreq-" + "a" * 24
    server = site.server()
    done = server.cli("debug", "create-node", "--user", user, "--key", auth, "--name", "laptop")
    assert done.returncode == 0, done.stdout + done.stderr
    done = server.cli("auth", "register", "--auth-id", auth, "--user", user)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def destroyed(site_lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Destroyed]:
    """hydra deployed with API access, alice's laptop enrolled; then `pulumi destroy --exclude-protected`."""
    root = tmp_path_factory.mktemp("destroy")
    cli, certificate = tailnet_cli(site_lab, root)
    site = start_site(site_lab, root, "hydra", certificate)
    try:
        deploy_serving(cli, site_lab, site)
        scaled = []
        for replicas in SCALES:
            cli.set_path("hydra", "gateway.routers.replicas", str(replicas))
            scaled.append(cli.run("up", "--yes", "-s", "hydra"))
        enrol_laptop(site, "alice")
        database = Path(site.server().config["database"]["sqlite"]["path"])
        before = registry(database)
        objects = state_objects(cli, "hydra")
        uid = identity_secret_uid(site_lab)
        destroy = cli.run("destroy", "--yes", "--exclude-protected", "-s", "hydra")
        yield Destroyed(cli, site, database, before, objects, destroy, registry(database), uid, scaled)
    finally:
        site.close()


def test_the_routers_scale_up_and_down_as_the_model_plans(destroyed: Destroyed) -> None:
    """tests/program/test_lifecycle.py's router scaling with API access, on the real engine and Headscale."""
    model = ModelLab(api=True)
    try:
        model.first_deployment()
        modelled = []
        for replicas in SCALES:
            up = model.run("up", "hydra", {"headscale-ha:gateway.routers.replicas": replicas})
            assert up.error is None, up.text()
            modelled.append({(step.op, step.name) for step in up.changes()})
    finally:
        model.close()
    for run, planned in zip(destroyed.scaled, modelled, strict=True):
        real = run.check().plan()
        assert real == planned, (sorted(real - planned), sorted(planned - real))


def test_destroy_deletes_the_headscale_objects_while_headscale_serves(destroyed: Destroyed) -> None:
    destroy = destroyed.destroy.check()
    names = [step.name for step in destroy.steps if step.op == "delete"]
    api = [i for i, step in enumerate(destroy.steps) if step.type.startswith(DYNAMIC) and step.op == "delete"]
    server = [names.index("hydra-headscale-deployment"), names.index("hydra-endpoint-route")]
    assert api, destroy.ops()
    assert max(api) < min(server), names


def test_headscale_keeps_the_user_with_a_node_and_expires_the_keys_it_minted(destroyed: Destroyed) -> None:
    before, after = destroyed.before, destroyed.after
    assert before["users"] == USERS
    assert before["nodes"] == ["laptop"]
    assert after["users"] == ["alice"], after
    assert after["nodes"] == ["laptop"]
    assert before["keys"], "hydra's up minted no router keys"
    assert after["keys"] == []  # expired, then deleted


def test_destroy_keeps_exactly_what_docs_operations_md_says(destroyed: Destroyed, site_lab: KubeLab) -> None:
    destroyed.destroy.check()
    kept = still_there(site_lab, destroyed.objects)
    rows = kept_rows()
    unlisted = [o for o in kept if not any(o.kind == kind and re.fullmatch(p, o.name) for kind, p, _ in rows)]
    assert unlisted == [], f"kept by destroy but not in docs/operations.md's table: {unlisted}"
    conditional = ("persistent", "kernel", "CNPG", "RandomBytes")  # rows of settings the lab's hydra does not use
    for kind, pattern, line in rows:
        if not any(word in line for word in conditional):
            assert any(o.kind == kind and re.fullmatch(pattern, o.name) for o in kept), (kind, pattern, kept)
    exported = json.loads(destroyed.cli.run("stack", "export", "-s", "hydra").check().stdout)
    assert [r["type"] for r in exported["deployment"].get("resources") or []] == []


def test_the_engine_model_plans_the_destroy_the_real_engine_ran(destroyed: Destroyed) -> None:
    model = ModelLab(api=True)
    try:
        model.first_deployment()
        result = model.run("destroy", "hydra")
    finally:
        model.close()
    assert result.error is None, result.text()
    real = destroyed.destroy.plan()
    modelled = {(step.op, step.name) for step in result.changes()}
    assert real == modelled, (sorted(real - modelled), sorted(modelled - real))


def test_destroying_the_identity_stack_is_refused_by_its_protection(destroyed: Destroyed) -> None:
    where = destroyed.cli.project / "identity"
    refused = destroyed.cli.run("destroy", "--yes", "-s", "tailnet", cwd=where)
    assert refused.returncode != 0
    protected = [line for line in refused.diagnostics if "cannot be deleted\nbecause it is protected" in line]
    assert {line.split(":", 1)[0] for line in protected} == set(KEYS), refused.diagnostics
    assert destroyed.cli.stack_output("tailnet", cwd=where, secrets=True)["identity"]


# ------------------------------------------------------------------------------------------------ deploying again


@dataclass
class Redeployed:
    plain: Run
    adopted: Run
    again: Run
    users: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    restore_log: str


@pytest.fixture(scope="module")
def redeployed(destroyed: Destroyed) -> Redeployed:
    """`pulumi up` of hydra again; then the adoption the docs give, `PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true pulumi
    up`, and one more `up`."""
    cli = destroyed.cli
    plain = cli.run("up", "--yes", "-s", "hydra")
    if plain.returncode == 0:
        destroyed.site.pods.wait_ready()
    users = json.loads(destroyed.site.server().cli("users", "list", "-o", "json").stdout)
    nodes = json.loads(destroyed.site.server().cli("nodes", "list", "-o", "json").stdout)
    restore_log = (destroyed.site.pods.history[-1].root / "restore.log").read_text()
    cli.env[UPSERT] = "true"
    try:
        adopted = cli.run("up", "--yes", "-s", "hydra")
    finally:
        del cli.env[UPSERT]
    return Redeployed(plain, adopted, cli.run("up", "--yes", "-s", "hydra"), users, nodes, restore_log)


def test_an_up_after_destroy_meets_the_kept_objects_as_its_plugin_release_does(redeployed: Redeployed) -> None:
    """pulumi-kubernetes 4.29 made a create of an existing object AlreadyExists; before it, a create applied over
    it. The lab's plugin is the only one the proxy serves (4.25.0, tools/real_tools.json); the SDK pin's 4.34.2
    refuses, as docs/operations.md says, and the engine model plays that release."""
    plain = redeployed.plain
    if lab_kubernetes_release() >= (4, 29):
        assert plain.returncode != 0
        assert any("already exists" in line for line in plain.diagnostics), plain.diagnostics
    else:
        plain.check()
        assert set(plain.ops()) == {"create", "read"}, plain.ops()


def test_deploying_again_restores_the_registry_the_destroy_kept(redeployed: Redeployed, destroyed: Destroyed) -> None:
    redeployed.plain.check()
    assert "restored" in redeployed.restore_log, redeployed.restore_log
    assert sorted(user["name"] for user in redeployed.users) == USERS
    (alice,) = [user for user in redeployed.users if user["name"] == "alice"]
    assert [node["given_name"] for node in redeployed.nodes] == ["laptop"]
    assert redeployed.nodes[0]["user"]["id"] == alice["id"]


def test_adopting_updates_only_the_provider_and_the_next_up_updates_it_back(redeployed: Redeployed) -> None:
    """The variable is an input of the stack's Kubernetes provider (the SDK reads it), so it is a provider update
    when it appears and again when it goes; no object changes either time."""
    for run in (redeployed.adopted, redeployed.again):
        run.check()
        assert [(s.op, s.name, s.diffs) for s in run.changed()] == [
            ("update", "hydra-kubernetes", ("upsertExistingObjects",))
        ], run.ops()


def test_the_identity_rotation_after_adoption_updates_the_secret_the_destroy_kept(
    redeployed: Redeployed, destroyed: Destroyed, site_lab: KubeLab
) -> None:
    """docs/operations.md's "Rotating the identity", on objects adopted after a destroy: the kept Secret (same UID as
    before the destroy) takes the new keys in place, and Headscale serves the same registry on them. The adopting
    stack owns the fields the destroyed one set (components/pod.py ``KEPT_FIELD_MANAGER``): before, this `up` failed
    with an apply conflict on `.data.noise.key` and `.data.derp.key`."""
    cli, where = destroyed.cli, destroyed.cli.project / "identity"

    cli.set_path("hydra", "headscale.replicas", "0")
    cli.run("up", "--yes", "-s", "hydra").check()
    cli.run("state", "unprotect", "--all", "--yes", "-s", "tailnet", cwd=where).check()
    urns = [f"urn:pulumi:tailnet::headscale-ha-identity::random:index/randomBytes:RandomBytes::{k}" for k in KEYS]
    cli.run("up", "--yes", "--skip-preview", "-s", "tailnet", *(f"--replace={urn}" for urn in urns), cwd=where).check()
    fingerprint = cli.stack_output("tailnet", cwd=where)["fingerprint"]
    (marker,) = destroyed.site.pods.exports.rglob("headscale/identity.sha256")
    marker.write_text(fingerprint + "\n")
    cli.set_path("hydra", "headscale.replicas", "1")
    cli.set_path("hydra", "backup.auth.allowUnsigned", datetime.now(UTC).date().isoformat())
    rotated = cli.run("up", "--yes", "-s", "hydra").check()
    assert ("update", "hydra-headscale-identity") in {(s.op, s.name) for s in rotated.changed()}, rotated.ops()
    assert "replace" not in rotated.ops(), rotated.ops()
    assert identity_secret_uid(site_lab) == destroyed.identity_uid
    assert cli.stack_output("hydra")["identityFingerprint"] == fingerprint
    users = json.loads(destroyed.site.server().cli("users", "list", "-o", "json").stdout)
    assert sorted(user["name"] for user in users) == USERS
