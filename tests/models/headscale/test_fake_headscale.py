"""The fake Headscale: real-server quirks over plain HTTP for 0.28 and 0.29, fault injection, and clean lifecycles.

Every test's traffic is checked against the release's swagger by the fake itself; the ``fake`` fixture fails a test
that leaves contract violations behind, so tests that break the contract on purpose assert and clear them.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

import tests.models.headscale.server as fake_module
from tests.models.headscale import TAGGED_DEVICES_USER_ID, FakeHeadscale
from tests.support.headscale_samples import POLICY_REFUSALS

VERSIONS = ("0.28.0", "0.29.2")
API_KEY_RE = re.compile(r"hskey-api-([A-Za-z0-9_-]{12})-[A-Za-z0-9_-]{64}")
AUTH_KEY_RE = re.compile(r"hskey-auth-([A-Za-z0-9_-]{12})-[A-Za-z0-9_-]{64}")
FUTURE = "2099-01-01T00:00:00Z"
ZERO = "0001-01-01T00:00:00Z"


class Api:
    """A bearer-authenticated session against one fake; ``api("GET", "/user")`` hits ``/api/v1/user``."""

    def __init__(self, fake: FakeHeadscale, key: str | None = None) -> None:
        self.fake = fake
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key or fake.admin_key}"

    def __call__(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 5)
        return self.session.request(method, f"{self.fake.url}/api/v1{path}", **kwargs)

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self(method, path, **kwargs)
        assert response.status_code == 200, response.text
        return response.json()


def assert_error(response: requests.Response, status: int, code: int, message: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {"code": code, "message": message, "details": []}


def take_violations(fake: FakeHeadscale) -> list[str]:
    """The violations recorded so far (and forget them); empty when this machine has no swagger files."""
    found = list(fake.contract_violations)
    fake.contract_violations.clear()
    return found if fake.contract is not None else ["(no swagger)"]


@pytest.fixture(params=VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def fake(version: str) -> Iterator[FakeHeadscale]:
    server = FakeHeadscale(version=version).start()
    yield server
    server.stop()
    assert server.contract_violations == [], "the test's traffic broke the swagger contract"


@pytest.fixture
def api(fake: FakeHeadscale) -> Iterator[Api]:
    client = Api(fake)
    yield client
    client.session.close()


def make_user(api: Api, name: str = "alice", **fields: str) -> str:
    return api.ok("POST", "/user", json={"name": name, **fields})["user"]["id"]


def make_key(api: Api, **fields: Any) -> dict[str, Any]:
    return api.ok("POST", "/preauthkey", json={"expiration": FUTURE, **fields})["preAuthKey"]


# -- unauthenticated endpoints and auth ---------------------------------------------------------------------------


def test_health_and_version_need_no_key(fake: FakeHeadscale, version: str) -> None:
    health = requests.get(f"{fake.url}/health", timeout=5)
    assert health.status_code == 200
    assert health.headers["Content-Type"] == "application/health+json"
    assert health.json() == {"status": "pass"}
    info = requests.get(f"{fake.url}/version", timeout=5).json()
    assert info["version"] == f"v{version}"
    assert re.fullmatch(r"[0-9a-f]{40}", info["commit"])
    assert info["dirty"] is False
    assert set(info["go"]) == {"version", "os", "arch"}
    assert requests.get(f"{fake.url}/metrics", timeout=5).status_code == 404


@pytest.mark.parametrize(
    "authorization",
    [None, "bearer {key}", "Bearer", "Bearer ", "Token {key}", "Bearer  {key}", "Bearer hskey-api-short-secret"],
)
def test_api_routes_need_the_exact_bearer_prefix(fake: FakeHeadscale, authorization: str | None) -> None:
    headers = {"Authorization": authorization.format(key=fake.admin_key)} if authorization else {}
    for path in ("/api/v1/health", "/api/v1/user", "/api/v1/no-such-route"):
        response = requests.get(f"{fake.url}{path}", headers=headers, timeout=5)
        assert response.status_code == 401
        assert response.text == "Unauthorized"
        assert response.headers["Content-Type"].startswith("text/plain")
    assert take_violations(fake) in (
        ["GET /api/v1/no-such-route: no such route in the swagger"],
        ["(no swagger)"],
    ), "auth runs first, but an unknown route is still the client's mistake"


def test_admin_key_works_until_it_expires(fake: FakeHeadscale, api: Api) -> None:
    assert api.ok("GET", "/health") == {"databaseConnectivity": True}
    listed = api.ok("GET", "/apikey")["apiKeys"]
    assert len(listed) == 1
    assert datetime.fromisoformat(listed[0]["expiration"]) - fake.now > timedelta(days=89)
    fake.advance(timedelta(days=91))
    assert api("GET", "/health").status_code == 401
    assert requests.get(f"{fake.url}/health", timeout=5).status_code == 200


# -- users ---------------------------------------------------------------------------------------------------------


def test_users_have_string_ids_and_filters(api: Api) -> None:
    assert make_user(api, "alice", email="alice@example.com", displayName="Alice") == "1"
    assert make_user(api, "bob") == "2"
    users = api.ok("GET", "/user")["users"]
    assert [u["id"] for u in users] == ["1", "2"]
    assert users[0]["displayName"] == "Alice"
    assert users[1] == {**users[1], "email": "", "provider": "", "providerId": "", "profilePicUrl": ""}
    assert users[0]["createdAt"].endswith("Z")
    assert [u["name"] for u in api.ok("GET", "/user", params={"name": "bob"})["users"]] == ["bob"]
    assert [u["name"] for u in api.ok("GET", "/user", params={"email": "alice@example.com"})["users"]] == ["alice"]
    assert [u["name"] for u in api.ok("GET", "/user", params={"id": "2"})["users"]] == ["bob"]
    assert api.ok("GET", "/user", params={"name": "carol"}) == {"users": []}


def test_user_errors_are_500s_with_grpc_bodies(api: Api, version: str) -> None:
    make_user(api, "alice")
    make_user(api, "bob")
    handler = "creating user" if version >= "0.29" else "failed to create user"  # CreateUser's wrapping
    assert_error(
        api("POST", "/user", json={"name": "alice"}),
        500,
        13,
        f"{handler}: creating user: constraint failed: UNIQUE constraint failed: users.name (2067)",
    )
    assert_error(
        api("POST", "/user/1/rename/bob"),
        500,
        2,
        "updating user: constraint failed: UNIQUE constraint failed: users.name (2067)",
    )
    assert_error(api("POST", "/user/9/rename/carol"), 500, 2, "user not found")
    assert_error(api("DELETE", "/user/9"), 500, 2, "user not found")
    assert api.ok("POST", "/user/1/rename/alicia")["user"] == {**api.ok("GET", "/user?id=1")["users"][0]}
    assert api.ok("GET", "/user?name=alicia")["users"][0]["id"] == "1"
    assert api.ok("DELETE", "/user/2") == {}
    assert [u["name"] for u in api.ok("GET", "/user")["users"]] == ["alicia"]


def test_a_user_who_still_owns_nodes_cannot_be_deleted(fake: FakeHeadscale, api: Api) -> None:
    user_id = make_user(api)
    make_key(api, user=user_id)
    node_id = fake.register_node("laptop", user="alice")
    assert_error(api("DELETE", f"/user/{user_id}"), 500, 2, "user not empty: node(s) found")
    api.ok("DELETE", f"/node/{node_id}")
    assert api.ok("DELETE", f"/user/{user_id}") == {}
    assert api.ok("GET", "/preauthkey") == {"preAuthKeys": []}, "the user's keys go with the user"


# -- API keys ------------------------------------------------------------------------------------------------------


def test_api_keys_without_expiration_are_born_expired(fake: FakeHeadscale, api: Api) -> None:
    created = api.ok("POST", "/apikey", json={})
    assert set(created) == {"apiKey"}
    match = API_KEY_RE.fullmatch(created["apiKey"])
    assert match is not None
    row = api.ok("GET", "/apikey")["apiKeys"][1]
    assert row == {**row, "id": "2", "prefix": f"hskey-api-{match[1]}-***", "expiration": ZERO, "lastSeen": None}
    assert Api(fake, created["apiKey"])("GET", "/health").status_code == 401
    good = api.ok("POST", "/apikey", json={"expiration": FUTURE})["apiKey"]
    assert Api(fake, good).ok("GET", "/health") == {"databaseConnectivity": True}


def test_api_keys_expire_and_delete_by_prefix_or_id(fake: FakeHeadscale, api: Api) -> None:
    keys = [api.ok("POST", "/apikey", json={"expiration": FUTURE})["apiKey"] for _ in range(4)]
    listed = {row["id"]: row["prefix"] for row in api.ok("GET", "/apikey")["apiKeys"]}
    assert api.ok("POST", "/apikey/expire", json={"prefix": listed["2"]}) == {}
    assert Api(fake, keys[0])("GET", "/health").status_code == 401
    assert api.ok("POST", "/apikey/expire", json={"id": "3"}) == {}
    assert Api(fake, keys[1])("GET", "/health").status_code == 401
    assert api.ok("DELETE", f"/apikey/{listed['4']}") == {}
    assert_error(
        api("DELETE", f"/apikey/{listed['5']}", params={"id": "5"}), 400, 3, "provide either id or prefix, not both"
    )
    assert api.ok("DELETE", "/apikey/", params={"id": "5"}) == {}
    assert [row["id"] for row in api.ok("GET", "/apikey")["apiKeys"]] == ["1", "2", "3"]
    assert_error(api("POST", "/apikey/expire", json={}), 400, 3, "must provide id or prefix")
    assert_error(api("POST", "/apikey/expire", json={"id": "99"}), 500, 2, "api key not found")
    assert_error(
        api("POST", "/apikey/expire", json={"prefix": "hskey-api-short"}),
        500,
        2,
        "failed to parse ApiKey: prefix too short",
    )
    assert Api(fake, keys[2])("GET", "/health").status_code == 401, "deleted keys stop working"


# -- pre-auth keys -------------------------------------------------------------------------------------------------


def test_preauth_keys_show_the_secret_once_then_masked(fake: FakeHeadscale, api: Api) -> None:
    user_id = make_user(api)
    created = api.ok("POST", "/preauthkey", json={"user": user_id, "reusable": True, "aclTags": []})["preAuthKey"]
    match = AUTH_KEY_RE.fullmatch(created["key"])
    assert match is not None
    assert created["expiration"] == ZERO, "no expiration → the zero time, already expired"
    assert created["user"]["name"] == "alice"
    numeric = api.ok("POST", "/preauthkey", json={"user": int(user_id), "expiration": FUTURE})["preAuthKey"]
    assert numeric["id"] == "2"
    listed = api.ok("GET", "/preauthkey")["preAuthKeys"]
    assert [k["key"] for k in listed] == [f"hskey-auth-{match[1]}-***", f"hskey-auth-{numeric['key'][11:23]}-***"]
    assert listed[0] == {**created, "key": listed[0]["key"]}
    with pytest.raises(ValueError, match="authkey expired"):
        fake.register_node("laptop", preauth_key=created["key"])


def test_preauth_keys_expire_and_delete_by_id(fake: FakeHeadscale, api: Api) -> None:
    fake.now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    user_id = make_user(api)
    key = make_key(api, user=user_id)
    assert api.ok("POST", "/preauthkey/expire", json={"id": key["id"]}) == {}
    assert api.ok("GET", "/preauthkey")["preAuthKeys"][0]["expiration"] == "2026-05-01T12:00:00Z"
    assert api.ok("POST", "/preauthkey/expire", json={"id": "42"}) == {}, "unknown ids are a silent no-op"
    node_id = fake.register_node("laptop", preauth_key=make_key(api, user=user_id)["key"])
    assert api.ok("DELETE", "/preauthkey", params={"id": "2"}) == {}
    assert api.ok("DELETE", "/preauthkey", params={"id": "42"}) == {}
    assert [k["id"] for k in api.ok("GET", "/preauthkey")["preAuthKeys"]] == ["1"]
    assert api.ok("GET", f"/node/{node_id}")["node"]["preAuthKey"] is None, "deleting a used key unlinks the node"


def test_tag_only_keys_need_tags(api: Api) -> None:
    tagged = make_key(api, aclTags=["tag:ci"])
    assert tagged["user"] is None
    assert tagged["aclTags"] == ["tag:ci"]
    assert make_key(api, user="0", aclTags=["tag:ci"])["user"] is None
    assert_error(
        api("POST", "/preauthkey", json={"expiration": FUTURE}),
        500,
        2,
        "auth-key must be either tagged or owned by user",
    )
    assert_error(api("POST", "/preauthkey", json={"user": "7", "expiration": FUTURE}), 500, 2, "user not found")
    assert_error(
        api("POST", "/preauthkey", json={"aclTags": ["server"]}), 400, 3, "tag must start with the string 'tag:'"
    )
    assert_error(api("POST", "/preauthkey", json={"aclTags": ["tag:Web"]}), 400, 3, "tag should be lowercase")
    assert_error(api("POST", "/preauthkey", json={"aclTags": ["tag:a b"]}), 400, 3, "tags must not contain spaces")


def test_single_use_keys_become_used_on_registration(fake: FakeHeadscale, api: Api) -> None:
    user_id = make_user(api)
    once = make_key(api, user=user_id)
    many = make_key(api, user=user_id, reusable=True)
    node_id = fake.register_node("laptop", preauth_key=once["key"])
    fake.register_node("phone", preauth_key=many["key"])
    fake.register_node("tablet", preauth_key=many["key"], user="alice")
    assert [k["used"] for k in api.ok("GET", "/preauthkey")["preAuthKeys"]] == [True, False]
    with pytest.raises(ValueError, match="authkey already used"):
        fake.register_node("desktop", preauth_key=once["key"])
    with pytest.raises(ValueError, match="invalid authkey"):
        fake.register_node("desktop", preauth_key=once["key"][:-1] + ("y" if once["key"].endswith("x") else "x"))
    with pytest.raises(ValueError, match="does not belong"):
        fake.register_node("desktop", preauth_key=many["key"], user="bob")
    node = api.ok("GET", f"/node/{node_id}")["node"]
    assert node["registerMethod"] == "REGISTER_METHOD_AUTH_KEY"
    assert node["preAuthKey"]["key"].endswith("-***")
    assert node["preAuthKey"]["used"] is True
    assert node["user"]["name"] == "alice"


def test_tagged_keys_register_tagged_nodes(fake: FakeHeadscale, api: Api) -> None:
    user_id = make_user(api)
    owned = fake.register_node("laptop", user="alice")
    tagged = fake.register_node("ci-runner", preauth_key=make_key(api, user=user_id, aclTags=["tag:ci"])["key"])
    node = api.ok("GET", f"/node/{tagged}")["node"]
    assert node["tags"] == ["tag:ci"]
    assert node["user"]["id"] == str(TAGGED_DEVICES_USER_ID)
    assert node["user"]["name"] == "tagged-devices"
    assert [n["id"] for n in api.ok("GET", "/node", params={"user": "alice"})["nodes"]] == [owned]
    assert_error(api("DELETE", f"/user/{user_id}"), 500, 2, "user not empty: node(s) found")
    api.ok("DELETE", f"/node/{owned}")
    assert api.ok("DELETE", f"/user/{user_id}") == {}, "tagged nodes are owned by their tags, not the user"
    assert api.ok("GET", f"/node/{tagged}")["node"]["preAuthKey"] is None


def test_setup_helpers_write_state_directly(fake: FakeHeadscale, api: Api) -> None:
    assert fake.add_user("alice", email="alice@example.com") == "1"
    with pytest.raises(ValueError, match="UNIQUE constraint"):
        fake.add_user("alice")
    key = fake.add_preauth_key(user="alice", tags=["tag:ci"])
    assert AUTH_KEY_RE.fullmatch(key)
    listed = api.ok("GET", "/preauthkey")["preAuthKeys"][0]
    assert (listed["user"]["email"], listed["aclTags"]) == ("alice@example.com", ["tag:ci"])
    assert datetime.fromisoformat(listed["expiration"]) - fake.now > timedelta(minutes=59)
    with pytest.raises(ValueError, match="user not found"):
        fake.add_preauth_key(user="bob")
    tagged = api.ok("GET", f"/node/{fake.register_node('kiosk', tags=['tag:kiosk'])}")["node"]
    assert (tagged["tags"], tagged["user"]["name"]) == (["tag:kiosk"], "tagged-devices")
    with pytest.raises(ValueError, match="needs a user, tags or a pre-auth key"):
        fake.register_node("orphan")
    with pytest.raises(ValueError, match="tag should be lowercase"):
        fake.register_node("bad", tags=["tag:Bad"])
    with pytest.raises(ValueError, match="come from the key"):
        fake.register_node("mixed", preauth_key=key, tags=["tag:other"])
    with pytest.raises(ValueError, match="prefix length out of range"):
        fake.register_node("router", user="alice", available_routes=["10.0.0.0/33"])


# -- nodes ---------------------------------------------------------------------------------------------------------


def test_nodes_list_get_rename_delete(fake: FakeHeadscale, api: Api) -> None:
    make_user(api, "alice")
    make_user(api, "bob")
    first = fake.register_node("Alice's Laptop", user="alice")
    second = fake.register_node("builder", user="bob", available_routes=["10.1.0.0/16"])
    nodes = api.ok("GET", "/node")["nodes"]
    assert [n["id"] for n in nodes] == [first, second] == ["1", "2"]
    assert nodes[0]["name"] == "Alice's Laptop"
    assert nodes[0]["givenName"] == "alice-s-laptop"
    assert nodes[0]["ipAddresses"] == ["100.64.0.1", "fd7a:115c:a1e0::1"]
    assert nodes[0]["expiry"] is None
    assert nodes[0]["preAuthKey"] is None
    assert nodes[0]["registerMethod"] == "REGISTER_METHOD_CLI"
    assert [n["id"] for n in api.ok("GET", "/node", params={"user": "bob"})["nodes"]] == [second]
    assert_error(api("GET", "/node", params={"user": "carol"}), 500, 2, "user not found")
    assert api.ok("POST", f"/node/{first}/rename/laptop")["node"]["givenName"] == "laptop"
    assert_error(api("POST", f"/node/{second}/rename/laptop"), 500, 2, "node name is not unique: laptop")
    assert_error(api("POST", "/node/9/rename/other"), 500, 2, "node no longer exists in NodeStore: 9")
    assert api.ok("DELETE", f"/node/{first}") == {}
    assert_error(api("GET", f"/node/{first}"), 404, 5, "node not found")
    assert_error(api("DELETE", f"/node/{first}"), 404, 5, "node not found")
    assert fake.register_node("again", user="alice") == "3"
    assert api.ok("GET", "/node/3")["node"]["ipAddresses"][0] == "100.64.0.1", "freed addresses are reused"


def test_set_tags_replaces_tags_and_drops_the_user(fake: FakeHeadscale, api: Api) -> None:
    make_user(api)
    node_id = fake.register_node("server", user="alice")
    message = "cannot remove all tags from a node - tagged nodes must have at least one tag"
    assert_error(api("POST", f"/node/{node_id}/tags", json={"tags": []}), 400, 3, message)
    assert_error(
        api("POST", f"/node/{node_id}/tags", json={"tags": ["web"]}), 500, 2, "tag must start with the string 'tag:'"
    )
    invalid = "requested tags [tag:web] are invalid or not permitted"
    assert_error(api("POST", f"/node/{node_id}/tags", json={"tags": ["tag:web"]}), 400, 3, invalid)
    assert_error(api("POST", "/node/9/tags", json={"tags": ["tag:web"]}), 404, 5, "node not found")
    policy = '{"tagOwners": {"tag:web": ["alice@"], "tag:db": ["alice@"]}}'
    api.ok("PUT", "/policy", json={"policy": policy})
    node = api.ok("POST", f"/node/{node_id}/tags", json={"tags": ["tag:web", "tag:db", "tag:web"]})["node"]
    assert node["tags"] == ["tag:db", "tag:web"]
    assert node["user"]["name"] == "tagged-devices"
    assert api.ok("POST", f"/node/{node_id}/tags", json={"tags": ["tag:db"]})["node"]["tags"] == ["tag:db"]
    assert api.ok("GET", "/node", params={"user": "alice"}) == {"nodes": []}


def test_approve_routes_is_a_full_replacement(fake: FakeHeadscale, api: Api) -> None:
    make_user(api)
    routes = ["192.168.0.0/24", "10.0.0.0/24", "0.0.0.0/0", "::/0", "fd00::/64"]
    node_id = fake.register_node("router", user="alice", available_routes=routes)
    node = api.ok("GET", f"/node/{node_id}")["node"]
    assert node["availableRoutes"] == ["0.0.0.0/0", "10.0.0.0/24", "192.168.0.0/24", "::/0", "fd00::/64"]
    assert node["approvedRoutes"] == node["subnetRoutes"] == []
    node = api.ok("POST", f"/node/{node_id}/approve_routes", json={"routes": ["10.0.0.0/24", "172.16.0.0/12"]})["node"]
    assert node["approvedRoutes"] == ["10.0.0.0/24", "172.16.0.0/12"]
    assert node["subnetRoutes"] == ["10.0.0.0/24"], "approved ∩ advertised"
    node = api.ok("POST", f"/node/{node_id}/approve_routes", json={"routes": ["0.0.0.0/0"]})["node"]
    assert node["approvedRoutes"] == ["0.0.0.0/0", "::/0"], "one exit route approves both"
    node = api.ok("POST", f"/node/{node_id}/approve_routes", json={"routes": []})["node"]
    assert node["approvedRoutes"] == node["subnetRoutes"] == []
    bad = api("POST", f"/node/{node_id}/approve_routes", json={"routes": ["10.0.0.0"]})
    assert_error(bad, 500, 2, "parsing route: netip.ParsePrefix(\"10.0.0.0\"): no '/'")
    missing = api("POST", "/node/9/approve_routes", json={"routes": []})
    assert_error(missing, 400, 3, "node no longer exists in NodeStore: 9")


def test_expire_node_now_or_at_a_given_time(fake: FakeHeadscale, api: Api, version: str) -> None:
    fake.now = datetime(2026, 3, 1, 8, 30, tzinfo=UTC)
    make_user(api)
    node_id = fake.register_node("laptop", user="alice")
    assert api.ok("POST", f"/node/{node_id}/expire")["node"]["expiry"] == "2026-03-01T08:30:00Z"
    later = api.ok("POST", f"/node/{node_id}/expire", params={"expiry": "2026-04-01T10:00:00+02:00"})["node"]
    assert later["expiry"] == "2026-04-01T08:00:00Z"
    assert_error(api("POST", "/node/9/expire"), 500, 2, "node no longer exists in NodeStore: 9")
    never = api.ok("POST", f"/node/{node_id}/expire", params={"disableExpiry": "true"})["node"]
    if version == "0.28.0":
        assert never["expiry"] == "2026-03-01T08:30:00Z", "0.28 ignores the unknown parameter and expires now"
        assert take_violations(fake) in (
            [f"POST /api/v1/node/{node_id}/expire: query parameter 'disableExpiry' is not defined for "
             "HeadscaleService_ExpireNode"],
            ["(no swagger)"],
        )  # fmt: skip
    else:
        assert never["expiry"] is None
        both = api("POST", f"/node/{node_id}/expire", params={"disableExpiry": "true", "expiry": FUTURE})
        assert_error(both, 400, 3, "cannot set both disable_expiry and expiry")


# -- policy --------------------------------------------------------------------------------------------------------


def test_policy_round_trip_in_database_mode(fake: FakeHeadscale, api: Api, version: str) -> None:
    assert_error(api("GET", "/policy"), 500, 2, "loading ACL from database: acl policy not found")
    fake.now = datetime(2026, 2, 2, 2, 2, 2, 250000, tzinfo=UTC)
    text = (
        '{\n  // HuJSON: comments, trailing commas\n  "acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]},],\n}'
    )
    stored = api.ok("PUT", "/policy", json={"policy": text})
    assert stored == {"policy": text, "updatedAt": "2026-02-02T02:02:02.250Z"}
    assert api.ok("GET", "/policy") == stored
    broken = api("PUT", "/policy", json={"policy": '{"acls": ['})
    assert broken.status_code == 500
    assert broken.json()["message"].startswith("setting policy: parsing policy: ")
    grants = '{"grants": [{"src": ["*"], "dst": ["*"], "ip": ["*"]}]}'
    if version == "0.28.0":
        assert_error(
            api("PUT", "/policy", json={"policy": grants}),
            500,
            2,
            'setting policy: parsing policy: unknown field "grants"',
        )
    else:
        assert api.ok("PUT", "/policy", json={"policy": grants})["policy"] == grants
    assert api.ok("PUT", "/policy", json={"policy": ""})["policy"] == "", "an empty policy means allow all"


def test_policy_in_file_mode_is_read_only(version: str) -> None:
    with FakeHeadscale(version=version, policy_mode="file") as server:
        api = Api(server)
        missing = api("GET", "/policy")
        assert missing.status_code == 500
        assert missing.json()["message"].startswith('reading policy from path "')
        server.policy_text = '{"acls": []}'
        assert api.ok("GET", "/policy") == {"policy": '{"acls": []}', "updatedAt": None}
        refused = api("PUT", "/policy", json={"policy": "{}"})
        assert_error(refused, 500, 2, "update is disabled for modes other than 'database'")
        assert server.policy_text == '{"acls": []}'
        assert server.contract_violations == []


def test_policy_check_exists_only_in_029(fake: FakeHeadscale, api: Api, version: str) -> None:
    check = api("POST", "/policy/check", json={"policy": '{"acls": []}'})
    if version == "0.28.0":
        assert_error(check, 404, 5, "Not Found")
        assert take_violations(fake) in (
            ["POST /api/v1/policy/check: no such route in the swagger"],
            ["(no swagger)"],
        )
        return
    assert check.status_code == 200
    assert check.json() == {}
    bad = api("POST", "/policy/check", json={"policy": "{"})
    assert bad.status_code == 400
    assert bad.json()["code"] == 3
    assert fake.policy_text is None, "check never stores"


# -- the gateway's own behaviour -------------------------------------------------------------------------------------


def test_routing_and_decoding_errors(fake: FakeHeadscale, api: Api) -> None:
    assert_error(api("PUT", "/user"), 501, 12, "Method Not Allowed")
    assert_error(api("GET", "/users"), 404, 5, "Not Found")
    raw = requests.get(f"{fake.url}/api/v2/tailnet/-/devices", timeout=5)
    assert (raw.status_code, raw.text) == (404, "404 page not found\n")
    bad_json = api("POST", "/user", data=b'{"name": ', headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400
    assert bad_json.json()["code"] == 3
    assert_error(api("PUT", "/policy", json={"policy": 1}), 400, 3, "proto: invalid value for string field policy: 1")
    path_error = api("GET", "/node/abc")
    assert path_error.status_code == 400
    assert path_error.json()["message"].startswith("type mismatch, parameter: node_id")
    expected = (
        [
            "POST /api/v1/user: request body (root): '{\"name\": ' is not of type 'object'",
            "PUT /api/v1/policy: request body policy: 1 is not of type 'string'",
            "GET /api/v1/node/abc: path parameter nodeId: 'abc' is not a decimal uint64",
            "PUT /api/v1/user: method not in the swagger (the path allows GET, POST)",
            "GET /api/v1/users: no such route in the swagger",
        ]
        if fake.contract
        else []
    )
    assert sorted(fake.contract_violations) == sorted(expected)
    fake.contract_violations.clear()


def test_unknown_fields_are_dropped_but_reported(fake: FakeHeadscale, api: Api) -> None:
    created = api.ok("POST", "/user", json={"name": "alice", "role": "admin"})
    assert created["user"]["name"] == "alice"
    assert take_violations(fake) in (
        ["POST /api/v1/user: request body (root): Additional properties are not allowed ('role' was unexpected)"],
        ["(no swagger)"],
    )


# -- registration cache (debug/node → node/register or auth/register) ------------------------------------------------


def test_debug_nodes_wait_in_the_registration_cache(fake: FakeHeadscale, api: Api, version: str) -> None:
    make_user(api)
    key = "hskey-authreq-" + "a" * 24 if version == "0.29.2" else "a" * 24
    preview = api.ok("POST", "/debug/node", json={"user": "alice", "key": key, "name": "kiosk", "routes": []})["node"]
    assert preview["id"] == "0"
    assert preview["registerMethod"] == "REGISTER_METHOD_UNSPECIFIED"
    registered = api.ok("POST", "/node/register", params={"user": "alice", "key": key})["node"]
    assert registered["registerMethod"] == "REGISTER_METHOD_CLI"
    assert registered["machineKey"] == preview["machineKey"]
    missing = api("POST", "/node/register", params={"user": "alice", "key": key})
    assert_error(missing, 500, 2, "node not found in registration cache")
    assert_error(
        api("POST", "/node/register", params={"user": "bob", "key": key}), 500, 2, "looking up user: user not found"
    )
    if version == "0.29.2":
        other = "hskey-authreq-" + "b" * 24
        api.ok("POST", "/debug/node", json={"user": "alice", "key": other, "name": "tv", "routes": []})
        assert api.ok("POST", "/auth/approve", json={"authId": other}) == {}
        assert api.ok("POST", "/auth/register", json={"user": "alice", "authId": other})["node"]["name"] == "tv"
        assert_error(
            api("POST", "/auth/reject", json={"authId": other}), 404, 5, f"no pending auth session for auth_id {other}"
        )


# -- faults ----------------------------------------------------------------------------------------------------------


def test_status_fault_fails_without_writing(fake: FakeHeadscale, api: Api) -> None:
    fake.inject(path="/api/v1/user", method="POST", kind="status", status=503)
    assert_error(api("POST", "/user", json={"name": "alice"}), 503, 14, "injected fault")
    assert fake.users == {}
    assert api.ok("GET", "/user") == {"users": []}, "GET is not matched by the POST-only fault"
    make_user(api)
    assert [r.fault for r in fake.requests] == ["status", None, None]


def test_reset_fault_drops_the_connection(fake: FakeHeadscale, api: Api) -> None:
    fake.inject(path=r"/api/v1/user", kind="reset")
    with pytest.raises(requests.ConnectionError):
        api("POST", "/user", json={"name": "alice"})
    assert fake.users == {}
    assert fake.requests[-1].status is None
    assert fake.requests[-1].fault == "reset"
    assert make_user(api) == "1", "the next request opens a fresh connection"


def test_malformed_fault_breaks_json_decoding(fake: FakeHeadscale, api: Api) -> None:
    fake.inject(kind="malformed")
    response = api("GET", "/user")
    assert response.status_code == 200
    with pytest.raises(requests.JSONDecodeError):
        response.json()


def test_unauthorized_fault(fake: FakeHeadscale, api: Api) -> None:
    fake.inject(kind="unauthorized", times=2)
    assert [api("GET", "/health").status_code for _ in range(3)] == [401, 401, 200]
    assert api("GET", "/health").json() == {"databaseConnectivity": True}


def test_latency_fault_delays_a_normal_answer(fake: FakeHeadscale, api: Api) -> None:
    fake.inject(path="/api/v1/health", kind="latency", delay=0.3)
    started = time.monotonic()
    assert api.ok("GET", "/health") == {"databaseConnectivity": True}
    assert time.monotonic() - started >= 0.3
    fake.inject(path="/api/v1/user", kind="latency", delay=0.5, after_apply=True)
    with pytest.raises(requests.Timeout):
        api("POST", "/user", json={"name": "slow"}, timeout=0.1)
    deadline = time.monotonic() + 2
    while not fake.users and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [u.name for u in fake.users.values()] == ["slow"], "the write happened although the client timed out"


def test_after_apply_faults_write_first(fake: FakeHeadscale, api: Api) -> None:
    fake.inject(path="/api/v1/user", method="POST", kind="status", status=500, after_apply=True)
    assert_error(api("POST", "/user", json={"name": "alice"}), 500, 2, "injected fault")
    assert [u.name for u in fake.users.values()] == ["alice"]
    fake.inject(path="/api/v1/preauthkey", method="POST", kind="reset", after_apply=True)
    with pytest.raises(requests.ConnectionError):
        api("POST", "/preauthkey", json={"user": "1", "expiration": FUTURE})
    assert len(fake.preauth_keys) == 1
    fake.inject(path="/api/v1/user", kind="malformed", after_apply=True)
    truncated = api("POST", "/user", json={"name": "bob"})
    assert truncated.text.startswith('{"user":{"id":"2"')
    with pytest.raises(requests.JSONDecodeError):
        truncated.json()
    fake.inject(path="/api/v1/user/.*", kind="unauthorized", after_apply=True)
    assert api("DELETE", "/user/2").status_code == 401
    assert [u.name for u in fake.users.values()] == ["alice"]


def test_fault_matching_and_counting(fake: FakeHeadscale, api: Api) -> None:
    fake.inject(path="/api/v1/node.*", method="get", kind="status", status=429, times=2)
    fake.inject(path="/api/v1/apikey", kind="status", status=502, times=-1)
    codes = [api("GET", "/node").status_code for _ in range(3)]
    assert codes == [429, 429, 200]
    assert [api("GET", "/apikey").status_code for _ in range(3)] == [502, 502, 502]
    fake.clear_faults()
    assert api("GET", "/apikey").status_code == 200
    with pytest.raises(ValueError, match="unknown fault kind"):
        fake.inject(kind="explode")
    with pytest.raises(ValueError, match="positive"):
        fake.inject(kind="reset", times=0)


# -- records, clock, lifecycle ---------------------------------------------------------------------------------------


def test_requests_are_recorded(fake: FakeHeadscale, api: Api) -> None:
    make_user(api)
    api("GET", "/user", params={"name": "alice"})
    api("DELETE", "/user/5")
    first, second, third = fake.requests
    assert (first.method, first.path, first.body, first.status) == ("POST", "/api/v1/user", {"name": "alice"}, 200)
    assert first.response["user"]["name"] == "alice"
    assert (second.query, second.status) == ({"name": "alice"}, 200)
    assert (third.method, third.status, third.response["message"]) == ("DELETE", 500, "user not found")
    fake.reset_requests()
    assert fake.requests == []


def test_clock_callable_drives_timestamps_and_expiry(version: str) -> None:
    moments = [datetime(2026, 1, 1, tzinfo=UTC)]
    with FakeHeadscale(version=version, now=lambda: moments[-1]) as server:
        api = Api(server)
        assert api.ok("POST", "/user", json={"name": "alice"})["user"]["createdAt"] == "2026-01-01T00:00:00Z"
        assert api.ok("GET", "/apikey")["apiKeys"][0]["expiration"] == "2026-04-01T00:00:00Z"
        key = api.ok("POST", "/preauthkey", json={"user": "1", "expiration": "2026-01-01T01:00:00Z"})["preAuthKey"]
        moments.append(datetime(2026, 1, 1, 2, tzinfo=UTC))
        with pytest.raises(ValueError, match="expired"):
            server.register_node("late", preauth_key=key["key"])
        moments.append(datetime(2026, 4, 2, tzinfo=UTC))
        assert api("GET", "/user").status_code == 401
    with pytest.raises(ValueError, match="aware"):
        server.now = datetime(2026, 1, 1)


def test_many_fakes_start_and_stop_without_leaks() -> None:
    # The threads alive before: one an earlier test left may end meanwhile (a count would then drop below the
    # baseline); a leak is a thread started here that is still alive.
    before = set(threading.enumerate())
    ports = []
    for index in range(8):
        server = FakeHeadscale(version=VERSIONS[index % 2]).start()
        client = Api(server)
        client.ok("GET", "/health")  # leaves a keep-alive connection open on purpose
        ports.append(int(server.url.rsplit(":", 1)[1]))
        server.stop()
        server.stop()  # idempotent
        client.session.close()
    assert [thread.name for thread in threading.enumerate() if thread not in before] == []
    for port in ports:
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=1):
            pass


def test_stop_interrupts_a_slow_request() -> None:
    server = FakeHeadscale().start()
    server.inject(kind="latency", delay=30)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            Api(server)("GET", "/health", timeout=10)
        except requests.RequestException as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.1)
    started = time.monotonic()
    server.stop()
    caller.join(timeout=5)
    assert time.monotonic() - started < 3
    assert not caller.is_alive()


def test_constructor_validation_and_missing_swagger(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unsupported Headscale version"):
        FakeHeadscale(version="0.27.1")
    with pytest.raises(ValueError, match="policy_mode"):
        FakeHeadscale(policy_mode="yaml")
    assert FakeHeadscale(version="v0.28.0").version == "0.28.0"
    monkeypatch.setattr(fake_module, "find_swagger", lambda version: None)
    with FakeHeadscale() as server:
        assert server.contract is None
        assert "contract checks are off" in (server.contract_note or "")
        Api(server).ok("POST", "/user", json={"name": "alice", "role": "ignored"})
        assert server.contract_violations == []


# -- playing other releases and reading policies like Headscale ------------------------------------------------------


@pytest.mark.parametrize(("reported", "status"), [("v0.30.0", 200), ("v0.27.1", 200), ("", 404)])
def test_version_can_play_another_release(reported: str, status: int) -> None:
    with FakeHeadscale(version="0.29.2", reported_version=reported) as server:
        answer = requests.get(f"{server.url}/version", timeout=5)
        assert answer.status_code == status
        if status == 200:
            assert answer.json()["version"] == reported
        else:
            assert answer.text == "404 page not found\n", "0.26 and older have no /version"


def test_policies_are_read_as_headscale_reads_them(fake: FakeHeadscale, api: Api, version: str) -> None:
    spelled = '{"ACLs": [{"Action": "accept", "src": ["*"], "dst": ["*:*"]}]}'  # keys match in any case
    assert api.ok("PUT", "/policy", json={"policy": spelled})["policy"] == spelled
    for text, words in POLICY_REFUSALS.items():  # refused with the release's words
        message = f"setting policy: parsing policy: {words[fake.minor >= '0.29']}"
        assert_error(api("PUT", "/policy", json={"policy": text}), 500, 2, message)
    assert fake.policy_text == spelled


# -- restarts and outages of the same server ---------------------------------------------------------------------------


def test_restart_as_another_release_keeps_the_registry_and_switches_the_api() -> None:
    with FakeHeadscale(version="0.28.0") as server:
        api = Api(server)
        alice = make_user(api)
        key = make_key(api, user=alice)
        url, admin = server.url, server.admin_key
        assert api("POST", "/policy/check", json={"policy": "{}"}).status_code == 404  # no such route in 0.28
        take_violations(server)
        server.restart_as("v0.29.2")
        assert (server.url, server.admin_key, server.version, server.minor) == (url, admin, "0.29.2", "0.29")
        assert requests.get(f"{url}/version", timeout=5).json()["version"] == "v0.29.2"
        assert api.ok("GET", "/user")["users"][0]["id"] == alice
        assert [k["id"] for k in api.ok("GET", "/preauthkey")["preAuthKeys"]] == [key["id"]]
        assert api.ok("POST", "/policy/check", json={"policy": "{}"}) == {}
        with pytest.raises(ValueError, match="unsupported Headscale version"):
            server.restart_as("0.30.0")
        assert server.version == "0.29.2"
        api.session.close()
        assert server.contract_violations == []


def test_going_dark_refuses_connections_until_it_comes_back_at_the_same_url() -> None:
    with FakeHeadscale() as server:
        api = Api(server)
        make_user(api)
        url = server.url
        server.go_dark()
        server.go_dark()  # idempotent
        assert server.dark
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{url}/health", timeout=2)
        server.come_back()
        server.come_back()  # idempotent
        assert not server.dark
        assert server.url == url
        assert [u["name"] for u in api.ok("GET", "/user")["users"]] == ["alice"]
        server.go_dark()
        api.session.close()
    assert not server.dark  # stop releases the kept port
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))):
        pass


def test_going_dark_as_a_blackhole_lets_connects_time_out() -> None:
    with FakeHeadscale() as server:
        url = server.url
        server.go_dark("blackhole")
        started = time.monotonic()
        with pytest.raises(requests.ConnectTimeout):
            requests.get(f"{url}/health", timeout=(0.5, 0.5))
        assert time.monotonic() - started >= 0.4
        with pytest.raises(ValueError, match="refuse or blackhole"):
            server.go_dark("silent")
        server.come_back()
        assert requests.get(f"{url}/health", timeout=5).status_code == 200
