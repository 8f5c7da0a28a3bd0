"""The kube lab's clusters behave as real clusters do (tests/support/kube_lab.py): controllers, scheduler and kwok
make workloads run, admission refuses what it should, the CRDs validate, LoadBalancer Services get addresses, an API
server can be killed and brought back with its objects, and tearing the lab down leaves no process behind.

Real-actor tests: skipped, naming what is missing, without the binaries of ``make real-tools`` and openssl.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.support.kube_lab import (
    K8S_VERSION,
    KWOK_RELAUNCHES,
    LB_ANNOTATION,
    Cluster,
    KubeClient,
    KubeError,
    KubeLab,
    Process,
    crd_list_path,
    lab_crds,
    running_lab,
    version_priority,
    wait_for,
)

pytestmark = pytest.mark.real_tool(
    "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "openssl"
)

SETTLE = 60.0  # seconds for a controller to act: generous, the machine may be busy
PAUSE = "registry.k8s.io/pause:3.10"
#: A container that the ``restricted`` Pod Security level admits.
RESTRICTED_CONTAINER = {
    "name": "main",
    "image": PAUSE,
    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
}
RESTRICTED_POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}


@pytest.fixture(scope="module")
def lab() -> Iterator[KubeLab]:
    with running_lab() as lab:
        yield lab


def namespace(client: KubeClient, name: str, labels: dict[str, str] | None = None) -> str:
    client.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}})
    return name


def pod_template(app: str, *, restart: str = "Always", init: bool = False) -> dict[str, Any]:
    spec = {"containers": [RESTRICTED_CONTAINER], "securityContext": RESTRICTED_POD_SECURITY, "restartPolicy": restart}
    if init:  # as the program's pods have: a restore that runs to completion first
        spec["initContainers"] = [RESTRICTED_CONTAINER | {"name": "restore"}]
    return {"metadata": {"labels": {"app": app}}, "spec": spec}


def condition(obj: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in obj.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def settled(check: Any, what: str) -> Any:
    return wait_for(check, timeout=SETTLE, what=what, interval=0.3)


def pods(client: KubeClient, ns: str, app: str) -> list[dict[str, Any]]:
    return client.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}")["items"]


def deploy(client: KubeClient, ns: str, app: str, *, init: bool = False) -> dict[str, Any]:
    """A one-replica Deployment, once available (its pod Running and Ready); the pod."""
    body = {"metadata": {"name": app}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}}}}
    body["spec"]["template"] = pod_template(app, init=init)
    client.create(f"/apis/apps/v1/namespaces/{ns}/deployments", body)
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{app}"
    settled(lambda: client.get(path)["status"].get("availableReplicas") == 1, f"deployment {ns}/{app} available")
    (pod,) = pods(client, ns, app)
    return pod


def test_both_clusters_start_quickly_each_on_its_own(lab: KubeLab) -> None:
    assert lab.startup_seconds is not None
    assert lab.startup_seconds < 60, f"the lab took {lab.startup_seconds:.1f}s to start"
    for name, service_ip in (("hydra", "10.96.0.1"), ("cosmos", "10.97.0.1")):
        client = lab.client(name)
        assert client.get("/api/v1/namespaces/default/services/kubernetes")["spec"]["clusterIP"] == service_ip
        nodes = client.get("/api/v1/nodes")["items"]
        assert sorted(node["metadata"]["name"] for node in nodes) == lab.cluster(name).node_names
        assert condition(nodes[0], "Ready") == "True"
        assert nodes[0]["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    namespace(lab.client("hydra"), "only-in-hydra")
    with pytest.raises(KubeError) as absent:
        lab.client("cosmos").get("/api/v1/namespaces/only-in-hydra")
    assert absent.value.status == 404


def test_the_kubeconfig_names_its_contexts_after_the_clusters(lab: KubeLab) -> None:
    config = yaml.safe_load(lab.kubeconfig.read_text())
    assert config["current-context"] == ""
    contexts = {c["name"]: c["context"] for c in config["contexts"]}
    servers = {c["name"]: c["cluster"]["server"] for c in config["clusters"]}
    assert set(contexts) == {"hydra", "cosmos"}
    for name in contexts:
        assert servers[contexts[name]["cluster"]] == lab.cluster(name).server
        own = yaml.safe_load(lab.kubeconfig_path(name).read_text())
        assert own["current-context"] == name
        assert own["clusters"][0]["cluster"]["server"] == lab.cluster(name).server


def test_the_servers_are_the_pinned_release(lab: KubeLab) -> None:
    for name in lab.names:
        version = lab.client(name).get("/version")
        assert version["gitVersion"] == K8S_VERSION
        assert (version["major"], version["minor"]) == ("1", "37")


def test_a_deployment_runs_ready_on_a_kwok_node(lab: KubeLab) -> None:
    client, cluster = lab.client("hydra"), lab.cluster("hydra")
    pod = deploy(client, namespace(client, "deployments"), "web", init=True)
    assert pod["spec"]["nodeName"] in cluster.node_names
    node = client.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(node["spec"]["podCIDR"])
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert pod["status"]["phase"] == "Running"
    assert condition(pod, "Ready") == "True"
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(cluster.pod_cidr)
    assert pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_deleting_a_namespace_removes_its_workloads(lab: KubeLab) -> None:
    client = lab.client("cosmos")
    ns = namespace(client, "doomed")
    deploy(client, ns, "app")
    client.delete(f"/api/v1/namespaces/{ns}")

    def gone() -> bool:
        try:
            client.get(f"/api/v1/namespaces/{ns}")
        except KubeError as exc:
            return exc.status == 404
        return False

    settled(gone, f"namespace {ns} deleted (its pods deleted by kwok, the finalizer lifted)")


def test_a_job_completes(lab: KubeLab) -> None:
    client = lab.client("cosmos")
    ns = namespace(client, "jobs")
    spec = {"backoffLimit": 0, "template": pod_template("once", restart="Never")}
    client.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {"metadata": {"name": "once"}, "spec": spec})
    path = f"/apis/batch/v1/namespaces/{ns}/jobs/once"
    job = settled(lambda: (job := client.get(path)) and condition(job, "Complete") and job, "job complete")
    assert condition(job, "Complete") == "True"
    assert job["status"]["succeeded"] == 1
    assert [pod["status"]["phase"] for pod in pods(client, ns, "once")] == ["Succeeded"]


def test_a_job_fails_while_the_cluster_fails_jobs_and_completes_after(lab: KubeLab) -> None:
    client, cluster = lab.client("cosmos"), lab.cluster("cosmos")
    ns = namespace(client, "failing-jobs")
    spec = {"backoffLimit": 0, "template": pod_template("doomed", restart="Never")}
    cluster.set_failing_jobs(True)
    try:
        client.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {"metadata": {"name": "doomed"}, "spec": spec})
        path = f"/apis/batch/v1/namespaces/{ns}/jobs/doomed"
        job = settled(lambda: (job := client.get(path)) and condition(job, "Failed") and job, "job failed")
        assert condition(job, "Failed") == "True"
        assert [pod["status"]["phase"] for pod in pods(client, ns, "doomed")] == ["Failed"]
    finally:
        cluster.set_failing_jobs(False)
    spec["template"] = pod_template("fine", restart="Never")
    client.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {"metadata": {"name": "fine"}, "spec": spec})
    path = f"/apis/batch/v1/namespaces/{ns}/jobs/fine"
    assert settled(lambda: condition(client.get(path), "Complete"), "job complete") == "True"


def test_load_balancer_services_get_an_address(lab: KubeLab) -> None:
    client, cluster = lab.client("cosmos"), lab.cluster("cosmos")
    ns = namespace(client, "services")
    port = [{"port": 443, "targetPort": 8443, "protocol": "TCP"}]

    def service(name: str, kind: str, annotations: dict[str, str] | None = None) -> str:
        meta = {"name": name, "annotations": annotations or {}}
        client.create(f"/api/v1/namespaces/{ns}/services", {"metadata": meta, "spec": {"type": kind, "ports": port}})
        return f"/api/v1/namespaces/{ns}/services/{name}"

    def ingress(path: str) -> list[str]:
        return [entry["ip"] for entry in client.get(path)["status"].get("loadBalancer", {}).get("ingress") or []]

    pinned = service("pinned", "LoadBalancer", {LB_ANNOTATION: "198.51.100.10,198.51.100.11"})
    pooled = service("pooled", "LoadBalancer")
    internal = service("internal", "ClusterIP")
    assert settled(lambda: ingress(pinned), "annotated service's address") == ["198.51.100.10"]
    (address,) = settled(lambda: ingress(pooled), "pooled service's address")
    assert address in cluster.lb_pool
    assert address not in lab.cluster("hydra").lb_pool
    time.sleep(1)  # a few more passes of the addresser
    assert ingress(internal) == []


def test_pod_security_admission_refuses_what_restricted_forbids(lab: KubeLab) -> None:
    client = lab.client("hydra")
    ns = namespace(client, "locked", {"pod-security.kubernetes.io/enforce": "restricted"})
    loose = {"metadata": {"name": "loose"}, "spec": {"containers": [{"name": "main", "image": PAUSE}]}}
    with pytest.raises(KubeError) as refused:
        client.create(f"/api/v1/namespaces/{ns}/pods", loose)
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted' in refused.value.message
    assert "allowPrivilegeEscalation" in refused.value.message
    with pytest.raises(KubeError, match="404"):
        client.get(f"/api/v1/namespaces/{ns}/pods/loose")
    compliant = pod_template("tight") | {"metadata": {"name": "tight", "labels": {"app": "tight"}}}
    client.create(f"/api/v1/namespaces/{ns}/pods", compliant)
    assert settled(lambda: condition(client.get(f"/api/v1/namespaces/{ns}/pods/tight"), "Ready"), "pod ready") == "True"


def test_the_program_s_crds_are_served_and_validate(lab: KubeLab) -> None:
    client = lab.client("hydra")
    for crd in lab_crds():
        versions = [version["name"] for version in crd["spec"]["versions"]]
        assert crd_list_path(crd).split("/")[3] == max(versions, key=version_priority)  # the stored one: the highest
        assert client.get(crd_list_path(crd))["items"] == []
    ns = namespace(client, "monitoring")
    path = f"/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors"
    spec = {"selector": {"matchLabels": {"app": "headscale"}}, "endpoints": [{"port": "metrics", "interval": "30s"}]}
    client.create(path, {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                         "metadata": {"name": "headscale"}, "spec": spec})  # fmt: skip
    stored = client.get(f"{path}/headscale")["spec"]
    assert stored["selector"] == spec["selector"]
    assert [endpoint["port"] for endpoint in stored["endpoints"]] == ["metrics"]
    with pytest.raises(KubeError) as invalid:
        client.create(path, {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                             "metadata": {"name": "broken"}, "spec": {"endpoints": []}})  # fmt: skip
    assert invalid.value.status == 422
    assert "spec.selector" in invalid.value.message


def test_a_static_nfs_volume_binds_to_its_claim_and_a_stateful_set_mounts_it(lab: KubeLab) -> None:
    client = lab.client("cosmos")
    ns = namespace(client, "volumes")
    access = {"accessModes": ["ReadWriteMany"], "storageClassName": ""}  # as components/backup_volume.py makes them
    nfs = {"server": "192.0.2.20", "path": "/exports/headscale"}
    volume = access | {"capacity": {"storage": "1Gi"}, "nfs": nfs, "persistentVolumeReclaimPolicy": "Retain"}
    volume["claimRef"] = {"namespace": ns, "name": "backup"}
    client.create("/api/v1/persistentvolumes", {"metadata": {"name": "lab-nfs"}, "spec": volume})
    claim = access | {"resources": {"requests": {"storage": "1Gi"}}, "volumeName": "lab-nfs"}
    client.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", {"metadata": {"name": "backup"}, "spec": claim})
    path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/backup"
    settled(lambda: client.get(path)["status"].get("phase") == "Bound", "claim bound")
    assert client.get("/api/v1/persistentvolumes/lab-nfs")["status"]["phase"] == "Bound"
    template = pod_template("db")
    template["spec"]["volumes"] = [{"name": "backup", "persistentVolumeClaim": {"claimName": "backup"}}]
    template["spec"]["containers"] = [RESTRICTED_CONTAINER | {"volumeMounts": [{"name": "backup", "mountPath": "/b"}]}]
    spec = {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template}
    client.create(f"/apis/apps/v1/namespaces/{ns}/statefulsets", {"metadata": {"name": "db"}, "spec": spec})
    sts = f"/apis/apps/v1/namespaces/{ns}/statefulsets/db"
    settled(lambda: client.get(sts)["status"].get("availableReplicas") == 1, "stateful set available")
    (pod,) = pods(client, ns, "db")
    assert (pod["metadata"]["name"], pod["spec"]["nodeName"]) == ("db-0", "cosmos-node-1")


def test_an_api_server_killed_and_restarted_keeps_its_objects(lab: KubeLab) -> None:
    client, cluster = lab.client("hydra"), lab.cluster("hydra")
    ns = namespace(client, "survivors")
    kept = client.create(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "kept"}, "data": {"a": "1"}})
    server = cluster.server
    lab.stop_api_server("hydra")
    with pytest.raises(requests.ConnectionError):
        client.get("/readyz")
    assert lab.client("cosmos").get("/readyz") == "ok"
    lab.start_api_server("hydra")
    assert cluster.server == server
    again = client.get(f"/api/v1/namespaces/{ns}/configmaps/kept")
    assert (again["metadata"]["uid"], again["data"]) == (kept["metadata"]["uid"], {"a": "1"})
    pod = deploy(client, ns, "after-restart")  # the controllers, scheduler and kwok found the server again
    assert pod["status"]["phase"] == "Running"


def test_a_rebuilt_cluster_is_empty_behind_the_same_kubeconfig(lab: KubeLab) -> None:
    """A site's cluster lost for good and built again: no object of the old one, its nodes and CRDs back."""
    ns = namespace(lab.client("hydra"), "lost-with-it")
    kept = namespace(lab.client("cosmos"), "elsewhere")
    lab.rebuild("hydra")
    client = lab.client("hydra")
    with pytest.raises(KubeError) as gone:
        client.get(f"/api/v1/namespaces/{ns}")
    assert gone.value.status == 404
    assert lab.client("cosmos").get(f"/api/v1/namespaces/{kept}")["metadata"]["name"] == kept
    nodes = sorted(n["metadata"]["name"] for n in client.get("/api/v1/nodes")["items"])
    assert nodes == lab.cluster("hydra").node_names
    assert {c["metadata"]["name"] for c in client.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")[
        "items"]} == {c["metadata"]["name"] for c in lab_crds()}  # fmt: skip
    pod = deploy(client, namespace(client, "rebuilt"), "after-rebuild")
    assert pod["status"]["phase"] == "Running"


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class BodyFailedError(Exception):
    """What a failing test body raises inside the lab."""


def test_teardown_kills_every_process_and_removes_the_files_even_when_the_body_fails() -> None:
    lab = KubeLab(("solo",), crd_dir=None)
    with contextlib.suppress(BodyFailedError), lab:
        pids, root = lab.pids(), lab.root
        running = [pid for pid in pids if _group_exists(pid)]
        ready = lab.client("solo").get("/readyz")
        raise BodyFailedError
    assert (ready, len(pids), running) == ("ok", 5, pids)
    assert root is not None
    assert not root.exists()
    assert [pid for pid in pids if _group_exists(pid)] == []


def crashing(tmp_path: Path, name: str, script: str) -> Cluster:
    """A cluster of no real component: one child, ``name``, that runs ``script`` and exits."""
    cluster = Cluster("hydra", 0, tmp_path, {"api": 1})
    cluster.processes[name] = Process(name, ["sh", "-c", script], tmp_path / f"{name}.log")
    cluster.pids.append(cluster.processes[name].start())
    cluster.processes[name].popen.wait()  # type: ignore[union-attr]
    return cluster


GO_PANIC = "echo 'panic: runtime error: invalid memory address'; echo; echo 'goroutine 7 [running]:'; exit 2"


def test_a_kwok_that_dies_of_a_go_panic_is_launched_again_until_the_budget_is_spent(tmp_path: Path) -> None:
    cluster = crashing(tmp_path, "kwok", GO_PANIC)
    for relaunch in range(1, KWOK_RELAUNCHES + 1):
        cluster.check_alive()
        assert cluster.kwok_relaunches == relaunch
        cluster.processes["kwok"].popen.wait()  # type: ignore[union-attr]
    assert len(cluster.pids) == KWOK_RELAUNCHES + 1
    with pytest.raises(RuntimeError, match=r"kwok exited \(2\)") as refused:
        cluster.check_alive()
    assert "panic: runtime error: invalid memory address" in str(refused.value)


@pytest.mark.parametrize(
    ("name", "script"),
    [("kwok", "echo 'E0101 cannot reach the API server'; exit 1"), ("kube-scheduler", GO_PANIC)],
    ids=["kwok without a crash", "another component's crash"],
)
def test_any_other_exit_fails_the_wait_at_once(tmp_path: Path, name: str, script: str) -> None:
    cluster = crashing(tmp_path, name, script)
    with pytest.raises(RuntimeError, match=rf"{name} exited"):
        cluster.check_alive()
    assert cluster.kwok_relaunches == 0


def test_a_crash_of_an_earlier_run_does_not_count_for_the_current_one(tmp_path: Path) -> None:
    cluster = crashing(tmp_path, "kwok", GO_PANIC)
    process = cluster.processes["kwok"]
    process.argv = ["sh", "-c", "echo 'clean exit'; exit 1"]
    process.start()
    process.popen.wait()  # type: ignore[union-attr]
    assert process.crashed() is None
    with pytest.raises(RuntimeError, match=r"kwok exited \(1\)"):
        cluster.check_alive()
