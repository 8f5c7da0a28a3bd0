"""A stand-in for CloudNativePG's operator in the lab (tests/support/kube_lab.py).

kwok runs no container, so the real operator (which execs into its PostgreSQL instances) cannot run there. What a
stack's `pulumi up` observes of it is small, and that is all this plays: a `postgresql.cnpg.io/v1` Cluster becomes
Ready (the condition `pulumi.com/waitFor: condition=Ready` awaits, with the generation it observed) once it is
``ready_after`` seconds old, and the objects the operator generates and the program's pods reference exist: the
`<cluster>-rw` Service and the `<cluster>-ca` Secret, owned by the Cluster. PostgreSQL itself, replication,
promotion and the operator's validation are not played; a test that needs them is not a lab test.
"""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import UTC, datetime
from typing import Any

import requests

from tests.support.kube_lab import KubeClient, KubeError

CLUSTERS = "/apis/postgresql.cnpg.io/v1/clusters"


def _age(obj: dict[str, Any]) -> float:
    created = datetime.strptime(obj["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return time.time() - created.timestamp()


def _ready(cluster: dict[str, Any]) -> bool:
    conditions = (cluster.get("status") or {}).get("conditions") or []
    generation = cluster["metadata"].get("generation")
    return any(
        c["type"] == "Ready" and c["status"] == "True" and c.get("observedGeneration") == generation for c in conditions
    )


def _owned(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    metadata = cluster["metadata"]
    return [
        {
            "apiVersion": "postgresql.cnpg.io/v1",
            "kind": "Cluster",
            "name": metadata["name"],
            "uid": metadata["uid"],
            "controller": True,
        }
    ]


def _create_absent(client: KubeClient, path: str, body: dict[str, Any]) -> None:
    with contextlib.suppress(KubeError):  # 409: it exists already
        client.create(path, body)


def reconcile(client: KubeClient, ready_after: float) -> list[str]:
    """One pass over every Cluster; returns the `namespace/name` of those it made Ready."""
    made = []
    for cluster in client.get(CLUSTERS)["items"]:
        metadata = cluster["metadata"]
        if _ready(cluster) or _age(cluster) < ready_after or metadata.get("deletionTimestamp"):
            continue
        namespace, name = metadata["namespace"], metadata["name"]
        owned = {"namespace": namespace, "ownerReferences": _owned(cluster)}
        service = {
            "metadata": {"name": f"{name}-rw", **owned},
            "spec": {"ports": [{"name": "postgres", "port": 5432}], "selector": {"cnpg.io/cluster": name}},
        }
        _create_absent(client, f"/api/v1/namespaces/{namespace}/services", service)
        secret = {"metadata": {"name": f"{name}-ca", **owned}, "data": {}}
        _create_absent(client, f"/api/v1/namespaces/{namespace}/secrets", secret)
        instances = cluster["spec"].get("instances", 1)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "ClusterIsReady",
            "message": "Cluster is Ready",
            "lastTransitionTime": now,
            "observedGeneration": metadata.get("generation"),
        }
        status = {"phase": "Cluster in healthy state", "instances": instances, "readyInstances": instances}
        path = f"/apis/postgresql.cnpg.io/v1/namespaces/{namespace}/clusters/{name}/status"
        client.merge_patch(path, {"status": {**status, "conditions": [ready]}})
        made.append(f"{namespace}/{name}")
    return made


class StandinCnpg(threading.Thread):
    """The stand-in, polling every lab cluster every ``interval`` seconds while it runs (a context manager)."""

    def __init__(self, clients: list[KubeClient], *, ready_after: float = 3.0, interval: float = 0.5) -> None:
        super().__init__(name="standin-cnpg", daemon=True)
        self.clients, self.ready_after, self.interval = clients, ready_after, interval
        self.made_ready: list[str] = []
        self._halt = threading.Event()

    def __enter__(self) -> StandinCnpg:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self.join(timeout=10)

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            for client in self.clients:
                with contextlib.suppress(requests.RequestException, KubeError):
                    self.made_ready += reconcile(client, self.ready_after)
