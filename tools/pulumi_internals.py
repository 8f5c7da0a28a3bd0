"""Every Pulumi SDK internal the tools and the tests use: what each is, why, and the SDK it was read in.

The mock run (tools/harness.py) and the model of the engine (tests/models/engine/) drive the SDK the way the CLI's
language host does, which its public API does not cover: resetting the runtime between runs, draining its pending
RPCs, the event loop it runs coroutines on, and the wire form of values (the sentinels of unknown and secret values,
the serialization of a resource's properties and of a dynamic provider). Each is imported here and nowhere else;
the rest of the project imports the names below. The program itself reads one more internal, the config store, in
program/engine_config.py.

Checked against pulumi 3.272.0 (``CHECKED_SDK_VERSION``, the pin of requirements.txt); tests/tools/
test_pulumi_internals.py exercises each one and fails by name when the pinned SDK moves or changes one. The gRPC
protocol modules (``pulumi.runtime.proto``) are the engine's wire protocol, not an internal of the Python SDK:
they are imported where they are used.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar, cast

from pulumi.dynamic.dynamic import serialize_provider
from pulumi.runtime import mocks, rpc, settings
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

#: The SDK release the internals below were read in; tests/tools/test_pulumi_internals.py fails on any other.
CHECKED_SDK_VERSION = "3.272.0"

_T = TypeVar("_T")

# ------------------------------------------------------------------------------------------ the wire form of values

#: pulumi/runtime/rpc.py: the string that stands for a value not known yet (in a preview), on the wire.
UNKNOWN: str = rpc.UNKNOWN
#: pulumi/runtime/rpc.py: the key of a map that carries a special value, and the signatures of a secret and of a
#: resource reference under it (private names of the SDK: the harness reads values the mock monitor received).
SIGNATURE_KEY: str = rpc._special_sig_key
SECRET_SIGNATURE: str = rpc._special_secret_sig
RESOURCE_SIGNATURE: str = rpc._special_resource_sig
#: pulumi/runtime/rpc.py: a property map to and from its protobuf Struct, as a provider sends and receives it.
serialize_properties = rpc.serialize_properties
deserialize_properties = rpc.deserialize_properties
#: pulumi/runtime/rpc.py: a secret value on the wire, and the test for one.
wrap_rpc_secret = rpc.wrap_rpc_secret
is_rpc_secret = rpc.is_rpc_secret
#: pulumi/dynamic/dynamic.py ``serialize_provider``, imported above: a dynamic provider as its state stores it
#: (base64 of its dill pickle). Every call wraps ``pickle.Pickler._batch_setitems`` once more (see
#: ``undo_dynamic_pickler_patch``).

# ------------------------------------------------------------------------------------------ the runtime of a run

#: pulumi/runtime/mocks.py: the mock resource monitor the harness records registrations on (subclassed: its
#: RegisterResource and ReadResource are the monitor's gRPC methods), and the Mocks interface it answers with.
MockMonitor = mocks.MockMonitor
Mocks = mocks.Mocks
MockResourceArgs = mocks.MockResourceArgs
MockCallArgs = mocks.MockCallArgs


def reset_runtime(project: str | None = None, stack: str | None = None) -> None:
    """pulumi/runtime/settings.py ``reset_options``: a fresh runtime (no monitor, no root resource), so runs never
    see each other's resources; with no arguments, the state before any run."""
    if project is None and stack is None:
        settings.reset_options()
    else:
        settings.reset_options(project=project, stack=stack)


class _OutputTasks(Protocol):
    """The two attributes of pulumi/runtime/settings.py ``Settings`` read here, typed as the SDK declares them: its
    ``@contextproperty`` decorator is untyped, so a type checker sees no attribute through it."""

    lock: threading.Lock
    outputs: set[asyncio.Task[Any]]


def clear_output_tasks() -> None:
    """pulumi/runtime/settings.py ``SETTINGS.outputs``: the SDK keeps every Output's task in this set until the next
    run clears it; cleared at the end of a run (under its lock) so a finished run holds nothing."""
    run = cast(_OutputTasks, settings.SETTINGS)  # the SDK's declared types, which its decorator hides (above)
    with run.lock:
        run.outputs.clear()


def root_resource() -> Any:
    """pulumi/runtime/settings.py ``get_root_resource``: the run's Stack resource, whose ``outputs`` are the
    program's exports."""
    return settings.get_root_resource()


async def drain_rpcs(*, all_outstanding: bool = True) -> None:
    """pulumi/runtime/stack.py ``wait_for_rpcs``: wait until every registration and Output the program started has
    finished (``all_outstanding=False``: only the RPCs, after a failure)."""
    await wait_for_rpcs(await_all_outstanding_tasks=all_outstanding)


def thread_event_loop() -> asyncio.AbstractEventLoop:
    """pulumi/runtime/sync_await.py ``_ensure_event_loop``: the event loop the SDK runs coroutines on in this
    thread (created on first use; the mock monitor's executor threads get one each)."""
    return _ensure_event_loop()


def sync_await(awaitable: Awaitable[_T]) -> _T:
    """pulumi/runtime/sync_await.py ``_sync_await``: run ``awaitable`` to completion from synchronous code, on
    the SDK's loop, as the SDK's own synchronous paths do."""
    return _sync_await(awaitable)


def undo_dynamic_pickler_patch() -> None:
    """Undo what the SDK's ``serialize_provider`` leaves behind on ``pickle._Pickler``.

    Each dynamic resource's construction wraps ``pickle._Pickler._batch_setitems`` in one more sorting wrapper and
    never restores it (pulumi/dynamic/dynamic.py), so every wrapper calls the one before: after about 900 dynamic
    resources in one process, pickling a provider exceeds the recursion limit. A real `pulumi up` builds a handful;
    a test process runs the program hundreds of times, so each run starts again from the unwrapped method.
    """
    method = pickle._Pickler.__dict__.get("_batch_setitems")
    original = method
    while callable(original) and original.__name__.startswith("batch_set_items_sorted") and original.__closure__:
        inner = next(
            (cell.cell_contents for cell in original.__closure__ if callable(cell.cell_contents)),
            None,
        )
        if inner is None:
            break
        original = inner
    if original is not method:
        # typeshed's pickle stub lists no private methods; _batch_setitems is one (read through __dict__ above).
        pickle._Pickler._batch_setitems = original  # pyright: ignore[reportAttributeAccessIssue]


__all__ = [
    "CHECKED_SDK_VERSION",
    "RESOURCE_SIGNATURE",
    "SECRET_SIGNATURE",
    "SIGNATURE_KEY",
    "UNKNOWN",
    "MockCallArgs",
    "MockMonitor",
    "MockResourceArgs",
    "Mocks",
    "clear_output_tasks",
    "deserialize_properties",
    "drain_rpcs",
    "is_rpc_secret",
    "reset_runtime",
    "root_resource",
    "serialize_properties",
    "serialize_provider",
    "sync_await",
    "thread_event_loop",
    "undo_dynamic_pickler_patch",
    "wrap_rpc_secret",
]
