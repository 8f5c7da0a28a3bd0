"""The one rule table: `make diff` (tools/diff/) and the engine model's pulumi-kubernetes (tests/support/engine)
give the same verdict for every row, because both read tools/kubernetes_rules.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.engine.apiserver import ApiError, Cluster
from tests.support.engine.kubernetes import KubernetesProvider
from tools.diff.changes import StackContext, compare
from tools.diff.report import Change
from tools.diff.resources import Pair, Resource
from tools.fields import diff_values, pattern
from tools.kubernetes_rules import IMMUTABLE_FIELDS, REFUSE, REPLACE, ImmutableField, ProviderFlags, refusal


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


def _diff_py(old: dict[str, Any], new: dict[str, Any], flags: ProviderFlags) -> Change | None:
    config = {
        "kubernetes:enableConfigMapMutable": str(flags.config_map_mutable).lower(),
        "kubernetes:enableSecretMutable": str(flags.secret_mutable).lower(),
    }
    entries = [
        Resource.from_dump(
            {"urn": "urn:pulumi:s::p::kubernetes:x::r", "type": "kubernetes:x", "name": "r", "inputs": o}
        )
        for o in (old, new)
    ]
    ctx = StackContext(base={}, head={}, head_config=config, stateful_namespaces={})
    return compare(Pair(entries[0], entries[1], "urn"), ctx)


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
