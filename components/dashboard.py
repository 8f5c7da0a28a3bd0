"""Pure builder of the stack's Grafana dashboard (a JSON model) and of the ConfigMap Grafana's sidecar loads it from.

What it shows, in three rows: the control plane (Headscale's and the state exporter's scrape health, ready replicas
from kube-state-metrics), replication (Litestream's local transaction id against the replica's, the lag the
LitestreamReplicationStalled alert computes, sync errors, CloudNativePG's WAL archiving on the PostgreSQL stages) and
keys (the time left on every key the Headscale provider manages, and on the public certificate).

Why it is built like this:

- Every query reads only series the alerts (components/alerts.py) or the state exporter (scripts/state-exporter.sh)
  already rely on, built with the alerts' own selectors: a panel never shows a series nobody checked is scraped,
  and a panel and an alert never disagree on what "the replica" or "Headscale" is.
- Fixed ``namespace="<the stack's namespace>"`` matchers instead of a Grafana namespace variable: one cluster runs
  one stack, and a query without Grafana variables is exactly what Prometheus runs, so the tests parse every query
  with promtool and run it against a real Prometheus. Only the data source is a variable (``${datasource}``, any
  Prometheus), as in kube-prometheus-stack's own dashboards.
- Scope-aware like :func:`components.alerts.alert_groups`: panels for what the stack does not deploy (no Litestream
  application, no PostgreSQL stage, no provider-managed keys, no certificate) are left out. (A standby keeps its
  replication panels: its applications are scaled to 0, so they stay empty until it is promoted.)

No Pulumi import and no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from headscale_ha.components.alerts import (
    API_KEY_CRITICAL_SECONDS,
    CERTIFICATE_WARNING_SECONDS,
    EXPORTER_JOB,
    HEADSCALE_JOB,
    LITESTREAM_CONTAINER,
    REFUSING_INIT_CONTAINERS,
    AlertRulesInput,
    any_of,
    matchers,
    prom_duration,
)
from headscale_ha.components.pod import labels

__all__ = [
    "DASHBOARD",
    "DATA_KEY",
    "ROWS",
    "UID",
    "dashboard_config_map",
    "dashboard_model",
    "dashboard_queries",
]

#: The ConfigMap's name, and its one data key (the file name the sidecar writes into Grafana's dashboard folder).
DASHBOARD = "headscale-ha-dashboard"
DATA_KEY = "headscale-ha.json"
#: Stable: links and bookmarks survive a re-render; one stack per cluster, so one dashboard per Grafana.
UID = "headscale-ha"
#: Grafana's JSON model version this model is written in (Grafana 10.4/11 read it without migrating).
SCHEMA_VERSION = 39
#: Row titles, in dashboard order.
ROWS = ("Control plane", "Replication", "Keys")
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: The one variable: any Prometheus data source (Grafana picks the default one), as kube-prometheus-stack's dashboards.
_DATASOURCE_VARIABLE = {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"}
_GRID_WIDTH = 24
_HEIGHT = 8
#: Value mappings of 0/1 health series (``up``, ``headscale_ha_replica_up``).
_UP_DOWN = {"0": ("down", "red"), "1": ("up", "green")}
#: Red from the first error (a rate above 0, as the alerts compare).
_ANY_ERROR: tuple[tuple[float | None, str], ...] = ((None, "green"), (1e-9, "red"))


@dataclass(frozen=True)
class _Query:
    expr: str
    legend: str


@dataclass(frozen=True, kw_only=True)
class _Panel:
    title: str
    description: str
    queries: tuple[_Query, ...]
    kind: str = "timeseries"  # or "stat"
    unit: str = "short"
    width: int = 12
    #: (from value, colour) steps; the first starts at minus infinity.
    thresholds: tuple[tuple[float | None, str], ...] = ((None, "green"),)
    mappings: dict[str, tuple[str, str]] | None = None


def _stat(
    title: str,
    description: str,
    expr: str,
    legend: str,
    *,
    unit: str = "short",
    width: int = 6,
    thresholds: tuple[tuple[float | None, str], ...] = ((None, "green"),),
    mappings: dict[str, tuple[str, str]] | None = None,
) -> _Panel:
    """A one-query stat panel: the latest value of each series."""
    queries = (_Query(expr, legend),)
    return _Panel(
        title=title,
        description=description,
        queries=queries,
        kind="stat",
        unit=unit,
        width=width,
        thresholds=thresholds,
        mappings=mappings,
    )


def _health(title: str, job: str, namespace: str, description: str) -> _Panel:
    """A scrape target's ``up``, as the alerts read it (the lowest of its targets)."""
    expr = f"min by (namespace, job) (up{matchers(namespace=namespace, job=job)})"
    return _stat(title, description, expr, "{{job}}", thresholds=((None, "red"), (1, "green")), mappings=_UP_DOWN)


def _ready(title: str, kind: str, namespace: str, names: tuple[str, ...], description: str) -> _Panel:
    """Ready against desired replicas from kube-state-metrics (the readiness alerts' two series)."""
    ready, desired = {
        "deployment": ("kube_deployment_status_replicas_ready", "kube_deployment_spec_replicas"),
        "statefulset": ("kube_statefulset_status_replicas_ready", "kube_statefulset_replicas"),
    }[kind]
    sel = matchers(namespace=namespace, **{kind: any_of(names)})
    by = f"(namespace, {kind})"
    return _Panel(
        title=title,
        description=description,
        queries=(
            _Query(f"max by {by} ({ready}{sel})", f"{{{{{kind}}}}} ready"),
            _Query(f"max by {by} ({desired}{sel})", f"{{{{{kind}}}}} desired"),
        ),
    )


def _control_plane(scope: AlertRulesInput) -> list[_Panel]:
    ns = scope.namespace
    last_run = f"max by (namespace) (headscale_ha_exporter_last_run_timestamp_seconds{matchers(namespace=ns)})"
    panels = [
        _health(
            "Headscale metrics target", HEADSCALE_JOB, ns, "Prometheus's scrape of Headscale (HeadscaleMetricsDown)."
        ),
        _health("State exporter target", EXPORTER_JOB, ns, "Prometheus's scrape of the state exporter."),
        _stat(
            "Seconds since the exporter's last round",
            "Above 300 s the exporter is stuck (StateExporterDown), usually on a hung NFS mount.",
            f"time() - {last_run}",
            "exporter",
            unit="s",
            width=12,
            thresholds=((None, "green"), (300, "red")),
        ),
        _ready(
            "Ready replicas",
            "deployment",
            ns,
            ("headscale", "headplane"),
            "Headscale and Headplane, from kube-state-metrics (HeadscaleNotReady, HeadplaneNotReady); a standby "
            "desires 0.",
        ),
        _ready(
            "Subnet routers ready",
            "statefulset",
            scope.routers_namespace,
            scope.routers_statefulsets,
            "The routers carrying the cluster's routes into the tailnet (SubnetRoutersDegraded).",
        ),
    ]
    if scope.apps:
        sel = matchers(namespace=ns, container=any_of(REFUSING_INIT_CONTAINERS))
        panels.append(
            _Panel(
                title="Restore and pre-upgrade restarts (15 min)",
                description="Restarts of the init containers that refuse to start an application (RestoreRefused): "
                "read the container's log.",
                queries=(
                    _Query(
                        f"max by (namespace, pod, container) (changes(kube_pod_init_container_status_restarts_total"
                        f"{sel}[15m]))",
                        "{{pod}} {{container}}",
                    ),
                ),
                width=24,
                thresholds=((None, "green"), (2, "red")),
            )
        )
    return panels


def _litestream(scope: AlertRulesInput) -> list[_Panel]:
    ns, apps = scope.namespace, any_of(scope.apps)
    local = matchers(namespace=ns, container=LITESTREAM_CONTAINER, app=apps)
    replica = matchers(namespace=ns, app=apps)
    lag = prom_duration(scope.replication_lag_seconds)
    by = "max by (namespace, app)"
    return [
        _Panel(
            title="Transaction id: database and replica",
            description="Litestream's local transaction id and the newest one the state exporter found in the "
            "replica on the backup volume; the replica follows within seconds when replication works.",
            queries=(
                _Query(f"{by} (litestream_txid{local})", "{{app}} database"),
                _Query(f"{by} (headscale_ha_replica_txid{replica})", "{{app}} replica"),
            ),
        ),
        _Panel(
            title=f"Transactions the replica lacks ({lag} lag)",
            description=f"The database's transaction id of {lag} ago minus the replica's: above 0 for 5 minutes "
            "fires LitestreamReplicationStalled (replication is not advancing while the database changes).",
            queries=(
                _Query(
                    f"{by} (litestream_txid{local} offset {lag}) - on (namespace, app) "
                    f"{by} (headscale_ha_replica_txid{replica})",
                    "{{app}}",
                ),
            ),
            thresholds=((None, "green"), (1, "red")),
        ),
        _stat(
            "Replica readable",
            "Whether the state exporter could list the replica (LitestreamReplicaUnreadable).",
            f"{by} (headscale_ha_replica_up{replica})",
            "{{app}}",
            thresholds=((None, "red"), (1, "green")),
            mappings=_UP_DOWN,
        ),
        _stat(
            "Age of the replica's newest LTX file",
            "Time since the replica last received a file; grows on a quiet database, which is normal.",
            f"time() - {by} (headscale_ha_replica_newest_timestamp_seconds{replica} > 0)",
            "{{app}}",
            unit="s",
        ),
        _Panel(
            title="Sync errors per second",
            description="Litestream failing to turn WAL frames into LTX files (LitestreamSyncErrors).",
            queries=(_Query(f"sum by (namespace, app) (rate(litestream_sync_error_count{local}[5m]))", "{{app}}"),),
            width=6,
            thresholds=_ANY_ERROR,
        ),
        _stat(
            "Local disk full",
            "1 when Litestream paused because the data volume is full (LitestreamDiskFull).",
            f"{by} (litestream_disk_full{local})",
            "{{app}}",
            thresholds=((None, "green"), (1, "red")),
        ),
    ]


def _postgres(cluster: str, namespace: str) -> list[_Panel]:
    sel = matchers(namespace=namespace, pod=f"~{cluster}-[0-9]+")
    return [
        _Panel(
            title="Seconds since the last WAL archival",
            description="Per CloudNativePG instance; grows on an idle database, so read it with the failures.",
            queries=(
                _Query(f"max by (namespace, pod) (cnpg_pg_stat_archiver_seconds_since_last_archival{sel})", "{{pod}}"),
            ),
            unit="s",
        ),
        _Panel(
            title="WAL archiving failures per second",
            description="Failed archive attempts; with a growing archival age: CNPGArchivingFailing.",
            queries=(
                _Query(f"max by (namespace, pod) (rate(cnpg_pg_stat_archiver_failed_count{sel}[5m]))", "{{pod}}"),
            ),
            thresholds=_ANY_ERROR,
        ),
    ]


def _keys(scope: AlertRulesInput, keys: bool) -> list[_Panel]:
    ns, panels = scope.namespace, []
    if keys:
        expiry = f"max by (namespace, kind, name) (headscale_ha_key_expiry_timestamp_seconds{matchers(namespace=ns)})"
        panels.append(
            _stat(
                "Time left on provider-managed keys",
                "Every key the Headscale provider manages; keys rotate only at `pulumi up` (orange: inside the API "
                "key's rotate-before window, red: its last 3 days).",
                f"{expiry} - time()",
                "{{kind}} {{name}}",
                unit="s",
                width=12,
                thresholds=(
                    (None, "red"),
                    (API_KEY_CRITICAL_SECONDS, "orange"),
                    (scope.api_key_rotate_before_seconds, "green"),
                ),
            )
        )
    if scope.certificate is not None:
        expiry = f"certmanager_certificate_expiration_timestamp_seconds{matchers(namespace=ns, name=scope.certificate)}"
        panels.append(
            _stat(
                "Time left on the public certificate",
                "cert-manager renews it well before the last 14 days (CertificateExpiringSoon).",
                f"max by (namespace, name) ({expiry}) - time()",
                "{{name}}",
                unit="s",
                width=12,
                thresholds=((None, "red"), (CERTIFICATE_WARNING_SECONDS, "green")),
            )
        )
    return panels


def _rows(scope: AlertRulesInput, keys: bool) -> list[tuple[str, list[_Panel]]]:
    replication = _litestream(scope) if scope.apps else []
    if scope.cnpg_cluster is not None:
        replication += _postgres(scope.cnpg_cluster, scope.namespace)
    rows = zip(ROWS, (_control_plane(scope), replication, _keys(scope, keys)), strict=True)
    return [(title, panels) for title, panels in rows if panels]


def _panel_json(panel: _Panel, panel_id: int, grid: dict[str, int]) -> dict[str, Any]:
    steps = [{"color": colour, "value": value} for value, colour in panel.thresholds]
    defaults: dict[str, Any] = {"unit": panel.unit, "thresholds": {"mode": "absolute", "steps": steps}}
    if panel.mappings:
        options = {value: {"text": text, "color": colour} for value, (text, colour) in panel.mappings.items()}
        defaults["mappings"] = [{"type": "value", "options": options}]
    if panel.kind == "timeseries":
        defaults["color"] = {"mode": "palette-classic"}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": dict(_DATASOURCE),
        "gridPos": grid,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": _options(panel.kind),
        "targets": [
            {"datasource": dict(_DATASOURCE), "expr": query.expr, "legendFormat": query.legend, "refId": chr(65 + n)}
            for n, query in enumerate(panel.queries)
        ],
    }


def _options(kind: str) -> dict[str, Any]:
    if kind == "stat":
        return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "colorMode": "background"}
    return {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}, "tooltip": {"mode": "multi"}}


def _layout(rows: list[tuple[str, list[_Panel]]]) -> list[dict[str, Any]]:
    """Rows and their panels, left to right, wrapping at Grafana's 24 columns; ids count from 1 in that order."""
    out: list[dict[str, Any]] = []
    y = 0
    for title, panels in rows:
        row_grid = {"h": 1, "w": _GRID_WIDTH, "x": 0, "y": y}
        out.append(
            {"id": len(out) + 1, "type": "row", "title": title, "collapsed": False, "panels": [], "gridPos": row_grid}
        )
        y, x = y + 1, 0
        for panel in panels:
            if x + panel.width > _GRID_WIDTH:
                y, x = y + _HEIGHT, 0
            out.append(_panel_json(panel, len(out) + 1, {"h": _HEIGHT, "w": panel.width, "x": x, "y": y}))
            x += panel.width
        y += _HEIGHT
    return out


def dashboard_model(scope: AlertRulesInput, *, keys: bool) -> dict[str, Any]:
    """The dashboard's JSON model for one stack: deterministic (same scope, same model).

    ``keys``: the state exporter publishes provider-managed key expiries (the stack has ``bootstrapApiKey``); without
    it the keys panel is left out, as the series cannot exist.
    """
    return {
        "uid": UID,
        "title": "Headscale HA",
        "description": f"Control plane, replication and keys of the headscale-ha stack in namespace {scope.namespace}.",
        "tags": ["headscale-ha", "headscale"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": False,  # provisioned from a ConfigMap: edits in the UI would be lost at the next sync
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [dict(_DATASOURCE_VARIABLE)]},
        "panels": _layout(_rows(scope, keys)),
    }


def dashboard_queries(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) of every query in ``model``, in panel order (for the tests' checks)."""
    return [(panel["title"], target["expr"]) for panel in model["panels"] for target in panel.get("targets", [])]


def dashboard_config_map(model: dict[str, Any], *, namespace: str, sidecar_labels: dict[str, str]) -> dict[str, Any]:
    """The ConfigMap (``metadata`` and ``data``) the Grafana sidecar loads ``model`` from.

    The sidecar (kiwigrid/k8s-sidecar, deployed by the Grafana Helm chart) watches ConfigMaps carrying the label
    ``sidecar.dashboards.label`` (default ``grafana_dashboard``) and writes each data key into Grafana's dashboard
    folder. kube-prometheus-stack enables it with ``labelValue: "1"`` and ``searchNamespace: ALL``, so a ConfigMap in
    the control plane's own namespace is found as is; the plain Grafana chart leaves it off and, when enabled,
    searches only Grafana's own namespace (``searchNamespace`` unset), so there add the control plane's namespace to
    ``searchNamespace`` or render the ConfigMap into Grafana's namespace (``monitoring.dashboardNamespace``).
    ``sort_keys``: the same model always gives the same bytes, so a plan shows no change where there is none.
    """
    return {
        "metadata": {
            "name": DASHBOARD,
            "namespace": namespace,
            "labels": {**labels(DASHBOARD, "dashboard"), **sidecar_labels},
        },
        "data": {DATA_KEY: json.dumps(model, sort_keys=True, indent=1)},
    }
