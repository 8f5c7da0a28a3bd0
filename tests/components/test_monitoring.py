"""StackMonitoring at its seam (built alone from hand-written Args): the state exporter's pod and what its
ServiceMonitors and PodMonitor select; and the key-expiry path from provider outputs to a metrics file.

That every scrape target a stack renders reaches the objects it names, only from monitoring, and `monitoring.enabled:
false` are in tests/program/test_site_monitoring.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from headscale_ha.components.alerts import EXPORTER_JOB, EXPORTER_METRICS_PATH
from headscale_ha.components.monitoring import KEYS_FILE, StackMonitoring, key_metrics
from tests.support.component_run import build_component
from tests.support.prometheus_lab import needs_prometheus
from tests.support.seam_samples import BACKUP_CLAIM, monitoring_sample
from tests.support.site_objects import object_named as _named
from tests.support.site_objects import objects_of as _of
from tools.harness import ProgramRun


def _lone_monitoring() -> ProgramRun:
    """StackMonitoring alone, from the Args hydra's config maps to (tests/support/seam_samples.py)."""
    return build_component(lambda: StackMonitoring("monitoring", monitoring_sample()))


def test_the_exporter_reads_the_backup_read_only_and_runs_restricted() -> None:
    run = _lone_monitoring()
    pod = _named(run, "Deployment", EXPORTER_JOB)["spec"]["template"]["spec"]
    (backup,) = [v for v in pod["volumes"] if v["name"] == "backup"]
    assert backup["persistentVolumeClaim"] == {"claimName": BACKUP_CLAIM, "readOnly": True}
    collector, httpd = pod["containers"]
    assert {"name": "backup", "mountPath": "/backup", "readOnly": True} in collector["volumeMounts"]
    env = {e["name"]: e["value"] for e in collector["env"]}
    assert env["APPS"] == "headscale headplane"
    assert env["OUT_FILE"] == f"/www{EXPORTER_METRICS_PATH}"
    assert env["KEYS_FILE"].endswith(f"/{KEYS_FILE}")
    assert httpd["command"][:2] == ["httpd", "-f"]
    for container in (collector, httpd):
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_monitors_name_the_services_pods_and_paths_they_scrape() -> None:
    run = _lone_monitoring()
    monitors = {m["metadata"]["name"]: m["spec"] for m in _of(run, "ServiceMonitor")}
    assert set(monitors) == {"headscale", "headscale-ha-litestream", EXPORTER_JOB}
    assert all(spec["namespaceSelector"] == {"matchNames": ["headscale"]} for spec in monitors.values())
    assert monitors[EXPORTER_JOB]["endpoints"][0]["path"] == EXPORTER_METRICS_PATH
    (gateway,) = _of(run, "PodMonitor")
    assert gateway["metadata"]["namespace"] == "tailnet-gateway"
    with_database = build_component(
        lambda: StackMonitoring("monitoring", monitoring_sample(cnpg_cluster="headscale-db"))
    )
    database = _named(with_database, "PodMonitor", "headscale-db")
    assert database["spec"]["selector"] == {"matchLabels": {"cnpg.io/cluster": "headscale-db"}}


def test_key_metrics_carry_each_expiry_and_never_a_zero() -> None:
    text = key_metrics(
        [("api", "headplane", "2027-03-01T00:00:00Z"), ("preauth", "authkey-0", ""), ("preauth", "authkey-1", "")]
    )
    assert 'headscale_ha_key_expiry_timestamp_seconds{kind="api",name="headplane"} 1803859200\n' in text
    assert "# preauth key authkey-0: expiry not known yet" in text
    assert not [line for line in text.splitlines() if line.endswith(" 0")]


@needs_prometheus
def test_key_metrics_are_valid_exposition_text(tmp_path: Path) -> None:
    text = key_metrics([("api", "headplane", "2027-03-01T00:00:00+00:00"), ("preauth", "authkey-0", "")])
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
