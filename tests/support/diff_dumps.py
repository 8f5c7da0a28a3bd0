"""Small hand-written dumps for the tests of ``make diff`` (tools/diff/): resources as the dumper writes them, one
stack ("lab") of them, and the comparison of two such dumps with its rendered text (no git, no plan)."""

from __future__ import annotations

import copy
from typing import Any

from tools.diff.planning import DUMP_VERSION
from tools.diff.render import render
from tools.diff.report import Change, Report
from tools.diff.stacks import diff_dumps

STACK = "lab"
SITE = "urn:pulumi:lab::headscale-ha::headscale-ha:site:TailnetSite::lab"
GROUP_VERSION = {"v1": "core/v1", "apps/v1": "apps/v1", "batch/v1": "batch/v1"}


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
    return {"version": DUMP_VERSION, "notes": [], "stacks": {f"site/{STACK}": stack}}


def changed(base: dict[str, Any], edit: Any) -> dict[str, Any]:
    """A deep copy of resource ``base`` after ``edit(inputs)``."""
    new = copy.deepcopy(base)
    edit(new["inputs"])
    return new


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]], **head: Any) -> tuple[Report, str]:
    report = diff_dumps(dump(*before), dump(*after, **head))
    return report, render(report)


def only_change(report: Report) -> Change:
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
