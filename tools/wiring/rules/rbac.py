"""RBAC: a (Cluster)RoleBinding's role resolves (or is one the API server bootstraps), and its ServiceAccount
subjects exist in the namespace they name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.checker import Checker
from tools.wiring.manifest import as_dict, as_list, nested, ref_name
from tools.wiring.model import Holder


def check_binding(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    role_ref = as_dict(obj.get("roleRef"))
    role_kind = role_ref.get("kind")
    if role_kind in ("Role", "ClusterRole"):
        checker.ref(
            holder,
            "roleRef",
            str(role_kind),
            role_ref.get("name"),
            consequence="the binding would grant nothing: its subjects get 403 Forbidden",
        )
    for k, subject in enumerate(as_list(obj.get("subjects"))):
        if nested(subject, "kind") != "ServiceAccount":
            continue
        namespace = ref_name(nested(subject, "namespace")) or holder.namespace
        if namespace is None:
            continue
        checker.ref(
            holder,
            f"subjects[{k}]",
            "ServiceAccount",
            nested(subject, "name"),
            namespace=namespace,
            consequence="the binding grants to an account no pod runs as",
        )


RULES = {"RoleBinding": check_binding, "ClusterRoleBinding": check_binding}
