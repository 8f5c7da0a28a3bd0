"""The figures of the availability report: copied from the stack's `recovery` output, never computed here.

program/recovery.py traces each of its numbers to the rendered pods, the committed measurement or a stated input; a
failure scenario of the report names the `recovery` row it quotes (`ScenarioFigures`), and the few figures its
sentences mention are read once (`RecoveryFacts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from headscale_ha.program.availability.phrases import APP_NAMES, Figures

#: The keys of a `recovery` row a scenario copies, named as there.
FIGURE_KEYS = ("rtoSeconds", "until", "rpoSeconds", "rpoLost")


def seconds(value: float) -> str:
    return Figures.SECONDS.format(seconds=value)


def recovery_rows(recovery: Mapping[str, Any], failure: str) -> dict[str, dict[str, Any]]:
    """The `recovery` rows of ``failure``, per modelled application (absent: not modelled, or no such row)."""
    rows: dict[str, dict[str, Any]] = {}
    for app, model in recovery.get("applications", {}).items():
        if not model.get("modelled"):
            continue
        row = next((r for r in model["failures"] if r["failure"] == failure), None)
        if row is not None:
            rows[app] = row
    return rows


def rto_text(row: Mapping[str, Any]) -> str:
    return Figures.UNTIL.format(until=row["until"]) if row["rtoSeconds"] is None else seconds(row["rtoSeconds"])


def rpo_text(row: Mapping[str, Any]) -> str:
    return str(row["rpoLost"]) if row["rpoSeconds"] is None else seconds(row["rpoSeconds"])


def _unmodelled(recovery: Mapping[str, Any], apps: Iterable[str]) -> list[str]:
    """Applications the `recovery` output covers but does not model (Headscale on PostgreSQL)."""
    models = recovery.get("applications", {})
    return [app for app in apps if app in models and not models[app].get("modelled")]


def _step(recovery: Mapping[str, Any], failure: str, step: str) -> float | None:
    """One step of a `recovery` row (the first modelled application's), e.g. nodeLoss's detection."""
    for row in recovery_rows(recovery, failure).values():
        if step in row["steps"]:
            return float(row["steps"][step])
    return None


@dataclass(frozen=True)
class ScenarioFigures:
    """The figures of one failure scenario: the `recovery` row they come from, its values per application, and
    both as text ("Headscale 20 s; Headplane 25 s")."""

    recovery: str | None
    """The `recovery` row (its `failure`); None where that output has none for the scenario."""
    figures: Mapping[str, Mapping[str, Any]]
    """Application → the row's `FIGURE_KEYS`, as the `recovery` output has them."""
    rto: str
    rpo: str


def scenario_figures(recovery: Mapping[str, Any], failure: str | None, apps: Iterable[str]) -> ScenarioFigures:
    """The figures of one scenario, copied from the `recovery` rows of ``failure`` for ``apps``."""
    apps = [app for app in apps if app in APP_NAMES]
    if failure is None:
        return ScenarioFigures(recovery=None, figures={}, rto=Figures.NOT_MODELLED, rpo=Figures.NO_FIGURE)
    rows = {app: row for app, row in recovery_rows(recovery, failure).items() if app in apps}
    rto = [Figures.OF_APP.format(app=APP_NAMES[app], figure=rto_text(row)) for app, row in rows.items()]
    rpo = [Figures.OF_APP.format(app=APP_NAMES[app], figure=rpo_text(row)) for app, row in rows.items()]
    for app in _unmodelled(recovery, apps):
        rto.append(Figures.OF_APP.format(app=APP_NAMES[app], figure=Figures.ON_POSTGRES))
        rpo.append(Figures.OF_APP.format(app=APP_NAMES[app], figure=Figures.ON_POSTGRES))
    return ScenarioFigures(
        recovery=failure,
        figures={app: {key: row[key] for key in FIGURE_KEYS} for app, row in rows.items()},
        rto=Figures.SEPARATOR.join(rto) or Figures.NOT_MODELLED,
        rpo=Figures.SEPARATOR.join(rpo) or Figures.NO_FIGURE,
    )


@dataclass(frozen=True, kw_only=True)
class RecoveryFacts:
    """The figures of the `recovery` output the report's sentences quote, as text (None: that output has none)."""

    node_loss_rpo: str | None
    """What Headscale loses with its node (nodeLoss)."""
    headscale_replaced: str | None
    """How long Headscale is away when its pod is replaced (podReplaced): an upgrade, a config change, a drain."""
    headplane_replaced: str | None
    force_detach: str | None
    """How long a claim takes to be forced off a dead node."""
    promotion: str | None
    """The stated time an operator takes to decide on a promotion."""
    detection: str | None
    """How long the cluster takes to notice a lost node (nodeLoss)."""
    stated_inputs: bool
    """Some of the output's figures rest on inputs stated in config rather than measured."""


def recovery_facts(recovery: Mapping[str, Any]) -> RecoveryFacts:
    """The figures of ``recovery`` the report's sentences quote."""
    replaced = recovery_rows(recovery, "podReplaced")
    node = recovery_rows(recovery, "nodeLoss").get("headscale")
    inputs = recovery.get("inputs", {})
    detach = inputs.get("facts", {}).get("forceDetachSeconds")
    promotion = inputs.get("stated", {}).get("promotionSeconds")
    detection = _step(recovery, "nodeLoss", "detection")
    return RecoveryFacts(
        node_loss_rpo=rpo_text(node) if node is not None else None,
        headscale_replaced=rto_text(replaced["headscale"]) if replaced.get("headscale") else None,
        headplane_replaced=rto_text(replaced["headplane"]) if replaced.get("headplane") else None,
        force_detach=seconds(detach) if detach is not None else None,
        promotion=seconds(promotion) if promotion is not None else None,
        detection=seconds(detection) if detection is not None else None,
        stated_inputs=bool(inputs.get("stated", {})),
    )
