"""The alerting rules (components/alerts.py) and the state exporter (components/scripts/state-exporter.sh), checked
with the real tools.

- ``promtool check rules`` on the rendered rule file of several scopes (sqlite active, postgres stage, standby, no
  Litestream application at all).
- ``promtool test rules``: for every alert, cases where it fires and cases where it does not (threshold edges, the
  scaled-to-0 guard, another namespace's series, a single transient error), generated from CASES below. A firing
  case is evaluated when its ``for`` has just elapsed (expecting the alert with its exact labels and annotations) and
  one evaluation earlier (expecting nothing: still pending); a quiet case is evaluated at every minute of its window.
  A test fails when an alert in ALERTS lacks a firing or a quiet case.
- The exporter, run ``once`` under sh, dash and busybox sh (busybox: only its applets on PATH, as in the Litestream
  image) against real replicas made by ``litestream replicate``: values checked against ``litestream ltx``, output
  checked by ``promtool check metrics``, nothing written under BACKUP_ROOT, bad environments refused (exit 2); and
  shellcheck.
- End to end: real ``litestream replicate`` with the program's config and metrics on, the exporter looping every
  second under busybox sh into a directory served by ``busybox httpd``, and a real Prometheus scraping both every
  second and evaluating the rendered rules every second. Healthy replication must leave LitestreamReplicationStalled
  and LitestreamReplicaUnreadable inactive; a replica target replaced by a regular file must make both *pending*
  within a derived bound, and a replica Litestream can no longer write (read-only, still listable) must make
  LitestreamReplicationStalled pending once the replication lag bound has passed. The rendered ``for`` is minutes,
  so end to end only the pending transition is observed; the transition to firing is covered by the promtool unit
  tests. Once the rules are armed, every Grafana dashboard query (components/dashboard.py) runs against the same
  Prometheus: each over a series the lab serves must return one, and exactly those in E2E_DASHBOARD_NOT_COVERED
  (series of components the lab does not run) return none.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from headscale_ha.components.alerts import (
    ALERTS,
    EXPORTER_HTTPD_CONF,
    EXPORTER_JOB,
    EXPORTER_METRICS_PATH,
    HEADSCALE_JOB,
    AlertScope,
    alert_groups,
    prom_duration,
    replication_lag_bound,
    rule_file,
    state_exporter_script,
)
from headscale_ha.components.dashboard import dashboard_model, dashboard_queries
from headscale_ha.components.monitoring import key_metrics
from tests.support.alert_scopes import NS, ROUTERS_NS, RUNBOOK, SCOPES, alert_scope
from tests.support.litestream_lab import (
    STATE_EXPORTER_SCRIPT,
    App,
    Writer,
    busybox_bin_dir,
    connect_wal,
    hand_over,
    insert_rows,
    litestream_bin,
    ltx_listing,
    newest_txid,
    read_only_tree,
    replica_row_count,
    replicating,
    replicating_as,
    run_state_exporter,
    state_exporter_env,
    state_exporter_running,
    tree_state,
    wait_until,
    write_metrics_config,
)
from tests.support.prometheus_lab import (
    busybox_httpd,
    check_metrics,
    check_rules,
    content_type,
    expand,
    free_port,
    parse_samples,
    prometheus_server,
    run_rule_tests,
    sample,
)
from tests.support.script_checks import SHELLS, SHELLS_ONLY, SYNTAX_CHECKERS, Shell, shell_for

LITESTREAM = litestream_bin()
OTHER = "other"
#: The pod's user: Litestream runs as it when the tests run as root, so a read-only replica stops it as in the pod.
POD_USER = 65532
LAB_USER = POD_USER if os.geteuid() == 0 else None
PROMETHEUS = pytest.mark.real_tool("prometheus")


def _rules(scope: AlertScope) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in alert_groups(scope) for rule in group["rules"]}


# --- the renderer, without tools ----------------------------------------------------------------------------------


def test_alerts_lists_every_alert_any_scope_renders() -> None:
    rendered = {name for scope in SCOPES.values() for name in _rules(scope)}
    assert rendered == set(ALERTS)
    assert len(ALERTS) == len(set(ALERTS))


@pytest.mark.parametrize("name", list(SCOPES))
def test_every_rule_is_complete_and_scoped_to_its_namespace(name: str) -> None:
    """Two stacks in one Prometheus must never see each other's series: every selector names the namespace."""
    scope = SCOPES[name]
    groups = alert_groups(scope)
    assert all(group["name"].startswith("headscale-ha.") for group in groups)
    assert len({group["name"] for group in groups}) == len(groups)
    for rule in (rule for group in groups for rule in group["rules"]):
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"[A-Z][A-Za-z]+", rule["alert"])
        assert rule["labels"] == {"severity": rule["labels"]["severity"]}
        assert rule["labels"]["severity"] in {"critical", "warning"}
        assert re.fullmatch(r"\d+[smhd]", rule["for"])
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}
        assert annotations["runbook_url"] == f"{RUNBOOK}#runbook-{rule['alert'].lower()}"
        selectors = re.findall(r"[a-z_]+\{[^}]*\}", rule["expr"])
        assert selectors, rule["expr"]
        namespace = ROUTERS_NS if rule["alert"] == "SubnetRoutersDegraded" else NS
        for selector in selectors:
            assert f'namespace="{namespace}"' in selector, (rule["alert"], selector)


def test_readiness_alerts_are_guarded_by_the_desired_count_everywhere() -> None:
    """A standby keeps its readiness alerts, but an object scaled to 0 never alerts: each carries `spec > 0`."""
    for scope in SCOPES.values():
        rules = _rules(scope)
        for alert, spec in (
            ("HeadscaleNotReady", "kube_deployment_spec_replicas"),
            ("HeadplaneNotReady", "kube_deployment_spec_replicas"),
            ("SubnetRoutersDegraded", "kube_statefulset_replicas"),
        ):
            assert re.search(rf"\(max by \([a-z, ]+\) \({spec}\{{[^}}]*\}}\) > 0\)$", rules[alert]["expr"]), alert


def test_scope_decides_the_groups() -> None:
    def names(scope: AlertScope) -> set[str]:
        return set(_rules(scope))

    sqlite, postgres, standby = SCOPES["sqlite-active"], SCOPES["postgres-stage"], SCOPES["standby"]
    assert "CNPGArchivingFailing" not in names(sqlite)
    assert "CNPGArchivingFailing" in names(postgres)
    assert {"HeadscaleApiKeyRotationOverdue", "HeadscaleApiKeyExpiringSoon"} <= names(sqlite) - names(standby)
    assert "CertificateExpiringSoon" not in names(standby)
    assert "headscale|headplane" in _rules(sqlite)["LitestreamReplicationStalled"]["expr"]
    assert 'app=~"headplane"' in _rules(postgres)["LitestreamReplicationStalled"]["expr"]
    assert "headscale-restore-rehearsal" not in _rules(postgres)["RestoreRehearsalFailed"]["expr"]
    no_apps = names(SCOPES["no-litestream"])
    assert not no_apps & {"LitestreamReplicationStalled", "RestoreRefused", "RestoreRehearsalMissing"}
    assert "RestoreRehearsalFailed" not in names(alert_scope(rehearsal=False))
    assert "StateExporterDown" in no_apps  # the exporter also carries the key expiries
    assert "BackupSignatureStale" not in no_apps
    assert 'app="headscale"' not in _rules(postgres)["BackupSignatureStale"]["expr"]
    assert 'deployment="headplane"' in _rules(postgres)["BackupSignatureStale"]["expr"]


def test_rendering_is_deterministic_and_the_rule_file_holds_the_groups() -> None:
    for scope in SCOPES.values():
        assert alert_groups(scope) == alert_groups(dataclasses.replace(scope))
        text = rule_file(scope)
        assert text == rule_file(scope)
        assert yaml.safe_load(text) == {"groups": alert_groups(scope)}


def test_the_lag_and_the_intervals_show_in_the_rules() -> None:
    scope = alert_scope(replication_lag_seconds=12, rehearsal_deadline_seconds=1800, api_key_rotate_before_seconds=7200)
    rules = _rules(scope)
    assert "offset 12s" in rules["LitestreamReplicationStalled"]["expr"]
    assert rules["RestoreRehearsalFailed"]["for"] == "35m"
    assert "< 7200" in rules["HeadscaleApiKeyRotationOverdue"]["expr"]
    assert 'kind="api"' in rules["HeadscaleApiKeyExpiringSoon"]["expr"]


def test_replication_lag_bound() -> None:
    """Doubled sum of the delays a healthy commit goes through before the rule can see it in the replica."""

    def bound(scrape: float, exporter: float, sync: float, evaluation: float) -> int:
        return replication_lag_bound(
            scrape_interval_seconds=scrape,
            exporter_interval_seconds=exporter,
            sync_interval_seconds=sync,
            evaluation_interval_seconds=evaluation,
        )

    production = bound(30, 30, 1, 30)
    assert production == 2 * (1 + 1 + 30 + 2 * 30 + 30) == 244
    assert alert_scope().replication_lag_seconds >= production
    assert bound(1, 1, 1, 1) == 12
    assert bound(1, 1, 0.1, 1) == 11  # rounded up
    with pytest.raises(ValueError, match="sync_interval_seconds: 0"):
        bound(1, 1, 0, 1)


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("namespace", "Headscale"),
        ("namespace", ""),
        ("routers_namespace", "a_b"),
        ("routers_statefulsets", ("x" * 64,)),
        ("routers_statefulsets", ()),
        ("routers_statefulsets", "subnet-router-0"),
        ("apps", ["headscale"]),
        ("apps", ("headscale", "headscale")),
        ("apps", ("head scale",)),
        ("serving", "yes"),
        ("rehearsal", 1),
        ("cnpg_cluster", "DB"),
        ("certificate", "tls cert"),
        ("runbook_url", "git.example.org/runbook"),
        ("runbook_url", "https://example.org/runbook#top"),
        ("runbook_url", "https://example.org/{{ x }}"),
        ("api_key_rotate_before_seconds", 0),
        ("api_key_rotate_before_seconds", True),
        ("replication_lag_seconds", -5),
        ("rehearsal_deadline_seconds", 1.5),
    ],
)
def test_scope_validation_names_the_field_and_the_value(field_name: str, value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"{field_name}: {value!r}")):
        alert_scope(**{field_name: value})


# --- promtool check rules --------------------------------------------------------------------------------------------


@PROMETHEUS
@pytest.mark.parametrize("name", list(SCOPES))
def test_promtool_checks_the_rule_file(name: str, tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(rule_file(SCOPES[name]))
    result = check_rules(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules(SCOPES[name]))} rules found" in result.stdout


# --- promtool test rules: every alert both ways ---------------------------------------------------------------


def s(metric: str, /, **labels: str) -> str:
    """A series in promtool's input notation."""
    return metric + "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


_KSM = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080"}  # stripped by the rules' `max by`


def deploy(namespace: str, name: str, spec: str, ready: str) -> dict[str, str]:
    return {
        s("kube_deployment_spec_replicas", namespace=namespace, deployment=name, **_KSM): spec,
        s("kube_deployment_status_replicas_ready", namespace=namespace, deployment=name, **_KSM): ready,
    }


def sts(namespace: str, name: str, spec: str, ready: str) -> dict[str, str]:
    return {
        s("kube_statefulset_replicas", namespace=namespace, statefulset=name, **_KSM): spec,
        s("kube_statefulset_status_replicas_ready", namespace=namespace, statefulset=name, **_KSM): ready,
    }


def litestream(metric: str, namespace: str, app: str, values: str, container: str = "litestream") -> dict[str, str]:
    labels = {"namespace": namespace, "app": app, "pod": f"{app}-6b9f-x7k2p", "container": container}
    return {s(metric, job="litestream", **labels): values}


def exported(metric: str, namespace: str, values: str, **labels: str) -> dict[str, str]:
    return {s(metric, namespace=namespace, job=EXPORTER_JOB, pod="state-exporter-0", **labels): values}


def exporter_up(namespace: str, values: str) -> dict[str, str]:
    return {s("up", namespace=namespace, job=EXPORTER_JOB, pod="state-exporter-0", instance="10.0.0.7:8080"): values}


def cronjob(metric: str, namespace: str, app: str, values: str) -> dict[str, str]:
    return {s(f"kube_cronjob_{metric}", namespace=namespace, cronjob=f"{app}-restore-rehearsal", **_KSM): values}


def cnpg(namespace: str, pod: str, *, since: str, failed: str, recovery: str) -> dict[str, str]:
    labels = {"namespace": namespace, "pod": pod, "job": "cnpg"}
    return {
        s("cnpg_pg_stat_archiver_seconds_since_last_archival", **labels): since,
        s("cnpg_pg_stat_archiver_failed_count", **labels): failed,
        s("cnpg_pg_replication_in_recovery", **labels): recovery,
    }


def key(namespace: str, kind: str, name: str, values: str, **labels: str) -> dict[str, str]:
    return exported("headscale_ha_key_expiry_timestamp_seconds", namespace, values, kind=kind, name=name, **labels)


def merge(*parts: dict[str, str]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for part in parts:
        merged.update(part)
    return merged


@dataclass(frozen=True)
class Fires:
    """One alert a firing case expects: the labels its expression yields (severity is added) and its $value."""

    labels: dict[str, str]
    value: float | None = None


@dataclass(frozen=True)
class Case:
    """Input series (1 sample a minute from 0m) and what one alert does with them.

    Firing (``fires`` not empty): ``since`` is the first evaluation (minute) at which the expression holds; the case
    is checked at ``since + for`` (the alerts, exactly) and at ``since + for - 1m`` (nothing yet: pending).
    Quiet: checked at every minute from 1 to ``until``.
    """

    alert: str
    name: str
    series: dict[str, str]
    fires: tuple[Fires, ...] = ()
    since: int | None = None
    until: int = 30
    scope: str = "sqlite-active"


HS, HP = "headscale", "headplane"
HS_RR, HP_RR = "headscale-restore-rehearsal", "headplane-restore-rehearsal"
TWO_DAYS = 172800
OVERDUE = 336 * 3600

CASES: list[Case] = [
    # --- readiness -----------------------------------------------------------------------------------------------
    Case(
        "HeadscaleNotReady",
        "the pod stops being ready",
        deploy(NS, HS, "1x120", "1 1 1 0x117"),
        (Fires({"namespace": NS, "deployment": HS}, 0),),
        since=3,
    ),
    Case(
        "HeadscaleNotReady",
        "a standby still alerts when Headscale runs there and is not ready",
        deploy(NS, HS, "1x120", "1 1 1 0x117"),
        (Fires({"namespace": NS, "deployment": HS}, 0),),
        since=3,
        scope="standby",
    ),
    Case("HeadscaleNotReady", "standby: scaled to 0", deploy(NS, HS, "0x120", "0x120"), scope="standby"),
    Case(
        "HeadscaleNotReady",
        "another namespace's Headscale is not ready",
        merge(deploy(OTHER, HS, "1x120", "0x120"), deploy(NS, HS, "1x120", "1x120")),
    ),
    Case("HeadscaleNotReady", "not ready for 4 minutes only", deploy(NS, HS, "1x120", "1 1 1 0 0 0 0 1x113")),
    Case(
        "HeadplaneNotReady",
        "the pod stops being ready",
        deploy(NS, HP, "1x120", "1 1 1 0x117"),
        (Fires({"namespace": NS, "deployment": HP}, 0),),
        since=3,
    ),
    Case("HeadplaneNotReady", "scaled to 0", deploy(NS, HP, "0x120", "0x120"), scope="standby"),
    Case(
        "HeadplaneNotReady",
        "another namespace's Headplane is not ready",
        merge(deploy(OTHER, HP, "1x120", "0x120"), deploy(NS, HP, "2x120", "2x120")),
    ),
    Case(
        "HeadscaleMetricsDown",
        "the target goes down",
        {s("up", namespace=NS, job=HEADSCALE_JOB, pod="headscale-0", instance="10.0.0.5:9090"): "1 1 1 0x117"},
        (Fires({"namespace": NS, "job": HEADSCALE_JOB}),),
        since=3,
    ),
    Case(
        "HeadscaleMetricsDown",
        "no target while Headscale runs (absent)",
        deploy(NS, HS, "1x120", "1x120"),
        (Fires({"namespace": NS, "job": HEADSCALE_JOB}),),
        since=0,
    ),
    Case("HeadscaleMetricsDown", "no target, Headscale scaled to 0", deploy(NS, HS, "0x120", "0x120")),
    Case(
        "HeadscaleMetricsDown",
        "another namespace's target is down",
        {
            s("up", namespace=OTHER, job=HEADSCALE_JOB, pod="headscale-0"): "0x120",
            s("up", namespace=NS, job=HEADSCALE_JOB, pod="headscale-0"): "1x120",
        },
    ),
    Case(
        "SubnetRoutersDegraded",
        "one of three routers stops being ready",
        merge(
            sts(ROUTERS_NS, "subnet-router-0", "1x120", "1x120"),
            sts(ROUTERS_NS, "subnet-router-1", "1x120", "1 1 1 0x117"),
        ),
        (Fires({"namespace": ROUTERS_NS, "statefulset": "subnet-router-1"}, 0),),
        since=3,
    ),
    Case("SubnetRoutersDegraded", "scaled to 0", sts(ROUTERS_NS, "subnet-router-0", "0x120", "0x120")),
    Case(
        "SubnetRoutersDegraded",
        "a degraded set in the applications' namespace, not the routers'",
        merge(sts(NS, "subnet-router-0", "1x120", "0x120"), sts(ROUTERS_NS, "subnet-router-0", "1x120", "1x120")),
    ),
    Case(
        "SubnetRoutersDegraded",
        "a StatefulSet that is not one of the routers",
        sts(ROUTERS_NS, "subnet-router-old", "1x120", "0x120"),
    ),
    # --- replication ---------------------------------------------------------------------------------------------
    # The default lag is 5 minutes: local(t - 5m) > replica(t). local = 100 + t.
    Case(
        "LitestreamReplicationStalled",
        "the replica freezes at 110 while the database advances",
        merge(
            litestream("litestream_txid", NS, HS, "100+1x120"),
            exported("headscale_ha_replica_txid", NS, "100+1x10 110x110", app=HS),
        ),
        (Fires({"namespace": NS, "app": HS}, 116),),
        since=16,
    ),
    Case(
        "LitestreamReplicationStalled",
        "the replica becomes unreadable (txid 0)",
        merge(
            litestream("litestream_txid", NS, HS, "100+1x120"),
            exported("headscale_ha_replica_txid", NS, "100+1x10 0x110", app=HS),
        ),
        (Fires({"namespace": NS, "app": HS}, 111),),
        since=11,
    ),
    Case(
        "LitestreamReplicationStalled",
        "busy and healthy: the replica 2 minutes behind",
        merge(
            litestream("litestream_txid", NS, HS, "100+1x120"),
            exported("headscale_ha_replica_txid", NS, "98+1x120", app=HS),
        ),
        until=60,
    ),
    Case(
        "LitestreamReplicationStalled",
        "edge: the replica exactly the lag behind",
        merge(
            litestream("litestream_txid", NS, HP, "100+1x120"),
            exported("headscale_ha_replica_txid", NS, "95+1x120", app=HP),
        ),
        until=60,
    ),
    Case(
        "LitestreamReplicationStalled",
        "idle database",
        merge(
            litestream("litestream_txid", NS, HS, "100x120"),
            exported("headscale_ha_replica_txid", NS, "100x120", app=HS),
        ),
        until=60,
    ),
    Case(
        "LitestreamReplicationStalled",
        "another namespace stalls",
        merge(
            litestream("litestream_txid", OTHER, HS, "100+1x120"),
            exported("headscale_ha_replica_txid", OTHER, "100x120", app=HS),
        ),
        until=60,
    ),
    Case(
        "LitestreamReplicationStalled",
        "standby: no Litestream running, the replica does not move",
        exported("headscale_ha_replica_txid", NS, "100x120", app=HS),
        until=60,
        scope="standby",
    ),
    Case(
        "LitestreamReplicaUnreadable",
        "the exporter can no longer list the replica",
        merge(
            exported("headscale_ha_replica_up", NS, "1 1 1 0x117", app=HS),
            exported("headscale_ha_replica_up", NS, "1x120", app=HP),
            exporter_up(NS, "1x120"),
        ),
        (Fires({"namespace": NS, "app": HS}),),
        since=3,
    ),
    Case(
        "LitestreamReplicaUnreadable",
        "the exporter runs but does not report an application (absent)",
        merge(exported("headscale_ha_replica_up", NS, "1x120", app=HP), exporter_up(NS, "1x120")),
        (Fires({"namespace": NS, "app": HS}),),
        since=0,
    ),
    Case("LitestreamReplicaUnreadable", "the exporter is down (StateExporterDown's)", exporter_up(NS, "0x120")),
    Case(
        "LitestreamReplicaUnreadable",
        "another namespace's replica is unreadable",
        merge(
            exported("headscale_ha_replica_up", OTHER, "0x120", app=HS),
            exported("headscale_ha_replica_up", NS, "1x120", app=HS),
            exported("headscale_ha_replica_up", NS, "1x120", app=HP),
            exporter_up(NS, "1x120"),
        ),
    ),
    Case(
        "LitestreamReplicaUnreadable",
        "postgres stage: Headscale's replica is not watched",
        merge(exported("headscale_ha_replica_up", NS, "1x120", app=HP), exporter_up(NS, "1x120")),
        scope="postgres-stage",
    ),
    Case(
        "LitestreamSyncErrors",
        "an error every minute",
        litestream("litestream_sync_error_count", NS, HP, "0 0 0 1+1x117"),
        (Fires({"namespace": NS, "app": HP}),),
        since=3,
    ),
    Case("LitestreamSyncErrors", "a single error", litestream("litestream_sync_error_count", NS, HP, "0 0 0 1x117")),
    Case(
        "LitestreamSyncErrors",
        "errors of another namespace and of a container that is not Litestream",
        merge(
            litestream("litestream_sync_error_count", OTHER, HP, "0+1x120"),
            litestream("litestream_sync_error_count", NS, HP, "0+1x120", container="headplane"),
        ),
    ),
    Case(
        "LitestreamDiskFull",
        "the local disk fills up",
        litestream("litestream_disk_full", NS, HS, "0 0 0 1x117"),
        (Fires({"namespace": NS, "app": HS}),),
        since=3,
    ),
    Case(
        "LitestreamDiskFull",
        "another namespace's disk is full",
        merge(
            litestream("litestream_disk_full", NS, HS, "0x120"), litestream("litestream_disk_full", OTHER, HS, "1x120")
        ),
    ),
    Case(
        "LitestreamMetricsAbsent",
        "Headscale runs without Litestream metrics (absent)",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            deploy(NS, HP, "1x120", "1x120"),
            litestream("litestream_txid", NS, HP, "5x120"),
        ),
        (Fires({"namespace": NS, "container": "litestream", "app": HS}),),
        since=0,
    ),
    Case(
        "LitestreamMetricsAbsent",
        "another namespace's Litestream metrics do not count",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            deploy(NS, HP, "1x120", "1x120"),
            litestream("litestream_txid", NS, HP, "5x120"),
            litestream("litestream_txid", OTHER, HS, "5x120"),
        ),
        (Fires({"namespace": NS, "container": "litestream", "app": HS}),),
        since=0,
    ),
    Case(
        "LitestreamMetricsAbsent",
        "Headscale scaled to 0",
        merge(
            deploy(NS, HS, "0x120", "0x120"),
            deploy(NS, HP, "1x120", "1x120"),
            litestream("litestream_txid", NS, HP, "5x120"),
        ),
    ),
    Case(
        "LitestreamMetricsAbsent",
        "both present",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            deploy(NS, HP, "1x120", "1x120"),
            litestream("litestream_txid", NS, HS, "5x120"),
            litestream("litestream_txid", NS, HP, "5x120"),
        ),
    ),
    # The signer re-signs at least every 60 s while the application runs; stale above 600 s. promtool's time() is
    # the evaluation's minute * 60, so "0+60x120" is a signature as fresh as the clock.
    Case(
        "BackupSignatureStale",
        "the signed timestamp stops advancing at 10m while Headscale is ready",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0+60x10 600x110", app=HS),
        ),
        (Fires({"namespace": NS, "app": HS}, 1260),),
        since=21,
    ),
    Case(
        "BackupSignatureStale",
        "no manifest (0) while Headplane runs",
        merge(
            deploy(NS, HP, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0x120", app=HP),
        ),
        (Fires({"namespace": NS, "app": HP}, 1260),),
        since=11,
    ),
    Case(
        "BackupSignatureStale",
        "the signed timestamp advances, a heartbeat behind the clock",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            deploy(NS, HP, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0+60x120", app=HS),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "-60+60x120", app=HP),
        ),
        until=60,
    ),
    Case(
        "BackupSignatureStale",
        "edge: exactly 600 s old all along",
        merge(
            deploy(NS, HS, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "-600+60x120", app=HS),
        ),
        until=60,
    ),
    Case(
        "BackupSignatureStale",
        "standby: 0 ready replicas, the signature frozen or absent",
        merge(
            deploy(NS, HS, "0x120", "0x120"),
            deploy(NS, HP, "1x120", "0x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "600x120", app=HS),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0x120", app=HP),
        ),
        until=60,
        scope="standby",
    ),
    Case(
        "BackupSignatureStale",
        "a stale signature of an application that does not run, and of another namespace",
        merge(
            deploy(NS, HS, "0x120", "0x120"),
            deploy(NS, HP, "1x120", "1x120"),
            deploy(OTHER, HS, "1x120", "1x120"),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0x120", app=HS),
            exported("headscale_ha_replica_signed_timestamp_seconds", NS, "0+60x120", app=HP),
            exported("headscale_ha_replica_signed_timestamp_seconds", OTHER, "0x120", app=HS),
        ),
        until=60,
    ),
    # --- restore -------------------------------------------------------------------------------------------------
    Case(
        "RestoreRefused",
        "the restore init container crash-loops",
        {
            s(
                "kube_pod_init_container_status_waiting_reason",
                namespace=NS,
                pod="headscale-5f7d9-x2x4q",
                container="restore",
                reason="CrashLoopBackOff",
                **_KSM,
            ): "_ _ _ 1x117"
        },
        (Fires({"namespace": NS, "pod": "headscale-5f7d9-x2x4q", "container": "restore"}),),
        since=3,
    ),
    Case(
        "RestoreRefused",
        "the pre-upgrade init container restarted twice within 15 minutes",
        {
            s(
                "kube_pod_init_container_status_restarts_total",
                namespace=NS,
                pod="headscale-5f7d9-x2x4q",
                container="pre-upgrade",
                **_KSM,
            ): "0 0 0 1 1 1 2x114"
        },
        (Fires({"namespace": NS, "pod": "headscale-5f7d9-x2x4q", "container": "pre-upgrade"}),),
        since=6,
    ),
    Case(
        "RestoreRefused",
        "one failed try, then success",
        {
            s(
                "kube_pod_init_container_status_restarts_total",
                namespace=NS,
                pod="headplane-7c4-abcde",
                container="restore",
                **_KSM,
            ): "0 0 0 1x117"
        },
    ),
    Case(
        "RestoreRefused",
        "other containers, reasons and namespaces",
        {
            s(
                "kube_pod_init_container_status_waiting_reason",
                namespace=NS,
                pod="headscale-migrate-x",
                container="schema",
                reason="CrashLoopBackOff",
            ): "1x120",
            s(
                "kube_pod_init_container_status_waiting_reason",
                namespace=OTHER,
                pod="headscale-1",
                container="restore",
                reason="CrashLoopBackOff",
            ): "1x120",
            s(
                "kube_pod_init_container_status_waiting_reason",
                namespace=NS,
                pod="headscale-2",
                container="restore",
                reason="ContainerCreating",
            ): "1x120",
        },
    ),
    # --- the exporter --------------------------------------------------------------------------------------------
    Case(
        "StateExporterDown",
        "the target goes down",
        merge(
            exporter_up(NS, "1 1 1 0x117"), exported("headscale_ha_exporter_last_run_timestamp_seconds", NS, "0+60x120")
        ),
        (Fires({"namespace": NS, "job": EXPORTER_JOB}),),
        since=3,
    ),
    Case("StateExporterDown", "never scraped (absent)", {}, (Fires({"namespace": NS, "job": EXPORTER_JOB}),), since=0),
    Case(
        "StateExporterDown",
        "the loop hangs: last round older than 5 minutes",
        merge(exporter_up(NS, "1x120"), exported("headscale_ha_exporter_last_run_timestamp_seconds", NS, "0x120")),
        (Fires({"namespace": NS, "job": EXPORTER_JOB}),),
        since=6,
    ),
    Case(
        "StateExporterDown",
        "edge: last round exactly 5 minutes old",
        merge(
            exporter_up(NS, "1x120"), exported("headscale_ha_exporter_last_run_timestamp_seconds", NS, "-300+60x120")
        ),
    ),
    Case(
        "StateExporterDown",
        "another namespace's exporter is down",
        merge(
            exporter_up(OTHER, "0x120"),
            exporter_up(NS, "1x120"),
            exported("headscale_ha_exporter_last_run_timestamp_seconds", NS, "0+60x120"),
        ),
    ),
    # --- rehearsal -----------------------------------------------------------------------------------------------
    Case(
        "RestoreRehearsalFailed",
        "the last run failed",
        merge(
            cronjob("status_last_schedule_time", NS, HS, "1000x120"),
            cronjob("status_last_successful_time", NS, HS, "500x120"),
            cronjob("status_last_schedule_time", NS, HP, "1000x120"),
            cronjob("status_last_successful_time", NS, HP, "1030x120"),
        ),
        (Fires({"namespace": NS, "cronjob": HS_RR}, 1000),),
        since=0,
    ),
    Case(
        "RestoreRehearsalFailed",
        "never succeeded",
        cronjob("status_last_schedule_time", NS, HP, "1000x120"),
        (Fires({"namespace": NS, "cronjob": HP_RR}, 1000),),
        since=0,
    ),
    Case(
        "RestoreRehearsalFailed",
        "edge: success at the schedule time",
        merge(
            cronjob("status_last_schedule_time", NS, HS, "1000x120"),
            cronjob("status_last_successful_time", NS, HS, "1000x120"),
        ),
        until=40,
    ),
    Case(
        "RestoreRehearsalFailed",
        "a run in progress for 10 minutes, then success",
        merge(
            cronjob("status_last_schedule_time", NS, HS, "1000x4 2000x115"),
            cronjob("status_last_successful_time", NS, HS, "1030x14 2030x105"),
        ),
        until=40,
    ),
    Case(
        "RestoreRehearsalFailed",
        "another namespace's rehearsal failed",
        cronjob("status_last_schedule_time", OTHER, HS, "1000x120"),
        until=40,
    ),
    Case(
        "RestoreRehearsalFailed",
        "postgres stage: no Headscale rehearsal is expected",
        cronjob("status_last_schedule_time", NS, HS, "1000x120"),
        until=40,
        scope="postgres-stage",
    ),
    Case(
        "RestoreRehearsalMissing",
        "the last success is more than 2 days old",
        merge(
            cronjob("created", NS, HS, "-1000000x120"),
            cronjob("created", NS, HP, "-1000000x120"),
            cronjob("status_last_successful_time", NS, HS, f"-{TWO_DAYS}x120"),
            cronjob("status_last_successful_time", NS, HP, "0+60x120"),
            deploy(NS, HS, "1x120", "1x120"),
        ),
        (Fires({"namespace": NS, "cronjob": HS_RR}),),
        since=1,
    ),
    Case(
        "RestoreRehearsalMissing",
        "created more than 2 days ago, never succeeded",
        merge(
            cronjob("created", NS, HS, "-1000000x120"),
            cronjob("status_last_successful_time", NS, HS, "0+60x120"),
            cronjob("created", NS, HP, f"-{TWO_DAYS}x120"),
        ),
        (Fires({"namespace": NS, "cronjob": HP_RR}),),
        since=1,
    ),
    Case(
        "RestoreRehearsalMissing",
        "the CronJob does not exist (absent)",
        merge(
            cronjob("created", NS, HP, "-1000000x120"),
            cronjob("status_last_successful_time", NS, HP, "0+60x120"),
            deploy(NS, HS, "1x120", "1x120"),
        ),
        (Fires({"namespace": NS, "cronjob": HS_RR}),),
        since=0,
    ),
    Case(
        "RestoreRehearsalMissing",
        "edge: the last success exactly 2 days old",
        merge(
            cronjob("created", NS, HS, "-1000000x120"),
            cronjob("created", NS, HP, "-1000000x120"),
            cronjob("status_last_successful_time", NS, HS, f"-{TWO_DAYS}+60x120"),
            cronjob("status_last_successful_time", NS, HP, "0+60x120"),
            deploy(NS, HS, "1x120", "1x120"),
        ),
        until=60,
    ),
    Case(
        "RestoreRehearsalMissing",
        "created recently, not run yet",
        merge(
            cronjob("created", NS, HS, "-1000x120"),
            cronjob("created", NS, HP, "-1000x120"),
            deploy(NS, HS, "1x120", "1x120"),
        ),
        until=60,
    ),
    Case(
        "RestoreRehearsalMissing",
        "no kube-state-metrics series in the namespace, another namespace's rehearsal is old",
        cronjob("status_last_successful_time", OTHER, HS, f"-{TWO_DAYS}x120"),
        until=60,
    ),
    # --- postgres, certificates, keys ----------------------------------------------------------------------------
    Case(
        "CNPGArchivingFailing",
        "the primary fails to archive; the replica (in recovery) does not count",
        merge(
            cnpg(NS, "headscale-db-1", since="0+60x120", failed="0+1x120", recovery="0x120"),
            cnpg(NS, "headscale-db-2", since="0+60x120", failed="0+1x120", recovery="1x120"),
        ),
        (Fires({"namespace": NS, "pod": "headscale-db-1"}, 1260),),
        since=11,
        scope="postgres-stage",
    ),
    Case(
        "CNPGArchivingFailing",
        "idle: nothing archived for an hour, no failure",
        cnpg(NS, "headscale-db-1", since="3600+60x120", failed="3x120", recovery="0x120"),
        scope="postgres-stage",
    ),
    Case(
        "CNPGArchivingFailing",
        "failures, but archiving recovers at once",
        cnpg(NS, "headscale-db-1", since="30x120", failed="0+1x120", recovery="0x120"),
        scope="postgres-stage",
    ),
    Case(
        "CNPGArchivingFailing",
        "another cluster's pod and another namespace",
        merge(
            cnpg(NS, "other-db-1", since="0+60x120", failed="0+1x120", recovery="0x120"),
            cnpg(OTHER, "headscale-db-1", since="0+60x120", failed="0+1x120", recovery="0x120"),
        ),
        scope="postgres-stage",
    ),
    Case(
        "CNPGArchivingFailing",
        "sqlite stage: no CNPG rule",
        cnpg(NS, "headscale-db-1", since="0+60x120", failed="0+1x120", recovery="0x120"),
    ),
    Case(
        "CertificateExpiringSoon",
        "14 days and 30 minutes left at 0m",
        {s("certmanager_certificate_expiration_timestamp_seconds", namespace=NS, name="headscale-tls"): "1211400x200"},
        (Fires({"namespace": NS, "name": "headscale-tls"}, 1211400 - 91 * 60),),
        since=31,
    ),
    Case(
        "CertificateExpiringSoon",
        "edge: exactly 14 days left all along",
        {
            s("certmanager_certificate_expiration_timestamp_seconds", namespace=NS, name="headscale-tls"): (
                "1209600+60x200"
            )
        },
        until=100,
    ),
    Case(
        "CertificateExpiringSoon",
        "another Certificate, another namespace",
        {
            s("certmanager_certificate_expiration_timestamp_seconds", namespace=NS, name="other-tls"): "0x200",
            s("certmanager_certificate_expiration_timestamp_seconds", namespace=OTHER, name="headscale-tls"): "0x200",
        },
    ),
    Case(
        "CertificateExpiringSoon",
        "standby: no Certificate configured",
        {s("certmanager_certificate_expiration_timestamp_seconds", namespace=NS, name="headscale-tls"): "0x200"},
        scope="standby",
    ),
    Case(
        "HeadscaleApiKeyRotationOverdue",
        "inside the rotate-before window for an hour",
        key(NS, "api", "headplane", f"{OVERDUE + 1800}x200"),
        (Fires({"namespace": NS, "kind": "api", "name": "headplane"}, OVERDUE + 1800 - 91 * 60),),
        since=31,
    ),
    Case(
        "HeadscaleApiKeyRotationOverdue",
        "edge: exactly at the window's start; and an expired router pre-auth key",
        merge(
            key(NS, "api", "headplane", f"{OVERDUE}+60x200"),
            key(NS, "preauth", "router-0", "0x200", user="tailnet-routers"),
        ),
        until=100,
    ),
    Case(
        "HeadscaleApiKeyRotationOverdue",
        "standby: the serving stack owns the key",
        key(NS, "api", "headplane", "0x200"),
        scope="standby",
    ),
    Case(
        "HeadscaleApiKeyExpiringSoon",
        "3 days and 5 minutes left at 0m",
        key(NS, "api", "headplane", "259500x120"),
        (Fires({"namespace": NS, "kind": "api", "name": "headplane"}, 259500 - 16 * 60),),
        since=6,
    ),
    Case(
        "HeadscaleApiKeyExpiringSoon",
        "already expired",
        key(NS, "api", "headplane", "0x120"),
        (Fires({"namespace": NS, "kind": "api", "name": "headplane"}, -600),),
        since=0,
    ),
    Case(
        "HeadscaleApiKeyExpiringSoon",
        "pre-auth keys expire by design; the API key exactly 3 days from expiry; another namespace",
        merge(
            key(NS, "preauth", "router-0", "0x120", user="tailnet-routers"),
            key(NS, "api", "headplane", "259200+60x120"),
            key(OTHER, "api", "headplane", "0x120"),
        ),
        until=60,
    ),
]


def _minutes(duration: str) -> int:
    """A rule's ``for`` in whole minutes (the unit tests evaluate once a minute)."""
    seconds = int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[duration[-1]]
    assert seconds % 60 == 0, duration
    return seconds // 60


def _expected(case: Case, rule: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "exp_labels": {**fire.labels, "severity": rule["labels"]["severity"]},
            "exp_annotations": {
                name: expand(text, fire.labels, fire.value) for name, text in rule["annotations"].items()
            },
        }
        for fire in case.fires
    ]


def _unit_tests(scope_name: str) -> list[dict[str, Any]]:
    rules = _rules(SCOPES[scope_name])
    groups = []
    for case in (case for case in CASES if case.scope == scope_name):
        if case.fires:
            assert case.since is not None, case
            rule = rules[case.alert]
            fire_at = case.since + _minutes(rule["for"])
            evals = [(fire_at - 1, []), (fire_at, _expected(case, rule))]
        else:
            evals = [(minute, []) for minute in range(1, case.until + 1)]
        groups.append(
            {
                "name": f"{case.alert}: {case.name}",
                "interval": "1m",
                "input_series": [{"series": series, "values": values} for series, values in case.series.items()],
                "alert_rule_test": [
                    {"eval_time": f"{minute}m", "alertname": case.alert, "exp_alerts": alerts}
                    for minute, alerts in evals
                ],
            }
        )
    return groups


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing = {case.alert for case in CASES if case.fires}
    quiet = {case.alert for case in CASES if not case.fires}
    assert not set(ALERTS) - firing, f"alerts without a firing case: {sorted(set(ALERTS) - firing)}"
    assert not set(ALERTS) - quiet, f"alerts without a quiet case: {sorted(set(ALERTS) - quiet)}"
    assert {case.alert for case in CASES} <= set(ALERTS)
    assert {case.scope for case in CASES} <= set(SCOPES)
    for case in CASES:
        if case.fires:  # an alert that fires where it is not rendered would be a broken case
            assert case.alert in _rules(SCOPES[case.scope]), case


@PROMETHEUS
@pytest.mark.parametrize("scope_name", sorted({case.scope for case in CASES}))
def test_promtool_unit_tests(scope_name: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(rule_file(SCOPES[scope_name]))
    tests = tmp_path / "tests.yml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": _unit_tests(scope_name)},
            sort_keys=False,
            width=1000,
        )
    )
    result = run_rule_tests(tests)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# --- the state exporter, run once -------------------------------------------------------------------------------------


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Shell:
    return shell_for(request.param, tmp_path_factory.getbasetemp() / "busybox-bin")


@pytest.fixture(params=SHELLS_ONLY)
def any_shell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Shell:
    return shell_for(request.param, tmp_path_factory.getbasetemp() / "busybox-bin")


@pytest.fixture(scope="module")
def replica_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real replica of two transactions (several LTX files), made by ``litestream replicate``."""
    assert LITESTREAM is not None
    app = App(tmp_path_factory.mktemp("replica"), sync_interval="100ms").create()
    insert_rows(app.db_path, 20)
    scratch = tmp_path_factory.mktemp("probe")
    with replicating(LITESTREAM, app, app.root / "replicate.log"):
        assert wait_until(lambda: replica_row_count(LITESTREAM, app, scratch) == 20, timeout=15)
        insert_rows(app.db_path, 10)
        assert wait_until(lambda: replica_row_count(LITESTREAM, app, scratch) == 30, timeout=15)
    return app.replica_dir


KEYS = (
    "# HELP headscale_ha_key_expiry_timestamp_seconds When a key the provider minted expires (Unix seconds).\n"
    "# TYPE headscale_ha_key_expiry_timestamp_seconds gauge\n"
    'headscale_ha_key_expiry_timestamp_seconds{kind="api",name="headplane"} 1.8e+09\n'
    'headscale_ha_key_expiry_timestamp_seconds{kind="preauth",name="router-0",user="tailnet-routers"} 1.7e+09\n'
)


@dataclass
class ExporterLab:
    """A backup root in the pod's layout, the pod's output directory, and how to run the exporter there."""

    root: Path
    shell: Shell

    @property
    def backup(self) -> Path:
        return self.root / "backup"

    @property
    def out_file(self) -> Path:
        return self.root / "www" / "metrics.prom"

    def env(self, apps: str, **kwargs: Any) -> dict[str, str]:
        assert LITESTREAM is not None
        return state_exporter_env(
            kwargs.pop("binary", LITESTREAM),
            apps=apps,
            backup_root=self.backup,
            out_file=self.out_file,
            path=self.shell.path,
            **kwargs,
        )


@pytest.fixture
def exporter_lab(tmp_path: Path, shell: Shell) -> ExporterLab:
    (tmp_path / "backup").mkdir()
    (tmp_path / "www").mkdir()
    return ExporterLab(tmp_path, shell)


def _epoch(stamp: str) -> int:
    return int(datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


@pytest.mark.parametrize("keys_text", [KEYS, KEYS.rstrip("\n")], ids=["keys", "keys-without-final-newline"])
def test_exporter_reports_each_replica(
    exporter_lab: ExporterLab, replica_template: Path, keys_text: str, tmp_path: Path
) -> None:
    assert LITESTREAM is not None
    lab = exporter_lab
    shutil.copytree(replica_template, lab.backup / "headscale" / "replica", copy_function=shutil.copy2)
    (lab.backup / "broken").mkdir()
    (lab.backup / "broken" / "replica").write_text("a regular file where the replica directory belongs\n")
    (lab.backup / "fresh" / "replica").mkdir(parents=True)
    keys_file = tmp_path / "keys" / "expiries.prom"
    keys_file.parent.mkdir()
    keys_file.write_text(keys_text)
    before = tree_state(lab.backup)
    started = int(time.time())
    result = run_state_exporter(
        lab.shell.argv, lab.env("headscale headplane broken fresh", keys_file=keys_file), "once"
    )
    finished = int(time.time())
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert tree_state(lab.backup) == before, "the exporter wrote under BACKUP_ROOT"
    assert sorted(path.name for path in lab.out_file.parent.iterdir()) == ["metrics.prom"], "a temporary file remains"
    text = lab.out_file.read_text()
    check = check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert text.endswith(keys_text if keys_text.endswith("\n") else keys_text + "\n"), "KEYS_FILE not verbatim"
    samples = parse_samples(text)
    listing = ltx_listing(LITESTREAM, lab.backup / "headscale" / "replica")
    assert listing
    expected = {
        "headscale": (1, newest_txid(LITESTREAM, lab.backup / "headscale" / "replica"), len(listing)),
        "headplane": (0, 0, 0),  # no directory
        "broken": (0, 0, 0),  # a file
        "fresh": (1, 0, 0),  # an empty replica: readable, nothing in it
    }
    for app, (up, txid, files) in expected.items():
        assert sample(samples, "headscale_ha_replica_up", app=app) == up, app
        assert sample(samples, "headscale_ha_replica_txid", app=app) == txid, app
        assert sample(samples, "headscale_ha_replica_ltx_files", app=app) == files, app
    assert expected["headscale"][1] == max(int(str(entry["max_txid"]), 16) for entry in listing) > 1
    newest = max(_epoch(str(entry["timestamp"])) for entry in listing)
    assert sample(samples, "headscale_ha_replica_newest_timestamp_seconds", app="headscale") == newest
    assert sample(samples, "headscale_ha_replica_newest_timestamp_seconds", app="fresh") == 0
    # `date +%s` reads the kernel's coarse clock (time(2)), which may still show the previous second for up to a
    # tick after Python's precise time.time() has passed it: one second of slack below, none above.
    assert started - 1 <= sample(samples, "headscale_ha_exporter_last_run_timestamp_seconds") <= finished
    assert "headplane: replica NOT readable" in result.stderr
    assert "broken: replica NOT readable" in result.stderr
    assert "headscale: replica readable" in result.stderr


def test_exporter_tolerates_a_missing_keys_file(exporter_lab: ExporterLab, replica_template: Path) -> None:
    lab = exporter_lab
    shutil.copytree(replica_template, lab.backup / "headplane" / "replica", copy_function=shutil.copy2)
    missing = lab.root / "keys" / "expiries.prom"
    result = run_state_exporter(lab.shell.argv, lab.env("headplane", keys_file=missing), "once")
    assert result.returncode == 0, result.stderr
    text = lab.out_file.read_text()
    assert f"# KEYS_FILE {missing} is missing or unreadable" in text
    check = check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert parse_samples(text)[("headscale_ha_replica_up", frozenset({("app", "headplane")}))] == 1
    assert "KEYS_FILE" in result.stderr


def test_exporter_with_no_application_exports_the_round_and_the_keys(exporter_lab: ExporterLab) -> None:
    keys_file = exporter_lab.root / "keys.prom"
    keys_file.write_text(KEYS)
    result = run_state_exporter(exporter_lab.shell.argv, exporter_lab.env("", keys_file=keys_file), "once")
    assert result.returncode == 0, result.stderr
    text = exporter_lab.out_file.read_text()
    assert check_metrics(text).returncode == 0
    assert {name for name, _ in parse_samples(text)} == {
        "headscale_ha_exporter_last_run_timestamp_seconds",
        "headscale_ha_key_expiry_timestamp_seconds",
    }


#: Line 3 of a manifest (the signer writes `signed_at <epoch>`) and what the exporter makes of it.
SIGNED_LINES = {
    "signed": ("signed_at 1700000000", 1700000000),
    "zero": ("signed_at 0", 0),
    "zeros": ("signed_at 001700000000", 1700000000),
    "letters": ("signed_at 17000abc00", 0),
    "empty": ("", 0),
    "extra": ("signed_at 1700000000 extra", 0),
    "nospace": ("signed_at1700000000", 0),
    "twospaces": ("signed_at  1700000000", 0),
    "negative": ("signed_at -1700000000", 0),
    "crlf": ("signed_at 1700000000\r", 0),
    "toolong": ("signed_at 1234567890123456", 0),
    "label": ('signed_at 1 } injected{app="x"} 2', 0),
}


def _manifest(app: str, line3: str, *, first: str = "headscale-ha-replica-manifest 1") -> str:
    return f"{first}\napp {app}\n{line3}\ntxid 0000000000000002\nfiles 0\nhmac {'0' * 64}\n"


def test_exporter_exports_the_manifests_signed_at(
    exporter_lab: ExporterLab, replica_template: Path, tmp_path: Path
) -> None:
    """headscale_ha_replica_signed_timestamp_seconds: line 3's digits, or 0 (absent, a link, not a regular file,
    malformed, beyond the bounded read); one application's bad manifest leaves every other's metrics alone."""
    assert LITESTREAM is not None
    lab = exporter_lab
    for app, (line3, _) in SIGNED_LINES.items():
        (lab.backup / app).mkdir()
        (lab.backup / app / "replica.manifest").write_bytes(_manifest(app, line3).encode())
    for app in ("signed", "letters", "absent"):  # real replicas beside a good, a bad and no manifest
        shutil.copytree(replica_template, lab.backup / app / "replica", copy_function=shutil.copy2)
    outside = tmp_path / "outside.manifest"  # a valid manifest outside the export: the link must not reach it
    outside.write_text(_manifest("symlinked", "signed_at 1234567890"))
    (lab.backup / "symlinked").mkdir()
    (lab.backup / "symlinked" / "replica.manifest").symlink_to(outside)
    (lab.backup / "dangling").mkdir()
    (lab.backup / "dangling" / "replica.manifest").symlink_to(tmp_path / "nonexistent")
    (lab.backup / "directory" / "replica.manifest").mkdir(parents=True)
    (lab.backup / "huge").mkdir()  # a valid line 3 beyond the first 1024 bytes: never read
    (lab.backup / "huge" / "replica.manifest").write_text(_manifest("huge", "signed_at 1700000000", first="x" * 4096))
    expected = {app: value for app, (_, value) in SIGNED_LINES.items()}
    expected |= {"absent": 0, "symlinked": 0, "dangling": 0, "directory": 0, "huge": 0}
    before = tree_state(lab.backup)
    result = run_state_exporter(lab.shell.argv, lab.env(" ".join(expected)), "once")
    assert result.returncode == 0, result.stderr
    assert tree_state(lab.backup) == before, "the exporter wrote under BACKUP_ROOT"
    text = lab.out_file.read_text()
    check = check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "injected" not in text
    assert "1234567890" not in text
    samples = parse_samples(text)
    for app, value in expected.items():
        assert sample(samples, "headscale_ha_replica_signed_timestamp_seconds", app=app) == value, app
    assert {labels for name, labels in samples if name == "headscale_ha_replica_signed_timestamp_seconds"} == {
        frozenset({("app", app)}) for app in expected
    }
    txid = newest_txid(LITESTREAM, lab.backup / "signed" / "replica")
    for app in ("signed", "letters", "absent"):  # the replica's metrics do not depend on its manifest
        assert sample(samples, "headscale_ha_replica_up", app=app) == 1, app
        assert sample(samples, "headscale_ha_replica_txid", app=app) == txid > 1, app
    assert sample(samples, "headscale_ha_replica_up", app="zeros") == 0  # no replica directory
    assert "signed: manifest readable (signed_at 1700000000" in result.stderr
    assert "symlinked: manifest signed_at NOT readable, exported as 0" in result.stderr
    assert "is a symbolic link (not followed)" in result.stderr
    assert "absent: manifest signed_at NOT readable, exported as 0: there is no manifest" in result.stderr
    assert "directory: manifest signed_at NOT readable, exported as 0" in result.stderr
    assert "not a regular file" in result.stderr
    assert "letters: manifest signed_at NOT readable, exported as 0: line 3" in result.stderr


BAD_ENV: list[tuple[str, dict[str, str | None], tuple[str, ...], str]] = [
    ("no-APPS", {"APPS": None}, ("once",), "APPS"),
    ("APPS-uppercase", {"APPS": "Headscale"}, ("once",), "APPS"),
    ("APPS-twice", {"APPS": "headscale headscale"}, ("once",), "APPS"),
    ("APPS-leading-dash", {"APPS": "-x"}, ("once",), "APPS"),
    ("BACKUP_ROOT-relative", {"BACKUP_ROOT": "backup"}, ("once",), "BACKUP_ROOT"),
    ("BACKUP_ROOT-slash", {"BACKUP_ROOT": "/"}, ("once",), "BACKUP_ROOT"),
    ("BACKUP_ROOT-dotdot", {"BACKUP_ROOT": "/backup/../etc"}, ("once",), "BACKUP_ROOT"),
    ("BACKUP_ROOT-space", {"BACKUP_ROOT": "/back up"}, ("once",), "BACKUP_ROOT"),
    ("no-OUT_FILE", {"OUT_FILE": None}, ("once",), "OUT_FILE"),
    ("OUT_FILE-relative", {"OUT_FILE": "metrics.prom"}, ("once",), "OUT_FILE"),
    ("OUT_FILE-directory", {"OUT_FILE": "/tmp/"}, ("once",), "OUT_FILE"),
    ("OUT_FILE-no-directory", {"OUT_FILE": "/nonexistent-dir/metrics.prom"}, ("once",), "OUT_FILE"),
    ("KEYS_FILE-relative", {"KEYS_FILE": "keys.prom"}, ("once",), "KEYS_FILE"),
    ("INTERVAL-zero", {"INTERVAL_SECONDS": "0"}, ("once",), "INTERVAL_SECONDS"),
    ("INTERVAL-word", {"INTERVAL_SECONDS": "thirty"}, ("once",), "INTERVAL_SECONDS"),
    ("INTERVAL-leading-zero", {"INTERVAL_SECONDS": "030"}, ("once",), "INTERVAL_SECONDS"),
    ("INTERVAL-huge", {"INTERVAL_SECONDS": "10000000"}, ("once",), "INTERVAL_SECONDS"),
    ("no-litestream", {"LITESTREAM_BIN": "/nonexistent/litestream"}, ("once",), "LITESTREAM_BIN"),
    ("unknown-argument", {}, ("twice",), "argument"),
    ("two-arguments", {}, ("once", "once"), "argument"),
]


@pytest.mark.parametrize(("overrides", "args", "named"), [case[1:] for case in BAD_ENV], ids=[c[0] for c in BAD_ENV])
def test_exporter_refuses_a_bad_environment(
    any_shell: Shell, tmp_path: Path, overrides: dict[str, str | None], args: tuple[str, ...], named: str
) -> None:
    (tmp_path / "backup").mkdir()
    (tmp_path / "www").mkdir()
    lab = ExporterLab(tmp_path, any_shell)
    true = "true" if any_shell.path is not None else shutil.which("true")
    assert true is not None
    env = lab.env("headscale", binary=true, extra_env=overrides)
    result = run_state_exporter(any_shell.argv, env, *args)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "bad invocation (exit 2)" in result.stderr
    assert not lab.out_file.exists()


def test_exporter_refuses_an_out_file_under_backup_root(any_shell: Shell, tmp_path: Path) -> None:
    (tmp_path / "backup").mkdir()
    lab = ExporterLab(tmp_path, any_shell)
    env = lab.env("headscale", binary="true", extra_env={"OUT_FILE": str(tmp_path / "backup" / "metrics.prom")})
    result = run_state_exporter(any_shell.argv, env, "once")
    assert result.returncode == 2, result.stderr
    assert "OUT_FILE" in result.stderr
    assert "under BACKUP_ROOT" in result.stderr


def test_exporter_loop_stops_at_once_on_sigterm(exporter_lab: ExporterLab, replica_template: Path) -> None:
    """The loop pauses in a background sleep, so SIGTERM (a pod stop) ends it at once, not after the interval."""
    lab = exporter_lab
    shutil.copytree(replica_template, lab.backup / "headscale" / "replica", copy_function=shutil.copy2)
    log = lab.root / "exporter.log"
    with state_exporter_running(lab.shell.argv, lab.env("headscale", interval=30), log) as proc:
        assert wait_until(lab.out_file.exists, timeout=10), log.read_text()
        time.sleep(0.2)  # into the pause
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 143
        assert time.monotonic() - stopped < 3
    assert sorted(path.name for path in lab.out_file.parent.iterdir()) == ["metrics.prom"]
    assert "watching the replicas of 'headscale'" in log.read_text()


@pytest.mark.parametrize("checker", SYNTAX_CHECKERS)
def test_exporter_script_passes_the_shell_checks(checker: list[str]) -> None:
    result = subprocess.run(
        [*checker, str(STATE_EXPORTER_SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_exporter_script_is_packaged() -> None:
    assert state_exporter_script() == STATE_EXPORTER_SCRIPT.read_text()


# --- end to end: Litestream, the exporter, busybox httpd and Prometheus --------------------------------------------

E2E_APPS = ("headscale", "headplane")
#: The lab's intervals (seconds): Prometheus scrapes and evaluates, the exporter lists, Litestream syncs.
SCRAPE = EVALUATION = EXPORTER_INTERVAL = SYNC = 1
LAG = replication_lag_bound(
    scrape_interval_seconds=SCRAPE,
    exporter_interval_seconds=EXPORTER_INTERVAL,
    sync_interval_seconds=SYNC,
    evaluation_interval_seconds=EVALUATION,
)
#: One exporter round (two `litestream ltx` listings) takes well under a second here; allowed one.
ROUND = 1
#: Process scheduling and the API poll (every 0.2 s) on a loaded 2-CPU runner.
SLACK = 2
#: A replica that cannot be read: the next round (its interval plus the round) writes up=0 and txid=0, the next scrape
#: reads it, the next evaluation makes both alerts pending.
BOUND_UNREADABLE = EXPORTER_INTERVAL + ROUND + SCRAPE + EVALUATION + SLACK
#: A replica that stops advancing (still listable): its txid freezes at once; the local txid Litestream had when the
#: replica froze is scraped within a scrape interval, the rule compares the replica with the local txid LAG earlier,
#: so the condition holds LAG + SCRAPE after the break at the latest, and the next evaluation makes it pending.
BOUND_FROZEN = LAG + SCRAPE + EVALUATION + SLACK
#: ... and not before the commits the replica lacks are LAG old, minus what a healthy replica may trail by.
EARLIEST_FROZEN = LAG - (1 + SYNC + EXPORTER_INTERVAL + 2 * SCRAPE + EVALUATION)
#: How long healthy replication is watched once the rule has real data (six evaluations).
HEALTHY_SECONDS = 6
WATCHED = ("LitestreamReplicationStalled", "LitestreamReplicaUnreadable")
E2E_SCOPE = dataclasses.replace(SCOPES["sqlite-active"], replication_lag_seconds=LAG)
#: The lab's exporter appends a keys file, as the pod's does from its ConfigMap: the keys panel has real series.
E2E_DASHBOARD = dashboard_model(E2E_SCOPE, keys=True)
#: Dashboard panels over series of components the lab does not run: their queries must return nothing there.
E2E_DASHBOARD_NOT_COVERED = {
    "Headscale metrics target": "no Headscale server runs in the lab, so Prometheus has no `headscale` target",
    "Ready replicas": "kube-state-metrics series: the lab has no Kubernetes",
    "Subnet routers ready": "kube-state-metrics series: the lab has no Kubernetes",
    "Restore and pre-upgrade restarts (15 min)": "kube-state-metrics series: the lab has no Kubernetes",
    "Time left on the public certificate": "cert-manager's series: the lab runs no cert-manager",
}


@dataclass
class EndToEnd:
    """What the end-to-end run observed; the tests below assert on it (the processes are gone by then)."""

    content_type: str | None = None
    armed_after: float = 0.0  # seconds from Prometheus' start until the rule had LAG seconds of history
    healthy_active: list[dict[str, Any]] = field(default_factory=list)  # watched alerts seen while healthy
    healthy_txids: dict[str, tuple[float, float]] = field(default_factory=dict)  # app -> local txid before/after
    healthy_replica_txids: dict[str, float] = field(default_factory=dict)
    pending_after: dict[tuple[str, str], float] = field(default_factory=dict)  # (alert, app) -> s from the break
    sync_errors: dict[str, float] = field(default_factory=dict)
    monitor_error_logged: bool = False
    litestream_user: str = ""
    phases: dict[str, float] = field(default_factory=dict)  # seconds since the run started, at the end of each phase
    dashboard_series: dict[tuple[str, str], int] = field(default_factory=dict)  # (panel, query) -> series returned


def _by_app(result: list[dict[str, Any]]) -> dict[str, float]:
    return {item["metric"].get("app", ""): float(item["value"][1]) for item in result}


def _run_end_to_end(base: Path, stack: ExitStack, record: EndToEnd) -> None:
    """Prometheus starts first: version 2 applies its targets only after a 5 s discovery tick, which then overlaps
    with Litestream's start. Everything is registered on ``stack``, so it stops whatever happens."""
    assert LITESTREAM is not None
    origin = time.monotonic()

    def phase(name: str) -> None:
        record.phases[name] = round(time.monotonic() - origin, 2)

    backup, www, conf = base / "backup", base / "www", base / "httpd.conf"
    backup.mkdir()
    www.mkdir()
    conf.write_text(EXPORTER_HTTPD_CONF)
    ports = {name: free_port() for name in E2E_APPS}
    httpd_port = free_port()

    rules = base / "rules.yml"
    rules.write_text(rule_file(E2E_SCOPE))
    litestream_targets = [
        {
            "targets": [f"127.0.0.1:{ports[name]}"],
            "labels": {"namespace": NS, "app": name, "pod": f"{name}-0", "container": "litestream"},
        }
        for name in E2E_APPS
    ]
    exporter_target = {
        "targets": [f"127.0.0.1:{httpd_port}"],
        "labels": {"namespace": NS, "pod": "state-exporter-0", "container": "exporter"},
    }
    scrape_configs = [
        {"job_name": "litestream", "static_configs": litestream_targets},
        # honor_labels: the exporter's own `app` label names the application (the program's monitor keeps it)
        {
            "job_name": EXPORTER_JOB,
            "metrics_path": EXPORTER_METRICS_PATH,
            "honor_labels": True,
            "static_configs": [exporter_target],
        },
    ]
    prom = stack.enter_context(
        prometheus_server(
            base / "prometheus",
            scrape_configs=scrape_configs,
            rule_files=[rules],
            scrape_interval=f"{SCRAPE}s",
            evaluation_interval=f"{EVALUATION}s",
        )
    )
    started = time.monotonic()
    phase("prometheus ready")

    record.litestream_user = f"uid {LAB_USER}" if LAB_USER is not None else "this process's user"
    for name in E2E_APPS:
        app = App(base / name)
        write_metrics_config(app, replica_dir=backup / name / "replica", metrics_addr=f"127.0.0.1:{ports[name]}")
        connect_wal(app.db_path).close()
        insert_rows(app.db_path, 5)
        if LAB_USER is not None:  # the pod's volumes belong to the pod's user; SQLite as root keeps that owner
            hand_over(LAB_USER, app.data_dir, *app.data_dir.iterdir(), backup / name)
        stack.enter_context(replicating_as(LITESTREAM, app, base / f"{name}-litestream.log", user=LAB_USER))
        writer = Writer(app.db_path, rate=20).start()
        stack.callback(writer.stop)
    for name in E2E_APPS:
        assert wait_until((backup / name / "replica").is_dir, timeout=15), f"{name}: litestream wrote no replica"
    phase("litestream replicating")

    keys = base / "keys.prom"
    keys.write_text(key_metrics(_lab_keys()))
    env = state_exporter_env(
        LITESTREAM,
        apps=" ".join(E2E_APPS),
        backup_root=backup,
        out_file=www / "metrics.prom",
        keys_file=keys,
        interval=EXPORTER_INTERVAL,
        path=str(busybox_bin_dir(base / "busybox-bin")),
    )
    busybox = shutil.which("busybox")
    assert busybox is not None
    stack.enter_context(state_exporter_running([busybox, "sh"], env, base / "exporter.log"))
    assert wait_until((www / "metrics.prom").exists, timeout=10), (base / "exporter.log").read_text()
    httpd = stack.enter_context(busybox_httpd(www, conf, log=base / "httpd.log", port=httpd_port))
    record.content_type = content_type(httpd + EXPORTER_METRICS_PATH)
    phase("exporter and httpd serving")

    local = f'max by (app) (litestream_txid{{namespace="{NS}",container="litestream"}})'
    local_lag_ago = f'max by (app) (litestream_txid{{namespace="{NS}",container="litestream"}} offset {LAG}s)'
    replica = f'max by (app) (headscale_ha_replica_txid{{namespace="{NS}"}})'

    def armed() -> bool:
        """Both targets up and LAG seconds of local history: the stall rule compares real data from now on."""
        return (
            set(prom.targets_up().values()) == {"up"}
            and len(prom.query(local_lag_ago)) == len(E2E_APPS)
            and all(value > 0 for value in _by_app(prom.query(replica)).values())
        )

    assert wait_until(armed, timeout=LAG + 30, interval=0.25), "Prometheus never had the data the rules need"
    record.armed_after = time.monotonic() - started
    phase("armed")
    record.dashboard_series = {query: len(prom.query(query[1])) for query in dashboard_queries(E2E_DASHBOARD)}
    phase("dashboard queried")

    # Healthy: writing, replicating; the watched alerts must stay inactive.
    before = _by_app(prom.query(local))
    deadline = time.monotonic() + HEALTHY_SECONDS
    while time.monotonic() < deadline:
        record.healthy_active += [alert for alert in prom.alerts() if alert["labels"]["alertname"] in WATCHED]
        time.sleep(0.2)
    after = _by_app(prom.query(local))
    record.healthy_txids = {app: (before.get(app, 0), after.get(app, 0)) for app in E2E_APPS}
    record.healthy_replica_txids = _by_app(prom.query(replica))
    phase("healthy watched")

    # Break: headscale's replica target becomes a regular file; headplane's stays listable but Litestream can no
    # longer write it. The writers keep writing.
    broken = backup / "headscale" / "replica"
    aside = broken.with_name("replica.aside")
    broken.rename(aside)
    broken.write_text("the replica target, replaced by a regular file\n")
    stack.callback(_repair, broken, aside)  # before Litestream stops: it retries a failing shutdown sync for 30 s
    stack.callback(read_only_tree(backup / "headplane" / "replica"))
    broke = time.monotonic()
    expected = {
        ("LitestreamReplicationStalled", "headscale"),
        ("LitestreamReplicaUnreadable", "headscale"),
        ("LitestreamReplicationStalled", "headplane"),
    }
    deadline = broke + max(BOUND_UNREADABLE, BOUND_FROZEN) + 10
    while time.monotonic() < deadline:
        now = time.monotonic() - broke
        for (alert, app), state in prom.alert_states().items():
            if alert in WATCHED and state in ("pending", "firing"):
                record.pending_after.setdefault((alert, app), round(now, 2))
        if expected <= set(record.pending_after) and now > BOUND_UNREADABLE + 1:
            break  # past the time an unreadable headplane replica would have shown
        time.sleep(0.2)
    record.sync_errors = _by_app(prom.query(f'litestream_sync_error_count{{namespace="{NS}"}}'))
    record.monitor_error_logged = "monitor error" in (base / "headscale-litestream.log").read_text()
    phase("break observed")


def _lab_keys() -> list[tuple[str, str, str]]:
    """Two provider-managed keys, far from expiry (the key alerts stay quiet), as ``key_metrics`` takes them."""
    now = datetime.datetime.now(datetime.UTC)
    return [
        ("api", "headplane", (now + datetime.timedelta(days=90)).isoformat()),
        ("preauth", "authkey-0", (now + datetime.timedelta(days=30)).isoformat()),
    ]


def _repair(broken: Path, aside: Path) -> None:
    """Put the moved replica back where the regular file is."""
    broken.unlink(missing_ok=True)
    if aside.is_dir():
        aside.rename(broken)


@pytest.fixture(scope="module")
def end_to_end() -> Iterator[EndToEnd]:
    """Run the scenario once for the module (about 40 s); every process is stopped before the tests assert."""
    base = Path(tempfile.mkdtemp(prefix="alerts-e2e-"))
    base.chmod(0o755)  # the pod's user (Litestream, when the tests run as root) must reach its directories
    record = EndToEnd()
    try:
        started = time.monotonic()
        with ExitStack() as stack:
            _run_end_to_end(base, stack, record)
            stopping = time.monotonic()
        record.phases["stopped"] = round(time.monotonic() - started, 2)
        record.phases["stopping took"] = round(time.monotonic() - stopping, 2)
        yield record
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


E2E = pytest.mark.real_tool("prometheus", "litestream", "busybox")


@E2E
def test_e2e_busybox_httpd_serves_the_metrics_as_prometheus_text(end_to_end: EndToEnd) -> None:
    """busybox strips the spaces of the httpd.conf line; without the line it sends no Content-Type at all."""
    assert end_to_end.content_type == "text/plain;version=0.0.4"


@E2E
def test_e2e_healthy_replication_leaves_the_alerts_inactive(end_to_end: EndToEnd) -> None:
    assert end_to_end.healthy_active == []
    for app, (before, after) in end_to_end.healthy_txids.items():
        assert after > before > 0, f"{app}: the database did not change while healthy"
        assert end_to_end.healthy_replica_txids[app] > 0


@E2E
def test_e2e_a_replica_target_replaced_by_a_file_goes_pending(end_to_end: EndToEnd) -> None:
    seen = end_to_end.pending_after
    for alert in WATCHED:
        assert (alert, "headscale") in seen, f"{alert} never became pending: {seen}"
        assert seen[(alert, "headscale")] <= BOUND_UNREADABLE, seen
    # Litestream itself does not count this as an error (it only logs it): why the exporter exists.
    assert end_to_end.monitor_error_logged
    assert end_to_end.sync_errors.get("headscale") == 0


@E2E
def test_e2e_a_replica_litestream_cannot_write_goes_pending_after_the_lag(end_to_end: EndToEnd) -> None:
    seen = end_to_end.pending_after
    assert ("LitestreamReplicationStalled", "headplane") in seen, seen
    assert EARLIEST_FROZEN <= seen[("LitestreamReplicationStalled", "headplane")] <= BOUND_FROZEN, seen
    assert ("LitestreamReplicaUnreadable", "headplane") not in seen, "a listable replica counted as unreadable"


@E2E
def test_e2e_every_dashboard_query_over_what_the_lab_serves_returns_series(end_to_end: EndToEnd) -> None:
    series = end_to_end.dashboard_series
    assert set(series) == set(dashboard_queries(E2E_DASHBOARD)), "every query ran"
    empty = {title for (title, _), count in series.items() if count == 0}
    assert empty == set(E2E_DASHBOARD_NOT_COVERED), {f"{title}: {expr}": n for (title, expr), n in series.items()}
    counts = {title: n for (title, _), n in series.items()}  # (the panels below have one query each)
    assert counts[f"Transactions the replica lacks ({prom_duration(LAG)} lag)"] == len(E2E_APPS), "one per app"
    assert counts["Time left on provider-managed keys"] == len(_lab_keys()), "one series per key"


@E2E
def test_e2e_timings(end_to_end: EndToEnd) -> None:
    """Not a check: prints what was measured (run with -s)."""
    print(
        json.dumps(
            {
                "lag_seconds": LAG,
                "bound_unreadable": BOUND_UNREADABLE,
                "bound_frozen": BOUND_FROZEN,
                "earliest_frozen": EARLIEST_FROZEN,
                "armed_after": round(end_to_end.armed_after, 2),
                "pending_after_break": {f"{a}/{b}": t for (a, b), t in sorted(end_to_end.pending_after.items())},
                "sync_errors": end_to_end.sync_errors,
                "litestream_ran_as": end_to_end.litestream_user,
                "phases": end_to_end.phases,
            },
            indent=2,
        )
    )
