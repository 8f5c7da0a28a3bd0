"""The swagger contract checker: template routing, Swagger→JSON Schema conversion, and that it catches bad traffic."""

from __future__ import annotations

import json

import pytest

from tests.models.swagger.swagger_contract import (
    GRPC_HTTP_STATUS,
    SwaggerContract,
    find_swagger,
    is_rfc3339,
    normalize_version,
)

VERSIONS = ("0.28.0", "0.29.2")


def _contract(version: str) -> SwaggerContract:
    if find_swagger(version) is None:
        pytest.skip(f"headscale.swagger.json for {version} is not under ../shared/reference on this machine")
    return SwaggerContract.for_version(version)


@pytest.fixture(params=VERSIONS)
def contract(request: pytest.FixtureRequest) -> SwaggerContract:
    return _contract(request.param)


def _user(**overrides: object) -> dict[str, object]:
    user: dict[str, object] = {
        "id": "1",
        "name": "alice",
        "createdAt": "2026-01-31T12:00:00Z",
        "displayName": "",
        "email": "",
        "providerId": "",
        "provider": "",
        "profilePicUrl": "",
    }
    return user | overrides


def _node(**overrides: object) -> dict[str, object]:
    node: dict[str, object] = {
        "id": "7",
        "machineKey": "mkey:00",
        "nodeKey": "nodekey:00",
        "discoKey": "discokey:00",
        "ipAddresses": ["100.64.0.1", "fd7a:115c:a1e0::1"],
        "name": "router",
        "user": _user(),
        "lastSeen": None,
        "expiry": None,
        "preAuthKey": None,
        "createdAt": "2026-01-31T12:00:00.123Z",
        "registerMethod": "REGISTER_METHOD_AUTH_KEY",
        "givenName": "router",
        "online": False,
        "approvedRoutes": [],
        "availableRoutes": [],
        "subnetRoutes": [],
        "tags": [],
    }
    return node | overrides


# -- routing ----------------------------------------------------------------------------------------------------


def test_templates_match_with_literal_segments_winning(contract: SwaggerContract) -> None:
    rename = contract.operation("POST", "/api/v1/node/12/rename/new-name")
    assert rename is not None
    assert rename.operation_id == "HeadscaleService_RenameNode"
    assert rename.match("/api/v1/node/12/rename/new-name") == {"nodeId": "12", "newName": "new-name"}
    assert contract.operation("POST", "/api/v1/apikey/expire").operation_id == "HeadscaleService_ExpireApiKey"
    deleted = contract.operation("DELETE", "/api/v1/apikey/hskey-api-abc-%2A%2A%2A")
    assert deleted is not None
    assert deleted.match("/api/v1/apikey/hskey-api-abc-%2A%2A%2A") == {"prefix": "hskey-api-abc-***"}
    assert contract.operation("POST", "/api/v1/node/12/rename") is None
    assert contract.allowed_methods("/api/v1/preauthkey") == ["DELETE", "GET", "POST"]


def test_versions_differ_where_the_releases_do() -> None:
    old, new = (
        _contract("0.28.0"),
        SwaggerContract(version="v0.29.2") if find_swagger("0.29.2") else _contract("0.29.2"),
    )
    assert new.path == find_swagger("0.29.2")
    assert old.operation("POST", "/api/v1/policy/check") is None
    assert new.operation("POST", "/api/v1/policy/check").operation_id == "HeadscaleService_CheckPolicy"
    assert old.operation("POST", "/api/v1/auth/register") is None
    assert "disableExpiry" not in old.operation("POST", "/api/v1/node/1/expire").query_params
    assert "disableExpiry" in new.operation("POST", "/api/v1/node/1/expire").query_params
    assert old.request_problems("POST", "/api/v1/node/1/expire", {"disableExpiry": "true"}) == [
        "query parameter 'disableExpiry' is not defined for HeadscaleService_ExpireNode"
    ]
    assert new.request_problems("POST", "/api/v1/node/1/expire", {"disableExpiry": "true"}) == []


def test_version_names_and_missing_documents(tmp_path) -> None:
    assert normalize_version("v0.28.0") == "0.28.0"
    assert find_swagger("0.28.0", shared_dir=tmp_path) is None
    with pytest.raises(FileNotFoundError, match=r"0\.27\.9"):
        SwaggerContract.for_version("v0.27.9", shared_dir=tmp_path)
    with pytest.raises(ValueError, match="or a Headscale version"):
        SwaggerContract()
    with pytest.raises(ValueError, match=r"Swagger 2\.0"):
        SwaggerContract({"openapi": "3.1.0"})


# -- requests ---------------------------------------------------------------------------------------------------


def test_valid_requests_have_no_problems(contract: SwaggerContract) -> None:
    key = {"user": "1", "reusable": True, "expiration": "2026-02-01T00:00:00+01:00", "aclTags": ["tag:ci"]}
    assert contract.request_problems("POST", "/api/v1/preauthkey", {}, key) == []
    assert contract.request_problems("GET", "/api/v1/user", {"name": "alice", "id": "3"}) == []
    assert contract.request_problems("DELETE", "/api/v1/preauthkey", {"id": "4"}) == []
    assert contract.request_problems("POST", "/api/v1/node/4/approve_routes", {}, {"routes": ["10.0.0.0/24"]}) == []
    assert contract.request_problems("POST", "/api/v1/node/4/expire", {"expiry": "2030-01-01T00:00:00Z"}) == []


def test_ids_may_be_strings_or_numbers_in_requests_but_not_junk(contract: SwaggerContract) -> None:
    assert contract.request_problems("POST", "/api/v1/preauthkey/expire", {}, {"id": 3}) == []
    assert contract.request_problems("POST", "/api/v1/preauthkey/expire", {}, {"id": "3"}) == []
    for bad in ("three", -3, "0x3", 3.5):
        problems = contract.request_problems("POST", "/api/v1/preauthkey/expire", {}, {"id": bad})
        assert len(problems) == 1, bad
        assert problems[0].startswith("request body id:")


def test_unknown_fields_and_wrong_types_are_caught(contract: SwaggerContract) -> None:
    problems = contract.request_problems("POST", "/api/v1/user", {}, {"name": "alice", "username": "alice"})
    assert problems == ["request body (root): Additional properties are not allowed ('username' was unexpected)"]
    problems = contract.request_problems("PUT", "/api/v1/policy", {}, {"policy": {"acls": []}})
    assert problems == ["request body policy: {'acls': []} is not of type 'string'"]
    problems = contract.request_problems("POST", "/api/v1/node/1/tags", {}, {"tags": "tag:a"})
    assert problems == ["request body tags: 'tag:a' is not of type 'array'"]
    problems = contract.request_problems("POST", "/api/v1/apikey", {}, {"expiration": "next tuesday"})
    assert problems == ["request body expiration: 'next tuesday' is not a 'date-time'"]


def test_routes_parameters_and_bodies_outside_the_swagger_are_caught(contract: SwaggerContract) -> None:
    assert contract.request_problems("GET", "/api/v1/users") == ["GET /api/v1/users: no such route in the swagger"]
    assert contract.request_problems("PUT", "/api/v1/user") == [
        "PUT /api/v1/user: method not in the swagger (the path allows GET, POST)"
    ]
    assert contract.request_problems("GET", "/api/v1/node/abc") == [
        "path parameter nodeId: 'abc' is not a decimal uint64"
    ]
    assert contract.request_problems("GET", "/api/v1/preauthkey", {"user": "1"}) == [
        "query parameter 'user' is not defined for HeadscaleService_ListPreAuthKeys"
    ]
    assert contract.request_problems("GET", "/api/v1/node", {"user": ["a", "b"]}) == [
        "query parameter 'user' given 2 times"
    ]
    assert contract.request_problems("POST", "/api/v1/node/backfillips", {"confirmed": "yes"}) == [
        "query parameter confirmed: 'yes' is not 'true' or 'false'"
    ]
    assert contract.request_problems("POST", "/api/v1/user", {}, None) == [
        "HeadscaleService_CreateUser requires a JSON request body"
    ]
    assert contract.request_problems("POST", "/api/v1/node/1/rename/x", {}, {}) == [
        "HeadscaleService_RenameNode takes no request body"
    ]


# -- responses --------------------------------------------------------------------------------------------------


def test_valid_responses_have_no_problems(contract: SwaggerContract) -> None:
    assert contract.response_problems("GET", "/api/v1/user", 200, {"users": [_user()]}) == []
    assert contract.response_problems("GET", "/api/v1/node/7", 200, {"node": _node()}) == []
    assert contract.response_problems("DELETE", "/api/v1/node/7", 200, {}) == []
    error = {"code": 2, "message": "user not found", "details": []}
    assert contract.response_problems("DELETE", "/api/v1/user/9", 500, error) == []
    assert contract.response_problems("GET", "/api/v1/user", 401, "Unauthorized") == []
    assert (
        contract.response_problems("GET", "/api/v1/nope", 404, {"code": 5, "message": "Not Found", "details": []}) == []
    )


def test_response_shapes_the_gateway_never_produces_are_caught(contract: SwaggerContract) -> None:
    problems = contract.response_problems("GET", "/api/v1/user", 200, {"users": [_user(id=1)]})
    assert problems == ["response body users/0/id: 1 is not of type 'string'"]
    problems = contract.response_problems("GET", "/api/v1/user", 200, {"users": [_user(role="admin")]})
    assert problems == ["response body users/0: Additional properties are not allowed ('role' was unexpected)"]
    missing = _user()
    del missing["email"]
    problems = contract.response_problems("GET", "/api/v1/user", 200, {"users": [missing]})
    assert problems == ["response body users/0: 'email' is a required property"]
    problems = contract.response_problems(
        "GET", "/api/v1/user", 200, {"users": [_user(createdAt="2026-01-31T13:00:00+01:00")]}
    )
    assert problems == ["response body users/0/createdAt: '2026-01-31T13:00:00+01:00' is not a 'date-time'"]
    problems = contract.response_problems("DELETE", "/api/v1/user/1", 200, {"deleted": True})
    assert problems == ["response body (root): Additional properties are not allowed ('deleted' was unexpected)"]


def test_references_are_resolved_through_nested_definitions(contract: SwaggerContract) -> None:
    node = _node(user=_user(id=5), preAuthKey={"id": "1"}, tags=None)
    problems = contract.response_problems("GET", "/api/v1/node/7", 200, {"node": node})
    assert "response body node/user/id: 5 is not of type 'string'" in problems
    assert "response body node/preAuthKey: 'user' is a required property" in problems
    assert "response body node/tags: None is not of type 'array'" in problems
    bad_enum = contract.response_problems("GET", "/api/v1/node/7", 200, {"node": _node(registerMethod="KEY")})
    assert len(bad_enum) == 1
    assert "is not one of" in bad_enum[0]


def test_error_bodies_are_checked_against_rpc_status(contract: SwaggerContract) -> None:
    assert contract.response_problems("GET", "/api/v1/user", 500, {"error": "boom"}) == [
        "error response (500) (root): 'code' is a required property",
        "error response (500) (root): 'details' is a required property",
        "error response (500) (root): 'message' is a required property",
        "error response (500) (root): Additional properties are not allowed ('error' was unexpected)",
    ]
    assert contract.response_problems("GET", "/api/v1/node/1", 500, {"code": 5, "message": "x", "details": []}) == [
        "error response: HTTP 500 for gRPC code 5 (the gateway serves 404)"
    ]
    assert contract.response_problems("GET", "/api/v1/node/1", 200, None) == [
        "response body (root): None is not of type 'object'"
    ]


def test_timestamp_and_status_helpers() -> None:
    assert is_rfc3339("0001-01-01T00:00:00Z", utc_only=True)
    assert is_rfc3339("2026-01-31T12:00:00.123456789+02:00")
    assert not is_rfc3339("2026-01-31T12:00:00+02:00", utc_only=True)
    assert not is_rfc3339("2026-01-31 12:00:00Z")
    assert not is_rfc3339("2026-13-31T12:00:00Z")
    assert GRPC_HTTP_STATUS[2] == 500
    assert GRPC_HTTP_STATUS[3] == 400
    assert GRPC_HTTP_STATUS[12] == 501


def test_a_hand_written_document_works_without_the_shared_tree() -> None:
    document = {
        "swagger": "2.0",
        "paths": {
            "/api/v1/thing/{thingId}": {
                "get": {
                    "operationId": "GetThing",
                    "parameters": [
                        {"name": "thingId", "in": "path", "required": True, "type": "string", "format": "uint64"}
                    ],
                    "responses": {"200": {"schema": {"$ref": "#/definitions/Thing"}}},
                }
            }
        },
        "definitions": {"Thing": {"type": "object", "properties": {"id": {"type": "string", "format": "int64"}}}},
    }
    contract = SwaggerContract(json.loads(json.dumps(document)))
    assert contract.request_problems("GET", "/api/v1/thing/3") == []
    assert contract.response_problems("GET", "/api/v1/thing/3", 200, {"id": "-4"}) == []
    assert contract.response_problems("GET", "/api/v1/thing/3", 200, {"id": "x"}) == [
        "response body id: 'x' does not match '^-?[0-9]+$'"
    ]
