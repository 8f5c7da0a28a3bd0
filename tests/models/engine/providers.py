"""The providers the engine model configures: one interface over pulumi-kubernetes (the model of it), pulumi-random
(what it computes) and the SDK's dynamic provider host (the real one, over gRPC).

Every adapter answers as its provider does in a preview too: pulumi-kubernetes and pulumi-random support preview
(a create answers with its inputs, what the provider computes unknown); the dynamic host does not, so the engine
itself takes the inputs as the outputs of a create or an update it previews.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tests.models.engine.dynamic import DynamicHost
from tests.models.engine.kubernetes import FIELD_MANAGER, KubernetesProvider
from tests.models.engine.state import holds_unknown
from tools import pulumi_internals as sdk
from tools.fields import diff_values
from tools.harness import _random_state
from tools.kubernetes_rules import replacing_inputs


@dataclass(frozen=True)
class Diff:
    changed: bool
    replace_reasons: tuple[str, ...] = ()
    delete_before_replace: bool = False
    fields: tuple[str, ...] = ()


class Provider(Protocol):
    def check(self, urn: str, olds: Mapping[str, Any] | None, news: dict[str, Any]) -> dict[str, Any]: ...

    def diff(self, urn: str, id_: str, old_inputs: dict, old_outputs: dict, news: dict) -> Diff: ...

    def create(self, urn: str, inputs: dict[str, Any], *, preview: bool) -> tuple[str, dict[str, Any]]: ...

    def update(self, urn: str, id_: str, old_outputs: dict, news: dict, *, preview: bool) -> dict[str, Any]: ...

    def delete(self, urn: str, id_: str, outputs: dict[str, Any]) -> None: ...


def _field_texts(old: Any, new: Any) -> tuple[str, ...]:
    return tuple(sorted({c.text for c in diff_values(old, new) if c.path[:1] != ("__provider",)}))


def _type(urn: str) -> str:
    """The resource's own type token (the last of the URN's type chain)."""
    return urn.split("::")[2].rsplit("$", 1)[-1]


class KubernetesAdapter:
    def __init__(self, model: KubernetesProvider) -> None:
        self.model = model

    def check(self, urn: str, olds: Mapping[str, Any] | None, news: dict[str, Any]) -> dict[str, Any]:
        return self.model.check(urn.rsplit("::", 1)[1], urn, olds, news)

    def diff(self, urn: str, id_: str, old_inputs: dict, old_outputs: dict, news: dict) -> Diff:
        result = self.model.diff(old_inputs, old_outputs, news)
        return Diff(
            result.changed,
            result.replace_reasons,
            result.delete_before_replace,
            tuple(sorted({f.text for f in result.fields})),
        )

    def create(self, urn: str, inputs: dict[str, Any], *, preview: bool) -> tuple[str, dict[str, Any]]:
        return self.model.create(inputs, preview=preview, patch=_is_patch(urn), manager=_manager(urn, inputs))

    def update(self, urn: str, id_: str, old_outputs: dict, news: dict, *, preview: bool) -> dict[str, Any]:
        manager = _manager(urn, news)
        return self.model.update(old_outputs, news, preview=preview, patch=_is_patch(urn), manager=manager)

    def delete(self, urn: str, id_: str, outputs: dict[str, Any]) -> None:
        self.model.delete(outputs, patch=_is_patch(urn))


def _manager(urn: str, inputs: Mapping[str, Any]) -> str:
    """The SSA field manager: ``pulumi.com/patchFieldManager``, else the resource's own (drawn at its Check)."""
    annotations = ((inputs.get("metadata") or {}).get("annotations")) or {}
    return str(annotations.get("pulumi.com/patchFieldManager") or inputs.get(FIELD_MANAGER) or f"pulumi:{urn}")


def _is_patch(urn: str) -> bool:
    """pulumi-kubernetes' Patch resources (``kubernetes:core/v1:ConfigMapPatch``): server-side apply only."""
    return _type(urn).endswith("Patch")


class RandomAdapter:
    """pulumi-random: an input change replaces (the rule table's ``replacing_inputs``), values computed once."""

    def check(self, urn: str, olds: Mapping[str, Any] | None, news: dict[str, Any]) -> dict[str, Any]:
        return news

    def diff(self, urn: str, id_: str, old_inputs: dict, old_outputs: dict, news: dict) -> Diff:
        changes = [c for c in diff_values(old_inputs, news) if c.path[:1] != ("__provider",)]
        replacing = sorted({c.text for c in replacing_inputs(_type(urn), changes)})
        fields = tuple(sorted({c.text for c in changes}))
        return Diff(bool(fields), tuple(f"{f} changed: pulumi-random replaces" for f in replacing), False, fields)

    def create(self, urn: str, inputs: dict[str, Any], *, preview: bool) -> tuple[str, dict[str, Any]]:
        if preview or holds_unknown(inputs):
            return "", dict(inputs)
        name = urn.rsplit("::", 1)[1]
        # New values on every create (a replacement rotates them), as pulumi-random draws them.
        computed = _random_state(_type(urn), f"{name} {uuid.uuid4()}", inputs) or {}
        return f"{name}-id", {**inputs, **computed}

    def update(self, urn: str, id_: str, old_outputs: dict, news: dict, *, preview: bool) -> dict[str, Any]:
        return {**old_outputs, **news}

    def delete(self, urn: str, id_: str, outputs: dict[str, Any]) -> None:
        return None


class DynamicAdapter:
    """The SDK's dynamic provider host. The engine passes old *outputs* as ``olds`` to Diff, Update and Delete and
    old inputs as ``olds`` to Check (plugin/provider_plugin.go)."""

    def __init__(self, host: DynamicHost) -> None:
        self.host = host

    def check(self, urn: str, olds: Mapping[str, Any] | None, news: dict[str, Any]) -> dict[str, Any]:
        return self.host.check(urn, olds, news)

    def diff(self, urn: str, id_: str, old_inputs: dict, old_outputs: dict, news: dict) -> Diff:
        result = self.host.diff(urn, id_, old_outputs, news)
        fields = _field_texts(old_inputs, news)
        # DIFF_UNKNOWN: the engine compares the inputs itself (a change is an update).
        changed = bool(fields) if result.changes is None else result.changes
        reasons = tuple(f"{key}: its provider replaces" for key in result.replaces)
        return Diff(changed or bool(reasons), reasons, result.delete_before_replace, fields)

    def create(self, urn: str, inputs: dict[str, Any], *, preview: bool) -> tuple[str, dict[str, Any]]:
        if preview:
            return "", dict(inputs)
        return self.host.create(urn, inputs)

    def update(self, urn: str, id_: str, old_outputs: dict, news: dict, *, preview: bool) -> dict[str, Any]:
        if preview:
            return dict(news)
        return self.host.update(urn, id_, old_outputs, news)

    def delete(self, urn: str, id_: str, outputs: dict[str, Any]) -> None:
        self.host.delete(urn, id_, outputs)


def unknown_id() -> str:
    return sdk.UNKNOWN
