"""tools.diff.resources: which base and head resources are the same resource (URN, alias, Kubernetes object,
similar inputs)."""

from __future__ import annotations

import copy

from tests.support.diff_dumps import CLAIM, compare, k8s, only_change, resource
from tools.diff.report import EXIT_CHANGES, EXIT_DATA_LOSS, exit_code

# ------------------------------------------------------------------------------------------------ identity


def test_a_renamed_resource_is_a_replacement_with_both_urns() -> None:
    renamed = copy.deepcopy(CLAIM)
    renamed["name"] = "lab-headscale-volume"
    renamed["urn"] = CLAIM["urn"].replace("lab-headscale-data", "lab-headscale-volume")
    renamed["retainOnDelete"] = False
    plain = {**copy.deepcopy(CLAIM), "retainOnDelete": False}
    report, text = compare([plain], [renamed])
    change = only_change(report)
    assert change.action == "replace"
    assert f"Pulumi resource identity changed, from {CLAIM['urn']} to {renamed['urn']}" in text
    assert 'aliases=[pulumi.Alias(name="lab-headscale-data")]' in text
    assert exit_code(report) == EXIT_DATA_LOSS, "the old resource's delete deletes the adopted claim"
    retained = {**renamed, "retainOnDelete": True}
    report, text = compare([CLAIM], [retained])
    assert exit_code(report) == EXIT_CHANGES
    assert "nothing is lost" in text


def test_an_alias_keeps_a_renamed_resource() -> None:
    renamed = copy.deepcopy(CLAIM)
    renamed["name"] = "lab-headscale-volume"
    renamed["urn"] = CLAIM["urn"].replace("lab-headscale-data", "lab-headscale-volume")
    renamed["aliases"] = [{"spec": {"name": "lab-headscale-data", "parentUrn": ""}}]
    report, text = compare([CLAIM], [renamed])
    assert only_change(report).action == "update"
    assert "through an alias" in text
    assert exit_code(report) == EXIT_CHANGES


def test_a_new_parent_is_a_new_urn_matched_by_object() -> None:
    component = resource("headscale-ha:headscale:HeadscaleServer", "lab-headscale", custom=False)
    moved = copy.deepcopy(CLAIM)
    moved["parent"] = component["urn"]
    moved["urn"] = CLAIM["urn"].replace("TailnetSite$", "HeadscaleServer$")
    report, text = compare([component, CLAIM], [component, moved])
    change = only_change(report)
    assert change.action == "replace"
    assert change.old_urn == CLAIM["urn"]
    assert "parent=<the headscale-ha:site:TailnetSite lab>" in text


def test_renamed_objects_of_one_type_are_paired_by_similar_inputs() -> None:
    old = k8s("ConfigMap", "hosts", data={f"k{i}": str(i) for i in range(10)}, pulumi_name="lab-hosts")
    new = k8s("ConfigMap", "gateway-hosts", data={f"k{i}": str(i) for i in range(10)}, pulumi_name="lab-gw-hosts")
    report, text = compare([old], [new])
    change = only_change(report)
    assert change.action == "replace"
    assert "paired by similar inputs" in text
