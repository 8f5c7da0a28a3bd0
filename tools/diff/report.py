"""What ``make diff`` found: per resource a Change, per stack its DATA LOSS lines and warnings, and the exit status.

The comparison fills these (tools/diff/stacks.py), the renderer prints them (tools/diff/render.py). A value and a
field change read in one line (``show_value``, ``short_change``) the same in a reason, a DATA LOSS line and a field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tools.diff.effects import WorkloadEffect
from tools.fields import ABSENT, FieldChange, is_unknown

EXIT_NO_CHANGE = 0
EXIT_CHANGES = 1
EXIT_ERROR = 2
EXIT_DATA_LOSS = 3


def show_value(value: Any, limit: int = 100) -> str:
    """``value`` as JSON on one line, cut to ``limit`` characters (``absent`` and unknowns in words)."""
    if value is ABSENT:
        return "absent"
    if is_unknown(value):
        return "[unknown until deployed]"
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + f"… ({len(text)} chars)"


def short_change(change: FieldChange) -> str:
    """``spec.storageClassName changed "ceph-block" -> "local-path"`` (secrets: ``changed`` only)."""
    if change.secret:
        return f"{change.text} changed"
    return f"{change.text} changed {show_value(change.old, 60)} -> {show_value(change.new, 60)}"


@dataclass
class Change:
    """What happens to one resource: create, delete, update or replace."""

    action: str
    label: str
    urn: str
    type: str
    name: str
    old_urn: str | None = None
    fields: list[FieldChange] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The first replacement reason, short (what a DATA LOSS line quotes); refusals of an adopted object mention it.
    cause: str | None = None
    immutable_field: bool = False  # replaced for a field the API server refuses to update
    #: What the update does to a workload's pods (tools/diff/effects.py), and the policy rules it changes.
    effect: WorkloadEffect | None = None
    policy: list[str] = field(default_factory=list)

    def replace_because(self, cause: str, reason: str) -> None:
        self.cause = self.cause or cause
        self.reasons.append(reason)


@dataclass(frozen=True)
class Finding:
    """A DATA LOSS line (``data_loss``) or a warning."""

    data_loss: bool
    text: str


@dataclass
class StackDiff:
    """Everything that changes in one stack."""

    name: str
    changes: list[Change] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    outputs: list[FieldChange] = field(default_factory=list)
    config: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes or self.findings or self.outputs or self.config or self.notes or self.errors)

    def count(self, action: str) -> int:
        return sum(1 for c in self.changes if c.action == action)


@dataclass
class Report:
    """The diff of every compared stack."""

    base_label: str = "base"
    head_label: str = "head"
    stacks: list[StackDiff] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def data_loss(self) -> list[Finding]:
        return [f for s in self.stacks for f in s.findings if f.data_loss]


def exit_code(report: Report) -> int:
    """0 no change, 1 changes, 3 DATA LOSS, 2 the diff is incomplete (errors), whatever else it found."""
    if report.errors or any(s.errors for s in report.stacks):
        return EXIT_ERROR
    if report.data_loss:
        return EXIT_DATA_LOSS
    return EXIT_CHANGES if any(s.changed for s in report.stacks) else EXIT_NO_CHANGE
