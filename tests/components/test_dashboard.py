"""The Grafana dashboard (components/dashboard.py): its ConfigMap, as StackMonitoring renders it alone from
hand-written Args, the model's invariants, which panels each scope gets, and every query parsed by the real
promtool. What the stacks' config renders (hydra's dashboard, the keys a bootstrapApiKey brings, the
`monitoring.dashboard*` settings) is in tests/program/test_site_dashboard.py.

The queries also run against a real Prometheus scraping real Litestream and the state exporter: see
``test_e2e_every_dashboard_query_over_what_the_lab_serves_returns_series`` in test_alerts_e2e.py.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from headscale_ha.components.alerts import AlertRulesInput, rule_file, state_exporter_script
from headscale_ha.components.dashboard import (
    DASHBOARD,
    DATA_KEY,
    ROWS,
    UID,
    dashboard_config_map,
    dashboard_model,
    dashboard_queries,
)
from headscale_ha.components.monitoring import StackMonitoring
from headscale_ha.components.pod import labels
from headscale_ha.components.tailnet_objects import KeyExpiry
from tests.support.alert_scopes import NS, ROUTERS_NS, SCOPES, alert_scope
from tests.support.component_run import build_component
from tests.support.prometheus_lab import check_rules, needs_prometheus
from tests.support.seam_dashboard import PROJECT_LABELS, SIDECAR, dashboard_resource_and_parent
from tests.support.seam_dashboard import dashboard_config_map_of as _dashboard_config_map
from tests.support.seam_dashboard import rendered_model as _rendered
from tests.support.seam_dashboard import rows as _rows
from tests.support.seam_samples import monitoring_sample
from tools.harness import ProgramRun

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: (scope, keys) pairs the invariants are checked on: every scope with and without provider-managed keys.
CASES = [(name, keys) for name in SCOPES for keys in (True, False)]
_METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")


def _model(name: str, keys: bool = True) -> dict[str, Any]:
    return dashboard_model(SCOPES[name], keys=keys)


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


def _lone_monitoring(**overrides: Any) -> ProgramRun:
    """StackMonitoring alone, from the Args hydra's config maps to (tests/support/seam_samples.py)."""
    return build_component(lambda: StackMonitoring("monitoring", monitoring_sample(**overrides)))


def test_the_monitoring_renders_the_dashboard_in_the_control_plane_namespace() -> None:
    run = _lone_monitoring()
    model = _rendered(run, "headscale", SIDECAR)
    assert model["uid"] == UID == "headscale-ha"
    # No key expiries given: no provider-managed keys, so only the certificate is under Keys.
    assert _rows(model)["Keys"] == ["Time left on the public certificate"]
    resource, parent = dashboard_resource_and_parent(run)
    assert resource.name == "monitoring-dashboard"
    assert parent.type == "headscale-ha:monitoring:StackMonitoring"


def test_key_expiries_get_their_panel() -> None:
    def build() -> StackMonitoring:
        expiry = KeyExpiry("api", "headplane", pulumi.Output.from_input("2027-03-01T00:00:00Z"))
        return StackMonitoring("monitoring", monitoring_sample(key_expiries=(expiry,)))

    rows = _rows(_rendered(build_component(build), "headscale", SIDECAR))
    assert rows["Keys"] == ["Time left on provider-managed keys", "Time left on the public certificate"]


def test_the_namespace_and_labels_are_the_settings_of_the_monitoring() -> None:
    settings = {"dashboardNamespace": "grafana", "dashboardLabels": {"team-dashboards": "ops"}}
    queries = dashboard_queries(_rendered(_lone_monitoring(settings=settings), "grafana", {"team-dashboards": "ops"}))
    assert all('namespace="headscale"' in expr or 'namespace="tailnet-gateway"' in expr for _, expr in queries)


def test_no_dashboard_when_the_settings_say_so() -> None:
    assert _dashboard_config_map(_lone_monitoring(settings={"dashboard": False})) is None


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
        assert dashboard_model(scope, keys=True) == dashboard_model(AlertRulesInput(**vars(scope)), keys=True)


# --- promtool -----------------------------------------------------------------------------------------------------


@needs_prometheus
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
