"""The dynamic providers' create/read/diff/update/delete paths against the fake server, both versions."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable

import dill
import pytest
from pulumi.dynamic import Config, ConfigureRequest
from pulumi.dynamic.dynamic import serialize_provider

from headscale_ha.provider.base import (
    StackSettings,
    forget_shared_clients,
)
from headscale_ha.provider.client import (
    CONNECT_TIMEOUT,
    PROBE_RETRIES,
    HeadscaleClient,
    HeadscaleError,
    TransientError,
    UnreachableError,
    UnsupportedError,
    api_key_prefix,
)
from headscale_ha.provider.resources import (
    ApiKeyProvider,
    NodeSettingsProvider,
    PolicyProvider,
    PreAuthKeyProvider,
    ProviderError,
    UserProvider,
    duration,
)
from tests.support.fake_headscale import FakeHeadscale, Unreachable

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


def _live_keys(fake, clock) -> list:
    with fake.lock:
        return [k for k in fake.preauth_keys.values() if not _expired(k, clock)]


def _expired(key, clock) -> bool:
    expiration = getattr(key, "expiration", None)
    return expiration is None or expiration <= clock.now


@pytest.fixture
def providers(client, clock):
    def make(kind):
        return kind().use(client, clock=clock)

    return make


# ------------------------------------------------------------------------------------------------ users


def test_user_lifecycle(providers, client, fake) -> None:
    users = providers(UserProvider)
    props = {"name": "alice", "displayName": "Alice", "email": "a@example.com", "forceDelete": False}
    created = users.create(props)
    assert created.outs["userId"] == created.id
    assert users.read(created.id, created.outs).outs["email"] == "a@example.com"
    assert users.diff(created.id, created.outs, {**props}).changes is False
    renamed = {**props, "name": "alicia"}
    diff = users.diff(created.id, created.outs, renamed)
    assert (diff.changes, diff.replaces) == (True, [])
    users.update(created.id, created.outs, renamed)
    assert client.find_user("alicia") is not None
    assert users.diff(created.id, created.outs, {**props, "email": "b@example.com"}).replaces == ["email"]
    users.delete(created.id, renamed)
    assert client.find_user("alicia") is None
    assert users.read(created.id, renamed).id is None


def test_user_with_nodes_is_kept_without_force(providers, client, fake) -> None:
    users = providers(UserProvider)
    props = {"name": "bob", "displayName": "", "email": "", "forceDelete": False}
    created = users.create(props)
    fake.register_node("laptop", user="bob")
    users.delete(created.id, props)
    assert client.find_user("bob") is not None
    assert [n.name for n in client.list_nodes(user="bob")] == ["laptop"]
    users.delete(created.id, {**props, "forceDelete": True})
    assert client.find_user("bob") is None
    assert client.list_nodes() == []


def test_a_user_with_nodes_refuses_a_change_that_recreates_it(providers, client, fake) -> None:
    users = providers(UserProvider)
    props = {"name": "dora", "displayName": "Dora", "email": "", "forceDelete": False}
    created = users.create(props)
    assert users.diff(created.id, created.outs, {**props, "displayName": "D."}).replaces == ["displayName"]
    fake.register_node("phone", user="dora")
    with pytest.raises(
        ProviderError, match=r"user 'dora': displayName cannot change while it has 1 node\(s\) \(phone\)"
    ):
        users.diff(created.id, created.outs, {**props, "displayName": "D."})
    forced = users.diff(created.id, created.outs, {**props, "displayName": "D.", "forceDelete": True})
    assert forced.replaces == ["displayName"]
    assert users.diff(created.id, created.outs, {**props, "name": "dorothea"}).replaces == []


def test_an_existing_user_is_adopted_with_its_id(providers, client, fake, capsys) -> None:
    """Was `test_existing_user_is_not_adopted_silently` (create refused "already exists ... import it instead").
    Users are the tailnet's, not a site's (issue 24): the site promoted to active finds them in the registry it
    restored and must take them over in one `up`, so a create adopts the user of that name, says so on stderr,
    and touches nothing in Headscale."""
    existing = client.create_user("carol", display_name="Carol", email="carol@example.com")
    fake.register_node("carol-phone", user="carol")
    fake.reset_requests()
    props = {"name": "carol", "displayName": "Carol", "email": "carol@example.com", "forceDelete": False}
    users = providers(UserProvider)
    created = users.create(dict(props))
    assert created.id == existing.id
    assert created.outs == {**props, "userId": existing.id}
    assert [r.method for r in fake.requests] == ["GET"], "adopting writes nothing"
    assert f"User 'carol': adopted the user Headscale already holds (id {existing.id})" in capsys.readouterr().err
    assert users.diff(created.id, created.outs, dict(props)).changes is False
    assert [n.name for n in client.list_nodes(user="carol")] == ["carol-phone"]


def test_an_adopted_user_whose_details_differ_shows_them_live_at_the_next_diff(providers, client, capsys) -> None:
    """The choice for differing details: adopt, record them as they are live, let the next diff show the change
    (the API can only recreate a user, so the diff asks for a replacement, refused while the user has nodes)."""
    existing = client.create_user("erin", display_name="Erin E.")
    props = {"name": "erin", "displayName": "Erin", "email": "erin@example.com", "forceDelete": False}
    users = providers(UserProvider)
    created = users.create(dict(props))
    assert (created.id, created.outs["displayName"], created.outs["email"]) == (existing.id, "Erin E.", "")
    assert "live displayName, email differ from the config" in capsys.readouterr().err
    assert users.diff(created.id, created.outs, dict(props)).replaces == ["displayName", "email"]
    assert client.find_user("erin") == existing, "nothing changed in Headscale"


def test_an_oidc_namesake_is_refused_not_adopted(providers, client, fake) -> None:
    oidc = client.create_user("frida")
    with fake.lock:
        fake.users[int(oidc.id)].provider_id = "https://idp.example.com/frida"
    with pytest.raises(ProviderError, match=r"'frida' exists in Headscale only as an OIDC user"):
        providers(UserProvider).create({"name": "frida", "displayName": "", "email": "", "forceDelete": False})
    assert [u.id for u in client.list_users(name="frida")] == [oidc.id]


def _stack_config(fake, **values) -> ConfigureRequest:
    """A ConfigureRequest as the engine sends it: the whole stack config, structured values as JSON text."""
    config = {"headscale-ha:bootstrapApiKey": fake.admin_key, "headscale-ha:headscaleApiUrl": fake.url}
    for key, value in values.items():
        config[f"headscale-ha:{key}"] = value if isinstance(value, str) else json.dumps(value)
    return ConfigureRequest(Config(config, "headscale-ha"))


def _user_config(force: bool) -> dict:
    return {"publicHostname": "headscale.example.com", "users": [{"name": "bob", "forceDelete": force}]}


@pytest.mark.parametrize("with_nodes", [True, False])
def test_a_demoted_stack_forgets_its_users_and_deletes_nothing(with_nodes: bool, fake, client, capsys) -> None:
    """A demotion (role standby) stops registering users: the engine deletes them with their old state, forceDelete
    and all. The registry is the tailnet's: nothing is deleted, whatever forceDelete says, with or without nodes."""
    bob = client.create_user("bob")
    if with_nodes:
        fake.register_node("bob-laptop", user="bob")
    users = UserProvider()
    users.configure(_stack_config(fake, role="standby", tailnet=_user_config(True)))
    fake.reset_requests()
    users.delete(bob.id, {"name": "bob", "displayName": "", "email": "", "forceDelete": True, "userId": bob.id})
    assert fake.requests == [], "not even a listing"
    assert client.find_user("bob") == bob
    assert len(client.list_nodes(user="bob")) == int(with_nodes)
    assert "forgotten, not deleted in Headscale: this stack's role is standby" in capsys.readouterr().err


def test_a_stack_without_api_access_forgets_its_users(fake, client, capsys) -> None:
    """bootstrapApiKey removed: the users leave the program and the state, not the registry (was: the delete
    failed with "no Headscale API access")."""
    bob = client.create_user("bob")
    users = UserProvider()
    users.configure(ConfigureRequest(Config({"headscale-ha:role": "active"}, "headscale-ha")))
    users.delete(bob.id, {"name": "bob", "forceDelete": True})
    assert client.find_user("bob") == bob
    assert "bootstrapApiKey is not set" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("listed", "in_state", "deleted"),
    [
        (True, False, True),  # a recreate after forceDelete was set: the config's current word
        (False, True, False),  # forceDelete just turned off in the config: not forced
        (None, True, True),  # removed from tailnet.users after forceDelete was set: the state's last word
        (None, False, False),
    ],
)
def test_force_delete_is_the_active_configs_word(listed, in_state, deleted, fake, client) -> None:
    bob = client.create_user("bob")
    fake.register_node("bob-laptop", user="bob")
    tailnet = _user_config(bool(listed)) if listed is not None else {"users": []}
    users = UserProvider()
    users.configure(_stack_config(fake, role="active", tailnet=tailnet))
    users.delete(bob.id, {"name": "bob", "forceDelete": in_state})
    assert (client.find_user("bob") is None) is deleted
    assert (client.list_nodes() == []) is deleted


# ------------------------------------------------------------------------------------------------ pre-auth keys


def test_key_is_created_with_its_secret_and_expiration(providers, clock) -> None:
    keys = providers(PreAuthKeyProvider)
    created = keys.create(dict(KEY_PROPS))
    assert created.outs["key"].startswith("hskey-auth-")
    assert created.outs["keyId"] == created.id
    assert created.outs["prefix"] in created.outs["key"]
    assert created.outs["expiration"] == (clock.now + duration("168h", field="lifetime")).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert keys.diff(created.id, created.outs, dict(KEY_PROPS)).changes is False


@pytest.mark.parametrize(
    ("event", "reason"),
    [("expire", "expired"), ("rotate", "rotation window"), ("vanish", "vanished")],
)
def test_invalid_reusable_keys_are_replaced(event: str, reason: str, providers, client, clock) -> None:
    keys = providers(PreAuthKeyProvider)
    created = keys.create(dict(KEY_PROPS))
    if event == "expire":
        clock.advance(hours=169)
    elif event == "rotate":
        clock.advance(hours=150)
    else:
        client.delete_preauth_key(created.id)
    assert reason in (keys._invalid_reason(created.id, created.outs) or "")
    diff = keys.diff(created.id, created.outs, dict(KEY_PROPS))
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["expiration"], False)


@pytest.mark.parametrize(("policy", "replaced"), [("always", True), ("reusableOnly", False), ("never", False)])
def test_used_single_use_keys_follow_the_recreate_policy(policy: str, replaced: bool, providers, client, fake) -> None:
    client.create_user("dave")
    props = {**KEY_PROPS, "user": "dave", "reusable": False, "aclTags": [], "recreateIfInvalid": policy}
    keys = providers(PreAuthKeyProvider)
    created = keys.create(props)
    fake.register_node("phone", preauth_key=created.outs["key"])
    assert keys._invalid_reason(created.id, created.outs) == "used (single-use)"
    assert bool(keys.diff(created.id, created.outs, props).replaces) is replaced


def test_a_router_replica_key_is_single_use_and_replaced_once_used_or_expired(providers, client, fake, clock) -> None:
    """The routers' per-replica keys (components/tailnet_objects.py): tagged, single-use, `always` recreated.

    Once its replica enrolled, the key is refused to anyone else and the next up replaces it; Pulumi creates the
    new key, then deletes the used one, and the enrolled node stays. An unused key that expired is replaced too,
    so a replica whose state is lost finds a live key after the next up.
    """
    props = {
        **KEY_PROPS,
        "reusable": False,
        "aclTags": ["tag:subnet-router-hydra"],
        "lifetime": "1h",
        "rotateBefore": "30m",
        "recreateIfInvalid": "always",
    }
    keys = providers(PreAuthKeyProvider)
    first = keys.create(dict(props))
    assert keys.diff(first.id, first.outs, dict(props)).changes is False, "a fresh unused key is kept"
    node = fake.register_node("hydra-subnet-router-0", preauth_key=first.outs["key"])
    with pytest.raises(ValueError, match="already used"):
        fake.register_node("intruder", preauth_key=first.outs["key"])
    assert keys.diff(first.id, first.outs, dict(props)).replaces == ["expiration"]
    second = keys.create(dict(props))  # create-before-delete, as Pulumi replaces it
    keys.delete(first.id, first.outs)
    assert [n.id for n in client.list_nodes()] == [node], "deleting the used key keeps the node it enrolled"
    assert sorted(client.list_nodes()[0].tags) == ["tag:subnet-router-hydra"]
    clock.advance(minutes=61)
    assert keys._invalid_reason(second.id, second.outs) == "expired"
    assert keys.diff(second.id, second.outs, dict(props)).replaces == ["expiration"]
    with pytest.raises(ValueError, match="expired"):
        fake.register_node("late", preauth_key=second.outs["key"])


def test_changed_inputs_replace_the_key(providers) -> None:
    keys = providers(PreAuthKeyProvider)
    created = keys.create(dict(KEY_PROPS))
    diff = keys.diff(created.id, created.outs, {**KEY_PROPS, "aclTags": ["tag:other"]})
    assert diff.replaces == ["aclTags"]
    settings_only = keys.diff(created.id, created.outs, {**KEY_PROPS, "rotateBefore": "48h"})
    assert (settings_only.changes, settings_only.replaces) == (True, [])


def test_delete_expires_then_removes_the_key(providers, client, fake, clock) -> None:
    keys = providers(PreAuthKeyProvider)
    created = keys.create(dict(KEY_PROPS))
    keys.delete(created.id, created.outs)
    assert created.id not in {k.id for k in client.list_preauth_keys()}
    keys.delete(created.id, created.outs)  # already gone: nothing to do, no error
    expire_first = [r.path for r in fake.requests if r.method != "GET"][-2:]
    assert expire_first[0].endswith("/expire") or "preauthkey" in expire_first[0]


def test_check_reports_bad_settings(providers) -> None:
    result = providers(PreAuthKeyProvider).check({}, {**KEY_PROPS, "lifetime": "a week", "aclTags": []})
    fields = sorted(f.property for f in result.failures)
    assert fields == ["aclTags", "lifetime"]


@pytest.mark.parametrize("kind", ["reset", "status", "malformed"])
def test_a_lost_create_response_leaves_no_second_live_key(kind: str, providers, fake, clock) -> None:
    keys = providers(PreAuthKeyProvider)
    fake.inject(path="/api/v1/preauthkey$", method="POST", kind=kind, status=503, after_apply=True)
    with pytest.raises(TransientError) as caught:
        keys.create(dict(KEY_PROPS))
    assert "CreatePreAuthKey" in str(caught.value)
    assert _live_keys(fake, clock) == [], "the key minted by the lost call was expired"
    created = keys.create(dict(KEY_PROPS))
    assert [str(k.id) for k in _live_keys(fake, clock)] == [created.id]


# ------------------------------------------------------------------------------------------------ API keys


def test_api_key_lifecycle_and_rotation(providers, client, clock) -> None:
    api_keys = providers(ApiKeyProvider)
    props = {"lifetime": "90d", "rotateBefore": "14d"}
    created = api_keys.create(dict(props))
    assert created.outs["key"].startswith("hskey-api-")
    assert created.outs["key"][len("hskey-api-") :].startswith(created.outs["prefix"])
    assert api_keys.diff(created.id, created.outs, dict(props)).changes is False
    clock.advance(days=80)
    assert api_keys.diff(created.id, created.outs, dict(props)).replaces == ["expiration"]
    api_keys.delete(created.id, created.outs)
    assert created.outs["prefix"] not in {k.prefix for k in client.list_api_keys()}


def test_a_lost_api_key_response_expires_the_orphan(providers, fake, client, clock) -> None:
    before = {k.prefix for k in client.list_api_keys()}
    fake.inject(path="/api/v1/apikey$", method="POST", kind="reset", after_apply=True)
    with pytest.raises(TransientError):
        providers(ApiKeyProvider).create({"lifetime": "90d", "rotateBefore": "14d"})
    assert {k.prefix for k in client.list_api_keys()} == before


# ------------------------------------------------------------------------------------------------ nodes


def test_node_settings_apply_detect_drift_and_delete(providers, client, fake) -> None:
    client.create_user("erin")
    fake.register_node("router-0", user="erin", available_routes=["10.0.0.0/24", "10.1.0.0/24"])
    nodes = providers(NodeSettingsProvider)
    props = {
        "nodeName": "router-0",
        "user": "erin",
        "tags": None,
        "approvedRoutes": ["10.0.0.0/24"],
        "givenName": "edge-router",
        "deleteOnDestroy": False,
    }
    created = nodes.create(dict(props))
    live = client.get_node(created.id)
    assert (live.approved_routes, live.given_name) == (("10.0.0.0/24",), "edge-router")
    assert nodes.diff(created.id, created.outs, dict(props)).changes is False
    client.set_approved_routes(created.id, [])  # someone changed it by hand
    assert nodes.diff(created.id, created.outs, dict(props)).changes is True
    nodes.update(created.id, created.outs, dict(props))
    assert client.get_node(created.id).approved_routes == ("10.0.0.0/24",)
    nodes.delete(created.id, props)
    assert client.get_node(created.id).name == "router-0", "kept unless deleteOnDestroy"
    nodes.delete(created.id, {**props, "deleteOnDestroy": True})
    assert client.list_nodes() == []


def test_node_selection_must_be_unambiguous(providers, fake) -> None:
    with pytest.raises(ProviderError, match="expected exactly one node named 'ghost', found 0"):
        providers(NodeSettingsProvider).create({"nodeName": "ghost", "user": None})


def test_node_tags_are_set(providers, client, fake) -> None:
    client.set_policy('{"tagOwners": {"tag:server": ["frank@"]}}')  # tags must be owned to be set
    client.create_user("frank")
    fake.register_node("server-1", user="frank")
    nodes = providers(NodeSettingsProvider)
    created = nodes.create({"nodeName": "server-1", "user": "frank", "tags": ["tag:server"], "deleteOnDestroy": False})
    assert client.get_node(created.id).tags == ("tag:server",)


# ------------------------------------------------------------------------------------------------ policy


def _policy_props(mode: str = "apply", **extra) -> dict:
    return {"policy": POLICY, "mode": mode, "overwriteExisting": False, "resetOnDestroy": False, **extra}


def test_apply_writes_and_a_no_op_diff_reads_once(providers, client, fake) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(_policy_props())
    assert client.get_policy().text == POLICY
    assert created.outs["appliedSha256"] == hashlib.sha256(POLICY.encode()).hexdigest()
    fake.reset_requests()
    assert policies.diff("policy", created.outs, _policy_props()).changes is False
    assert [(r.method, r.path) for r in fake.requests] == [("GET", "/api/v1/policy")]


def test_dry_run_writes_nothing_and_shows_the_diff(providers, client, fake) -> None:
    client.set_policy(OTHER_POLICY)
    fake.reset_requests()
    created = providers(PolicyProvider).create(_policy_props("dryRun"))
    assert all(r.method == "GET" for r in fake.requests)
    assert client.get_policy().text == OTHER_POLICY
    assert "-" + OTHER_POLICY in created.outs["liveDiff"]
    assert "+" + POLICY in created.outs["liveDiff"]


def test_a_policy_edited_elsewhere_is_not_overwritten(providers, client) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(_policy_props())
    client.set_policy(OTHER_POLICY)  # e.g. an edit in Headplane
    assert policies.diff("policy", created.outs, _policy_props()).changes is True
    with pytest.raises(ProviderError, match="differs from the one this stack last applied"):
        policies.update("policy", created.outs, _policy_props())
    assert client.get_policy().text == OTHER_POLICY
    policies.update("policy", created.outs, _policy_props(overwriteExisting=True))
    assert client.get_policy().text == POLICY


def test_an_existing_foreign_policy_blocks_the_first_apply(providers, client) -> None:
    client.set_policy(OTHER_POLICY)
    with pytest.raises(ProviderError, match="overwriteExisting"):
        providers(PolicyProvider).create(_policy_props())
    assert client.get_policy().text == OTHER_POLICY


def test_a_lost_set_response_is_not_mistaken_for_a_foreign_edit(providers, client, fake) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(_policy_props())
    newer = POLICY.replace("alice@:*", "alice@:22")
    # Every attempt (the first and both retries) is applied, and every answer is lost.
    fake.inject(path="/api/v1/policy", method="PUT", kind="reset", after_apply=True, times=3)
    with pytest.raises(TransientError):
        policies.update("policy", created.outs, _policy_props(policy=newer))
    # The write happened; the next run finds it live and treats it as applied.
    updated = policies.update("policy", created.outs, _policy_props(policy=newer))
    assert updated.outs["appliedSha256"] == hashlib.sha256(newer.encode()).hexdigest()


def test_an_invalid_policy_is_refused_before_anything_changes(providers, client) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(_policy_props())
    with pytest.raises(HeadscaleError):
        policies.update("policy", created.outs, _policy_props(policy="{not json"))
    assert client.get_policy().text == POLICY


def test_destroy_leaves_the_policy_unless_asked(providers, client) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(_policy_props())
    policies.delete("policy", created.outs)
    assert client.get_policy().text == POLICY
    policies.delete("policy", {**created.outs, "resetOnDestroy": True})
    assert client.get_policy().text == "{}"


def test_file_mode_servers_refuse_with_their_message(clock) -> None:
    from headscale_ha.provider.client import HeadscaleClient
    from tests.support.fake_headscale import FakeHeadscale

    with FakeHeadscale(version="0.29.2", policy_mode="file", now=clock) as server:
        server.policy_text = "{}"  # the file the server was started with
        client = HeadscaleClient(server.url, server.admin_key, retries=0)
        with pytest.raises(HeadscaleError, match="update is disabled for modes other than 'database'"):
            PolicyProvider().use(client, clock=clock).create(_policy_props())


# ------------------------------------------------------------------------------------------------ serialization


def test_configured_providers_pickle_without_their_key(fake) -> None:
    provider = PreAuthKeyProvider(api_url=fake.url, version=fake.version)
    provider.configure(ConfigureRequest(Config({"headscale-ha:bootstrapApiKey": fake.admin_key}, "headscale-ha")))
    assert provider.client is not None
    blob = serialize_provider(provider)
    raw = base64.b64decode(blob)
    assert fake.admin_key.encode() not in raw
    restored = dill.loads(raw)
    assert (restored.api_url, restored.version, restored._client) == (fake.url, fake.version, None)
    with pytest.raises(ProviderError, match="bootstrapApiKey"):
        _ = restored.client


def test_a_create_that_times_out_but_lands_late_leaves_no_live_key(fake, clock) -> None:
    from headscale_ha.provider.client import HeadscaleClient

    slow = HeadscaleClient(fake.url, fake.admin_key, timeout=0.4, retries=0)
    keys = PreAuthKeyProvider().use(slow, clock=clock)
    fake.inject(path="/api/v1/preauthkey", method="POST", kind="latency", delay=0.6)
    with pytest.raises(TransientError):
        keys.create(dict(KEY_PROPS))
    assert _live_keys(fake, clock) == [], "the key the server minted after the timeout was expired too"


def test_every_resource_reads_its_live_state(providers, client, fake) -> None:
    user = providers(UserProvider).create({"name": "gina", "displayName": "G", "email": "", "forceDelete": False})
    key_provider = providers(PreAuthKeyProvider)
    key = key_provider.create(dict(KEY_PROPS))
    api_provider = providers(ApiKeyProvider)
    api = api_provider.create({"lifetime": "90d", "rotateBefore": "14d"})
    fake.register_node("box", user="gina")
    node_provider = providers(NodeSettingsProvider)
    node = node_provider.create({"nodeName": "box", "user": "gina", "givenName": "box-1", "deleteOnDestroy": False})
    policy_provider = providers(PolicyProvider)
    policy = policy_provider.create(_policy_props("dryRun"))
    assert providers(UserProvider).read(user.id, user.outs).outs["displayName"] == "G"
    assert key_provider.read(key.id, key.outs).outs["expiration"] == key.outs["expiration"]
    assert api_provider.read(api.id, api.outs).id == api.id
    assert node_provider.read(node.id, node.outs).outs["liveName"] == "box-1"
    assert policy_provider.read("policy", policy.outs).outs["liveSha256"] == hashlib.sha256(b"").hexdigest()
    client.delete_preauth_key(key.id)
    api_provider.delete(api.id, api.outs)
    client.delete_node(node.id)
    assert key_provider.read(key.id, key.outs).id is None
    assert api_provider.read(api.id, api.outs).id is None
    assert node_provider.read(node.id, node.outs).id is None


# ------------------------------------------------------------------------------------------------ live version


def _configured(kind, fake, version: str):
    provider = kind(api_url=fake.url, version=version)
    provider.configure(ConfigureRequest(Config({"headscale-ha:bootstrapApiKey": fake.admin_key}, "headscale-ha")))
    return provider


@pytest.mark.parametrize(
    ("server", "reported", "pin", "fragment"),
    [
        ("0.28.0", None, "0.29.2", "runs v0.28.0 (minor 0.28) but the stack pins 0.29"),
        ("0.29.2", None, "0.28.0", "runs v0.29.2 (minor 0.29) but the stack pins 0.28"),
        ("0.29.2", "v0.27.1", "0.29.2", "runs v0.27.1, which this provider does not speak (0.28, 0.29)"),
        ("0.29.2", "v0.30.0", "0.29.2", "runs v0.30.0, which this provider does not speak (0.28, 0.29)"),
    ],
)
def test_providers_refuse_a_server_that_is_not_the_pinned_release(server, reported, pin, fragment, clock) -> None:
    with FakeHeadscale(version=server, reported_version=reported, now=clock) as fake:
        policies = _configured(PolicyProvider, fake, pin)
        with pytest.raises(UnsupportedError) as caught:
            policies.create(_policy_props())
        assert fragment in str(caught.value)
        keys = _configured(PreAuthKeyProvider, fake, pin)
        with pytest.raises(UnsupportedError, match=r"does not speak|but the stack pins"):
            keys.create(dict(KEY_PROPS))
        assert [r.path for r in fake.requests] == ["/version"] * 2, "asked once per write, nothing read or written"
        assert fake.policy_text is None


def test_every_provider_of_a_run_shares_one_client_and_one_fetch_per_listing(fake, clock) -> None:
    """As the engine does: several resources of several kinds diffed on parallel threads of one process."""
    seeded = _configured(PreAuthKeyProvider, fake, fake.version)
    created = [seeded.use(seeded.client, clock=clock).create(dict(KEY_PROPS)) for _ in range(3)]
    fake.reset_requests()
    forget_shared_clients()  # a new run
    keys = _configured(PreAuthKeyProvider, fake, fake.version)
    users = _configured(UserProvider, fake, fake.version)
    assert keys.client is users.client, "one client per server, key and pin in a process"
    keys.use(keys.client, clock=clock)
    fake.inject(path="/api/v1/preauthkey", method="GET", kind="latency", delay=0.3, times=1)
    start = threading.Barrier(len(created) + 2)
    errors: list[BaseException] = []

    def diff_key(result) -> None:
        start.wait()
        try:
            keys.diff(result.id, result.outs, dict(KEY_PROPS))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def read_user() -> None:
        start.wait()
        users.read("1", {"name": "nobody"})

    threads = [threading.Thread(target=diff_key, args=(c,)) for c in created]
    threads += [threading.Thread(target=read_user) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    paths = [r.path for r in fake.requests]
    assert paths.count("/version") == 1
    assert paths.count("/api/v1/preauthkey") == 1
    assert paths.count("/api/v1/user") == 1


# ------------------------------------------------------------------------------------------------ orphan clean-up

ROUTER_KEY = {**KEY_PROPS, "reusable": False, "aclTags": ["tag:subnet-router-hydra"], "recreateIfInvalid": "always"}


def test_a_failed_second_replica_key_keeps_the_first(providers, fake, clock, capsys) -> None:
    """Issue 24's reproduction: the routers' keys are alike (same tag, single-use, same lifetime, same second) and
    the second one's answer is lost after the server minted it. Only that key is expired: the clean-up matches the
    request's marked expiration, to the microsecond, not "same tags within 2 s"."""
    keys = providers(PreAuthKeyProvider)
    first = keys.create(dict(ROUTER_KEY))
    fake.inject(path="/api/v1/preauthkey", method="POST", kind="status", status=503, after_apply=True)
    with pytest.raises(TransientError, match="CreatePreAuthKey"):
        keys.create(dict(ROUTER_KEY))
    assert [str(k.id) for k in _live_keys(fake, clock)] == [first.id], "the first replica's key is kept"
    with fake.lock:
        assert len(fake.preauth_keys) == 1, "the orphan was expired and deleted"
    assert "expired the key that call minted" in capsys.readouterr().err
    assert keys.diff(first.id, first.outs, dict(ROUTER_KEY)).changes is False


def test_keys_carry_a_marker_expiration_of_their_own(providers, fake) -> None:
    keys = providers(PreAuthKeyProvider)
    created = [keys.create(dict(ROUTER_KEY)) for _ in range(3)]
    sent = [r.body["expiration"] for r in fake.requests if r.method == "POST" and r.path == "/api/v1/preauthkey"]
    assert len(set(sent)) == 3
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", text) for text in sent)
    assert len({c.outs["expiration"] for c in created}) == 1, "outputs keep whole seconds"


def test_a_failed_api_key_create_expires_only_its_own_key(providers, fake, client, clock) -> None:
    """The API-key variant used to expire any key that appeared since its listing; now only the marked one."""
    api_keys = providers(ApiKeyProvider)
    mine = api_keys.create({"lifetime": "90d", "rotateBefore": "14d"})
    foreign = api_key_prefix(fake.add_api_key(expiration=clock.now + duration("90d", field="lifetime")))
    fake.inject(path="/api/v1/apikey", method="POST", kind="status", status=503, after_apply=True)
    with pytest.raises(TransientError):
        api_keys.create({"lifetime": "90d", "rotateBefore": "14d"})
    live = {k.prefix for k in client.list_api_keys() if not k.expired(clock.now)}
    assert live == {api_key_prefix(fake.admin_key), mine.outs["prefix"], foreign}


def test_a_create_that_was_not_sent_cleans_up_nothing(fake, clock) -> None:
    with Unreachable("refuse") as down:
        keys = PreAuthKeyProvider().use(HeadscaleClient(down.url, "k", backoff=0.0), clock=clock)
        with pytest.raises(UnreachableError, match=rf"{down.url} is unreachable: connection refused"):
            keys.create(dict(ROUTER_KEY))
        assert keys.client.calls.by_call == {"Version": 2}, "no listing for orphans: nothing can have been minted"


# ------------------------------------------------------------------------------------------------ an unreachable server

USER = {"name": "alice", "displayName": "", "email": "", "forceDelete": False}
API_KEY_PROPS = {"lifetime": "90d", "rotateBefore": "14d", "prefix": "abcdefghijkl"}
NODE = {"nodeName": "box", "user": None, "tags": None, "approvedRoutes": None, "givenName": None}


def _every_resource() -> list[tuple[type, str, dict]]:
    """One resource of each kind, as its state would hold it."""
    return [
        (UserProvider, "1", USER),
        (PreAuthKeyProvider, "2", ROUTER_KEY),
        (ApiKeyProvider, "3", API_KEY_PROPS),
        (NodeSettingsProvider, "4", {**NODE, "deleteOnDestroy": False}),
        (PolicyProvider, "policy", {**_policy_props(), "liveSha256": "x"}),
    ]


def _down_config(url: str, **values) -> ConfigureRequest:
    config = {"headscale-ha:bootstrapApiKey": "hskey-api-abcdefghijkl-" + "s" * 64, "headscale-ha:headscaleApiUrl": url}
    config["headscale-ha:headscale"] = json.dumps({"version": "0.29.2"})
    config.update(values)
    return ConfigureRequest(Config(config, "headscale-ha"))


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_diff_and_read_survive_a_server_that_does_not_answer(mode: str, capsys) -> None:
    """What a preview of the promotion does with the lost active's URL: every diff and read reports no change and
    says why on stderr; the version probe is sent once for the whole run, and the run takes one connect timeout at
    most (blackhole: the default CONNECT_TIMEOUT, 3 s) instead of one per resource."""
    with Unreachable(mode) as down:
        started = time.monotonic()
        clients = set()
        for kind, id_, props in _every_resource():
            provider = kind()
            provider.configure(_down_config(down.url))
            clients.add(id(provider.client))
            diff = provider.diff(id_, dict(props), dict(props))
            assert (diff.changes, diff.replaces) == (False, [])
            read = provider.read(id_, dict(props))
            assert (read.id, read.outs) == (id_, props)
        elapsed = time.monotonic() - started
        (client,) = {provider.client}
    assert len(clients) == 1, "one client for the server: one probe, one remembered failure"
    assert client.calls.by_call == {"Version": 1 + PROBE_RETRIES if mode == "refuse" else 1}
    assert elapsed < (1.5 if mode == "refuse" else CONNECT_TIMEOUT + 1.5)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 9, "one line per diff and per read that needed the server (a user's diff does not)"
    assert all(down.url in line and "reports no change" in line for line in lines)
    assert all("s" * 20 not in line for line in lines), "never the key"
    assert "User 1: read reports no change" in lines[0]
    assert "PreAuthKey 2: diff reports no change" in lines[1]


def _write_fails_fast(down: Unreachable, write: Callable[[], object]) -> None:
    started = time.monotonic()
    with pytest.raises(UnreachableError, match=re.escape(down.url)):
        write()
    assert time.monotonic() - started < 1.0, "one probe (and its one retry), never a success"


def test_writes_fail_fast_naming_the_url() -> None:
    """Each write asks the server once more (it may be back) and fails at once when it is not."""
    with Unreachable("refuse") as down:
        for kind, id_, props in _every_resource():
            provider = kind()
            provider.configure(_down_config(down.url))
            provider.client.backoff = 0.01  # the shared client's pause before its one retry (0.5 s): kept short here
            _write_fails_fast(down, lambda p=provider, v=props: p.create(dict(v)))
            gone = dict(props) | {"deleteOnDestroy": True, "resetOnDestroy": True}
            _write_fails_fast(down, lambda p=provider, i=id_, v=gone: p.delete(i, v))
        users = UserProvider()
        users.configure(_down_config(down.url))
        _write_fails_fast(down, lambda: users.update("1", USER, {**USER, "name": "alicia"}))
        assert users.client.calls.by_call == {"Version": 11 * (1 + PROBE_RETRIES)}


def test_a_server_back_within_the_memory_is_written_to(fake, clock, capsys) -> None:
    """A crash-looping Headscale that the same `up` fixes (or an upgrade that rolls out meanwhile): the diffs that
    ran while it failed reported no change; the create that comes after the rollout asks again and succeeds."""
    keys = PreAuthKeyProvider(version=fake.version)
    keys.configure(_stack_config(fake))
    keys.use(keys.client, clock=clock)
    created = keys.create(dict(ROUTER_KEY))
    forget_shared_clients()
    keys.configure(_stack_config(fake))
    keys.use(keys.client, clock=clock)
    fake.inject(path="/version", kind="status", status=503, times=1 + PROBE_RETRIES)
    assert keys.diff(created.id, created.outs, dict(ROUTER_KEY)).changes is False
    assert keys.read(created.id, created.outs).outs == created.outs, "remembered: not asked again"
    assert "is not serving" in capsys.readouterr().err
    second = keys.create(dict(ROUTER_KEY))
    assert {str(k.id) for k in _live_keys(fake, clock)} == {created.id, second.id}
    assert [r.path for r in fake.requests].count("/version") == 2 + (1 + PROBE_RETRIES)


def test_a_half_upgraded_server_is_diffed_as_unchanged_and_written_to_never(fake, clock, capsys) -> None:
    """Preview of a minor upgrade: the config pins the new minor, the server still runs the old one."""
    other = "0.28.0" if fake.version == "0.29.2" else "0.29.2"
    seeded = PreAuthKeyProvider().use(HeadscaleClient(fake.url, fake.admin_key), clock=clock)
    created = seeded.create(dict(ROUTER_KEY))
    keys = PreAuthKeyProvider(version=fake.version)
    keys.configure(_stack_config(fake, headscale={"version": other}))
    assert keys.diff(created.id, created.outs, dict(ROUTER_KEY)).changes is False
    assert keys.read(created.id, created.outs).outs == created.outs
    assert f"but the stack pins {other.rsplit('.', 1)[0]}" in capsys.readouterr().err
    with pytest.raises(UnsupportedError, match="but the stack pins"):
        keys.delete(created.id, created.outs)
    assert [str(k.id) for k in _live_keys(fake, clock)] == [created.id]


# ------------------------------------------------------------------------------------------------ the config decides


def test_the_stack_config_wins_over_the_pickled_url_and_pin(fake, clock) -> None:
    """A resource created before a minor upgrade (or a URL change) carries the old provider in its state; its read,
    diff and delete run with the config of today."""
    other = "0.28.0" if fake.version == "0.29.2" else "0.29.2"
    with Unreachable("refuse") as old:
        created = (
            PreAuthKeyProvider().use(HeadscaleClient(fake.url, fake.admin_key), clock=clock).create(dict(ROUTER_KEY))
        )
        stale = dill.loads(base64.b64decode(serialize_provider(PreAuthKeyProvider(api_url=old.url, version=other))))
        stale.configure(_stack_config(fake, headscale={"version": fake.version}))
        assert (stale.client.base_url, stale.client.version) == (fake.url, fake.version.rsplit(".", 1)[0])
        stale.use(stale.client, clock=clock)
        assert stale.diff(created.id, created.outs, dict(ROUTER_KEY)).changes is False
        assert stale.read(created.id, created.outs).id == created.id
        stale.delete(created.id, created.outs)
    assert _live_keys(fake, clock) == []


def test_the_pickled_url_and_pin_are_the_fallback(fake) -> None:
    provider = PolicyProvider(api_url=fake.url, version=fake.version)
    provider.configure(ConfigureRequest(Config({"headscale-ha:bootstrapApiKey": fake.admin_key}, "headscale-ha")))
    assert (provider.client.base_url, provider.client.version) == (fake.url, fake.version.rsplit(".", 1)[0])


def test_stack_settings_read_what_the_engine_sends() -> None:
    tailnet = {"publicHostname": "headscale.example.com", "users": [{"name": "alice", "forceDelete": True}]}
    config = Config(
        {
            "headscale-ha:tailnet": json.dumps(tailnet),
            "headscale-ha:headscale": json.dumps({"version": "0.29.2", "image": "x"}),
            "headscale-ha:role": "active",
        },
        "headscale-ha",
    )
    settings = StackSettings.from_config(config)
    assert settings.api_url == "https://headscale.example.com", "program/args.py api_url's default"
    assert (settings.version, settings.role) == ("0.29.2", "active")
    assert settings.users == {"alice": {"name": "alice", "forceDelete": True}}
    explicit = StackSettings.from_config(Config({"headscale-ha:headscaleApiUrl": "http://10.0.0.1:8080"}, "p"))
    assert (explicit.api_url, explicit.version, explicit.users) == ("http://10.0.0.1:8080", None, None)
    assert StackSettings.from_config(Config({"headscale-ha:headscale": "{not json"}, "p")).version is None
