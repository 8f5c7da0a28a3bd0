"""The engine model's checkpoint: resources with inputs, outputs, provider, dependencies and options, and the steps
a run took, printed the way `pulumi preview` lists them."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from tools import pulumi_internals as sdk


def unwrap_secrets(value: Any) -> Any:
    """Plain values, secrets unwrapped (what a provider that does not accept secrets receives)."""
    if sdk.is_rpc_secret(value):
        return unwrap_secrets(value["value"])
    if isinstance(value, dict):
        return {k: unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(v) for v in value]
    return value


def holds_secret(value: Any) -> bool:
    if sdk.is_rpc_secret(value):
        return True
    if isinstance(value, dict):
        return any(holds_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_secret(v) for v in value)
    return False


def holds_unknown(value: Any) -> bool:
    if value == sdk.UNKNOWN:
        return True
    if isinstance(value, dict):
        return any(holds_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_unknown(v) for v in value)
    return False


@dataclass
class ResourceState:
    """One resource of a stack's state (plain values; ``secret_keys`` are the top-level keys held as secrets)."""

    urn: str
    type: str
    custom: bool
    id: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    parent: str | None = None
    provider: str = ""  # "urn::id" of the provider resource (custom resources)
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: list[str] = field(default_factory=list)
    protect: bool = False
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    secret_keys: frozenset[str] = frozenset()
    init_errors: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[1]

    @property
    def provider_urn(self) -> str:
        return self.provider.rsplit("::", 1)[0] if self.provider else ""

    def copy(self) -> ResourceState:
        return copy.deepcopy(self)


@dataclass(frozen=True)
class Step:
    """One step as `pulumi preview` shows it. ``op``: same, create, update, replace, delete; ``how`` for a replace:
    create-before-delete or delete-before-replace; for a delete: retained (retainOnDelete, nothing deleted)."""

    op: str
    urn: str
    type: str
    how: str = ""
    reasons: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[1]

    def line(self) -> str:
        symbol = {"same": " ", "create": "+", "update": "~", "replace": "+-", "delete": "-"}[self.op]
        extra = f" ({self.how})" if self.how else ""
        detail = f" [{'; '.join(self.reasons or self.fields)}]" if (self.reasons or self.fields) else ""
        return f"{symbol:>2} {self.type} {self.name} {self.op}{extra}{detail}"


@dataclass
class RunResult:
    """What a preview, up or destroy did: its steps in order, and the error that failed it (None: it succeeded)."""

    kind: str
    steps: list[Step] = field(default_factory=list)
    error: str | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def ops(self, *, include_same: bool = False) -> list[tuple[str, str]]:
        return [(s.op, s.name) for s in self.steps if include_same or s.op != "same"]

    def of(self, name: str) -> Step:
        matches = [s for s in self.steps if s.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} steps for {name!r}: {[s.line() for s in matches]}")
        return matches[0]

    def changes(self) -> list[Step]:
        return [s for s in self.steps if s.op != "same"]

    def text(self) -> str:
        lines = [s.line() for s in self.steps if s.op != "same"]
        counts: dict[str, int] = {}
        for step in self.steps:
            counts[step.op] = counts.get(step.op, 0) + 1
        lines.append("Resources: " + ", ".join(f"{n} {op}" for op, n in sorted(counts.items())))
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)
