"""Sample properties of the dynamic providers' resources and the helpers their tests share: the stack config as
the engine sends it, and the pre-auth keys still live on the fake. For tests/provider/test_resources*.py.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Protocol

from pulumi.dynamic import Config, ConfigureRequest

from tests.models.headscale import FakeHeadscale, PreAuthKey

KEY_PROPS = {
    "user": None,
    "reusable": True,
    "ephemeral": False,
    "aclTags": ["tag:router"],
    "lifetime": "168h",
    "rotateBefore": "24h",
    "recreateIfInvalid": "reusableOnly",
}
POLICY = '{"acls": [{"action": "accept", "src": ["alice@"], "dst": ["alice@:*"]}]}'
OTHER_POLICY = '{"acls": []}'
ROUTER_KEY = {**KEY_PROPS, "reusable": False, "aclTags": ["tag:subnet-router-hydra"], "recreateIfInvalid": "always"}


class Clock(Protocol):
    """The tests' clock (tests/provider/conftest.py's ``clock`` fixture): what time it is for the fake."""

    now: datetime


def live_keys(fake: FakeHeadscale, clock: Clock) -> list[PreAuthKey]:
    """The fake's pre-auth keys that have not expired by ``clock``."""
    with fake.lock:
        return [k for k in fake.preauth_keys.values() if not _expired(k, clock)]


def _expired(key: Any, clock: Clock) -> bool:
    expiration = getattr(key, "expiration", None)
    return expiration is None or expiration <= clock.now


def policy_props(mode: str = "apply", **extra: Any) -> dict[str, Any]:
    return {"policy": POLICY, "mode": mode, "overwriteExisting": False, "resetOnDestroy": False, **extra}


def stack_config(fake: FakeHeadscale, **values: Any) -> ConfigureRequest:
    """A ConfigureRequest as the engine sends it: the whole stack config, structured values as JSON text."""
    config = {"headscale-ha:bootstrapApiKey": fake.admin_key, "headscale-ha:headscaleApiUrl": fake.url}
    for key, value in values.items():
        config[f"headscale-ha:{key}"] = value if isinstance(value, str) else json.dumps(value)
    return ConfigureRequest(Config(config, "headscale-ha"))
