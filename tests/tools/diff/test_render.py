"""tools.diff.render: what a change means before its fields (effects, policy rules), a digest shown once, a secret
as a verb."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.diff_dumps import DEPLOYMENT, changed, dump, k8s
from tools.diff.render import _field_lines, render
from tools.diff.report import EXIT_CHANGES, Report, exit_code
from tools.diff.stacks import diff_dumps
from tools.fields import ABSENT, FieldChange

# ------------------------------------------------------------------------------------------------ what it means

POLICY_TEXT = json.dumps(
    {"acls": [{"action": "accept", "src": ["group:ops"], "proto": "tcp", "dst": ["tag:server:22"]}]}, indent=2
)
DIGESTS = ("a" * 64, "b" * 64)
POLICY_MAP = k8s(
    "ConfigMap",
    "headscale-policy-rendered",
    metadata={"name": "headscale-policy-rendered", "namespace": "headscale"},
    data={"policy.json": POLICY_TEXT},
)
POLICY_MAP["inputs"]["metadata"]["annotations"] = {"headscale-ha/policy-sha256": DIGESTS[0]}
RESTARTING = changed(DEPLOYMENT, lambda i: i["spec"].update(strategy={"type": "Recreate"}))
RESTARTING["inputs"]["metadata"]["labels"] = {"app.kubernetes.io/name": "headscale"}
RESTARTING["inputs"]["spec"]["template"]["metadata"] = {"annotations": {"checksum/policy": DIGESTS[0]}}
POD_REPLACED = {"failure": "podReplaced", "rtoSeconds": 40.6, "steps": {"imagePull": 30.0, "start": 10.6}}
RECOVERY = {"applications": {"headscale": {"modelled": True, "failures": [POD_REPLACED]}}}


def _policy_change() -> tuple[Report, str]:
    def new_policy(inputs: dict[str, Any]) -> None:
        policy = json.loads(inputs["data"]["policy.json"])
        policy["acls"].append({"action": "accept", "src": ["group:ops"], "proto": "tcp", "dst": ["tag:bastion:8443"]})
        inputs["data"]["policy.json"] = json.dumps(policy, indent=2)
        inputs["metadata"]["annotations"]["headscale-ha/policy-sha256"] = DIGESTS[1]

    def restart(inputs: dict[str, Any]) -> None:
        inputs["spec"]["template"]["metadata"]["annotations"]["checksum/policy"] = DIGESTS[1]

    mutable = {"kubernetes:enableConfigMapMutable": "true"}
    before = dump(
        POLICY_MAP,
        RESTARTING,
        outputs={"policy": {"sha256": DIGESTS[0]}, "recovery": RECOVERY},
        kubernetesConfig=mutable,
    )
    after = dump(
        changed(POLICY_MAP, new_policy),
        changed(RESTARTING, restart),
        outputs={"policy": {"sha256": DIGESTS[1]}, "recovery": RECOVERY},
        kubernetesConfig=mutable,
    )
    report = diff_dumps(before, after)
    return report, render(report)


def test_a_policy_change_reads_as_rules_and_the_restart_before_any_raw_text() -> None:
    report, text = _policy_change()
    lines = text.splitlines()
    assert lines[0] == "=== stack lab: 2 updated, restarts Headscale, 1 output(s) changed"
    assert lines[1:5] == [
        "effects",
        "  restarts Headscale (Recreate stops the old pod before the new one starts): down for about 40.6 s (the "
        "`recovery` output's podReplaced row: imagePull 30 s, start 10.6 s); connected nodes keep their tunnels; "
        "logins, new nodes and policy updates wait",
        "policy rules (ConfigMap headscale/headscale-policy-rendered)",
        "  acls[+] group:ops -> tag:bastion:8443 (tcp)",
    ]
    raw = lines.index('      data["policy.json"]: the policy\'s JSON (its rules are listed above)')
    assert raw > 4
    assert "restarts Headscale" in lines[-1]
    assert exit_code(report) == EXIT_CHANGES


def test_a_digest_is_shown_short_once_and_its_repeats_name_the_first() -> None:
    _, text = _policy_change()
    assert text.count(DIGESTS[0][:12]) == 1
    assert DIGESTS[0] not in text
    first = 'ConfigMap headscale/headscale-policy-rendered metadata.annotations["headscale-ha/policy-sha256"]'
    assert f'metadata.annotations["headscale-ha/policy-sha256"]: {DIGESTS[0][:12]}… -> {DIGESTS[1][:12]}…' in text
    assert f'spec.template.metadata.annotations["checksum/policy"]: the same digest change as {first}' in text
    assert f"policy.sha256: the same digest change as {first}" in text


@pytest.mark.parametrize(
    ("old", "new", "verb"),
    [
        ({"secret": "a1"}, {"secret": "b2"}, "changed"),
        ("ABSENT", {"secret": "b2"}, "added"),
        ({"secret": "a1"}, "ABSENT", "removed"),
    ],
)
def test_a_secret_reads_added_changed_or_removed(old: Any, new: Any, verb: str) -> None:
    change = FieldChange(("bootstrapApiKey",), ABSENT if old == "ABSENT" else old, ABSENT if new == "ABSENT" else new)
    assert _field_lines(change, "  ") == [f"  bootstrapApiKey: {verb} (secret)"]
