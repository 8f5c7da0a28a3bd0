"""Pure pieces of pod specs shared by the components: labels, restricted security, scheduling, resources.

The pieces are the SDK's typed ``*ArgsDict``, spelled in Python (``run_as_non_root``); the SDK sends them in the
API's spelling (``runAsNonRoot``), and components.api_spelling gives that spelling to a reader that needs it. The
metadata helpers (``Meta``, ``kept``) are typed as the SDK's ``ObjectMetaArgsDict``, whose keys the API spells alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TypedDict

from pulumi_kubernetes.core.v1 import (
    AffinityArgsDict,
    NodeSelectorRequirementArgsDict,
    PodSecurityContextArgsDict,
    PodSpecArgs,
    PodSpecArgsDict,
    ResourceRequirementsArgsDict,
    SecurityContextArgsDict,
    TolerationArgsDict,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgsDict
from pulumi_kubernetes.meta.v1.outputs import ObjectMeta

from headscale_ha.components.api_spelling import api_spelled
from headscale_ha.components.settings import ClusterSettings, ComputeResources

PART_OF = "headscale-ha"
#: The server-side-apply field manager of every object a destroy keeps (`retainOnDelete`). pulumi-kubernetes
#: otherwise names a random one per resource, so after a destroy the adopting stack's manager is a stranger to the
#: fields the destroyed stack set, and its first change of them (a rotated key in `headscale-identity`) is an
#: apply conflict. One name makes the adopter their owner.
KEPT_FIELD_MANAGER = PART_OF
#: The non-root identity every container runs as (the distroless "nonroot" user).
RUN_AS = 65532


def labels(app: str, component: str, part_of: str = PART_OF) -> dict[str, str]:
    """The recommended labels. ``part_of`` is the application the object belongs to: headscale-ha's own objects
    by default; a component another program reuses (LitestreamBackup, BackupVolume) takes it from its caller."""
    return {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": part_of,
        "app.kubernetes.io/managed-by": "pulumi",
    }


class Meta(TypedDict):
    """What every object of a component starts its metadata from: the namespace and the labels, as plain values the
    builders can read (the SDK's ObjectMetaArgsDict types both as optional outputs); spread into the metadata."""

    namespace: str
    labels: dict[str, str]


def kept(meta: ObjectMetaArgsDict) -> ObjectMetaArgsDict:
    """``meta`` of an object a destroy keeps: its field manager is :data:`KEPT_FIELD_MANAGER`."""
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise TypeError("kept: the annotations must be a plain mapping, not an output")
    return {**meta, "annotations": {**annotations, "pulumi.com/patchFieldManager": KEPT_FIELD_MANAGER}}


def object_name(metadata: ObjectMeta) -> str:
    """The name in an object's metadata as the engine reports it (typed optional), which every object the
    components create has: one without it is a bug, so it fails here rather than as a None output."""
    if not metadata.name:
        raise ValueError("an object the components created has no metadata.name")
    return metadata.name


def selector(app: str, part_of: str = PART_OF) -> dict[str, str]:
    """The stable subset of labels used by selectors (selectors are immutable on a Deployment)."""
    return {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": part_of}


def pod_security() -> PodSecurityContextArgsDict:
    return {
        "run_as_non_root": True,
        "run_as_user": RUN_AS,
        "run_as_group": RUN_AS,
        "fs_group": RUN_AS,
        "fs_group_change_policy": "OnRootMismatch",
        "seccomp_profile": {"type": "RuntimeDefault"},
    }


def container_security() -> SecurityContextArgsDict:
    """What the `restricted` Pod Security Standard asks of every container, plus a read-only root."""
    return {
        "allow_privilege_escalation": False,
        "read_only_root_filesystem": True,
        "run_as_non_root": True,
        "capabilities": {"drop": ["ALL"]},
        "seccomp_profile": {"type": "RuntimeDefault"},
    }


def resources(spec: ComputeResources) -> ResourceRequirementsArgsDict:
    """Requests and limits: maps of amounts, which both spellings write alike."""
    amounts = spec.model_dump()
    return {"requests": amounts["requests"], "limits": amounts["limits"]}


class Scheduling(TypedDict):
    """The pod-spec fields that place a pod: spread into a ``PodSpecArgsDict``."""

    affinity: AffinityArgsDict
    tolerations: list[TolerationArgsDict]


def scheduling(cluster: ClusterSettings) -> Scheduling:
    """Worker nodes only (unless the cluster has none), never an excluded node; leave a failed node after
    `tolerationSeconds`."""
    expressions: list[NodeSelectorRequirementArgsDict] = []
    if not cluster.workloads_on_control_plane:
        expressions.append({"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"})
    if cluster.exclude_nodes:
        expressions.append(
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(cluster.exclude_nodes)}
        )
    affinity: AffinityArgsDict = {}
    if expressions:
        affinity["node_affinity"] = {
            "required_during_scheduling_ignored_during_execution": {
                "node_selector_terms": [{"match_expressions": expressions}]
            }
        }
    tolerations: list[TolerationArgsDict] = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "toleration_seconds": cluster.toleration_seconds}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    if cluster.workloads_on_control_plane:
        tolerations.append(
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
        )
    return {"affinity": affinity, "tolerations": tolerations}


def spread(cluster: ClusterSettings, app: str, replicas: int) -> Scheduling:
    """The cluster's scheduling rules, plus one replica per node when there are several."""
    placement = scheduling(cluster)
    if replicas > 1:
        placement["affinity"]["pod_anti_affinity"] = {
            "required_during_scheduling_ignored_during_execution": [
                {"label_selector": {"match_labels": selector(app)}, "topology_key": "kubernetes.io/hostname"}
            ]
        }
    return placement


def checksum(*parts: str) -> str:
    """Content hash for a pod annotation, so a config change rolls the pod."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


#: Why the rendered workloads skip two of checkov's checks (annotations it reads on the object).
PULL_POLICY_REASON = (
    "images are pinned to exact versions (tag or digest); IfNotPresent keeps a restart of the control plane off "
    "the registry, which may be unreachable exactly when a node or site fails"
)
DIGEST_REASON = (
    "tag-only pin: digests are accepted everywhere (`image:tag@sha256:...`) and renovate.json proposes them; the "
    "plan and the guard-rail pack warn about every tag-only image"
)


def static_check_skips(pod_spec: PodSpecArgsDict, reasons: dict[str, str] | None = None) -> dict[str, str]:
    """checkov's inline skips for a workload, each with its reason: the image rules that follow from how images are
    pinned (the digest one only while an image has no digest), plus ``reasons`` (check id -> why). Read from the
    spec as the cluster gets it."""
    spec = api_spelled(pod_spec, PodSpecArgs)
    containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
    skips = {"CKV_K8S_15": PULL_POLICY_REASON}
    if any("@sha256:" not in str(container.get("image", "")) for container in containers):
        skips["CKV_K8S_43"] = DIGEST_REASON
    skips |= reasons or {}
    return {f"checkov.io/skip{index}": f"{check}={why}" for index, (check, why) in enumerate(sorted(skips.items()), 1)}
