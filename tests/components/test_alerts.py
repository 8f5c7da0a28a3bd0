"""The alerting rules (components/alerts.py): the renderer without tools, and ``promtool check rules`` on the
rendered rule file of several scopes (sqlite active, postgres stage, standby, no Litestream application at all).

The other checks of the alerts, with the real tools, are beside this module: ``promtool test rules`` for every alert
both ways (test_alerts_promtool.py), the state exporter run once under each shell (test_alerts_exporter.py), and
Litestream, the exporter, busybox httpd and Prometheus end to end (test_alerts_e2e.py).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from headscale_ha.components.alerts import ALERTS, AlertRulesInput, alert_groups, replication_lag_bound, rule_file
from tests.support.alert_cases import rules_by_alert
from tests.support.alert_scopes import NS, ROUTERS_NS, RUNBOOK, SCOPES, alert_scope
from tests.support.prometheus_lab import check_rules, needs_prometheus

# --- the renderer, without tools ----------------------------------------------------------------------------------


def test_alerts_lists_every_alert_any_scope_renders() -> None:
    rendered = {name for scope in SCOPES.values() for name in rules_by_alert(scope)}
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
        rules = rules_by_alert(scope)
        for alert, spec in (
            ("HeadscaleNotReady", "kube_deployment_spec_replicas"),
            ("HeadplaneNotReady", "kube_deployment_spec_replicas"),
            ("SubnetRoutersDegraded", "kube_statefulset_replicas"),
        ):
            assert re.search(rf"\(max by \([a-z, ]+\) \({spec}\{{[^}}]*\}}\) > 0\)$", rules[alert]["expr"]), alert


def test_scope_decides_the_groups() -> None:
    def names(scope: AlertRulesInput) -> set[str]:
        return set(rules_by_alert(scope))

    sqlite, postgres, standby = SCOPES["sqlite-active"], SCOPES["postgres-stage"], SCOPES["standby"]
    assert "CNPGArchivingFailing" not in names(sqlite)
    assert "CNPGArchivingFailing" in names(postgres)
    assert {"HeadscaleApiKeyRotationOverdue", "HeadscaleApiKeyExpiringSoon"} <= names(sqlite) - names(standby)
    assert "CertificateExpiringSoon" not in names(standby)
    assert "headscale|headplane" in rules_by_alert(sqlite)["LitestreamReplicationStalled"]["expr"]
    assert 'app=~"headplane"' in rules_by_alert(postgres)["LitestreamReplicationStalled"]["expr"]
    assert "headscale-restore-rehearsal" not in rules_by_alert(postgres)["RestoreRehearsalFailed"]["expr"]
    no_apps = names(SCOPES["no-litestream"])
    assert not no_apps & {"LitestreamReplicationStalled", "RestoreRefused", "RestoreRehearsalMissing"}
    assert "RestoreRehearsalFailed" not in names(alert_scope(rehearsal=False))
    assert "StateExporterDown" in no_apps  # the exporter also carries the key expiries
    assert "BackupSignatureStale" not in no_apps
    assert 'app="headscale"' not in rules_by_alert(postgres)["BackupSignatureStale"]["expr"]
    assert 'deployment="headplane"' in rules_by_alert(postgres)["BackupSignatureStale"]["expr"]


def test_rendering_is_deterministic_and_the_rule_file_holds_the_groups() -> None:
    for scope in SCOPES.values():
        assert alert_groups(scope) == alert_groups(dataclasses.replace(scope))
        text = rule_file(scope)
        assert text == rule_file(scope)
        assert yaml.safe_load(text) == {"groups": alert_groups(scope)}


def test_the_lag_and_the_intervals_show_in_the_rules() -> None:
    scope = alert_scope(replication_lag_seconds=12, rehearsal_deadline_seconds=1800, api_key_rotate_before_seconds=7200)
    rules = rules_by_alert(scope)
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


@needs_prometheus
@pytest.mark.parametrize("name", list(SCOPES))
def test_promtool_checks_the_rule_file(name: str, tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(rule_file(SCOPES[name]))
    result = check_rules(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules_by_alert(SCOPES[name]))} rules found" in result.stdout
