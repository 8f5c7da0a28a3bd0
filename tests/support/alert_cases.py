"""The promtool unit-test cases of the alert rules (components/alerts.py): how a case is written, and the rule
tests promtool runs from a list of them.

A :class:`Case` gives input series (built with :func:`deploy`, :func:`litestream`, :func:`exported` … in promtool's
notation) and what one alert does with them; :func:`rule_tests` turns the cases of one scope into ``promtool test
rules`` groups. The cases themselves are in tests/components/test_alerts_promtool.py (``CASES``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headscale_ha.components.alerts import EXPORTER_JOB, AlertRulesInput, alert_groups
from tests.support.alert_scopes import SCOPES
from tests.support.prometheus_lab import expand


def rules_by_alert(scope: AlertRulesInput) -> dict[str, dict[str, Any]]:
    """The rendered rules of ``scope``, by alert name."""
    return {rule["alert"]: rule for group in alert_groups(scope) for rule in group["rules"]}


def s(metric: str, /, **labels: str) -> str:
    """A series in promtool's input notation."""
    return metric + "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


KSM = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080"}  # stripped by the rules' `max by`


def deploy(namespace: str, name: str, spec: str, ready: str) -> dict[str, str]:
    return {
        s("kube_deployment_spec_replicas", namespace=namespace, deployment=name, **KSM): spec,
        s("kube_deployment_status_replicas_ready", namespace=namespace, deployment=name, **KSM): ready,
    }


def sts(namespace: str, name: str, spec: str, ready: str) -> dict[str, str]:
    return {
        s("kube_statefulset_replicas", namespace=namespace, statefulset=name, **KSM): spec,
        s("kube_statefulset_status_replicas_ready", namespace=namespace, statefulset=name, **KSM): ready,
    }


def litestream(metric: str, namespace: str, app: str, values: str, container: str = "litestream") -> dict[str, str]:
    labels = {"namespace": namespace, "app": app, "pod": f"{app}-6b9f-x7k2p", "container": container}
    return {s(metric, job="litestream", **labels): values}


def exported(metric: str, namespace: str, values: str, **labels: str) -> dict[str, str]:
    return {s(metric, namespace=namespace, job=EXPORTER_JOB, pod="state-exporter-0", **labels): values}


def exporter_up(namespace: str, values: str) -> dict[str, str]:
    return {s("up", namespace=namespace, job=EXPORTER_JOB, pod="state-exporter-0", instance="10.0.0.7:8080"): values}


def cronjob(metric: str, namespace: str, app: str, values: str) -> dict[str, str]:
    return {s(f"kube_cronjob_{metric}", namespace=namespace, cronjob=f"{app}-restore-rehearsal", **KSM): values}


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


def rule_tests(cases: list[Case], scope_name: str) -> list[dict[str, Any]]:
    """The ``promtool test rules`` groups of the cases of ``scope_name``: a firing case is evaluated when its ``for``
    has just elapsed and one minute earlier, a quiet case at every minute of its window."""
    rules = rules_by_alert(SCOPES[scope_name])
    groups = []
    for case in (case for case in cases if case.scope == scope_name):
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
