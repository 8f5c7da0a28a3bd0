"""TailnetObjects: the routers' single-use pre-auth keys in their own Secrets, the users, Headplane's API key.

At the component seam: each test builds one TailnetObjects from hand-written args. The stack-level checks (what a
stack's role and API access make it manage, `nextSteps` without a bootstrap key, the keys reaching Headplane's
Secret, the stacks' router and policy settings, the live policy beside it) are in
tests/program/test_site_tailnet_objects.py.
"""

from __future__ import annotations

import base64

import dill

from headscale_ha.components.settings import TailnetUser
from headscale_ha.components.tailnet_objects import TailnetObjects, TailnetObjectsArgs
from tests.support.component_run import build_component
from tools.harness import SECRET, ProgramRun

DYNAMIC = "pulumi-python:dynamic/headscale:"
API_URL = "https://headscale.example.com"
USERS = (TailnetUser(name="alice"), TailnetUser(name="bob"), TailnetUser(name="carol"))


def _dynamic(run: ProgramRun) -> dict[str, str]:
    return {r.name: r.type.removeprefix(DYNAMIC) for r in run.resources if r.type.startswith(DYNAMIC)}


def _lone_objects(
    *,
    users: tuple[TailnetUser, ...] = (),
    mint_headplane_api_key: bool = False,
    replicas: int = 1,
    lifetime: str = "1h",
    rotate_before: str = "30m",
) -> ProgramRun:
    """TailnetObjects alone, named `hydra-tailnet`, for hydra's router tag (no stack file, no other component)."""
    args = TailnetObjectsArgs(
        api_url=API_URL,
        headscale_version="0.29.2",
        router_tag="tag:subnet-router-hydra",
        router_replicas=replicas,
        router_key_lifetime=lifetime,
        router_key_rotate_before=rotate_before,
        routers_namespace="headscale",
        users=users,
        mint_headplane_api_key=mint_headplane_api_key,
    )
    return build_component(lambda: TailnetObjects("hydra-tailnet", args))


def test_an_owner_manages_its_users_and_its_routers_key() -> None:
    run = _lone_objects(users=USERS)
    assert _dynamic(run) == {
        "hydra-tailnet-router-key-0": "PreAuthKey",
        "hydra-tailnet-user-alice": "User",
        "hydra-tailnet-user-bob": "User",
        "hydra-tailnet-user-carol": "User",
    }
    key = run.named("hydra-tailnet-router-key-0").inputs
    assert key["aclTags"] == ["tag:subnet-router-hydra"]
    assert (key["reusable"], key["ephemeral"]) == (False, False)
    assert (key["lifetime"], key["rotateBefore"], key["recreateIfInvalid"]) == ("1h", "30m", "always")


def test_without_users_only_the_routers_key_is_minted() -> None:
    run = _lone_objects()
    assert _dynamic(run) == {"hydra-tailnet-router-key-0": "PreAuthKey"}
    assert run.named("hydra-tailnet-router-key-0").inputs["aclTags"] == ["tag:subnet-router-hydra"]


def test_keys_reach_their_secrets_as_secrets() -> None:
    """The router key's Secret holds it as a secret; Headplane's API key is minted only when asked for."""
    without_key = _lone_objects()
    assert "hydra-tailnet-headplane-api-key" not in _dynamic(without_key)
    run = _lone_objects(mint_headplane_api_key=True)
    assert _dynamic(run)["hydra-tailnet-headplane-api-key"] == "ApiKey"
    secrets = {o["metadata"]["name"]: o for o in run.kubernetes_objects() if o["kind"] == "Secret"}
    assert secrets["subnet-router-authkey-0"]["stringData"] == {"authkey": SECRET}


def test_each_router_replica_gets_its_own_single_use_short_lived_key() -> None:
    """One key per ordinal, each in its own Secret; nothing reusable or long-lived carries the route-approving tag."""
    run = _lone_objects(replicas=3, lifetime="2h", rotate_before="1h")
    keys = {r.name: r.inputs for r in run.resources if r.type == f"{DYNAMIC}PreAuthKey"}
    assert sorted(keys) == [f"hydra-tailnet-router-key-{i}" for i in range(3)]
    for key in keys.values():
        assert (key["reusable"], key["lifetime"], key["rotateBefore"]) == (False, "2h", "1h")
        assert (key["aclTags"], key["recreateIfInvalid"]) == (["tag:subnet-router-hydra"], "always")
    secrets = {
        r.inputs["metadata"]["name"]: r
        for r in run.resources
        if r.is_kubernetes_object and r.inputs["metadata"]["name"].startswith("subnet-router-authkey")
    }
    assert sorted(secrets) == [f"subnet-router-authkey-{i}" for i in range(3)], "one Secret per replica"
    for ordinal in range(3):
        secret = secrets[f"subnet-router-authkey-{ordinal}"]
        assert secret.inputs["stringData"] == {"authkey": SECRET}
        assert secret.inputs["metadata"]["namespace"] == "headscale"
        # Each Secret is written after its key, so it never holds a key Headscale does not know yet.
        assert run.named(f"hydra-tailnet-router-key-{ordinal}").urn in secret.dependencies


def test_serialized_providers_carry_only_plain_settings() -> None:
    run = _lone_objects(users=USERS, mint_headplane_api_key=True)
    dynamic = [resource for resource in run.resources if resource.type.startswith(DYNAMIC)]
    assert len(dynamic) == 5
    for resource in dynamic:
        blob = resource.inputs["__provider"]
        assert isinstance(blob, str), "the provider is not serialized as a secret: it holds none"
        provider = dill.loads(base64.b64decode(blob))
        assert provider.api_url == API_URL
        assert provider.version == "0.29.2"
        assert provider._client is None
