"""components/api_spelling.py against the SDK's own serializer: the API's spelling of a typed piece is exactly what
pulumi sends for it (``pulumi.runtime.rpc.serialize_property`` with the property's input type), and the Python
spelling comes back from it unchanged. ``pulumi._types`` is private: a new SDK that changes it fails here."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pulumi.runtime.rpc import serialize_property
from pulumi_kubernetes.apps.v1 import DeploymentSpecArgs
from pulumi_kubernetes.batch.v1 import JobSpecArgs
from pulumi_kubernetes.core.v1 import ContainerArgs, PodSpecArgs, ResourceRequirementsArgs, VolumeArgs
from pulumi_kubernetes.networking.v1 import NetworkPolicySpecArgs

from headscale_ha.components.api_spelling import api_spelled, python_spelled
from headscale_ha.components.pod import container_security, pod_security, resources, spread
from headscale_ha.components.settings import ClusterSettings, ComputeResources, ResourceAmounts

#: Map keys that look like either spelling: a map's keys are the user's, never translated.
ODD_KEYS = {"container_port": "a", "volumeMounts": "b", "exec": "c", "exec_": "d", "app.kubernetes.io/name": "e"}

CONTAINER: dict[str, Any] = {
    "name": "app",
    "image": "registry.example.com/app:1.0",
    "command": ["/bin/sh", "-c", "echo volumeMounts container_port"],  # values are never touched
    "args": ["--restart_policy", "readOnly"],
    "env": [
        {"name": "PLAIN", "value": "mount_path"},
        {"name": "FROM_SECRET", "value_from": {"secret_key_ref": {"name": "s", "key": "password_key"}}},
        {"name": "FROM_FIELD", "value_from": {"field_ref": {"field_path": "metadata.name"}}},
    ],
    "ports": [{"name": "http", "container_port": 8080, "protocol": "TCP"}],
    "startup_probe": {"exec_": {"command": ["test", "-f", "/ready"]}, "period_seconds": 1, "failure_threshold": 30},
    "readiness_probe": {"http_get": {"path": "/health", "port": "http"}, "timeout_seconds": 3},
    "liveness_probe": {"tcp_socket": {"port": 8080}, "initial_delay_seconds": 5},
    "lifecycle": {"pre_stop": {"exec_": {"command": ["/bin/sh", "drain"]}}},
    "restart_policy": "Always",
    "resources": {"limits": {"cpu": "1", **ODD_KEYS}, "requests": {"memory": "64Mi"}},
    "security_context": container_security(),
    "volume_mounts": [
        {"name": "data", "mount_path": "/data", "sub_path": "app", "read_only": True},
        {"name": "tmp", "mount_path": "/tmp"},
    ],
}
VOLUMES: list[dict[str, Any]] = [
    {"name": "claim", "persistent_volume_claim": {"claim_name": "data", "read_only": True}},
    {"name": "scratch", "empty_dir": {"medium": "Memory", "size_limit": "1Mi"}},
    {
        "name": "config",
        "config_map": {"name": "c", "optional": True, "default_mode": 0o444, "items": [{"key": "k", "path": "p"}]},
    },
    {"name": "key", "secret": {"secret_name": "s", "default_mode": 0o440, "items": [{"key": "k", "path": "k"}]}},
    {
        "name": "token",
        "projected": {
            "sources": [
                {"service_account_token": {"path": "token", "expiration_seconds": 3600}},
                {"config_map": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downward_api": {"items": [{"path": "ns", "field_ref": {"field_path": "metadata.namespace"}}]}},
            ],
            "default_mode": 0o440,
        },
    },
    {
        "name": "ephemeral",
        "ephemeral": {
            "volume_claim_template": {
                "metadata": {"labels": dict(ODD_KEYS), "annotations": {"storage_class_name": "x"}},
                "spec": {
                    "access_modes": ["ReadWriteOnce"],
                    "storage_class_name": "local-path",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        },
    },
]
CLUSTER = ClusterSettings(nodes=3, exclude_nodes=["node-3"], toleration_seconds=30)
POD_SPEC: dict[str, Any] = {
    "service_account_name": "app",
    "automount_service_account_token": False,
    "enable_service_links": False,
    "share_process_namespace": True,
    "termination_grace_period_seconds": 30,
    "restart_policy": "Never",
    "node_selector": dict(ODD_KEYS),
    "security_context": pod_security(),
    **spread(CLUSTER, "app", 2),
    "init_containers": [{**CONTAINER, "name": "restore"}],
    "containers": [CONTAINER],
    "volumes": VOLUMES,
}
TEMPLATE = {"metadata": {"labels": dict(ODD_KEYS), "annotations": {"checksum/config": "0"}}, "spec": POD_SPEC}
DEPLOYMENT_SPEC: dict[str, Any] = {
    "replicas": 1,
    "strategy": {"type": "Recreate"},
    "revision_history_limit": 3,
    "progress_deadline_seconds": 900,
    "selector": {"match_labels": dict(ODD_KEYS)},
    "template": TEMPLATE,
}
JOB_SPEC: dict[str, Any] = {"backoff_limit": 0, "active_deadline_seconds": 3600, "template": TEMPLATE}
NETWORK_POLICY_SPEC: dict[str, Any] = {
    "pod_selector": {"match_labels": dict(ODD_KEYS)},
    "policy_types": ["Ingress", "Egress"],
    "ingress": [
        {
            "from_": [
                {"pod_selector": {"match_labels": {"app": "x"}}, "namespace_selector": {}},
                {"ip_block": {"cidr": "10.0.0.0/8", "except_": ["10.1.0.0/16"]}},
            ],
            "ports": [{"port": 8080, "protocol": "TCP", "end_port": 8090}],
        }
    ],
    "egress": [
        {
            "to": [
                {
                    "namespace_selector": {
                        "match_expressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a"]}]
                    }
                }
            ]
        }
    ],
}
CASES = [
    pytest.param(CONTAINER, ContainerArgs, id="container"),
    pytest.param(VOLUMES, VolumeArgs, id="volumes"),
    pytest.param(POD_SPEC, PodSpecArgs, id="pod-spec"),
    pytest.param(DEPLOYMENT_SPEC, DeploymentSpecArgs, id="deployment-spec"),
    pytest.param(JOB_SPEC, JobSpecArgs, id="job-spec"),
    pytest.param(NETWORK_POLICY_SPEC, NetworkPolicySpecArgs, id="network-policy-spec"),
]


def serialized(value: Any, sdk_type: type) -> Any:
    """What the SDK sends for ``value`` where the property's type is ``sdk_type`` (a list: each item of it)."""
    typ: Any = list[sdk_type] if isinstance(value, list) else sdk_type
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(serialize_property(value, [], None, typ=typ))
    finally:
        loop.close()


@pytest.mark.parametrize(("value", "sdk_type"), CASES)
def test_the_api_spelling_is_what_the_sdk_sends(value: Any, sdk_type: type) -> None:
    assert api_spelled(value, sdk_type) == serialized(value, sdk_type)


@pytest.mark.parametrize(("value", "sdk_type"), CASES)
def test_the_python_spelling_comes_back_unchanged(value: Any, sdk_type: type) -> None:
    sent = serialized(value, sdk_type)
    assert python_spelled(sent, sdk_type) == value
    assert python_spelled(api_spelled(value, sdk_type), sdk_type) == value


def test_fields_are_respelled_and_map_keys_and_values_are_not() -> None:
    container = api_spelled(CONTAINER, ContainerArgs)
    assert container["volumeMounts"][0] == {"name": "data", "mountPath": "/data", "subPath": "app", "readOnly": True}
    assert container["startupProbe"]["exec"] == {"command": ["test", "-f", "/ready"]}
    assert container["resources"]["limits"] == {"cpu": "1", **ODD_KEYS}
    assert container["command"] == CONTAINER["command"]
    policy = api_spelled(NETWORK_POLICY_SPEC, NetworkPolicySpecArgs)
    assert policy["ingress"][0]["from"][1] == {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}
    assert policy["podSelector"] == {"matchLabels": ODD_KEYS}
    pod = api_spelled(POD_SPEC, PodSpecArgs)
    assert pod["nodeSelector"] == ODD_KEYS
    claim = pod["volumes"][-1]["ephemeral"]["volumeClaimTemplate"]
    assert claim["metadata"] == {"labels": ODD_KEYS, "annotations": {"storage_class_name": "x"}}
    assert claim["spec"]["storageClassName"] == "local-path"


def test_a_value_of_no_input_type_is_left_as_it_is() -> None:
    amounts = resources(ComputeResources(requests=ResourceAmounts(cpu="10m", memory="16Mi"),
                                         limits=ResourceAmounts(cpu="100m", memory="32Mi")))  # fmt: skip
    assert api_spelled("container_port", ContainerArgs) == "container_port"
    assert api_spelled(amounts, ResourceRequirementsArgs) == amounts == serialized(amounts, ResourceRequirementsArgs)
