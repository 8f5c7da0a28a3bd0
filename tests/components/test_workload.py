"""components/workload.py: what a rendered pod spec says about its recovery (``recovery_facts``)."""

from __future__ import annotations

from typing import Any

import pytest

from headscale_ha.components.workload import PodRecoveryFacts, recovery_facts


def _spec(data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "data", **data}],
        "containers": [{"name": "sidecar"}, {"name": "app", "readinessProbe": {"periodSeconds": 5}}],
        **extra,
    }


def test_the_facts_are_read_from_the_spec_itself() -> None:
    spec = _spec(
        {"persistentVolumeClaim": {"claimName": "app-data"}},
        tolerations=[
            {"key": "node.kubernetes.io/not-ready", "tolerationSeconds": 99},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 30},
        ],
        initContainers=[{"name": "restore", "resources": {"limits": {"cpu": "500m"}}}],
    )
    assert recovery_facts("app", spec) == PodRecoveryFacts(
        app="app",
        volume="persistentVolumeClaim",
        eviction_seconds=30,
        restore_cpu_limit=0.5,
        readiness_period_seconds=5,
        restores=True,
    )


def test_what_the_spec_leaves_out_takes_the_cluster_defaults() -> None:
    """No unreachable toleration: admission adds 300 s; no probe period: 10 s; no restore: nothing restores."""
    spec = _spec({"emptyDir": {"sizeLimit": "1Gi"}})
    del spec["containers"][1]["readinessProbe"]
    assert recovery_facts("app", spec) == PodRecoveryFacts(
        app="app",
        volume="emptyDir",
        eviction_seconds=300,
        restore_cpu_limit=None,
        readiness_period_seconds=10,
        restores=False,
    )


def test_a_restore_without_a_cpu_limit_has_none() -> None:
    spec = _spec({"ephemeral": {}}, initContainers=[{"name": "restore", "resources": {"requests": {"cpu": "1"}}}])
    facts = recovery_facts("app", spec)
    assert (facts.volume, facts.restores, facts.restore_cpu_limit) == ("ephemeral", True, None)


def test_a_spec_without_the_data_volume_or_the_app_container_is_refused() -> None:
    with pytest.raises(ValueError, match="not enough values"):
        recovery_facts("app", {"volumes": [], "containers": [{"name": "app"}]})
    with pytest.raises(ValueError, match="not enough values"):
        recovery_facts("other", _spec({"emptyDir": {}}))
