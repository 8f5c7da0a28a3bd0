"""The serving pod's gate and renewer as components/witness_lease.py builds them: whole objects, an environment the
lease script accepts as it is (every path, name and timing), and a pod a real kube-apiserver admits at the
`restricted` Pod Security level."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from headscale_ha.components import witness_lease
from headscale_ha.components.pod import container_security, pod_security
from headscale_ha.components.settings import FailoverSettings
from headscale_ha.components.witness_lease import LeaseWiring, ready_url
from tests.support import api_objects as api
from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.kube_lab import KubeError
from tests.support.witness_lab import SCRIPT, Witness
from tests.support.witness_samples import as_run_in

RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}}
CONFIG_MOUNT_PIECE: Any = {"name": "config", "mount_path": "/etc/headscale/config.yaml", "sub_path": "config.yaml",
                           "read_only": True}  # fmt: skip
CONFIG_MOUNT = api.mount(CONFIG_MOUNT_PIECE)


def gate_container(wired: LeaseWiring) -> dict[str, Any]:
    """The gate as the API receives it."""
    return api.container(witness_lease.gate_container(wired))


def renewer_container(wired: LeaseWiring, ready: str | None = None) -> dict[str, Any]:
    """The renewer (or watcher) as the API receives it."""
    return api.container(witness_lease.renewer_container(wired, ready))


def lease_volumes(wired: LeaseWiring) -> list[dict[str, Any]]:
    """The lease's volumes as the API receives them."""
    return api.volume(witness_lease.lease_volumes(wired))


def wiring(*, failsafe: bool = True) -> LeaseWiring:
    return LeaseWiring(
        site="hydra",
        failover=FailoverSettings(failsafe=failsafe),
        witness_api_url="https://witness.example.com:6443",
        witness_secret="headscale-lease-witness",
        peers_secret="headscale-lease-peers",
        peers=("cosmos",),
        image="docker.io/curlimages/curl:8.17.0",
        script_config_map="headscale-lease",
        serve_from="/etc/headscale",
        serve_from_mounts=(CONFIG_MOUNT_PIECE,),
        resources=RESOURCES,
    )


def test_the_renewer_is_a_native_sidecar_that_renews_stops_the_writers_and_deletes_its_pod() -> None:
    assert renewer_container(wiring()) == {
        "name": "lease-renewer",
        "image": "docker.io/curlimages/curl:8.17.0",
        "command": ["/bin/sh", "/scripts/lease/witness-lease.sh", "hold"],
        "restartPolicy": "Always",
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "API_URL", "value": "https://witness.example.com:6443"},
            {"name": "NAMESPACE", "value": "headscale-ha"},
            {"name": "LEASE", "value": "headscale"},
            {"name": "IDENTITY", "value": "hydra/$(POD_NAME)"},
            {"name": "LEASE_SECONDS", "value": "20"},
            {"name": "SKEW_SECONDS", "value": "2"},
            {"name": "RENEW_SECONDS", "value": "3"},
            {"name": "FENCE_AFTER_SECONDS", "value": "12"},
            {"name": "STOP", "value": "headscale litestream sign.sh"},
            {"name": "STOP_GRACE_SECONDS", "value": "2"},
            {"name": "RETRY_SECONDS", "value": "1"},
            {"name": "STATE_DIR", "value": "/run/lease"},
            {"name": "TOKEN_FILE", "value": "/var/run/secrets/headscale-ha/witness/token"},
            {"name": "CA_FILE", "value": "/var/run/secrets/headscale-ha/witness/ca.crt"},
            {"name": "SERVE_DIR", "value": "/serving"},
            {"name": "LOCAL_API_URL", "value": "https://kubernetes.default.svc"},
            {"name": "LOCAL_DIR", "value": "/var/run/secrets/headscale-ha/lease"},
            {"name": "FAILSAFE_LEASE", "value": "headscale-failsafe"},
            {"name": "PEERS_DIR", "value": "/var/run/secrets/headscale-ha/peers"},
        ],
        "volumeMounts": [
            {"name": "lease-script", "mountPath": "/scripts/lease", "readOnly": True},
            {"name": "lease-state", "mountPath": "/run/lease"},
            {"name": "serving", "mountPath": "/serving"},
            {"name": "lease-witness", "mountPath": "/var/run/secrets/headscale-ha/witness", "readOnly": True},
            {"name": "lease-local", "mountPath": "/var/run/secrets/headscale-ha/lease", "readOnly": True},
            {"name": "lease-tmp", "mountPath": "/tmp"},
            {"name": "lease-peers", "mountPath": "/var/run/secrets/headscale-ha/peers", "readOnly": True},
        ],
        "resources": RESOURCES,
        "securityContext": api.container_security(container_security()),
    }


def names(env: list[dict[str, Any]]) -> list[str]:
    return [item["name"] for item in env]


def test_the_gate_copies_the_config_and_neither_stops_nor_reads_another_site() -> None:
    gate, renewer = gate_container(wiring()), renewer_container(wiring())
    assert "restartPolicy" not in gate
    assert gate["command"][-1] == "acquire"
    assert set(names(renewer["env"])) - set(names(gate["env"])) == {"STOP", "STOP_GRACE_SECONDS", "PEERS_DIR"}
    assert set(names(gate["env"])) - set(names(renewer["env"])) == {"SERVE_FROM"}
    assert {"name": "SERVE_FROM", "value": "/etc/headscale"} in gate["env"]
    assert CONFIG_MOUNT in gate["volumeMounts"]
    assert CONFIG_MOUNT not in renewer["volumeMounts"]
    assert "lease-peers" not in [mount["name"] for mount in gate["volumeMounts"]]


def test_a_followers_watcher_is_the_renewer_without_failsafe_or_readiness_and_with_its_own_writers() -> None:
    """A follower (Headplane's pod) reads the same Lease as its site's holder, even with the failsafe on, and stops
    its own writers; its containers differ from the holder's in their names, commands and those lines only."""
    follower = replace(wiring(), writers=("node", "litestream", "sign.sh"), follows=True)
    holder_renewer = renewer_container(wiring(), "http://127.0.0.1:8080/health")
    watcher = renewer_container(follower, "http://127.0.0.1:8080/health")
    dropped = {"FAILSAFE_LEASE", "PEERS_DIR", "READY_URL", "READY_WITHIN_SECONDS"}
    env = [item for item in holder_renewer["env"] if item["name"] not in dropped]
    env[env.index({"name": "STOP", "value": "headscale litestream sign.sh"})] = {
        "name": "STOP", "value": "node litestream sign.sh"
    }  # fmt: skip
    mounts = [mount for mount in holder_renewer["volumeMounts"] if mount["name"] != "lease-peers"]
    assert watcher == {**holder_renewer, "name": "lease-watcher", "env": env, "volumeMounts": mounts,
                       "command": ["/bin/sh", "/scripts/lease/witness-lease.sh", "watch"]}  # fmt: skip
    gate = gate_container(follower)
    assert (gate["name"], gate["command"][-1]) == ("lease-follower", "follow")
    assert [item for item in gate["env"] if item["name"] in dropped] == []
    assert "lease-peers" not in [volume["name"] for volume in lease_volumes(follower)]


def test_without_the_failsafe_no_site_reads_another() -> None:
    plain = wiring(failsafe=False)
    for container in (gate_container(plain), renewer_container(plain)):
        assert not {"FAILSAFE_LEASE", "PEERS_DIR"} & set(names(container["env"]))
        assert "lease-peers" not in [mount["name"] for mount in container["volumeMounts"]]
    assert "lease-peers" not in [volume["name"] for volume in lease_volumes(plain)]


def test_each_other_site_is_a_directory_of_the_peers_secret() -> None:
    peers = next(volume for volume in lease_volumes(wiring()) if volume["name"] == "lease-peers")
    assert peers["secret"]["items"] == [
        {"key": "cosmos.api-url", "path": "cosmos/api-url"},
        {"key": "cosmos.token", "path": "cosmos/token"},
        {"key": "cosmos.ca.crt", "path": "cosmos/ca.crt"},
        {"key": "cosmos.namespace", "path": "cosmos/namespace"},
    ]


READY = "http://127.0.0.1:8080/health"


def test_with_the_writers_readiness_the_renewer_gives_the_lease_up_when_it_never_answers() -> None:
    renewer = renewer_container(wiring(), READY)
    assert renewer["env"] == [
        *renewer_container(wiring())["env"],
        {"name": "READY_URL", "value": READY},
        {"name": "READY_WITHIN_SECONDS", "value": "900"},
    ]
    assert {k: v for k, v in renewer.items() if k != "env"} == {
        k: v for k, v in renewer_container(wiring()).items() if k != "env"
    }


def test_the_readiness_is_the_first_http_probe_of_the_pods_containers_its_port_named_or_not() -> None:
    named = {"name": "headscale", "ports": [{"name": "metrics", "container_port": 9090},
                                            {"name": "http", "container_port": 8080}],
             "readiness_probe": {"http_get": {"path": "/health", "port": "http"}}}  # fmt: skip
    sidecar = {"name": "recorder", "readiness_probe": {"exec_": {"command": ["true"]}}}
    numbered = {"name": "ui", "readiness_probe": {"http_get": {"path": "/ok", "port": 3000, "scheme": "HTTPS"}}}
    assert ready_url({"containers": [sidecar, named, numbered]}) == READY
    assert ready_url({"containers": [sidecar, numbered]}) == "https://127.0.0.1:3000/ok"
    assert ready_url({"containers": [sidecar]}) is None


# --- the script accepts what is rendered -----------------------------------------------------------------------


@pytest.mark.real_tool("dash")
@pytest.mark.parametrize("failsafe", [True, False], ids=["failsafe", "no-failsafe"])
@pytest.mark.parametrize(
    "build",
    [gate_container, renewer_container, lambda wired: renewer_container(wired, READY)],
    ids=["gate", "renewer", "renewer-ready"],
)
def test_the_script_accepts_the_rendered_environment(build: Any, failsafe: bool, tmp_path: Path) -> None:
    container = build(wiring(failsafe=failsafe))
    env = as_run_in(container, tmp_path)
    done = subprocess.run(["dash", str(SCRIPT), container["command"][-1]], env=env, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 2
    assert (
        done.stderr.strip() == f"witness-lease: REFUSED (exit 2): CURL_BIN '{tmp_path}/no-curl' is not an executable."
    )


# --- the API server admits the pod -----------------------------------------------------------------------------

NAMESPACE = "serving-pod"


def pod(wiring: LeaseWiring) -> dict[str, Any]:
    """A serving pod as the gate and renewer need it: the process namespace shared (the fence signals the writers),
    the gate first, the renewer right after it, then a writer that reads its config from ``serving``."""
    writer = {"name": "headscale", "image": "ghcr.io/juanfont/headscale:0.29.2",
              "args": ["serve", "-c", "/serving/config.yaml"],
              "volumeMounts": [{"name": "serving", "mountPath": "/serving", "readOnly": True}],
              "securityContext": api.container_security(container_security())}  # fmt: skip
    config = {"name": "config", "configMap": {"name": "headscale-config"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "headscale-0", "namespace": NAMESPACE},
        "spec": {
            "serviceAccountName": "headscale",
            "automountServiceAccountToken": False,
            "shareProcessNamespace": True,
            "securityContext": api.pod_security(pod_security()),
            "initContainers": [gate_container(wiring), renewer_container(wiring)],
            "containers": [writer],
            "volumes": [*lease_volumes(wiring), config],
        },
    }


@pytest.mark.real_tool(*LAB_TOOLS)
def test_a_real_api_server_admits_the_pod_at_the_restricted_level(witness: Witness) -> None:
    client = witness.client
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE, "labels": labels}})
    client.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": "headscale"}})
    path = f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All"
    for failsafe in (True, False):
        admitted = client.create(path, pod(wiring(failsafe=failsafe)))
        assert [c["name"] for c in admitted["spec"]["initContainers"]] == ["lease-gate", "lease-renewer"]
    loose = pod(wiring())
    del loose["spec"]["initContainers"][1]["securityContext"]
    with pytest.raises(KubeError) as refused:  # the level is enforced: the check above could fail
        client.create(path, loose)
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:latest"' in refused.value.message
