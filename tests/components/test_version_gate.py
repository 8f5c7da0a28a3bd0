"""HeadscaleVersionGate: the provider's check/diff/create/update directly, its pickling, and the resource under
mocks."""

from __future__ import annotations

import base64
import pickle
import textwrap
from pathlib import Path

import dill
import pytest
from pulumi.dynamic import CheckResult

from headscale_ha.components.upgrade import parse_version as pod_parse_version
from headscale_ha.components.version_gate import (
    GATE_ID,
    README_SECTION,
    VersionGateProvider,
    parse_version,
)
from tools.harness import run_program
from tools.pulumi_internals import UNKNOWN, serialize_provider

TYPE = "pulumi-python:dynamic/upgrade:VersionGate"


def _check(old: str | None, new: object, **news: object) -> CheckResult:
    olds = {} if old is None else {"version": old, "allowDowngradeFrom": None}
    return VersionGateProvider().check(olds, {"version": new, "allowDowngradeFrom": None, **news})


def _failures(result: CheckResult) -> list[tuple[str, str]]:
    return [(failure.property, failure.reason) for failure in result.failures or []]


@pytest.mark.parametrize(
    ("old", "new"),
    [(None, "0.28.0"), ("0.28.0", "0.29.2"), ("0.29.2", "0.29.2"), ("0.28.1", "0.28.2"), ("0.29.9", "0.29.10")],
    ids=["first", "upgrade", "same", "patch-upgrade", "numeric-not-textual"],
)
def test_raising_or_keeping_the_version_passes(old: str | None, new: str) -> None:
    result = _check(old, new)
    assert _failures(result) == []
    assert result.inputs["version"] == new


@pytest.mark.parametrize(
    ("old", "new"), [("0.29.2", "0.28.0"), ("0.28.1", "0.28.0"), ("0.29.10", "0.29.9"), ("1.0.0", "0.99.99")]
)
def test_a_downgrade_fails_on_version_naming_both_and_the_way_back(old: str, new: str) -> None:
    ((prop, reason),) = _failures(_check(old, new))
    assert prop == "version"
    assert f"headscale.version {new} is older than {old}" in reason
    assert "one-way" in reason
    assert f"as {README_SECTION} describes" in reason
    assert f"pre-upgrade/{new}-{old}/headscale.sqlite" in reason
    assert f"allowDowngradeFrom={old}" in reason


@pytest.mark.parametrize("value", ["v0.29.2", "0.29", "latest", "", None, 29, "0.29.02", "0.29.2-beta.1"])
def test_a_malformed_version_fails_naming_the_property_and_value(value: object) -> None:
    ((prop, reason),) = _failures(_check("0.28.0", value))
    assert prop == "version"
    assert reason == f"version: {value!r} is not a Headscale version X.Y.Z (for example '0.29.2')"


def test_both_sides_agree_on_what_a_version_is() -> None:
    for value in ["0.29.2", "0.0.0", "999999999.1.2", "1234567890.0.0", "0.29.02", " 0.29.2", "0.29.2\n"]:
        try:
            pod = pod_parse_version(value)
        except ValueError:
            pod = None
        assert parse_version(value) == pod, value


def test_an_unknown_version_is_checked_later() -> None:
    assert _failures(_check("0.29.2", UNKNOWN)) == []


def test_a_deliberate_downgrade_passes_only_from_the_named_version() -> None:
    assert _failures(_check("0.29.2", "0.28.0", allowDowngradeFrom="0.29.2")) == []
    ((prop, _),) = _failures(_check("0.29.3", "0.28.0", allowDowngradeFrom="0.29.2"))
    assert prop == "version"
    ((prop, reason),) = _failures(_check("0.29.2", "0.28.0", allowDowngradeFrom="latest"))
    assert (prop, reason) == (
        "allowDowngradeFrom",
        "allowDowngradeFrom: 'latest' is not a Headscale version X.Y.Z (or empty)",
    )


def test_diff_reports_a_change_never_a_replacement() -> None:
    provider = VersionGateProvider()
    outs = {"version": "0.28.0", "previous": None, "allowDowngradeFrom": None}
    same = provider.diff(GATE_ID, outs, {"version": "0.28.0", "allowDowngradeFrom": None})
    assert same.changes is False
    upgrade = provider.diff(GATE_ID, outs, {"version": "0.29.2", "allowDowngradeFrom": None})
    assert upgrade.changes is True
    assert upgrade.replaces == []
    assert upgrade.delete_before_replace is False
    assert provider.diff(GATE_ID, outs, {"version": "0.28.0", "allowDowngradeFrom": "0.29.2"}).changes is True
    assert provider.diff(GATE_ID, outs, {"version": "0.28.0", "allowDowngradeFrom": ""}).changes is False


def test_create_update_delete_record_the_version_and_touch_nothing() -> None:
    provider = VersionGateProvider()
    created = provider.create({"version": "0.28.0", "allowDowngradeFrom": None})
    assert created.id == GATE_ID
    assert created.outs == {"version": "0.28.0", "previous": None, "allowDowngradeFrom": None}
    updated = provider.update(GATE_ID, created.outs, {"version": "0.29.2", "allowDowngradeFrom": None})
    assert updated.outs == {"version": "0.29.2", "previous": "0.28.0", "allowDowngradeFrom": None}
    # A change of allowDowngradeFrom alone keeps the version it came from.
    again = provider.update(GATE_ID, updated.outs, {"version": "0.29.2", "allowDowngradeFrom": "0.29.2"})
    assert again.outs["previous"] == "0.28.0"
    assert provider.delete(GATE_ID, again.outs) is None


def _assert_works(provider: VersionGateProvider) -> None:
    assert isinstance(provider, VersionGateProvider)
    assert _failures(provider.check({"version": "0.28.0"}, {"version": "0.29.2"})) == []
    ((prop, reason),) = _failures(provider.check({"version": "0.29.2"}, {"version": "0.28.0"}))
    assert prop == "version"
    assert "0.29.2" in reason
    assert "0.28.0" in reason
    assert provider.create({"version": "0.29.2"}).outs["version"] == "0.29.2"


def test_the_provider_survives_the_engines_dill_round_trip() -> None:
    provider = VersionGateProvider()
    raw = dill.dumps(provider, protocol=pickle.DEFAULT_PROTOCOL, recurse=True)
    _assert_works(dill.loads(raw))
    # The SDK's own serializer (sorted dicts, the form stored in the state), then loaded as the engine does.
    blob = serialize_provider(provider)
    assert blob == serialize_provider(VersionGateProvider()), "deterministic: no spurious diffs"
    _assert_works(dill.loads(base64.b64decode(blob)))


def test_the_resource_registers_with_its_version_under_mocks(tmp_path: Path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(
        textwrap.dedent(
            """
            import pulumi
            from headscale_ha.components.version_gate import HeadscaleVersionGate

            gate = HeadscaleVersionGate("headscale-version", version="0.29.2")
            pulumi.export("version", gate.version)
            pulumi.export("previous", gate.previous)
            """
        )
    )
    run = run_program(project="vpn", stack="dev", config={}, program=program)
    (gate,) = run.of_type(TYPE)
    assert gate.name == "headscale-version"
    assert gate.custom
    assert gate.inputs["version"] == "0.29.2"
    blob = gate.inputs["__provider"]
    assert isinstance(blob, str), "not serialized as a secret: the provider captures nothing secret"
    _assert_works(dill.loads(base64.b64decode(blob)))
    assert run.outputs == {"version": "0.29.2", "previous": None}
