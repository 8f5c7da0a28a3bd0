"""The gateway as the stacks wire it: routers per the stack's replicas and cluster (and refused beyond its
nodes), their routes approved by the stack's policy, kernel mode's own namespace, the proxies, DNS and outputs of the
site, no per-replica tailnet address anywhere, the kubeconfig output, given and minted router keys and what each
router pod can reach of them. The components alone are tested at their seam, in tests/components/ (one file each:
test_subnet_routers.py, test_gateway_services.py)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from headscale_ha.components.gateway_config import tailnet_addresses
from headscale_ha.guardrails.pack.rules import Subject, violations
from headscale_ha.program.config import ConfigError
from tests.support.site_objects import assert_routers_each_own_node_role_and_state
from tests.support.site_objects import object_named as _obj
from tests.support.site_objects import objects_of as _kinds
from tests.support.site_objects import routers as _routers
from tools.harness import SECRET
from tools.plan import plan_stack
from tools.render import manifests, outputs_json


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
    assert_routers_each_own_node_role_and_state(run, 5)
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
