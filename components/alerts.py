"""Pure renderer of the stack's Prometheus alerting rules (the PrometheusRule's ``spec.groups``).

Why each alert exists, and what it is built on (series names are the upstream exporters' own):

- Readiness of Headscale, Headplane and the subnet routers, from kube-state-metrics. Every readiness alert is
  guarded by the desired replica count being above 0, so an application scaled to 0 (a standby, the migrating stage)
  never alerts.
- Replication. Litestream 0.5.17's own metrics do not show a broken file replica: when the replica cannot be written
  it only logs ``monitor error``; ``sync_count`` keeps counting, ``sync_error_count`` stays 0 and ``txid`` keeps
  advancing locally. So the state exporter (``scripts/state-exporter.sh``) lists each replica on the backup volume,
  read-only, and the alerts compare the replica's transaction id with Litestream's local one:
  LitestreamReplicationStalled fires when the replica still lacks what the database had committed
  ``replication_lag_seconds`` ago (see :func:`replication_lag_bound`), i.e. replication is not advancing while the
  database changes. An unreadable replica is exported with txid 0, so it also counts as stalled (together with
  LitestreamReplicaUnreadable). Comparing with the txid of ``replication_lag_seconds`` earlier, not the current
  one, keeps a busy database (always a few transactions ahead of the last listing) from alerting.
  BackupSignatureStale: the exporter also exports the ``signed_at`` of each replica's manifest (unauthenticated: a
  liveness signal of the ``backup-signer`` sidecar, which re-signs at least every minute while its application
  runs), and the alert fires when it is older than ten heartbeats (or 0: no manifest) while the Deployment has a
  ready replica. Backups are always signed today, so it is rendered for every Litestream application.
  BackupUnsignedFiles: the exporter counts the files of each replica its manifest does not list (beyond the newest
  signed snapshot); the signer signs Litestream's own within seconds, so ten minutes of them are files it refused.
- The restore and pre-upgrade init containers refusing to start the application, the restore rehearsal CronJobs,
  CloudNativePG's WAL archiving, the public certificate, and the Headplane API key the dynamic provider rotates only
  at ``pulumi up`` (its expiry reaches Prometheus through the exporter's key file).
- ``absent()`` where a missing series would hide a failure: the exporter never scraped, an application missing from
  the exporter's output, Litestream's metrics missing while its application runs, Headscale's metrics target missing
  while Headscale runs, and a rehearsal CronJob that never succeeded or does not exist.

Every selector carries ``namespace="<the stack's namespace>"`` (the routers': their own namespace), so two stacks
sharing one Prometheus never see each other's series. The kube-state-metrics series are wrapped in ``max by`` so an
alert's labels do not depend on how kube-state-metrics is deployed (its ``instance``, ``pod``, shards).

No Pulumi import and no I/O, except :func:`state_exporter_script`, which reads packaged data.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from headscale_ha.components.position_recorder import RECORDER_CONTAINER
from headscale_ha.components.shell_scripts import packaged_script

__all__ = [
    "ALERTS",
    "EXPORTER_HTTPD_CONF",
    "EXPORTER_JOB",
    "EXPORTER_METRICS_PATH",
    "EXPORTER_SCRIPT_NAME",
    "HEADSCALE_JOB",
    "LITESTREAM_CONTAINER",
    "AlertRulesInput",
    "alert_groups",
    "any_of",
    "matchers",
    "prom_duration",
    "replication_lag_bound",
    "rule_file",
    "state_exporter_script",
]

#: The ``job`` label of Headscale's metrics target (ServiceMonitor on the Service ``headscale``, port ``metrics``).
HEADSCALE_JOB = "headscale"
#: The ``job`` label of the state exporter's metrics target: the name of its Service (prometheus-operator names the
#: job after it), and so of every object of the exporter (components/monitoring.py).
EXPORTER_JOB = "headscale-ha-exporter"
#: The name of the Litestream sidecar container (the ``container`` label of its series).
LITESTREAM_CONTAINER = "litestream"
#: The init containers that refuse to start an application (components/litestream.py, components/upgrade.py).
REFUSING_INIT_CONTAINERS = ("restore", "pre-upgrade")
EXPORTER_SCRIPT_NAME = "state-exporter.sh"
#: Where the exporter pod's busybox httpd serves the metrics file (OUT_FILE is ``<httpd home>/metrics.prom``): a
#: ``.prom`` file, so that ``EXPORTER_HTTPD_CONF`` below gives it the text format's Content-Type.
EXPORTER_METRICS_PATH = "/metrics.prom"
#: busybox httpd's config (``-c``): the Content-Type of ``.prom`` files. Without it busybox sends no Content-Type for
#: an unknown extension, which Prometheus 3 refuses unless the scrape sets ``fallback_scrape_protocol``. (busybox
#: strips the spaces: it sends ``text/plain;version=0.0.4``.)
EXPORTER_HTTPD_CONF = ".prom:text/plain; version=0.0.4\n"

#: Litestream 0.5 turns new WAL frames into an LTX file once a second (its DB monitor tick).
LITESTREAM_MONITOR_SECONDS = 1
#: The exporter's round is stale (StateExporterDown) when older than this.
EXPORTER_STALE_SECONDS = 300
#: The backup-signer sidecar signs each replica at least this often while its application runs (HEARTBEAT_SECONDS of
#: scripts/litestream-manifest.sh); a signature ten heartbeats old means it stopped (BackupSignatureStale).
SIGNER_HEARTBEAT_SECONDS = 60
SIGNATURE_STALE_SECONDS = 10 * SIGNER_HEARTBEAT_SECONDS
#: Thresholds: the Headplane API key's last 3 days, the certificate's last 14, rehearsals missing for 2 days.
API_KEY_CRITICAL_SECONDS = 3 * 86400
CERTIFICATE_WARNING_SECONDS = 14 * 86400
REHEARSAL_MISSING_SECONDS = 2 * 86400
#: CloudNativePG: archiving counts as failing when it failed in the last 5 minutes and nothing was archived for this
#: long (an idle database archives nothing for hours, so age alone is no signal).
CNPG_NOT_ARCHIVED_SECONDS = 600

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_URL = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~%!$&'()*+,;=:@/?-]*)?")


def replication_lag_bound(
    *,
    scrape_interval_seconds: float,
    exporter_interval_seconds: float,
    sync_interval_seconds: float,
    evaluation_interval_seconds: float,
) -> int:
    """The least ``replication_lag_seconds`` that never flags a healthy, busy replica, in whole seconds.

    A commit reaches the replica within Litestream's monitor tick plus its sync interval; the exporter lists it
    within its interval; Prometheus scrapes the exporter's file within a scrape interval; the local txid the rule
    compares with was itself scraped up to a scrape interval late; and the rule runs once per evaluation interval.
    The sum is doubled, for a slow listing on NFS and scrape jitter. 244 s for 30 s scrapes, rounds and evaluations
    and a 1 s sync; 12 s for the 1 s intervals of the end-to-end test.
    """
    values = {
        "scrape_interval_seconds": scrape_interval_seconds,
        "exporter_interval_seconds": exporter_interval_seconds,
        "sync_interval_seconds": sync_interval_seconds,
        "evaluation_interval_seconds": evaluation_interval_seconds,
    }
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or math.isinf(value):
            raise ValueError(f"{name}: {value!r} must be a positive number of seconds")
    one_way = (
        LITESTREAM_MONITOR_SECONDS
        + sync_interval_seconds
        + exporter_interval_seconds
        + 2 * scrape_interval_seconds
        + evaluation_interval_seconds
    )
    return math.ceil(2 * one_way)


@dataclass(frozen=True, kw_only=True)
class AlertRulesInput:
    """What one stack's rules watch. Validated on construction (ValueError naming the field and the value)."""

    namespace: str  # the applications' namespace
    #: The applications Litestream replicates: ("headscale", "headplane"), or ("headplane",) on the postgres stage.
    apps: tuple[str, ...]
    serving: bool  # the active stack: it owns (and rotates) the Headplane API key; False on a standby
    routers_namespace: str
    #: The routers' StatefulSets, one per replica (`subnet-router-<n>`): each alerts on its own.
    routers_statefulsets: tuple[str, ...] = ("subnet-router-0",)
    cnpg_cluster: str | None  # the CloudNativePG Cluster (headscale-db) on the postgres stage, else None
    certificate: str | None  # cert-manager Certificate of the public hostname, in ``namespace``
    rehearsal: bool  # the `<app>-restore-rehearsal` CronJobs exist
    runbook_url: str  # base; each alert links to f"{runbook_url}#runbook-{alert.lower()}"
    api_key_rotate_before_seconds: int = 336 * 3600  # the provider's rotate-before window of the Headplane API key
    #: How far the replica's txid may trail the database's before replication counts as stalled: at least
    #: replication_lag_bound(...) of the stack's intervals (244 s for 30 s ones and a 1 s sync).
    replication_lag_seconds: int = 300
    #: The rehearsal Job's activeDeadlineSeconds (components/rehearsal.py): a run never takes longer.
    rehearsal_deadline_seconds: int = 900

    def __post_init__(self) -> None:
        for name in ("namespace", "routers_namespace"):
            _require_label(name, getattr(self, name))
        self._check_routers()
        self._check_apps()
        for name in ("serving", "rehearsal"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: {getattr(self, name)!r} must be True or False")
        self._check_watched_objects()
        for name in ("api_key_rotate_before_seconds", "replication_lag_seconds", "rehearsal_deadline_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}: {value!r} must be a positive whole number of seconds")

    def _check_routers(self) -> None:
        if not isinstance(self.routers_statefulsets, tuple) or not self.routers_statefulsets:
            raise ValueError(f"routers_statefulsets: {self.routers_statefulsets!r} must be a non-empty tuple of names")
        for router in self.routers_statefulsets:
            if not isinstance(router, str) or not _DNS_LABEL.fullmatch(router):
                raise ValueError(f"routers_statefulsets: {self.routers_statefulsets!r}: {router!r} is not a DNS label")

    def _check_apps(self) -> None:
        if not isinstance(self.apps, tuple):
            raise ValueError(f"apps: {self.apps!r} must be a tuple of application names")
        for app in self.apps:
            if not isinstance(app, str) or not _DNS_LABEL.fullmatch(app):
                raise ValueError(f"apps: {self.apps!r}: {app!r} is not a DNS label (lowercase letters, digits, '-')")
        if len(set(self.apps)) != len(self.apps):
            raise ValueError(f"apps: {self.apps!r} names an application twice")

    def _check_watched_objects(self) -> None:
        """The CNPG cluster and the Certificate, when watched, and the runbook URL the alerts link to."""
        if self.cnpg_cluster is not None:
            _require_label("cnpg_cluster", self.cnpg_cluster)
        if self.certificate is not None and (
            not isinstance(self.certificate, str)
            or len(self.certificate) > 253
            or not _DNS_SUBDOMAIN.fullmatch(self.certificate)
        ):
            raise ValueError(f"certificate: {self.certificate!r} must be a Kubernetes object name or None")
        if not isinstance(self.runbook_url, str) or not _URL.fullmatch(self.runbook_url):
            raise ValueError(
                f"runbook_url: {self.runbook_url!r} must be an http(s) URL without a fragment, spaces, quotes or "
                "braces (each alert appends #runbook-<alert>)"
            )


def _require_label(name: str, value: object) -> None:
    if not isinstance(value, str) or not _DNS_LABEL.fullmatch(value):
        raise ValueError(f"{name}: {value!r} must be a DNS label (lowercase letters, digits, '-'; at most 63)")


# --- rule building --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Alert:
    name: str
    severity: str  # critical | warning
    for_seconds: int
    expr: str
    summary: str
    description: str


def matchers(**labels: str) -> str:
    """``{a="x",b=~"y"}``: a value starting with ``~`` is a regular expression. Values are DNS labels or fixed
    words, so nothing needs escaping. Public: the dashboard (components/dashboard.py) builds its queries with the
    same selectors, so a panel reads exactly the series an alert reads."""
    parts = []
    for key, value in labels.items():
        op, text = ("=~", value[1:]) if value.startswith("~") else ("=", value)
        parts.append(f'{key}{op}"{text}"')
    return "{" + ",".join(parts) + "}"


def any_of(values: tuple[str, ...] | list[str]) -> str:
    """A :func:`matchers` value matching any of ``values``."""
    return "~" + "|".join(values)


def prom_duration(seconds: int) -> str:
    """A Prometheus duration: the largest whole unit (``5m``, ``2h``, ``90s``)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _human(seconds: int) -> str:
    """For annotations: ``5 minutes``, ``2 days``."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} seconds"


def _ready_alert(
    name: str,
    severity: str,
    for_seconds: int,
    *,
    kind: str,
    namespace: str,
    object_name: str,
    summary: str,
    what: str,
    fix: str,
) -> _Alert:
    """Fewer ready replicas than desired, only while more than 0 are desired (a scaled-to-0 object never alerts)."""
    if kind == "deployment":
        ready_metric, spec_metric = "kube_deployment_status_replicas_ready", "kube_deployment_spec_replicas"
    else:
        ready_metric, spec_metric = "kube_statefulset_status_replicas_ready", "kube_statefulset_replicas"
    sel = matchers(namespace=namespace, **{kind: object_name})
    by = f"(namespace, {kind})"
    ready = f"max by {by} ({ready_metric}{sel})"
    desired = f"max by {by} ({spec_metric}{sel})"
    expr = f"(\n  {ready}\n  < on {by}\n  {desired}\n)\nand on {by}\n({desired} > 0)"
    return _Alert(
        name,
        severity,
        for_seconds,
        expr,
        summary,
        f'{what} ({kind} {{{{ $labels.{kind} }}}}) has had only {{{{ printf "%.0f" $value }}}} ready replica(s), '
        f"fewer than desired, for {_human(for_seconds)}. {fix}",
    )


def _availability(scope: AlertRulesInput) -> list[_Alert]:
    ns = scope.namespace
    headscale_up = matchers(namespace=ns, job=HEADSCALE_JOB)
    headscale_ready = f"max(kube_deployment_status_replicas_ready{matchers(namespace=ns, deployment='headscale')})"
    return [
        _ready_alert(
            "HeadscaleNotReady",
            "critical",
            300,
            kind="deployment",
            namespace=ns,
            object_name="headscale",
            summary="Headscale in {{ $labels.namespace }} is not ready",
            what="Headscale",
            fix="Registrations, route approval, DNS/ACL updates and key rotation are stopped (established tunnels "
            "keep working). Check the pod's events and logs, in particular the restore and pre-upgrade init "
            "containers (RestoreRefused) and the backup volume.",
        ),
        _ready_alert(
            "HeadplaneNotReady",
            "warning",
            600,
            kind="deployment",
            namespace=ns,
            object_name="headplane",
            summary="Headplane in {{ $labels.namespace }} is not ready",
            what="Headplane",
            fix="The web UI is unavailable; the control plane itself is not affected. Check the pod's events and "
            "logs and its restore init container.",
        ),
        _Alert(
            "HeadscaleMetricsDown",
            "warning",
            600,
            f"min by (namespace, job) (up{headscale_up}) == 0\n"
            f"or\n(\n  absent(up{headscale_up})\n  and on ()\n  ({headscale_ready} > 0)\n)",
            "Prometheus cannot scrape Headscale's metrics in {{ $labels.namespace }}",
            "Headscale runs, but its metrics target (job {{ $labels.job }}) is down or missing for 10 minutes: "
            "alerts built on Headscale's own metrics are blind. Check the ServiceMonitor, the Service port "
            "`metrics`, the network policy that admits the monitoring namespace, and Headscale's "
            "metrics_listen_addr.",
        ),
        _ready_alert(
            "SubnetRoutersDegraded",
            "warning",
            600,
            kind="statefulset",
            namespace=scope.routers_namespace,
            object_name=any_of(scope.routers_statefulsets),
            summary="Subnet routers in {{ $labels.namespace }} are not all ready",
            what="The subnet router set",
            fix="Fewer routers carry the cluster's routes into the tailnet (with none, the cluster is unreachable "
            "from it). Check the router pods' logs: an expired or used pre-auth key is replaced by the next "
            "`pulumi up`.",
        ),
    ]


def _replication(scope: AlertRulesInput) -> list[_Alert]:
    """Replication of each application Litestream replicates: its replica on the backup volume (as the state
    exporter lists it), the Litestream sidecar's own health, and the signatures of the replica's manifest."""
    return [*_replica_alerts(scope), *_sidecar_alerts(scope), *_signature_alerts(scope)]


def _replica_alerts(scope: AlertRulesInput) -> list[_Alert]:
    """The replica itself, as the state exporter lists it: not advancing, or not readable."""
    ns = scope.namespace
    apps = any_of(scope.apps)
    local = matchers(namespace=ns, container=LITESTREAM_CONTAINER, app=apps)
    replica = matchers(namespace=ns, app=apps)
    exporter_up = f"max(up{matchers(namespace=ns, job=EXPORTER_JOB)})"
    lag = scope.replication_lag_seconds
    missing_apps = "\nor\n".join(
        f"(\n  absent(headscale_ha_replica_up{matchers(namespace=ns, app=app)})\n  and on ()\n  ({exporter_up} > 0)\n)"
        for app in scope.apps
    )
    return [
        _Alert(
            "LitestreamReplicationStalled",
            "critical",
            300,
            f"max by (namespace, app) (litestream_txid{local} offset {prom_duration(lag)})\n"
            f"> on (namespace, app)\n"
            f"max by (namespace, app) (headscale_ha_replica_txid{replica})",
            "Replication of {{ $labels.app }} in {{ $labels.namespace }} is not advancing",
            f"For 5 minutes the replica of {{{{ $labels.app }}}} on the backup volume has not held transaction "
            f'{{{{ printf "%.0f" $value }}}}, which the database had reached {_human(lag)} before: replication is '
            "not advancing while the database changes, so a pod replacement or node loss would lose those writes. "
            "Litestream's own metrics do not show this (a broken file replica only logs `monitor error`): read "
            "`kubectl logs <pod> -c litestream` and check the NFS export. When "
            "LitestreamReplicaUnreadable fires too, the replica cannot be read at all.",
        ),
        _Alert(
            "LitestreamReplicaUnreadable",
            "critical",
            300,
            f"max by (namespace, app) (headscale_ha_replica_up{replica}) == 0\nor\n{missing_apps}",
            "The backup replica of {{ $labels.app }} in {{ $labels.namespace }} cannot be read",
            "The state exporter cannot list {{ $labels.app }}'s Litestream replica on the backup volume (missing, not "
            "a directory, unreadable, or not understood), or does not report it at all: a restore would fail, so "
            "a pod replacement would refuse to start. Read the exporter's log (it names the reason) and check the "
            "NFS export and its `<app>/replica` directory.",
        ),
    ]


def _sidecar_alerts(scope: AlertRulesInput) -> list[_Alert]:
    """The Litestream sidecar's own metrics: sync errors, a full disk, or none at all while the application runs."""
    ns = scope.namespace
    local = matchers(namespace=ns, container=LITESTREAM_CONTAINER, app=any_of(scope.apps))
    absent_litestream = "\nor\n".join(
        f"(\n  absent(litestream_txid{matchers(namespace=ns, container=LITESTREAM_CONTAINER, app=app)})\n"
        f"  and on ()\n"
        f"  (max(kube_deployment_status_replicas_ready{matchers(namespace=ns, deployment=app)}) > 0)\n)"
        for app in scope.apps
    )
    return [
        _Alert(
            "LitestreamSyncErrors",
            "warning",
            600,
            f"sum by (namespace, app) (rate(litestream_sync_error_count{local}[5m])) > 0",
            "Litestream of {{ $labels.app }} in {{ $labels.namespace }} keeps failing to sync",
            "Litestream has counted sync errors in every 5-minute window for 10 minutes: it cannot read the "
            "database's WAL into LTX files, so nothing new reaches the replica. Read `kubectl logs <pod> -c "
            "litestream` and check the data volume.",
        ),
        _Alert(
            "LitestreamDiskFull",
            "critical",
            120,
            f"max by (namespace, app) (litestream_disk_full{local}) > 0",
            "Litestream of {{ $labels.app }} in {{ $labels.namespace }} paused: local disk full",
            "Litestream paused replication because the data volume is full; the application will fail to write "
            "soon. Raise the data volume's size limit (backup.local) or find what filled it.",
        ),
        _Alert(
            "LitestreamMetricsAbsent",
            "warning",
            600,
            absent_litestream,
            "No Litestream metrics for {{ $labels.app }} in {{ $labels.namespace }}",
            "{{ $labels.app }} runs, but Prometheus has no Litestream metrics for it for 10 minutes, so "
            "LitestreamReplicationStalled cannot see its replication. Check the PodMonitor, Litestream's `addr` in "
            "litestream.yml and the network policy for the metrics port.",
        ),
    ]


def _signature_alerts(scope: AlertRulesInput) -> list[_Alert]:
    """The backup-signer sidecar no longer re-signing the replica's manifest."""
    ns = scope.namespace
    # The backup-signer sidecar (scripts/litestream-manifest.sh) re-signs at least every heartbeat while the
    # application runs; the exporter exports the manifest's (unauthenticated) signed_at, 0 without a manifest.
    signature_stale = "\nor\n".join(
        f"(\n  time() - max by (namespace, app) "
        f"(headscale_ha_replica_signed_timestamp_seconds{matchers(namespace=ns, app=app)})"
        f" > {SIGNATURE_STALE_SECONDS}\n"
        f"  and on ()\n"
        f"  (max(kube_deployment_status_replicas_ready{matchers(namespace=ns, deployment=app)}) > 0)\n)"
        for app in scope.apps
    )
    return [
        _Alert(
            "BackupSignatureStale",
            "warning",
            600,
            signature_stale,
            "The backup replica of {{ $labels.app }} in {{ $labels.namespace }} is no longer being signed",
            f"{{{{ $labels.app }}}} runs, but the newest signature of its replica on the backup volume "
            f"(`<app>/replica.manifest`, which the `backup-signer` sidecar rewrites at least every "
            f"{SIGNER_HEARTBEAT_SECONDS} s while it runs) is {{{{ $value | humanizeDuration }}}} old (decades "
            "when there is no readable manifest at all): the signer has not signed for that long, so the next "
            "restore of this replica stops at that old position, losing what was written since, and once the "
            "signature is older than backup.auth.maxAge (24 hours by default) the restore refuses to start the "
            "application. Read `kubectl -n {{ $labels.namespace }} logs deploy/{{ $labels.app }} -c "
            "backup-signer`, check that the NFS export is writable, and that the Secret "
            "`{{ $labels.app }}-backup-key` exists and holds the key. (The exported time is not authenticated: a "
            "liveness signal of the signer, not a proof.)",
        ),
        _Alert(
            "BackupUnsignedFiles",
            "warning",
            600,
            "\nor\n".join(
                f"max by (namespace, app) (headscale_ha_replica_unsigned_files{matchers(namespace=ns, app=app)}) > 0"
                for app in scope.apps
            ),
            "The backup replica of {{ $labels.app }} in {{ $labels.namespace }} holds files its signer did not sign",
            'For 10 minutes the replica of {{ $labels.app }} on the backup volume has held {{ printf "%.0f" $value }} '
            "file(s) "
            "that its signed manifest does not list, ending after the newest signed snapshot. The `backup-signer` "
            "signs what this pod's Litestream writes within a second (a compaction once its proof ends), so these "
            "are files it refused: written by something other than Litestream (anyone who can write the NFS "
            "export), crafted, or built by Litestream from a planted file; or files it could not sign (it was "
            "stopped longer than Litestream keeps level-0 files). No restore hands them to Litestream. Read why: "
            "`kubectl -n {{ $labels.namespace }} logs deploy/{{ $labels.app }} -c backup-signer | grep 'NOT "
            "SIGNING'`, then find who writes the export. (Counted from an unauthenticated read of the manifest.)",
        ),
    ]


def _restore(scope: AlertRulesInput) -> list[_Alert]:
    return [*_restore_refused_alert(scope), *(_position_alert(scope) if "headscale" in scope.apps else [])]


def _position_alert(scope: AlertRulesInput) -> list[_Alert]:
    """The recorder exits 4 after two minutes without recording (components/scripts/position-recorder.sh): its
    restarts are the signal, since no exporter can see the witness without a token."""
    sel = matchers(namespace=scope.namespace, container=RECORDER_CONTAINER)
    crash = matchers(namespace=scope.namespace, container=RECORDER_CONTAINER, reason="CrashLoopBackOff")
    by = "(namespace, pod, container)"
    return [
        _Alert(
            "PositionNotRecorded",
            "warning",
            60,
            f"max by {by} (kube_pod_init_container_status_waiting_reason{crash}) > 0\n"
            f"or\n"
            f"max by {by} (changes(kube_pod_init_container_status_restarts_total{sel}[15m])) > 0",
            "The position recorder of {{ $labels.pod }} cannot record the replica's position",
            "The position-recorder sidecar of pod {{ $labels.pod }} could not write Headscale's replica position into "
            "the served witness for two minutes and was restarted: until it records again, a restore's rollback "
            "check rests on the signature's age alone. Read why: kubectl -n {{ $labels.namespace }} logs "
            "{{ $labels.pod }} -c position-recorder --previous (HTTP 403: the Role; 401: the token; curl exit 7 or "
            "28: the API server unreachable, check networkPolicy.apiServerCidrs).",
        )
    ]


def _restore_refused_alert(scope: AlertRulesInput) -> list[_Alert]:
    return [
        _Alert(
            "RestoreRefused",
            "critical",
            180,
            _restore_refused(scope),
            "The {{ $labels.container }} init container of {{ $labels.pod }} refuses to start the application",
            "The {{ $labels.container }} init container of pod {{ $labels.pod }} keeps failing, so the application "
            "does not start. The restore refuses when the backup and the identity disagree, when the site served "
            "before but no backup is found, or when the backup is unreadable; the pre-upgrade check refuses a "
            "downgrade (exit 40) or a snapshot that does not verify (41). Read why: kubectl -n "
            "{{ $labels.namespace }} logs {{ $labels.pod }} -c {{ $labels.container }} --previous.",
        ),
    ]


def _restore_refused(scope: AlertRulesInput) -> str:
    sel = matchers(namespace=scope.namespace, container=any_of(list(REFUSING_INIT_CONTAINERS)))
    crash = matchers(
        namespace=scope.namespace, container=any_of(list(REFUSING_INIT_CONTAINERS)), reason="CrashLoopBackOff"
    )
    by = "(namespace, pod, container)"
    # Waiting in CrashLoopBackOff, or (between two tries, while it runs) restarted at least twice in 15 minutes: one
    # failed try that then succeeds is not a refusal. changes(), not increase(): no extrapolation past 1.
    return (
        f"max by {by} (kube_pod_init_container_status_waiting_reason{crash}) > 0\n"
        f"or\n"
        f"max by {by} (changes(kube_pod_init_container_status_restarts_total{sel}[15m])) > 1"
    )


def _exporter(scope: AlertRulesInput) -> list[_Alert]:
    ns = scope.namespace
    up = matchers(namespace=ns, job=EXPORTER_JOB)
    last_run = f"max by (namespace) (headscale_ha_exporter_last_run_timestamp_seconds{matchers(namespace=ns)})"
    return [
        _Alert(
            "StateExporterDown",
            "warning",
            300,
            f"min by (namespace, job) (up{up}) == 0\n"
            f"or\n"
            f"absent(up{up})\n"
            f"or\n"
            f'label_replace(time() - {last_run} > {EXPORTER_STALE_SECONDS}, "job", "{EXPORTER_JOB}", "", "")',
            "The backup state exporter in {{ $labels.namespace }} is down or stuck",
            "The state exporter is not scraped, not running, or its last round is older than "
            f"{_human(EXPORTER_STALE_SECONDS)}: LitestreamReplicationStalled and LitestreamReplicaUnreadable are "
            "blind, and the key expiries are not exported. Check the exporter pod and its log; a round that hangs "
            "is usually a hung NFS mount.",
        )
    ]


def _rehearsal(scope: AlertRulesInput) -> list[_Alert]:
    ns = scope.namespace
    cronjobs = [f"{app}-restore-rehearsal" for app in scope.apps]
    sel = matchers(namespace=ns, cronjob=any_of(cronjobs))
    by = "(namespace, cronjob)"
    scheduled = f"max by {by} (kube_cronjob_status_last_schedule_time{sel})"
    succeeded = f"max by {by} (kube_cronjob_status_last_successful_time{sel})"
    created = f"max by {by} (kube_cronjob_created{sel})"
    ksm_present = f"count(kube_deployment_spec_replicas{matchers(namespace=ns)})"
    no_cronjob = "\nor\n".join(
        f"(\n  absent(kube_cronjob_created{matchers(namespace=ns, cronjob=name)})\n  and on ()\n"
        f"  ({ksm_present} > 0)\n)"
        for name in cronjobs
    )
    # A run takes at most the Job's deadline; five more minutes for the pod to be scheduled and the image pulled.
    failed_for = math.ceil((scope.rehearsal_deadline_seconds + 300) / 60) * 60
    return [
        _Alert(
            "RestoreRehearsalFailed",
            "warning",
            failed_for,
            f"(\n  {scheduled}\n  > on {by}\n  {succeeded}\n)\n"
            f"or\n(\n  {scheduled}\n  unless on {by}\n  {succeeded}\n)",
            "The restore rehearsal {{ $labels.cronjob }} in {{ $labels.namespace }} failed",
            "The run of {{ $labels.cronjob }} scheduled at {{ $value | humanizeTimestamp }} has not succeeded "
            f"within {_human(failed_for)}: the backup may not restore. Read the failed Job's log (kubectl -n "
            "{{ $labels.namespace }} get jobs; kubectl logs job/<job>): exit 50 replica unreadable, 51 no backup, "
            "52 stale, 53 does not restore or fails the integrity check, 54 cannot be listed.",
        ),
        _Alert(
            "RestoreRehearsalMissing",
            "warning",
            1800,
            f"time() - {succeeded} > {REHEARSAL_MISSING_SECONDS}\n"
            f"or\n"
            f"(\n  time() - {created} > {REHEARSAL_MISSING_SECONDS}\n  unless on {by}\n  {succeeded}\n)\n"
            f"or\n{no_cronjob}",
            "No successful restore rehearsal {{ $labels.cronjob }} in {{ $labels.namespace }} for 2 days",
            f"No run of {{{{ $labels.cronjob }}}} has succeeded for more than {_human(REHEARSAL_MISSING_SECONDS)} "
            "(or ever, or the CronJob is missing): nobody has proven that the backup restores. Check that the "
            "CronJob exists and is not suspended, and its recent Jobs.",
        ),
    ]


def _postgres(scope: AlertRulesInput) -> list[_Alert]:
    assert scope.cnpg_cluster is not None
    sel = matchers(namespace=scope.namespace, pod=f"~{scope.cnpg_cluster}-[0-9]+")
    by = "(namespace, pod)"
    return [
        _Alert(
            "CNPGArchivingFailing",
            "critical",
            600,
            f"(\n  max by {by} (cnpg_pg_stat_archiver_seconds_since_last_archival{sel}) > {CNPG_NOT_ARCHIVED_SECONDS}\n"
            f"  and on {by}\n"
            f"  max by {by} (rate(cnpg_pg_stat_archiver_failed_count{sel}[5m])) > 0\n)\n"
            f"unless on {by}\n"
            f"(max by {by} (cnpg_pg_replication_in_recovery{sel}) > 0)",
            "WAL archiving of {{ $labels.pod }} in {{ $labels.namespace }} is failing",
            "The primary {{ $labels.pod }} keeps failing to archive WAL and has archived nothing for "
            "{{ $value | humanizeDuration }}: point-in-time recovery has a growing gap and unarchived WAL fills the "
            "volume. Check the barman-cloud plugin's logs, the ObjectStore's credentials and the object store.",
        )
    ]


def _certificates(scope: AlertRulesInput) -> list[_Alert]:
    assert scope.certificate is not None
    sel = matchers(namespace=scope.namespace, name=scope.certificate)
    return [
        _Alert(
            "CertificateExpiringSoon",
            "warning",
            3600,
            f"max by (namespace, name) (certmanager_certificate_expiration_timestamp_seconds{sel}) - time()"
            f" < {CERTIFICATE_WARNING_SECONDS}",
            "The certificate {{ $labels.name }} in {{ $labels.namespace }} expires in less than 14 days",
            "The public hostname's certificate {{ $labels.name }} expires in {{ $value | humanizeDuration }} and "
            "cert-manager has not renewed it. Clients will refuse the control plane once it expires. Check "
            "`kubectl describe certificate` and the issuer (ACME challenges, DNS).",
        )
    ]


def _keys(scope: AlertRulesInput) -> list[_Alert]:
    sel = matchers(namespace=scope.namespace, kind="api")
    remaining = f"max by (namespace, kind, name, user) (headscale_ha_key_expiry_timestamp_seconds{sel}) - time()"
    window = _human(scope.api_key_rotate_before_seconds)
    return [
        _Alert(
            "HeadscaleApiKeyRotationOverdue",
            "warning",
            3600,
            f"{remaining} < {scope.api_key_rotate_before_seconds}",
            "The Headscale API key {{ $labels.name }} is due for rotation: run pulumi up",
            "The API key {{ $labels.name }} expires in {{ $value | humanizeDuration }}, inside the provider's "
            f"rotate-before window ({window}). Keys are rotated only by `pulumi up`, and nobody has run it since "
            "the key entered the window: run `pulumi up` on this (serving) stack.",
        ),
        _Alert(
            "HeadscaleApiKeyExpiringSoon",
            "critical",
            600,
            f"{remaining} < {API_KEY_CRITICAL_SECONDS}",
            "The Headscale API key {{ $labels.name }} expires in less than 3 days",
            "The API key {{ $labels.name }} expires in {{ $value | humanizeDuration }} (negative: expired). When "
            "it expires Headplane can no longer manage the tailnet. Run `pulumi up` on this (serving) stack now; it "
            "mints a new key and rolls Headplane.",
        ),
    ]


def _rule(alert: _Alert, scope: AlertRulesInput) -> dict[str, Any]:
    return {
        "alert": alert.name,
        "expr": alert.expr,
        "for": prom_duration(alert.for_seconds),
        "labels": {"severity": alert.severity},
        "annotations": {
            "summary": alert.summary,
            "description": alert.description,
            "runbook_url": f"{scope.runbook_url}#runbook-{alert.name.lower()}",
        },
    }


def _groups(scope: AlertRulesInput) -> list[tuple[str, list[_Alert]]]:
    groups: list[tuple[str, list[_Alert]]] = [("availability", _availability(scope))]
    if scope.apps:
        groups.append(("replication", _replication(scope)))
        groups.append(("restore", _restore(scope)))
    groups.append(("exporter", _exporter(scope)))
    if scope.rehearsal and scope.apps:
        groups.append(("rehearsal", _rehearsal(scope)))
    if scope.cnpg_cluster is not None:
        groups.append(("postgres", _postgres(scope)))
    if scope.certificate is not None:
        groups.append(("certificates", _certificates(scope)))
    if scope.serving:
        groups.append(("keys", _keys(scope)))
    return groups


def alert_groups(scope: AlertRulesInput) -> list[dict[str, Any]]:
    """The PrometheusRule's ``spec.groups`` for one stack: deterministic (same scope, same list).

    Scope decides which groups exist: replication and the restore refusal with Litestream apps, rehearsal when the
    rehearsal CronJobs exist, postgres with a CNPG cluster, certificates with a Certificate, and the API-key alerts
    only on the serving stack (the active stack owns and rotates Headplane's key).
    """
    return [
        {"name": f"headscale-ha.{topic}", "rules": [_rule(alert, scope) for alert in alerts]}
        for topic, alerts in _groups(scope)
    ]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, so the file reads like hand-written rules."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def rule_file(scope: AlertRulesInput) -> str:
    """The rules as a Prometheus rule file (YAML ``{"groups": ...}``), for promtool and a plain Prometheus."""
    return yaml.dump({"groups": alert_groups(scope)}, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)


def state_exporter_script() -> str:
    """Text of the state exporter script (scripts/state-exporter.sh), shipped as package data next to this module."""
    return packaged_script(EXPORTER_SCRIPT_NAME)


def _all_alerts() -> tuple[str, ...]:
    """Every alert any scope renders, in rendering order."""
    everything = AlertRulesInput(
        namespace="n",
        apps=("headscale",),
        serving=True,
        routers_namespace="n",
        cnpg_cluster="c",
        certificate="c",
        rehearsal=True,
        runbook_url="https://example.invalid/r",
    )
    return tuple(alert.name for _, alerts in _groups(everything) for alert in alerts)


#: Every alert name these rules can contain (for the README's and the runbook's completeness checks).
ALERTS: tuple[str, ...] = _all_alerts()
