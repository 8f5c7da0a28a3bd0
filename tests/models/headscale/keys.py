"""The ``/api/v1/apikey`` and ``/api/v1/preauthkey`` operations: list (masked), create, expire, delete."""

from __future__ import annotations

import re
from typing import Any

from tests.models.headscale.gateway import Call
from tests.models.headscale.state import API_KEY_PREFIX, KEY_PREFIX_LENGTH, ZERO_TIME, ApiKey
from tests.models.headscale.store import Store
from tests.models.headscale.wire import invalid_argument, unknown_error, validate_tag

_URLSAFE_RE = re.compile(r"[A-Za-z0-9_-]+")


class ApiKeyOperations(Store):
    """API keys: shown by prefix only, found by id or by prefix (never both), born expired without an expiration."""

    def _op_list_api_keys(self, call: Call) -> dict[str, Any]:
        return {"apiKeys": [self._api_key_json(k) for k in sorted(self.api_keys.values(), key=lambda k: k.id)]}

    def _op_create_api_key(self, call: Call) -> dict[str, Any]:
        return {"apiKey": self.add_api_key(expiration=call.body["expiration"] or ZERO_TIME)}

    def _api_key_by(self, key_id: int, prefix: str) -> ApiKey:
        if key_id and prefix:
            raise invalid_argument("provide either id or prefix, not both")
        if key_id:
            found = self.api_keys.get(key_id)
        elif prefix:
            wanted = self._parse_api_key_prefix(prefix)
            found = next((k for k in self.api_keys.values() if k.prefix == wanted), None)
        else:
            raise invalid_argument("must provide id or prefix")
        if found is None:
            raise unknown_error("api key not found")
        return found

    @staticmethod
    def _parse_api_key_prefix(text: str) -> str:
        """Accept the listed form ``hskey-api-<prefix>-***``, ``hskey-api-<prefix>`` or the bare 12 chars."""
        if len(text) == KEY_PREFIX_LENGTH and _URLSAFE_RE.fullmatch(text):
            return text
        if text.startswith(API_KEY_PREFIX):
            rest = text[len(API_KEY_PREFIX) :]
            if len(rest) < KEY_PREFIX_LENGTH:
                raise unknown_error("failed to parse ApiKey: prefix too short")
            if not _URLSAFE_RE.fullmatch(rest[:KEY_PREFIX_LENGTH]):
                raise unknown_error("failed to parse ApiKey: prefix contains invalid characters")
            return rest[:KEY_PREFIX_LENGTH]
        return text

    def _op_expire_api_key(self, call: Call) -> dict[str, Any]:
        self._api_key_by(call.body["id"], call.body["prefix"]).expiration = self.now
        return {}

    def _op_delete_api_key(self, call: Call) -> dict[str, Any]:
        key = self._api_key_by(call.query["id"], call.path["prefix"])
        del self.api_keys[key.id]
        return {}


class PreAuthKeyOperations(Store):
    """Pre-auth keys: tagged or owned by a user, masked in listings, born expired without an expiration."""

    def _op_list_preauth_keys(self, call: Call) -> dict[str, Any]:
        keys = sorted(self.preauth_keys.values(), key=lambda k: k.id)
        return {"preAuthKeys": [self._preauth_key_json(k) for k in keys]}

    def _op_create_preauth_key(self, call: Call) -> dict[str, Any]:
        body = call.body
        for tag in body["aclTags"]:
            problem = validate_tag(tag)
            if problem:
                raise invalid_argument(problem)
        owner: int | None = None
        if body["user"]:
            if body["user"] not in self.users:
                raise unknown_error("user not found")
            owner = body["user"]
        if owner is None and not body["aclTags"]:
            raise unknown_error("auth-key must be either tagged or owned by user")
        expiration = body["expiration"] or ZERO_TIME
        full = self._create_preauth_key(owner, body["reusable"], body["ephemeral"], expiration, body["aclTags"])
        key = self.preauth_keys[self._ids["preauth_keys"]]
        return {"preAuthKey": self._preauth_key_json(key, full_key=full)}

    def _op_expire_preauth_key(self, call: Call) -> dict[str, Any]:
        key = self.preauth_keys.get(call.body["id"])
        if key is not None:  # 0.28/0.29 answer {} for an unknown id (only main makes it an error)
            key.expiration = self.now
        return {}

    def _op_delete_preauth_key(self, call: Call) -> dict[str, Any]:
        self._drop_preauth_key(call.query["id"])
        return {}
