"""The fake's records: users, keys, nodes, pending registrations, recorded exchanges and injected faults.

Plain dataclasses; tests may read and edit them directly through the fake's tables (``fake.users``, ``fake.nodes``
…), ideally under ``fake.lock``. The key formats (prefixes and lengths) are Headscale's 0.28+ ones.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

#: What protojson decodes an absent ``expiration`` to, and what Headscale then stores: born expired.
ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
#: The synthetic owner Headscale shows for tagged nodes (Tailscale's "tagged-devices" user id).
TAGGED_DEVICES_USER_ID = 2147455555
API_KEY_PREFIX = "hskey-api-"
AUTH_KEY_PREFIX = "hskey-auth-"
AUTH_REQUEST_PREFIX = "hskey-authreq-"
KEY_PREFIX_LENGTH = 12
KEY_SECRET_LENGTH = 64
REGISTRATION_ID_LENGTH = 24
_URLSAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
FAULT_KINDS: tuple[str, ...] = ("status", "reset", "latency", "malformed", "unauthorized")


@dataclass
class User:
    id: int
    name: str
    created_at: datetime
    display_name: str = ""
    email: str = ""
    provider_id: str = ""
    provider: str = ""
    profile_pic_url: str = ""


@dataclass
class PreAuthKey:
    id: int
    prefix: str
    secret_hash: str
    user_id: int | None
    reusable: bool
    ephemeral: bool
    acl_tags: list[str]
    expiration: datetime | None
    created_at: datetime
    used: bool = False

    @property
    def masked(self) -> str:
        """What listings show instead of the secret (CHANGELOG 0.28: ``hskey-auth-{prefix}-***``)."""
        return f"{AUTH_KEY_PREFIX}{self.prefix}-***"


@dataclass
class ApiKey:
    id: int
    prefix: str
    secret_hash: str
    expiration: datetime | None
    created_at: datetime
    last_seen: datetime | None = None

    @property
    def display_prefix(self) -> str:
        """The ``prefix`` field of a listing: 0.28+ keys are shown as ``hskey-api-<12 chars>-***``."""
        return f"{API_KEY_PREFIX}{self.prefix}-***"


@dataclass
class Node:
    id: int
    hostname: str
    given_name: str
    user_id: int | None
    tags: list[str]
    machine_key: str
    node_key: str
    disco_key: str
    ipv4: str
    ipv6: str
    created_at: datetime
    register_method: str
    available_routes: list[str] = field(default_factory=list)
    approved_routes: list[str] = field(default_factory=list)
    auth_key_id: int | None = None
    last_seen: datetime | None = None
    expiry: datetime | None = None
    online: bool = False

    @property
    def is_tagged(self) -> bool:
        return bool(self.tags)


@dataclass
class PendingRegistration:
    """A node waiting in the registration cache (``debug/node``) for ``node/register`` or ``auth/register``;
    ``routes`` are those the registered node will announce (0.29 caches none)."""

    hostname: str
    user_id: int
    routes: list[str]
    machine_key: str
    node_key: str


@dataclass
class RecordedRequest:
    """One exchange as the fake saw it; ``status`` is None when the connection was reset."""

    method: str
    path: str
    query: dict[str, str | list[str]]
    body: Any
    status: int | None
    response: Any
    fault: str | None = None


@dataclass
class Fault:
    """A fault ``FakeHeadscale.inject`` armed: which requests it matches, what it does, how many times more."""

    kind: str
    path: re.Pattern[str]
    method: str | None
    status: int
    remaining: int
    delay: float
    after_apply: bool


def random_urlsafe(length: int) -> str:
    return "".join(secrets.choice(_URLSAFE) for _ in range(length))


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
