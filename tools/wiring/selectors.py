"""Label selectors: whether a metav1.LabelSelector matches a label set, and how a message shows one.

Services, NetworkPolicies and PodDisruptionBudgets select pod templates with these; the monitoring tests use
`selector_matches` too, and the network-policy model (tests/models/netpol/netpol.py) reads each expression with
`expression_holds`, so every selector is read one way (the model only refuses more: see `selector_matches`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tools.wiring.manifest import as_dict, as_list, nested


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions) against a label set; an empty selector matches all.

    Lenient on purpose: it reads rendered objects, where a malformed selector is the schema check's to report, so a
    part of the wrong type reads as absent and an unknown operator is ignored. The NetworkPolicy model
    (tests/models/netpol/netpol.py) refuses such a selector instead, as the API server would: an answer about a
    policy that cannot exist means nothing there. Both read an expression with :func:`expression_holds`.
    """
    for key, value in as_dict(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expression in as_list(selector.get("matchExpressions")):
        key, operator = nested(expression, "key"), nested(expression, "operator")
        if expression_holds(operator, key, as_list(nested(expression, "values")), labels) is False:
            return False
    return True


def expression_holds(operator: Any, key: Any, values: Sequence[Any], labels: Mapping[str, Any]) -> bool | None:
    """One matchExpressions requirement against a label set, as the API server reads In, NotIn, Exists and
    DoesNotExist; None for any other operator (its reader decides what that means)."""
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    return None


def selector_text(selector: Mapping[str, Any]) -> str:
    """``{app=web, tier In (a,b)}``: a selector as a Finding shows it."""
    parts = [f"{k}={v}" for k, v in as_dict(selector.get("matchLabels")).items()]
    for expression in as_list(selector.get("matchExpressions")):
        values = ",".join(str(v) for v in as_list(nested(expression, "values")))
        parts.append(f"{nested(expression, 'key')} {nested(expression, 'operator')} ({values})".replace(" ()", ""))
    return "{" + ", ".join(parts) + "}"
