"""A Kubernetes API server as the engine model's pulumi-kubernetes talks to it: objects by identity, nothing more.

What it enforces, each as the real server does it:
- create of an object whose kind, namespace and name exist fails with 409 AlreadyExists ("... already exists");
- update of an immutable field fails with 422 Invalid ("field is immutable"), from the REFUSE rows of the one rule
  table (tools/kubernetes_rules.py), so the model refuses exactly what ``make diff`` says the server refuses (the
  data of an ``immutable: true`` ConfigMap or Secret among them);
- delete of an absent object is a 404;
- a namespaced object needs its Namespace (404 "namespaces ... not found"), and deleting a Namespace deletes
  everything in it (the namespace controller's cascade).

It also keeps a clock (seconds) so that awaits that the provider performs advance time, and workloads become
ready when the cluster behaviour says so (see ``Cluster``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tools.fields import ABSENT, diff_values
from tools.kubernetes_rules import ProviderFlags, api_group, refusal

NO_FLAGS = ProviderFlags()
ObjectKey = tuple[str, str, str | None, str]  # (API group, kind, namespace or None, name)

#: Kinds that are not namespaced among those the program renders (the rest are).
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "PersistentVolume",
        "ClusterRole",
        "ClusterRoleBinding",
        "StorageClass",
        "CiliumLoadBalancerIPPool",
        "CustomResourceDefinition",
        "ClusterIssuer",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)


class ApiError(Exception):
    """A refused request, with the HTTP status and reason the API server answers."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{reason} ({status}): {message}")
        self.status = status
        self.reason = reason


def object_key(obj: dict[str, Any]) -> ObjectKey:
    metadata = obj.get("metadata") or {}
    kind = str(obj.get("kind"))
    namespace = None if kind in CLUSTER_SCOPED else str(metadata.get("namespace") or "default")
    return (api_group(obj.get("apiVersion")), kind, namespace, str(metadata.get("name")))


def _merged(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: _merged(base.get(k), v) for k, v in patch.items()}}
    return copy.deepcopy(patch)


def describe(key: ObjectKey) -> str:
    group, kind, namespace, name = key
    resource = f"{kind.lower()}s{'.' + group if group else ''}"
    return f'{resource} "{name}"' + (f" in namespace {namespace!r}" if namespace else "")


@dataclass
class StoredObject:
    body: dict[str, Any]
    created_at: float
    generation: int = 1
    uid: int = 0
    manager: str = ""  # the field manager that last applied it (pulumi-kubernetes: one per Pulumi resource)


@dataclass
class Cluster:
    """One cluster: its API server's objects, and how its controllers behave for the awaits.

    ``ready_after``: seconds after which an object of a kind becomes ready (controllers at work: a CloudNativePG
    Cluster takes a while to bootstrap); ``job_runner``: decides how a Job ends, given the cluster when it starts
    (None: it succeeds); ``unready``: names of workloads whose pods never become ready (a crash loop).
    """

    name: str
    server: str = "https://10.10.0.10:6443"
    ready_after: dict[str, float] = field(default_factory=lambda: {"Cluster": 120.0})
    job_runner: Callable[[Cluster, dict[str, Any]], str | None] | None = None
    unready: set[str] = field(default_factory=set)
    objects: dict[ObjectKey, StoredObject] = field(default_factory=dict)
    now: float = 0.0
    log: list[str] = field(default_factory=list)
    _next_uid: int = 0

    # ---------------------------------------------------------------------------------------------- reads

    def get(self, key: ObjectKey) -> dict[str, Any] | None:
        stored = self.objects.get(key)
        return copy.deepcopy(stored.body) if stored else None

    def find(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        for key, stored in self.objects.items():
            if key[1] == kind and key[3] == name and (namespace is None or key[2] == namespace):
                return copy.deepcopy(stored.body)
        return None

    def object_keys(self) -> Iterator[ObjectKey]:
        return iter(sorted(self.objects, key=str))

    def age(self, key: ObjectKey) -> float:
        return self.now - self.objects[key].created_at

    # ---------------------------------------------------------------------------------------------- writes

    def is_ready(self, key: ObjectKey) -> bool:
        """Whether its controller reports the object ready by now (``ready_after`` its kind, from creation)."""
        kind = key[1]
        return key in self.objects and self.age(key) >= self.ready_after.get(kind, 0.0)

    def create(self, obj: dict[str, Any], *, manager: str = "") -> dict[str, Any]:
        key = object_key(obj)
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", f"{describe(key)} already exists")
        namespace = key[2]
        if namespace is not None and ("", "Namespace", None, namespace) not in self.objects:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        self._next_uid += 1
        body = copy.deepcopy(obj)
        body.setdefault("metadata", {})["uid"] = f"uid-{self._next_uid}"
        self.objects[key] = StoredObject(body=body, created_at=self.now, uid=self._next_uid, manager=manager)
        self.log.append(f"create {describe(key)}")
        return copy.deepcopy(body)

    def patch(
        self, obj: dict[str, Any], *, flags: ProviderFlags = NO_FLAGS, manager: str = "", dry_run: bool = False
    ) -> dict[str, Any]:
        """The update of a resource's object: immutable fields refused, the rest replaced (``dry_run``: validated
        the same way, nothing written)."""
        key = object_key(obj)
        stored = self.objects.get(key)
        if stored is None:
            raise ApiError(404, "NotFound", f"{describe(key)} not found")
        live = {k: v for k, v in stored.body.items() if k != "status"}
        live_metadata = {k: v for k, v in (live.get("metadata") or {}).items() if k != "uid"}
        for change in diff_values({**live, "metadata": live_metadata}, obj):
            why = refusal(change, live, obj, flags)
            if why is not None:
                raise ApiError(422, "Invalid", f"{describe(key)} is invalid: {change.text}: field is immutable ({why})")
        body = copy.deepcopy(obj)
        body.setdefault("metadata", {})["uid"] = stored.body["metadata"]["uid"]
        if "status" in stored.body:
            body["status"] = stored.body["status"]
        if dry_run:
            return body
        stored.body = body
        stored.generation += 1
        stored.manager = manager or stored.manager
        self.log.append(f"patch {describe(key)}")
        return copy.deepcopy(body)

    def apply_patch(self, obj: dict[str, Any], *, manager: str = "", force: bool = False) -> dict[str, Any]:
        """A server-side apply: its fields merged into the object, which is created when it does not exist.
        Without ``force``, a field another manager set to another value is a 409 Conflict (SSA's rule); the model
        takes every field of the object as set by its last manager."""
        key = object_key(obj)
        stored = self.objects.get(key)
        if stored is None:
            return self.create(obj, manager=manager)
        if not force and stored.manager and stored.manager != manager:
            # Only a field the object has, with another value: a field nobody set is simply taken.
            clashes = [
                c.text
                for c in diff_values(stored.body, _merged(stored.body, obj))
                if c.path[:2] != ("metadata", "uid") and c.old is not ABSENT
            ]
            if clashes:
                raise ApiError(
                    409,
                    "Conflict",
                    f"Apply failed with {len(clashes)} conflict(s): conflicts with {stored.manager!r}: "
                    + ", ".join(clashes[:5]),
                )
        stored.manager = manager
        stored.body = _merged(stored.body, obj)
        stored.generation += 1
        self.log.append(f"apply {describe(key)}")
        return copy.deepcopy(stored.body)

    def relinquish(self, obj: dict[str, Any]) -> None:
        """The delete of a Patch resource: the fields it applied are removed, the object stays."""
        stored = self.objects.get(object_key(obj))
        if stored is None:
            return
        for section in ("data", "binaryData", "stringData"):
            for item in obj.get(section) or {}:
                (stored.body.get(section) or {}).pop(item, None)
        self.log.append(f"relinquish {describe(object_key(obj))}")

    def delete(self, key: ObjectKey) -> None:
        if key not in self.objects:
            raise ApiError(404, "NotFound", f"{describe(key)} not found")
        del self.objects[key]
        self.log.append(f"delete {describe(key)}")
        if key[1] == "Namespace":
            for inner in [k for k in self.objects if k[2] == key[3]]:
                del self.objects[inner]
                self.log.append(f"delete {describe(inner)} (namespace deleted)")

    def set_status(self, key: ObjectKey, status: dict[str, Any]) -> None:
        self.objects[key].body["status"] = {**(self.objects[key].body.get("status") or {}), **status}

    def advance(self, seconds: float) -> None:
        self.now += seconds
