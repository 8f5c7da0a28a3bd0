"""The ``/api/v1/user`` operations: list (by name, email or id), create, rename, delete."""

from __future__ import annotations

from typing import Any

from tests.models.headscale.gateway import Call
from tests.models.headscale.store import Store
from tests.models.headscale.wire import unknown_error


class UserOperations(Store):
    """Users as Headscale 0.28/0.29 manage them: a name is unique among local users, and a user
    who still owns nodes cannot be deleted."""

    def _op_list_users(self, call: Call) -> dict[str, Any]:
        users = sorted(self.users.values(), key=lambda u: u.id)
        if call.query["name"]:
            users = [u for u in users if u.name == call.query["name"]]
        elif call.query["email"]:
            users = [u for u in users if u.email == call.query["email"]]
        elif call.query["id"]:
            users = [u for u in users if u.id == call.query["id"]]
        return {"users": [self._user_json(u) for u in users]}

    def _op_create_user(self, call: Call) -> dict[str, Any]:
        body = call.body
        user = self._create_user(body["name"], body["displayName"], body["email"], body["pictureUrl"])
        return {"user": self._user_json(user)}

    def _op_rename_user(self, call: Call) -> dict[str, Any]:
        user = self.users.get(call.path["oldId"])
        if user is None:
            raise unknown_error("user not found")
        new_name = call.path["newName"]
        if any(other.name == new_name and other.id != user.id for other in self.users.values()):
            raise unknown_error("updating user: constraint failed: UNIQUE constraint failed: users.name (2067)")
        user.name = new_name
        return {"user": self._user_json(user)}

    def _op_delete_user(self, call: Call) -> dict[str, Any]:
        user = self.users.get(call.path["id"])
        if user is None:
            raise unknown_error("user not found")
        if any(node.user_id == user.id for node in self.nodes.values()):
            raise unknown_error("user not empty: node(s) found")
        for key_id in [k.id for k in self.preauth_keys.values() if k.user_id == user.id]:
            self._drop_preauth_key(key_id)
        del self.users[user.id]
        return {}
