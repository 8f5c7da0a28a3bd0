"""Monitoring over whole stacks: every scrape target the program renders reaches the objects it names (the
Services of two components, the gateway's CoreDNS, the database), only from monitoring, and `monitoring.enabled:
false` leaves no monitoring object and no metrics port behind. StackMonitoring's own objects are tested at its seam,
in tests/components/test_monitoring.py."""

from __future__ import annotations

import yaml

from headscale_ha.components.alerts import EXPORTER_JOB, EXPORTER_METRICS_PATH
from headscale_ha.components.litestream import LITESTREAM_METRICS_PORT
from tests.models.netpol.netpol import Pod, admitted, namespaces_of, network_policies_of, pods_of
from tests.support.site_netpol import PROMETHEUS
from tests.support.site_objects import object_named as _named
from tests.support.site_objects import objects_of as _of
from tools.harness import ProgramRun
from tools.wiring.selectors import selector_matches

STRANGER = Pod(namespace="elsewhere", labels={"app": "random"}, ip="10.244.7.7")


def _templates(run: ProgramRun) -> list[tuple[str, dict]]:
    """(namespace, pod template) of every Deployment and StatefulSet."""
    return [
        (o["metadata"]["namespace"], o["spec"]["template"])
        for o in run.kubernetes_objects()
        if o["kind"] in ("Deployment", "StatefulSet")
    ]


def test_every_service_monitor_selects_a_service_with_its_port(run_stack) -> None:
    run = run_stack("hydra")
    services = _of(run, "Service")
    monitors = _of(run, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"headscale", "headscale-ha-litestream", EXPORTER_JOB}
    for monitor in monitors:
        spec = monitor["spec"]
        namespaces = spec["namespaceSelector"]["matchNames"]
        chosen = [
            s
            for s in services
            if s["metadata"]["namespace"] in namespaces
            and selector_matches(spec["selector"], s["metadata"].get("labels", {}))
        ]
        assert chosen, monitor["metadata"]["name"]
        for endpoint in spec["endpoints"]:
            assert any(endpoint["port"] in {p["name"] for p in s["spec"]["ports"]} for s in chosen), endpoint
    litestream = _named(run, "ServiceMonitor", "headscale-ha-litestream")
    chosen = {
        s["metadata"]["name"]
        for s in services
        if selector_matches(litestream["spec"]["selector"], s["metadata"].get("labels", {}))
    }
    assert chosen == {"headscale-litestream", "headplane-litestream"}, "the sidecars only, never the app Services"
    assert _named(run, "ServiceMonitor", EXPORTER_JOB)["spec"]["endpoints"][0]["path"] == EXPORTER_METRICS_PATH


def test_litestream_serves_metrics_on_the_port_its_service_targets(run_stack) -> None:
    run = run_stack("hydra")
    for app in ("headscale", "headplane"):
        config = yaml.safe_load(_named(run, "ConfigMap", f"{app}-litestream")["data"]["litestream.yml"])
        assert config["addr"] == f":{LITESTREAM_METRICS_PORT}"
        pod = _named(run, "Deployment", app)["spec"]["template"]
        sidecar = next(c for c in pod["spec"]["initContainers"] if c["name"] == "litestream")
        assert {"name": "ls-metrics", "containerPort": LITESTREAM_METRICS_PORT, "protocol": "TCP"} in sidecar["ports"]
        service = _named(run, "Service", f"{app}-litestream")
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["ports"][0]["targetPort"] == LITESTREAM_METRICS_PORT, (
            "numeric: endpoints need no port lookup"
        )
        assert selector_matches({"matchLabels": service["spec"]["selector"]}, pod["metadata"]["labels"])


def test_pod_monitors_reach_coredns_and_the_database_ports(run_stack, lab_project) -> None:
    from tests.support.stack_snippets import POSTGRES

    run = run_stack("hydra")
    (gateway,) = _of(run, "PodMonitor")
    assert gateway["metadata"]["namespace"] == "tailnet-gateway"
    pods = [t for ns, t in _templates(run) if ns == "tailnet-gateway"]
    chosen = [t for t in pods if selector_matches(gateway["spec"]["selector"], t["metadata"]["labels"])]
    (coredns,) = [c for t in chosen for c in t["spec"]["containers"] if c["name"] == "coredns"]
    assert any(p["name"] == "metrics" and p["containerPort"] == 9153 for p in coredns["ports"])
    corefile = _named(run, "ConfigMap", "tailnet-dns-corefile")["data"]["Corefile"]
    assert "    prometheus :9153\n" in corefile
    postgres = run_stack("lab", project_dir=lab_project(POSTGRES))
    database = _named(postgres, "PodMonitor", "headscale-db")
    assert database["spec"]["selector"] == {"matchLabels": {"cnpg.io/cluster": "headscale-db"}}
    names = {m["metadata"]["name"] for m in _of(postgres, "ServiceMonitor")}
    assert "headscale-ha-litestream" in names, "Headplane's sidecar is still scraped"
    rule = _named(postgres, "PrometheusRule", "headscale-ha")
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert "CNPGArchivingFailing" in alerts


def test_only_monitoring_reaches_the_metrics_ports(run_stack) -> None:
    objects = run_stack("hydra").kubernetes_objects()
    policies, namespaces = network_policies_of(objects), {"monitoring": {}, "elsewhere": {}, **namespaces_of(objects)}
    pods = pods_of(objects)

    def pod(app: str) -> Pod:
        return next(p for p in pods.values() if p.labels.get("app.kubernetes.io/name") == app)

    for app, port in (
        ("headscale", LITESTREAM_METRICS_PORT),
        ("headplane", LITESTREAM_METRICS_PORT),
        (EXPORTER_JOB, 8080),
        ("tailnet-gateway", 9153),
    ):
        assert admitted(policies, namespaces, PROMETHEUS, pod(app), port, "TCP"), (app, port)
        assert not admitted(policies, namespaces, STRANGER, pod(app), port, "TCP"), (app, port)
    assert not admitted(policies, namespaces, pod("headplane"), pod(EXPORTER_JOB), 8080, "TCP")


def test_monitoring_off_renders_no_monitoring_object_and_no_metrics_port(run_stack, project_copy) -> None:
    project = project_copy(lab="config:\n  headscale-ha:role: active\n")
    document = yaml.safe_load((project / "Pulumi.hydra.yaml").read_text())
    document["config"]["headscale-ha:monitoring"] = {"enabled": False}
    (project / "Pulumi.hydra.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    run = run_stack("hydra", project_dir=project)
    kinds = {o["kind"] for o in run.kubernetes_objects()}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert not [o for o in _of(run, "Deployment") if o["metadata"]["name"] == EXPORTER_JOB]
    config = yaml.safe_load(_named(run, "ConfigMap", "headscale-litestream")["data"]["litestream.yml"])
    assert "addr" not in config
    assert not [s for s in _of(run, "Service") if s["metadata"]["name"].endswith("-litestream")]
