"""NetworkPolicies and PodDisruptionBudgets: a policy's pod selector selects some pod template of its namespace
(a workload's, or the pods an operator runs), or what it protects is nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.checker import Checker
from tools.wiring.manifest import nested
from tools.wiring.model import Holder
from tools.wiring.selectors import selector_matches, selector_text


def _check_selects(checker: Checker, holder: Holder, path: str, selector: Any, consequence: str) -> None:
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return
    if not checker.model.selected(holder.namespace, lambda labels: selector_matches(selector, labels)):
        checker.report(
            holder,
            path,
            f"selector {selector_text(selector)} matches no pod template in namespace '{holder.namespace}': "
            f"{consequence}",
        )


def check_network_policy(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    _check_selects(
        checker,
        holder,
        "spec.podSelector",
        nested(obj, "spec", "podSelector"),
        "the policy would apply to no pod, so the isolation it describes protects nothing",
    )


def check_pdb(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    _check_selects(
        checker,
        holder,
        "spec.selector",
        nested(obj, "spec", "selector"),
        "the budget would cover no pod, so drains evict the workload it was meant to protect",
    )


RULES = {"NetworkPolicy": check_network_policy, "PodDisruptionBudget": check_pdb}
