"""The rendered Grafana dashboard, as a run (one StackMonitoring's or a whole stack's) registered it: its ConfigMap
with the whole metadata checked, and the rows of its model. Shared by tests/components/test_dashboard.py and
tests/program/test_site_dashboard.py."""

from __future__ import annotations

import json
from typing import Any

from headscale_ha.components.dashboard import DASHBOARD, DATA_KEY
from tools.harness import ProgramRun

SIDECAR = {"grafana_dashboard": "1"}
PROJECT_LABELS = {
    "app.kubernetes.io/name": DASHBOARD,
    "app.kubernetes.io/component": "dashboard",
    "app.kubernetes.io/part-of": "headscale-ha",
    "app.kubernetes.io/managed-by": "pulumi",
}


def rows(model: dict[str, Any]) -> dict[str, list[str]]:
    """Row title -> the titles of the panels under it, in order."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for panel in model["panels"]:
        if panel["type"] == "row":
            current = found.setdefault(panel["title"], [])
        else:
            assert current is not None, f"panel {panel['title']!r} comes before any row"
            current.append(panel["title"])
    return found


def dashboard_config_map_of(run: ProgramRun) -> dict[str, Any] | None:
    """The dashboard's ConfigMap, or None when the run rendered none."""
    found = [o for o in run.kubernetes_objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == DASHBOARD]
    assert len(found) <= 1
    return found[0] if found else None


def rendered_model(run: ProgramRun, namespace: str, sidecar: dict[str, str]) -> dict[str, Any]:
    """The rendered dashboard's model, after checking its ConfigMap's whole metadata."""
    config_map = dashboard_config_map_of(run)
    assert config_map is not None, "no dashboard ConfigMap rendered"
    assert config_map["metadata"] == {
        "name": DASHBOARD,
        "namespace": namespace,
        "labels": {**PROJECT_LABELS, **sidecar},
    }
    assert list(config_map["data"]) == [DATA_KEY]
    return json.loads(config_map["data"][DATA_KEY])


def dashboard_resource_and_parent(run: ProgramRun) -> tuple[Any, Any]:
    """The dashboard ConfigMap's registered resource and the resource it is a child of."""
    (resource,) = [r for r in run.resources if r.inputs.get("metadata", {}).get("name") == DASHBOARD]
    (parent,) = [r for r in run.resources if r.urn == resource.parent_urn]
    return resource, parent
