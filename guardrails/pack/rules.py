"""The program's guard rails as plain functions over one resource (type, name, properties).

Kept free of the CrossGuard SDK so tests run them on the resources the program registers under mocks, and on
deliberately broken ones, without starting a policy server; ``pack.py`` adapts them to CrossGuard.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from headscale_ha.guardrails.images import EXACT_POSTGRES_TAG, ImageRef, image_problem, is_postgres_image

NODE_KEY = re.compile(r"privkey:[0-9a-f]{64}")
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}
SQLITE_APPS = {"headscale", "headplane"}


@dataclass(frozen=True, kw_only=True)
class Subject:
    """One resource as a guard rail sees it: its Pulumi type, name and (Kubernetes-shaped) properties."""

    type: str
    name: str
    props: Mapping[str, Any]

    @property
    def kind(self) -> str | None:
        """The Kubernetes kind of a `kubernetes:<group>/<version>:<Kind>` resource."""
        if not self.type.startswith("kubernetes:"):
            return None
        return self.type.rsplit(":", 1)[-1]


@dataclass(frozen=True, kw_only=True)
class Rule:
    name: str
    description: str
    check: Callable[[Subject], list[str]]
    #: Advisory: reported (CrossGuard warns, `make plan` prints it) but never fails a preview or an update.
    advisory: bool = False


def pod_spec(subject: Subject) -> Mapping[str, Any] | None:
    """The pod template of a workload, wherever its kind keeps it."""
    spec = subject.props.get("spec") or {}
    if subject.kind == "Pod":
        return spec
    if subject.kind == "CronJob":
        return ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template", {}).get("spec")
    if subject.kind in WORKLOAD_KINDS:
        return (spec.get("template") or {}).get("spec")
    return None


#: Pod-template annotation that declares why a pod runs as root; only kernel-mode subnet routers may.
ROOT_ANNOTATION = "headscale-ha/runs-as-root"
ROOT_REASONS = {"kernel-networking": {"NET_ADMIN"}}


def pod_annotations(subject: Subject) -> Mapping[str, Any]:
    spec = subject.props.get("spec") or {}
    template = (spec.get("jobTemplate") or {}).get("spec", {}).get("template") if subject.kind == "CronJob" else None
    template = template or spec.get("template") or {}
    metadata = subject.props.get("metadata") if subject.kind == "Pod" else template.get("metadata")
    return (metadata or {}).get("annotations") or {}


def containers(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield from pod.get("initContainers") or []
    yield from pod.get("containers") or []


def _app_of(image: str) -> str:
    return ImageRef.parse(image).repository.rsplit("/", 1)[-1]


def _apps(pod: Mapping[str, Any]) -> set[str]:
    return {_app_of(str(c.get("image", ""))) for c in pod.get("containers") or []}


# ------------------------------------------------------------------------------------------------ the rules


def no_moving_image_tags(subject: Subject) -> list[str]:
    pod = pod_spec(subject)
    if pod is None:
        return []
    problems = []
    for container in containers(pod):
        image = str(container.get("image", ""))
        exact = {"exact_tag": EXACT_POSTGRES_TAG, "example": "15.18"} if is_postgres_image(image) else {}
        problem = image_problem(image, **exact)
        if problem is not None:
            problems.append(f"container {container.get('name')!r}: image {image!r} {problem}")
    return problems


def prefer_image_digests(subject: Subject) -> list[str]:
    """Tag-only pins: a registry can move a tag to other bytes; a digest cannot move (advisory, so a tag that
    names an exact release stays usable where no digest can be looked up)."""
    pod = pod_spec(subject)
    if pod is None:
        return []
    return [
        f"container {container.get('name')!r}: image {image!r} is pinned by tag only; add its digest "
        f"({image}@sha256:<64 hex>) so the bytes cannot change under the same tag"
        for container in containers(pod)
        if (image := str(container.get("image", ""))) and ImageRef.parse(image).digest is None
    ]


def _serves_headscale(pod: Mapping[str, Any]) -> bool:
    """A container running `headscale serve` (a `configtest` or CLI run is not a second server)."""
    return any(
        _app_of(str(c.get("image", ""))) == "headscale"
        and "serve" in [*(c.get("command") or []), *(c.get("args") or [])]
        for c in pod.get("containers") or []
    )


def headscale_is_a_singleton(subject: Subject) -> list[str]:
    pod = pod_spec(subject)
    if pod is None or not _serves_headscale(pod):
        return []
    problems = []
    if subject.kind not in {"Deployment", "StatefulSet"}:
        problems.append(f"Headscale runs in a {subject.kind}; use a Deployment with one replica and strategy Recreate")
        return problems
    spec = subject.props.get("spec") or {}
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or replicas > 1:
        problems.append(f"replicas is {replicas}: Headscale supports exactly one instance (0 or 1)")
    if subject.kind == "Deployment" and (spec.get("strategy") or {}).get("type") != "Recreate":
        problems.append("strategy must be Recreate: a rolling update runs two Headscale writers at once")
    return problems


def sqlite_is_backed_up(subject: Subject) -> list[str]:
    pod = pod_spec(subject)
    if pod is None or not (_apps(pod) & SQLITE_APPS):
        return []
    writable_claims = [
        volume
        for volume in pod.get("volumes") or []
        if "persistentVolumeClaim" in volume and not volume["persistentVolumeClaim"].get("readOnly")
    ]
    if not writable_claims:
        # No writable claim: nothing for Litestream to guard (the postgres stage; the migration Job, which only
        # reads the backup claim).
        return []
    init = pod.get("initContainers") or []
    restore = [c for c in init if c.get("restartPolicy") != "Always" and "restore" in " ".join(c.get("command") or [])]
    replicate = [
        c
        for c in [*init, *(pod.get("containers") or [])]
        if _app_of(str(c.get("image", ""))) == "litestream"
        and (c.get("args") or [None])[0] == "replicate"
        and (c in pod.get("containers", []) or c.get("restartPolicy") == "Always")
    ]
    problems = []
    if not restore:
        problems.append("no restore init container: the pod could start an empty database over a lost volume")
    if not replicate:
        problems.append("no Litestream `replicate` sidecar: the SQLite database would have no backup")
    return problems


def identity_only_in_secrets(subject: Subject) -> list[str]:
    problems = []
    if subject.kind == "ConfigMap":
        for key, value in (subject.props.get("data") or {}).items():
            if NODE_KEY.search(str(value)):
                problems.append(f"data[{key!r}] holds a node private key; keys belong in a Secret")
    pod = pod_spec(subject)
    if pod is not None:
        for container in containers(pod):
            for variable in container.get("env") or []:
                if NODE_KEY.search(str(variable.get("value", ""))):
                    problems.append(
                        f"container {container.get('name')!r}: env {variable.get('name')!r} holds a node private key "
                        "in clear; mount it from a Secret"
                    )
    return problems


def containers_limited_and_non_root(subject: Subject) -> list[str]:
    pod = pod_spec(subject)
    if pod is None:
        return []
    pod_security = pod.get("securityContext") or {}
    allowed_caps = ROOT_REASONS.get(str(pod_annotations(subject).get(ROOT_ANNOTATION, "")))
    problems = []
    for container in containers(pod):
        name = container.get("name")
        limits = (container.get("resources") or {}).get("limits") or {}
        missing = [r for r in ("cpu", "memory") if r not in limits]
        if missing:
            problems.append(f"container {name!r}: no {' or '.join(missing)} limit")
        security = {**pod_security, **(container.get("securityContext") or {})}
        if security.get("runAsNonRoot") is True and security.get("runAsUser") != 0:
            continue
        added = set((security.get("capabilities") or {}).get("add") or [])
        if allowed_caps is None or not added <= allowed_caps or security.get("privileged"):
            problems.append(
                f"container {name!r}: must run as non-root (runAsNonRoot true, runAsUser not 0); root is only "
                f"allowed with the pod annotation {ROOT_ANNOTATION}: kernel-networking and no capability beyond "
                "NET_ADMIN"
            )
    return problems


RULES: tuple[Rule, ...] = (
    Rule(
        name="no-moving-image-tags",
        description="Every container image is pinned to an exact release, never latest/stable/main or a partial tag.",
        check=no_moving_image_tags,
    ),
    Rule(
        name="prefer-image-digests",
        description="Images are pinned by digest as well as tag (repo:tag@sha256:...); advisory.",
        check=prefer_image_digests,
        advisory=True,
    ),
    Rule(
        name="headscale-singleton",
        description="Headscale runs at most one replica, in a Deployment with strategy Recreate.",
        check=headscale_is_a_singleton,
    ),
    Rule(
        name="sqlite-backed-up",
        description="A SQLite-backed pod has a restore init container and a Litestream replicate sidecar.",
        check=sqlite_is_backed_up,
    ),
    Rule(
        name="identity-only-in-secrets",
        description="Noise/DERP private keys never appear in ConfigMaps or plain environment variables.",
        check=identity_only_in_secrets,
    ),
    Rule(
        name="containers-limited-non-root",
        description="Every container has CPU and memory limits and runs as non-root.",
        check=containers_limited_and_non_root,
    ),
)


def violations(subject: Subject) -> dict[str, list[str]]:
    """Every mandatory rule's findings for one resource (rules without findings are left out)."""
    found = {rule.name: rule.check(subject) for rule in RULES if not rule.advisory}
    return {name: messages for name, messages in found.items() if messages}


def advisories(subject: Subject) -> dict[str, list[str]]:
    """Every advisory rule's findings for one resource: warnings, never failures."""
    found = {rule.name: rule.check(subject) for rule in RULES if rule.advisory}
    return {name: messages for name, messages in found.items() if messages}
