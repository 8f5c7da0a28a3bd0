"""Label selectors: whether a metav1.LabelSelector matches a label set, and how a message shows one.

Services, NetworkPolicies and PodDisruptionBudgets select pod templates with these; the network-policy model and
the monitoring tests use `selector_matches` too, so every selector is read one way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.manifest import as_dict, as_list, nested


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions) against a label set; an empty selector matches all."""
    for key, value in as_dict(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expression in as_list(selector.get("matchExpressions")):
        key, operator = nested(expression, "key"), nested(expression, "operator")
        values = as_list(nested(expression, "values"))
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def selector_text(selector: Mapping[str, Any]) -> str:
    """``{app=web, tier In (a,b)}``: a selector as a Finding shows it."""
    parts = [f"{k}={v}" for k, v in as_dict(selector.get("matchLabels")).items()]
    for expression in as_list(selector.get("matchExpressions")):
        values = ",".join(str(v) for v in as_list(nested(expression, "values")))
        parts.append(f"{nested(expression, 'key')} {nested(expression, 'operator')} ({values})".replace(" ()", ""))
    return "{" + ", ".join(parts) + "}"
