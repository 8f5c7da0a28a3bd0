"""Lookups in what a run registered (a whole stack's or one component's): the objects of a kind, the one object of
a kind and name, a Deployment's pod spec, the routers' StatefulSets. Shared by the component tests and their
stack-level counterparts under tests/program."""

from __future__ import annotations

import re

from headscale_ha.components.pod import selector
from tools.harness import ProgramRun


def objects_of(run: ProgramRun, kind: str) -> list[dict]:
    """Every Kubernetes object of ``kind``."""
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def object_named(run: ProgramRun, kind: str, name: str) -> dict:
    """The one object of ``kind`` named ``name`` (fails unless there is exactly one)."""
    matches = [o for o in objects_of(run, kind) if o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{len(matches)} {kind}/{name}"
    return matches[0]


def deployment_pod(run: ProgramRun, app: str) -> dict:
    """The pod spec of the Deployment named ``app``."""
    return object_named(run, "Deployment", app)["spec"]["template"]["spec"]


def routers(run: ProgramRun) -> list[dict]:
    """The routers' StatefulSets, one per replica, in ordinal order."""
    found = [o for o in objects_of(run, "StatefulSet") if o["metadata"]["name"].startswith("subnet-router-")]
    return sorted(found, key=lambda o: int(o["metadata"]["name"].rsplit("-", 1)[1]))


def headscale_pod(run: ProgramRun, name: str = "headscale") -> dict:
    """The pod spec of Headscale's Deployment (or of the Deployment ``name``)."""
    return deployment_pod(run, name)


def assert_routers_each_own_node_role_and_state(run: ProgramRun, count: int) -> None:
    """``count`` router StatefulSets, spread one per node, each with a Role and a state Secret of its own."""
    found = routers(run)
    assert len(found) == count
    for ordinal, router in enumerate(found):
        affinity = router["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        (anti,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        # One node per replica across the StatefulSets: the rule selects the app label they all carry.
        assert anti == {
            "labelSelector": {"matchLabels": selector("subnet-router")},
            "topologyKey": "kubernetes.io/hostname",
        }
        role = object_named(run, "Role", f"subnet-router-{ordinal}")
        assert role["rules"][0]["resourceNames"] == [f"subnet-router-{ordinal}"]
    assert sorted(
        o["metadata"]["name"]
        for o in objects_of(run, "Secret")
        if re.fullmatch(r"subnet-router-\d+", o["metadata"]["name"])
    ) == [f"subnet-router-{i}" for i in range(count)]
