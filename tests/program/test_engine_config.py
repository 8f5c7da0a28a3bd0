"""The SDK internals program/engine_config.py reads, checked against the pinned SDK: a newer SDK that moves or
changes one fails here, loudly and by name, instead of the program silently seeing no config."""

from __future__ import annotations

import json
from importlib.metadata import version

import pulumi
import pulumi.runtime.config
import pytest

from headscale_ha.program.engine_config import CHECKED_SDK_VERSION, engine_config

RECHECK = (
    "program/engine_config.py reads pulumi.runtime.config.CONFIG and the PULUMI_CONFIG plumbing, checked against "
    f"pulumi {CHECKED_SDK_VERSION}; re-read pulumi/runtime/config.py of the new SDK, then update CHECKED_SDK_VERSION"
)


@pytest.fixture(autouse=True)
def _clean_config(monkeypatch: pytest.MonkeyPatch):
    for name in ("PULUMI_CONFIG", "PULUMI_CONFIG_SECRET_KEYS"):
        monkeypatch.delenv(name, raising=False)
    pulumi.runtime.set_all_config({}, [])
    yield
    pulumi.runtime.set_all_config({}, [])


def test_the_installed_sdk_is_the_one_the_internals_were_checked_against() -> None:
    assert version("pulumi") == CHECKED_SDK_VERSION, RECHECK


def test_the_config_store_is_the_map_set_all_config_writes() -> None:
    """CONFIG is the SDK's store: set_all_config replaces it, and it lists the keys (no public call does)."""
    pulumi.runtime.set_all_config({"headscale-ha:role": "active", "kubernetes:context": "hydra"}, ["x:y"])
    assert pulumi.runtime.config.CONFIG.get() == {"headscale-ha:role": "active", "kubernetes:context": "hydra"}, RECHECK
    assert pulumi.runtime.is_config_secret("x:y"), RECHECK


def test_the_language_host_plumbing_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"a:b": "1"}))
    monkeypatch.setenv("PULUMI_CONFIG_SECRET_KEYS", json.dumps(["a:b"]))
    assert pulumi.runtime.get_config_env() == {"a:b": "1"}, RECHECK
    assert pulumi.runtime.config.get_config_secret_keys_env() == ["a:b"], RECHECK


def test_engine_config_joins_the_store_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """What set_all_config wrote (mocks, tests) and what the CLI passed (a real run) are both seen; the store wins."""
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"a:b": "from env", "a:c": "3"}))
    monkeypatch.setenv("PULUMI_CONFIG_SECRET_KEYS", json.dumps(["a:c"]))
    pulumi.runtime.set_all_config({"a:b": "from store", "a:d": "4"}, ["a:d"])
    assert engine_config() == ({"a:b": "from store", "a:c": "3", "a:d": "4"}, {"a:c", "a:d"})
