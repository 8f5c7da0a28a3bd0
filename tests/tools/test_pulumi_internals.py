"""Every SDK internal of tools/pulumi_internals.py, exercised against the pinned SDK: a newer SDK that moves or
changes one fails here by name, before the harness or the engine model misbehave in a way that is hard to trace."""

from __future__ import annotations

import asyncio
import pickle
from importlib.metadata import version

import pulumi
import pytest
from google.protobuf import struct_pb2

from headscale_ha.components.version_gate import ENGINE_UNKNOWN
from headscale_ha.provider.resources import UserProvider
from tools import pulumi_internals as sdk

RECHECK = (
    f"tools/pulumi_internals.py was read against pulumi {sdk.CHECKED_SDK_VERSION}: re-read each internal it names "
    "in the installed SDK, adapt the module, then update CHECKED_SDK_VERSION"
)


def test_the_installed_sdk_is_the_one_the_internals_were_checked_against() -> None:
    assert version("pulumi") == sdk.CHECKED_SDK_VERSION, RECHECK


def test_the_wire_sentinels_are_what_serialization_writes() -> None:
    """A secret is wrapped under the signature key; an unknown Output is the UNKNOWN string (in a preview)."""
    wrapped = sdk.wrap_rpc_secret("x")
    assert wrapped == {sdk.SIGNATURE_KEY: sdk.SECRET_SIGNATURE, "value": "x"}, RECHECK
    assert sdk.is_rpc_secret(wrapped), RECHECK
    assert ENGINE_UNKNOWN == sdk.UNKNOWN, "components/version_gate.py's copy of the SDK's UNKNOWN is stale"


def test_properties_round_trip_through_the_provider_wire_form() -> None:
    struct = asyncio.run(sdk.serialize_properties({"a": 1, "b": ["c"]}, {}))
    assert isinstance(struct, struct_pb2.Struct), RECHECK
    assert sdk.deserialize_properties(struct) == {"a": 1, "b": ["c"]}, RECHECK


def test_the_mock_monitor_is_the_class_the_harness_subclasses() -> None:
    """The harness overrides RegisterResource and ReadResource: they must stay the monitor's methods."""
    for method in ("RegisterResource", "ReadResource", "Invoke", "SupportsFeature"):
        assert callable(getattr(sdk.MockMonitor, method, None)), f"MockMonitor.{method}: {RECHECK}"
    assert {"new_resource", "call"} <= set(vars(sdk.Mocks)), RECHECK
    assert {"typ", "name", "inputs"} <= set(
        vars(sdk.MockResourceArgs(typ="t", name="n", inputs={}, provider="", resource_id="", custom=True))
    ), RECHECK


def test_the_runtime_resets_and_its_output_tasks_clear() -> None:
    sdk.reset_runtime(project="p", stack="s")
    assert (pulumi.get_project(), pulumi.get_stack()) == ("p", "s"), RECHECK
    assert sdk.root_resource() is None, RECHECK
    sdk.clear_output_tasks()
    sdk.reset_runtime()


def test_the_thread_loop_and_sync_await_run_coroutines() -> None:
    loop = sdk.thread_event_loop()
    assert isinstance(loop, asyncio.AbstractEventLoop), RECHECK
    assert sdk.thread_event_loop() is loop, "one loop per thread"

    async def answer() -> int:
        return 42

    assert sdk.sync_await(answer()) == 42, RECHECK
    assert asyncio.iscoroutinefunction(sdk.drain_rpcs), RECHECK


def test_a_dynamic_provider_serializes_as_its_state_stores_it() -> None:
    provider = UserProvider(api_url="http://127.0.0.1:1", version="0.29.2")
    serialized = sdk.serialize_provider(provider)
    assert isinstance(serialized, str), RECHECK
    sdk.undo_dynamic_pickler_patch()


def test_the_sdks_pickler_patch_is_undone_so_runs_never_accumulate_wrappers() -> None:
    """serialize_provider wraps pickle._Pickler._batch_setitems once per dynamic resource and never restores it:
    past ~900 in one process pickling fails with RecursionError. The harness undoes it after every run."""
    sdk.undo_dynamic_pickler_patch()
    original = pickle._Pickler.__dict__["_batch_setitems"]
    for _ in range(3):
        sdk.serialize_provider(UserProvider(api_url="http://127.0.0.1:1", version="0.29.2"))
    wrapped = pickle._Pickler.__dict__["_batch_setitems"]
    assert wrapped is not original, RECHECK
    assert wrapped.__closure__ is not None, RECHECK
    sdk.undo_dynamic_pickler_patch()
    assert pickle._Pickler.__dict__["_batch_setitems"] is original, RECHECK


@pytest.mark.parametrize("name", sorted(sdk.__all__))
def test_every_name_of_the_module_resolves(name: str) -> None:
    assert getattr(sdk, name) is not None
