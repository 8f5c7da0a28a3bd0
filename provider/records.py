"""What the Headscale API answers with, as frozen records, and the time and key-prefix formats it speaks.

Kept apart from the client (client.py), which sends the calls and reads these from the answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


def parse_time(value: str | None) -> datetime | None:
    """RFC 3339 → aware datetime; null and the zero time (`0001-01-01T00:00:00Z`) → None."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return None if parsed.year <= 1 else parsed


def format_time(value: datetime) -> str:
    """Whole seconds, as outputs carry them."""
    if value.tzinfo is None:
        raise ValueError("timestamps sent to Headscale must be timezone-aware")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def wire_time(value: datetime) -> str:
    """What a request carries: whole seconds, plus the microseconds when there are any (protojson accepts up to
    nanoseconds; SQLite and PostgreSQL keep microseconds, so a key's expiration is listed back exactly)."""
    text = format_time(value)
    micro = value.astimezone(UTC).microsecond
    return f"{text[:-1]}.{micro:06d}Z" if micro else text


@dataclass(frozen=True, kw_only=True)
class User:
    id: str
    name: str
    display_name: str = ""
    email: str = ""
    provider_id: str = ""  # set for users an OIDC login created; empty for users created through the API or CLI

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> User:
        return cls(
            id=str(data.get("id", "")),
            name=data.get("name", ""),
            display_name=data.get("displayName", ""),
            email=data.get("email", ""),
            provider_id=data.get("providerId", "") or "",
        )


@dataclass(frozen=True, kw_only=True)
class Node:
    id: str
    name: str
    given_name: str
    user: User | None
    tags: tuple[str, ...]
    approved_routes: tuple[str, ...]
    available_routes: tuple[str, ...]
    online: bool = False

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Node:
        user = data.get("user")
        tags = data.get("tags")
        if tags is None:  # releases before 0.28 split tags; kept readable for old servers
            tags = [*(data.get("forcedTags") or []), *(data.get("validTags") or [])]
        return cls(
            id=str(data.get("id", "")),
            name=data.get("name", ""),
            given_name=data.get("givenName", ""),
            user=User.from_api(user) if user and user.get("id") not in (None, "", "0") else None,
            tags=tuple(sorted(tags)),
            approved_routes=tuple(sorted(data.get("approvedRoutes") or [])),
            available_routes=tuple(sorted(data.get("availableRoutes") or [])),
            online=bool(data.get("online", False)),
        )


@dataclass(frozen=True, kw_only=True)
class PreAuthKeyInfo:
    id: str
    key: str  # the full key only in a create response; listings carry a masked form
    user: User | None
    reusable: bool
    ephemeral: bool
    used: bool
    expiration: datetime | None
    created_at: datetime | None
    acl_tags: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> PreAuthKeyInfo:
        user = data.get("user")
        return cls(
            id=str(data.get("id", "")),
            key=data.get("key", ""),
            user=User.from_api(user) if isinstance(user, Mapping) and user.get("id") not in (None, "", "0") else None,
            reusable=bool(data.get("reusable", False)),
            ephemeral=bool(data.get("ephemeral", False)),
            used=bool(data.get("used", False)),
            expiration=parse_time(data.get("expiration")),
            created_at=parse_time(data.get("createdAt")),
            acl_tags=tuple(sorted(data.get("aclTags") or [])),
        )

    @property
    def prefix(self) -> str:
        """The public part of an `hskey-auth-<prefix>-<secret>` key (also readable from a masked listing)."""
        return _key_prefix(self.key, "hskey-auth-")

    def expired(self, now: datetime) -> bool:
        return self.expiration is None or self.expiration <= now


@dataclass(frozen=True, kw_only=True)
class ApiKeyInfo:
    id: str
    prefix: str
    expiration: datetime | None
    created_at: datetime | None
    last_seen: datetime | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> ApiKeyInfo:
        return cls(
            id=str(data.get("id", "")),
            prefix=_bare_prefix(data.get("prefix", "")),
            expiration=parse_time(data.get("expiration")),
            created_at=parse_time(data.get("createdAt")),
            last_seen=parse_time(data.get("lastSeen")),
        )

    def expired(self, now: datetime) -> bool:
        return self.expiration is None or self.expiration <= now


#: 0.28+ key prefixes are 12 URL-safe characters, which may themselves contain '-' or '_'.
KEY_PREFIX_LENGTH = 12


def _key_prefix(key: str, marker: str) -> str:
    return key[len(marker) : len(marker) + KEY_PREFIX_LENGTH] if key.startswith(marker) else ""


def _bare_prefix(listed: str) -> str:
    """0.28+ lists `hskey-api-<prefix>-***`; older servers the bare prefix. Expire/delete take the bare one."""
    return _key_prefix(listed, "hskey-api-") or listed


def api_key_prefix(key: str) -> str:
    """The prefix Headscale lists for a full API key: `hskey-api-<prefix>-<secret>` (0.28+) or `<prefix>.<secret>`."""
    return _key_prefix(key, "hskey-api-") or key.split(".", 1)[0]


@dataclass(frozen=True, kw_only=True)
class LivePolicy:
    text: str
    updated_at: datetime | None
