"""The ``/api/v1/node`` operations and the registration cache (``debug/node``, ``node/register``, ``auth/*``)."""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from tests.models.headscale.gateway import Call
from tests.models.headscale.policy import defined_tags
from tests.models.headscale.state import (
    AUTH_REQUEST_PREFIX,
    REGISTRATION_ID_LENGTH,
    ZERO_TIME,
    Node,
    PendingRegistration,
)
from tests.models.headscale.store import Store
from tests.models.headscale.wire import (
    GrpcError,
    announced_routes,
    invalid_argument,
    parse_prefix,
    sorted_routes,
    unknown_error,
    validate_tag,
)

_DNS_LABEL_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_EXIT_ROUTES = ("0.0.0.0/0", "::/0")
#: A zero ``key.DiscoPublic`` as Go prints it: the debug preview is a node that never connected.
_ZERO_DISCO_KEY = "discokey:" + "0" * 64


class NodeOperations(Store):
    """Nodes: read, delete, rename, tag (one way: a tagged node has no user), approve routes, expire."""

    def _op_list_nodes(self, call: Call) -> dict[str, Any]:
        nodes = sorted(self.nodes.values(), key=lambda n: n.id)
        if call.query["user"]:
            try:
                owner = self._user_by_name(call.query["user"])
            except ValueError:
                raise unknown_error("user not found") from None
            nodes = [n for n in nodes if n.user_id == owner.id and not n.is_tagged]
        return {"nodes": [self._node_json(n) for n in nodes]}

    def _op_get_node(self, call: Call) -> dict[str, Any]:
        return {"node": self._node_json(self._node(call.path["nodeId"], GrpcError(5, "node not found")))}

    def _op_delete_node(self, call: Call) -> dict[str, Any]:
        node = self._node(call.path["nodeId"], GrpcError(5, "node not found"))
        del self.nodes[node.id]
        return {}

    def _op_rename_node(self, call: Call) -> dict[str, Any]:
        node_id, new_name = call.path["nodeId"], call.path["newName"]
        if not _DNS_LABEL_RE.fullmatch(new_name):
            message = f"invalid given name {json.dumps(new_name)}: not a lowercase DNS label of 1-63 characters"
            raise unknown_error(message)
        node = self._node(node_id, unknown_error(f"node no longer exists in NodeStore: {node_id}"))
        if any(other.given_name == new_name and other.id != node.id for other in self.nodes.values()):
            raise unknown_error(f"node name is not unique: {new_name}")
        node.given_name = new_name
        return {"node": self._node_json(node)}

    def _op_set_tags(self, call: Call) -> dict[str, Any]:
        tags = call.body["tags"]
        if not tags:
            raise invalid_argument("cannot remove all tags from a node - tagged nodes must have at least one tag")
        for tag in tags:
            problem = validate_tag(tag)
            if problem:
                raise unknown_error(problem)
        node = self._node(call.path["nodeId"], GrpcError(5, "node not found"))
        defined = defined_tags(self.policy_text, minor=self.minor)
        invalid = [tag for tag in tags if tag not in defined]
        if invalid:
            raise invalid_argument(f"requested tags [{' '.join(invalid)}] are invalid or not permitted")
        node.tags = sorted(set(tags))
        node.user_id = None  # tags and user ownership are mutually exclusive; the conversion is one-way
        return {"node": self._node_json(node)}

    def _op_set_approved_routes(self, call: Call) -> dict[str, Any]:
        routes: list[str] = []
        for route in call.body["routes"]:
            try:
                prefix = parse_prefix(route)
            except ValueError as exc:
                raise unknown_error(f"parsing route: {exc}") from None
            routes += _EXIT_ROUTES if prefix.text in _EXIT_ROUTES else (prefix.text,)
        node_id = call.path["nodeId"]
        node = self._node(node_id, invalid_argument(f"node no longer exists in NodeStore: {node_id}"))
        node.approved_routes = sorted_routes(routes)
        return {"node": self._node_json(node)}

    def _op_expire_node(self, call: Call) -> dict[str, Any]:
        disable = bool(call.query.get("disableExpiry"))
        if disable and "expiry" in call.present:
            raise invalid_argument("cannot set both disable_expiry and expiry")
        node_id = call.path["nodeId"]
        node = self._node(node_id, unknown_error(f"node no longer exists in NodeStore: {node_id}"))
        node.expiry = None if disable else (call.query["expiry"] or self.now)
        return {"node": self._node_json(node)}

    def _op_backfill_node_ips(self, call: Call) -> dict[str, Any]:
        if not call.query["confirmed"]:
            raise unknown_error("not confirmed, aborting")
        return {"changes": []}


class RegistrationOperations(Store):
    """Nodes waiting in the registration cache, registered for a user (0.28 ``node/register``, 0.29 ``auth/*``)."""

    def _registration_id(self, text: str) -> str:
        if self.minor >= "0.29":
            if not text.startswith(AUTH_REQUEST_PREFIX):
                raise ValueError(f'auth ID has invalid prefix: expected prefix "{AUTH_REQUEST_PREFIX}"')
            expected = len(AUTH_REQUEST_PREFIX) + REGISTRATION_ID_LENGTH
            if len(text) != expected:
                raise ValueError(f"auth ID has invalid length: expected {expected}, got {len(text)}")
        elif len(text) != REGISTRATION_ID_LENGTH:
            raise ValueError(f"registration ID has invalid length: expected {REGISTRATION_ID_LENGTH}, got {len(text)}")
        return text

    def _op_debug_create_node(self, call: Call) -> dict[str, Any]:
        body = call.body
        try:
            owner = self._user_by_name(body["user"])
            routes = announced_routes(body["routes"])
            registration_id = self._registration_id(body["key"])
        except ValueError as exc:
            raise unknown_error(str(exc)) from None
        # 0.28 caches the whole node (its Hostinfo announces the routes); 0.29 caches registration data, which has
        # no routes: the registered node announces none until its client connects.
        carried = routes if self.minor < "0.29" else []
        pending = PendingRegistration(
            body["name"], owner.id, carried, f"mkey:{secrets.token_hex(32)}", f"nodekey:{secrets.token_hex(32)}"
        )
        self.pending_registrations[registration_id] = pending
        preview = Node(  # the echo Headscale builds: no id, given name, disco key or addresses; routes as sent
            id=0,
            hostname=body["name"],
            given_name="",
            user_id=owner.id,
            tags=[],
            machine_key=pending.machine_key,
            node_key=pending.node_key,
            disco_key=_ZERO_DISCO_KEY,
            ipv4="",
            ipv6="",
            created_at=ZERO_TIME,
            register_method="REGISTER_METHOD_UNSPECIFIED",
            available_routes=routes,
            last_seen=ZERO_TIME,
            expiry=ZERO_TIME,
        )
        shown = self._node_json(preview)
        shown["ipAddresses"] = []
        return {"node": shown}

    def _register_pending(self, username: str, registration: str) -> dict[str, Any]:
        try:
            registration_id = self._registration_id(registration)
        except ValueError as exc:
            raise unknown_error(str(exc)) from None
        try:
            owner = self._user_by_name(username)
        except ValueError:
            raise unknown_error("looking up user: user not found") from None
        pending = self.pending_registrations.pop(registration_id, None)
        if pending is None:
            raise unknown_error("node not found in registration cache")
        node = self._create_node(
            pending.hostname,
            owner=owner.id,
            tags=[],
            routes=pending.routes,
            method="REGISTER_METHOD_CLI",
            machine_key=pending.machine_key,
            node_key=pending.node_key,
        )
        node.expiry = ZERO_TIME  # the cached registration's expiry (&time.Time{}), not "no expiry"
        return {"node": self._node_json(node)}

    def _op_register_node_api(self, call: Call) -> dict[str, Any]:
        return self._register_pending(call.query["user"], call.query["key"])

    def _op_auth_register(self, call: Call) -> dict[str, Any]:
        return self._register_pending(call.body["user"], call.body["authId"])

    def _auth_decision(self, call: Call, *, reject: bool) -> dict[str, Any]:
        auth_id = call.body["authId"]
        try:
            self._registration_id(auth_id)
        except ValueError as exc:
            raise invalid_argument(f"invalid auth_id: {exc}") from None
        if auth_id not in self.pending_registrations:
            raise GrpcError(5, f"no pending auth session for auth_id {auth_id}")
        if reject:
            del self.pending_registrations[auth_id]
        return {}

    def _op_auth_approve(self, call: Call) -> dict[str, Any]:
        return self._auth_decision(call, reject=False)

    def _op_auth_reject(self, call: Call) -> dict[str, Any]:
        return self._auth_decision(call, reject=True)
