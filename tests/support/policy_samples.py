"""Sample policy documents shared by the policy tests (tests/policy/) and the runbook tests' policy edit."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def minimal(**extra: Any) -> dict[str, Any]:
    """A small valid policy; keyword arguments replace or add top-level keys."""
    policy: dict[str, Any] = {
        "groups": {"group:admins": ["alice@"], "group:ops": ["bob@", "carol@example.com"]},
        "tagOwners": {"tag:server": ["group:admins"], "tag:router": ["group:admins", "tag:server"]},
        "hosts": {"web": "10.1.0.0/24", "db": "10.2.0.5"},
        "acls": [{"action": "accept", "src": ["group:ops"], "proto": "tcp", "dst": ["tag:server:22", "web:443"]}],
        "ssh": [{"action": "accept", "src": ["group:ops"], "dst": ["tag:server"], "users": ["autogroup:nonroot"]}],
        "autoApprovers": {"routes": {"10.20.0.0/16": ["tag:router"]}, "exitNode": ["group:admins"]},
    }
    policy.update(extra)
    return policy


def edited_policy(directory: Path) -> Path:
    """docs/lifecycle.md's policy edit: policy/base.hujson with carol out of group:ops, written to ``directory``."""
    text = (Path(__file__).resolve().parents[2] / "policy" / "base.hujson").read_text()
    edited = text.replace('"group:ops": ["bob@", "carol@"]', '"group:ops": ["bob@"]')
    if edited == text:
        raise AssertionError("policy/base.hujson no longer has the group:ops the policy edit changes")
    path = directory / "policy.hujson"
    path.write_text(edited)
    return path
