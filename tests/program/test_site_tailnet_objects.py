"""The stack-level checks of TailnetObjects: what a stack's role and API access make it manage (`nextSteps`
without a bootstrap key, the standby's steps against the active site, the active stack's users, keys and live
policy, the standby's own router key), its keys reaching Headplane's and the routers' Secrets, the stacks'
`gateway.routers` and `policy.mode` settings, and the stack's API URL in the serialized providers. The component's
own behaviour is tested at its seam, in tests/components/test_tailnet_objects.py."""

from __future__ import annotations

import base64

import dill
import pytest

from headscale_ha.program.config import ConfigError
from tools.harness import SECRET, ProgramRun

BOOTSTRAP = "  headscale-ha:bootstrapApiKey:\n    secure: v1:AAAA\n"
DYNAMIC = "pulumi-python:dynamic/headscale:"


def _dynamic(run: ProgramRun) -> dict[str, str]:
    return {r.name: r.type.removeprefix(DYNAMIC) for r in run.resources if r.type.startswith(DYNAMIC)}


CREATE_KEY = "exec deployment/headscale -c headscale -- headscale apikeys create --expiration 90d"


def test_without_api_access_the_stack_says_what_to_do(run_stack) -> None:
    for stack in ("hydra", "cosmos"):
        run = run_stack(stack)
        assert _dynamic(run) == {}
        steps = run.outputs["nextSteps"]
        qualified = f"organization/headscale-ha/{stack}"
        assert steps[-3:-1] == [
            f"pulumi config set -s {qualified} --secret headscale-ha:bootstrapApiKey '<the key printed above>'",
            f"pulumi up -s {qualified}",
        ]
    active = run_stack("hydra").outputs["nextSteps"]
    assert active[:2] == [
        "kubectl --context hydra -n headscale rollout status deployment/headscale",
        f"kubectl --context hydra -n headscale {CREATE_KEY}",
    ]


def test_a_standby_creates_its_api_key_on_the_active_site(run_stack) -> None:
    """cosmos's Headscale runs 0 replicas: nothing may exec into it or wait for its rollout."""
    steps = run_stack("cosmos").outputs["nextSteps"]
    commands = [step for step in steps if not step.startswith("#")]
    assert not [step for step in commands if "--context cosmos" in step], "no kubectl against the standby's Headscale"
    assert not [step for step in commands if "rollout status" in step]
    (create,) = [step for step in commands if CREATE_KEY in step]
    assert create.startswith(
        'kubectl --context hydra -n "$(pulumi stack output -s organization/headscale-ha/hydra namespace)" '
    )
    assert "active site hydra" in steps[0]


def test_active_stack_manages_users_keys_and_the_policy(run_stack, lab_project) -> None:
    run = run_stack("lab", project_dir=lab_project(BOOTSTRAP))
    assert _dynamic(run) == {
        "lab-tailnet-router-key-0": "PreAuthKey",
        "lab-tailnet-user-alice": "User",
        "lab-tailnet-user-bob": "User",
        "lab-tailnet-user-carol": "User",
        "lab-policy-live": "Policy",
    }
    assert "nextSteps" not in run.outputs
    key = run.named("lab-tailnet-router-key-0").inputs
    assert key["aclTags"] == ["tag:subnet-router-hydra"]
    assert (key["reusable"], key["ephemeral"]) == (False, False)
    assert (key["lifetime"], key["rotateBefore"], key["recreateIfInvalid"]) == ("1h", "30m", "always")
    policy = run.named("lab-policy-live").inputs
    assert policy["mode"] == "dryRun"
    assert policy["policy"] == next(
        o["data"]["policy.json"]
        for o in run.kubernetes_objects()
        if o["metadata"]["name"] == "headscale-policy-rendered"
    )


#: Headplane gets a minted API key only for OIDC logins (Headplane 0.6 uses a server-side key for nothing else).
WITH_OIDC = (
    "  headscale-ha:headscale:\n    version: 0.29.2\n    image: ghcr.io/juanfont/headscale:0.29.2\n"
    "    oidc: {issuer: 'https://id.example.com', clientId: hs, allowedDomains: [example.com]}\n"
    "  headscale-ha:oidcClientSecret:\n    secure: v1:BBBB\n"
    "  headscale-ha:headplane: {oidcLogin: true}\n"
)


def test_keys_reach_their_secrets_as_secrets(run_stack, lab_project) -> None:
    without_oidc = run_stack("lab", project_dir=lab_project(BOOTSTRAP))
    assert "lab-tailnet-headplane-api-key" not in _dynamic(without_oidc)
    declined = run_stack("lab", project_dir=lab_project(BOOTSTRAP + WITH_OIDC.replace("true", "false")))
    assert "lab-tailnet-headplane-api-key" not in _dynamic(declined), "no key for a Headplane without OIDC login"
    run = run_stack("lab", project_dir=lab_project(BOOTSTRAP + WITH_OIDC))
    assert _dynamic(run)["lab-tailnet-headplane-api-key"] == "ApiKey"
    secrets = {o["metadata"]["name"]: o for o in run.kubernetes_objects() if o["kind"] == "Secret"}
    assert secrets["subnet-router-authkey-0"]["stringData"] == {"authkey": SECRET}
    assert secrets["headplane-secrets"]["stringData"]["headscale-api-key"] is SECRET


def test_standby_only_mints_its_own_router_key(run_stack, project_copy) -> None:
    project = project_copy()
    with (project / "Pulumi.cosmos.yaml").open("a") as stack_file:
        stack_file.write(BOOTSTRAP)
    run = run_stack("cosmos", project_dir=project)
    assert _dynamic(run) == {"cosmos-tailnet-router-key-0": "PreAuthKey"}
    assert run.named("cosmos-tailnet-router-key-0").inputs["aclTags"] == ["tag:subnet-router-cosmos"]


def test_each_router_replica_gets_its_own_single_use_short_lived_key(run_stack, lab_project) -> None:
    """One key per ordinal, each in its own Secret; nothing reusable or long-lived carries the route-approving tag."""
    config = "  headscale-ha:gateway: {routers: {replicas: 3, authKeyLifetime: 2h, authKeyRotateBefore: 1h}}\n"
    run = run_stack("lab", project_dir=lab_project(BOOTSTRAP + config))
    keys = {r.name: r.inputs for r in run.resources if r.type == f"{DYNAMIC}PreAuthKey"}
    assert sorted(keys) == [f"lab-tailnet-router-key-{i}" for i in range(3)]
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
        # Each Secret is written after its key, so it never holds a key Headscale does not know yet.
        assert run.named(f"lab-tailnet-router-key-{ordinal}").urn in secret.dependencies


def test_apply_mode_needs_api_access_on_the_active_stack(run_stack, lab_project, project_copy) -> None:
    with pytest.raises(ConfigError, match=r"policy\.mode: apply needs API access on the active stack"):
        run_stack("lab", project_dir=lab_project("  headscale-ha:policy: {mode: apply}\n"))
    run = run_stack("lab", project_dir=lab_project("  headscale-ha:policy: {mode: apply}\n" + BOOTSTRAP))
    assert run.named("lab-policy-live").inputs["mode"] == "apply"


def test_serialized_providers_carry_only_plain_settings(run_stack, lab_project) -> None:
    run = run_stack("lab", project_dir=lab_project(BOOTSTRAP))
    for resource in run.resources:
        if not resource.type.startswith(DYNAMIC):
            continue
        blob = resource.inputs["__provider"]
        assert isinstance(blob, str), "the provider is not serialized as a secret: it holds none"
        provider = dill.loads(base64.b64decode(blob))
        assert provider.api_url == "https://headscale.example.com"
        assert provider.version == "0.29.2"
        assert provider._client is None
