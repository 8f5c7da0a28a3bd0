"""pulumi-kubernetes 4.34 as the engine model drives it: Check, Diff, Create, Update, Delete, Read and DiffConfig.

Each rule is a fact of the provider's source (provider/pkg/provider/provider.go, provider/pkg/await/*), cited where
it is implemented; the replacement and refusal rows are the project's one table, tools/kubernetes_rules.py.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.models.engine.apiserver import ApiError, Cluster, object_key
from tests.models.engine.state import holds_unknown
from tools.fields import FieldChange, diff_values
from tools.kubernetes_rules import (
    AUTONAMED,
    ProviderFlags,
    changes_identity,
    deletes_before_replace,
    replacing_rule,
    truthy,
)

SKIP_AWAIT = "pulumi.com/skipAwait"
WAIT_FOR = "pulumi.com/waitFor"
REPLACE_UNREADY = "pulumi.com/replaceUnready"
PATCH_FORCE = "pulumi.com/patchForce"
FIELD_MANAGER = "__fieldManager"
TIMEOUT_SECONDS = "pulumi.com/timeoutSeconds"
#: The provider's default await timeout (10 minutes) for the kinds it awaits.
DEFAULT_TIMEOUT = 600.0
#: The env var that makes Create adopt an existing object instead of failing (provider.go, Create).
UPSERT_ENV = "PULUMI_K8S_UPSERT_EXISTING_OBJECTS"


class AwaitError(Exception):
    """The object was written but never became ready: a partial failure. The engine keeps it in state with the
    message as an init error (so the next run updates it), and fails the step."""

    def __init__(self, message: str, outputs: dict[str, Any]) -> None:
        super().__init__(message)
        self.outputs = outputs


@dataclass(frozen=True)
class KubeDiff:
    changed: bool
    replace_reasons: tuple[str, ...]
    delete_before_replace: bool
    fields: tuple[FieldChange, ...]


def _annotations(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(((obj.get("metadata") or {}).get("annotations")) or {})


class KubernetesProvider:
    """One pulumi-kubernetes provider instance: its inputs (or a default provider's config), the cluster its
    kubeconfig names and the environment of the `pulumi` process."""

    def __init__(self, inputs: Mapping[str, Any], cluster: Cluster, env: Mapping[str, str]) -> None:
        self.inputs = dict(inputs)
        self.cluster = cluster
        self.flags = ProviderFlags.of(inputs, env)
        self.upsert = env.get(UPSERT_ENV) == "true"

    # ---------------------------------------------------------------------------------------------- check, diff

    def check(self, name: str, urn: str, olds: Mapping[str, Any] | None, news: dict[str, Any]) -> dict[str, Any]:
        """Autonaming (metadata/naming.go, AssignNameIfAutonamable and AdoptOldAutonameIfUnnamed): an object without
        metadata.name gets ``<name>-<8 random>``, kept from the old inputs while it stays autonamed (a name the
        program gave it before is not kept); a Check without olds (a create, or the engine's second Check of a
        replacement) draws a new one. (The random part is a hash of the URN and a counter here, the first that
        names no object of its kind in the cluster, to stay reproducible.)"""
        checked = dict(news)
        metadata = dict(checked.get("metadata") or {})
        if not metadata.get("name"):
            old_metadata = (olds or {}).get("metadata") or {}
            old_autonamed = truthy((old_metadata.get("annotations") or {}).get(AUTONAMED))
            old_name = old_metadata.get("name") if old_autonamed else None
            metadata["name"] = old_name or self._autoname(name, urn, str(news.get("kind")))
            metadata.setdefault("annotations", {})
            metadata["annotations"] = {**metadata["annotations"], AUTONAMED: "true"}
        checked["metadata"] = metadata
        # The server-side apply field manager of this resource: drawn at its first Check, kept in its state
        # (provider.go, fieldManagerName: `pulumi-kubernetes-<random>`), so a new resource of the same URN (after a
        # destroy, or a replacement) is another manager than the one that wrote a kept object.
        checked[FIELD_MANAGER] = (olds or {}).get(FIELD_MANAGER) or f"pulumi-kubernetes-{uuid.uuid4().hex[:8]}"
        return checked

    def _autoname(self, name: str, urn: str, kind: str) -> str:
        taken = {key[3] for key in self.cluster.objects if key[1] == kind}
        for attempt in itertools.count():
            seed = urn if attempt == 0 else f"{urn}#{attempt}"
            candidate = f"{name}-{hashlib.sha256(seed.encode()).hexdigest()[:8]}"
            if candidate not in taken:
                return candidate
        raise AssertionError("unreachable")

    def diff(self, olds: Mapping[str, Any], old_outputs: Mapping[str, Any], news: Mapping[str, Any]) -> KubeDiff:
        """Facts (provider.go, Diff): a changed name or namespace replaces, as does a change of a forceNew field;
        ``replaceUnready`` on a Job whose last await failed replaces it; deleteBeforeReplace when the replaced object
        keeps its own name. Each rule but replaceUnready is the table's (tools/kubernetes_rules.py:
        ``changes_identity``, ``replacing_rule``, ``deletes_before_replace``)."""
        fields = tuple(f for f in diff_values(olds, news) if f.path[:1] not in (("__inputs",), (FIELD_MANAGER,)))
        reasons: list[str] = []
        for change in fields:
            if changes_identity(change):
                reasons.append(f"{change.text} changed")
                continue
            rule = replacing_rule(change, olds, news, self.flags)
            if rule is not None:
                reasons.append(f"{change.text}: {rule.why}")
        if (
            news.get("kind") == "Job"
            and truthy(_annotations(news).get(REPLACE_UNREADY))
            and not _job_succeeded(old_outputs)
        ):
            reasons.append(f"{REPLACE_UNREADY}: the Job is not complete")
        return KubeDiff(
            changed=bool(fields) or bool(reasons),
            replace_reasons=tuple(reasons),
            delete_before_replace=bool(reasons) and deletes_before_replace(olds, news),
            fields=fields,
        )

    # ---------------------------------------------------------------------------------------------- writes

    def create(
        self, inputs: dict[str, Any], *, preview: bool, patch: bool = False, manager: str = ""
    ) -> tuple[str, dict[str, Any]]:
        """Facts (provider.go, Create): a client-side create; an existing object fails with AlreadyExists unless
        PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true, which patches it instead (taking it over). In preview the
        provider answers with the inputs and no id. After the write it awaits the object (see ``_await``)."""
        if preview:
            return "", dict(inputs)
        body = _object(inputs)
        force = truthy(_annotations(body).get(PATCH_FORCE))
        if patch or self.upsert:
            # A Patch resource, or upsertExistingObjects: a server-side apply of the inputs (never AlreadyExists;
            # without patchForce, fields another manager owns with other values are a conflict).
            live = self.cluster.apply_patch(body, manager=manager, force=force)
            return _id(live), live if patch else self._await(live)
        live = self.cluster.create(body, manager=manager)
        return _id(live), self._await(live)

    def update(
        self,
        old_outputs: Mapping[str, Any],
        inputs: dict[str, Any],
        *,
        preview: bool,
        patch: bool = False,
        manager: str = "",
    ) -> dict[str, Any]:
        """Facts (provider.go, Update): a server-side apply patch (the API server refuses immutable fields), then the
        same await as a create. A refused patch of an object that can still be read is a partial failure, as a failed
        await is: the engine keeps the old inputs with an init error. In preview (inputs all known), a dry-run patch:
        the refusal shows already, nothing is written."""
        body = _object(inputs)
        if preview and (patch or holds_unknown(body)):
            return dict(inputs)
        try:
            if patch:
                force = truthy(_annotations(body).get(PATCH_FORCE))
                return self.cluster.apply_patch(body, manager=manager, force=force)
            live = self.cluster.patch(body, flags=self.flags, manager=manager, dry_run=preview)
        except ApiError as error:
            current = self.cluster.get(object_key(body))
            if error.status == 404 or current is None:
                message = f"{error}: the object was deleted outside Pulumi (refresh)"
                raise ApiError(404, "NotFound", message) from None
            raise AwaitError(f"update failed: {error}", current) from None
        return dict(inputs) if preview else self._await(live)

    def delete(self, outputs: Mapping[str, Any], *, patch: bool = False) -> None:
        """Facts: a delete of an object already gone is success (404 ignored); a Patch resource's delete removes
        only the fields it applied."""
        if patch:
            self.cluster.relinquish(_object(outputs))
            return
        try:
            self.cluster.delete(object_key(_object(outputs)))
        except ApiError as error:
            if error.status != 404:
                raise

    def read(self, outputs: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.cluster.get(object_key(_object(outputs)))

    # ---------------------------------------------------------------------------------------------- await

    def _await(self, live: dict[str, Any]) -> dict[str, Any]:
        """Facts (await/await.go): Deployments, StatefulSets, DaemonSets, Jobs, Pods, Services and Ingresses are
        awaited; other kinds, custom resources included, are not, unless ``pulumi.com/waitFor`` names a condition;
        ``pulumi.com/skipAwait: "true"`` skips it. A failed await leaves the object in place (partial failure)."""
        annotations = _annotations(live)
        if truthy(annotations.get(SKIP_AWAIT)):
            return live
        timeout = float(annotations.get(TIMEOUT_SECONDS) or DEFAULT_TIMEOUT)
        kind = live.get("kind")
        key = object_key(live)
        name = f"{kind} {key[2]}/{key[3]}" if key[2] else f"{kind} {key[3]}"
        if WAIT_FOR in annotations:
            condition = str(annotations[WAIT_FOR])
            if not condition.startswith("condition="):
                raise ApiError(400, "BadRequest", f'expected a "jsonpath=" or "condition=" prefix, got {condition!r}')
            condition = condition.removeprefix("condition=")
            ready_in = max(0.0, self.cluster.ready_after.get(str(kind), 0.0) - self.cluster.age(key))
            if ready_in > timeout:
                self.cluster.advance(timeout)
                raise AwaitError(f"{name}: timed out after {timeout:.0f}s waiting for {condition}", live)
            self.cluster.advance(ready_in)
            self.cluster.set_status(key, {"conditions": [{"type": condition, "status": "True"}]})
            return self.cluster.get(key) or live
        if kind in ("Deployment", "StatefulSet", "DaemonSet"):
            if key[3] in self.cluster.unready and (live.get("spec") or {}).get("replicas", 1) != 0:
                self.cluster.advance(timeout)
                raise AwaitError(f"{name}: timed out after {timeout:.0f}s waiting for its pods to become ready", live)
            return live
        if kind == "Service":
            return self._await_service(live, name, timeout)
        if kind == "PersistentVolumeClaim":
            return self._await_claim(live, name)
        if kind == "Job":
            # A Job runs once: one that already completed or failed (an update awaits it again) keeps its outcome.
            if not _job_conditions(live):
                failure = self.cluster.job_runner(self.cluster, live) if self.cluster.job_runner else None
                failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": failure}
                status = {"conditions": [failed if failure else {"type": "Complete", "status": "True"}]}
                self.cluster.set_status(key, status)
                live = self.cluster.get(key) or live
            failed = _job_conditions(live).get("Failed")
            if failed is not None:
                raise AwaitError(f"{name} failed: {failed.get('message')}", live)
            return live
        return live

    def _await_service(self, live: dict[str, Any], name: str, timeout: float) -> dict[str, Any]:
        """Facts (await/service.go): an ExternalName, headless or selector-less Service is ready at once; a
        LoadBalancer needs an ingress address (here: a CiliumLoadBalancerIPPool exists); otherwise its Endpoints must
        settle with no not-ready address: no pod at all is fine, pods that never get ready time it out."""
        spec = live.get("spec") or {}
        if spec.get("type") == "ExternalName" or spec.get("clusterIP") == "None" or not spec.get("selector"):
            return live
        if spec.get("type") == "LoadBalancer" and not any(
            k[1] == "CiliumLoadBalancerIPPool" for k in self.cluster.object_keys()
        ):
            self.cluster.advance(timeout)
            raise AwaitError(f"{name}: Service was not allocated an IP address", live)
        namespace = (live.get("metadata") or {}).get("namespace")
        for key in self.cluster.object_keys():
            if key[1] not in ("Deployment", "StatefulSet", "DaemonSet") or key[2] != namespace:
                continue
            workload = self.cluster.get(key) or {}
            template_labels = ((workload.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels", {})
            running = (workload.get("spec") or {}).get("replicas", 1) != 0
            if running and key[3] in self.cluster.unready and _selects(spec["selector"], template_labels):
                self.cluster.advance(timeout)
                raise AwaitError(f"{name}: timed out waiting for its endpoints: pods of {key[3]} are not ready", live)
        return live

    def _await_claim(self, live: dict[str, Any], name: str) -> dict[str, Any]:
        """Facts (awaiters.go): a claim is ready when Bound (Pending is enough with WaitForFirstConsumer); a claim
        that names a volume binds only when that volume exists. Its watch times out after 5 minutes."""
        volume = (live.get("spec") or {}).get("volumeName")
        if volume and self.cluster.find("PersistentVolume", volume) is None:
            self.cluster.advance(300.0)
            raise AwaitError(f"{name}: timed out after 300s waiting to be Bound (no volume {volume})", live)
        return live


def _selects(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _job_conditions(live: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The Job's terminal conditions that hold (Complete, Failed), by type."""
    conditions = ((live.get("status") or {}).get("conditions")) or []
    return {c["type"]: c for c in conditions if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"}


def _job_succeeded(outputs: Mapping[str, Any]) -> bool:
    conditions = ((outputs.get("status") or {}).get("conditions")) or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


def _object(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in inputs.items() if k not in ("status", "__inputs", FIELD_MANAGER)}


def _id(live: Mapping[str, Any]) -> str:
    metadata = live.get("metadata") or {}
    return f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else str(metadata["name"])
