"""The availability report as a typed value, and its JSON form (the `availability_report` the page and the stack
output are made from: camelCase keys, in the order the page reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headscale_ha.program.availability.figures import ScenarioFigures


@dataclass(frozen=True)
class RedundancyRow:
    """What supplies redundancy for one component: its declared layout and the mechanism behind it."""

    component: str
    layout: str
    mechanism: str

    def to_json(self) -> dict[str, str]:
        return {"component": self.component, "layout": self.layout, "mechanism": self.mechanism}


@dataclass(frozen=True)
class FailureScenario:
    """One failure: what keeps working, what stops, and the figures of the `recovery` row it corresponds to."""

    scenario: str
    keeps: str
    stops: str
    figures: ScenarioFigures

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "whatKeepsWorking": self.keeps,
            "whatStops": self.stops,
            "recovery": self.figures.recovery,
            "figures": {app: dict(values) for app, values in self.figures.figures.items()},
            "rto": self.figures.rto,
            "rpo": self.figures.rpo,
        }


@dataclass(frozen=True)
class MaintenanceRow:
    """An upgrade or a voluntary disruption, and what it costs."""

    activity: str
    effect: str

    def to_json(self) -> dict[str, str]:
        return {"activity": self.activity, "effect": self.effect}


@dataclass(frozen=True, kw_only=True)
class AvailabilityReport:
    """What a stack's configuration can and cannot keep running: the classification, what it assumes, the tables of
    redundancy, failures and maintenance, what limits the claim and what would improve it."""

    source: str
    site: str
    role: str
    serving: bool
    stage: str
    storage: str
    nodes: int
    classification: str
    assumptions: tuple[str, ...]
    redundancy: tuple[RedundancyRow, ...]
    failures: tuple[FailureScenario, ...]
    maintenance: tuple[MaintenanceRow, ...]
    limits: tuple[str, ...]
    improvements: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "site": self.site,
            "role": self.role,
            "serving": self.serving,
            "stage": self.stage,
            "storage": self.storage,
            "nodes": self.nodes,
            "classification": self.classification,
            "assumptions": list(self.assumptions),
            "redundancy": [row.to_json() for row in self.redundancy],
            "failures": [row.to_json() for row in self.failures],
            "maintenance": [row.to_json() for row in self.maintenance],
            "limits": list(self.limits),
            "improvements": list(self.improvements),
        }
