"""One script of dynamic-provider calls, run against two Headscale servers, and the answers compared.

Why: the fake Headscale stands in for the real one in every provider test, so where the two disagree the provider
tests prove nothing. The script (:func:`provider_lifecycle`) calls the providers as the engine does (check, create,
read, diff, update, delete) and the client's raw listings, and a :class:`Transcript` records each answer with what
is random by nature replaced by its shape: keys and prefixes by their form and lengths, timestamps by their offset
from the moment of the call in whole minutes, the server's URL by ``<url>``. Two transcripts are then compared
field by field (:func:`disagreements`).

Each server must be fresh (no users, keys or policy; one API key, the admin's, id 1), so that the ids match.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
from pulumi.dynamic import CheckResult, CreateResult, DiffResult, ReadResult, UpdateResult

from headscale_ha.provider.client import HeadscaleClient
from headscale_ha.provider.resources import (
    ApiKeyProvider,
    NodeSettingsProvider,
    PolicyProvider,
    PreAuthKeyProvider,
    UserProvider,
)

USER = {"name": "alice", "displayName": "Alice", "email": "alice@example.com", "forceDelete": False}
RENAMED = {**USER, "name": "alicia"}
SINGLE_USE = {
    "user": "alicia",
    "reusable": False,
    "ephemeral": False,
    "aclTags": [],
    "lifetime": "1h",
    "rotateBefore": "10m",
    "recreateIfInvalid": "always",
}
TAGGED = {**SINGLE_USE, "user": None, "reusable": True, "aclTags": ["tag:router"]}
POLICY = (
    '{"tagOwners": {"tag:router": ["alicia@"]},\n'
    ' "acls": [{"action": "accept", "src": ["alicia@"], "dst": ["alicia@:*", "tag:router:22"]}]}'
)
OTHER_POLICY = '{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}'
#: Broken on purpose: a group nobody defined (Headscale refuses it; the project's model does too).
BROKEN_POLICY = '{"acls": [{"action": "accept", "src": ["group:nobody"], "dst": ["*:*"]}]}'
#: More ways to be wrong, each refused by Headscale's parser with its own message (the fake must word them alike).
BROKEN_POLICIES = {
    "syntax": '{"acls": [',
    "unknown-field": '{"aclz": []}',
    "undefined-group": BROKEN_POLICY,
    "undefined-tag": '{"acls": [{"action": "accept", "src": ["tag:nope"], "dst": ["*:*"]}]}',
    "unknown-action": '{"acls": [{"action": "drop", "src": ["*"], "dst": ["*:*"]}]}',
    "bad-port": '{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:99999"]}]}',
    "unknown-user": '{"acls": [{"action": "accept", "src": ["nobody@"], "dst": ["*:*"]}]}',
    "undefined-host": '{"acls": [{"action": "accept", "src": ["*"], "dst": ["db:5432"]}]}',
}
API_KEY = {"lifetime": "2h", "rotateBefore": "1h"}
#: A node registered through the API as ``tailscale up`` would be (debug/node, then the register call).
REGISTRATION = "abcdefghijklmnopqrstuvwx"
NODE = {
    "nodeName": "laptop",
    "user": "alicia",
    "tags": None,
    "approvedRoutes": ["10.20.0.0/16"],
    "givenName": "work-laptop",
    "deleteOnDestroy": True,
    "nodeId": None,
}

_KEY = re.compile(r"hskey-(auth|api)-([A-Za-z0-9_-]{12})-(\*\*\*|[A-Za-z0-9_-]+)")
_NODE_KEY = re.compile(r"\b(mkey|nodekey|discokey):[0-9a-f]{64}\b")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def client_for(url: str, api_key: str, minor: str) -> HeadscaleClient:
    """A client pinned to ``minor``, as the provider builds one (the live version is confirmed before the first call),
    with short timeouts and no backoff: every server here is on loopback."""
    return HeadscaleClient(url, api_key, version=minor, timeout=10, retries=1, backoff=0.0)


def _shape(text: str) -> str:
    """A key's form without its random parts: ``hskey-auth-<12>-<64>`` (or ``-***`` when masked).

    Go's JSON decoder words its errors "cannot unmarshal" or "unable to unmarshal", picked at random once per
    process on purpose; both read as "cannot".
    """
    text = text.replace("unable to unmarshal", "cannot unmarshal")

    def token(match: re.Match[str]) -> str:
        secret = match[3] if match[3] == "***" else f"<{len(match[3])}>"
        return f"hskey-{match[1]}-<{len(match[2])}>-{secret}"

    return _NODE_KEY.sub(lambda match: f"{match[1]}:<64>", _KEY.sub(token, text))


@dataclass
class Transcript:
    """The normalized answers of one server to the script, in call order (step name -> answer)."""

    url: str
    api_key: str
    steps: dict[str, Any] = field(default_factory=dict)

    def call(self, step: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one call; record its normalized answer (or its error's type and message) and return the raw one."""
        try:
            result = fn(*args)
        except Exception as exc:  # noqa: BLE001 - an error is an answer to compare, whatever its type
            self.steps[step] = {"error": type(exc).__name__, "message": self._value("message", str(exc))}
            return None
        self.steps[step] = self._value("", _plain(result))
        return result

    def snapshot(self, step: str, path: str) -> None:
        """The raw JSON of a GET, as the server sent it (normalized like every answer)."""
        response = requests.get(f"{self.url}{path}", headers={"Authorization": f"Bearer {self.api_key}"}, timeout=10)
        self._record(step, response)

    def post(self, step: str, path: str, body: dict[str, Any] | None = None) -> None:
        """A raw POST (what the providers never send, e.g. a node's registration), recorded like :meth:`snapshot`."""
        headers = {"Authorization": f"Bearer {self.api_key}"}
        self._record(step, requests.post(f"{self.url}{path}", json=body, headers=headers, timeout=10))

    def _record(self, step: str, response: requests.Response) -> None:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        self.steps[step] = {"status": response.status_code, "body": self._value("", body)}

    def _value(self, name: str, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: self._value(key, item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self._value(name, item) for item in value]
        if not isinstance(value, str):
            return value
        if _TIME.match(value):
            return self._relative(value)
        if name == "prefix" and re.fullmatch(r"[A-Za-z0-9_-]{12}", value):
            return "<12>"
        return _shape(value.replace(self.url, "<url>"))

    @staticmethod
    def _relative(text: str) -> str:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.year <= 1:
            return "<zero time>"
        minutes = round((moment - datetime.now(UTC)).total_seconds() / 60)
        return f"<now{minutes:+d}m>"


def _plain(result: Any) -> Any:
    """A provider result as plain data (the fields the engine reads)."""
    if isinstance(result, CreateResult | ReadResult):
        return {"id": result.id, "outs": result.outs}
    if isinstance(result, UpdateResult):
        return {"outs": result.outs}
    if isinstance(result, DiffResult):
        return {
            "changes": result.changes,
            "replaces": result.replaces,
            "deleteBeforeReplace": result.delete_before_replace,
        }
    if isinstance(result, CheckResult):
        return {"inputs": result.inputs, "failures": [(f.property, f.reason) for f in result.failures]}
    if hasattr(result, "__dataclass_fields__"):
        return {name: _plain(getattr(result, name)) for name in result.__dataclass_fields__}
    if isinstance(result, datetime):
        return result.isoformat()
    if isinstance(result, list | tuple):
        return [_plain(item) for item in result]
    return result


# --- the script ------------------------------------------------------------------------------------------------


def provider_lifecycle(transcript: Transcript, client: HeadscaleClient) -> Transcript:
    """Users, then the policy, pre-auth keys and an API key, then the user's deletion: every provider method once."""
    _users(transcript, client)
    _policy(transcript, client)
    _preauth_keys(transcript, client)
    _nodes(transcript, client)
    _api_keys(transcript, client)
    _delete_user(transcript, client)
    return transcript


def _users(t: Transcript, client: HeadscaleClient) -> None:
    users = UserProvider().use(client)
    created = t.call("user.create", users.create, USER)
    uid, outs = (created.id, created.outs) if created else ("1", USER)
    t.call("user.read", users.read, uid, outs)
    t.call("user.diff.same", users.diff, uid, outs, USER)
    t.call("user.create.adopts", users.create, USER)
    t.call("user.client.create.duplicate", client.create_user, "alice")
    t.call("user.diff.rename", users.diff, uid, outs, RENAMED)
    t.call("user.update.rename", users.update, uid, outs, RENAMED)
    t.call("user.read.renamed", users.read, uid, RENAMED)
    t.call("user.diff.email", users.diff, uid, RENAMED, {**RENAMED, "email": "b@example.com"})
    t.call("user.client.rename.unknown", client.rename_user, "999", "bob")
    t.snapshot("wire.users", "/api/v1/user")


def _policy(t: Transcript, client: HeadscaleClient) -> None:
    policies = PolicyProvider().use(client)
    props = {"policy": POLICY, "mode": "apply", "overwriteExisting": False, "resetOnDestroy": True}
    t.snapshot("wire.policy.unset", "/api/v1/policy")
    t.call("policy.read.unset", policies.read, "policy", props)
    created = t.call("policy.create", policies.create, props)
    outs = created.outs if created else props
    t.call("policy.read", policies.read, "policy", outs)
    t.call("policy.diff.same", policies.diff, "policy", outs, props)
    other = {**props, "policy": OTHER_POLICY}
    t.call("policy.diff.other", policies.diff, "policy", outs, other)
    t.call("policy.update.broken", policies.update, "policy", outs, {**props, "policy": BROKEN_POLICY})
    t.call("policy.client.set.broken", client.set_policy, BROKEN_POLICY)
    t.call("policy.client.check.broken", client.check_policy, BROKEN_POLICY)
    for name, text in BROKEN_POLICIES.items():
        t.call(f"policy.client.set.{name}", client.set_policy, text)
    t.call("policy.client.set.restore", client.set_policy, POLICY)  # in case one of them was taken
    t.snapshot("wire.policy", "/api/v1/policy")


def _preauth_keys(t: Transcript, client: HeadscaleClient) -> None:
    keys = PreAuthKeyProvider().use(client)
    t.call("key.check.ok", keys.check, {}, SINGLE_USE)
    t.call("key.check.bad", keys.check, {}, {**SINGLE_USE, "user": None, "lifetime": "1 week"})
    created = t.call("key.create", keys.create, SINGLE_USE)
    kid, outs = (created.id, created.outs) if created else ("1", SINGLE_USE)
    t.call("key.read", keys.read, kid, outs)
    t.call("key.diff.same", keys.diff, kid, outs, SINGLE_USE)
    rotate = {**SINGLE_USE, "rotateBefore": "30m"}
    t.call("key.diff.rotate-setting", keys.diff, kid, outs, rotate)
    t.call("key.update", keys.update, kid, outs, rotate)
    t.call("key.diff.in-window", keys.diff, kid, {**outs, "rotateBefore": "2h"}, {**SINGLE_USE, "rotateBefore": "2h"})
    t.call("key.diff.identity", keys.diff, kid, outs, {**SINGLE_USE, "reusable": True})
    t.call("key.create.tagged", keys.create, TAGGED)
    t.call("key.create.undefined-tag", keys.create, {**TAGGED, "aclTags": ["tag:nope"]})
    t.call("key.create.unknown-user", keys.create, {**SINGLE_USE, "user": "nobody"})
    t.snapshot("wire.preauthkeys", "/api/v1/preauthkey")
    t.call("key.delete", keys.delete, kid, outs)
    t.call("key.read.deleted", keys.read, kid, outs)
    t.call("key.diff.deleted", keys.diff, kid, outs, SINGLE_USE)
    t.call("key.delete.again", keys.delete, kid, outs)
    t.call("key.client.expire.unknown", client.expire_preauth_key, "999")
    t.call("key.client.delete.unknown", client.delete_preauth_key, "999")
    t.snapshot("wire.preauthkeys.after", "/api/v1/preauthkey")


def _register(t: Transcript, minor: str) -> None:
    """A node of alicia's advertising a subnet and the exit routes: ``debug/node`` caches it as a Tailscale client's
    first contact would, and the register call (0.28 ``node/register``, 0.29 ``auth/register``) admits it."""
    routes = ["10.20.0.0/16", "0.0.0.0/0", "::/0"]
    if minor >= "0.29":
        auth_id = f"hskey-authreq-{REGISTRATION}"
        t.post(
            "node.debug-create",
            "/api/v1/debug/node",
            {"user": "alicia", "key": auth_id, "name": "laptop", "routes": routes},
        )
        t.post("node.register", "/api/v1/auth/register", {"user": "alicia", "authId": auth_id})
    else:
        t.post(
            "node.debug-create",
            "/api/v1/debug/node",
            {"user": "alicia", "key": REGISTRATION, "name": "laptop", "routes": routes},
        )
        t.post("node.register", f"/api/v1/node/register?user=alicia&key={REGISTRATION}")


def _nodes(t: Transcript, client: HeadscaleClient) -> None:
    """Node settings, and what a user with a node may not do (change its e-mail, be deleted without forceDelete)."""
    _register(t, client.version)
    nodes = NodeSettingsProvider().use(client)
    users = UserProvider().use(client)
    created = t.call("node.create", nodes.create, NODE)
    nid, outs = (created.id, created.outs) if created else ("1", NODE)
    t.call("node.read", nodes.read, nid, outs)
    t.call("node.diff.same", nodes.diff, nid, outs, NODE)
    t.call("user.diff.email.with-node", users.diff, "1", RENAMED, {**RENAMED, "email": "b@example.com"})
    t.call("user.delete.with-node", users.delete, "1", RENAMED)
    t.call("user.read.with-node", users.read, "1", RENAMED)
    routes = {**NODE, "approvedRoutes": ["0.0.0.0/0", "10.20.0.0/16", "::/0"]}
    t.call("node.diff.routes", nodes.diff, nid, outs, routes)
    t.call("node.update.routes", nodes.update, nid, outs, routes)
    t.call("node.update.bad-route", nodes.update, nid, outs, {**NODE, "approvedRoutes": ["10.20.0.0/33"]})
    tagged = {**routes, "tags": ["tag:router"]}
    t.call("node.update.tags", nodes.update, nid, outs, tagged)
    t.call("node.update.bad-tag", nodes.update, nid, outs, {**tagged, "tags": ["Router"]})
    t.call("node.read.tagged", nodes.read, nid, tagged)
    t.snapshot("wire.nodes", "/api/v1/node")
    t.call("node.delete", nodes.delete, nid, tagged)
    t.call("node.read.deleted", nodes.read, nid, tagged)
    t.call("node.diff.deleted", nodes.diff, nid, tagged, tagged)
    t.call("node.create.absent", nodes.create, NODE)


def _api_keys(t: Transcript, client: HeadscaleClient) -> None:
    api_keys = ApiKeyProvider().use(client)
    created = t.call("apikey.create", api_keys.create, API_KEY)
    kid, outs = (created.id, created.outs) if created else ("2", API_KEY)
    t.call("apikey.read", api_keys.read, kid, outs)
    t.call("apikey.diff.same", api_keys.diff, kid, outs, API_KEY)
    t.call("apikey.diff.in-window", api_keys.diff, kid, outs, {**API_KEY, "rotateBefore": "3h"})
    t.snapshot("wire.apikeys", "/api/v1/apikey")
    t.call("apikey.delete", api_keys.delete, kid, outs)
    t.call("apikey.read.deleted", api_keys.read, kid, outs)
    t.call("apikey.delete.again", api_keys.delete, kid, outs)
    t.snapshot("wire.apikeys.after", "/api/v1/apikey")


def _delete_user(t: Transcript, client: HeadscaleClient) -> None:
    users = UserProvider().use(client)
    policies = PolicyProvider().use(client)
    props = {"policy": POLICY, "mode": "apply", "overwriteExisting": False, "resetOnDestroy": True}
    t.call("policy.delete.reset", policies.delete, "policy", props)
    t.call("policy.read.reset", policies.read, "policy", props)
    t.call("user.delete", users.delete, "1", RENAMED)
    t.call("user.read.deleted", users.read, "1", RENAMED)
    t.call("user.delete.again", users.delete, "1", RENAMED)
    t.snapshot("wire.users.after", "/api/v1/user")


# --- comparing ---------------------------------------------------------------------------------------------------


def disagreements(real: Transcript, fake: Transcript, labels: tuple[str, str] = ("real", "fake")) -> list[str]:
    """Every leaf where the two transcripts differ: ``step.path: real=... fake=...`` (steps in call order)."""
    found: list[str] = []
    for step in dict.fromkeys([*real.steps, *fake.steps]):
        _compare(step, real.steps.get(step, "<absent>"), fake.steps.get(step, "<absent>"), labels, found)
    return found


def differing_steps(a: Transcript, b: Transcript) -> set[str]:
    """The steps whose normalized answers differ (or that only one transcript has)."""
    return {step for step in {*a.steps, *b.steps} if a.steps.get(step, "<absent>") != b.steps.get(step, "<absent>")}


def _compare(where: str, a: Any, b: Any, labels: tuple[str, str], found: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in dict.fromkeys([*a, *b]):
            _compare(f"{where}.{key}", a.get(key, "<absent>"), b.get(key, "<absent>"), labels, found)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            _compare(f"{where}[{index}]", x, y, labels, found)
    elif a != b:
        found.append(f"{where}: {labels[0]}={a!r} {labels[1]}={b!r}")
