"""The stack-level checks of HeadscaleServer: a single-node cluster (cosmos) lets the control plane host every
workload of the site; over the stacks and option sets, every file the rendered config names is mounted wherever
Headscale loads it (the migration Job's containers too), and the embedded relay's STUN port and every listener the
config opens are carried by the container, a Service and the stack's NetworkPolicy. The component alone is tested at
its seam, in tests/components/test_headscale.py."""

from __future__ import annotations

import pytest
import yaml

from headscale_ha.components.headscale import (
    PATHS,
)
from tests.support.option_sets import option_set_run
from tests.support.site_objects import headscale_pod as _pod
from tests.support.site_objects import object_named as _object


def test_a_single_node_cluster_lets_the_control_plane_host_the_pods(run_stack) -> None:
    run = run_stack("cosmos")
    for kind, name in (
        ("Deployment", "headscale"),
        ("StatefulSet", "subnet-router-0"),
        ("Deployment", "tailnet-gateway"),
    ):
        spec = _object(run, kind, name)["spec"]["template"]["spec"]
        assert "nodeAffinity" not in spec["affinity"], name
        assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"} in (
            spec["tolerations"]
        ), name


def _file_paths(node: object) -> set[str]:
    """Every file the rendered config.yaml names (keys ending in `_path` with a value, and `policy.path`)."""
    if isinstance(node, dict):
        found = {v for k, v in node.items() if k.endswith("_path") and isinstance(v, str) and v}
        policy = node.get("policy")
        if isinstance(policy, dict) and policy.get("path"):
            found.add(policy["path"])
        return found.union(*(_file_paths(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_file_paths(v) for v in node))
    return set()


def _resolves(path: str, container: dict, volumes: dict[str, dict]) -> bool:
    """The kubelet's view: some mount of the container holds the file, including the item that names it."""
    for mount in container.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/")
        if path == root and "subPath" in mount:
            return True
        if path.startswith(root + "/"):
            source = volumes[mount["name"]]
            items = (source.get("secret") or source.get("configMap") or {}).get("items")
            relative = path[len(root) + 1 :]
            return items is None or relative in {item["path"] for item in items}
    return False


@pytest.mark.parametrize("option_set", ["hydra", "migrating-oidc", "postgres-embedded-derp-ingress-kernel-api-key"])
def test_every_file_the_config_names_is_mounted_wherever_headscale_loads_it(
    option_set: str, project_copy, stack_outputs
) -> None:
    run = option_set_run(option_set, project_copy, stack_outputs)
    config = yaml.safe_load(_object(run, "ConfigMap", "headscale-config")["data"]["config.yaml"])
    paths = _file_paths(config)
    assert PATHS.noise_key in paths
    assert (PATHS.oidc_client_secret in paths) == ("oidc" in option_set)
    assert PATHS.policy in paths, "file mode: Headscale reads the rendered policy wherever it loads the config"
    loaders = []
    for workload in run.kubernetes_objects():
        if workload["kind"] not in ("Deployment", "Job"):
            continue
        pod = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            if container["image"].startswith("ghcr.io/juanfont/headscale:"):
                loaders.append(container["name"])
                # A path the container overrides in its environment is read (or created) there instead: the
                # migration Job's configtest makes throwaway identity keys in its /tmp.
                env = {e["name"]: e.get("value") for e in container.get("env", [])}
                overrides = {
                    PATHS.noise_key: env.get("HEADSCALE_NOISE_PRIVATE_KEY_PATH"),
                    config["derp"]["server"].get("private_key_path"): env.get("HEADSCALE_DERP_SERVER_PRIVATE_KEY_PATH"),
                }
                read = {overrides.get(p) or p for p in paths}
                missing = sorted(p for p in read if not _resolves(p, container, volumes))
                assert missing == [], f"{workload['metadata']['name']}/{container['name']} cannot read {missing}"
    assert loaders == ["headscale", *(["schema", "smoke"] if "migrating" in option_set else [])]


def test_the_embedded_derp_stun_port_is_reachable(project_copy, stack_outputs) -> None:
    run = option_set_run("postgres-embedded-derp-ingress-kernel-api-key", project_copy, stack_outputs)
    config = yaml.safe_load(_object(run, "ConfigMap", "headscale-config")["data"]["config.yaml"])
    port = int(config["derp"]["server"]["stun_listen_addr"].rsplit(":", 1)[1])
    (container,) = _pod(run)["containers"]
    assert {"name": "stun", "containerPort": port, "protocol": "UDP"} in container["ports"]
    service = _object(run, "Service", "headscale-stun")["spec"]
    assert service["ports"] == [{"name": "stun", "port": port, "targetPort": "stun", "protocol": "UDP"}]
    assert service["type"] == "LoadBalancer"
    assert service["externalTrafficPolicy"] == "Local"
    # Clients probe the public hostname's address: the Service asks for it and shares it with the public Gateway.
    annotations = _object(run, "Service", "headscale-stun")["metadata"]["annotations"]
    assert annotations["lbipam.cilium.io/ips"] == "198.51.100.10"
    assert annotations["lbipam.cilium.io/sharing-key"] == "headscale-public"
    assert annotations["pulumi.com/skipAwait"] == "true"
    rules = _object(run, "NetworkPolicy", "headscale")["spec"]["ingress"]
    assert {"ports": [{"protocol": "UDP", "port": port}]} in rules, "from anywhere: clients probe it from the internet"
    without = option_set_run("hydra", project_copy, stack_outputs)
    assert all(p["protocol"] == "TCP" for p in _pod(without)["containers"][0]["ports"])
    assert not [o for o in without.kubernetes_objects() if o["metadata"]["name"] == "headscale-stun"]


def _listeners(config: dict) -> dict[str, tuple[int, str, bool]]:
    """Every listener the rendered config opens: key -> (port, protocol, bound beyond loopback)."""
    found = {key: config[key] for key in ("listen_addr", "metrics_listen_addr", "grpc_listen_addr") if config.get(key)}
    server = config["derp"]["server"]
    if server.get("enabled"):
        found["derp.server.stun_listen_addr"] = server["stun_listen_addr"]
    return {
        key: (int(addr.rsplit(":", 1)[1]), "UDP" if "stun" in key else "TCP", not addr.startswith("127."))
        for key, addr in found.items()
    }


@pytest.mark.parametrize("option_set", ["hydra", "postgres-embedded-derp-ingress-kernel-api-key"])
def test_every_port_the_config_opens_is_carried_where_it_must_be_reached(
    option_set: str, project_copy, stack_outputs
) -> None:
    run = option_set_run(option_set, project_copy, stack_outputs)
    config = yaml.safe_load(_object(run, "ConfigMap", "headscale-config")["data"]["config.yaml"])
    listeners = _listeners(config)
    (container,) = _pod(run)["containers"]
    declared = {(p["containerPort"], p["protocol"]): p["name"] for p in container["ports"]}
    services = [
        o
        for o in run.kubernetes_objects()
        if o["kind"] == "Service" and o["spec"]["selector"].get("app.kubernetes.io/name") == "headscale"
    ]
    served = {(p["targetPort"], p["protocol"]) for s in services for p in s["spec"]["ports"]}
    allowed = {
        (p["port"], p["protocol"])
        for rule in _object(run, "NetworkPolicy", "headscale")["spec"]["ingress"]
        for p in rule["ports"]
    }
    for key, (port, protocol, reachable) in listeners.items():
        if not reachable:
            assert (port, protocol) not in declared, f"{key} is loopback only and needs no port"
            continue
        assert (port, protocol) in declared, f"{key}: no containerPort {port}/{protocol}"
        assert (declared[(port, protocol)], protocol) in served, f"{key}: no Service port"
        assert (port, protocol) in allowed, f"{key}: the NetworkPolicy drops it"
