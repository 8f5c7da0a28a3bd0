"""Sample policy documents shared by the policy tests (tests/policy/)."""

from __future__ import annotations

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
