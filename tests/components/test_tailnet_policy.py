"""TailnetPolicy: the rendered policy published for review and enforced from Headscale's first start, its hash a
stack output, errors named; allow-all only as a named choice the plan warns about.

At the component seam: each test builds one TailnetPolicy (and ``live_policy``) from hand-written args. The
stack-level checks (the stacks' rendered policy and outputs, ConfigError from the stack config, Headscale reading
the file, `make plan`) are in tests/program/test_site_tailnet_policy.py.
"""

from __future__ import annotations

import hashlib
import json

import pulumi_kubernetes as k8s
import pytest

from headscale_ha.components.settings import PolicyMode
from headscale_ha.components.tailnet_policy import (
    ALLOW_ALL_WARNING,
    HASH_ANNOTATION,
    POLICY_CONFIG_MAP,
    LiveApi,
    TailnetPolicy,
    TailnetPolicyArgs,
    live_policy,
)
from headscale_ha.policy.render import RenderedPolicy
from tests.support.component_run import build_component
from tools.harness import ProgramRun

LIVE_TYPE = "pulumi-python:dynamic/headscale:Policy"
#: The labels of the stand-in server Deployment the live policy waits for.
SERVER = {"app": "server"}


def _policy() -> RenderedPolicy:
    document = {"acls": [{"action": "accept", "src": ["group:admins"], "dst": ["*:*"]}]}
    text = json.dumps(document, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return RenderedPolicy(text=text, document=document, sha256=digest, version="0.28")


def _args(mode: PolicyMode, *, live: bool) -> TailnetPolicyArgs:
    return TailnetPolicyArgs(
        namespace="apps",
        policy=_policy(),
        mode=mode,
        live=LiveApi(url="https://vpn.example.org", headscale_version="0.28.0") if live else None,
    )


def _lone_policy(mode: PolicyMode, *, live: bool = False) -> tuple[ProgramRun, list[TailnetPolicy]]:
    """TailnetPolicy alone, then ``live_policy`` after a stand-in server Deployment (no stack file)."""
    args = _args(mode, live=live)
    built: list[TailnetPolicy] = []

    def build() -> None:
        policy = TailnetPolicy("tailnet", args)
        server = k8s.apps.v1.Deployment(
            "server",
            metadata={"name": "server", "namespace": "apps"},
            spec={"selector": {"matchLabels": SERVER}, "template": {"metadata": {"labels": SERVER}}},
        )
        live_policy(policy, args, after=[server], parent=policy)
        built.append(policy)

    return build_component(build), built


def _config_map(run: ProgramRun) -> dict:
    (found,) = [
        o for o in run.kubernetes_objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == POLICY_CONFIG_MAP
    ]
    return found


def test_the_config_map_publishes_the_text_and_its_hash() -> None:
    run, (policy,) = _lone_policy(PolicyMode.FILE)
    config_map = _config_map(run)
    assert config_map["metadata"]["namespace"] == "apps"
    text = config_map["data"]["policy.json"]
    assert text == _policy().text
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert config_map["metadata"]["annotations"][HASH_ANNOTATION] == digest
    assert config_map["metadata"]["annotations"]["headscale-ha/policy-mode"] == "file"
    assert policy.rendered.sha256 == digest
    assert policy.config_map_name == POLICY_CONFIG_MAP
    assert policy.enforced_from_start is True


@pytest.mark.parametrize(
    ("mode", "live_mode"),
    [(PolicyMode.FILE, "dryRun"), (PolicyMode.APPLY, "apply"), (PolicyMode.DATABASE_UNMANAGED, "dryRun")],
)
def test_with_api_access_the_live_policy_writes_only_in_apply_and_after_the_server(
    mode: PolicyMode, live_mode: str
) -> None:
    """A file-mode server refuses writes, so the provider only compares; `apply` writes. Either way after the
    resources it is given (the server this run rolled out)."""
    run, _ = _lone_policy(mode, live=True)
    (live,) = run.of_type(LIVE_TYPE)
    assert live.inputs["mode"] == live_mode
    assert live.inputs["policy"] == _policy().text
    assert run.named("server").urn in live.dependencies


def test_without_api_access_nothing_compares_or_writes() -> None:
    run, _ = _lone_policy(PolicyMode.FILE)
    assert run.of_type(LIVE_TYPE) == []


def test_the_component_refuses_apply_without_api_access() -> None:
    args = _args(PolicyMode.APPLY, live=False)
    with pytest.raises(ValueError, match=r"policy mode apply needs API access \(args.live\)"):
        build_component(lambda: TailnetPolicy("tailnet", args))


def test_database_mode_without_a_writer_is_warned_and_not_enforced_from_start() -> None:
    run, (policy,) = _lone_policy(PolicyMode.DATABASE_UNMANAGED)
    assert ALLOW_ALL_WARNING in run.warnings()
    assert policy.enforced_from_start is False
    assert _config_map(run)["metadata"]["annotations"]["headscale-ha/policy-mode"] == "databaseUnmanaged"


def test_file_mode_warns_of_no_allow_all() -> None:
    run, _ = _lone_policy(PolicyMode.FILE)
    assert not [w for w in run.warnings() if "databaseUnmanaged" in w]
