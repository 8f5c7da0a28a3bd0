"""SubnetRouters at the component seam, built alone from hand-written Args (tests/support/seam_samples.py): one
StatefulSet per router, gated by the cluster's size, each with its own node, role and state; the router-key settings
and the entrypoint that refuses to start without a key. What the stacks' config renders (routers and their policy,
kernel mode's namespaces, given and minted router keys) is in tests/program/test_site_gateway.py; the gateway
services, the other half of the split gateway, in test_gateway_services.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from headscale_ha.components.settings import RouterMode, Site
from headscale_ha.components.subnet_routers import SubnetRouters, advertised_routes
from headscale_ha.program.args import subnet_routers_args
from headscale_ha.program.config import ConfigError
from tests.support.component_run import build_component
from tests.support.config_samples import parse
from tests.support.seam_samples import SINGLE_NODE, cluster, subnet_routers_sample
from tests.support.site_objects import assert_routers_each_own_node_role_and_state
from tests.support.site_objects import objects_of as _kinds
from tests.support.site_objects import routers as _routers


@pytest.mark.parametrize(("nodes", "replicas"), [(3, 2), (1, 1)])
def test_replicas_are_gated_per_cluster(nodes: int, replicas: int) -> None:
    placement = cluster() if nodes > 1 else cluster(**SINGLE_NODE)
    run = build_component(lambda: SubnetRouters("routers", subnet_routers_sample(replicas=replicas, cluster=placement)))
    routers = _routers(run)
    assert [r["metadata"]["name"] for r in routers] == [f"subnet-router-{n}" for n in range(replicas)]
    assert {r["spec"]["replicas"] for r in routers} == {1}
    many = replicas > 1
    for router in routers:
        assert ("podAntiAffinity" in router["spec"]["template"]["spec"]["affinity"]) is many
    assert {p["metadata"]["name"] for p in _kinds(run, "PodDisruptionBudget")} == ({"subnet-router"} if many else set())


def test_each_of_five_routers_gets_its_own_node_role_and_state() -> None:
    run = build_component(lambda: SubnetRouters("routers", subnet_routers_sample(replicas=5, cluster=cluster(nodes=5))))
    assert_routers_each_own_node_role_and_state(run, 5)


def test_given_router_keys_must_match_the_replicas() -> None:
    config = parse("hydra", secret_keys=("routerAuthKeys",), routerAuthKeys=["k0", "k1"])
    assert [key.get_secret_value() for key in config.router_auth_keys or []] == ["k0", "k1"]
    for keys in (["k0"], ["k0", "k1", "k2"], "k0"):
        with pytest.raises(ConfigError) as caught:
            parse("hydra", secret_keys=("routerAuthKeys",), routerAuthKeys=keys)
        (problem,) = caught.value.problems
        assert problem.startswith("headscale-ha:routerAuthKeys: ")
        assert "k0" not in problem, "a key never reaches an error message"
        if isinstance(keys, list):
            assert problem.endswith(f"(gateway.routers.replicas = 2), got {len(keys)} key(s)")
    # The former single reusable key is refused by name, not taken as one replica's key.
    with pytest.raises(ConfigError, match=r"routerAuthKey: unknown key; did you mean 'routerAuthKeys'\?"):
        parse("hydra", secret_keys=("routerAuthKey",), routerAuthKey="hskey-auth-reusable")


@pytest.mark.parametrize(
    ("routers", "message"),
    [
        ({"authKeyLifetime": "2160h"}, "authKeyLifetime must be 10m to 24h"),
        ({"authKeyLifetime": "5m", "authKeyRotateBefore": "1m"}, "authKeyLifetime must be 10m to 24h"),
        ({"authKeyLifetime": "1h", "authKeyRotateBefore": "1h"}, "must be shorter than authKeyLifetime"),
    ],
)
def test_router_keys_are_short_lived(routers: dict, message: str) -> None:
    assert parse("hydra").gateway.routers.auth_key_lifetime == "1h"
    with pytest.raises(ConfigError, match=message):
        parse("hydra", gateway={"routers": {"replicas": 2, **routers}})


def test_a_router_without_a_key_says_why_and_is_not_ready(tmp_path) -> None:
    routers = _routers(build_component(lambda: SubnetRouters("routers", subnet_routers_sample())))
    assert len(routers) == 2
    busybox = shutil.which("busybox")
    assert busybox is not None, "busybox is needed to run the entrypoint as the tailscale image does"
    boot = tmp_path / "containerboot"
    boot.write_text('#!/bin/sh\necho "containerboot started with TS_AUTHKEY=${TS_AUTHKEY:-<unset>}"\n')
    boot.chmod(0o755)
    for ordinal, router in enumerate(routers):
        (container,) = router["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["TS_ENABLE_HEALTH_CHECK"] == "true"
        port = int(env["TS_LOCAL_ADDR_PORT"].rsplit(":", 1)[1])
        assert {"name": "health", "containerPort": port, "protocol": "TCP"} in container["ports"]
        assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        shell, flag, script = container["command"]
        assert (shell, flag) == ("/bin/sh", "-c")
        # Run the entrypoint for real under busybox sh (the image's shell), with a stand-in containerboot that
        # shows what it was given, against a stand-in of the replica's own mounted key Secret.
        keys = tmp_path / f"keys-{ordinal}"
        keys.mkdir()
        assert "/etc/tailscale-authkey/" in script
        runnable = script.replace("/usr/local/bin/containerboot", str(boot)).replace(
            "/etc/tailscale-authkey", str(keys)
        )

        def start(script: str = runnable) -> subprocess.CompletedProcess[str]:
            return subprocess.run([busybox, "sh", "-c", script], capture_output=True, text=True, env={}, check=True)

        without = start()
        assert (
            f"no pre-auth key for subnet-router-{ordinal} (Secret tailnet-gateway/subnet-router-authkey-{ordinal}, "
            "key authkey, is missing or empty)" in without.stderr
        )
        assert "nextSteps" in without.stderr
        assert without.stdout == "containerboot started with TS_AUTHKEY=<unset>\n"
        (keys / "authkey").write_text(f"key-of-{ordinal}\n")
        started = start()
        assert started.stderr == ""
        # The key file's path, never the key: `tailscale up --authkey=file:<path>` reads it there.
        assert started.stdout == f"containerboot started with TS_AUTHKEY=file:{keys}/authkey\n"
        assert f"key-of-{ordinal}" not in started.stdout
        (keys / "authkey").write_text("")
        assert f"no pre-auth key for subnet-router-{ordinal}" in start().stderr, "an empty key is no key"


def test_the_routes_need_no_stack_config() -> None:
    """Another program computes the routes its routers advertise from its own values."""
    site = Site(name="lab", gateway_ip="10.9.0.10", lb_pool="10.9.0.0/28", routes=["10.1.0.0/16", "10.9.0.0/28"])
    assert advertised_routes(site) == ["10.1.0.0/16", "10.9.0.0/28"]


def test_the_site_decides_the_routers_namespace_and_key_source() -> None:
    config = parse("hydra")
    routers = subnet_routers_args(config)
    assert (routers.mode, routers.namespace) == (RouterMode.USERSPACE, "tailnet-gateway")
    kernel = subnet_routers_args(parse("hydra", gateway={"routers": {"mode": "kernel"}}))
    assert kernel.namespace == "tailnet-gateway-routers", "kernel routers get a privileged namespace of their own"
    assert routers.key_source is None, "no bootstrapApiKey nor routerAuthKey in the shipped stack"
    assert routers.tag == "tag:subnet-router-hydra"
    assert routers.login_server == f"https://{config.tailnet.public_hostname}"
