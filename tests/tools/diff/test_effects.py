"""tools.diff.effects: a policy change read as rules, and what an update does to a workload's pods."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tools.diff.effects import WorkloadEffect, policy_changes, policy_document, rollout_outage, workload_effect

BASE_POLICY: dict[str, Any] = {
    "groups": {"group:admins": ["alice@"], "group:ops": ["bob@", "carol@"]},
    "tagOwners": {"tag:server": ["group:admins"]},
    "hosts": {"gateway-hydra": "172.30.250.10/32"},
    "acls": [
        {"action": "accept", "src": ["group:admins"], "dst": ["autogroup:member:*"]},
        {"action": "accept", "src": ["group:ops"], "proto": "tcp", "dst": ["tag:server:22,443"]},
        {"action": "accept", "src": ["group:ops"], "proto": "icmp", "dst": ["tag:server:*"]},
    ],
    "ssh": [
        {
            "action": "check",
            "src": ["group:admins"],
            "dst": ["tag:server"],
            "users": ["root", "autogroup:nonroot"],
            "checkPeriod": "12h",
        }
    ],
    "autoApprovers": {"routes": {"10.96.0.0/16": ["tag:subnet-router-hydra"]}, "exitNode": ["tag:exit"]},
}


def _edited(edit: Any) -> dict[str, Any]:
    policy = copy.deepcopy(BASE_POLICY)
    edit(policy)
    return policy


def test_an_added_rule_is_one_line_in_the_words_of_the_rule() -> None:
    def add(policy: dict[str, Any]) -> None:
        rule = {"action": "accept", "src": ["group:ops"], "proto": "tcp", "dst": ["tag:bastion:8443"]}
        policy["acls"].insert(1, rule)

    assert policy_changes(BASE_POLICY, _edited(add)) == ["acls[+] group:ops -> tag:bastion:8443 (tcp)"]


def test_every_section_says_what_was_added_removed_or_changed() -> None:
    def edit(policy: dict[str, Any]) -> None:
        policy["groups"]["group:ops"] = ["bob@", "dave@"]
        policy["groups"]["group:audit"] = ["erin@"]
        del policy["tagOwners"]["tag:server"]
        policy["hosts"]["gateway-hydra"] = "172.30.250.11/32"
        policy["acls"].pop(2)
        policy["ssh"][0]["checkPeriod"] = "1h"
        policy["autoApprovers"]["routes"]["10.244.0.0/16"] = ["tag:subnet-router-hydra"]
        policy["autoApprovers"]["exitNode"] = []
        policy["tests"] = [{"src": "bob@", "accept": ["tag:server:22"], "deny": ["tag:server:80"]}]
        policy["randomizeClientPort"] = True

    assert policy_changes(BASE_POLICY, _edited(edit)) == [
        "groups[+] group:audit: erin@",
        "groups[~] group:ops: +dave@, -carol@",
        "tagOwners[-] tag:server: group:admins",
        "hosts[~] gateway-hydra: 172.30.250.10/32 -> 172.30.250.11/32",
        "acls[-] group:ops -> tag:server:* (icmp)",
        "ssh[-] check group:admins -> tag:server as root, autogroup:nonroot every 12h",
        "ssh[+] check group:admins -> tag:server as root, autogroup:nonroot every 1h",
        "autoApprovers.routes[+] 10.244.0.0/16: tag:subnet-router-hydra",
        "autoApprovers.exitNode: -tag:exit",
        "tests[+] bob@: accept tag:server:22; deny tag:server:80",
        "randomizeClientPort: changed",
    ]


def test_rules_are_a_multiset_a_duplicate_and_a_reorder_are_told_apart() -> None:
    duplicated = _edited(lambda p: p["acls"].append(copy.deepcopy(p["acls"][0])))
    assert policy_changes(BASE_POLICY, duplicated) == ["acls[+] group:admins -> autogroup:member:*"]
    assert policy_changes(duplicated, BASE_POLICY) == ["acls[-] group:admins -> autogroup:member:*"]
    reordered = _edited(lambda p: p["acls"].reverse())
    assert policy_changes(BASE_POLICY, reordered) == ["acls: the same 3 rules in another order"]
    assert policy_changes(BASE_POLICY, copy.deepcopy(BASE_POLICY)) == []


def test_grants_and_a_non_accept_action_are_named() -> None:
    old = {"grants": [{"src": ["group:ops"], "dst": ["tag:server"], "ip": ["22", "443"]}]}
    new = {"grants": [{"src": ["group:ops"], "dst": ["tag:server"], "app": {"tailscale.com/cap/x": [{}]}}]}
    assert policy_changes(old, new) == [
        "grants[-] group:ops -> tag:server ip 22, 443",
        "grants[+] group:ops -> tag:server app tailscale.com/cap/x",
    ]
    deny = {"acls": [{"action": "drop", "src": ["a@"], "dst": ["b@:*"]}]}
    assert policy_changes({"acls": []}, deny) == ["acls[+] drop a@ -> b@:*"]


@pytest.mark.parametrize(
    "value",
    [
        json.dumps({"server_url": "https://x", "acls": []}),  # a key no policy has
        json.dumps({"groups": {}}),  # neither acls nor grants
        json.dumps([{"acls": []}]),
        "{not json",
        None,
        7,
    ],
)
def test_only_a_policy_document_is_read_as_one(value: Any) -> None:
    assert policy_document(value) is None


def test_a_rendered_policy_is_read_as_one() -> None:
    assert policy_document(json.dumps(BASE_POLICY, indent=2)) == BASE_POLICY


# --------------------------------------------------------------------------------------------- workloads

RECOVERY = {
    "applications": {
        "headscale": {
            "modelled": True,
            "failures": [
                {"failure": "containerCrash", "rtoSeconds": 20.0, "steps": {"start": 10.0}},
                {
                    "failure": "podReplaced",
                    "rtoSeconds": 40.6,
                    "steps": {"imagePull": 30.0, "restore": 0.6, "start": 10.0},
                },
            ],
        },
        "headplane": {"modelled": False, "failures": []},
    }
}


def _workload(kind: str = "Deployment", app: str = "headscale", replicas: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": app, "namespace": "headscale", "labels": {"app.kubernetes.io/name": app}},
        "spec": {"replicas": replicas, "template": {"metadata": {"annotations": {"checksum/policy": "a"}}}, **spec},
    }


TEMPLATE = [("spec", "template", "metadata", "annotations", "checksum/policy")]


def test_a_recreate_rollout_of_headscale_gives_the_outage_of_the_recovery_output() -> None:
    old = _workload(strategy={"type": "Recreate"})
    effect = workload_effect(old, copy.deepcopy(old), TEMPLATE, RECOVERY)
    assert effect == WorkloadEffect(
        "restarts",
        "Headscale",
        "restarts Headscale (Recreate stops the old pod before the new one starts): down for about 40.6 s (the "
        "`recovery` output's podReplaced row: imagePull 30 s, restore 0.6 s, start 10 s); connected nodes keep "
        "their tunnels; logins, new nodes and policy updates wait",
    )


def test_without_a_recovery_figure_the_outage_is_said_without_one() -> None:
    old = _workload(app="headplane", strategy={"type": "Recreate"})
    effect = workload_effect(old, old, TEMPLATE, RECOVERY)
    assert effect is not None
    assert effect.text == (
        "restarts Headplane (Recreate stops the old pod before the new one starts): down for as long as its new pod "
        "takes to become ready; the admin UI is unavailable"
    )
    assert rollout_outage(RECOVERY, "headplane") is None
    assert rollout_outage(None, "headscale") is None


def test_scaling_to_zero_and_back_stops_and_starts_it() -> None:
    running, stopped = _workload(replicas=1), _workload(replicas=0)
    replicas = [("spec", "replicas")]
    assert workload_effect(running, stopped, replicas, RECOVERY) == WorkloadEffect(
        "stops", "Headscale", "stops Headscale: scaled from 1 to 0 at this site"
    )
    assert workload_effect(stopped, running, replicas, RECOVERY) == WorkloadEffect(
        "starts", "Headscale", "starts Headscale: scaled from 0 to 1"
    )
    effect = workload_effect(stopped, stopped, TEMPLATE, RECOVERY)
    assert effect is not None
    assert (effect.verb, effect.verb in WorkloadEffect.OUTAGES) == ("waits", False)


def test_a_rolling_update_of_several_replicas_keeps_serving() -> None:
    gateway = _workload(app="tailnet-gateway", replicas=3)
    effect = workload_effect(gateway, gateway, TEMPLATE, RECOVERY)
    assert effect == WorkloadEffect(
        "rolls",
        "Deployment tailnet-gateway",
        "rolls Deployment tailnet-gateway: its 3 pods are replaced one at a time (RollingUpdate), so it keeps serving",
    )
    on_delete = _workload(kind="StatefulSet", app="routers", replicas=2, updateStrategy={"type": "OnDelete"})
    effect = workload_effect(on_delete, on_delete, TEMPLATE, RECOVERY)
    assert effect is not None
    assert effect.verb == "rolls"
    assert "OnDelete" in effect.text
    single = _workload(app="exporter", replicas=1)
    effect = workload_effect(single, single, TEMPLATE, RECOVERY)
    assert effect is not None
    assert effect.verb == "restarts", "one replica has nothing to keep serving while it rolls"


def test_a_change_outside_the_pod_template_or_of_another_kind_restarts_nothing() -> None:
    old = _workload()
    assert workload_effect(old, old, [("metadata", "labels", "team")], RECOVERY) is None
    config_map = {"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1"}}
    assert workload_effect(config_map, config_map, [("data", "a")], RECOVERY) is None
