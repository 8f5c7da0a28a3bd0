"""Headscale config samples (OIDC, SECRETS, stack_config) and key-path parsers: for Headscale/Headplane/Postgres."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import SecretStr

from headscale_ha.program.config import StackConfig
from headscale_ha.program.config_problems import SECRET_KEYS
from tests.support.config_samples import DERP, NOISE, parse

OIDC = {
    "issuer": "https://id.example.com/realms/ops",
    "clientId": "headscale",
    "allowedDomains": ["example.com"],
    "allowedGroups": ["/ops"],
    "allowedUsers": ["alice@example.com"],
    "onlyStartIfAvailable": True,
}
#: Distinctive values for every secret a stack may carry; none may ever reach a rendered file.
SECRETS = {
    "noisePrivateKey": NOISE,
    "derpPrivateKey": DERP,
    "oidcClientSecret": "oidc-client-secret-do-not-render",
    "headplaneApiKey": "hskey-api-abcdefabcdef-do-not-render",
    "objectStoreAccessKeyId": "s3-key-id-do-not-render",
    "objectStoreSecretAccessKey": "s3-secret-do-not-render",
}


def stack_config(
    version: str = "0.29.2",
    *,
    stage: str = "sqlite",
    oidc: Mapping[str, Any] | None = None,
    embedded: bool = False,
    headscale: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> StackConfig:
    """The hydra stack with the given Headscale release, database stage, OIDC and DERP choices, secrets all set."""
    block = {
        "version": version,
        "image": f"ghcr.io/juanfont/headscale:{version}",
        "derp": {"embedded": embedded},
        **(headscale or {}),
    }
    if oidc is not None:
        block["oidc"] = dict(oidc)
    database: dict[str, Any] = {"stage": stage}
    if stage in ("migrating", "postgres"):
        database["postgres"] = {"objectStore": {"destinationPath": "s3://headscale-backup/hydra"}}
    if stage == "migrating":
        database["migration"] = {"image": "registry.example.com/headscale-ha/migrate:1.0.0"}
    secrets = {key: value for key, value in SECRETS.items() if key in SECRET_KEYS}
    if oidc is not None:
        # Headplane's OIDC login is chosen explicitly (headplane.oidcLogin): these samples choose it.
        overrides.setdefault("headplane", {"oidcLogin": True})
    return parse("hydra", secret_keys=tuple(secrets), headscale=block, database=database, **secrets, **overrides)


def key_paths(
    data: Any, *, leaves: Iterable[tuple[str, ...]] = (), prefix: tuple[str, ...] = ()
) -> set[tuple[str, ...]]:
    """Every key path of nested mappings (inner ones included); lists and the ``leaves`` maps are not entered."""
    found: set[tuple[str, ...]] = set()
    if not isinstance(data, Mapping) or prefix in set(leaves):
        return found
    for key, value in data.items():
        path = (*prefix, str(key))
        found.add(path)
        found |= key_paths(value, leaves=leaves, prefix=path)
    return found


_REAL_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*):")


def enclosing_keys(lines: list[str], index: int, indent: int) -> tuple[str, ...]:
    """The real (uncommented) keys that enclose line ``index`` at ``indent``."""
    parents: list[str] = []
    for line in reversed(lines[:index]):
        if indent == 0:
            break
        match = _REAL_KEY.match(line)
        if match and len(match["indent"]) < indent:
            parents.insert(0, match["key"])
            indent = len(match["indent"])
    return tuple(parents)


_COMMENTED_KEY = re.compile(r"^(?P<indent> +)# (?P<key>[a-z_]+):(?: .*)?$")


def commented_keys(text: str) -> set[tuple[str, ...]]:
    """Single keys commented out inside a real block (``  # public_url: ...``), at their siblings' indentation."""
    lines = text.splitlines()
    found: set[tuple[str, ...]] = set()
    for index, line in enumerate(lines):
        match = _COMMENTED_KEY.match(line)
        if match:
            parents = enclosing_keys(lines, index, len(match["indent"]))
            if parents and len(match["indent"]) == 2 * len(parents):
                found.add((*parents, match["key"]))
    return found


def secret_values(config: StackConfig) -> list[str]:
    """Every secret value the config holds (SecretStr fields and the identity keys)."""
    values = []
    for name in type(config).model_fields:
        value = getattr(config, name)
        if isinstance(value, SecretStr):
            values.append(value.get_secret_value())
        elif isinstance(value, str) and name.endswith("private_key"):
            values.append(value)
    return values
