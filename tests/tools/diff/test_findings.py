"""tools.diff.findings: what a replacement or deletion loses (DATA LOSS), and the warnings."""

from __future__ import annotations

import copy

import pytest

from tests.support.diff_dumps import CLAIM, changed, compare, k8s, only_change
from tools.diff.report import EXIT_CHANGES, EXIT_DATA_LOSS, exit_code

# ------------------------------------------------------------------------------------------------ data loss


def test_a_retained_claim_replaced_under_its_own_name_is_data_loss_that_says_what_happens() -> None:
    new = changed(CLAIM, lambda i: i["spec"].update({"storageClassName": "local-path"}))
    report, text = compare([CLAIM], [new])
    assert exit_code(report) == EXIT_DATA_LOSS
    (line,) = [x for x in text.splitlines() if x.startswith("  DATA LOSS")]
    assert line.startswith(
        '  DATA LOSS: PersistentVolumeClaim headscale/headscale-data replaced (spec.storageClassName changed "ceph" '
        '-> "local-path"): it holds the data on its volume'
    )
    assert "retainOnDelete skips the delete" in line
    assert "creating the new one fails because it exists" in line
    assert "the API server then refuses the changed immutable field" in line


def test_a_claim_under_a_new_name_starts_empty_and_the_retained_one_is_left_unused() -> None:
    renamed = changed(CLAIM, lambda i: i["metadata"].update({"name": "headscale-data-v2"}))
    report, text = compare([CLAIM], [renamed])
    assert "starts empty" in text
    assert (
        "the old one is retained in the cluster (retainOnDelete) with the data on its volume, but nothing uses" in text
    )
    assert exit_code(report) == EXIT_DATA_LOSS
    unretained = copy.deepcopy(CLAIM)
    unretained["retainOnDelete"] = False
    renamed["retainOnDelete"] = False
    assert "the old one is deleted, and the data on its volume with it" in compare([unretained], [renamed])[1]


def test_deleted_claims_are_data_loss_retained_or_not() -> None:
    report, text = compare([CLAIM], [])
    assert "DATA LOSS (retained, recoverable by hand): PersistentVolumeClaim headscale/headscale-data deleted" in text
    assert "collides with it" in text
    assert exit_code(report) == EXIT_DATA_LOSS
    plain = copy.deepcopy(CLAIM)
    plain["retainOnDelete"] = False
    assert "DATA LOSS: PersistentVolumeClaim headscale/headscale-data deleted (removed from the program): it is " \
        "deleted" in compare([plain], [])[1]  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "holds"),
    [
        (k8s("Secret", "headscale-identity", data={"noise": {"secret": "1"}}, retain=True), "Noise and DERP"),
        (k8s("Secret", "subnet-router-1", namespace="tailnet-gateway", retain=True), "node key"),
        (k8s("Cluster", "headscale-db", api="postgresql.cnpg.io/v1", retain=True), "PostgreSQL database"),
        (k8s("PersistentVolume", "headscale-litestream", namespace=None, spec={}, retain=True), "the data it points"),
    ],
)
def test_every_stateful_object_deleted_is_data_loss(obj: dict, holds: str) -> None:
    report, text = compare([obj], [])
    assert exit_code(report) == EXIT_DATA_LOSS
    assert holds in text


def test_a_changed_identity_secret_is_replaced_and_its_old_keys_would_be_overwritten() -> None:
    identity = k8s("Secret", "headscale-identity", data={"noise.key": {"secret": "1"}}, retain=True)
    new = changed(identity, lambda i: i["data"].update({"noise.key": {"secret": "2"}}))
    report, text = compare([identity], [new])
    assert exit_code(report) == EXIT_DATA_LOSS
    assert 'DATA LOSS: Secret headscale/headscale-identity replaced (data["noise.key"] changed)' in text
    assert "overwrites it: the old content is lost" in text


def test_a_namespace_is_stateful_when_it_holds_state() -> None:
    namespace = k8s("Namespace", "headscale", namespace=None, pulumi_name="lab-namespace", retain=True)
    renamed = k8s("Namespace", "hs", namespace=None, pulumi_name="lab-namespace", retain=True)
    _report, text = compare([namespace, CLAIM], [renamed, CLAIM])
    assert "DATA LOSS: Namespace headscale replaced" in text
    assert "everything inside it: PersistentVolumeClaim headscale-data" in text
    empty_report, _ = compare([namespace], [renamed])
    assert exit_code(empty_report) == EXIT_CHANGES, "a namespace that holds no state loses none"


def test_a_patch_applied_again_to_the_same_object_loses_nothing() -> None:
    served = k8s(
        "ConfigMap", "headscale-served", data={"served": "yes"}, type_="kubernetes:core/v1:ConfigMapPatch", retain=True
    )
    report, text = compare([served], [changed(served, lambda i: i["data"].update({"served": "again"}))])
    assert only_change(report).action == "replace"
    assert exit_code(report) == EXIT_CHANGES, text


def test_a_secret_that_becomes_a_patch_of_the_same_retained_object_loses_nothing() -> None:
    old = k8s("Secret", "subnet-router-0", namespace="tailnet-gateway", pulumi_name="lab-routers-state-0", retain=True)
    new = k8s(
        "Secret",
        "subnet-router-0",
        namespace="tailnet-gateway",
        pulumi_name="lab-routers-state-0",
        type_="kubernetes:core/v1:SecretPatch",
        retain=True,
    )
    report, text = compare([old], [new])
    assert report.data_loss == [], text
    assert "already holds" not in text
    assert "create fails" not in text
