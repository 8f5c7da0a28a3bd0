"""Alert scopes (namespaces, runbook URL, alert_scope() and the SCOPES examples): for the alerts and dashboard tests."""

from __future__ import annotations

from typing import Any

from headscale_ha.components.alerts import AlertRulesInput

NS = "hs"
ROUTERS_NS = "gw"
RUNBOOK = "https://git.example.org/ops/headscale-ha/runbook.md"


def alert_scope(**overrides: Any) -> AlertRulesInput:
    fields: dict[str, Any] = {
        "namespace": NS,
        "apps": ("headscale", "headplane"),
        "serving": True,
        "routers_namespace": ROUTERS_NS,
        "routers_statefulsets": ("subnet-router-0", "subnet-router-1", "subnet-router-2"),
        "cnpg_cluster": None,
        "certificate": "headscale-tls",
        "rehearsal": True,
        "runbook_url": RUNBOOK,
    }
    fields.update(overrides)
    return AlertRulesInput(**fields)


SCOPES: dict[str, AlertRulesInput] = {
    "sqlite-active": alert_scope(),
    "postgres-stage": alert_scope(apps=("headplane",), cnpg_cluster="headscale-db"),
    "standby": alert_scope(serving=False, certificate=None),
    "no-litestream": alert_scope(apps=(), cnpg_cluster="headscale-db", rehearsal=False),
}
