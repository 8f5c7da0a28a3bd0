"""The one rule table: `make diff` (tools/diff/) and the engine model's pulumi-kubernetes (tests/models/engine)
give the same verdict for every row and rule, because both read tools/kubernetes_rules.py; and the table's
``DYNAMIC_REPLACES`` says what the dynamic providers' own ``diff()`` does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from headscale_ha.provider.base import forget_shared_clients
from headscale_ha.provider.client import HeadscaleClient
from headscale_ha.provider.resources import (
    ApiKey,
    ApiKeyProvider,
    HeadscalePolicy,
    HeadscaleUser,
    NodeSettings,
    NodeSettingsProvider,
    PolicyProvider,
    PreAuthKey,
    PreAuthKeyProvider,
    UserProvider,
)
from tests.models.engine.apiserver import ApiError, Cluster
from tests.models.engine.kubernetes import AwaitError, KubernetesProvider
from tests.models.engine.providers import RandomAdapter
from tests.models.headscale import FakeHeadscale
from tests.support.provider_resources import KEY_PROPS, OTHER_POLICY, policy_props
from tools.diff.changes import StackContext, compare, deletes_first
from tools.diff.report import Change
from tools.diff.resources import Pair, Resource
from tools.fields import diff_values, pattern
from tools.kubernetes_rules import (
    DYNAMIC_REPLACES,
    IMMUTABLE_FIELDS,
    REFUSE,
    REPLACE,
    ImmutableField,
    ProviderFlags,
    changes_identity,
    deletes_before_replace,
    refusal,
    replacing_inputs,
)


def _api_version(rule: ImmutableField) -> str:
    if rule.api_versions:
        return rule.api_versions[0]
    return f"{rule.group}/v1" if rule.group else "v1"


def _put(target: dict[str, Any], tokens: tuple, value: Any) -> None:
    """Build the object down ``tokens`` (``*`` is one named list item)."""
    for index, token in enumerate(tokens):
        last = index == len(tokens) - 1
        if token == "*" or isinstance(token, int):
            continue
        following = tokens[index + 1] if not last else None
        if last:
            target[token] = value
        elif following == "*" or isinstance(following, int):
            item: dict[str, Any] = {"name": "main"}
            target.setdefault(token, [item])
            target = target[token][0]
        else:
            target = target.setdefault(token, {})


def _pair(rule: ImmutableField) -> tuple[dict[str, Any], dict[str, Any]]:
    kind = rule.kinds[0]
    base = {"apiVersion": _api_version(rule), "kind": kind, "metadata": {"name": "x", "namespace": "ns"}}
    old, new = {**base}, {**base, "metadata": {**base["metadata"]}}
    tokens = pattern(rule.path)
    _put(old, tokens, {"k": "a"} if tokens[-1] in ("data", "stringData", "binaryData", "spec") else "a")
    _put(new, tokens, {"k": "b"} if tokens[-1] in ("data", "stringData", "binaryData", "spec") else "b")
    if rule.condition == "was-immutable":
        old["immutable"], new["immutable"] = True, False
    return old, new


def _resources(old: dict[str, Any], new: dict[str, Any], type_: str = "kubernetes:x") -> tuple[Resource, Resource]:
    """The base and head resource ``r`` of these inputs, as a dump holds them."""
    first, second = (
        Resource.from_dump({"urn": f"urn:pulumi:s::p::{type_}::r", "type": type_, "name": "r", "inputs": o})
        for o in (old, new)
    )
    return first, second


def _diff_py(
    old: dict[str, Any], new: dict[str, Any], flags: ProviderFlags, type_: str = "kubernetes:x"
) -> Change | None:
    config = {
        "kubernetes:enableConfigMapMutable": str(flags.config_map_mutable).lower(),
        "kubernetes:enableSecretMutable": str(flags.secret_mutable).lower(),
    }
    ctx = StackContext(base={}, head={}, head_config=config, stateful_namespaces={})
    return compare(Pair(*_resources(old, new, type_), "urn"), ctx)


REPLACE_ROWS = [r for r in IMMUTABLE_FIELDS if r.effect == REPLACE and r.condition not in ("set",)]


@pytest.mark.parametrize("rule", REPLACE_ROWS, ids=lambda r: f"{r.kinds[0]}:{r.path}")
@pytest.mark.parametrize("mutable", [False, True], ids=["default-flags", "mutable-flags"])
def test_every_replace_row_replaces_in_both_the_diff_and_the_engine_model(rule: ImmutableField, mutable: bool) -> None:
    old, new = _pair(rule)
    flags = ProviderFlags(config_map_mutable=mutable, secret_mutable=mutable)
    model = KubernetesProvider(
        {"enableConfigMapMutable": str(mutable).lower(), "enableSecretMutable": str(mutable).lower()}, Cluster("c"), {}
    )
    verdict = model.diff(old, old, new)
    predicted = _diff_py(old, new, flags)
    data_row = rule.condition in ("secret-data-replaces", "configmap-data-replaces")
    expect_replace = not (data_row and mutable)
    assert bool(verdict.replace_reasons) is expect_replace, verdict
    assert predicted is not None
    assert (predicted.action == "replace") is expect_replace, predicted
    # Fixed name, same namespace: pulumi-kubernetes deletes before it replaces.
    assert verdict.delete_before_replace is expect_replace


REFUSE_ROWS = [r for r in IMMUTABLE_FIELDS if r.effect == REFUSE and not r.unless and not r.condition]


@pytest.mark.parametrize("rule", REFUSE_ROWS, ids=lambda r: f"{r.kinds[0]}:{r.path}")
def test_every_refuse_row_is_an_update_the_api_server_refuses(rule: ImmutableField) -> None:
    old, new = _pair(rule)
    predicted = _diff_py(old, new, ProviderFlags())
    assert predicted is not None
    assert predicted.action == "update"
    assert any(f.refused for f in predicted.fields), predicted.fields
    cluster = Cluster("c")
    cluster.objects.clear()
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    cluster.create(old)
    with pytest.raises(ApiError, match="field is immutable"):
        cluster.patch(new)
    change = next(c for c in diff_values(old, new) if c.path[0] != "metadata")
    assert refusal(change, old, new, ProviderFlags()) is not None


def test_a_row_that_does_not_apply_to_the_kind_changes_nothing() -> None:
    old = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "spec": {"selector": "a"}}
    new = {**old, "spec": {"selector": "b"}}
    assert KubernetesProvider({}, Cluster("c"), {}).diff(old, old, new).replace_reasons == ()
    change = _diff_py(old, new, ProviderFlags())
    assert change is not None
    assert change.action == "update"


# ------------------------------------------------------------------------------------- identity, delete first

CONFIG_MAP_URN = "urn:pulumi:s::p::kubernetes:core/v1:ConfigMap::r"


def _config_map(name: str | None, namespace: str = "ns", value: str = "1") -> dict[str, Any]:
    """A ConfigMap resource ``r``'s inputs (``name`` None: left to pulumi-kubernetes' autonaming)."""
    metadata = {"namespace": namespace, **({"name": name} if name else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"a": value}}


def _checked(model: KubernetesProvider, old: dict[str, Any], new: dict[str, Any]) -> tuple[dict, dict]:
    """Both inputs after the model's Check, as the engine hands them to Diff (the new ones checked with the old)."""
    checked_old = model.check("r", CONFIG_MAP_URN, None, old)
    return checked_old, model.check("r", CONFIG_MAP_URN, checked_old, new)


@pytest.mark.parametrize(
    ("old", "new", "replaced", "first"),
    [
        (_config_map("r"), _config_map("r", value="2"), True, True),
        (_config_map("r"), _config_map("other"), True, False),
        (_config_map("r"), _config_map("r", namespace="elsewhere"), True, False),
        (_config_map(None), _config_map(None, value="2"), True, False),
        (_config_map(None), _config_map("r"), True, False),
        (_config_map("r"), _config_map(None), True, False),
        (_config_map("r"), {**_config_map("r"), "metadata": {"name": "r", "namespace": "ns", "labels": {"a": "b"}}},
         False, True),
    ],
    ids=["named", "renamed", "moved", "autonamed", "autonamed-then-named", "named-then-autonamed", "labels"],
)  # fmt: skip
def test_identity_and_delete_first_are_the_table_s_in_both(
    old: dict[str, Any], new: dict[str, Any], replaced: bool, first: bool
) -> None:
    """A replaced object is deleted first only when the program names it and it keeps that name (pulumi-kubernetes'
    Diff); an autonamed one gets a fresh name and is created first, whether `make diff` sees its inputs (no name) or
    the engine model its checked ones (an autoname and the annotation)."""
    model = KubernetesProvider({}, Cluster("c"), {})
    checked_old, checked_new = _checked(model, old, new)
    assert deletes_before_replace(old, new) is first
    assert deletes_before_replace(checked_old, checked_new) is first
    verdict = model.diff(checked_old, checked_old, checked_new)
    assert (bool(verdict.replace_reasons), verdict.delete_before_replace) == (replaced, replaced and first), verdict
    predicted = _diff_py(old, new, ProviderFlags())
    assert predicted is not None
    assert predicted.action == ("replace" if replaced else "update"), predicted
    if replaced:
        assert deletes_first(predicted, *_resources(old, new)) is first
    same_name = "same name: pulumi-kubernetes deletes the old object before it creates the new one"
    assert (same_name in predicted.notes) is (replaced and first)


@pytest.mark.parametrize(
    ("api_version", "kind"), [("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("postgresql.cnpg.io/v1", "Cluster")]
)
@pytest.mark.parametrize("field", ["name", "namespace"])
def test_a_name_or_namespace_change_replaces_any_kind_in_both(api_version: str, kind: str, field: str) -> None:
    old = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "r", "namespace": "ns"}, "spec": {"x": 1}}
    new = {**old, "metadata": {**old["metadata"], field: "other"}}
    (change,) = diff_values(old, new)
    assert changes_identity(change)
    verdict = KubernetesProvider({}, Cluster("c"), {}).diff(old, old, new)
    assert verdict.replace_reasons == (f"metadata.{field} changed",)
    assert not verdict.delete_before_replace
    predicted = _diff_py(old, new, ProviderFlags())
    assert predicted is not None
    assert predicted.action == "replace"
    assert predicted.cause == f'metadata.{field} changed "{old["metadata"][field]}" -> "other"'
    spec_change = diff_values(old, {**old, "spec": {"x": 2}})[0]
    assert not changes_identity(spec_change)


# ------------------------------------------------------------------------------------------------ other providers


def test_pulumi_random_replaces_on_any_input_change_in_both() -> None:
    type_ = "random:index/randomPassword:RandomPassword"
    old, new = {"length": 32, "special": False}, {"length": 40, "special": True}
    changes = diff_values(old, new)
    assert replacing_inputs(type_, changes) == changes
    verdict = RandomAdapter().diff(f"urn:pulumi:s::p::{type_}::r", "r-id", old, old, new)
    assert verdict.replace_reasons == (
        "length changed: pulumi-random replaces",
        "special changed: pulumi-random replaces",
    )
    predicted = _diff_py(old, new, ProviderFlags(), type_)
    assert predicted is not None
    assert predicted.reasons == [
        "pulumi-random replaces on any input change: length changed 32 -> 40, special changed false -> true"
    ]


@pytest.fixture
def headscale() -> Iterator[HeadscaleClient]:
    """A fake Headscale (the current release) with user erin's node router-0, and a client of it."""
    forget_shared_clients()
    now = datetime.now(UTC).replace(microsecond=0)
    server = FakeHeadscale(now=lambda: now).start()
    try:
        client = HeadscaleClient(server.url, server.admin_key, timeout=5, retries=2, backoff=0.0, sleep=lambda _: None)
        client.create_user("erin")
        server.register_node("router-0", user="erin", available_routes=["10.0.0.0/24"])
        yield client
        assert server.contract_violations == [], "\n".join(server.contract_violations)
    finally:
        server.stop()
        forget_shared_clients()


NODE = {
    "nodeName": "router-0",
    "user": "erin",
    "tags": None,
    "approvedRoutes": ["10.0.0.0/24"],
    "givenName": "edge-router",
    "deleteOnDestroy": False,
}
#: Each dynamic resource: its provider, the inputs a program gives it (the outputs' placeholders aside), and another
#: value for each of them.
DYNAMIC: list[tuple[type, type, dict[str, Any], dict[str, Any]]] = [
    (
        HeadscaleUser,
        UserProvider,
        {"name": "alice", "displayName": "Alice", "email": "a@example.com", "forceDelete": False},
        {"name": "alicia", "displayName": "A.", "email": "b@example.com", "forceDelete": True},
    ),
    (
        PreAuthKey,
        PreAuthKeyProvider,
        KEY_PROPS,
        {
            "user": "erin",
            "reusable": False,
            "ephemeral": True,
            "aclTags": ["tag:other"],
            "lifetime": "24h",
            "rotateBefore": "48h",
            "recreateIfInvalid": "always",
        },
    ),
    (ApiKey, ApiKeyProvider, {"lifetime": "90d", "rotateBefore": "14d"}, {"lifetime": "30d", "rotateBefore": "7d"}),
    (
        NodeSettings,
        NodeSettingsProvider,
        NODE,
        {
            "nodeName": "router-1",
            "user": "frank",
            "tags": ["tag:router"],
            "approvedRoutes": [],
            "givenName": "other-router",
            "deleteOnDestroy": True,
        },
    ),
    (
        HeadscalePolicy,
        PolicyProvider,
        policy_props(),
        {"policy": OTHER_POLICY, "mode": "dryRun", "overwriteExisting": True, "resetOnDestroy": True},
    ),
]


@pytest.mark.parametrize(
    ("resource", "provider", "inputs", "others"),
    DYNAMIC,
    ids=["User", "PreAuthKey", "ApiKey", "NodeSettings", "Policy"],
)
def test_dynamic_replaces_is_what_each_provider_s_diff_replaces(
    headscale: HeadscaleClient, resource: type, provider: type, inputs: dict[str, Any], others: dict[str, Any]
) -> None:
    """Each input changed alone, through the provider's real ``diff()`` of a resource it created: the inputs whose
    change it replaces on are the table's, which `make diff` reads (``replacing_inputs``)."""
    assert set(others) == set(inputs)
    type_ = f"pulumi-python:{resource._resource_type_name}"
    live = provider().use(headscale)
    created = live.create(dict(inputs))
    replacing = {
        key for key, value in others.items() if live.diff(created.id, created.outs, {**inputs, key: value}).replaces
    }
    assert replacing == set(DYNAMIC_REPLACES.get(type_, ()))
    for key, value in others.items():
        assert bool(replacing_inputs(type_, diff_values(inputs, {**inputs, key: value}))) is (key in replacing)


# ------------------------------------------------------------------------------------------------ immutable objects

IMMUTABLE_DATA_ROWS = [r for r in IMMUTABLE_FIELDS if r.condition == "stored-immutable"]


def _cluster_with(obj: dict[str, Any]) -> Cluster:
    cluster = Cluster("c")
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    cluster.create(obj)
    return cluster


@pytest.mark.parametrize("rule", IMMUTABLE_DATA_ROWS, ids=lambda r: f"{r.kinds[0]}:{r.path}")
def test_the_data_of_an_immutable_object_cannot_change_in_both(rule: ImmutableField) -> None:
    """pkg/apis/core/validation: an `immutable: true` ConfigMap's or Secret's data is refused as an update (so
    `make diff` warns that an adoption of the old object fails), and the engine model's API server refuses it; made
    immutable by the same update, it is accepted."""
    old, new = _pair(rule)
    old["immutable"] = new["immutable"] = True
    change = next(c for c in diff_values(old, new) if c.path[0] == rule.path)
    assert refusal(change, old, new, ProviderFlags()) == rule.why
    predicted = _diff_py(old, new, ProviderFlags(config_map_mutable=True, secret_mutable=True))
    assert predicted is not None
    assert (predicted.action, predicted.immutable_field) == ("replace", True)
    with pytest.raises(ApiError, match="field is immutable"):
        _cluster_with(old).patch(new)
    # The program never set `immutable` (the live object got it elsewhere): pulumi-kubernetes updates, the API
    # server refuses.
    olds, news = ({k: v for k, v in o.items() if k != "immutable"} for o in (old, new))
    cluster = _cluster_with(old)
    model = KubernetesProvider({"enableConfigMapMutable": "true", "enableSecretMutable": "true"}, cluster, {})
    assert model.diff(olds, old, news).replace_reasons == ()
    with pytest.raises(AwaitError, match="field is immutable"):
        model.update(old, news, preview=False)
    # Made immutable together with the data change: accepted.
    mutable = {k: v for k, v in old.items() if k != "immutable"}
    assert refusal(change, mutable, new, ProviderFlags()) is None
    assert _cluster_with(mutable).patch(new)["immutable"] is True
    predicted = _diff_py(mutable, new, ProviderFlags())
    assert predicted is not None
    assert (predicted.action, predicted.immutable_field) == ("replace", False)


def test_an_immutable_object_cannot_be_made_mutable_in_both() -> None:
    old = {**_config_map("r"), "immutable": True}
    new = {**_config_map("r"), "immutable": False}
    predicted = _diff_py(old, new, ProviderFlags())
    assert predicted is not None
    assert [f.refused for f in predicted.fields] == ["`immutable: true` cannot be unset"]
    with pytest.raises(ApiError, match="`immutable: true` cannot be unset"):
        _cluster_with(old).patch(new)


# ------------------------------------------------------------------------------------------------ provider options


def test_the_mutable_flags_are_the_provider_s_then_the_environment_s_in_both() -> None:
    """provider.go, Configure: a provider's own enableConfigMapMutable / enableSecretMutable wins over the
    environment variables; `make diff` assumes they are unset."""
    env = {"PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE": "true", "PULUMI_K8S_ENABLE_SECRET_MUTABLE": "true"}
    assert ProviderFlags.of({}) == ProviderFlags()
    assert ProviderFlags.of({}, env) == ProviderFlags(config_map_mutable=True, secret_mutable=True)
    assert ProviderFlags.of({"enableConfigMapMutable": "false"}, env) == ProviderFlags(secret_mutable=True)
    assert ProviderFlags.of({"enableSecretMutable": "true"}) == ProviderFlags(secret_mutable=True)
    model = KubernetesProvider({"enableConfigMapMutable": "false"}, Cluster("c"), env)
    assert model.flags == ProviderFlags(secret_mutable=True)
