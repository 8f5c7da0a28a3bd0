"""The config the engine handed the program: the one module that reads the Pulumi SDK's config store directly.

Why directly: the SDK's public ``pulumi.Config`` reads one key of one namespace at a time, but the program must see
every key the stack sets, of every namespace, to refuse an unknown key or a misspelt namespace instead of letting
it silently take its default. The SDK keeps no public list of the keys, so this module reads its store.

SDK internals used here, checked against pulumi 3.272.0 (requirements.txt; ``CHECKED_SDK_VERSION``), each tested
in tests/program/test_engine_config.py so that a newer SDK that changes one fails that test loudly:

- ``pulumi.runtime.config.CONFIG``: the ContextVar holding the map set by ``pulumi.runtime.set_all_config`` (the
  mocks and the tests); not in ``pulumi.runtime.__all__``.
- ``pulumi.runtime.get_config_env`` / ``get_config_secret_keys_env``: the JSON the CLI's language host passes as
  ``PULUMI_CONFIG`` and ``PULUMI_CONFIG_SECRET_KEYS`` (exported, but documented as the SDK's own plumbing).
"""

from __future__ import annotations

import os
from pathlib import Path

import pulumi
import pulumi.runtime.config

#: The SDK release the internals above were read in; tests/program/test_engine_config.py fails on any other.
CHECKED_SDK_VERSION = "3.272.0"


def engine_config() -> tuple[dict[str, str], set[str]]:
    """Every config key the engine gave the program, of every namespace (fully qualified, CLI wire form), and the
    secret ones. The CLI's language host hands the whole stack config over as PULUMI_CONFIG (and
    PULUMI_CONFIG_SECRET_KEYS); mocks and tests set it with set_all_config."""
    available = {**pulumi.runtime.get_config_env(), **pulumi.runtime.config.CONFIG.get()}
    values = {key: str(pulumi.runtime.get_config(key)) for key in available}
    secret = {key for key in values if pulumi.runtime.is_config_secret(key)}
    secret |= set(pulumi.runtime.config.get_config_secret_keys_env())
    return values, secret


def project_directory() -> Path:
    """Where Pulumi.yaml is: the root directory the CLI names, else the working directory (where it starts us)."""
    return Path(pulumi.get_root_directory() or os.getcwd())
