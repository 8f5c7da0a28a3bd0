"""Kubernetes objects every stateful singleton of the control plane is made of: a volume, a Deployment, a Service.

Kept in one place so Headscale and Headplane cannot drift apart on what makes them safe (Recreate, retained
volumes, selectors that never change). Also the disruption budget of a workload spread over several nodes (the
gateway's two layers).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    PersistentVolumeClaimSpecArgsDict,
    PersistentVolumeClaimTemplateArgsDict,
    PodSpecArgs,
    PodSpecArgsDict,
    VolumeArgsDict,
)

from headscale_ha.components.api_spelling import api_spelled
from headscale_ha.components.config_types import quantity_value
from headscale_ha.components.pod import PART_OF, Meta, kept, labels, selector, static_check_skips
from headscale_ha.components.settings import LocalStorage, LocalVolumeSettings

#: How long a singleton's rollout may take, its restore before serving included: the Deployment's progress deadline
#: (`kubectl rollout status` fails at it; Kubernetes' default is 600 s) and what `pulumi up` awaits (pulumi-kubernetes
#: waits 10 minutes by default, so a restore of more than that failed the promotion's `up` before the runbook's own
#: wait). One budget for all three.
ROLLOUT_BUDGET_SECONDS = 900


def data_claim(
    resource_name: str,
    *,
    meta: Meta,
    name: str,
    size: str,
    storage_class: str | None,
    parent: pulumi.Resource,
) -> k8s.core.v1.PersistentVolumeClaim:
    """An RWO volume for a SQLite database, retained when the stack is destroyed or the claim replaced."""
    spec: PersistentVolumeClaimSpecArgsDict = {
        "access_modes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    if storage_class:
        spec["storage_class_name"] = storage_class
    return k8s.core.v1.PersistentVolumeClaim(
        resource_name,
        metadata=kept({**meta, "name": name}),
        spec=spec,
        opts=pulumi.ResourceOptions(parent=parent, retain_on_delete=True),
    )


#: The pod volume that holds an application's SQLite database, whatever backs it.
DATA_VOLUME = "data"


def sqlite_volume(
    resource_name: str,
    *,
    meta: Meta,
    claim_name: str,
    size: str,
    local: LocalVolumeSettings,
    storage_class: str | None,
    parent: pulumi.Resource,
) -> tuple[VolumeArgsDict, k8s.core.v1.PersistentVolumeClaim | None]:
    """The pod volume `data` for a SQLite database, and the claim behind it when the storage is persistent.

    Disposable storage has no object of its own: the emptyDir (or generic ephemeral volume, whose claim the
    ephemeral-volume controller creates and deletes with the pod) lives and dies with the pod, so a replacement pod
    is never bound to a node or to a volume attached elsewhere; the restore init container fills it.
    """
    if local.storage is LocalStorage.PERSISTENT:
        claim = data_claim(
            resource_name, meta=meta, name=claim_name, size=size, storage_class=storage_class, parent=parent
        )
        return {"name": DATA_VOLUME, "persistent_volume_claim": {"claim_name": claim_name}}, claim
    if local.ephemeral_storage_class is None:
        return {"name": DATA_VOLUME, "empty_dir": {"size_limit": size}}, None
    template: PersistentVolumeClaimTemplateArgsDict = {
        "metadata": {"labels": dict(meta.get("labels", {}))},
        "spec": {
            "access_modes": ["ReadWriteOnce"],
            "storage_class_name": local.ephemeral_storage_class,
            "resources": {"requests": {"storage": size}},
        },
    }
    return {"name": DATA_VOLUME, "ephemeral": {"volume_claim_template": template}}, None


def singleton_deployment(
    resource_name: str,
    *,
    meta: Meta,
    app: str,
    component: str,
    replicas: int,
    pod_spec: PodSpecArgsDict,
    annotations: dict[str, str],
    opts: pulumi.ResourceOptions,
    skip_reasons: dict[str, str] | None = None,
    part_of: str = PART_OF,
    await_ready: bool = True,
) -> k8s.apps.v1.Deployment:
    """At most one pod, replaced by stopping the old one first: a SQLite file has one writer.

    ``skip_reasons``: static checks (checkov ids) this workload is exempt from, and why; ``part_of``: the
    application of the pod labels and the selector (pod.labels); ``await_ready``: false where the pod may rightly
    wait unready for ever (behind the witness lease's gate, at a site that does not hold the Lease), so that
    `pulumi up` neither waits for it nor fails."""
    annotations_ = static_check_skips(pod_spec, skip_reasons)
    if not await_ready:
        annotations_ = {**annotations_, "pulumi.com/skipAwait": "true"}
    return k8s.apps.v1.Deployment(
        resource_name,
        metadata={**meta, "name": app, "annotations": annotations_},
        spec={
            "replicas": replicas,
            "strategy": {"type": "Recreate"},
            "revision_history_limit": 3,
            "progress_deadline_seconds": ROLLOUT_BUDGET_SECONDS,
            "selector": {"match_labels": selector(app, part_of)},
            "template": {
                "metadata": {"labels": labels(app, component, part_of), "annotations": annotations},
                "spec": pod_spec,
            },
        },
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(custom_timeouts=_ROLLOUT_AWAIT)),
    )


_ROLLOUT_AWAIT = pulumi.CustomTimeouts(create=f"{ROLLOUT_BUDGET_SECONDS}s", update=f"{ROLLOUT_BUDGET_SECONDS}s")


def cluster_service(
    resource_name: str,
    *,
    meta: Meta,
    app: str,
    ports: dict[str, int],
    parent: pulumi.Resource,
    part_of: str = PART_OF,
) -> k8s.core.v1.Service:
    """A ClusterIP Service whose named ports target the container ports of the same names (the pods of ``app``
    in ``part_of``)."""
    return k8s.core.v1.Service(
        resource_name,
        metadata={**meta, "name": app},
        spec={
            "type": "ClusterIP",
            "selector": selector(app, part_of),
            "ports": [
                {"name": port, "port": number, "target_port": port, "protocol": "TCP"} for port, number in ports.items()
            ],
        },
        opts=pulumi.ResourceOptions(parent=parent),
    )


@dataclass(frozen=True, kw_only=True)
class PodRecoveryFacts:
    """What one application's rendered pod spec says about its recovery: read by the component that rendered it
    (``recovery_facts``), so the site's `recovery` model takes typed values, not the component's pod spec."""

    app: str
    volume: str  # emptyDir | ephemeral | persistentVolumeClaim
    eviction_seconds: int  # tolerationSeconds for an unreachable node
    restore_cpu_limit: float | None  # cores; None: no restore container (not SQLite) or no limit
    readiness_period_seconds: int
    restores: bool  # the pod has the restore init container


def recovery_facts(app: str, pod_spec: PodSpecArgsDict) -> PodRecoveryFacts:
    """The facts of ``pod_spec`` (its `data` volume, its `restore` init container and ``app``'s container), read
    from the spec itself as the cluster gets it (the API's spelling), so they cannot drift from what it runs."""
    spec = api_spelled(pod_spec, PodSpecArgs)
    (data,) = [volume for volume in spec["volumes"] if volume["name"] == "data"]
    kind = next(key for key in ("emptyDir", "ephemeral", "persistentVolumeClaim") if key in data)
    unreachable = [t for t in spec.get("tolerations", []) if t["key"] == "node.kubernetes.io/unreachable"]
    # Without its own toleration a pod gets the admission default: 300 s.
    eviction = int(unreachable[0].get("tolerationSeconds", 300)) if unreachable else 300
    restore = next((c for c in spec.get("initContainers", []) if c["name"] == "restore"), None)
    limit = None
    if restore is not None and "cpu" in restore.get("resources", {}).get("limits", {}):
        limit = quantity_value(restore["resources"]["limits"]["cpu"])
    (container,) = [c for c in spec["containers"] if c["name"] == app]
    period = int(container.get("readinessProbe", {}).get("periodSeconds", 10))
    return PodRecoveryFacts(
        app=app,
        volume=kind,
        eviction_seconds=eviction,
        restore_cpu_limit=limit,
        readiness_period_seconds=period,
        restores=restore is not None,
    )


def disruption_budget(
    name: str, app: str, namespace: str, opts: pulumi.ResourceOptions
) -> k8s.policy.v1.PodDisruptionBudget:
    """At most one pod of ``app`` down at a time for a voluntary disruption (a drain): one replica per node."""
    return k8s.policy.v1.PodDisruptionBudget(
        name,
        metadata={"name": app, "namespace": namespace, "labels": labels(app, "gateway")},
        spec={"max_unavailable": 1, "selector": {"match_labels": selector(app)}},
        opts=opts,
    )
