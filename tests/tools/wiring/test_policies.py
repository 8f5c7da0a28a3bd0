"""NetworkPolicy and PodDisruptionBudget selectors must select a pod template of their namespace."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.wiring_objects import LABELS, check, meta, network_policy, only, web


def pdb(selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta("pdb"),
        "spec": {"selector": selector, "maxUnavailable": 1},
    }


@pytest.mark.parametrize(("make", "path"), [(network_policy, "spec.podSelector"), (pdb, "spec.selector")])
def test_policy_selectors_must_select_a_pod_template(make: Any, path: str) -> None:
    assert only(check(web(), make({"matchLabels": {"app": "api"}}))).path == path
    assert len(check(web(), make({"matchExpressions": [{"key": "app", "operator": "In", "values": ["api"]}]}))) == 1
    assert check(web(), make({"matchLabels": LABELS})) == []
    assert check(web(), make({"matchExpressions": [{"key": "app", "operator": "Exists"}]})) == []
    assert check(make({})) == []  # every pod of the namespace
