"""tools.diff: the offline preview a reviewer reads (what changes, what is replaced, what loses data).

Most cases compare small hand-written dumps (``diff_dumps``, no git, no plan); the end-to-end cases plan a
committed copy of this project and a changed working tree of it, sharing one planned base.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools import diff, kubernetes_rules
from tools.fields import ABSENT, FieldChange
from tools.harness import PROJECT_DIR

STACK = "lab"
SITE = "urn:pulumi:lab::headscale-ha::pulumi:pulumi:Stack$headscale-ha:site:TailnetSite::lab"
GROUP_VERSION = {"v1": "core/v1", "apps/v1": "apps/v1", "batch/v1": "batch/v1"}


# ------------------------------------------------------------------------------------------------ dump builders


def resource(
    type_: str,
    name: str,
    inputs: dict[str, Any] | None = None,
    *,
    parent: str = SITE,
    custom: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """A resource as the dumper writes it (URN spelled like the offline harness: the parent's own type)."""
    chain = parent.split("::")[2].rsplit("$", 1)[-1]
    return {
        "urn": f"urn:pulumi:{STACK}::headscale-ha::{chain}${type_}::{name}",
        "type": type_,
        "name": name,
        "parent": parent,
        "custom": custom,
        "inputs": inputs or {},
        "protect": options.pop("protect", False),
        "retainOnDelete": options.pop("retain", False),
        "provider": options.pop("provider", None),
        "dependencies": [],
        "aliases": options.pop("aliases", []),
        "ignoreChanges": options.pop("ignore_changes", []),
        "replaceOnChanges": options.pop("replace_on_changes", []),
        "deleteBeforeReplace": None,
    }


def k8s(
    kind: str,
    name: str,
    *,
    api: str = "v1",
    namespace: str | None = "headscale",
    pulumi_name: str | None = None,
    type_: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A Kubernetes object resource; ``fields`` are its top-level fields (spec=..., data=...)."""
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    options = {k: fields.pop(k) for k in ("protect", "retain", "provider", "aliases", "ignore_changes") if k in fields}
    group_version = GROUP_VERSION.get(api, api)
    return resource(
        type_ or f"kubernetes:{group_version}:{kind}",
        pulumi_name or f"lab-{name}",
        {"apiVersion": api, "kind": kind, "metadata": metadata, **fields},
        **options,
    )


def dump(*resources: dict[str, Any], **entry: Any) -> dict[str, Any]:
    """A one-stack dump ("lab") of ``resources``; ``entry`` adds outputs, secureConfig, kubernetesConfig, error."""
    stack = {"role": "site", "stack": STACK, "project": "headscale-ha", "requested": True}
    stack.update({"resources": list(resources), "outputs": {}, "secureConfig": {}, "kubernetesConfig": {}})
    stack.update(entry)
    return {"version": diff.DUMP_VERSION, "notes": [], "stacks": {f"site/{STACK}": stack}}


def changed(base: dict[str, Any], edit: Any) -> dict[str, Any]:
    """A deep copy of resource ``base`` after ``edit(inputs)``."""
    new = copy.deepcopy(base)
    edit(new["inputs"])
    return new


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]], **head: Any) -> tuple[diff.Report, str]:
    report = diff.diff_dumps(dump(*before), dump(*after, **head))
    return report, diff.render(report)


def only_change(report: diff.Report) -> diff.Change:
    (stack,) = report.stacks
    (change,) = stack.changes
    return change


DEPLOYMENT = k8s(
    "Deployment",
    "headscale",
    api="apps/v1",
    spec={
        "replicas": 1,
        "selector": {"matchLabels": {"app": "headscale"}},
        "template": {
            "spec": {
                "containers": [
                    {"name": "headscale", "image": "ghcr.io/juanfont/headscale:0.29.2"},
                    {"name": "litestream", "image": "docker.io/litestream/litestream:0.5.17"},
                ]
            }
        },
    },
)
CLAIM = k8s(
    "PersistentVolumeClaim",
    "headscale-data",
    pulumi_name="lab-headscale-data",
    spec={"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "ceph"},
    retain=True,
)


# ------------------------------------------------------------------------------------------------ basics


def test_identical_dumps_print_nothing_and_exit_0() -> None:
    report, text = compare([DEPLOYMENT, CLAIM], [copy.deepcopy(DEPLOYMENT), copy.deepcopy(CLAIM)])
    assert text == ""
    assert diff.exit_code(report) == diff.EXIT_NO_CHANGE


def test_an_update_names_the_field_with_lists_keyed_by_name() -> None:
    def bump(inputs: dict) -> None:
        containers = inputs["spec"]["template"]["spec"]["containers"]
        containers.reverse()  # order aside, only the image changes
        containers[1]["image"] = "ghcr.io/juanfont/headscale:0.29.3"

    report, text = compare([DEPLOYMENT], [changed(DEPLOYMENT, bump)])
    change = only_change(report)
    assert change.action == "update"
    assert (
        'spec.template.spec.containers[name=headscale].image: "ghcr.io/juanfont/headscale:0.29.2" -> '
        '"ghcr.io/juanfont/headscale:0.29.3"' in text
    )
    assert "order changed" in text
    assert diff.exit_code(report) == diff.EXIT_CHANGES
    assert text.splitlines()[-1].startswith("diff base -> head: lab: 1 updated; 0 DATA LOSS")


def test_a_first_named_item_in_an_empty_list_is_named_too() -> None:
    changes = diff.diff_values({"env": []}, {"env": [{"name": "TZ", "value": "UTC"}]})
    assert [c.text for c in changes] == ["env[name=TZ]"]
    assert diff.diff_values([1, 2], [1, 3])[0].text == "[1]"


def test_created_and_deleted_resources_are_listed() -> None:
    service = k8s("Service", "headscale", spec={"ports": [{"name": "http", "port": 8080}]})
    report, text = compare([DEPLOYMENT], [service])
    assert "created\n  +  Service headscale/headscale  (lab-headscale)" in text
    assert "deleted\n  -  Deployment headscale/headscale  (lab-headscale)" in text
    assert diff.exit_code(report) == diff.EXIT_CHANGES


def test_a_multi_line_value_shows_as_a_text_diff() -> None:
    config = k8s("ConfigMap", "headscale-config", data={"config.yaml": "a: 1\nb: 2\nc: 3\n"})
    new = changed(config, lambda i: i["data"].update({"config.yaml": "a: 1\nb: 20\nc: 3\n"}))
    _, text = compare([config], [new], kubernetesConfig={"kubernetes:enableConfigMapMutable": "true"})
    assert 'data["config.yaml"]: text changed' in text
    assert "-b: 2\n" in text + "\n"
    assert "+b: 20" in text


# ------------------------------------------------------------------------------------------------ secrets


def test_a_secret_change_prints_changed_and_never_the_value() -> None:
    router = k8s(
        "Secret", "subnet-router-authkey", namespace="tailnet-gateway", stringData={"authkey-0": {"secret": "1111"}}
    )
    new = changed(router, lambda i: i["stringData"].update({"authkey-0": {"secret": "2222"}}))
    report, text = compare([router], [new])
    assert "stringData.authkey-0: changed (secret)" in text
    assert "1111" not in text
    assert "2222" not in text
    # pulumi-kubernetes replaces a Secret whose data changes unless enableSecretMutable is set.
    assert only_change(report).action == "replace"
    assert "enableSecretMutable" in text


def test_with_enable_secret_mutable_a_secret_data_change_is_an_update() -> None:
    router = k8s("Secret", "router-keys", stringData={"authkey-0": {"secret": "1111"}})
    new = changed(router, lambda i: i["stringData"].update({"authkey-0": {"secret": "2222"}}))
    report, _ = compare([router], [new], kubernetesConfig={"kubernetes:enableSecretMutable": "true"})
    assert only_change(report).action == "update"
    immutable = changed(router, lambda i: i.update({"immutable": True}))
    report, _ = compare(
        [immutable],
        [changed(immutable, lambda i: i["stringData"].update({"authkey-0": {"secret": "3"}}))],
        kubernetesConfig={"kubernetes:enableSecretMutable": "true"},
    )
    assert only_change(report).action == "replace", "an immutable Secret is replaced even when Secrets are mutable"


def test_a_secret_marker_without_digest_is_no_change() -> None:
    """A base planned by a harness that could not hash secrets: unknown is not reported as changed."""
    key = resource("random:index/randomPassword:RandomPassword", "cookie", {"length": 32, "result": {"secret": None}})
    new = changed(key, lambda i: i.update({"result": {"secret": "abcd"}}))
    assert compare([key], [new])[1] == ""


def test_a_volume_named_secret_is_not_a_secret_marker() -> None:
    assert not diff.is_secret({"secret": {"secretName": "x"}})
    assert diff.is_secret({"secret": "0123456789abcdef"})


def test_secure_config_changes_are_listed_without_their_ciphertext() -> None:
    before = dump(CLAIM, secureConfig={"headscale-ha:objectStoreAccessKeyId": "aaaa1111aaaa1111"})
    after = dump(copy.deepcopy(CLAIM), secureConfig={"headscale-ha:objectStoreAccessKeyId": "bbbb2222bbbb2222"})
    report = diff.diff_dumps(before, after)
    text = diff.render(report)
    assert "headscale-ha:objectStoreAccessKeyId: secure value changed" in text
    assert "aaaa1111" not in text
    assert "bbbb2222" not in text
    assert diff.exit_code(report) == diff.EXIT_CHANGES


# ------------------------------------------------------------------------------------------------ replacement rules


def _case(kind: str, api: str, before: dict[str, Any], after: dict[str, Any], **extra: Any) -> diff.Change:
    old = k8s(kind, "object", api=api, **before, **extra)
    new = k8s(kind, "object", api=api, **after, **extra)
    report, _ = compare([old], [new])
    return only_change(report)


SELECTOR_A = {"matchLabels": {"app": "a"}}
SELECTOR_B = {"matchLabels": {"app": "b"}}


@pytest.mark.parametrize(
    ("kind", "api", "before", "after", "action", "refused"),
    [
        # Deployment, DaemonSet: the selector (pulumi-kubernetes replaces); ReplicaSet: the API refuses.
        ("Deployment", "apps/v1", {"spec": {"selector": SELECTOR_A}}, {"spec": {"selector": SELECTOR_B}}, "replace", 0),
        ("DaemonSet", "apps/v1", {"spec": {"selector": SELECTOR_A}}, {"spec": {"selector": SELECTOR_B}}, "replace", 0),
        ("ReplicaSet", "apps/v1", {"spec": {"selector": SELECTOR_A}}, {"spec": {"selector": SELECTOR_B}}, "update", 1),
        ("Deployment", "apps/v1", {"spec": {"replicas": 1}}, {"spec": {"replicas": 0}}, "update", 0),
        # StatefulSet: selector, serviceName, volumeClaimTemplates, podManagementPolicy replace; replicas do not.
        ("StatefulSet", "apps/v1", {"spec": {"serviceName": "a"}}, {"spec": {"serviceName": "b"}}, "replace", 0),
        (
            "StatefulSet",
            "apps/v1",
            {"spec": {"volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {"storageClassName": "a"}}]}},
            {"spec": {"volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {"storageClassName": "b"}}]}},
            "replace",
            0,
        ),
        (
            "StatefulSet",
            "apps/v1",
            {"spec": {"podManagementPolicy": "OrderedReady"}},
            {"spec": {"podManagementPolicy": "Parallel"}},
            "replace",
            0,
        ),
        ("StatefulSet", "apps/v1", {"spec": {"replicas": 2}}, {"spec": {"replicas": 3}}, "update", 0),
        ("StatefulSet", "apps/v1", {"spec": {"minReadySeconds": 0}}, {"spec": {"minReadySeconds": 5}}, "update", 0),
        # Job: template, selector, completions, parallelism replace; completionMode, podFailurePolicy: refused.
        (
            "Job",
            "batch/v1",
            {"spec": {"template": {"spec": {"containers": [{"name": "m", "image": "a"}]}}}},
            {"spec": {"template": {"spec": {"containers": [{"name": "m", "image": "b"}]}}}},
            "replace",
            0,
        ),
        ("Job", "batch/v1", {"spec": {"completions": 1}}, {"spec": {"completions": 2}}, "replace", 0),
        ("Job", "batch/v1", {"spec": {"parallelism": 1}}, {"spec": {"parallelism": 2}}, "replace", 0),
        (
            "Job",
            "batch/v1",
            {"spec": {"completionMode": "NonIndexed"}},
            {"spec": {"completionMode": "Indexed"}},
            "update",
            1,
        ),
        ("Job", "batch/v1", {"spec": {"backoffLimit": 1}}, {"spec": {"backoffLimit": 3}}, "update", 0),
        # PersistentVolumeClaim: class, access modes, volume name replace; growing is an update, shrinking refused.
        (
            "PersistentVolumeClaim",
            "v1",
            {"spec": {"storageClassName": "ceph-block"}},
            {"spec": {"storageClassName": "local-path"}},
            "replace",
            0,
        ),
        (
            "PersistentVolumeClaim",
            "v1",
            {"spec": {"accessModes": ["ReadWriteOnce"]}},
            {"spec": {"accessModes": ["ReadWriteMany"]}},
            "replace",
            0,
        ),
        ("PersistentVolumeClaim", "v1", {"spec": {"volumeName": "a"}}, {"spec": {"volumeName": "b"}}, "replace", 0),
        (
            "PersistentVolumeClaim",
            "v1",
            {"spec": {"resources": {"requests": {"storage": "1Gi"}}}},
            {"spec": {"resources": {"requests": {"storage": "2Gi"}}}},
            "update",
            0,
        ),
        (
            "PersistentVolumeClaim",
            "v1",
            {"spec": {"resources": {"requests": {"storage": "2Gi"}}}},
            {"spec": {"resources": {"requests": {"storage": "1500Mi"}}}},
            "update",
            1,
        ),
        (
            "PersistentVolumeClaim",
            "v1",
            {"spec": {"volumeMode": "Filesystem"}},
            {"spec": {"volumeMode": "Block"}},
            "update",
            1,
        ),
        # PersistentVolume: the volume source replaces; capacity, mount options, reclaim policy, claimRef update.
        (
            "PersistentVolume",
            "v1",
            {"spec": {"nfs": {"server": "a", "path": "/x"}}},
            {"spec": {"nfs": {"server": "b", "path": "/x"}}},
            "replace",
            0,
        ),
        (
            "PersistentVolume",
            "v1",
            {"spec": {"capacity": {"storage": "1Gi"}}},
            {"spec": {"capacity": {"storage": "2Gi"}}},
            "update",
            0,
        ),
        (
            "PersistentVolume",
            "v1",
            {"spec": {"mountOptions": ["hard"]}},
            {"spec": {"mountOptions": ["soft"]}},
            "update",
            0,
        ),
        (
            "PersistentVolume",
            "v1",
            {"spec": {"persistentVolumeReclaimPolicy": "Retain"}},
            {"spec": {"persistentVolumeReclaimPolicy": "Delete"}},
            "update",
            0,
        ),
        (
            "PersistentVolume",
            "v1",
            {"spec": {"claimRef": {"name": "a"}}},
            {"spec": {"claimRef": {"name": "b"}}},
            "update",
            0,
        ),
        (
            "PersistentVolume",
            "v1",
            {"spec": {"volumeMode": "Filesystem"}},
            {"spec": {"volumeMode": "Block"}},
            "update",
            1,
        ),
        # Service: clusterIP replaces; the primary IP family is refused; to ExternalName is an update.
        ("Service", "v1", {"spec": {"clusterIP": "None"}}, {"spec": {}}, "replace", 0),
        ("Service", "v1", {"spec": {"ipFamilies": ["IPv4"]}}, {"spec": {"ipFamilies": ["IPv6"]}}, "update", 1),
        (
            "Service",
            "v1",
            {"spec": {"type": "ClusterIP"}},
            {"spec": {"type": "ExternalName", "externalName": "x.example.com"}},
            "update",
            0,
        ),
        # ConfigMap data: replaced by pulumi-kubernetes (enableConfigMapMutable unset); immutable: true cannot go.
        ("ConfigMap", "v1", {"data": {"a": "1"}}, {"data": {"a": "2"}}, "replace", 0),
        ("ConfigMap", "v1", {"immutable": True, "data": {"a": "1"}}, {"data": {"a": "1"}}, "update", 1),
        ("Secret", "v1", {"type": "Opaque"}, {"type": "kubernetes.io/tls"}, "replace", 0),
        # Namespace: the name is its identity.
        ("Namespace", "v1", {"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}, "replace", 0),
        # RBAC and storage classes.
        (
            "RoleBinding",
            "rbac.authorization.k8s.io/v1",
            {"roleRef": {"name": "a"}},
            {"roleRef": {"name": "b"}},
            "replace",
            0,
        ),
        ("StorageClass", "storage.k8s.io/v1", {"parameters": {"a": "1"}}, {"parameters": {"a": "2"}}, "replace", 0),
        ("StorageClass", "storage.k8s.io/v1", {"reclaimPolicy": "Retain"}, {"reclaimPolicy": "Delete"}, "update", 1),
        # PodDisruptionBudget: only policy/v1beta1's spec replaces.
        (
            "PodDisruptionBudget",
            "policy/v1",
            {"spec": {"maxUnavailable": 1}},
            {"spec": {"maxUnavailable": 2}},
            "update",
            0,
        ),
        (
            "PodDisruptionBudget",
            "policy/v1beta1",
            {"spec": {"maxUnavailable": 1}},
            {"spec": {"maxUnavailable": 2}},
            "replace",
            0,
        ),
        # Custom resources: only a name or namespace change replaces.
        ("Cluster", "postgresql.cnpg.io/v1", {"spec": {"instances": 1}}, {"spec": {"instances": 3}}, "update", 0),
    ],
)
def test_replacement_rules(
    kind: str, api: str, before: dict[str, Any], after: dict[str, Any], action: str, refused: int
) -> None:
    if kind == "Namespace":
        old = k8s(kind, before["metadata"]["name"], namespace=None, pulumi_name="lab-namespace")
        new = k8s(kind, after["metadata"]["name"], namespace=None, pulumi_name="lab-namespace")
        report, text = compare([old], [new])
        change = only_change(report)
        assert "the Kubernetes object changed identity, Namespace a -> Namespace b" in text
    else:
        change = _case(kind, api, before, after)
    assert change.action == action, diff.render_stack(diff.StackDiff("lab", changes=[change]))
    assert sum(1 for f in change.fields if f.refused) == refused


def test_a_namespace_or_name_change_of_any_kind_is_a_replacement() -> None:
    moved = k8s("Deployment", "headscale", api="apps/v1", namespace="control", pulumi_name="lab-headscale")
    report, text = compare([DEPLOYMENT], [moved])
    assert only_change(report).action == "replace"
    assert "Deployment headscale/headscale -> Deployment control/headscale" in text


def test_an_api_version_change_of_the_same_resource_is_an_update() -> None:
    new = changed(DEPLOYMENT, lambda i: i.update({"apiVersion": "apps/v1beta2"}))
    report, text = compare([DEPLOYMENT], [new])
    assert only_change(report).action == "update"
    assert "apiVersion changed" in text


def test_storage_shrink_and_growth_are_told_apart() -> None:
    grow = _case("PersistentVolumeClaim", "v1", {"spec": {"resources": {"requests": {"storage": "1Gi"}}}},
                 {"spec": {"resources": {"requests": {"storage": "2Gi"}}}})  # fmt: skip
    assert grow.fields[0].note
    assert "allowVolumeExpansion" in grow.fields[0].note
    old = k8s("PersistentVolumeClaim", "c", spec={"resources": {"requests": {"storage": "2Gi"}}})
    new = k8s("PersistentVolumeClaim", "c", spec={"resources": {"requests": {"storage": "1Gi"}}})
    report, text = compare([old], [new])
    assert "storage shrink is refused" in text
    assert "WARNING: PersistentVolumeClaim headscale/c: spec.resources.requests.storage changed" in text
    assert diff.exit_code(report) == diff.EXIT_CHANGES
    assert diff.quantity("1500Mi") < diff.quantity("2Gi") < diff.quantity("3G")


def test_config_map_data_updates_in_place_with_enable_config_map_mutable_unless_immutable() -> None:
    config = k8s("ConfigMap", "c", data={"a": "1"})
    report, _ = compare(
        [config], [changed(config, lambda i: i["data"].update({"a": "2"}))],
        kubernetesConfig={"kubernetes:enableConfigMapMutable": "true"},
    )  # fmt: skip
    assert only_change(report).action == "update"
    immutable = k8s("ConfigMap", "c", data={"a": "1"}, immutable=True)
    report, _ = compare(
        [immutable], [changed(immutable, lambda i: i["data"].update({"a": "2"}))],
        kubernetesConfig={"kubernetes:enableConfigMapMutable": "true"},
    )  # fmt: skip
    assert only_change(report).action == "replace"


def test_an_explicit_provider_s_options_decide_mutability() -> None:
    provider = resource("pulumi:providers:kubernetes", "lab-kubernetes", {"enableConfigMapMutable": "true"})
    ref = provider["urn"] + "::lab-kubernetes-id"
    config = k8s("ConfigMap", "c", data={"a": "1"}, provider=ref)
    report, _ = compare([provider, config], [provider, changed(config, lambda i: i["data"].update({"a": "2"}))])
    assert only_change(report).action == "update"


@pytest.mark.parametrize(
    ("type_", "before", "after", "action", "text"),
    [
        ("random:index/randomPassword:RandomPassword", {"length": 32}, {"length": 40}, "replace", "key replaced"),
        ("random:index/randomBytes:RandomBytes", {"length": 32}, {"length": 64}, "replace", "DATA LOSS"),
        (
            "pulumi-python:dynamic/headscale:PreAuthKey",
            {"aclTags": ["tag:a"], "rotateBefore": "24h"},
            {"aclTags": ["tag:b"], "rotateBefore": "24h"},
            "replace",
            "key replaced: pulumi-python:dynamic/headscale:PreAuthKey PreAuthKey replaced (aclTags[0] changed",
        ),
        (
            "pulumi-python:dynamic/headscale:PreAuthKey",
            {"aclTags": ["tag:a"], "rotateBefore": "24h"},
            {"aclTags": ["tag:a"], "rotateBefore": "48h"},
            "update",
            "rotateBefore",
        ),
        ("pulumi-python:dynamic/headscale:ApiKey", {"lifetime": "90d"}, {"lifetime": "30d"}, "replace", "key replaced"),
        (
            "pulumi-python:dynamic/headscale:User",
            {"email": "a@x", "forceDelete": True},
            {"email": "b@x", "forceDelete": True},
            "replace",
            "DATA LOSS",
        ),
        (
            "pulumi-python:dynamic/headscale:User",
            {"email": "a@x", "forceDelete": False},
            {"email": "b@x", "forceDelete": False},
            "replace",
            "refused while the user has nodes",
        ),
        ("pulumi-python:dynamic/upgrade:VersionGate", {"version": "0.29.2"}, {"version": "0.29.3"}, "update", "0.29.3"),
    ],
)
def test_random_and_dynamic_resources_replace_as_their_providers_do(
    type_: str, before: dict, after: dict, action: str, text: str
) -> None:
    short = type_.rsplit(":", 1)[1]
    old = resource(type_, short, before, protect=short == "RandomBytes")
    new = resource(type_, short, after, protect=short == "RandomBytes")
    report, output = compare([old], [new])
    assert only_change(report).action == action
    assert text in output
    if short == "RandomBytes":
        assert diff.exit_code(report) == diff.EXIT_DATA_LOSS
        assert "`pulumi up` refuses until `pulumi state unprotect`" in output


def test_the_dynamic_provider_pickle_is_no_change() -> None:
    gate = resource("pulumi-python:dynamic/upgrade:VersionGate", "gate", {"version": "1", "__provider": "gASVa"})
    assert compare([gate], [changed(gate, lambda i: i.update({"__provider": "gASVb"}))])[1] == ""


def test_ignore_changes_hides_what_pulumi_will_not_apply() -> None:
    state = k8s(
        "Secret", "subnet-router-0", namespace="tailnet-gateway", data={}, ignore_changes=["data", "stringData"]
    )
    new = changed(state, lambda i: i.update({"stringData": {"x": {"secret": "1"}}}))
    assert compare([state], [new])[1] == ""


def test_replace_on_changes_forces_a_replacement() -> None:
    old = k8s("ConfigMap", "c")
    old["replaceOnChanges"] = ["metadata.labels"]
    old["inputs"]["metadata"]["labels"] = {"a": "1"}
    new = changed(old, lambda i: i["metadata"].update({"labels": {"a": "2"}}))
    report, text = compare([old], [new])
    assert only_change(report).action == "replace"
    assert "replaceOnChanges: metadata.labels.a changed" in text


def test_option_changes_are_updates() -> None:
    new = copy.deepcopy(CLAIM)
    new["protect"], new["retainOnDelete"] = True, False
    report, text = compare([CLAIM], [new])
    assert only_change(report).action == "update"
    assert "options.protect: false -> true" in text
    assert "options.retainOnDelete: true -> false" in text


# ------------------------------------------------------------------------------------------------ data loss


def test_a_retained_claim_replaced_under_its_own_name_is_data_loss_that_says_what_happens() -> None:
    new = changed(CLAIM, lambda i: i["spec"].update({"storageClassName": "local-path"}))
    report, text = compare([CLAIM], [new])
    assert diff.exit_code(report) == diff.EXIT_DATA_LOSS
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
    assert diff.exit_code(report) == diff.EXIT_DATA_LOSS
    unretained = copy.deepcopy(CLAIM)
    unretained["retainOnDelete"] = False
    renamed["retainOnDelete"] = False
    assert "the old one is deleted, and the data on its volume with it" in compare([unretained], [renamed])[1]


def test_deleted_claims_are_data_loss_retained_or_not() -> None:
    report, text = compare([CLAIM], [])
    assert "DATA LOSS (retained, recoverable by hand): PersistentVolumeClaim headscale/headscale-data deleted" in text
    assert "collides with it" in text
    assert diff.exit_code(report) == diff.EXIT_DATA_LOSS
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
    assert diff.exit_code(report) == diff.EXIT_DATA_LOSS
    assert holds in text


def test_a_changed_identity_secret_is_replaced_and_its_old_keys_would_be_overwritten() -> None:
    identity = k8s("Secret", "headscale-identity", data={"noise.key": {"secret": "1"}}, retain=True)
    new = changed(identity, lambda i: i["data"].update({"noise.key": {"secret": "2"}}))
    report, text = compare([identity], [new])
    assert diff.exit_code(report) == diff.EXIT_DATA_LOSS
    assert 'DATA LOSS: Secret headscale/headscale-identity replaced (data["noise.key"] changed)' in text
    assert "overwrites it: the old content is lost" in text


def test_a_namespace_is_stateful_when_it_holds_state() -> None:
    namespace = k8s("Namespace", "headscale", namespace=None, pulumi_name="lab-namespace", retain=True)
    renamed = k8s("Namespace", "hs", namespace=None, pulumi_name="lab-namespace", retain=True)
    _report, text = compare([namespace, CLAIM], [renamed, CLAIM])
    assert "DATA LOSS: Namespace headscale replaced" in text
    assert "everything inside it: PersistentVolumeClaim headscale-data" in text
    empty_report, _ = compare([namespace], [renamed])
    assert diff.exit_code(empty_report) == diff.EXIT_CHANGES, "a namespace that holds no state loses none"


def test_a_patch_applied_again_to_the_same_object_loses_nothing() -> None:
    served = k8s(
        "ConfigMap", "headscale-served", data={"served": "yes"}, type_="kubernetes:core/v1:ConfigMapPatch", retain=True
    )
    report, text = compare([served], [changed(served, lambda i: i["data"].update({"served": "again"}))])
    assert only_change(report).action == "replace"
    assert diff.exit_code(report) == diff.EXIT_CHANGES, text


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
    assert diff.exit_code(report) == diff.EXIT_DATA_LOSS, "the old resource's delete deletes the adopted claim"
    retained = {**renamed, "retainOnDelete": True}
    report, text = compare([CLAIM], [retained])
    assert diff.exit_code(report) == diff.EXIT_CHANGES
    assert "nothing is lost" in text


def test_an_alias_keeps_a_renamed_resource() -> None:
    renamed = copy.deepcopy(CLAIM)
    renamed["name"] = "lab-headscale-volume"
    renamed["urn"] = CLAIM["urn"].replace("lab-headscale-data", "lab-headscale-volume")
    renamed["aliases"] = [{"spec": {"name": "lab-headscale-data", "parentUrn": ""}}]
    report, text = compare([CLAIM], [renamed])
    assert only_change(report).action == "update"
    assert "through an alias" in text
    assert diff.exit_code(report) == diff.EXIT_CHANGES


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


# ------------------------------------------------------------------------------------------------ stacks, outputs


def test_outputs_are_compared_and_many_changes_summarized() -> None:
    before = dump(CLAIM, outputs={"stage": "sqlite", "table": [{"v": i} for i in range(10)], "key": {"secret": "1"}})
    after = dump(CLAIM, outputs={"stage": "migrating", "table": [{"v": -i} for i in range(10)], "key": {"secret": "2"}})
    report = diff.diff_dumps(before, after)
    text = diff.render(report)
    assert 'stage: "sqlite" -> "migrating"' in text
    assert "table: 9 values changed" in text
    assert "key: changed (secret)" in text
    assert diff.exit_code(report) == diff.EXIT_CHANGES


def test_a_stack_that_does_not_plan_in_the_head_is_an_error() -> None:
    report = diff.diff_dumps(dump(CLAIM), dump(error="ConfigError: headscale-ha:cluster: bad"))
    assert diff.exit_code(report) == diff.EXIT_ERROR
    assert "does not plan in the working tree: ConfigError" in diff.render(report)


def test_added_and_removed_stack_files_are_notes() -> None:
    base = dump(CLAIM)
    head = copy.deepcopy(base)
    head["stacks"]["site/other"] = {**head["stacks"].pop(f"site/{STACK}"), "stack": "other"}
    text = diff.render(diff.diff_dumps(base, head))
    assert "stack file removed" in text
    assert "new stack" in text


def test_unrequested_stacks_are_not_compared_and_unknown_names_are_errors() -> None:
    base = dump(CLAIM)
    head = dump()
    head["stacks"][f"site/{STACK}"]["requested"] = False
    base["stacks"][f"site/{STACK}"]["requested"] = False
    assert diff.render(diff.diff_dumps(base, head)) == ""
    report = diff.diff_dumps(dump(CLAIM), dump(CLAIM), stacks=["nope"])
    assert diff.exit_code(report) == diff.EXIT_ERROR


def test_the_immutable_table_only_names_kinds_and_effects_it_handles() -> None:
    assert {f.effect for f in kubernetes_rules.IMMUTABLE_FIELDS} == {kubernetes_rules.REPLACE, kubernetes_rules.REFUSE}
    kinds = {k for f in kubernetes_rules.IMMUTABLE_FIELDS for k in f.kinds}
    assert {"Deployment", "StatefulSet", "Job", "PersistentVolumeClaim", "PersistentVolume", "Service"} <= kinds


# ------------------------------------------------------------------------------------------------ end to end

HYDRA_BASE_EXTRA = """\
  headscale-ha:backup:
    nfs: {server: nfs.internal.example.com, path: /export/headscale-backup}
    litestream: {image: docker.io/litestream/litestream:0.5.17}
    local: {storage: persistent}
  headscale-ha:routerAuthKeys:
    - secure: v1:ROUTERKEYZERO
    - secure: v1:ROUTERKEYONE
"""


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, env={**os.environ, **(env or {})}
    )
    return result.stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository of this project's working tree (tracked and untracked, not ignored), with hydra on
    persistent storage and secure router keys, committed once."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the end-to-end diff needs it")
    if subprocess.run(["git", "rev-parse"], cwd=PROJECT_DIR, capture_output=True, check=False).returncode != 0:
        pytest.skip(f"{PROJECT_DIR} is not a git checkout: there is no base to compare with")
    root = tmp_path_factory.mktemp("diff") / "main"
    files = _git(PROJECT_DIR, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, files):
        source = PROJECT_DIR / name
        if source.is_file() and not source.is_symlink():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    hydra = root / "Pulumi.hydra.yaml"
    hydra.write_text(hydra.read_text() + HYDRA_BASE_EXTRA)
    _git(root, "init", "--quiet")
    _git(root, "add", "--all")
    identity = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    _git(root, "commit", "--quiet", "--no-gpg-sign", "-m", "base", env=identity)
    return root


@pytest.fixture(scope="module")
def base_dump(repo: Path) -> dict[str, Any]:
    """The base planned once, through a git worktree of HEAD (its own code), for every end-to-end case."""
    return diff.dump_ref(repo, "HEAD")


@pytest.fixture
def work(repo: Path) -> Iterator[Path]:
    """The repository's working tree for one case; put back to HEAD afterwards."""
    yield repo
    _git(repo, "checkout", "--quiet", "--", ".")


def _head_diff(repo: Path, base_dump: dict[str, Any]) -> tuple[diff.Report, str]:
    report = diff.diff_dumps(base_dump, diff.dump_tree(repo, label="the working tree"))
    return report, diff.render(report)


def _run_cli(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.diff", *args], cwd=repo, capture_output=True, text=True, check=False, timeout=300
    )


def test_cli_a_clean_working_tree_prints_nothing_exits_0_and_removes_its_worktree(work: Path) -> None:
    result = _run_cli(work)
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    assert len(_git(work, "worktree", "list").splitlines()) == 1, "the base's worktree is removed"


def test_cli_a_storage_class_change_replaces_the_claim_with_data_loss_exit_3(work: Path) -> None:
    hydra = work / "Pulumi.hydra.yaml"
    text = hydra.read_text()
    (storage_class,) = re.findall(r"^    storageClass: (\S+)$", text, flags=re.MULTILINE)
    hydra.write_text(text.replace(f"storageClass: {storage_class}", "storageClass: review-class"))
    result = _run_cli(work, "--stack", "hydra")
    assert result.returncode == diff.EXIT_DATA_LOSS, result.stdout + result.stderr
    out = result.stdout
    assert out.startswith("=== stack hydra:")
    assert (
        "DATA LOSS: PersistentVolumeClaim headscale/headscale-data replaced (spec.storageClassName changed "
        f'"{storage_class}" -> "review-class")' in out
    )
    assert "+- PersistentVolumeClaim headscale/headscale-data  (hydra-headscale-data)" in out
    assert "cosmos" not in out
    assert "tailnet" not in out
    assert out.strip().splitlines()[-1].endswith("exit 3")


def test_a_secure_value_change_reaches_its_secret_as_changed_without_the_value(
    work: Path, base_dump: dict[str, Any]
) -> None:
    hydra = work / "Pulumi.hydra.yaml"
    hydra.write_text(hydra.read_text().replace("v1:ROUTERKEYZERO", "v1:ROUTERKEYROTATED"))
    report, text = _head_diff(work, base_dump)
    block = text.split("Secret tailnet-gateway/subnet-router-authkey-0", 1)[1].split("\n  ~", 1)[0]
    assert "stringData.authkey: changed (secret)" in block
    assert "Secret tailnet-gateway/subnet-router-authkey-1" not in text, "only the key whose ciphertext changed"
    assert "headscale-ha:routerAuthKeys: secure value changed" in text
    assert "ROUTERKEY" not in text
    assert "offline placeholder" not in text
    digests = {f.new["secret"] for s in report.stacks for c in s.changes for f in c.fields if f.secret}
    assert digests
    assert not any(d in text for d in digests)


def test_a_shared_config_change_shows_in_every_stack(work: Path, base_dump: dict[str, Any]) -> None:
    project = work / "Pulumi.yaml"
    text = project.read_text()
    (image,) = re.findall(r"image: (ghcr.io/tale/headplane:\d+\.\d+\.\d+)$", text, flags=re.MULTILINE)
    major_minor, patch = image.rsplit(".", 1)
    bumped = f"{major_minor}.{int(patch) + 1}"
    project.write_text(text.replace(image, bumped))
    report, text = _head_diff(work, base_dump)
    assert [s.name for s in report.stacks] == ["cosmos", "hydra"]
    for stack in ("cosmos", "hydra"):
        block = text.split(f"=== stack {stack}:")[1].split("=== stack")[0]
        assert f'spec.template.spec.containers[name=headplane].image: "{image}" -> "{bumped}"' in block
    assert diff.exit_code(report) == diff.EXIT_CHANGES


def test_a_renamed_resource_in_the_program_is_reported_replaced_with_both_urns(
    work: Path, base_dump: dict[str, Any]
) -> None:
    site = work / "program" / "site.py"
    source = site.read_text()
    assert 'f"{name}-namespace", metadata=' in source
    site.write_text(source.replace('f"{name}-namespace", metadata=', 'f"{name}-control-namespace", metadata='))
    report, text = _head_diff(work, base_dump)
    old = "urn:pulumi:hydra::headscale-ha::headscale-ha:site:TailnetSite$kubernetes:core/v1:Namespace::hydra-namespace"
    assert (
        f"Pulumi resource identity changed, from {old} to {old.replace('hydra-namespace', 'hydra-control-namespace')}"
        in text
    )
    assert "+- Namespace headscale  (hydra-control-namespace)" in text
    assert diff.exit_code(report) == diff.EXIT_CHANGES, "retained: nothing is lost, the up fails or adopts it"


def test_a_base_without_the_planning_api_fails_with_a_clear_message(repo: Path, tmp_path: Path) -> None:
    index = {"GIT_INDEX_FILE": str(tmp_path / "index")}
    _git(repo, "read-tree", "HEAD", env=index)
    _git(repo, "rm", "--cached", "--quiet", "tools/plan.py", env=index)
    tree = _git(repo, "write-tree", env=index)
    identity = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    commit = _git(repo, "commit-tree", tree, "-p", "HEAD", "-m", "no plan", env=identity)
    with pytest.raises(diff.DiffError, match=r"its tools lack what the diff needs .*tools.plan"):
        diff.dump_ref(repo, commit, ["hydra"])
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    with pytest.raises(diff.DiffError, match="git rev-parse"):
        diff.dump_ref(repo, "no-such-ref")


def test_the_dump_holds_no_secret_in_clear(base_dump: dict[str, Any]) -> None:
    text = json.dumps(base_dump)
    assert "ROUTERKEY" not in text
    assert "offline placeholder for secret" not in text
    hydra = {r["name"]: r for r in base_dump["stacks"]["site/hydra"]["resources"]}
    identity = hydra["hydra-headscale-identity"]["inputs"]
    values = [*identity.get("data", {}).values(), *identity.get("stringData", {}).values()]
    assert identity["kind"] == "Secret"
    assert values
    assert all(diff.is_secret(v) for v in values)
    keys = [r for r in base_dump["stacks"]["identity/tailnet"]["resources"] if r["type"].endswith("RandomBytes")]
    assert keys
    assert all(r["protect"] for r in keys)


# ------------------------------------------------------------------------------------------------ provider moves

PROVIDER_TYPE = "pulumi:providers:kubernetes"


def _provider(**inputs: Any) -> dict[str, Any]:
    return resource(PROVIDER_TYPE, "lab-kubernetes", inputs)


def _on(provider: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "provider": f"{provider['urn']}::lab-kubernetes-id"}


CONFIG = k8s("ConfigMap", "headscale-config", data={"config.yaml": "a"})
KUBECONFIG_A = "apiVersion: v1\ncurrent-context: c\nclusters: [{name: x, cluster: {server: 'https://a:6443'}}]\n"
KUBECONFIG_A += "contexts: [{name: c, context: {cluster: x}}]\n"


def test_moving_from_the_default_provider_to_an_ambient_one_is_no_change_of_the_objects() -> None:
    provider = _provider(enableConfigMapMutable="true", clusterIdentifier="lab")
    report, text = compare([CONFIG], [provider, _on(provider, CONFIG)])
    (stack,) = report.stacks
    assert [(c.action, c.name) for c in stack.changes] == [("create", "lab-kubernetes")], text


@pytest.mark.parametrize(
    ("before", "after", "replaced"),
    [
        ({"kubeconfig": KUBECONFIG_A}, {"kubeconfig": KUBECONFIG_A.replace("https://a", "https://b")}, True),
        (
            {"kubeconfig": KUBECONFIG_A, "clusterIdentifier": "lab"},
            {"kubeconfig": KUBECONFIG_A.replace("https://a", "https://b"), "clusterIdentifier": "lab"},
            False,
        ),
    ],
    ids=["active-cluster-changed", "same-cluster-identifier"],
)
def test_a_provider_move_replaces_the_objects_only_when_diffconfig_says_so(before, after, replaced: bool) -> None:
    old_provider = resource(PROVIDER_TYPE, "lab-old", before)
    new_provider = resource(PROVIDER_TYPE, "lab-new", after)
    old = {**CONFIG, "provider": f"{old_provider['urn']}::id-1"}
    new = {**CONFIG, "provider": f"{new_provider['urn']}::id-2"}
    report, text = compare([old_provider, old], [new_provider, new])
    (stack,) = report.stacks
    moved = [c for c in stack.changes if c.name == CONFIG["name"]]
    if replaced:
        (change,) = moved
        assert change.action == "replace"
        assert "another cluster" in " ".join(change.reasons), text
    else:
        assert moved == [], text


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
    assert diff._field_lines(change, "  ") == [f"  bootstrapApiKey: {verb} (secret)"]


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


def _policy_change() -> tuple[diff.Report, str]:
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
    report = diff.diff_dumps(before, after)
    return report, diff.render(report)


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
    assert diff.exit_code(report) == diff.EXIT_CHANGES


def test_a_digest_is_shown_short_once_and_its_repeats_name_the_first() -> None:
    _, text = _policy_change()
    assert text.count(DIGESTS[0][:12]) == 1
    assert DIGESTS[0] not in text
    first = 'ConfigMap headscale/headscale-policy-rendered metadata.annotations["headscale-ha/policy-sha256"]'
    assert f'metadata.annotations["headscale-ha/policy-sha256"]: {DIGESTS[0][:12]}… -> {DIGESTS[1][:12]}…' in text
    assert f'spec.template.metadata.annotations["checksum/policy"]: the same digest change as {first}' in text
    assert f"policy.sha256: the same digest change as {first}" in text


def test_output_records_are_paired_by_their_key_not_their_position() -> None:
    rows = [{"scenario": name, "rto": "1 s"} for name in ("node", "cluster")]
    inserted = [rows[0], {"scenario": "nfs", "rto": "0 s"}, rows[1]]
    report = diff.diff_dumps(
        dump(outputs={"availability": {"failures": rows}, "limits": ["a", "b"]}),
        dump(outputs={"availability": {"failures": inserted}, "limits": ["a", "new", "b"]}),
    )
    (stack,) = report.stacks
    assert [(c.text, c.old, c.new) for c in stack.outputs] == [
        ("availability.failures[scenario=nfs]", ABSENT, {"scenario": "nfs", "rto": "0 s"}),
        ("limits[1]", ABSENT, "new"),
    ]
    assert "availability.failures[scenario=nfs]: absent -> " in diff.render(report)


def test_cli_a_policy_rule_added_in_git_is_summarised_with_the_restart_it_causes(
    work: Path, base_dump: dict[str, Any]
) -> None:
    policy = work / "policy" / "base.hujson"
    text = policy.read_text()
    anchor = "    // Ops may ping the servers.\n"
    assert anchor in text
    rule = '    {"action": "accept", "src": ["group:ops"], "proto": "tcp", "dst": ["tag:bastion:8443"]},\n'
    policy.write_text(text.replace(anchor, rule + anchor))
    report, out = _head_diff(work, base_dump)
    hydra = out.split("=== stack hydra:")[1].split("=== stack")[0]
    recovery = next(s for s in base_dump["stacks"].values() if s["stack"] == "hydra")["outputs"]["recovery"]
    (row,) = [r for r in recovery["applications"]["headscale"]["failures"] if r["failure"] == "podReplaced"]
    assert (
        f"restarts Headscale (Recreate stops the old pod before the new one starts): down for about "
        f"{row['rtoSeconds']:g} s" in hydra
    )
    assert "  acls[+] group:ops -> tag:bastion:8443 (tcp)\n" in hydra
    assert hydra.index("acls[+]") < hydra.index("the policy's JSON")
    assert hydra.count("the same digest change as") == 2
    cosmos = out.split("=== stack cosmos:")[1].split("=== stack")[0]
    assert "Headscale is at 0 replicas here" in cosmos, "the standby restarts nothing"
    assert "restarts Headscale" not in cosmos
    assert diff.exit_code(report) == diff.EXIT_CHANGES
