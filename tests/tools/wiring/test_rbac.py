"""RBAC: a binding's role and its ServiceAccount subjects resolve."""

from __future__ import annotations

from typing import Any

from tests.support.wiring_objects import NS, check, meta, only
from tools.wiring import External


def binding(
    role_kind: str = "Role", role: str = "reader", subject_ns: str | None = None, kind: str = "RoleBinding"
) -> dict:
    subject: dict[str, Any] = {"kind": "ServiceAccount", "name": "runner"}
    if subject_ns:
        subject["namespace"] = subject_ns
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta("b", None if kind == "ClusterRoleBinding" else NS),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [subject],
    }


ACCOUNT = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("runner")}


ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("reader"), "rules": []}


def test_role_binding_role_ref() -> None:
    assert "403 Forbidden" in only(check(ACCOUNT, binding())).message
    assert check(ACCOUNT, ROLE, binding()) == []


def test_role_binding_cluster_role_ref() -> None:
    assert len(check(ACCOUNT, binding("ClusterRole", "custom"))) == 1
    external = External(kind="ClusterRole", namespace=None, name="custom", created_by="the operator chart")
    assert check(ACCOUNT, binding("ClusterRole", "custom"), externals=[external]) == []
    assert check(ACCOUNT, binding("ClusterRole", "view")) == []


def test_binding_service_account_subjects() -> None:
    assert only(check(ROLE, binding())).path == "subjects[0]"
    assert check(ROLE, ACCOUNT, binding()) == []
    assert len(check(ROLE, ACCOUNT, binding(subject_ns="other"))) == 1


def test_cluster_role_binding() -> None:
    assert len(check(binding("ClusterRole", "view", subject_ns=NS, kind="ClusterRoleBinding"))) == 1
    assert check(ACCOUNT, binding("ClusterRole", "view", subject_ns=NS, kind="ClusterRoleBinding")) == []
