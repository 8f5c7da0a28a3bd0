"""The fake's registry: its tables, its clock, the operations that change them and their JSON views.

:class:`Store` is what every family of API operations (users, keys, nodes, policy) works on; :class:`FakeHeadscale`
adds the server around it. The setup helpers (``add_user``, ``register_node`` …) change the registry directly,
without HTTP, as a test's fixture does.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.models.headscale.state import (
    API_KEY_PREFIX,
    AUTH_KEY_PREFIX,
    KEY_PREFIX_LENGTH,
    KEY_SECRET_LENGTH,
    TAGGED_DEVICES_USER_ID,
    ZERO_TIME,
    ApiKey,
    Node,
    PendingRegistration,
    PreAuthKey,
    User,
    hash_secret,
    random_urlsafe,
)
from tests.models.headscale.wire import (
    GrpcError,
    optional_timestamp,
    served_routes,
    sorted_routes,
    validate_tag,
)


def _given_name(hostname: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", hostname.lower()).strip("-")[:63].strip("-")
    return label or "node"


class Store:
    """The registry of one fake Headscale and its clock; callers of the ``_`` operations hold ``self.lock``."""

    #: The release the API plays, set by the server (``0.29.2``) and its minor (``0.29``), which some rules depend on.
    version: str
    minor: str

    def __init__(self, *, policy_mode: str, now: Callable[[], datetime] | None) -> None:
        self.policy_mode = policy_mode
        self._clock = now
        self._frozen: datetime | None = None
        self.lock = threading.RLock()
        self.users: dict[int, User] = {}
        self.nodes: dict[int, Node] = {}
        self.preauth_keys: dict[int, PreAuthKey] = {}
        self.api_keys: dict[int, ApiKey] = {}
        self.pending_registrations: dict[str, PendingRegistration] = {}
        #: Database mode: the stored policy (None = nothing stored yet). File mode: the file's text (None = unreadable).
        self.policy_text: str | None = None
        self.policy_updated_at: datetime | None = None
        self._ids: dict[str, int] = {}

    # -- clock ------------------------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The fake's current time: a value set here, else the clock callable, else real UTC now."""
        if self._frozen is not None:
            return self._frozen
        if self._clock is not None:
            return self._clock().astimezone(UTC)
        return datetime.now(UTC)

    @now.setter
    def now(self, value: datetime) -> None:
        if value.tzinfo is None:
            raise ValueError("the fake's clock needs an aware datetime")
        self._frozen = value.astimezone(UTC)

    def advance(self, delta: timedelta) -> datetime:
        """Freeze the clock at ``now + delta`` (e.g. to let keys expire)."""
        self.now = self.now + delta
        return self.now

    # -- setup helpers ----------------------------------------------------------------------------------------

    def _next_id(self, table: str) -> int:
        with self.lock:
            self._ids[table] = self._ids.get(table, 0) + 1
            return self._ids[table]

    def add_user(self, name: str, *, display_name: str = "", email: str = "") -> str:
        """Create a user directly (no HTTP); returns its id as the API would show it (ValueError if taken)."""
        with self.lock:
            try:
                return str(self._create_user(name, display_name, email, "").id)
            except GrpcError as exc:
                raise ValueError(exc.message) from None

    def add_api_key(self, *, expiration: datetime | None) -> str:
        """Create an API key directly; returns the full key (the only time it exists in clear)."""
        with self.lock:
            prefix, secret = random_urlsafe(KEY_PREFIX_LENGTH), random_urlsafe(KEY_SECRET_LENGTH)
            key_id = self._next_id("api_keys")
            self.api_keys[key_id] = ApiKey(key_id, prefix, hash_secret(secret), expiration, self.now)
            return f"{API_KEY_PREFIX}{prefix}-{secret}"

    def add_preauth_key(
        self,
        *,
        user: str | None = None,
        reusable: bool = False,
        ephemeral: bool = False,
        tags: Iterable[str] = (),
        expiration: datetime | None = None,
    ) -> str:
        """Create a pre-auth key directly (``expiration`` defaults to now + 1 h like the CLI); returns the key."""
        with self.lock:
            owner = self._user_by_name(user).id if user is not None else None
            expires = expiration or self.now + timedelta(hours=1)
            return self._create_preauth_key(owner, reusable, ephemeral, expires, tags)

    def register_node(
        self,
        name: str,
        *,
        user: str | None = None,
        tags: Iterable[str] = (),
        available_routes: Iterable[str] = (),
        preauth_key: str | None = None,
    ) -> str:
        """Do to the server what a Tailscale client registering as ``name`` would; returns the node id.

        With ``preauth_key`` the key decides ownership (its user, or its tags for a tagged key), single-use keys
        become ``used`` and expired/used/unknown keys are refused (ValueError). Without a key the node is
        registered for ``user`` (like ``headscale nodes register``) or, with ``tags``, as a tagged node.
        """
        tags = list(tags)
        with self.lock:
            key: PreAuthKey | None = None
            owner: int | None = None
            if preauth_key is not None:
                key = self._preauth_key_for_secret(preauth_key)
                if key.expiration is not None and key.expiration < self.now:
                    raise ValueError("authkey expired")
                if key.used and not key.reusable:
                    raise ValueError("authkey already used")
                if tags:
                    raise ValueError("with a pre-auth key the node's tags come from the key (its aclTags)")
                owner, tags = key.user_id, list(key.acl_tags)
                if user is not None and (owner is None or self.users[owner].name != user):
                    raise ValueError(f"the pre-auth key does not belong to user {user!r}")
            elif user is not None:
                owner = self._user_by_name(user).id
            elif not tags:
                raise ValueError("a node needs a user, tags or a pre-auth key")
            for tag in tags:
                problem = validate_tag(tag)
                if problem:
                    raise ValueError(problem)
            routes = sorted_routes(available_routes)
            node = self._create_node(
                name,
                owner=None if tags else owner,
                tags=sorted(set(tags)),
                routes=routes,
                method="REGISTER_METHOD_AUTH_KEY" if key else "REGISTER_METHOD_CLI",
            )
            if key is not None:
                node.auth_key_id = key.id
                if not key.reusable:
                    key.used = True
            return str(node.id)

    # -- state operations (callers hold self.lock) ----------------------------------------------------------

    def _user_by_name(self, name: str) -> User:
        for user in self.users.values():
            if user.name == name:
                return user
        raise ValueError("user not found")

    def _create_user(self, name: str, display_name: str, email: str, picture: str) -> User:
        if any(user.name == name and not user.provider_id for user in self.users.values()):
            # The handler wraps this as Internal: 0.28 "failed to create user: %s", 0.29 "creating user: %s".
            handler = "creating user" if self.minor >= "0.29" else "failed to create user"
            raise GrpcError(
                13, f"{handler}: creating user: constraint failed: UNIQUE constraint failed: users.name (2067)"
            )
        user_id = self._next_id("users")
        user = User(user_id, name, self.now, display_name, email, profile_pic_url=picture)
        self.users[user_id] = user
        return user

    def _create_preauth_key(
        self, owner: int | None, reusable: bool, ephemeral: bool, expiration: datetime | None, tags: Iterable[str]
    ) -> str:
        prefix, secret = random_urlsafe(KEY_PREFIX_LENGTH), random_urlsafe(KEY_SECRET_LENGTH)
        key_id = self._next_id("preauth_keys")
        self.preauth_keys[key_id] = PreAuthKey(
            key_id, prefix, hash_secret(secret), owner, reusable, ephemeral, list(tags), expiration, self.now
        )
        return f"{AUTH_KEY_PREFIX}{prefix}-{secret}"

    def _preauth_key_for_secret(self, full_key: str) -> PreAuthKey:
        rest = full_key.removeprefix(AUTH_KEY_PREFIX)
        if rest != full_key and len(rest) == KEY_PREFIX_LENGTH + 1 + KEY_SECRET_LENGTH:
            prefix, secret = rest[:KEY_PREFIX_LENGTH], rest[KEY_PREFIX_LENGTH + 1 :]
            for key in self.preauth_keys.values():
                if key.prefix == prefix and secrets.compare_digest(key.secret_hash, hash_secret(secret)):
                    return key
        raise ValueError("invalid authkey")

    def _free_address_index(self) -> int:
        used = {int(ipaddress.ip_address(node.ipv4)) for node in self.nodes.values()}
        base = int(ipaddress.ip_address("100.64.0.0"))
        index = 1
        while base + index in used:
            index += 1
        return index

    def _unique_given_name(self, hostname: str) -> str:
        """A DNS-label form of the hostname; a clash gets ``-1``, ``-2``… (no source for Headscale's suffix)."""
        base = _given_name(hostname)
        taken = {node.given_name for node in self.nodes.values()}
        candidate, counter = base, 0
        while candidate in taken:
            counter += 1
            candidate = f"{base[: 63 - len(str(counter)) - 1]}-{counter}"
        return candidate

    def _create_node(
        self,
        hostname: str,
        *,
        owner: int | None,
        tags: list[str],
        routes: list[str],
        method: str,
        machine_key: str | None = None,
        node_key: str | None = None,
    ) -> Node:
        index = self._free_address_index()
        node_id = self._next_id("nodes")
        node = Node(
            id=node_id,
            hostname=hostname,
            given_name=self._unique_given_name(hostname),
            user_id=owner,
            tags=tags,
            machine_key=machine_key or f"mkey:{secrets.token_hex(32)}",
            node_key=node_key or f"nodekey:{secrets.token_hex(32)}",
            disco_key=f"discokey:{secrets.token_hex(32)}",
            ipv4=str(ipaddress.ip_address("100.64.0.0") + index),
            ipv6=str(ipaddress.ip_address("fd7a:115c:a1e0::") + index),
            created_at=self.now,
            register_method=method,
            available_routes=routes,
            last_seen=self.now,
        )
        self.nodes[node_id] = node
        return node

    def _drop_preauth_key(self, key_id: int) -> None:
        for node in self.nodes.values():
            if node.auth_key_id == key_id:
                node.auth_key_id = None
        self.preauth_keys.pop(key_id, None)

    def _node(self, node_id: int, error: GrpcError) -> Node:
        node = self.nodes.get(node_id)
        if node is None:
            raise error
        return node

    # -- JSON views -------------------------------------------------------------------------------------------

    @staticmethod
    def _user_json(user: User) -> dict[str, Any]:
        return {
            "id": str(user.id),
            "name": user.name,
            "createdAt": optional_timestamp(user.created_at),
            "displayName": user.display_name,
            "email": user.email,
            "providerId": user.provider_id,
            "provider": user.provider,
            "profilePicUrl": user.profile_pic_url,
        }

    def _tagged_devices_json(self) -> dict[str, Any]:
        return self._user_json(User(TAGGED_DEVICES_USER_ID, "tagged-devices", ZERO_TIME, "Tagged Devices"))

    def _preauth_key_json(self, key: PreAuthKey, *, full_key: str | None = None) -> dict[str, Any]:
        owner = self.users.get(key.user_id) if key.user_id is not None else None
        return {
            "user": self._user_json(owner) if owner else None,
            "id": str(key.id),
            "key": full_key or key.masked,
            "reusable": key.reusable,
            "ephemeral": key.ephemeral,
            "used": key.used,
            "expiration": optional_timestamp(key.expiration),
            "createdAt": optional_timestamp(key.created_at),
            "aclTags": list(key.acl_tags),
        }

    @staticmethod
    def _api_key_json(key: ApiKey) -> dict[str, Any]:
        return {
            "id": str(key.id),
            "prefix": key.display_prefix,
            "expiration": optional_timestamp(key.expiration),
            "createdAt": optional_timestamp(key.created_at),
            "lastSeen": optional_timestamp(key.last_seen),
        }

    def _node_json(self, node: Node) -> dict[str, Any]:
        if node.is_tagged:
            owner = self._tagged_devices_json()
        else:
            user = self.users.get(node.user_id) if node.user_id is not None else None
            owner = self._user_json(user) if user else None
        key = self.preauth_keys.get(node.auth_key_id) if node.auth_key_id is not None else None
        return {
            "id": str(node.id),
            "machineKey": node.machine_key,
            "nodeKey": node.node_key,
            "discoKey": node.disco_key,
            "ipAddresses": [node.ipv4, node.ipv6],
            "name": node.hostname,
            "user": owner,
            "lastSeen": optional_timestamp(node.last_seen),
            "expiry": optional_timestamp(node.expiry),
            "preAuthKey": self._preauth_key_json(key) if key else None,
            "createdAt": optional_timestamp(node.created_at),
            "registerMethod": node.register_method,
            "givenName": node.given_name,
            "online": node.online,
            "approvedRoutes": list(node.approved_routes),
            "availableRoutes": list(node.available_routes),
            "subnetRoutes": served_routes(node.available_routes, node.approved_routes),
            "tags": list(node.tags),
        }
