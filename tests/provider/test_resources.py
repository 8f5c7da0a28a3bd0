"""The dynamic providers' create/read/diff/update/delete paths against the fake server, both versions.

The providers and the server itself (its release, a server that does not answer, the server the stack config names)
are tested in test_resources_server.py; the sample properties both modules use are in
tests/support/provider_resources.py.
"""

from __future__ import annotations

import base64
import hashlib
import re

import dill
import pytest
from pulumi.dynamic import Config, ConfigureRequest

from headscale_ha.provider.client import (
    HeadscaleClient,
    HeadscaleError,
    TransientError,
    UnreachableError,
)
from headscale_ha.provider.records import api_key_prefix
from headscale_ha.provider.resources import (
    ApiKeyProvider,
    NodeSettingsProvider,
    PolicyProvider,
    PreAuthKeyProvider,
    ProviderError,
    UserProvider,
    duration,
)
from tests.models.headscale import Unreachable
from tests.support.provider_resources import (
    KEY_PROPS,
    OTHER_POLICY,
    POLICY,
    ROUTER_KEY,
    live_keys,
    policy_props,
    stack_config,
)
from tools.pulumi_internals import serialize_provider


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
    users.configure(stack_config(fake, role="standby", tailnet=_user_config(True)))
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
    users.configure(stack_config(fake, role="active", tailnet=tailnet))
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
    assert live_keys(fake, clock) == [], "the key minted by the lost call was expired"
    created = keys.create(dict(KEY_PROPS))
    assert [str(k.id) for k in live_keys(fake, clock)] == [created.id]


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


def test_apply_writes_and_a_no_op_diff_reads_once(providers, client, fake) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(policy_props())
    assert client.get_policy().text == POLICY
    assert created.outs["appliedSha256"] == hashlib.sha256(POLICY.encode()).hexdigest()
    fake.reset_requests()
    assert policies.diff("policy", created.outs, policy_props()).changes is False
    assert [(r.method, r.path) for r in fake.requests] == [("GET", "/api/v1/policy")]


def test_dry_run_writes_nothing_and_shows_the_diff(providers, client, fake) -> None:
    client.set_policy(OTHER_POLICY)
    fake.reset_requests()
    created = providers(PolicyProvider).create(policy_props("dryRun"))
    assert all(r.method == "GET" for r in fake.requests)
    assert client.get_policy().text == OTHER_POLICY
    assert "-" + OTHER_POLICY in created.outs["liveDiff"]
    assert "+" + POLICY in created.outs["liveDiff"]


def test_a_policy_edited_elsewhere_is_not_overwritten(providers, client) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(policy_props())
    client.set_policy(OTHER_POLICY)  # e.g. an edit in Headplane
    assert policies.diff("policy", created.outs, policy_props()).changes is True
    with pytest.raises(ProviderError, match="differs from the one this stack last applied"):
        policies.update("policy", created.outs, policy_props())
    assert client.get_policy().text == OTHER_POLICY
    policies.update("policy", created.outs, policy_props(overwriteExisting=True))
    assert client.get_policy().text == POLICY


def test_an_existing_foreign_policy_blocks_the_first_apply(providers, client) -> None:
    client.set_policy(OTHER_POLICY)
    with pytest.raises(ProviderError, match="overwriteExisting"):
        providers(PolicyProvider).create(policy_props())
    assert client.get_policy().text == OTHER_POLICY


def test_a_lost_set_response_is_not_mistaken_for_a_foreign_edit(providers, client, fake) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(policy_props())
    newer = POLICY.replace("alice@:*", "alice@:22")
    # Every attempt (the first and both retries) is applied, and every answer is lost.
    fake.inject(path="/api/v1/policy", method="PUT", kind="reset", after_apply=True, times=3)
    with pytest.raises(TransientError):
        policies.update("policy", created.outs, policy_props(policy=newer))
    # The write happened; the next run finds it live and treats it as applied.
    updated = policies.update("policy", created.outs, policy_props(policy=newer))
    assert updated.outs["appliedSha256"] == hashlib.sha256(newer.encode()).hexdigest()


def test_an_invalid_policy_is_refused_before_anything_changes(providers, client) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(policy_props())
    with pytest.raises(HeadscaleError):
        policies.update("policy", created.outs, policy_props(policy="{not json"))
    assert client.get_policy().text == POLICY


def test_destroy_leaves_the_policy_unless_asked(providers, client) -> None:
    policies = providers(PolicyProvider)
    created = policies.create(policy_props())
    policies.delete("policy", created.outs)
    assert client.get_policy().text == POLICY
    policies.delete("policy", {**created.outs, "resetOnDestroy": True})
    assert client.get_policy().text == "{}"


def test_file_mode_servers_refuse_with_their_message(clock) -> None:
    from headscale_ha.provider.client import HeadscaleClient
    from tests.models.headscale import FakeHeadscale

    with FakeHeadscale(version="0.29.2", policy_mode="file", now=clock) as server:
        server.policy_text = "{}"  # the file the server was started with
        client = HeadscaleClient(server.url, server.admin_key, retries=0)
        with pytest.raises(HeadscaleError, match="update is disabled for modes other than 'database'"):
            PolicyProvider().use(client, clock=clock).create(policy_props())


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
    assert live_keys(fake, clock) == [], "the key the server minted after the timeout was expired too"


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
    policy = policy_provider.create(policy_props("dryRun"))
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


# ------------------------------------------------------------------------------------------------ orphan clean-up


def test_a_failed_second_replica_key_keeps_the_first(providers, fake, clock, capsys) -> None:
    """Issue 24's reproduction: the routers' keys are alike (same tag, single-use, same lifetime, same second) and
    the second one's answer is lost after the server minted it. Only that key is expired: the clean-up matches the
    request's marked expiration, to the microsecond, not "same tags within 2 s"."""
    keys = providers(PreAuthKeyProvider)
    first = keys.create(dict(ROUTER_KEY))
    fake.inject(path="/api/v1/preauthkey", method="POST", kind="status", status=503, after_apply=True)
    with pytest.raises(TransientError, match="CreatePreAuthKey"):
        keys.create(dict(ROUTER_KEY))
    assert [str(k.id) for k in live_keys(fake, clock)] == [first.id], "the first replica's key is kept"
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
        keys = PreAuthKeyProvider().use(HeadscaleClient(down.url, "k", backoff=0.0, write_patience=0), clock=clock)
        with pytest.raises(UnreachableError, match=rf"{down.url} is unreachable: connection refused"):
            keys.create(dict(ROUTER_KEY))
        assert keys.client.calls.by_call == {"Version": 2}, "no listing for orphans: nothing can have been minted"
