"""The Grafana dashboard (components/dashboard.py): its ConfigMap as the program renders it, the model's invariants,
which panels each scope gets, and every query parsed by the real promtool.

The queries also run against a real Prometheus scraping real Litestream and the state exporter: see
``test_e2e_every_dashboard_query_over_what_the_lab_serves_returns_series`` in test_alerts.py.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from headscale_ha.components.alerts import AlertScope, rule_file, state_exporter_script
from headscale_ha.components.dashboard import (
    DASHBOARD,
    DATA_KEY,
    ROWS,
    UID,
    dashboard_config_map,
    dashboard_model,
    dashboard_queries,
)
from headscale_ha.components.pod import labels
from headscale_ha.program.config import ConfigError
from tests.support.alert_scopes import NS, ROUTERS_NS, SCOPES, alert_scope
from tests.support.prometheus_lab import check_rules
from tools.harness import ProgramRun
from tools.plan import plan_stack

SIDECAR = {"grafana_dashboard": "1"}
PROJECT_LABELS = {
    "app.kubernetes.io/name": DASHBOARD,
    "app.kubernetes.io/component": "dashboard",
    "app.kubernetes.io/part-of": "headscale-ha",
    "app.kubernetes.io/managed-by": "pulumi",
}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: (scope, keys) pairs the invariants are checked on: every scope with and without provider-managed keys.
CASES = [(name, keys) for name in SCOPES for keys in (True, False)]
_METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")


def _model(name: str, keys: bool = True) -> dict[str, Any]:
    return dashboard_model(SCOPES[name], keys=keys)


def _rows(model: dict[str, Any]) -> dict[str, list[str]]:
    """Row title -> the titles of the panels under it, in order."""
    rows: dict[str, list[str]] = {}
    current: list[str] | None = None
    for panel in model["panels"]:
        if panel["type"] == "row":
            current = rows.setdefault(panel["title"], [])
        else:
            assert current is not None, f"panel {panel['title']!r} comes before any row"
            current.append(panel["title"])
    return rows


def _dashboard_config_map(run: ProgramRun) -> dict[str, Any] | None:
    found = [o for o in run.kubernetes_objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == DASHBOARD]
    assert len(found) <= 1
    return found[0] if found else None


def _rendered(run: ProgramRun, namespace: str, sidecar: dict[str, str]) -> dict[str, Any]:
    """The rendered dashboard's model, after checking its ConfigMap's whole metadata."""
    config_map = _dashboard_config_map(run)
    assert config_map is not None, "no dashboard ConfigMap rendered"
    assert config_map["metadata"] == {
        "name": DASHBOARD,
        "namespace": namespace,
        "labels": {**PROJECT_LABELS, **sidecar},
    }
    assert list(config_map["data"]) == [DATA_KEY]
    return json.loads(config_map["data"][DATA_KEY])


# --- the ConfigMap ----------------------------------------------------------------------------------------------


def test_config_map_carries_the_model_and_the_sidecar_label() -> None:
    model = _model("sqlite-active")
    config_map = dashboard_config_map(model, namespace=NS, sidecar_labels=SIDECAR)
    assert config_map["metadata"] == {
        "name": "headscale-ha-dashboard",
        "namespace": NS,
        "labels": {**PROJECT_LABELS, "grafana_dashboard": "1"},
    }
    assert labels(DASHBOARD, "dashboard") == PROJECT_LABELS
    assert list(config_map["data"]) == ["headscale-ha.json"]
    text = config_map["data"][DATA_KEY]
    assert json.loads(text) == model
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=1), "keys sorted: same model, same bytes"


def test_hydra_renders_the_dashboard_in_the_control_plane_namespace(run_stack) -> None:
    run = run_stack("hydra")
    model = _rendered(run, "headscale", SIDECAR)
    assert model["uid"] == UID == "headscale-ha"
    # hydra has no bootstrapApiKey: no provider-managed keys, so only the certificate is under Keys.
    assert _rows(model)["Keys"] == ["Time left on the public certificate"]
    (resource,) = [r for r in run.resources if r.inputs.get("metadata", {}).get("name") == DASHBOARD]
    assert resource.name == "hydra-monitoring-dashboard"
    (parent,) = [r for r in run.resources if r.urn == resource.parent_urn]
    assert parent.type == "headscale-ha:monitoring:StackMonitoring"


def test_provider_managed_keys_get_their_panel(stack_outputs) -> None:
    run = plan_stack("hydra", assume_secrets=["bootstrapApiKey"], stack_outputs=stack_outputs)
    rows = _rows(_rendered(run, "headscale", SIDECAR))
    assert rows["Keys"] == ["Time left on provider-managed keys", "Time left on the public certificate"]


def _lab_monitoring(run_stack, lab_project, monitoring: dict[str, Any]) -> ProgramRun:
    runbook = "https://git.example.org/ops/headscale-ha/docs/operations.md"
    block = yaml.safe_dump({"headscale-ha:monitoring": {"runbookUrl": runbook, **monitoring}})
    return run_stack("lab", project_dir=lab_project("  " + block.replace("\n", "\n  ").rstrip() + "\n"))


def test_the_namespace_and_labels_are_settings(run_stack, lab_project) -> None:
    run = _lab_monitoring(
        run_stack, lab_project, {"dashboardNamespace": "grafana", "dashboardLabels": {"team-dashboards": "ops"}}
    )
    queries = dashboard_queries(_rendered(run, "grafana", {"team-dashboards": "ops"}))
    assert all('namespace="headscale"' in expr or 'namespace="tailnet-gateway"' in expr for _, expr in queries)


@pytest.mark.parametrize("monitoring", [{"dashboard": False}, {"enabled": False}])
def test_no_dashboard_when_off(monitoring: dict[str, Any], run_stack, lab_project) -> None:
    assert _dashboard_config_map(_lab_monitoring(run_stack, lab_project, monitoring)) is None


def test_a_dashboard_namespace_that_is_not_a_dns_label_is_refused(run_stack, lab_project) -> None:
    with pytest.raises(ConfigError, match=r"monitoring\.dashboardNamespace: must be a DNS label"):
        _lab_monitoring(run_stack, lab_project, {"dashboardNamespace": "Grafana_NS"})


# --- the model ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "keys"), CASES)
def test_panels_have_unique_ids_and_titles_and_use_the_datasource_variable(name: str, keys: bool) -> None:
    model = _model(name, keys)
    assert model["schemaVersion"] == 39
    assert model["uid"] == UID
    (variable,) = model["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    panels = model["panels"]
    assert [panel["id"] for panel in panels] == list(range(1, len(panels) + 1))
    assert len({panel["title"] for panel in panels}) == len(panels)
    for panel in (panel for panel in panels if panel["type"] != "row"):
        assert panel["type"] in {"stat", "timeseries"}
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for ref, target in zip("ABCDEFGH", panel["targets"], strict=False):
            assert (target["datasource"], target["refId"]) == (DATASOURCE, ref), panel["title"]
        assert "$" not in "".join(target["expr"] for target in panel["targets"]), "no Grafana variable in PromQL"


@pytest.mark.parametrize(("name", "keys"), CASES)
def test_panels_fit_the_grid_without_overlapping(name: str, keys: bool) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in _model(name, keys)["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert 0 < grid["w"] <= 24 - grid["x"], panel["title"]
        for x, y in itertools.product(range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])):
            assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
            cells[(x, y)] = panel["title"]
    rows = [panel["gridPos"]["y"] for panel in _model(name, keys)["panels"] if panel["type"] == "row"]
    assert rows == sorted(rows)


def test_scope_decides_the_rows_and_panels() -> None:
    sqlite = _rows(_model("sqlite-active"))
    assert list(sqlite) == list(ROWS)
    assert "Local disk full" in sqlite["Replication"]
    assert "Seconds since the last WAL archival" not in sqlite["Replication"]
    assert "Restore and pre-upgrade restarts (15 min)" in sqlite["Control plane"]
    postgres = _rows(_model("postgres-stage"))
    assert {"Local disk full", "Seconds since the last WAL archival"} <= set(postgres["Replication"])
    no_litestream = _rows(_model("no-litestream"))
    assert no_litestream["Replication"] == ["Seconds since the last WAL archival", "WAL archiving failures per second"]
    assert "Restore and pre-upgrade restarts (15 min)" not in no_litestream["Control plane"]
    standby = _rows(_model("standby", keys=False))
    assert list(standby) == ["Control plane", "Replication"], "no certificate, no managed keys: no Keys row"
    bare = _rows(dashboard_model(alert_scope(apps=(), certificate=None, rehearsal=False), keys=False))
    assert list(bare) == ["Control plane"]


def test_replication_queries_follow_the_apps_and_the_lag() -> None:
    queries = dict(
        dashboard_queries(dashboard_model(alert_scope(apps=("headplane",), replication_lag_seconds=12), keys=False))
    )
    lacks = queries["Transactions the replica lacks (12s lag)"]
    assert "offset 12s" in lacks
    assert 'app=~"headplane"' in lacks
    assert "headscale|" not in lacks


@pytest.mark.parametrize(("name", "keys"), CASES)
def test_every_query_reads_only_series_the_alerts_or_the_exporter_rely_on(name: str, keys: bool) -> None:
    """Grounded: each metric a panel reads is one an alert reads or the state exporter writes, and each selector
    names the stack's namespace (the routers' own for the routers), as the alerts' selectors do."""
    everything = alert_scope(cnpg_cluster="headscale-db")
    known = set(_METRIC.findall(rule_file(everything))) | set(
        re.findall(r"headscale_ha_[a-z_]+", state_exporter_script())
    )
    for title, expr in dashboard_queries(_model(name, keys)):
        metrics = set(_METRIC.findall(expr))
        assert metrics, title
        assert metrics <= known, (title, metrics - known)
        namespace = ROUTERS_NS if title == "Subnet routers ready" else NS
        for selector in re.findall(r"[a-z_]+\{[^}]*\}", expr):
            assert f'namespace="{namespace}"' in selector, (title, selector)


def test_the_model_is_deterministic() -> None:
    for scope in SCOPES.values():
        assert dashboard_model(scope, keys=True) == dashboard_model(AlertScope(**vars(scope)), keys=True)


# --- promtool -----------------------------------------------------------------------------------------------------


@pytest.mark.real_tool("prometheus")
@pytest.mark.parametrize(("name", "keys"), CASES)
def test_promtool_parses_every_query(name: str, keys: bool, tmp_path: Path) -> None:
    """promtool has no "check query": each query becomes a recording rule, and `promtool check rules` parses it."""
    queries = dashboard_queries(_model(name, keys))
    rules = [{"record": f"headscale_ha_dashboard:query_{n}", "expr": expr} for n, (_, expr) in enumerate(queries)]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False))
    result = check_rules(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout
