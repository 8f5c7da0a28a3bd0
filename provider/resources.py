"""Dynamic resources for what lives inside a Headscale server: users, keys, node settings, the policy.

Each provider keeps only plain settings on itself (a version pin, an API URL default); the API key arrives in
`configure` from the stack's secret config and is never pickled into state. Keys are secrets from their create
response on; listings only ever show masked keys, so a key is never re-read.

Every provider of a process talks through one shared client per server, key and pin (:func:`shared_client`):
the live server's version is confirmed once, before the first call, and each listing is fetched once per run
however many resources (and engine threads) ask for it; any write empties the listings.

Keys are replaced, never updated: preview shows a replacement for a key that expired, was used (single-use),
vanished, or entered its rotation window; Pulumi creates the new key before deleting (expiring) the old one.

Where the server is, and which minor it must run, come from the stack config at `configure` (`headscaleApiUrl`, else
`https://<tailnet.publicHostname>`; `headscale.version`), so a resource created by an older provider is read, diffed
and deleted against today's URL and pin; the values pickled into the provider are only the fallback when the config
lacks them. A server that cannot answer (refused, timed out, name unresolved, 502/503/504) or runs another minor
than the pin (half-way through an upgrade) does not fail a `diff` or a `read`: they report no change and say why in
one line on stderr (the dynamic provider host has no log channel to the engine; the engine shows a plugin's stderr).
`create`, `update` and `delete` ask the server once more (it may be back: rolled out, restarted) and then fail at
once, naming the URL; they never pretend to have succeeded.
"""

from __future__ import annotations

import contextlib
import difflib
from datetime import datetime
from typing import Any

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    UpdateResult,
)

from headscale_ha.provider.base import (
    API_KEY_CONFIG,
    RECREATE_POLICIES,
    ProviderError,
    _as_recorded,
    _HeadscaleProvider,
    _no_change,
    asks_again,
    duration,
    marked,
    settle,
    sha256,
    survives_outage,
    warn,
)
from headscale_ha.provider.client import (
    HeadscaleError,
    NotFoundError,
    PreAuthKeyInfo,
    TransientError,
    UnreachableError,
    User,
    wire_time,
)
from headscale_ha.provider.records import api_key_prefix, format_time


class UserProvider(_HeadscaleProvider):
    """Users are the tailnet's, not a site's: a create adopts the user of that name Headscale already holds (the
    registry a promoted site restored has them), and a delete never runs as a side effect of a role change."""

    kind = "User"

    def _local_user(self, name: str) -> User | None:
        """The user of that name created through the API or CLI (names are unique among those; OIDC logins make
        users of their own, which may share a name); an OIDC-only namesake is refused, never adopted."""
        found = self.client.list_users(name=name)
        local = next((u for u in found if not u.provider_id), None)
        if local is None and found:
            raise ProviderError(
                f"user {name!r} exists in Headscale only as an OIDC user (id {found[0].id}): creating another "
                f"user of that name would make `{name}@` in the policy ambiguous; remove it from tailnet.users"
            )
        return local

    @asks_again
    def create(self, props: dict[str, Any]) -> CreateResult:
        existing = self._local_user(props["name"])
        if existing is not None:
            return self._adopt(existing, props)
        user = self.client.create_user(
            props["name"], display_name=props.get("displayName", ""), email=props.get("email", "")
        )
        return CreateResult(user.id, {**props, "userId": user.id})

    def _adopt(self, user: User, props: dict[str, Any]) -> CreateResult:
        """Take the existing user as this resource's, with its id. The outputs carry its display name and e-mail as
        they are live: where they differ from the config, the next diff shows the change (a recreate, which the
        diff refuses while the user has nodes unless forceDelete), so nothing is hidden and nothing changes now."""
        live = {"displayName": user.display_name, "email": user.email}
        differs = [k for k, v in live.items() if (props.get(k) or "") != v]
        note = f"; live {', '.join(differs)} differ from the config: the next preview shows it" if differs else ""
        warn(f"User {props['name']!r}: adopted the user Headscale already holds (id {user.id}){note}")
        return CreateResult(user.id, {**props, **live, "userId": user.id})

    @survives_outage(_as_recorded)
    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        found = self.client.list_users(id_=id_)
        if not found:
            return ReadResult(None, {})
        user = found[0]
        return ReadResult(id_, {**props, "name": user.name, "displayName": user.display_name, "email": user.email})

    @survives_outage(_no_change)
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

    @asks_again
    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if olds.get("name") != news["name"]:
            self.client.rename_user(id_, news["name"])
        return UpdateResult({**news, "userId": id_})

    @asks_again
    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """Delete the user in Headscale only when this stack manages the tailnet's users and means it:

        - A stack whose config says it is not the active one (`role` standby: a demotion), or that has no API
          access (bootstrapApiKey removed), only forgets the resource: the user, its nodes and keys stay in the
          registry, which is the tailnet's (Pulumi forgets, the registry keeps; a stderr line says so).
        - A user with nodes is kept unless forceDelete; forceDelete is the config's current word while the user is
          still listed in `tailnet.users` (a recreate, or `pulumi destroy`), else the state's last word (the user
          was removed from the list after forceDelete was set, as components/settings/tailnet.py documents it).
        - Without nodes, or forced, the user (and its nodes) is deleted.
        A config without `role` (tests, tools) counts as the active stack.
        """
        reason = self._forget_reason()
        if reason is not None:
            warn(f"User {props.get('name')!r} (id {id_}): forgotten, not deleted in Headscale: {reason}")
            return
        nodes = self.client.list_nodes(user=props["name"])
        if nodes and not self._force_delete(props):
            return
        for node in nodes:
            self.client.delete_node(node.id)
        with contextlib.suppress(NotFoundError):
            self.client.delete_user(id_)

    def _forget_reason(self) -> str | None:
        if self._stack.role not in (None, "active"):
            return f"this stack's role is {self._stack.role}; only the active stack manages the tailnet's users"
        if self._client is None:
            return f"this stack has no Headscale API access ({API_KEY_CONFIG} is not set)"
        return None

    def _force_delete(self, props: dict[str, Any]) -> bool:
        listed = (self._stack.users or {}).get(props["name"])
        return bool((listed if listed is not None else props).get("forceDelete"))


class HeadscaleUser(Resource, module="headscale", name="User"):
    """A Headscale user. Creating it adopts a user of that name Headscale already holds. Deleting the resource keeps
    a user that still has nodes (unless `force_delete`), and deletes nothing on a stack that is not the active one or
    has no API access (see `UserProvider.delete`); a display name or e-mail change of a user with nodes is refused by
    the diff (the API can only recreate a user)."""

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
    kind = "PreAuthKey"

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

    @asks_again
    def create(self, props: dict[str, Any]) -> CreateResult:
        """Mint the key with a marked expiration (:func:`marked`): after a lost answer only the key this call minted
        is expired; a call that was not sent at all (unreachable server) has nothing to clean up."""
        expiration = marked(self.now() + duration(props["lifetime"], field="lifetime"))
        user_id = self._user_id(props.get("user"))
        try:
            key = self.client.create_preauth_key(
                user_id=user_id,
                reusable=bool(props.get("reusable")),
                ephemeral=bool(props.get("ephemeral")),
                expiration=expiration,
                acl_tags=list(props.get("aclTags") or []),
            )
        except UnreachableError:
            raise
        except TransientError as error:
            # The key may exist without our having seen it: expire it, so no unknown live key remains.
            settle(lambda: self._expire_orphan(props, expiration), error, seconds=self.client.timeout)
            raise
        return CreateResult(key.id, self._outputs(props, key))

    def _expire_orphan(self, props: dict[str, Any], expiration: datetime) -> None:
        wanted = tuple(sorted(props.get("aclTags") or []))
        try:
            for key in self.client.list_preauth_keys():
                same = key.acl_tags == wanted and key.reusable == bool(props.get("reusable"))
                if same and key.expiration == expiration:
                    self.client.expire_preauth_key(key.id)
                    self.client.delete_preauth_key(key.id)
                    warn(f"PreAuthKey create: the answer was lost; expired the key that call minted (id {key.id})")
        except HeadscaleError as exc:
            raise ProviderError(
                "creating the pre-auth key failed with an unknown outcome and the check for a half-created key "
                f"failed too ({exc}); list keys with `headscale preauthkeys list` and expire the one expiring at "
                f"{wire_time(expiration)}, if any"
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

    @survives_outage(_no_change)
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

    @asks_again
    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Only provider-side settings (rotation window, recreate policy) can change in place.
        return UpdateResult(
            {**olds, "rotateBefore": news["rotateBefore"], "recreateIfInvalid": news["recreateIfInvalid"]}
        )

    @survives_outage(_as_recorded)
    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        live = next((k for k in self.client.list_preauth_keys() if k.id == id_), None)
        if live is None:
            return ReadResult(None, {})
        expiration = format_time(live.expiration) if live.expiration else ""
        return ReadResult(id_, {**props, "expiration": expiration})

    @asks_again
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
    kind = "ApiKey"

    @asks_again
    def create(self, props: dict[str, Any]) -> CreateResult:
        """As a pre-auth key: a marked expiration, so a lost answer expires the key this call minted and no other
        (an API key anyone else created meanwhile is left alone)."""
        expiration = marked(self.now() + duration(props["lifetime"], field="lifetime"))
        try:
            key = self.client.create_api_key(expiration=expiration)
        except UnreachableError:
            raise
        except TransientError as error:
            settle(lambda: self._expire_orphan(expiration), error, seconds=self.client.timeout)
            raise
        prefix = api_key_prefix(key)
        live = next((k for k in self.client.list_api_keys() if k.prefix == prefix), None)
        key_id = live.id if live else prefix
        return CreateResult(key_id, {**props, "prefix": prefix, "expiration": format_time(expiration), "key": key})

    def _expire_orphan(self, expiration: datetime) -> None:
        try:
            for live in self.client.list_api_keys():
                if live.expiration == expiration:  # minted by the lost call: expire it, nobody holds it
                    self.client.expire_api_key(live.prefix)
                    self.client.delete_api_key(live.prefix)
                    warn(f"ApiKey create: the answer was lost; expired the key that call minted ({live.prefix})")
        except HeadscaleError as exc:
            raise ProviderError(
                "creating the API key failed with an unknown outcome and the check for a half-created key failed "
                f"too ({exc}); list keys with `headscale apikeys list` and expire the one expiring at "
                f"{wire_time(expiration)}, if any"
            ) from exc

    @survives_outage(_no_change)
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

    @asks_again
    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult({**olds, "rotateBefore": news["rotateBefore"]})

    @survives_outage(_as_recorded)
    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        live = next((k for k in self.client.list_api_keys() if k.prefix == props.get("prefix")), None)
        return ReadResult(id_, props) if live else ReadResult(None, {})

    @asks_again
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
    kind = "NodeSettings"

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

    @asks_again
    def create(self, props: dict[str, Any]) -> CreateResult:
        node = self._select(props)
        live = self._apply(node.id, node, props)
        return CreateResult(node.id, {**props, "nodeId": node.id, **_node_outputs(live)})

    @survives_outage(_no_change)
    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        if olds.get("nodeName") != news.get("nodeName") or olds.get("user") != news.get("user"):
            return DiffResult(changes=True, replaces=["nodeName"])
        try:
            live = self.client.get_node(id_)
        except NotFoundError:
            return DiffResult(changes=True, replaces=["nodeId"])
        drift = _wanted_differs(live, news)
        return DiffResult(changes=drift or olds.get("deleteOnDestroy") != news.get("deleteOnDestroy"), replaces=[])

    @asks_again
    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        live = self._apply(id_, self.client.get_node(id_), news)
        return UpdateResult({**news, "nodeId": id_, **_node_outputs(live)})

    @survives_outage(_as_recorded)
    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        try:
            live = self.client.get_node(id_)
        except NotFoundError:
            return ReadResult(None, {})
        return ReadResult(id_, {**props, **_node_outputs(live)})

    @asks_again
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

    kind = "Policy"

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

    @asks_again
    def create(self, props: dict[str, Any]) -> CreateResult:
        live = self._live()
        if props["mode"] == "apply":
            self._write(props["policy"], live, None, bool(props.get("overwriteExisting")))
            live = props["policy"]
        return CreateResult("policy", self._outputs(props, live))

    @survives_outage(_no_change)
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

    @asks_again
    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        live = self._live()
        if news["mode"] == "apply":
            self._write(news["policy"], live, olds.get("appliedSha256"), bool(news.get("overwriteExisting")))
            live = news["policy"]
        return UpdateResult(self._outputs({**news, "appliedSha256": olds.get("appliedSha256")}, live))

    @survives_outage(_as_recorded)
    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        live = self._live()
        return ReadResult(id_, {**props, "liveSha256": sha256(live), "liveDiff": _diff(live, props["policy"])})

    @asks_again
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
