"""The split gateway: HA subnet routers and gateway services behind one stable IP."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess

import pytest
import yaml

from headscale_ha.components.gateway import advertised_routes, dns_records, endpoints, socat_target
from headscale_ha.components.gateway_config import tailnet_addresses
from headscale_ha.components.pod import selector
from headscale_ha.components.settings import Proxy, RouterMode, Site
from headscale_ha.policy.pack.rules import Subject, violations
from headscale_ha.program.args import gateway_services_args, subnet_routers_args
from headscale_ha.program.config import ConfigError
from tests.support.config_samples import parse
from tools.harness import SECRET, ProgramRun
from tools.plan import plan_stack
from tools.render import manifests, outputs_json


def _obj(run: ProgramRun, kind: str, name: str) -> dict:
    (found,) = [o for o in run.kubernetes_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _kinds(run: ProgramRun, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def _routers(run: ProgramRun) -> list[dict]:
    """The routers' StatefulSets, one per replica, in ordinal order."""
    found = [o for o in _kinds(run, "StatefulSet") if o["metadata"]["name"].startswith("subnet-router-")]
    return sorted(found, key=lambda o: int(o["metadata"]["name"].rsplit("-", 1)[1]))


@pytest.mark.parametrize(("stack", "replicas"), [("hydra", 2), ("cosmos", 1)])
def test_replicas_are_gated_per_cluster(stack: str, replicas: int, run_stack) -> None:
    run = run_stack(stack)
    routers = _routers(run)
    services = _obj(run, "Deployment", "tailnet-gateway")["spec"]
    assert [r["metadata"]["name"] for r in routers] == [f"subnet-router-{n}" for n in range(replicas)]
    assert {r["spec"]["replicas"] for r in routers} == {1}
    assert services["replicas"] == replicas
    many = replicas > 1
    for router in routers:
        assert ("podAntiAffinity" in router["spec"]["template"]["spec"]["affinity"]) is many
    assert ("podAntiAffinity" in services["template"]["spec"]["affinity"]) is many
    assert {p["metadata"]["name"] for p in _kinds(run, "PodDisruptionBudget")} == (
        {"subnet-router", "tailnet-gateway"} if many else set()
    )


def test_a_five_node_cluster_gets_five_routers_not_six(run_stack, project_copy) -> None:
    stack = (
        "config:\n  headscale-ha:role: active\n"
        "  headscale-ha:cluster: {{name: hydra, nodes: 5, apiServer: {{host: 10.10.0.10}}}}\n"
        "  headscale-ha:networkPolicy: {{apiServerCidrs: [10.10.0.0/24]}}\n"
    )
    project = project_copy(
        lab=stack.format() + "  headscale-ha:gateway: {routers: {replicas: 5}, services: {replicas: 5}}\n"
    )
    run = run_stack("lab", project_dir=project)
    routers = _routers(run)
    assert len(routers) == 5
    for ordinal, router in enumerate(routers):
        affinity = router["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        (anti,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        # One node per replica across the five StatefulSets: the rule selects the app label they all carry.
        assert anti == {
            "labelSelector": {"matchLabels": selector("subnet-router")},
            "topologyKey": "kubernetes.io/hostname",
        }
        role = _obj(run, "Role", f"subnet-router-{ordinal}")
        assert role["rules"][0]["resourceNames"] == [f"subnet-router-{ordinal}"]
    assert sorted(
        o["metadata"]["name"]
        for o in _kinds(run, "Secret")
        if re.fullmatch(r"subnet-router-\d+", o["metadata"]["name"])
    ) == [f"subnet-router-{i}" for i in range(5)]
    too_many = project_copy(lab=stack.format() + "  headscale-ha:gateway: {routers: {replicas: 6}}\n")
    with pytest.raises(ConfigError, match=r"gateway\.routers\.replicas: exceeds cluster\.nodes \(5\)"):
        run_stack("lab", project_dir=too_many)


def test_routers_advertise_the_cluster_and_the_pool_with_their_tag(run_stack) -> None:
    run = run_stack("hydra")
    for ordinal, router in enumerate(_routers(run)):
        (container,) = router["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
        assert env["TS_ROUTES"] == "10.244.0.0/16,10.96.0.0/16,172.30.250.0/28"
        assert "--advertise-tags=tag:subnet-router-hydra" in env["TS_EXTRA_ARGS"]
        assert "--login-server=https://headscale.example.com" in env["TS_EXTRA_ARGS"]
        assert env["TS_USERSPACE"] == "true"
        # The node state and the tailnet name keep the names of the single-StatefulSet layout (its pod names).
        assert (env["TS_KUBE_SECRET"], env["TS_HOSTNAME"]) == (
            f"subnet-router-{ordinal}",
            f"hydra-subnet-router-{ordinal}",
        )
        # The enrolment key is not in the pod spec: the entrypoint reads it from the replica's own Secret, and
        # containerboot logs in only while the node has no state (an enrolled replica never reuses its key).
        assert "TS_AUTHKEY" not in env
        assert env["TS_AUTH_ONCE"] == "true"
        spec = router["spec"]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if "secret" in v]
        secret = f"subnet-router-authkey-{ordinal}"
        assert volume["secret"] == {"secretName": secret, "optional": True, "defaultMode": 0o440}
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert (mount["mountPath"], mount["readOnly"], "subPath" in mount) == ("/etc/tailscale-authkey", True, False)
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # Routes are approved by the policy's autoApprovers, for exactly this tag.
    policy = json.loads(_obj(run, "ConfigMap", "headscale-policy-rendered")["data"]["policy.json"])
    for route in env["TS_ROUTES"].split(","):
        assert policy["autoApprovers"]["routes"][route] == ["tag:subnet-router-hydra"]


def test_kernel_mode_adds_only_net_admin_and_says_why(run_stack, lab_project) -> None:
    run = run_stack("lab", project_dir=lab_project("  headscale-ha:gateway: {routers: {mode: kernel, replicas: 2}}\n"))
    routers = next(r for r in run.resources if r.type == "kubernetes:apps/v1:StatefulSet")
    (container,) = routers.inputs["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    # Only the routers leave `restricted`: they get a namespace of their own; the gateway services stay put.
    assert routers.inputs["metadata"]["namespace"] == "tailnet-gateway-routers"
    enforce = "pod-security.kubernetes.io/enforce"
    assert _obj(run, "Namespace", "tailnet-gateway-routers")["metadata"]["labels"][enforce] == "privileged"
    assert _obj(run, "Namespace", "tailnet-gateway")["metadata"]["labels"][enforce] == "restricted"
    assert _obj(run, "Deployment", "tailnet-gateway")["metadata"]["namespace"] == "tailnet-gateway"
    assert violations(Subject(type=routers.type, name=routers.name, props=routers.inputs)) == {}
    greedy = copy.deepcopy(routers.inputs)
    greedy["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"].append("SYS_ADMIN")
    assert "containers-limited-non-root" in violations(Subject(type=routers.type, name=routers.name, props=greedy))


def test_one_load_balancer_with_the_fixed_ip_from_the_pool(run_stack) -> None:
    run = run_stack("hydra")
    (service,) = [s for s in _kinds(run, "Service") if s["spec"].get("type") == "LoadBalancer"]
    assert service["metadata"]["annotations"] == {"lbipam.cilium.io/ips": "172.30.250.10"}
    assert service["metadata"]["labels"]["io.cilium/lb-pool"] == "tailnet"
    assert {(p["name"], p["port"]) for p in service["spec"]["ports"]} == {
        ("dns-udp", 53), ("dns-tcp", 53), ("kube-api", 6443), ("talos", 50000), ("clustermesh", 2379),
    }  # fmt: skip
    (pool,) = _kinds(run, "CiliumLoadBalancerIPPool")
    assert pool["spec"] == {
        "blocks": [{"cidr": "172.30.250.0/28"}],
        "serviceSelector": {"matchLabels": {"io.cilium/lb-pool": "tailnet"}},
    }


def test_proxies_and_dns_serve_the_site(run_stack) -> None:
    run = run_stack("hydra")
    containers = _obj(run, "Deployment", "tailnet-gateway")["spec"]["template"]["spec"]["containers"]
    args = {c["name"]: c["args"] for c in containers}
    assert args["proxy-kube-api"] == ["TCP-LISTEN:6443,fork,reuseaddr", "TCP:10.10.0.10:6443"]
    assert args["proxy-clustermesh"][1] == "TCP:clustermesh-apiserver.kube-system.svc.cluster.local:2379"
    hosts = _obj(run, "ConfigMap", "tailnet-dns-hosts")["data"]["hosts"]
    assert "172.30.250.10 api.hydra.tn.internal.example.com" in hosts
    corefile = _obj(run, "ConfigMap", "tailnet-dns-corefile")["data"]["Corefile"]
    assert "hydra.tn.internal.example.com:1053 {" in corefile
    assert "/etc/coredns-hosts/hosts" in corefile
    outputs = run.outputs["gateway"]
    assert outputs["endpoints"]["kube-api"] == "172.30.250.10:6443"
    assert outputs["routes"] == ["10.244.0.0/16", "10.96.0.0/16", "172.30.250.0/28"]


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_nothing_points_at_a_per_replica_tailnet_ip(stack: str, run_stack) -> None:
    run = run_stack(stack)
    text = "".join(manifests(run).values()) + outputs_json(run)
    assert tailnet_addresses(text) == []
    headscale = yaml.safe_load(_obj(run, "ConfigMap", "headscale-config")["data"]["config.yaml"])
    assert headscale["dns"]["nameservers"]["split"] == {
        "cosmos.tn.internal.example.com": ["172.31.250.10"],
        "hydra.tn.internal.example.com": ["172.30.250.10"],
    }


def test_kubeconfig_output_is_a_secret(run_stack, lab_project) -> None:
    run = run_stack("lab", project_dir=lab_project("  headscale-ha:kubeconfig:\n    secure: v1:AAAA\n"))
    assert run.outputs["kubeconfig"] is SECRET
    assert "kubeconfig" not in run_stack("hydra").outputs


def test_given_router_keys_land_one_per_ordinal_in_the_routers_secret(run_stack, lab_project) -> None:
    keys = "  headscale-ha:routerAuthKeys:\n    - secure: v1:AAAA\n    - secure: v1:BBBB\n"
    run = run_stack("lab", project_dir=lab_project("  headscale-ha:gateway: {routers: {replicas: 2}}\n" + keys))
    for ordinal in range(2):
        secret = _obj(run, "Secret", f"subnet-router-authkey-{ordinal}")
        assert secret["metadata"]["namespace"] == "tailnet-gateway"
        assert secret["stringData"] == {"authkey": SECRET}, "one replica's key, and no other"
    assert not [o for o in _kinds(run, "Secret") if o["metadata"]["name"] == "subnet-router-authkey"]


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


def test_a_router_without_a_key_says_why_and_is_not_ready(run_stack, tmp_path) -> None:
    routers = _routers(run_stack("hydra"))
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
        assert started.stdout == f"containerboot started with TS_AUTHKEY=key-of-{ordinal}\n"
        (keys / "authkey").write_text("")
        assert f"no pre-auth key for subnet-router-{ordinal}" in start().stderr, "an empty key is no key"


def test_routers_start_after_their_key_and_roll_when_a_key_source_appears(
    run_stack, project_copy, stack_outputs
) -> None:
    """Routers read TS_AUTHKEY only at start: they wait for the key Secret, and the first key source rolls them."""
    (without,) = [r["spec"]["template"]["metadata"] for r in _routers(run_stack("cosmos"))]
    run = plan_stack("cosmos", assume_secrets=["bootstrapApiKey"], stack_outputs=stack_outputs)
    routers = next(r for r in run.resources if r.type == "kubernetes:apps/v1:StatefulSet")
    (key,) = [
        r for r in run.resources if r.is_kubernetes_object and r.inputs["metadata"]["name"] == "subnet-router-authkey-0"
    ]
    assert key.urn in routers.dependencies
    annotation = "headscale-ha/auth-key-source"
    assert without["annotations"][annotation] == "none"
    assert routers.inputs["spec"]["template"]["metadata"]["annotations"][annotation] == "minted"


def test_the_gateway_helpers_need_no_stack_config() -> None:
    """Another program computes routes, zone records and endpoints from its own values."""
    site = Site(name="lab", gateway_ip="10.9.0.10", lb_pool="10.9.0.0/28", routes=["10.1.0.0/16", "10.9.0.0/28"])
    assert advertised_routes(site) == ["10.1.0.0/16", "10.9.0.0/28"]
    assert dns_records("lab.example", "10.9.0.10", {"nas": "10.1.2.3"}) == {
        "gateway.lab.example": "10.9.0.10",
        "api.lab.example": "10.9.0.10",
        "nas.lab.example": "10.1.2.3",
    }
    ssh = Proxy(name="ssh", port=22, target_host="bastion", target_port=22)
    assert endpoints("10.9.0.10", [ssh]) == {"dns": "10.9.0.10:53", "ssh": "10.9.0.10:22"}


def test_the_site_decides_the_routers_namespace_key_source_and_default_proxies() -> None:
    config = parse("hydra")
    routers = subnet_routers_args(config)
    assert (routers.mode, routers.namespace) == (RouterMode.USERSPACE, "tailnet-gateway")
    kernel = subnet_routers_args(parse("hydra", gateway={"routers": {"mode": "kernel"}}))
    assert kernel.namespace == "tailnet-gateway-routers", "kernel routers get a privileged namespace of their own"
    assert routers.key_source is None, "no bootstrapApiKey nor routerAuthKey in the shipped stack"
    assert routers.tag == "tag:subnet-router-hydra"
    assert routers.login_server == f"https://{config.tailnet.public_hostname}"
    services = gateway_services_args(config)
    assert [proxy.name for proxy in services.proxies] == ["kube-api", "talos", "clustermesh"]
    assert services.pool_name == "tailnet-hydra"


def test_a_proxy_to_an_ipv6_target_brackets_the_address() -> None:
    """socat reads `TCP:fd00::1:6443` as host `fd00` and a bad port: the address goes in brackets."""
    assert socat_target("fd00::10", 6443) == "TCP:[fd00::10]:6443"
    assert socat_target("10.10.0.10", 6443) == "TCP:10.10.0.10:6443"
    assert socat_target("api.lan", 6443) == "TCP:api.lan:6443"


READS, WRITES = (
    frozenset({"get", "list", "watch"}),
    frozenset({"create", "update", "patch", "delete", "deletecollection"}),
)


def _secret_access(objects: list[dict], namespace: str) -> dict[str, dict[str, set[str]]]:
    """Per router pod (`<StatefulSet>-0`): the Secrets of ``namespace`` it can read and write, through its mounts
    and through its ServiceAccount token (every RoleBinding and ClusterRoleBinding naming that account, the rules
    of their roles; a rule without resourceNames reaches every Secret, a `*` verb or resource everything)."""
    every = {
        o["metadata"]["name"] for o in objects if o["kind"] == "Secret" and o["metadata"].get("namespace") == namespace
    }
    roles = {
        (o["kind"], o["metadata"]["name"]): o.get("rules", []) for o in objects if o["kind"] in ("Role", "ClusterRole")
    }
    bindings = [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    access = {}
    for sts in (o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["namespace"] == namespace):
        spec = sts["spec"]["template"]["spec"]
        account = spec.get("serviceAccountName", "default")
        read = {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        write: set[str] = set()
        for binding in bindings:
            subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
            if subject not in binding["subjects"]:
                continue
            for rule in roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]), []):
                if not ({"secrets", "*"} & set(rule.get("resources", []))) or not ({"", "*"} & set(rule["apiGroups"])):
                    continue
                reached = set(rule.get("resourceNames") or every)
                verbs = set(rule["verbs"])
                read |= reached if verbs & (READS | {"*"}) else set()
                write |= reached if verbs & (WRITES | {"*"}) else set()
        access[f"{sts['metadata']['name']}-0"] = {"read": read, "write": write}
    return access


def test_each_router_pod_reaches_only_its_own_key_and_its_own_state(run_stack, lab_project) -> None:
    """Router N cannot read router M's node key or unused pre-auth key, nor wipe its state."""
    keys = "  headscale-ha:routerAuthKeys:\n" + "".join(f"    - secure: v1:KEY{n}\n" for n in range(3))
    run = run_stack("lab", project_dir=lab_project("  headscale-ha:gateway: {routers: {replicas: 3}}\n" + keys))
    objects = run.kubernetes_objects()
    assert _secret_access(objects, "tailnet-gateway") == {
        f"subnet-router-{n}-0": {
            "read": {f"subnet-router-{n}", f"subnet-router-authkey-{n}"},
            "write": {f"subnet-router-{n}"},
        }
        for n in range(3)
    }
    # The evaluator is not blind: the single-Role layout of release 0.1.0 gave every router every state Secret.
    shared = [
        {**o, "rules": [{**o["rules"][0], "resourceNames": [f"subnet-router-{n}" for n in range(3)]}]}
        if o["kind"] == "Role" and o["metadata"]["name"] == "subnet-router-0"
        else o
        for o in objects
    ]
    assert _secret_access(shared, "tailnet-gateway")["subnet-router-0-0"]["write"] == {
        f"subnet-router-{n}" for n in range(3)
    }
