"""What the stack tells its operators: scrape targets, alerts, the dashboard, and the recovery model's stated inputs."""

from __future__ import annotations

from pydantic import Field

from headscale_ha.components.config_types import DnsLabel, Image, Quantity
from headscale_ha.components.settings.base import SettingsModel


class MonitoringSettings(SettingsModel):
    """Scrape targets, alerts and the state exporter, as prometheus-operator objects."""

    enabled: bool = Field(
        default=True,
        description="Render ServiceMonitors, PodMonitors, a PrometheusRule and the state exporter (needs the "
        "prometheus-operator CRDs and, for most alerts, kube-state-metrics).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels on every monitoring object, for your Prometheus's selectors (e.g. `release: "
        "kube-prometheus-stack`).",
    )
    runbook_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s#\"'{}]+$",
        description="The URL of docs/operations.md on your Git host (no fragment); each alert links "
        "`<runbookUrl>#runbook-<alert>`. Required with `enabled`.",
    )
    exporter_image: Image = Field(
        default="docker.io/library/busybox:1.37.0",
        description="Image of the state exporter's web server (busybox httpd).",
    )
    exporter_interval_seconds: int = Field(
        default=30, ge=5, le=3600, description="How often the state exporter lists the replicas."
    )
    # The defaults follow kube-prometheus-stack's Grafana: its dashboard sidecar watches ConfigMaps labelled
    # `grafana_dashboard: "1"` in every namespace (`searchNamespace: ALL`). The plain Grafana chart's sidecar
    # watches the same label (any value) but only in Grafana's own namespace; rendering into a namespace the
    # program does not create is opt-in, because `pulumi up` fails when that namespace does not exist.
    dashboard: bool = Field(
        default=True,
        description="Render the Grafana dashboard ConfigMap `headscale-ha-dashboard` (control plane, replication, "
        "keys) for Grafana's dashboard sidecar; only with `enabled`.",
    )
    dashboard_labels: dict[str, str] = Field(
        default_factory=lambda: {"grafana_dashboard": "1"},
        description="Labels the Grafana sidecar selects dashboards by (the Grafana chart's "
        '`sidecar.dashboards.label`/`labelValue`; kube-prometheus-stack: `grafana_dashboard: "1"`).',
    )
    dashboard_namespace: DnsLabel | None = Field(
        default=None,
        description="Namespace of the dashboard ConfigMap; default: the control plane's. Set it to Grafana's "
        "namespace when its sidecar searches only there (the Grafana chart's default); it must exist.",
    )


class RecoverySettings(SettingsModel):
    """What the recovery model (output `recovery`) cannot read from the rendered objects: state your own figures."""

    image_pull_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="Seconds to pull the images on a node that has none (stated: measure it on your cluster).",
    )
    start_seconds: int = Field(
        default=5, ge=0, le=3600, description="Seconds from the application's start to its first healthy answer."
    )
    headscale_database_size: Quantity = Field(
        default="64Mi", description="Expected size of Headscale's SQLite database (restore time scales with it)."
    )
    headplane_database_size: Quantity = Field(
        default="16Mi", description="Expected size of Headplane's SQLite database."
    )
    node_monitor_grace_seconds: int = Field(
        default=40,
        ge=0,
        le=3600,
        description="The cluster's kube-controller-manager `--node-monitor-grace-period` (40s by default): how long "
        "a silent node stays Ready before it is marked unreachable.",
    )
    promotion_seconds: int = Field(
        default=600,
        ge=0,
        le=86400,
        description="Seconds your operators need to notice a lost site, confirm it is lost and start `make promote` "
        "(the human part of a promotion: the command's own run time is measured, bench/measured/promotion.json).",
    )
