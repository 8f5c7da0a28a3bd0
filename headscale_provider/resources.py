"""Dynamic resources for what lives inside a Headscale server: users, keys, node settings, the policy.

Each provider keeps only plain settings on itself (a version pin, an API URL default); the API key arrives in
`configure` from the stack's secret config and is never pickled into state. Keys are secrets from their create
response on; listings only ever show masked keys, so a key is never re-read.

Every provider of a process talks through one shared client per server, key and pin (:func:`shared_client`):
the live server's version is confirmed once, before the first call, and each listing is fetched once per run
however many resources (and engine threads) ask for it; any write empties the listings.

Keys are replaced, never updated: preview shows a replacement for a key that expired, was used (single-use),
vanished, or entered its rotation window; Pulumi creates the new key before deleting (expiring) the old one.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import math
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    ConfigureRequest,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)

from headscale_provider.client import (
    HeadscaleClient,
    HeadscaleError,
    NotFoundError,
    PreAuthKeyInfo,
    TransientError,
    api_key_prefix,
    format_time,
)

API_KEY_CONFIG = "headscale-ha:bootstrapApiKey"
API_URL_CONFIG = "headscale-ha:headscaleApiUrl"
#: A run (one provider process) reads each listing once; writes through the shared client empty them.
LIST_CACHE_SECONDS = math.inf
RECREATE_POLICIES = ("always", "never", "reusableOnly")
_DURATION = re.compile(r"(\d+)(h|m|s|d)")
_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


class ProviderError(Exception):
    """A refusal or failure of a resource operation, phrased for the person running `pulumi up`."""


def duration(text: str, *, field: str) -> timedelta:
    """`168h`, `90d`, `1h30m` → timedelta; errors name the field."""
    parts = _DURATION.findall(text or "")
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ProviderError(f"{field}: expected a duration such as 168h, 90d or 1h30m, got {text!r}")
    return timedelta(seconds=sum(int(n) * _DURATION_UNITS[u] for n, u in parts))


def settle(check: Callable[[], None], error: TransientError, *, seconds: float, rounds: int = 3) -> None:
    """Run `check` now and, after a timeout (the server may still apply the request late), again over `seconds`."""
    rounds = rounds if error.timed_out else 1
    for index in range(rounds):
        check()
        if index < rounds - 1:
            time.sleep(seconds / (rounds - 1))


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_CLIENTS: dict[tuple[str, str, str | None], HeadscaleClient] = {}
_CLIENTS_LOCK = threading.Lock()


def shared_client(url: str, api_key: str, *, version: str | None) -> HeadscaleClient:
    """The process-wide client for a server, key and version pin (created once, thread-safe)."""
    key = (url.rstrip("/"), sha256(api_key), version)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = HeadscaleClient(url, api_key, version=version, cache_seconds=LIST_CACHE_SECONDS)
            _CLIENTS[key] = client
        return client


def forget_shared_clients() -> None:
    """Drop the process-wide clients (tests; a new run in the same process)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _HeadscaleProvider(ResourceProvider):
    """Shared plumbing: the client built in `configure`, an injectable clock for rotation decisions."""

    serialize_as_secret_always = False  # nothing secret is captured: the key comes from config at run time

    def __init__(self, *, api_url: str | None = None, version: str | None = None) -> None:
        super().__init__()
        self.api_url = api_url
        self.version = version
        self._client: HeadscaleClient | None = None
        self._clock: Callable[[], datetime] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Only plain settings travel into Pulumi state; a configured client (with its key) never does.
        return {"api_url": self.api_url, "version": self.version}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def configure(self, req: ConfigureRequest) -> None:
        key = req.config.get(API_KEY_CONFIG)
        url = req.config.get(API_URL_CONFIG) or self.api_url
        if key and url:
            self._client = shared_client(url, key, version=self.version)

    def use(self, client: HeadscaleClient, *, clock: Callable[[], datetime] | None = None) -> _HeadscaleProvider:
        """Tests and tools: talk to `client`, decide rotation with `clock`."""
        self._client = client
        self._clock = clock
        return self

    @property
    def client(self) -> HeadscaleClient:
        if self._client is None:
            raise ProviderError(
                f"no Headscale API access: set {API_KEY_CONFIG} (secret) and, if the public URL is not reachable "
                f"from here, {API_URL_CONFIG}"
            )
        return self._client

    def now(self) -> datetime:
        return (self._clock or _utc_now)()


# ------------------------------------------------------------------------------------------------ users


class UserProvider(_HeadscaleProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        existing = self.client.find_user(props["name"])
        if existing is not None:
            raise ProviderError(f"user {props['name']!r} already exists (id {existing.id}); import it instead")
        user = self.client.create_user(
            props["name"], display_name=props.get("displayName", ""), email=props.get("email", "")
        )
        return CreateResult(user.id, {**props, "userId": user.id})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        found = self.client.list_users(id_=id_)
        if not found:
            return ReadResult(None, {})
        user = found[0]
        return ReadResult(id_, {**props, "name": user.name, "displayName": user.display_name, "email": user.email})

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in ("displayName", "email") if olds.get(k, "") != news.get(k, "")]
        changed = replaces or olds.get("name") != news.get("name") or olds.get("forceDelete") != news.get("forceDelete")
        if replaces and not news.get("forceDelete"):
            # The API cannot change a display name or e-mail: the user is recreated, deleting first (names are
            # unique). A user with nodes would lose them (or, kept by delete, block the create): refuse up front.
            nodes = self.client.list_nodes(user=olds["name"])
            if nodes:
                raise ProviderError(
                    f"user {olds['name']!r}: {', '.join(replaces)} cannot change while it has {len(nodes)} node(s) "
                    f"({', '.join(n.name for n in nodes[:5])}): Headscale can only recreate a user; move or delete "
                    "the nodes, keep the old value, or set forceDelete to recreate it without them"
                )
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=True)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if olds.get("name") != news["name"]:
            self.client.rename_user(id_, news["name"])
        return UpdateResult({**news, "userId": id_})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """A user with nodes is kept in Headscale, nodes and all, unless ``forceDelete``: its devices stay online
        when it leaves `tailnet.users` or the stack is destroyed (the resource leaves the state). Without nodes, or
        with ``forceDelete``, the user (and its nodes) is deleted."""
        nodes = self.client.list_nodes(user=props["name"])
        if nodes and not props.get("forceDelete"):
            return
        for node in nodes:
            self.client.delete_node(node.id)
        with contextlib.suppress(NotFoundError):
            self.client.delete_user(id_)


class HeadscaleUser(Resource, module="headscale", name="User"):
    """A Headscale user. Deleting the resource keeps a user that still has nodes (unless `force_delete`); a display
    name or e-mail change of such a user is refused by the diff (the API can only recreate a user)."""

    user_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        user_name: pulumi.Input[str],
        display_name: pulumi.Input[str] = "",
        email: pulumi.Input[str] = "",
        force_delete: bool = False,
        provider: UserProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {"name": user_name, "displayName": display_name, "email": email, "forceDelete": force_delete}
        super().__init__(provider or UserProvider(), name, {**props, "userId": None}, opts)


# ------------------------------------------------------------------------------------------------ pre-auth keys


class PreAuthKeyProvider(_HeadscaleProvider):
    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        for field in ("lifetime", "rotateBefore"):
            try:
                duration(news.get(field, ""), field=field)
            except ProviderError as exc:
                failures.append(CheckFailure(field, str(exc)))
        if news.get("recreateIfInvalid") not in RECREATE_POLICIES:
            failures.append(
                CheckFailure(
                    "recreateIfInvalid",
                    f"expected one of {', '.join(RECREATE_POLICIES)}, got {news.get('recreateIfInvalid')!r}",
                )
            )
        if not news.get("user") and not news.get("aclTags"):
            failures.append(CheckFailure("aclTags", "a key without a user must carry ACL tags (a tag-only key)"))
        return CheckResult(news, failures)

    def _user_id(self, name: str | None) -> str | None:
        if not name:
            return None
        user = self.client.find_user(name)
        if user is None:
            raise ProviderError(f"user {name!r} does not exist in Headscale")
        return user.id

    def create(self, props: dict[str, Any]) -> CreateResult:
        started = self.now()
        expiration = started + duration(props["lifetime"], field="lifetime")
        try:
            key = self.client.create_preauth_key(
                user_id=self._user_id(props.get("user")),
                reusable=bool(props.get("reusable")),
                ephemeral=bool(props.get("ephemeral")),
                expiration=expiration,
                acl_tags=list(props.get("aclTags") or []),
            )
        except TransientError as error:
            # The key may exist without our having seen it: expire what matches, so no unknown live key remains.
            settle(lambda: self._expire_orphans(props, expiration), error, seconds=self.client.timeout)
            raise
        return CreateResult(key.id, self._outputs(props, key))

    def _expire_orphans(self, props: dict[str, Any], expiration: datetime) -> None:
        wanted = tuple(sorted(props.get("aclTags") or []))
        try:
            for key in self.client.list_preauth_keys():
                same_expiry = key.expiration is not None and abs((key.expiration - expiration).total_seconds()) < 2
                if same_expiry and key.acl_tags == wanted and key.reusable == bool(props.get("reusable")):
                    self.client.expire_preauth_key(key.id)
                    self.client.delete_preauth_key(key.id)
        except HeadscaleError as exc:
            raise ProviderError(
                "creating the pre-auth key failed with an unknown outcome and the check for a half-created key "
                f"failed too ({exc}); list keys with `headscale preauthkeys list` and expire any unexpected one"
            ) from exc

    @staticmethod
    def _outputs(props: dict[str, Any], key: PreAuthKeyInfo) -> dict[str, Any]:
        return {
            **props,
            "keyId": key.id,
            "prefix": key.prefix,
            "expiration": format_time(key.expiration) if key.expiration else "",
            "key": key.key,
        }

    def _invalid_reason(self, id_: str, olds: dict[str, Any]) -> str | None:
        """Why the live key can no longer serve (or must rotate), or None."""
        live = next((k for k in self.client.list_preauth_keys() if k.id == id_), None)
        now = self.now()
        if live is None:
            return "vanished from the server"
        if live.expired(now):
            return "expired"
        if live.used and not live.reusable:
            return "used (single-use)"
        window = duration(olds.get("rotateBefore", "0s") or "0s", field="rotateBefore")
        if live.expiration is not None and live.expiration - now <= window:
            return f"expires {format_time(live.expiration)}, inside the rotation window of {olds.get('rotateBefore')}"
        return None

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        identity = ("user", "reusable", "ephemeral", "aclTags", "lifetime")
        replaces = [k for k in identity if _norm(olds.get(k)) != _norm(news.get(k))]
        if not replaces:
            reason = self._invalid_reason(id_, olds)
            policy = news.get("recreateIfInvalid", "reusableOnly")
            recreate = policy == "always" or (policy == "reusableOnly" and bool(news.get("reusable")))
            if reason is not None and recreate:
                replaces = ["expiration"]
        settings_changed = any(olds.get(k) != news.get(k) for k in ("rotateBefore", "recreateIfInvalid"))
        return DiffResult(changes=bool(replaces) or settings_changed, replaces=replaces, delete_before_replace=False)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Only provider-side settings (rotation window, recreate policy) can change in place.
        return UpdateResult(
            {**olds, "rotateBefore": news["rotateBefore"], "recreateIfInvalid": news["recreateIfInvalid"]}
        )

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        live = next((k for k in self.client.list_preauth_keys() if k.id == id_), None)
        if live is None:
            return ReadResult(None, {})
        expiration = format_time(live.expiration) if live.expiration else ""
        return ReadResult(id_, {**props, "expiration": expiration})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        for step in (self.client.expire_preauth_key, self.client.delete_preauth_key):
            try:
                step(id_)
            except NotFoundError:
                return


def _norm(value: Any) -> Any:
    return sorted(value) if isinstance(value, list | tuple) else (value or None)


class PreAuthKey(Resource, module="headscale", name="PreAuthKey"):
    """A pre-auth key; `key` is a secret from the create response."""

    key: pulumi.Output[str]
    key_id: pulumi.Output[str]
    prefix: pulumi.Output[str]
    expiration: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        user: pulumi.Input[str] | None = None,
        reusable: bool = False,
        ephemeral: bool = False,
        acl_tags: list[str] | None = None,
        lifetime: str = "168h",
        rotate_before: str = "24h",
        recreate_if_invalid: str = "reusableOnly",
        provider: PreAuthKeyProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "user": user,
            "reusable": reusable,
            "ephemeral": ephemeral,
            "aclTags": sorted(acl_tags or []),
            "lifetime": lifetime,
            "rotateBefore": rotate_before,
            "recreateIfInvalid": recreate_if_invalid,
            "key": None,
            "keyId": None,
            "prefix": None,
            "expiration": None,
        }
        secret = pulumi.ResourceOptions(additional_secret_outputs=["key"])
        super().__init__(provider or PreAuthKeyProvider(), name, props, pulumi.ResourceOptions.merge(opts, secret))


# ------------------------------------------------------------------------------------------------ API keys


class ApiKeyProvider(_HeadscaleProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        expiration = self.now() + duration(props["lifetime"], field="lifetime")
        before = {k.prefix for k in self.client.list_api_keys()}
        try:
            key = self.client.create_api_key(expiration=expiration)
        except TransientError as error:

            def expire_orphans() -> None:
                for live in self.client.list_api_keys():
                    if live.prefix not in before:  # minted by the lost call: expire it, nobody holds it
                        self.client.expire_api_key(live.prefix)
                        self.client.delete_api_key(live.prefix)

            settle(expire_orphans, error, seconds=self.client.timeout)
            raise
        prefix = api_key_prefix(key)
        live = next((k for k in self.client.list_api_keys() if k.prefix == prefix), None)
        key_id = live.id if live else prefix
        return CreateResult(key_id, {**props, "prefix": prefix, "expiration": format_time(expiration), "key": key})

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = ["lifetime"] if olds.get("lifetime") != news.get("lifetime") else []
        if not replaces:
            live = next((k for k in self.client.list_api_keys() if k.prefix == olds.get("prefix")), None)
            window = duration(news.get("rotateBefore", "0s") or "0s", field="rotateBefore")
            if (
                live is None
                or live.expired(self.now())
                or (live.expiration is not None and live.expiration - self.now() <= window)
            ):
                replaces = ["expiration"]
        changed = bool(replaces) or olds.get("rotateBefore") != news.get("rotateBefore")
        return DiffResult(changes=changed, replaces=replaces, delete_before_replace=False)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult({**olds, "rotateBefore": news["rotateBefore"]})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        live = next((k for k in self.client.list_api_keys() if k.prefix == props.get("prefix")), None)
        return ReadResult(id_, props) if live else ReadResult(None, {})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        for step in (self.client.expire_api_key, self.client.delete_api_key):
            try:
                step(props["prefix"])
            except NotFoundError:
                return


class ApiKey(Resource, module="headscale", name="ApiKey"):
    """An API key (for Headplane); `key` is a secret; deleting expires and deletes it."""

    key: pulumi.Output[str]
    prefix: pulumi.Output[str]
    expiration: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        lifetime: str = "90d",
        rotate_before: str = "14d",
        provider: ApiKeyProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {"lifetime": lifetime, "rotateBefore": rotate_before, "key": None, "prefix": None, "expiration": None}
        secret = pulumi.ResourceOptions(additional_secret_outputs=["key"])
        super().__init__(provider or ApiKeyProvider(), name, props, pulumi.ResourceOptions.merge(opts, secret))


# ------------------------------------------------------------------------------------------------ node settings


class NodeSettingsProvider(_HeadscaleProvider):
    def _select(self, props: dict[str, Any]) -> Any:
        nodes = [
            n
            for n in self.client.list_nodes(user=props.get("user") or None)
            if props["nodeName"] in (n.name, n.given_name)
        ]
        if len(nodes) != 1:
            who = f" of user {props['user']!r}" if props.get("user") else ""
            raise ProviderError(f"expected exactly one node named {props['nodeName']!r}{who}, found {len(nodes)}")
        return nodes[0]

    def _apply(self, node_id: str, live: Any, props: dict[str, Any]) -> Any:
        tags = props.get("tags")
        if tags is not None and tuple(sorted(tags)) != live.tags:
            live = self.client.set_tags(node_id, sorted(tags))
        routes = props.get("approvedRoutes")
        if routes is not None and tuple(sorted(routes)) != live.approved_routes:
            live = self.client.set_approved_routes(node_id, sorted(routes))
        given = props.get("givenName")
        if given and given != live.given_name:
            live = self.client.rename_node(node_id, given)
        return live

    def create(self, props: dict[str, Any]) -> CreateResult:
        node = self._select(props)
        live = self._apply(node.id, node, props)
        return CreateResult(node.id, {**props, "nodeId": node.id, **_node_outputs(live)})

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        if olds.get("nodeName") != news.get("nodeName") or olds.get("user") != news.get("user"):
            return DiffResult(changes=True, replaces=["nodeName"])
        try:
            live = self.client.get_node(id_)
        except NotFoundError:
            return DiffResult(changes=True, replaces=["nodeId"])
        drift = _wanted_differs(live, news)
        return DiffResult(changes=drift or olds.get("deleteOnDestroy") != news.get("deleteOnDestroy"), replaces=[])

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        live = self._apply(id_, self.client.get_node(id_), news)
        return UpdateResult({**news, "nodeId": id_, **_node_outputs(live)})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        try:
            live = self.client.get_node(id_)
        except NotFoundError:
            return ReadResult(None, {})
        return ReadResult(id_, {**props, **_node_outputs(live)})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        if props.get("deleteOnDestroy"):
            with contextlib.suppress(NotFoundError):
                self.client.delete_node(id_)


def _node_outputs(node: Any) -> dict[str, Any]:
    return {"liveTags": list(node.tags), "liveApprovedRoutes": list(node.approved_routes), "liveName": node.given_name}


def _wanted_differs(live: Any, wanted: dict[str, Any]) -> bool:
    tags, routes, given = wanted.get("tags"), wanted.get("approvedRoutes"), wanted.get("givenName")
    return (
        (tags is not None and tuple(sorted(tags)) != live.tags)
        or (routes is not None and tuple(sorted(routes)) != live.approved_routes)
        or bool(given and given != live.given_name)
    )


class NodeSettings(Resource, module="headscale", name="NodeSettings"):
    """Tags, approved routes (the full list) and given name of an existing node; optionally delete it on destroy."""

    node_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        node_name: pulumi.Input[str],
        user: pulumi.Input[str] | None = None,
        tags: list[str] | None = None,
        approved_routes: list[str] | None = None,
        given_name: str | None = None,
        delete_on_destroy: bool = False,
        provider: NodeSettingsProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "nodeName": node_name,
            "user": user,
            "tags": tags,
            "approvedRoutes": approved_routes,
            "givenName": given_name,
            "deleteOnDestroy": delete_on_destroy,
            "nodeId": None,
        }
        super().__init__(provider or NodeSettingsProvider(), name, props, opts)


# ------------------------------------------------------------------------------------------------ policy


class PolicyProvider(_HeadscaleProvider):
    """Owns the live policy in `apply` mode; only reports in `dryRun`."""

    def _live(self) -> str:
        return self.client.get_policy().text

    def _write(self, desired: str, live: str, last_applied: str | None, overwrite: bool) -> None:
        unset = live.strip() in ("", "{}")  # nothing stored yet, or Headscale's allow-all default
        if sha256(live) != sha256(desired) and not unset and sha256(live) != last_applied and not overwrite:
            raise ProviderError(
                "the live policy differs from the one this stack last applied (edited elsewhere, e.g. in Headplane, "
                f"live sha256 {sha256(live)[:12]}); merge the change into policy/base.hujson or set "
                "overwriteExisting to replace it"
            )
        if sha256(live) == sha256(desired):
            return  # already live (perhaps from an earlier run whose answer was lost)
        if self.client.has_policy_check:
            self.client.check_policy(desired)
        self.client.set_policy(desired)

    def _outputs(self, props: dict[str, Any], live_after: str) -> dict[str, Any]:
        desired = props["policy"]
        outputs = {**props, "liveSha256": sha256(live_after), "liveDiff": _diff(live_after, desired)}
        if props["mode"] == "apply":
            outputs["appliedSha256"] = sha256(desired)
        else:
            outputs["appliedSha256"] = props.get("appliedSha256")
        return outputs

    def create(self, props: dict[str, Any]) -> CreateResult:
        live = self._live()
        if props["mode"] == "apply":
            self._write(props["policy"], live, None, bool(props.get("overwriteExisting")))
            live = props["policy"]
        return CreateResult("policy", self._outputs(props, live))

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        live_sha = sha256(self._live())
        wanted = sha256(news["policy"])
        changed = (
            olds.get("mode") != news.get("mode")
            or sha256(olds.get("policy", "")) != wanted
            or live_sha != olds.get("liveSha256")
            or any(olds.get(k) != news.get(k) for k in ("overwriteExisting", "resetOnDestroy"))
        )
        return DiffResult(changes=changed, replaces=[])

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        live = self._live()
        if news["mode"] == "apply":
            self._write(news["policy"], live, olds.get("appliedSha256"), bool(news.get("overwriteExisting")))
            live = news["policy"]
        return UpdateResult(self._outputs({**news, "appliedSha256": olds.get("appliedSha256")}, live))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        live = self._live()
        return ReadResult(id_, {**props, "liveSha256": sha256(live), "liveDiff": _diff(live, props["policy"])})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        if props.get("mode") == "apply" and props.get("resetOnDestroy"):
            self.client.set_policy("{}")


def _diff(live: str, desired: str) -> str:
    lines = difflib.unified_diff(
        live.splitlines(keepends=True), desired.splitlines(keepends=True), "live", "rendered", n=2
    )
    return "".join(lines)


class HeadscalePolicy(Resource, module="headscale", name="Policy"):
    """The tailnet policy: applied (`apply`) or compared with the live one (`dryRun`)."""

    applied_sha256: pulumi.Output[str]
    live_sha256: pulumi.Output[str]
    live_diff: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        policy: pulumi.Input[str],
        mode: str = "dryRun",
        overwrite_existing: bool = False,
        reset_on_destroy: bool = False,
        provider: PolicyProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        if mode not in ("apply", "dryRun"):
            raise ValueError(f"mode: expected apply or dryRun, got {mode!r}")
        props = {
            "policy": policy,
            "mode": mode,
            "overwriteExisting": overwrite_existing,
            "resetOnDestroy": reset_on_destroy,
            "appliedSha256": None,
            "liveSha256": None,
            "liveDiff": None,
        }
        super().__init__(provider or PolicyProvider(), name, props, opts)
