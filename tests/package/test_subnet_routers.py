"""The package's SubnetRouters: plain inputs in, the Python component's resources out, the key writers waited for
through `dependsOn`, bad inputs named at their schema path before anything is registered."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from headscale_ha.components import subnet_routers
from headscale_ha.components.settings import ClusterSettings, RouterMode
from headscale_ha.package.subnet_routers import SubnetRouters
from tests.support.component_run import build_component, refused
from tests.support.component_tree import one_level_down, subtree
from tools.harness import ProgramRun, RegisteredResource

CLUSTER = {"nodes": 3, "exclude_nodes": ["gpu-1"], "toleration_seconds": 30}
IMAGE = "ghcr.io/tailscale/tailscale:v1.82.5"

ROUTERS_KERNEL: dict[str, Any] = {
    "namespace": "tailnet-routers",
    "replicas": 2,
    "image": IMAGE,
    "mode": RouterMode.KERNEL,
    "routes": ["10.244.0.0/16", "10.96.0.0/12", "10.10.50.0/24"],
    "tag": "tag:subnet-router-hydra",
    "login_server": "https://vpn.example.org",
    "hostname_prefix": "hydra",
    "cluster": CLUSTER,
    "key_source": "minted",
}
ROUTERS_USERSPACE: dict[str, Any] = {
    **{k: v for k, v in ROUTERS_KERNEL.items() if k != "key_source"},
    "namespace": "tailnet-gateway",
    "replicas": 1,
    "mode": RouterMode.USERSPACE,
    "routes": ["10.20.50.0/24"],
    "hostname_prefix": "cosmos",
    "cluster": {"nodes": 1, "workloads_on_control_plane": True},
}


def _router_args(
    inputs: dict[str, Any], key_secrets: tuple[pulumi.Resource, ...] = ()
) -> subnet_routers.SubnetRoutersArgs:
    """The Python args a program writes by hand for the same routers."""
    return subnet_routers.SubnetRoutersArgs(
        namespace=inputs["namespace"],
        replicas=inputs["replicas"],
        image=inputs["image"],
        mode=inputs["mode"],
        routes=tuple(inputs["routes"]),
        tag=inputs["tag"],
        login_server=inputs["login_server"],
        hostname_prefix=inputs["hostname_prefix"],
        cluster=ClusterSettings(**inputs["cluster"]),
        key_source=inputs.get("key_source"),
        key_secrets=key_secrets,
    )


def _key_secret(name: str = "router-key") -> k8s.core.v1.Secret:
    return k8s.core.v1.Secret(
        name,
        metadata={"name": subnet_routers.router_key_secret(0), "namespace": "tailnet-routers"},
        string_data={"authkey": "hskey-auth-x"},
    )


@pytest.mark.parametrize("inputs", [ROUTERS_KERNEL, ROUTERS_USERSPACE], ids=["kernel-two", "userspace-one"])
def test_routers_register_what_the_python_component_registers_one_level_down(inputs: dict[str, Any]) -> None:
    package = build_component(lambda: SubnetRouters("routers", inputs))
    python = build_component(lambda: subnet_routers.SubnetRouters("routers", _router_args(inputs)))
    below = one_level_down(
        package.resources, "headscale-ha:index:SubnetRouters", "headscale-ha:gateway:SubnetRouters", "routers"
    )
    assert below == subtree(python.resources, "headscale-ha:gateway:SubnetRouters", "routers")
    statefulsets = [n for chain, n, _ in below if chain.endswith("StatefulSet")]
    assert statefulsets == [f"routers-statefulset-{n}" for n in range(inputs["replicas"])]


def _dependencies(run: ProgramRun, resource: RegisteredResource) -> list[str]:
    names = {r.urn: r.name for r in run.resources}
    return sorted(names[urn] for urn in resource.dependencies)


def test_the_statefulsets_wait_for_what_the_component_depends_on_as_for_the_key_secrets() -> None:
    def package_program() -> None:
        SubnetRouters("routers", ROUTERS_KERNEL, pulumi.ResourceOptions(depends_on=[_key_secret()]))

    def python_program() -> None:
        subnet_routers.SubnetRouters("routers", _router_args(ROUTERS_KERNEL, key_secrets=(_key_secret(),)))

    package, python = build_component(package_program), build_component(python_program)
    ours = [_dependencies(package, r) for r in package.of_type("kubernetes:apps/v1:StatefulSet")]
    theirs = [_dependencies(python, r) for r in python.of_type("kubernetes:apps/v1:StatefulSet")]
    assert ours == theirs
    assert ours[1] == [
        "router-key",
        "routers-account-1",
        "routers-binding-1",
        "routers-headless-1",
        "routers-role-1",
        "routers-state-1",
        "routers-statefulset-0",
    ]
    (component,) = package.of_type("headscale-ha:index:SubnetRouters")
    assert _dependencies(package, component) == ["router-key"]


def test_the_routers_outputs_name_what_a_consumer_writes_and_approves() -> None:
    def program() -> None:
        routers = SubnetRouters("routers", ROUTERS_KERNEL)
        pulumi.export(
            "routers",
            {
                "namespace": routers.namespace,
                "statefulSets": routers.stateful_sets,
                "stateSecrets": routers.state_secrets,
                "authKeySecrets": routers.auth_key_secrets,
                "replicas": routers.replicas,
                "routes": routers.routes,
            },
        )

    assert build_component(program).outputs["routers"] == {
        "namespace": "tailnet-routers",
        "statefulSets": ["subnet-router-0", "subnet-router-1"],
        "stateSecrets": ["subnet-router-0", "subnet-router-1"],
        "authKeySecrets": ["subnet-router-authkey-0", "subnet-router-authkey-1"],
        "replicas": 2,
        "routes": ["10.244.0.0/16", "10.96.0.0/12", "10.10.50.0/24"],
    }


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"cluster": {"exclude_nodes": ["gpu-1"]}}, "cluster.nodes", "is required"),
        ({"cluster": {**CLUSTER, "colour": "red"}}, "cluster.colour", "is not an input"),
        ({"mode": "turbo"}, "mode", "'userspace' or 'kernel', got 'turbo'"),
        ({"replicas": 4}, "replicas", "exceeds cluster.nodes (3); replicas are spread one per node, got 4"),
        ({"replicas": 0}, "replicas", "got 0"),
        ({"routes": ["10.244.0.0/16", "10.96.0.1/12"]}, "routes[1]", "host bits set"),
        ({"routes": ["10.244.0.0/16,10.96.0.0/12"]}, "routes[0]", "'10.244.0.0/16,10.96.0.0/12'"),
        ({"tag": "subnet-router-hydra"}, "tag", "got 'subnet-router-hydra'"),
        ({"login_server": "http://vpn.example.org"}, "loginServer", "must be an https:// URL"),
        ({"hostname_prefix": "Hydra"}, "hostnamePrefix", "must be a DNS label"),
        ({"image": "ghcr.io/tailscale/tailscale:latest"}, "image", "moving tag"),
    ],
)
def test_a_bad_router_input_is_refused_at_its_schema_path(change: dict, path: str, message: str) -> None:
    error = refused(lambda: SubnetRouters("routers", {**ROUTERS_KERNEL, **change}))
    assert error.property_path == path
    assert message in error.reason
    assert error.reason.startswith(f"{path}: ")
