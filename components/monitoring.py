"""Monitoring: scrape targets, the alert rules, and the state exporter that shows what Litestream's metrics cannot.

Litestream 0.5's own metrics keep counting while its file replica is broken (measured: a replica directory replaced
by a file leaves every counter as healthy as before), so replication health is read from the replica itself: the
state exporter lists each application's replica on the NFS backup (read-only) and publishes its newest transaction,
which the alert compares with the sidecar's local one. The same exporter publishes the expiry of every key the
Headscale provider manages, from a ConfigMap `pulumi up` rewrites: rotation only happens at `pulumi up`, so expiries
that stop moving mean nobody ran it. Scraped through prometheus-operator objects:
- ServiceMonitor `headscale`: Headscale's own metrics (Service `headscale`, port `metrics`);
- ServiceMonitor `headscale-ha-litestream`: every `<app>-litestream` headless Service (the sidecars' port 9091);
- ServiceMonitor `headscale-ha-exporter`: the state exporter;
- PodMonitor `headscale-db` (PostgreSQL stages): the CloudNativePG instances' exporter;
- PodMonitor `tailnet-gateway` (gateway namespace): CoreDNS's `prometheus` plugin;
- PrometheusRule `headscale-ha`: components/alerts.py, each alert linking its runbook in docs/operations.md.
With `monitoring.dashboard`, also the ConfigMap `headscale-ha-dashboard` (components/dashboard.py) that Grafana's
dashboard sidecar loads: the same series as the alerts, as panels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgsDict, PodSpecArgsDict, VolumeArgsDict

from headscale_ha.components import gateway_services
from headscale_ha.components import headscale as headscale_module
from headscale_ha.components.alerts import (
    EXPORTER_HTTPD_CONF,
    EXPORTER_JOB,
    EXPORTER_METRICS_PATH,
    EXPORTER_SCRIPT_NAME,
    HEADSCALE_JOB,
    LITESTREAM_CONTAINER,
    AlertRulesInput,
    alert_groups,
    state_exporter_script,
)
from headscale_ha.components.dashboard import DASHBOARD, dashboard_config_map, dashboard_model
from headscale_ha.components.litestream import METRICS_COMPONENT, METRICS_PORT_NAME
from headscale_ha.components.pod import (
    Meta,
    checksum,
    container_security,
    labels,
    pod_security,
    resources,
    scheduling,
    selector,
    static_check_skips,
)
from headscale_ha.components.settings import ClusterSettings, ComputeResources, MonitoringSettings, ResourceAmounts
from headscale_ha.components.tailnet_objects import KeyExpiry

EXPORTER_PORT = 8080
KEYS_FILE = "keys.prom"
#: The scrape interval of every monitor here; the replication alert's allowed lag is derived from it.
SCRAPE_INTERVAL_SECONDS = 30
INTERVAL = f"{SCRAPE_INTERVAL_SECONDS}s"
RULE = "headscale-ha"
API_VERSION = "monitoring.coreos.com/v1"
_SMALL = ComputeResources(
    requests=ResourceAmounts(cpu="10m", memory="16Mi"), limits=ResourceAmounts(cpu="200m", memory="64Mi")
)
#: Relabelings that give every scraped series the `app` label the alerts join on (the Kubernetes app name).
_APP_FROM_SERVICE = {"sourceLabels": ["__meta_kubernetes_service_label_app_kubernetes_io_name"], "targetLabel": "app"}


@dataclass(frozen=True, kw_only=True)
class MonitoringArgs:
    """What one stack scrapes and alerts on."""

    namespace: str  # the control plane's namespace: every object here except the gateway's PodMonitor
    settings: MonitoringSettings  # labels for the Prometheus selectors, runbook URL, exporter image and interval
    scope: AlertRulesInput  # what the alert rules cover (components/alerts.py)
    litestream_apps: tuple[str, ...]  # applications whose Litestream sidecar serves metrics (and whose replica to list)
    litestream_image: str  # the exporter's collector runs `litestream ltx` from this image
    backup_claim: str | None  # the NFS backup claim the exporter lists read-only; None: no replica to watch
    cnpg_cluster: str | None  # the CloudNativePG cluster to scrape (PostgreSQL stages)
    gateway_namespace: str  # where CoreDNS runs (its PodMonitor lives there)
    cluster: ClusterSettings  # placement of the exporter
    key_expiries: Sequence[KeyExpiry] = field(default_factory=tuple)  # provider-managed keys (bootstrapApiKey set)


def key_metrics(expiries: Sequence[tuple[str, str, str]]) -> str:
    """The keys file: `headscale_ha_key_expiry_timestamp_seconds{kind,name}` per (kind, name, RFC 3339 expiry).

    A key whose expiry is not known yet (offline plan, or a first preview) is listed as a comment, never as 0 (which
    would read as "expired")."""
    lines = [
        "# HELP headscale_ha_key_expiry_timestamp_seconds Expiry of a key the Headscale provider manages; it moves "
        "only when `pulumi up` rotates the key.",
        "# TYPE headscale_ha_key_expiry_timestamp_seconds gauge",
    ]
    for kind, name, expiration in sorted(expiries):
        if not expiration:
            lines.append(f"# {kind} key {name}: expiry not known yet")
            continue
        stamp = datetime.fromisoformat(expiration.replace("Z", "+00:00")).timestamp()
        lines.append(f'headscale_ha_key_expiry_timestamp_seconds{{kind="{kind}",name="{name}"}} {stamp:.0f}')
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ScrapeMonitor:
    """One prometheus-operator monitor: the suffix of its Pulumi name, its kind, name, namespace and spec."""

    suffix: str
    kind: str  # ServiceMonitor or PodMonitor
    name: str
    namespace: str
    spec: dict[str, Any]


def scrape_monitors(args: MonitoringArgs) -> list[ScrapeMonitor]:
    """Every monitor of the stack (see the module docstring): Headscale, the Litestream sidecars (when any serves
    metrics), the CloudNativePG instances (PostgreSQL stages), CoreDNS in the gateway namespace, the exporter."""
    ns = args.namespace
    return [
        _headscale_monitor(ns),
        *([_litestream_monitor(ns, args.litestream_apps)] if args.litestream_apps else []),
        *([_database_monitor(ns, args.cnpg_cluster)] if args.cnpg_cluster is not None else []),
        _gateway_monitor(args.gateway_namespace),
        _exporter_monitor(ns),
    ]


def _headscale_monitor(ns: str) -> ScrapeMonitor:
    return ScrapeMonitor(
        "servicemonitor-headscale",
        "ServiceMonitor",
        HEADSCALE_JOB,
        ns,
        {
            "selector": {"matchLabels": selector(headscale_module.APP)},
            "namespaceSelector": {"matchNames": [ns]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": INTERVAL}],
        },
    )


def _litestream_monitor(ns: str, apps: tuple[str, ...]) -> ScrapeMonitor:
    return ScrapeMonitor(
        "servicemonitor-litestream",
        "ServiceMonitor",
        f"{RULE}-litestream",
        ns,
        {
            "selector": {
                "matchLabels": {"app.kubernetes.io/component": METRICS_COMPONENT},
                "matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "In", "values": list(apps)}],
            },
            "namespaceSelector": {"matchNames": [ns]},
            "endpoints": [
                {
                    "port": METRICS_PORT_NAME,
                    "path": "/metrics",
                    "interval": INTERVAL,
                    # Endpoints discovery knows no container for a native sidecar's port: name it here,
                    # as the alerts select `container="litestream"`.
                    "relabelings": [
                        _APP_FROM_SERVICE,
                        {"targetLabel": "container", "replacement": LITESTREAM_CONTAINER},
                    ],
                }
            ],
        },
    )


def _database_monitor(ns: str, cnpg_cluster: str) -> ScrapeMonitor:
    return ScrapeMonitor(
        "podmonitor-database",
        "PodMonitor",
        cnpg_cluster,
        ns,
        {
            "selector": {"matchLabels": {"cnpg.io/cluster": cnpg_cluster}},
            "namespaceSelector": {"matchNames": [ns]},
            "podMetricsEndpoints": [{"port": "metrics", "interval": INTERVAL}],
        },
    )


def _gateway_monitor(gateway_namespace: str) -> ScrapeMonitor:
    return ScrapeMonitor(
        "podmonitor-gateway",
        "PodMonitor",
        gateway_services.SERVICES,
        gateway_namespace,
        {
            "selector": {"matchLabels": selector(gateway_services.SERVICES)},
            "namespaceSelector": {"matchNames": [gateway_namespace]},
            "podMetricsEndpoints": [{"port": "metrics", "interval": INTERVAL}],
        },
    )


def _exporter_monitor(ns: str) -> ScrapeMonitor:
    return ScrapeMonitor(
        "servicemonitor-exporter",
        "ServiceMonitor",
        EXPORTER_JOB,
        ns,
        {
            "selector": {"matchLabels": selector(EXPORTER_JOB)},
            "namespaceSelector": {"matchNames": [ns]},
            # The metrics carry their own `app` (the replica's application): keep it, never `exported_app`.
            "endpoints": [
                {"port": "metrics", "path": EXPORTER_METRICS_PATH, "interval": INTERVAL, "honorLabels": True}
            ],
        },
    )


class StackMonitoring(pulumi.ComponentResource):
    """The monitoring objects of one stack; see the module docstring."""

    rule: k8s.apiextensions.CustomResource
    exporter: k8s.apps.v1.Deployment
    dashboard: k8s.core.v1.ConfigMap | None

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:monitoring:StackMonitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns = args.namespace
        for monitor in scrape_monitors(args):
            self._monitor(name, args, monitor)
        # Always: the alerts expect its series (an absent exporter is an alert), and it also serves the key expiries.
        self.exporter = self._exporter(name, args, child)
        self.rule = k8s.apiextensions.CustomResource(
            f"{name}-rule",
            api_version=API_VERSION,
            kind="PrometheusRule",
            metadata={"name": RULE, "namespace": ns, "labels": {**labels(RULE, "alerts"), **args.settings.labels}},
            spec={"groups": alert_groups(args.scope)},
            opts=child,
        )
        self.dashboard = self._dashboard(name, args, child) if args.settings.dashboard else None
        outputs = {"rule": f"{ns}/{RULE}", "exporter": f"{ns}/{EXPORTER_JOB}"}
        if self.dashboard is not None:
            outputs["dashboard"] = f"{args.settings.dashboard_namespace or ns}/{DASHBOARD}"
        self.register_outputs(outputs)

    @staticmethod
    def _dashboard(name: str, args: MonitoringArgs, child: pulumi.ResourceOptions) -> k8s.core.v1.ConfigMap:
        """The Grafana dashboard's ConfigMap: in the control plane's namespace unless `dashboardNamespace` names
        Grafana's (see components/dashboard.py for how the sidecar finds it)."""
        settings = args.settings
        manifest = dashboard_config_map(
            dashboard_model(args.scope, keys=bool(args.key_expiries)),
            namespace=settings.dashboard_namespace or args.namespace,
            sidecar_labels=dict(settings.dashboard_labels),
        )
        return k8s.core.v1.ConfigMap(
            f"{name}-dashboard", metadata=manifest["metadata"], data=manifest["data"], opts=child
        )

    def _monitor(self, name: str, args: MonitoringArgs, monitor: ScrapeMonitor) -> None:
        k8s.apiextensions.CustomResource(
            f"{name}-{monitor.suffix}",
            api_version=API_VERSION,
            kind=monitor.kind,
            metadata={
                "name": monitor.name,
                "namespace": monitor.namespace,
                "labels": {**labels(monitor.name, "monitoring"), **args.settings.labels},
            },
            spec=monitor.spec,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _exporter(self, name: str, args: MonitoringArgs, child: pulumi.ResourceOptions) -> k8s.apps.v1.Deployment:
        ns = args.namespace
        meta: Meta = {"namespace": ns, "labels": labels(EXPORTER_JOB, "monitoring")}
        script = state_exporter_script()
        config = k8s.core.v1.ConfigMap(
            f"{name}-exporter-config",
            metadata={**meta, "name": EXPORTER_JOB},
            data={EXPORTER_SCRIPT_NAME: script, "httpd.conf": EXPORTER_HTTPD_CONF},
            opts=child,
        )
        expiries = [pulumi.Output.all(key.kind, key.name, key.expiration).apply(tuple) for key in args.key_expiries]
        keys_text = pulumi.Output.all(*expiries).apply(lambda rows: key_metrics([tuple(r) for r in rows]))
        keys = k8s.core.v1.ConfigMap(
            f"{name}-exporter-keys",
            metadata={**meta, "name": f"{EXPORTER_JOB}-keys"},
            data={KEYS_FILE: keys_text},
            opts=child,
        )
        pod = self._exporter_pod(args)
        deployment = k8s.apps.v1.Deployment(
            f"{name}-exporter",
            metadata={**meta, "name": EXPORTER_JOB, "annotations": static_check_skips(pod)},
            spec={
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "revision_history_limit": 3,
                "selector": {"match_labels": selector(EXPORTER_JOB)},
                "template": {
                    "metadata": {
                        "labels": labels(EXPORTER_JOB, "monitoring"),
                        "annotations": {"checksum/config": checksum(script, EXPORTER_HTTPD_CONF)},
                    },
                    "spec": pod,
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[config, keys]),
        )
        k8s.core.v1.Service(
            f"{name}-exporter-service",
            metadata={**meta, "name": EXPORTER_JOB},
            spec={
                "type": "ClusterIP",
                "selector": selector(EXPORTER_JOB),
                "ports": [{"name": "metrics", "port": EXPORTER_PORT, "target_port": "metrics", "protocol": "TCP"}],
            },
            opts=child,
        )
        return deployment

    @staticmethod
    def _exporter_pod(args: MonitoringArgs) -> PodSpecArgsDict:
        interval = args.settings.exporter_interval_seconds
        out_file = f"/www{EXPORTER_METRICS_PATH}"
        backup: list[VolumeArgsDict] = (
            [{"name": "backup", "persistent_volume_claim": {"claim_name": args.backup_claim, "read_only": True}}]
            if args.backup_claim is not None
            else []
        )
        # Alive while the collector keeps rewriting the file: a stuck `litestream ltx` (a hung NFS mount) restarts it.
        fresh = f"test $(( $(date +%s) - $(stat -c %Y {out_file}) )) -lt {10 * interval}"
        collector: ContainerArgsDict = {
            "name": "collector",
            "image": args.litestream_image,
            "command": ["/bin/sh", f"/etc/exporter/{EXPORTER_SCRIPT_NAME}"],
            "env": [
                {"name": "APPS", "value": " ".join(args.litestream_apps)},
                {"name": "BACKUP_ROOT", "value": "/backup"},
                {"name": "OUT_FILE", "value": out_file},
                {"name": "KEYS_FILE", "value": f"/etc/exporter-keys/{KEYS_FILE}"},
                {"name": "INTERVAL_SECONDS", "value": str(interval)},
            ],
            "liveness_probe": {
                "exec_": {"command": ["/bin/sh", "-c", fresh]},
                "initial_delay_seconds": 10 * interval,
                "period_seconds": interval,
            },
            "readiness_probe": {"exec_": {"command": ["test", "-s", out_file]}, "period_seconds": 10},
            "resources": resources(_SMALL),
            "security_context": container_security(),
            "volume_mounts": [
                *([{"name": "backup", "mount_path": "/backup", "read_only": True}] if backup else []),
                {"name": "config", "mount_path": "/etc/exporter", "read_only": True},
                {"name": "keys", "mount_path": "/etc/exporter-keys", "read_only": True},
                {"name": "www", "mount_path": "/www"},
                {"name": "tmp", "mount_path": "/tmp"},
            ],
        }
        httpd: ContainerArgsDict = {
            "name": "httpd",
            "image": args.settings.exporter_image,
            "command": ["httpd", "-f", "-p", str(EXPORTER_PORT), "-h", "/www", "-c", "/etc/httpd/httpd.conf"],
            "ports": [{"name": "metrics", "container_port": EXPORTER_PORT, "protocol": "TCP"}],
            "liveness_probe": {"tcp_socket": {"port": "metrics"}, "period_seconds": 15},
            "readiness_probe": {"tcp_socket": {"port": "metrics"}, "period_seconds": 10},
            "resources": resources(_SMALL),
            "security_context": container_security(),
            "volume_mounts": [
                {"name": "www", "mount_path": "/www", "read_only": True},
                {"name": "config", "mount_path": "/etc/httpd/httpd.conf", "sub_path": "httpd.conf", "read_only": True},
            ],
        }
        return {
            "automount_service_account_token": False,
            "enable_service_links": False,
            "security_context": pod_security(),
            **scheduling(args.cluster),
            "containers": [collector, httpd],
            "volumes": [
                *backup,
                {"name": "config", "config_map": {"name": EXPORTER_JOB, "default_mode": 0o444}},
                {"name": "keys", "config_map": {"name": f"{EXPORTER_JOB}-keys", "default_mode": 0o444}},
                {"name": "www", "empty_dir": {"medium": "Memory", "size_limit": "1Mi"}},
                {"name": "tmp", "empty_dir": {"size_limit": "16Mi"}},
            ],
        }
