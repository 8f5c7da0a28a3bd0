"""The README's runbooks with Headscale API access, on the engine model (tests/models/engine): the fake Headscale is
the live server the users, pre-auth keys, API keys and the policy are managed on, served by whichever site runs it.

Each test follows one runbook step by step, editing a copy of the project's files as a user would (Pulumi.yaml,
Pulumi.<stack>.yaml), and checks what `preview` and `up` do and what Headscale's registry keeps: the registry is the
tailnet's, so no runbook may delete a user, a node or a key in it.
"""

from __future__ import annotations

import json
import re
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.models.engine.lifecycle import IDENTITY, SITES, DeployedLab, Lab
from tests.models.engine.state import RunResult
from tests.models.headscale import FakeHeadscale
from tests.support.lifecycle_stages import migrating
from tests.support.stacks import project_copier

API = "pulumi-python:dynamic/headscale:"
GATE = "pulumi-python:dynamic/upgrade:VersionGate"
#: The bar issue 24 sets for a standby's preview while the old active cannot answer.
PREVIEW_BAR_SECONDS = 15.0
OUTAGE = "could not answer"
ANDROMEDA_SERVER = "https://10.30.0.10:6443"
ANDROMEDA_SITE = """\
        - name: andromeda
          gatewayIp: 172.29.250.10
          lbPool: 172.29.250.0/28
          publicAddress: 192.0.2.30
          routes: [10.246.0.0/16, 10.98.0.0/16]
"""
ANDROMEDA_STACK = """\
    # andromeda: the third site, a standby.
    config:
      headscale-ha:role: standby
      headscale-ha:cluster:
        name: andromeda
        nodes: 2
        apiServer:
          host: 10.30.0.10
      headscale-ha:networkPolicy:
        apiServerCidrs: [10.30.0.0/24]
    """

# ------------------------------------------------------------------------------------------------ the files, by hand


def _edit(path: Path, pattern: str, replacement: str) -> None:
    text = path.read_text()
    edited, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    assert count == 1, f"{path.name}: {pattern!r} matched {count} times"
    path.write_text(edited)


def _set_active_site(project: Path, site: str) -> None:
    """In Pulumi.yaml, by hand (a `pulumi config set` would replace the whole tailnet object in a stack file)."""
    _edit(project / "Pulumi.yaml", r"^(\s+activeSite:) \S+$", rf"\1 {site}")


def _set_role(project: Path, stack: str, role: str) -> None:
    """`pulumi config set -s <stack> headscale-ha:role <role>`."""
    _edit(project / f"Pulumi.{stack}.yaml", r"^(\s+headscale-ha:role:) \S+$", rf"\1 {role}")


def _set_release(project: Path, version: str) -> None:
    """`headscale.version` and `headscale.image` together, in Pulumi.yaml (the release every site runs)."""
    _edit(
        project / "Pulumi.yaml",
        r"^(\s+)version: \S+\n(\s+)image: ghcr\.io/juanfont/headscale:\S+$",
        rf"\1version: {version}\n\2image: ghcr.io/juanfont/headscale:{version}",
    )


# ------------------------------------------------------------------------------------------------ the registry


def _in_use(fake: FakeHeadscale) -> None:
    """What a tailnet in use holds besides what the stacks manage: users' devices, a key and an API key made by
    hand (`headscale preauthkeys create`, `headscale apikeys create`)."""
    fake.register_node("alice-laptop", user="alice")
    fake.register_node("alice-phone", user="alice")
    fake.register_node("bob-desktop", user="bob")
    fake.add_preauth_key(user="carol", reusable=True, expiration=fake.now + timedelta(days=30))
    fake.add_api_key(expiration=fake.now + timedelta(days=60))


def _registry(fake: FakeHeadscale) -> dict[str, dict[int, tuple]]:
    with fake.lock:
        return {
            "users": {u.id: (u.name, u.display_name, u.email) for u in fake.users.values()},
            "nodes": {n.id: (n.given_name, n.user_id, n.node_key) for n in fake.nodes.values()},
            "preauth_keys": {k.id: (k.prefix, k.user_id, k.expiration, k.used) for k in fake.preauth_keys.values()},
            "api_keys": {k.id: (k.prefix, k.expiration) for k in fake.api_keys.values()},
            "policy": {0: (fake.policy_text,)},
        }


def _assert_kept(before: dict[str, dict[int, tuple]], fake: FakeHeadscale) -> dict[str, dict[int, tuple]]:
    """Every user, node, key (and the policy) of ``before`` is still there, unchanged (same id, not expired);
    returns what was added."""
    after = _registry(fake)
    for table, rows in before.items():
        assert {i: after[table].get(i) for i in rows} == rows, table
    destructive = [
        f"{r.method} {r.path}"
        for r in fake.requests
        if r.method == "DELETE" or re.search(r"/(expire|rename)\b", r.path)
    ]
    assert destructive == [], "the provider deleted, expired or renamed in Headscale"
    return {table: {i: row for i, row in rows.items() if i not in before[table]} for table, rows in after.items()}


# ------------------------------------------------------------------------------------------------ runs


def _api_ops(result: RunResult) -> dict[str, str]:
    return {s.name: s.op for s in result.steps if s.type.startswith(API)}


def _ok(result: RunResult, *, api: frozenset[str] = frozenset({"same", "update"})) -> RunResult:
    """The run succeeded, and its Headscale API resources only took steps of ``api`` (never replaced or deleted)."""
    assert result.error is None, result.text()
    assert set(_api_ops(result).values()) <= api, result.text()
    return result


def _handed_over(result: RunResult) -> RunResult:
    """A stack that gave up the active role: it succeeded and only dropped what the active manages (the users, only
    forgotten: see ``_assert_kept``; the live policy), nothing else of the API."""
    _ok(result, api=frozenset({"same", "update", "delete"}))
    dropped = sorted(name.split("-", 1)[1] for name, op in _api_ops(result).items() if op == "delete")
    assert dropped == ["policy-live", "tailnet-user-alice", "tailnet-user-bob", "tailnet-user-carol"], result.text()
    assert sum("forgotten, not deleted in Headscale" in w for w in result.warnings) == 3
    return result


def _outages(result: RunResult) -> list[str]:
    return [w for w in result.warnings if OUTAGE in w]


def _all_same(lab: Lab, *stacks: str) -> None:
    """A second `up` of each stack changes nothing."""
    for stack in stacks:
        result = lab.run("up", stack)
        assert result.error is None, result.text()
        assert result.changes() == [], f"{stack}:\n{result.text()}"


def _replicas(lab: Lab, site: str) -> int:
    return int(lab.world.clusters[site].find("Deployment", "headscale", "headscale")["spec"]["replicas"])


def _user_ids(lab: Lab, stack: str) -> dict[str, str]:
    return {r.inputs["name"]: r.id for r in lab.resources(stack).values() if r.type == f"{API}User"}


def _served_policy(lab: Lab) -> dict[str, Any]:
    """The policy file the active (hydra) Headscale reads (`policy.mode: file`)."""
    return json.loads(lab.hydra.find("ConfigMap", "headscale-policy-rendered")["data"]["policy.json"])


def _step(runbook: Any, name: str) -> str:
    """The step ``name`` of a `failover` output's runbook, as JSON text (wherever the output nests it)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("step") == name:
                found.append(json.dumps(node))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(runbook)
    assert len(found) == 1, f"{len(found)} steps {name!r} in {runbook}"
    return found[0]


def _live_version(fake: FakeHeadscale) -> str:
    return requests.get(f"{fake.url}/version", timeout=5).json()["version"]


@pytest.fixture(scope="module")
def project_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("project")


@pytest.fixture
def project(project_dir: Path) -> Path:
    """A copy of the project's Pulumi.yaml and stack files, as shipped: the runbooks edit these."""
    for path in project_dir.glob("Pulumi*.yaml"):
        path.unlink()
    return project_copier(project_dir)()


@pytest.fixture(scope="module")
def deployments() -> Iterator[dict[str, DeployedLab]]:
    """The labs this module deployed, by what they were deployed from (stack files, overrides, options)."""
    made: dict[str, DeployedLab] = {}
    yield made
    for deployed in made.values():
        deployed.close()


@pytest.fixture
def deployed(project: Path, deployments: dict[str, DeployedLab]) -> Callable[..., Lab]:
    """``deployed(overrides, **lab_options)``: a Lab with API access reading ``project`` (and ``overrides`` by stack),
    after the first deployment (identity, hydra, cosmos) and with the tailnet in use (see ``_in_use``). Tests that
    deploy from the same files, overrides and options share one deployment (DeployedLab)."""

    def make(overrides: dict[str, dict[str, Any]] | None = None, **options: Any) -> Lab:
        files = {path.name: path.read_text() for path in sorted(project.glob("Pulumi*.yaml"))}
        key = json.dumps([files, overrides, options], sort_keys=True, default=str)
        if key not in deployments:
            deployments[key] = DeployedLab(
                overrides, then=lambda lab: _in_use(_fake(lab)), api=True, project_dir=project, **options
            )
        return deployments[key].fresh()

    return make


def _fake(lab: Lab) -> FakeHeadscale:
    assert lab.headscale is not None
    return lab.headscale


# ------------------------------------------------------------------------------------------------ the runbooks


def test_a_minor_upgrade_of_every_site_keeps_the_registry_and_its_api_resources(
    project: Path, deployed: Callable[..., Lab]
) -> None:
    """README "Upgrading Headscale", 0.28.0 → 0.29.2: both fields together, the active first, then the standby."""
    _set_release(project, "0.28.0")
    lab = deployed(headscale_version="0.28.0")
    fake = lab.headscale
    assert lab.world.serves(lab.world) == ("hydra", "0.28.0")
    before = _registry(fake)
    _set_release(project, "0.29.2")
    early = lab.run("preview", "cosmos")  # the standby first is refused: it would run a release the active does not
    assert early.error is not None
    assert "0.29.2" in early.error
    assert "0.28.0" in early.error
    preview = _ok(lab.run("preview", "hydra"))
    assert _live_version(fake) == "v0.28.0"  # the preview ran against the old server: its diffs only warn
    assert _outages(preview), preview.warnings
    assert all("runs v0.28.0" in w for w in _outages(preview))
    assert (preview.of("hydra-headscale-version-gate").op, preview.of("hydra-headscale-version-gate").fields) == (
        "update",
        ("version",),
    )
    up = _ok(lab.run("up", "hydra"))
    # The same steps; their order is the order of registration, which the program's asynchronous outputs decide
    # (under load the dynamic providers' default provider came first in one run and later in the other).
    assert sorted(s.name for s in up.changes()) == sorted(s.name for s in preview.changes())
    assert _outages(up) == []  # the API resources ran after the new server rolled out
    assert lab.world.serves(lab.world) == ("hydra", "0.29.2")
    assert _live_version(fake) == "v0.29.2"
    gate = lab.resources("hydra")["hydra-headscale-version-gate"].outputs
    assert (gate["version"], gate["previous"]) == ("0.29.2", "0.28.0")
    standby = _ok(lab.run("up", "cosmos"))
    assert ("update", "cosmos-headscale-version-gate") in standby.ops()
    assert _outages(standby) == []
    _all_same(lab, "hydra", "cosmos")
    # `pulumi refresh` of the Headscale resources (the model has no refresh: the providers' Read, called directly).
    for stack in ("hydra", "cosmos"):
        reads, messages = lab.read_live(stack)
        state = lab.resources(stack)
        assert reads
        assert {name: found[0] for name, found in reads.items()} == {name: state[name].id for name in reads}
        assert messages == []
    assert _assert_kept(before, fake) == {table: {} for table in before}


def test_a_third_site_joins_as_a_standby_and_takes_over(project: Path, deployed: Callable[..., Lab]) -> None:
    """README "Third site": its entry in tailnet.sites and its stack file, `pulumi up` of it; then promotion
    hydra → andromeda with the extra step "follow the new active" (cosmos), as its `failover` output lists it."""
    lab = deployed(extra_sites={"andromeda": ANDROMEDA_SERVER})
    fake = lab.headscale
    ids = _user_ids(lab, "hydra")
    before = _registry(fake)
    _edit(project / "Pulumi.yaml", r"^(\s+routes: \[10\.245\.0\.0/16, 10\.97\.0\.0/16\]\n)", rf"\1{ANDROMEDA_SITE}")
    (project / "Pulumi.andromeda.yaml").write_text(textwrap.dedent(ANDROMEDA_STACK))
    preview = _ok(lab.run("preview", "andromeda"), api=frozenset({"create"}))
    assert {s.op for s in preview.steps} == {"create"}
    joined = _ok(lab.run("up", "andromeda"), api=frozenset({"create"}))
    assert joined.outputs["follows"]["stack"] == "organization/headscale-ha/hydra"
    assert _replicas(lab, "andromeda") == 0
    assert lab.world.serves(lab.world)[0] == "hydra"
    minted = _assert_kept(before, fake)["preauth_keys"]
    assert [fake.preauth_keys[i].acl_tags for i in minted] == [["tag:subnet-router-andromeda"]]
    # The README stops here, but the active serves the new site's router tag, route approvals and split-DNS zone
    # only from its next `up` (its policy and config are rendered from tailnet.sites): updates in place.
    assert "tag:subnet-router-andromeda" not in _served_policy(lab)["tagOwners"]
    for stack in ("hydra", "cosmos"):
        up = _ok(lab.run("up", stack))
        assert {s.op for s in up.changes()} == {"update"}, up.text()
    assert _served_policy(lab)["autoApprovers"]["routes"]["10.246.0.0/16"] == ["tag:subnet-router-andromeda"]
    assert "andromeda.tn.internal.example.com" in lab.hydra.find("ConfigMap", "headscale-config")["data"]["config.yaml"]
    failover = lab.world.stacks["organization/headscale-ha/andromeda"].outputs["failover"]["andromeda"]
    assert re.search(
        r"pulumi up (--yes )?-s organization/headscale-ha/cosmos\b", _step(failover, "follow the new active")
    )
    _set_active_site(project, "andromeda")
    _set_role(project, "hydra", "standby")
    _handed_over(lab.run("up", "hydra"))  # fenced
    assert _replicas(lab, "hydra") == 0
    _set_role(project, "andromeda", "active")
    _ok(lab.run("up", "andromeda"), api=frozenset({"same", "update", "create"}))
    assert lab.world.serves(lab.world)[0] == "andromeda"
    assert _user_ids(lab, "andromeda") == ids  # adopted, not recreated
    follow = _ok(lab.run("up", "cosmos"))  # follow the new active
    assert follow.outputs["follows"]["stack"] == "organization/headscale-ha/andromeda"
    _all_same(lab, *lab.sites)
    assert _assert_kept(before, fake)["preauth_keys"] == minted


def test_rotating_the_identity_with_api_access_keeps_every_api_resource(deployed: Callable[..., Lab]) -> None:
    """README "Rotating the identity": Headscale to 0 on the active, the identity keys replaced, the active back at
    1, then every standby. The outage of the first step only makes the API resources warn."""
    lab = deployed()
    fake = lab.headscale
    before = _registry(fake)
    identity = lab.hydra.find("Secret", "headscale-identity")
    stopped = _ok(lab.run("up", "hydra", {"headscale-ha:headscale.replicas": 0}))
    assert _replicas(lab, "hydra") == 0
    assert lab.world.serves(lab.world) is None
    assert _outages(stopped)
    keys = ("noise-key", "derp-key")
    for name in keys:
        lab.unprotect(IDENTITY, name)
    assert lab.run("up", IDENTITY, replace=keys).error is None
    for stack in ("hydra", "cosmos"):
        up = _ok(lab.run("up", stack))
        assert ("update", f"{stack}-headscale-identity") in up.ops()
        assert "replace" not in {s.op for s in up.changes()}, up.text()
        assert _outages(up) == []
    assert lab.world.serves(lab.world)[0] == "hydra"
    rotated = lab.hydra.find("Secret", "headscale-identity")
    assert rotated["metadata"]["uid"] == identity["metadata"]["uid"]
    assert rotated["stringData"] != identity["stringData"]
    _all_same(lab, "hydra", "cosmos")
    assert _assert_kept(before, fake) == {table: {} for table in before}


def test_moving_to_postgres_and_back_keeps_the_registry(deployed: Callable[..., Lab]) -> None:
    """README "Moving from SQLite to PostgreSQL": migrating (Headscale at 0: the API resources warn and change
    nothing), the rollback before step 3, migrating again (the kept CNPG Cluster adopted once), postgres (the API
    answers again: a new user is created), and the rollback after step 3."""
    lab = deployed()
    fake = lab.headscale
    before = _registry(fake)
    users = json.loads(lab.config("hydra")[1]["headscale-ha:tailnet"])["users"]
    dave = {"headscale-ha:tailnet.users": [*users, {"name": "dave", "displayName": "Dave"}]}
    stages: list[tuple[str, dict[str, Any], dict[str, str], bool]] = [
        ("migrating", migrating("migrating"), {}, False),
        ("rolled back", {}, {}, True),
        ("migrating again", migrating("migrating"), {"PULUMI_K8S_UPSERT_EXISTING_OBJECTS": "true"}, False),
        ("postgres", {**migrating("postgres"), **dave}, {}, True),
        ("rolled back after step 3", dave, {}, True),
    ]
    for stage, change, env, serving in stages:
        lab.world.env.update(env)
        up = _ok(lab.run("up", "hydra", change), api=frozenset({"same", "update", "create"}))
        for key in env:
            del lab.world.env[key]
        assert (lab.world.serves(lab.world) is not None) is serving, stage
        assert _replicas(lab, "hydra") == int(serving), stage
        assert bool(_outages(up)) is not serving, f"{stage}: {up.warnings}"
        if not serving:
            job = next(key for key in lab.hydra.object_keys() if key[1] == "Job")
            assert lab.hydra.get(job)["status"]["conditions"][0]["type"] == "Complete"
            standby = _ok(lab.run("up", "cosmos"))  # a SQLite standby follows a migrating active
            assert _outages(standby)
        preview = _ok(lab.run("preview", "hydra", change))
        # The adopting run's variable was the provider's input `upsertExistingObjects`: the next run drops it.
        dropped = [("update", "hydra-kubernetes")] if env else []
        assert [(s.op, s.name) for s in preview.changes()] == dropped, f"{stage}:\n{preview.text()}"
        assert bool(_outages(preview)) is not serving, stage
    assert [u.name for u in fake.users.values()].count("dave") == 1
    added = _assert_kept(before, fake)
    assert [row[0] for row in added["users"].values()] == ["dave"]
    assert all(not rows for table, rows in added.items() if table != "users")


@pytest.mark.parametrize("hydra", ["reachable", "lost-refusing", "lost-dropping"])
def test_promotion_with_api_access_and_back(project: Path, deployed: Callable[..., Lab], hydra: str) -> None:
    """README "Failover and the standby", hydra → cosmos, then back. Hydra reachable: fenced first. Hydra lost (its
    address refuses connections, or drops packets): the edits only, cosmos promoted, and hydra demoted when it
    returns, before anything else. alice has nodes and forceDelete: no stack that gives up the active role may
    delete her."""
    _edit(
        project / "Pulumi.yaml",
        r"(\{name: alice, displayName: Alice, email: alice@example\.com)\}",
        r"\1, forceDelete: true}",
    )
    lab = deployed()
    fake = lab.headscale
    lab.world.lost_mode = "blackhole" if hydra == "lost-dropping" else "refuse"
    ids = _user_ids(lab, "hydra")
    before = _registry(fake)
    _set_active_site(project, "cosmos")
    _set_role(project, "hydra", "standby")
    if hydra == "reachable":
        _handed_over(lab.run("up", "hydra"))
        assert _replicas(lab, "hydra") == 0
    else:
        lab.world.lost.add("hydra")
    _set_role(project, "cosmos", "active")
    started = time.monotonic()
    preview = lab.run("preview", "cosmos")
    seconds = time.monotonic() - started
    print(f"\ncosmos preview, hydra {hydra}: {seconds:.2f} s, {len(_outages(preview))} warning(s)")
    _ok(preview, api=frozenset({"same", "create"}))
    assert _outages(preview), preview.warnings
    assert seconds < PREVIEW_BAR_SECONDS
    promoted = _ok(lab.run("up", "cosmos"), api=frozenset({"same", "create"}))
    assert lab.world.serves(lab.world) == ("cosmos", "0.29.2")
    assert not fake.dark
    assert _user_ids(lab, "cosmos") == ids
    assert sum("adopted the user Headscale already holds" in w for w in promoted.warnings) == len(ids)
    if hydra != "reachable":
        lab.world.lost.discard("hydra")
        assert _replicas(lab, "hydra") == 1  # back as it was lost: a second writer, which only DNS keeps away
        assert lab.world.serves(lab.world)[0] == "cosmos"
        _handed_over(lab.run("up", "hydra"))
        assert _replicas(lab, "hydra") == 0
    _all_same(lab, "hydra", "cosmos")
    assert _assert_kept(before, fake) == {table: {} for table in before}
    # And back, cosmos → hydra, both reachable.
    _set_active_site(project, "hydra")
    _set_role(project, "cosmos", "standby")
    _handed_over(lab.run("up", "cosmos"))
    assert _replicas(lab, "cosmos") == 0
    _set_role(project, "hydra", "active")
    _ok(lab.run("up", "hydra"), api=frozenset({"same", "create"}))
    assert lab.world.serves(lab.world)[0] == "hydra"
    assert _user_ids(lab, "hydra") == ids
    _all_same(lab, "hydra", "cosmos")
    assert _assert_kept(before, fake) == {table: {} for table in before}


OIDC = {
    "headscale-ha:headscale.oidc": {"issuer": "https://id.example.com", "clientId": "hs", "allowedDomains": ["x.io"]},
    "headscale-ha:oidcClientSecret": "offline-secret",
    "headscale-ha:headplane.oidcLogin": True,
}


def test_with_oidc_each_site_keeps_its_headplane_key_through_fence_and_promotion(
    project: Path, deployed: Callable[..., Lab]
) -> None:
    """With OIDC every site with API access mints its own Headplane's key, whatever its role: the fence of hydra
    deletes none (it would run after the same run scaled Headscale to 0, and fail), and cosmos' Headplane has its
    key the moment it is promoted."""
    lab = deployed(overrides={"hydra": OIDC, "cosmos": OIDC})
    keys = {stack: lab.resources(stack)[f"{stack}-tailnet-headplane-api-key"].outputs["prefix"] for stack in SITES}
    assert keys["hydra"] != keys["cosmos"], "one key per site"
    fake = lab.headscale
    assert fake is not None
    before = _registry(fake)
    _set_active_site(project, "cosmos")
    _set_role(project, "hydra", "standby")
    fenced = _handed_over(lab.run("up", "hydra"))
    assert _replicas(lab, "hydra") == 0
    assert "hydra-tailnet-headplane-api-key" not in dict(fenced.ops())
    _set_role(project, "cosmos", "active")
    promoted = _ok(lab.run("up", "cosmos"), api=frozenset({"same", "create"}))
    assert ("create", "cosmos-tailnet-headplane-api-key") not in promoted.ops()
    assert {
        stack: lab.resources(stack)[f"{stack}-tailnet-headplane-api-key"].outputs["prefix"] for stack in SITES
    } == keys
    assert _assert_kept(before, fake)["api_keys"] == {}
