"""Small hand-built Kubernetes objects for the wiring check's tests (tests/tools/wiring/), and `check`, which
runs the check on copies of them. Each test module builds what only it needs itself."""

from __future__ import annotations

import copy
from typing import Any

from tools.wiring import Finding, check_wiring

NS = "app"
LABELS = {"app": "web"}


def meta(name: str, ns: str | None = NS, **extra: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, **extra}
    if ns is not None:
        m["namespace"] = ns
    return m


def container(name: str = "main", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "example/app:1", **fields}


def pod_spec(*containers: dict[str, Any], volumes: list | None = None, **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers) or [container()], **fields}
    if volumes is not None:
        spec["volumes"] = volumes
    return spec


def deployment(spec: dict[str, Any] | None = None, name: str = "web", ns: str | None = NS, labels=None) -> dict:
    labels = labels or LABELS
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(name, ns),
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec or pod_spec()},
        },
    }


def secret(name: str, *keys: str, ns: str = NS, string: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(name, ns),
        ("stringData" if string else "data"): dict.fromkeys(keys, "eA=="),
    }


def config_map(name: str, *keys: str, ns: str = NS) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name, ns), "data": dict.fromkeys(keys, "x")}


def claim(name: str, ns: str = NS, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(name, ns), "spec": spec}


def service(name: str = "web", ports=None, selector=None, ns: str = NS, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(name, ns),
        "spec": {
            "selector": LABELS if selector is None else selector,
            "ports": ports if ports is not None else [{"name": "http", "port": 80, "targetPort": "http"}],
            **spec,
        },
    }


def web(**fields: Any) -> dict[str, Any]:
    """A deployment whose one container declares port `http` 8080/TCP."""
    return deployment(pod_spec(container(ports=[{"name": "http", "containerPort": 8080}], **fields)))


def mounted(volume: dict[str, Any], **mount: Any) -> dict[str, Any]:
    """A deployment mounting one volume at /v."""
    c = container(volumeMounts=[{"name": volume["name"], "mountPath": "/v", **mount}])
    return deployment(pod_spec(c, volumes=[volume]))


def check(*objects: dict[str, Any], **kwargs: Any) -> list[Finding]:
    return check_wiring([copy.deepcopy(o) for o in objects], **kwargs)


def texts(findings: list[Finding]) -> list[str]:
    return [str(f) for f in findings]


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, texts(findings)
    return findings[0]


def with_template(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    template = {"metadata": {"labels": LABELS}, "spec": spec}
    body: dict[str, Any] = {
        "Pod": {"metadata": {**meta("w"), "labels": LABELS}, "spec": spec},
        "CronJob": {
            "metadata": meta("w"),
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}},
        },
    }.get(kind, {"metadata": meta("w"), "spec": {"template": template}})
    return {"apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind, **body}


def certificate(secret_name: str = "public-tls", name: str = "public") -> dict[str, Any]:
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": meta(name),
        "spec": {"secretName": secret_name, "issuerRef": {"kind": "ClusterIssuer", "name": "letsencrypt"}},
    }


def ingress(service_name: str = "web", port: dict | None = None, tls_secret: str | None = None) -> dict[str, Any]:
    backend = {"service": {"name": service_name, "port": port or {"number": 80}}}
    spec: dict[str, Any] = {
        "rules": [{"host": "a.example.com", "http": {"paths": [{"path": "/", "backend": backend}]}}]
    }
    if tls_secret:
        spec["tls"] = [{"hosts": ["a.example.com"], "secretName": tls_secret}]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta("ing"), "spec": spec}


def network_policy(selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta("np"),
        "spec": {"podSelector": selector, "policyTypes": ["Ingress"]},
    }


def volsync_source(pvc: str = "data", repository: str = "restic") -> dict[str, Any]:
    return {
        "apiVersion": "volsync.backube/v1alpha1",
        "kind": "ReplicationSource",
        "metadata": meta("backup"),
        "spec": {"sourcePVC": pvc, "trigger": {"schedule": "0 * * * *"}, "restic": {"repository": repository}},
    }
