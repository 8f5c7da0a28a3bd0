"""Stack-config samples and parse helpers (the real stack config with overrides): used by config and component tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from headscale_ha.components.settings import PROJECT
from headscale_ha.program.config import ConfigError, StackConfig, parse_stack_config
from tools.harness import PROJECT_DIR
from tools.stack_files import read_stack_settings

NOISE = "privkey:" + "ab" * 32
DERP = "privkey:" + "cd" * 32


def raw_config(stack: str = "hydra", **overrides: Any) -> dict[str, str]:
    """The stack's real config without the namespace prefix; overrides replace whole keys (None drops one)."""
    settings = read_stack_settings(PROJECT_DIR, stack)
    raw = {k.removeprefix(f"{PROJECT}:"): v for k, v in settings.config.items() if k.startswith(f"{PROJECT}:")}
    for key, value in overrides.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value if isinstance(value, str) else json.dumps(value)
    return raw


def section(stack: str, key: str) -> dict[str, Any]:
    return json.loads(raw_config(stack)[key])


def parse(stack: str = "hydra", *, secret_keys: tuple[str, ...] = (), **overrides: Any) -> StackConfig:
    return parse_stack_config(raw_config(stack, **overrides), stack=stack, secret_keys=secret_keys)


def problems(stack: str = "hydra", *, secret_keys: tuple[str, ...] = (), **overrides: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(stack, secret_keys=secret_keys, **overrides)
    assert str(caught.value).count("\n") == len(caught.value.problems), "one line per problem"
    return caught.value.problems


STORE = {"destinationPath": "s3://headscale-wal/hydra", "endpointUrl": "https://s3.internal.example.com"}
STORE_KEYS = {"objectStoreAccessKeyId": "AKIA", "objectStoreSecretAccessKey": "s3cr3t"}
STORE_SECRETS = tuple(STORE_KEYS)


def only_problem(stack: str = "hydra", **overrides: Any) -> str:
    found = problems(stack, **overrides)
    assert len(found) == 1, found
    return found[0]
