"""The users a policy names, held against the users the tailnet has (`tailnet.users`).

Headscale resolves a user token (``alice@``, ``alice@example.com``) each time it compiles the policy: the token
without its trailing ``@`` is compared with every user's name and e-mail (and, for users made by an OIDC login,
their provider identifier). A token that matches nobody makes no error there; the group it is a member of, the
rule it is a source of or the tag it owns simply loses that person. Renaming the example users as the
installation guide says, and leaving the base policy as shipped, would leave ``group:admins`` empty and no one
able to own a router tag. So the program refuses a token no configured user matches (a warning instead when OIDC
logins may create that user later), and warns about a configured user the policy never names.

The tokens are read from the base policy as written, so each path is a path in the user's file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from headscale_ha.policy.problems import format_path

__all__ = ["ConfiguredUser", "PolicyUsers", "policy_users"]

#: A destination's ports after the alias: ``alice@:22``, ``alice@example.com:80,443``, ``bob@:*``.
_PORTS = re.compile(r"^(?P<alias>.*@[^:]*):(?P<ports>\*|[0-9][0-9,\-]*)$")
#: Lists of local login names (SSH users), not tailnet users, even when one holds an ``@`` (``localpart:*@…``).
_LOGIN_FIELDS = frozenset({"users"})


@dataclass(frozen=True, kw_only=True)
class ConfiguredUser:
    """A user of `tailnet.users`: what a policy token may match."""

    name: str
    email: str = ""

    def matches(self, token: str) -> bool:
        """Headscale's rule: the token without its trailing ``@`` is the user's name or e-mail."""
        bare = token.removesuffix("@")
        return bare == self.name or (bool(self.email) and bare == self.email)


@dataclass(frozen=True, kw_only=True)
class PolicyUsers:
    """The outcome: tokens that match no configured user (path, token), and configured users no token names."""

    unknown: tuple[tuple[str, str], ...]
    unnamed: tuple[ConfiguredUser, ...]


def user_tokens(document: Any, parts: tuple[str | int, ...] = ()) -> Iterator[tuple[str, str]]:
    """Every user token in a policy document, with its path: any string value holding an ``@``, a destination's
    ports removed, outside the SSH rules' lists of login names."""
    if isinstance(document, dict):
        for key, value in document.items():
            if parts and parts[0] in {"ssh", "sshTests"} and key in _LOGIN_FIELDS:
                continue
            yield from user_tokens(value, (*parts, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from user_tokens(value, (*parts, index))
    elif isinstance(document, str) and "@" in document and not document.startswith("localpart:"):
        ported = _PORTS.match(document)
        yield format_path(parts), ported.group("alias") if ported else document


def policy_users(document: Any, users: Sequence[ConfiguredUser]) -> PolicyUsers:
    """Which tokens of ``document`` name no user of ``users``, and which users no token names."""
    tokens = list(user_tokens(document))
    unknown = tuple((path, token) for path, token in tokens if not any(user.matches(token) for user in users))
    unnamed = tuple(user for user in users if not any(user.matches(token) for _, token in tokens))
    return PolicyUsers(unknown=unknown, unnamed=unnamed)
