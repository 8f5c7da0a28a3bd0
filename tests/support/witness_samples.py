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
