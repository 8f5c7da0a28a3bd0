"""What a change does beyond its fields, for ``make diff``: the policy rules it adds and removes, and the workloads
it restarts, stops or starts, with the outage the stack's `recovery` output gives.

A reviewer reads a policy change as rules (``acls[+] group:ops -> tag:bastion:8443 (tcp)``), not as a line diff of
rendered JSON, and needs to know that an innocent-looking annotation (``checksum/policy``) restarts Headscale. Both
are derived here from the two planned inputs of a resource, without the rest of tools/diff/.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The top-level keys of a Tailscale/Headscale policy (ACLs, and the grants of Headscale 0.29).
POLICY_KEYS = frozenset(
    {
        "acls",
        "autoApprovers",
        "derpMap",
        "grants",
        "groups",
        "hosts",
        "ipsets",
        "nodeAttrs",
        "postures",
        "randomizeClientPort",
        "ssh",
        "tagOwners",
        "tests",
    }
)
#: Applications whose outage the `recovery` output models, by their `app.kubernetes.io/name` label.
APPLICATIONS = {"headscale": "Headscale", "headplane": "Headplane"}
#: What an outage of each costs while it lasts.
OUTAGE_MEANS = {
    "headscale": "connected nodes keep their tunnels; logins, new nodes and policy updates wait",
    "headplane": "the admin UI is unavailable",
}
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")


# --------------------------------------------------------------------------------------------- the policy


def policy_document(value: Any) -> dict[str, Any] | None:
    """``value`` parsed as a policy: a JSON object with ACLs or grants and only policy keys; else None."""
    if not isinstance(value, str):
        return None
    try:
        document = json.loads(value)
    except ValueError:
        return None
    if not isinstance(document, dict) or not ({"acls", "grants"} & set(document)) or set(document) - POLICY_KEYS:
        return None
    return document


def _joined(items: Any) -> str:
    return ", ".join(str(i) for i in items) if isinstance(items, list) else str(items)


def acl_text(rule: Mapping[str, Any]) -> str:
    """``group:ops -> tag:server:22,443 (tcp)``; an action other than accept is named first."""
    text = f"{_joined(rule.get('src', []))} -> {_joined(rule.get('dst', []))}"
    if rule.get("proto"):
        text += f" ({rule['proto']})"
    action = rule.get("action", "accept")
    return text if action == "accept" else f"{action} {text}"


def grant_text(rule: Mapping[str, Any]) -> str:
    """``group:ops -> tag:server ip 22, 443``, with the app capabilities' names when present."""
    text = f"{_joined(rule.get('src', []))} -> {_joined(rule.get('dst', []))}"
    if rule.get("ip"):
        text += f" ip {_joined(rule['ip'])}"
    if isinstance(rule.get("app"), dict):
        text += f" app {_joined(sorted(rule['app']))}"
    return text


def ssh_text(rule: Mapping[str, Any]) -> str:
    """``check group:admins -> tag:server as root, autogroup:nonroot every 12h``."""
    text = f"{rule.get('action', 'accept')} {_joined(rule.get('src', []))} -> {_joined(rule.get('dst', []))}"
    text += f" as {_joined(rule.get('users', []))}"
    return text + (f" every {rule['checkPeriod']}" if rule.get("checkPeriod") else "")


def policy_test_text(case: Mapping[str, Any]) -> str:
    """A policy test: ``alice@: accept tag:server:22; deny tag:bastion:22``."""
    verdicts = [f"{word} {_joined(case[word])}" for word in ("accept", "deny") if case.get(word)]
    return f"{case.get('src', '?')}: {'; '.join(verdicts) or 'nothing'}"


def _rules(section: str, old: Any, new: Any, text: Callable[[Mapping[str, Any]], str]) -> list[str]:
    """Rules compared as a multiset of their texts: what is added and removed; a reorder alone is said so."""
    before = [text(r) for r in old if isinstance(r, dict)] if isinstance(old, list) else []
    after = [text(r) for r in new if isinstance(r, dict)] if isinstance(new, list) else []
    removed, added = Counter(before) - Counter(after), Counter(after) - Counter(before)
    lines = [f"{section}[-] {rule}" for rule in _once(before, removed)]
    lines += [f"{section}[+] {rule}" for rule in _once(after, added)]
    if not lines and before != after:
        lines.append(f"{section}: the same {len(after)} rules in another order")
    return lines


def _once(texts: Sequence[str], wanted: Counter[str]) -> Iterable[str]:
    """The texts of ``wanted`` in their order in ``texts``, each as many times as it is counted."""
    left = Counter(wanted)
    for text in texts:
        if left[text] > 0:
            left[text] -= 1
            yield text


def _entries(
    section: str, old: Any, new: Any, show: Callable[[Any], str], change: Callable[[Any, Any], str]
) -> list[str]:
    """A map's entries added (``[+] key: value``), removed (``[-]``) or changed (``[~] key: <change>``)."""
    old, new = (value if isinstance(value, dict) else {} for value in (old, new))
    lines = []
    for key in sorted(set(old) | set(new)):
        if key not in old:
            lines.append(f"{section}[+] {key}: {show(new[key])}")
        elif key not in new:
            lines.append(f"{section}[-] {key}: {show(old[key])}")
        elif old[key] != new[key]:
            lines.append(f"{section}[~] {key}: {change(old[key], new[key])}")
    return lines


def _members(section: str, old: Any, new: Any) -> list[str]:
    """A map of name -> list (groups, tagOwners, autoApprovers.routes), member by member."""
    return _entries(section, old, new, _joined, _list_change)


def _list_change(old: Any, new: Any) -> str:
    before, after = (list(v) if isinstance(v, list) else [v] for v in (old, new))
    change = [f"+{m}" for m in after if m not in before] + [f"-{m}" for m in before if m not in after]
    return ", ".join(change) or "the same members in another order"


def _hosts(old: Any, new: Any) -> list[str]:
    return _entries("hosts", old, new, str, lambda before, after: f"{before} -> {after}")


def _auto_approvers(old: Any, new: Any) -> list[str]:
    old, new = (value if isinstance(value, dict) else {} for value in (old, new))
    lines = _members("autoApprovers.routes", old.get("routes"), new.get("routes"))
    if old.get("exitNode") != new.get("exitNode"):
        lines.append(f"autoApprovers.exitNode: {_list_change(old.get('exitNode', []), new.get('exitNode', []))}")
    for key in sorted((set(old) | set(new)) - {"routes", "exitNode"}):
        if old.get(key) != new.get(key):
            lines.append(f"autoApprovers.{key}: changed")
    return lines


def policy_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The rule-level changes from policy ``old`` to ``new``, one line each, in the policy's own order."""
    lines = _members("groups", old.get("groups"), new.get("groups"))
    lines += _members("tagOwners", old.get("tagOwners"), new.get("tagOwners"))
    lines += _hosts(old.get("hosts"), new.get("hosts"))
    lines += _rules("acls", old.get("acls"), new.get("acls"), acl_text)
    lines += _rules("grants", old.get("grants"), new.get("grants"), grant_text)
    lines += _rules("ssh", old.get("ssh"), new.get("ssh"), ssh_text)
    lines += _auto_approvers(old.get("autoApprovers"), new.get("autoApprovers"))
    lines += _rules("tests", old.get("tests"), new.get("tests"), policy_test_text)
    named = {"groups", "tagOwners", "hosts", "acls", "grants", "ssh", "autoApprovers", "tests"}
    for key in sorted((set(old) | set(new)) - named):
        if old.get(key) != new.get(key):
            lines.append(f"{key}: changed")
    return lines


# --------------------------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class WorkloadEffect:
    """What an update does to a workload's pods: ``verb`` is restarts, rolls, stops, starts or waits (at 0
    replicas, nothing runs the old template)."""

    #: The verbs that take an application down or bring it up, which the diff's counts name.
    OUTAGES = ("restarts", "stops", "starts")

    verb: str
    app: str  # the application's name as a reader knows it (Headscale), or the object's name
    text: str


def _mapping(value: Any) -> Mapping[str, Any]:
    """The value when it is a mapping (a planned input may be a marker, or missing), else an empty one."""
    return value if isinstance(value, dict) else {}


def _replicas(inputs: Mapping[str, Any]) -> int | None:
    spec = _mapping(inputs.get("spec"))
    if inputs.get("kind") == "DaemonSet":
        return None
    replicas = spec.get("replicas", 1)
    return replicas if isinstance(replicas, int) else None


def _strategy(inputs: Mapping[str, Any]) -> str:
    spec = _mapping(inputs.get("spec"))
    key = "strategy" if inputs.get("kind") == "Deployment" else "updateStrategy"
    strategy = _mapping(spec.get(key))
    return str(strategy.get("type", "RollingUpdate"))


def _app(inputs: Mapping[str, Any]) -> tuple[str | None, str]:
    metadata = _mapping(inputs.get("metadata"))
    labels = _mapping(metadata.get("labels"))
    app = labels.get("app.kubernetes.io/name")
    if app in APPLICATIONS:
        return app, APPLICATIONS[app]
    return None, f"{inputs.get('kind')} {metadata.get('name', '?')}"


def rollout_outage(recovery: Mapping[str, Any] | None, app: str) -> str | None:
    """The `recovery` output's podReplaced row of ``app`` in words, or None when it has none."""
    model = ((recovery or {}).get("applications") or {}).get(app) or {}
    if not model.get("modelled"):
        return None
    row = next((r for r in model.get("failures", []) if r.get("failure") == "podReplaced"), None)
    if row is None or row.get("rtoSeconds") is None:
        return None
    steps = ", ".join(f"{step} {seconds:g} s" for step, seconds in row.get("steps", {}).items())
    return f"about {row['rtoSeconds']:g} s (the `recovery` output's podReplaced row: {steps})"


def workload_effect(
    old: Mapping[str, Any], new: Mapping[str, Any], paths: Iterable[Sequence[Any]], recovery: Mapping[str, Any] | None
) -> WorkloadEffect | None:
    """What updating a Deployment, StatefulSet or DaemonSet from ``old`` to ``new`` inputs does to its pods, given
    the changed field ``paths``; None for another kind or a change that leaves the pods alone."""
    if new.get("kind") not in WORKLOADS or old.get("kind") != new.get("kind"):
        return None
    app, name = _app(new)
    before, after = _replicas(old), _replicas(new)
    if before and after == 0:
        return WorkloadEffect("stops", name, f"stops {name}: scaled from {before} to 0 at this site")
    if before == 0 and after:
        return WorkloadEffect("starts", name, f"starts {name}: scaled from 0 to {after}")
    if not any(tuple(p[:2]) == ("spec", "template") for p in paths):
        return None
    if after == 0:
        return WorkloadEffect("waits", name, f"{name} is at 0 replicas here: its pods start with the new template")
    strategy = _strategy(new)
    if strategy == "OnDelete":
        return WorkloadEffect("rolls", name, f"{name}'s pods keep the old template until each is deleted (OnDelete)")
    if strategy == "Recreate" or after == 1:
        return WorkloadEffect("restarts", name, _restart_text(app, name, strategy, recovery))
    count = "its pods" if after is None else f"its {after} pods"
    return WorkloadEffect(
        "rolls", name, f"rolls {name}: {count} are replaced one at a time ({strategy}), so it keeps serving"
    )


def _restart_text(app: str | None, name: str, strategy: str, recovery: Mapping[str, Any] | None) -> str:
    how = "Recreate stops the old pod before the new one starts" if strategy == "Recreate" else "one replica"
    outage = rollout_outage(recovery, app) if app else None
    text = f"restarts {name} ({how}): down for {outage or 'as long as its new pod takes to become ready'}"
    return text + (f"; {OUTAGE_MEANS[app]}" if app in OUTAGE_MEANS else "")
