"""Samples the witness-lease tests share: a kubeconfig as a stack holds one for the lease containers, and a
rendered lease container's environment as the kubelet would hand it over."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import yaml

KEY = "witnessKubeconfig"
PEM = "-----BEGIN CERTIFICATE-----\nMIIBdummy\n-----END CERTIFICATE-----\n"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.c2lnbmF0dXJl"
CA_DATA = base64.b64encode(PEM.encode()).decode()


def kubeconfig(
    *,
    server: str = "https://witness.example.com:6443/",
    ca_data: str = CA_DATA,
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    current: str | None = "witness",
) -> str:
    """A kubeconfig as `kubectl config view --raw --minify` writes one for a ServiceAccount token."""
    default_cluster = {"server": server, "certificate-authority-data": ca_data}
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "witness", "cluster": cluster if cluster is not None else default_cluster}],
        "contexts": [{"name": "witness", "context": {"cluster": "witness", "user": "hydra-lease"}}],
        "users": [{"name": "hydra-lease", "user": user if user is not None else {"token": TOKEN}}],
        "current-context": current,
    }
    return yaml.safe_dump(document)


def as_run_in(container: dict[str, Any], root: Path) -> dict[str, str]:
    """The container's environment as the kubelet hands it over (the downward API's values, ``$(VAR)`` expanded),
    its absolute paths moved under ``root`` (made as the volumes would be), and a curl that does not exist: the
    script's last check, so that exit 2 naming it means every other input was accepted and nothing was run."""
    pod = {"metadata.name": "headscale-7d9c-x2x7q", "metadata.uid": "0d5e7a8c-4f1b-4c7a-9a58-2b1e2f3c4d5e"}
    env: dict[str, str] = {}
    for item in container["env"]:
        value = item.get("value") or pod[item["valueFrom"]["fieldRef"]["fieldPath"]]
        value = re.sub(r"\$\((\w+)\)", lambda match: env[match.group(1)], value)
        env[item["name"]] = f"{root}{value}" if value.startswith("/") else value
    for mount in container["volumeMounts"]:
        (root / mount["mountPath"].lstrip("/")).mkdir(parents=True, exist_ok=True)
    if "PEERS_DIR" in env:
        (Path(env["PEERS_DIR"]) / "cosmos").mkdir(parents=True)
    return {**env, "CURL_BIN": str(root / "no-curl"), "PATH": "/usr/bin:/bin"}


#: Where each kind the lease adds to a site is created, in ``namespace``.
_LEASE_OBJECT_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
}


def admit_lease_objects(client: Any, objects: list[dict[str, Any]], namespace: str, deployment: dict[str, Any]) -> Any:
    """Create the accounts, Roles and bindings the lease adds in a `restricted` ``namespace`` of a real API server
    (the cluster-scoped admission policy and its binding in a dry run), then have it admit ``deployment``'s pod in a
    dry run: the admitted pod."""
    client.create("/api/v1/namespaces", {"metadata": {"name": namespace,
                  "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})  # fmt: skip
    for kind, path in _LEASE_OBJECT_PATHS.items():
        for made in (o for o in objects if o["kind"] == kind):
            where = path.format(namespace=namespace)
            client.create(f"{where}?dryRun=All" if kind.startswith("Validating") else where, made)
    template = deployment["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{deployment['metadata']['name']}-0",
           "namespace": namespace, "labels": template["metadata"]["labels"]}, "spec": template["spec"]}  # fmt: skip
    return client.create(f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod)


def as_config_map_volume(directory: Path, data: dict[str, str]) -> None:
    """``data`` laid out as the kubelet lays out a ConfigMap volume: a timestamped directory of read-only files,
    ``..data`` pointing at it, and a symlink per key."""
    stamped = directory / "..2026_12_05_06_00_00.000000001"
    stamped.mkdir(parents=True)
    for key, text in data.items():
        (stamped / key).write_text(text)
        (stamped / key).chmod(0o444)
        (directory / key).symlink_to(f"..data/{key}")
    (directory / "..data").symlink_to(stamped.name)


def mounts_moved_to_serving(
    plain: dict[str, dict[str, Any]], gated: list[dict[str, Any]], served: dict[str, str]
) -> int:
    """Asserts that each of the ``gated`` containers mounts what its ``plain`` self (by name) mounts, every mount of
    a ``served`` volume (name -> its directory in ``serving``) moved to the same path in ``serving``, read-only;
    returns how many were moved."""
    moved = 0
    for container in gated:
        for old, new in zip(plain[container["name"]]["volumeMounts"], container["volumeMounts"], strict=True):
            if old["name"] in served:
                sub = f"{served[old['name']]}/{old['subPath']}" if "subPath" in old else served[old["name"]]
                assert new == {**old, "name": "serving", "subPath": sub, "readOnly": True}, container["name"]
                moved += 1
            else:
                assert new == old, container["name"]
    return moved
