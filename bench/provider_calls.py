"""HTTP requests of a no-op refresh + preview over 50 managed resources, against the fake Headscale.

Goal: zero writes, and at most one read per resource (the policy: one read). A refresh calls `read` and a
preview calls `diff` for every resource; both run in one provider process, which fetches each listing once per run
and shares it between resources until a write (LIST_CACHE_SECONDS is unbounded). Printed for both versions, with
and without that sharing.

Usage: ``python -m bench.provider_calls`` (``make bench``).
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from headscale_ha.provider.base import (
    LIST_CACHE_SECONDS,
)
from headscale_ha.provider.client import HeadscaleClient
from headscale_ha.provider.resources import (
    ApiKeyProvider,
    NodeSettingsProvider,
    PolicyProvider,
    PreAuthKeyProvider,
    UserProvider,
)
from tests.models.headscale import FakeHeadscale

POLICY = '{"acls": [{"action": "accept", "src": ["user0@"], "dst": ["user0@:*"]}]}'
SHAPE = {"users": 5, "preauth_keys": 15, "api_keys": 5, "nodes": 24, "policy": 1}


def _managed(fake: FakeHeadscale, providers: dict[str, Any]) -> list[tuple[Any, str, dict[str, Any]]]:
    """Create the 50 resources; return (provider, id, outputs) for each."""
    managed: list[tuple[Any, str, dict[str, Any]]] = []
    for index in range(SHAPE["users"]):
        props = {"name": f"user{index}", "displayName": "", "email": "", "forceDelete": False}
        created = providers["user"].create(props)
        managed.append((providers["user"], created.id, created.outs))
    for index in range(SHAPE["preauth_keys"]):
        props = {
            "user": None, "reusable": True, "ephemeral": False, "aclTags": [f"tag:k{index}"], "lifetime": "168h",
            "rotateBefore": "24h", "recreateIfInvalid": "reusableOnly",
        }  # fmt: skip
        created = providers["preauth"].create(props)
        managed.append((providers["preauth"], created.id, created.outs))
    for _ in range(SHAPE["api_keys"]):
        created = providers["apikey"].create({"lifetime": "90d", "rotateBefore": "14d"})
        managed.append((providers["apikey"], created.id, created.outs))
    for index in range(SHAPE["nodes"]):
        fake.register_node(
            f"node{index}", user=f"user{index % SHAPE['users']}", available_routes=[f"10.{index}.0.0/24"]
        )
        props = {"nodeName": f"node{index}", "user": f"user{index % SHAPE['users']}", "tags": None,
                 "approvedRoutes": [f"10.{index}.0.0/24"], "givenName": None, "deleteOnDestroy": False}  # fmt: skip
        created = providers["node"].create(props)
        managed.append((providers["node"], created.id, created.outs))
    created = providers["policy"].create({"policy": POLICY, "mode": "apply", "overwriteExisting": False,
                                          "resetOnDestroy": False})  # fmt: skip
    managed.append((providers["policy"], created.id, created.outs))
    return managed


def measure(version: str, cache_seconds: float) -> tuple[int, Counter[str], bool]:
    with FakeHeadscale(version=version) as fake:
        client = HeadscaleClient(fake.url, fake.admin_key, version=version, cache_seconds=cache_seconds)
        clock = lambda: datetime.now(UTC)  # noqa: E731
        providers = {
            "user": UserProvider().use(client, clock=clock),
            "preauth": PreAuthKeyProvider().use(client, clock=clock),
            "apikey": ApiKeyProvider().use(client, clock=clock),
            "node": NodeSettingsProvider().use(client, clock=clock),
            "policy": PolicyProvider().use(client, clock=clock),
        }
        managed = _managed(fake, providers)
        fake.reset_requests()
        client._cache.clear()
        no_changes = True
        for provider, id_, outs in managed:
            provider.read(id_, outs)
            inputs = {k: v for k, v in outs.items() if k not in {"key", "keyId", "prefix", "expiration", "userId"}}
            no_changes &= not provider.diff(id_, outs, {**outs, **inputs}).changes
        methods = Counter(r.method for r in fake.requests)
        return len(managed), methods, no_changes


def main() -> int:
    sharing = "per run" if math.isinf(LIST_CACHE_SECONDS) else f"{LIST_CACHE_SECONDS}s"
    print(f"no-op refresh (read) + preview (diff) over managed resources; list sharing {sharing}")
    print(f"{'version':<9}{'sharing':>9}{'resources':>11}{'reads':>7}{'writes':>8}{'reads/resource':>16}{'no-op':>7}")
    for version in ("0.28.0", "0.29.2"):
        for cache in (LIST_CACHE_SECONDS, 0.0):
            count, methods, no_changes = measure(version, cache)
            reads = methods.get("GET", 0)
            writes = sum(n for m, n in methods.items() if m != "GET")
            label = "on" if cache else "off"
            print(f"{version:<9}{label:>9}{count:>11}{reads:>7}{writes:>8}{reads / count:>16.2f}{no_changes!s:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
