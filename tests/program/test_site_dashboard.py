"""The Grafana dashboard as the stacks render it: hydra's in the control plane's namespace under the site's
monitoring, the provider-managed keys' panel when the stack owns the tailnet (bootstrapApiKey), and the
`monitoring.dashboard*` settings from the stack's config. The ConfigMap and the model at the component's seam are in
tests/components/test_dashboard.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from headscale_ha.components.dashboard import (
    UID,
    dashboard_queries,
)
from headscale_ha.program.config import ConfigError
from tests.support.seam_dashboard import SIDECAR, dashboard_resource_and_parent
from tests.support.seam_dashboard import dashboard_config_map_of as _dashboard_config_map
from tests.support.seam_dashboard import rendered_model as _rendered
from tests.support.seam_dashboard import rows as _rows
from tools.harness import ProgramRun
from tools.plan import plan_stack


def test_hydra_renders_the_dashboard_in_the_control_plane_namespace(run_stack) -> None:
    run = run_stack("hydra")
    model = _rendered(run, "headscale", SIDECAR)
    assert model["uid"] == UID == "headscale-ha"
    # hydra has no bootstrapApiKey: no provider-managed keys, so only the certificate is under Keys.
    assert _rows(model)["Keys"] == ["Time left on the public certificate"]
    resource, parent = dashboard_resource_and_parent(run)
    assert resource.name == "hydra-monitoring-dashboard"
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
