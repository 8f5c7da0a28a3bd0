"""Run the real Pulumi program under mocks and capture what it registers.

One implementation serves ``make plan``, the tests and the bench. Each run gets a fresh event loop and a
reset Pulumi runtime, so runs never see each other's resources or config.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import runpy
import string
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _ensure_event_loop

PROJECT_DIR = Path(__file__).resolve().parent.parent


class Secret:
    """Stands for a secret value in captured inputs and outputs; never holds the value."""

    def __repr__(self) -> str:
        return "[secret]"


class Unknown:
    """Stands for a value only known after a real deployment."""

    def __repr__(self) -> str:
        return "[unknown]"


SECRET = Secret()
UNKNOWN = Unknown()


@dataclass(frozen=True, kw_only=True)
class RegisteredResource:
    """One resource the program registered: what it asked for, secrets replaced by SECRET."""

    type: str
    name: str
    urn: str
    parent_urn: str | None
    custom: bool
    inputs: dict[str, Any]
    provider: str | None = None
    protect: bool = False
    retain_on_delete: bool = False
    dependencies: tuple[str, ...] = ()  # URNs of its explicit and input dependencies

    @property
    def is_kubernetes_object(self) -> bool:
        return self.custom and self.type.startswith("kubernetes:") and "apiVersion" in self.inputs


@dataclass(frozen=True, kw_only=True)
class ProgramRun:
    project: str
    stack: str
    resources: list[RegisteredResource]
    outputs: dict[str, Any] = field(default_factory=dict)

    def of_type(self, type_: str) -> list[RegisteredResource]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> RegisteredResource:
        matches = [r for r in self.resources if r.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} resources named {name!r}")
        return matches[0]

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        return [r.inputs for r in self.resources if r.is_kubernetes_object]


def _secret_leaves(value: Any) -> Any:
    """Keep the shape of a secret value (its keys tell what it holds), hide every leaf."""
    if isinstance(value, dict):
        return {k: _secret_leaves(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_secret_leaves(v) for v in value]
    return SECRET


def _plain(value: Any) -> Any:
    """Wire properties → Python values, with secrets and unknowns replaced by markers."""
    if isinstance(value, dict):
        sig = value.get(rpc._special_sig_key)
        if sig == rpc._special_secret_sig:
            return _secret_leaves(value.get("value"))
        if sig is not None and sig == rpc._special_resource_sig:
            return value.get("urn")
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value == rpc.UNKNOWN:
        return UNKNOWN
    return value


def _offline_bytes(name: str, length: int) -> bytes:
    """Deterministic stand-in bytes for a random resource: plans are reproducible, and obviously not real keys."""
    out = b""
    while len(out) < length:
        out += hashlib.sha256(f"offline {name} {len(out)}".encode()).digest()
    return out[:length]


#: Outputs of the Headscale dynamic resources that only a real server computes.
_DYNAMIC_OUTPUTS: dict[str, dict[str, str]] = {
    "PreAuthKey": {"key": "[offline pre-auth key]", "keyId": "0", "prefix": "offline", "expiration": ""},
    "ApiKey": {"key": "[offline api key]", "prefix": "offline", "expiration": ""},
    "User": {"userId": "0"},
    "NodeSettings": {"nodeId": "0"},
    "Policy": {"appliedSha256": "", "liveSha256": "", "liveDiff": ""},
}


def _random_state(typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any] | None:
    """What pulumi-random would compute, for the resources the program uses."""
    length = int(inputs.get("length", 16))
    raw = _offline_bytes(name, length)
    if typ == "random:index/randomBytes:RandomBytes":
        return {"hex": raw.hex(), "base64": base64.b64encode(raw).decode()}
    if typ == "random:index/randomPassword:RandomPassword":
        alphabet = string.ascii_letters + string.digits
        return {"result": "".join(alphabet[b % len(alphabet)] for b in raw)}
    if typ == "random:index/randomId:RandomId":
        return {"hex": raw[: int(inputs.get("byteLength", 8))].hex()}
    return None


def _stack_reference_state(name: str) -> dict[str, Any]:
    """What another stack exports, offline: the outputs the program reads from it, with stand-in secrets."""

    def key(kind: str) -> str:
        return "privkey:" + hashlib.sha256(f"offline identity of {name} {kind}".encode()).hexdigest()

    identity = {"noisePrivateKey": key("noise"), "derpPrivateKey": key("derp")}
    return {"name": name, "outputs": {"identity": identity}, "secretOutputNames": ["identity"]}


class _Mocks(pulumi_mocks.Mocks):
    """Echo inputs as state, the way a provider would for objects it creates as asked."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict]:
        if args.typ == "pulumi:pulumi:StackReference":
            stack_name = str(args.inputs.get("name") or args.resource_id or args.name)
            return stack_name, _stack_reference_state(stack_name)
        state = dict(args.inputs)
        computed = _random_state(args.typ, args.name, state)
        if computed is not None:
            return f"{args.name}-id", {**state, **computed}
        if args.typ.startswith("pulumi-python:dynamic/headscale:"):
            filled = _DYNAMIC_OUTPUTS.get(args.typ.rsplit(":", 1)[1], {})
            return f"{args.name}-id", {**state, **{k: v for k, v in filled.items() if state.get(k) is None}}
        if args.typ.startswith("kubernetes:") and isinstance(state.get("metadata"), dict):
            metadata = state["metadata"]
            state["metadata"] = {**metadata, "name": metadata.get("name") or args.name}
            namespace = metadata.get("namespace")
            resource_id = f"{namespace}/{state['metadata']['name']}" if namespace else state["metadata"]["name"]
            return resource_id, state
        return f"{args.name}-id", state

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict, list[tuple[str, str]] | None]:
        return {}, None


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, also keeping parent links and secret markers (the SDK drops both)."""

    def __init__(self, mocks: pulumi_mocks.Mocks) -> None:
        super().__init__(mocks)
        self.lock = threading.Lock()
        self.registered: list[RegisteredResource] = []
        self.thread_loops: set[asyncio.AbstractEventLoop] = set()

    def _track_thread_loop(self) -> None:
        # The SDK gives each executor thread an event loop; keep them so the run can close them.
        loop = _ensure_event_loop()
        with self.lock:
            self.thread_loops.add(loop)

    def ReadResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        self._track_thread_loop()
        response = super().ReadResource(request)
        record = RegisteredResource(
            type=request.type,
            name=request.name,
            urn=response.urn,
            parent_urn=request.parent or None,
            custom=True,
            inputs=_plain(json_format.MessageToDict(request.properties)),
        )
        with self.lock:
            self.registered.append(record)
        return response

    def Invoke(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        self._track_thread_loop()
        return super().Invoke(request)

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        self._track_thread_loop()
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            inputs = _plain(json_format.MessageToDict(request.object))
            record = RegisteredResource(
                type=request.type,
                name=request.name,
                urn=response.urn,
                parent_urn=request.parent or None,
                custom=bool(request.custom),
                inputs=inputs,
                provider=request.provider or None,
                protect=bool(request.protect),
                retain_on_delete=bool(request.retainOnDelete),
                dependencies=tuple(request.dependencies),
            )
            with self.lock:
                self.registered.append(record)
        return response


async def _resolve(value: Any) -> Any:
    if isinstance(value, pulumi.Output):
        if await value.is_secret():
            return SECRET
        if not await value.is_known():
            return UNKNOWN
        return await _resolve(await value.future())
    if asyncio.isfuture(value) or asyncio.iscoroutine(value):
        return await _resolve(await value)
    if isinstance(value, dict):
        return {k: await _resolve(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [await _resolve(v) for v in value]
    return value


def run_program(
    *,
    project: str,
    stack: str,
    config: Mapping[str, str],
    secret_keys: frozenset[str] | set[str] = frozenset(),
    program: Path = PROJECT_DIR / "__main__.py",
    registered: list[RegisteredResource] | None = None,
) -> ProgramRun:
    """Run ``program`` as stack ``stack`` of ``project`` with ``config`` (CLI wire form) under mocks.

    Exceptions raised by the program (a ConfigError, say) propagate unchanged; pass ``registered`` to
    still learn what had been registered when it failed.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    monitor = _RecordingMonitor(_Mocks())
    root = str(program.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        settings.reset_options(project=project, stack=stack)
        pulumi.runtime.set_all_config(dict(config), sorted(secret_keys))
        pulumi.runtime.set_mocks(monitor.mocks, project=project, stack=stack, preview=False, monitor=monitor)
        settings.SETTINGS.outputs.clear()
        runpy.run_path(str(program), run_name="__main__")
        loop.run_until_complete(wait_for_rpcs())
        stack_resource = settings.get_root_resource()
        exported = getattr(stack_resource, "outputs", {}) or {}
        outputs = loop.run_until_complete(_resolve(dict(exported)))
        with monitor.lock:
            resources = list(monitor.registered)
        return ProgramRun(project=project, stack=stack, resources=resources, outputs=outputs)
    finally:
        # Drain what is left; the program's own error, if any, is the one worth reporting.
        with contextlib.suppress(Exception):
            loop.run_until_complete(wait_for_rpcs(await_all_outstanding_tasks=False))
        if registered is not None:
            with monitor.lock:
                registered.extend(monitor.registered)
        settings.reset_options()
        pulumi.runtime.set_all_config({}, [])
        loop.run_until_complete(loop.shutdown_default_executor())
        for thread_loop in monitor.thread_loops - {loop}:
            thread_loop.close()
        asyncio.set_event_loop(None)
        loop.close()
