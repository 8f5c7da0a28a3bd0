"""Run the real Pulumi program under mocks and capture what it registers.

One implementation serves ``make plan``, the tests and the bench. Each run gets a fresh event loop and a
reset Pulumi runtime, so runs never see each other's resources or config.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import hashlib
import logging
import runpy
import string
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format

from headscale_ha.program.config import stack_reference_hint
from tools import pulumi_internals as sdk

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


@dataclass(frozen=True)
class SecretOutput:
    """A secret stack output with its value: what a referenced stack exports, for ``stack_outputs``.

    The value flows to the program (as a secret Output, like the engine hands it over); repr never shows it.
    """

    value: Any = field(repr=False)

    def __repr__(self) -> str:
        return "[secret]"


def secret(value: Any) -> SecretOutput:
    """Mark one output of ``stack_outputs`` as secret: ``{"org/p/s": {"identity": secret({...})}}``."""
    return SecretOutput(value)


#: What other stacks export, by fully qualified stack name (`org/project/stack`): ``{name: {output: value}}``;
#: a secret output's value is wrapped in ``secret(...)``, an output only known after a deployment is UNKNOWN.
StackOutputs = Mapping[str, Mapping[str, Any]]


class UnknownStackError(Exception):
    """A StackReference names a stack the run was not given outputs for (the engine: the stack does not exist)."""


class DuplicateUrnError(Exception):
    """A program registered (or read) one URN twice: the engine fails the update with the same words."""


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
    #: The stack's outputs as shown (outputs.json): secrets are SECRET, values only a deployment knows UNKNOWN.
    outputs: dict[str, Any] = field(default_factory=dict)
    #: The same outputs as a later run's ``stack_outputs`` entry: secrets wrapped in ``secret(...)`` with their
    #: (offline) values, so a stack that references this one plans with what this one planned.
    exports: dict[str, Any] = field(default_factory=dict, repr=False)
    #: What the program logged through the engine (`pulumi.log`), as (level, message): the CLI's diagnostics.
    diagnostics: list[tuple[str, str]] = field(default_factory=list, repr=False)

    def warnings(self) -> list[str]:
        """The warnings the CLI would show under Diagnostics (`warning: <message>`)."""
        return [message for level, message in self.diagnostics if level == "warning"]

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
        sig = value.get(sdk.SIGNATURE_KEY)
        if sig == sdk.SECRET_SIGNATURE:
            return _secret_leaves(value.get("value"))
        if sig is not None and sig == sdk.RESOURCE_SIGNATURE:
            return value.get("urn")
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value == sdk.UNKNOWN:
        return UNKNOWN
    return value


#: What the stand-in random bytes derive from; another salt gives other bytes (tools/plan.py plans twice to find
#: which outputs come from them).
_OFFLINE_SALT = ["offline"]


@contextlib.contextmanager
def offline_salt(salt: str) -> Any:
    """Plan with other stand-in random bytes while inside: an output that differs came from the mocks."""
    _OFFLINE_SALT.append(salt)
    try:
        yield
    finally:
        _OFFLINE_SALT.pop()


def _offline_bytes(name: str, length: int) -> bytes:
    """Deterministic stand-in bytes for a random resource: plans are reproducible, and obviously not real keys."""
    out = b""
    while len(out) < length:
        out += hashlib.sha256(f"{_OFFLINE_SALT[-1]} {name} {len(out)}".encode()).digest()
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


def _wire_output(value: Any) -> Any:
    """A stack output as the engine's StackReference state holds it (plain JSON values, unknowns as such)."""
    if isinstance(value, SecretOutput):
        return _wire_output(value.value)
    if isinstance(value, Secret):
        raise TypeError("a secret output needs its value: pass secret(value), not the SECRET marker")
    if isinstance(value, Unknown):
        return sdk.UNKNOWN
    if isinstance(value, Mapping):
        return {str(k): _wire_output(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_wire_output(v) for v in value]
    return value


def _holds_secret(value: Any) -> bool:
    if isinstance(value, SecretOutput | Secret):
        return True
    if isinstance(value, Mapping):
        return any(_holds_secret(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_secret(v) for v in value)
    return False


def stack_reference_state(name: str, stack_outputs: StackOutputs) -> dict[str, Any]:
    """The state the engine reads for ``StackReference(name)``: that stack's outputs and which are secret.

    Raises UnknownStackError for a stack not in ``stack_outputs``, as the engine fails for a stack that does not
    exist; a missing output is simply absent, so ``require_output`` raises and ``get_output`` gives None (the SDK).
    """
    if name not in stack_outputs:
        known = ", ".join(sorted(stack_outputs)) or "none"
        raise UnknownStackError(
            f"unknown stack {name!r}: a StackReference needs an existing stack (offline: its outputs; given: {known})"
        )
    outputs = stack_outputs[name]
    return {
        "name": name,
        "outputs": {key: _wire_output(value) for key, value in outputs.items()},
        "secretOutputNames": sorted(key for key, value in outputs.items() if _holds_secret(value)),
    }


class _Mocks(sdk.Mocks):
    """Echo inputs as state, the way a provider would for objects it creates as asked."""

    def __init__(self, stack_outputs: StackOutputs, hint: Callable[[str], str | None] = lambda _stack: None) -> None:
        self.stack_outputs = stack_outputs
        self.errors: list[Exception] = []
        #: What names a referenced stack in the run's config, and what to do when it does not exist (the engine
        #: only names the stack; offline, the message says which key names it too).
        self.hint = hint

    def new_resource(self, args: sdk.MockResourceArgs) -> tuple[str | None, dict]:
        if args.typ == "pulumi:pulumi:StackReference":
            stack_name = str(args.inputs.get("name") or args.resource_id or args.name)
            try:
                return stack_name, stack_reference_state(stack_name, self.stack_outputs)
            except UnknownStackError as exc:
                hint = self.hint(stack_name)
                error = UnknownStackError(f"{exc}; {hint}") if hint else exc
                self.errors.append(error)  # the run reports it, whatever the SDK makes of the failed read
                raise error from None
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

    def call(self, args: sdk.MockCallArgs) -> tuple[dict, list[tuple[str, str]] | None]:
        return {}, None


ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


def engine_urn(stack: str, project: str, parent: str, type_: str, name: str) -> str:
    """A resource's URN as the real engine forms it: ``urn:pulumi:<stack>::<project>::<chain>::<name>``, where the
    chain is the parent's own chain, ``$``, the type; a child of the root stack (or of nothing) has its type alone."""
    chain = type_
    if parent:
        parent_chain = parent.split("::")[2]
        if parent_chain != ROOT_STACK_TYPE:
            chain = f"{parent_chain}${type_}"
    return f"urn:pulumi:{stack}::{project}::{chain}::{name}"


class _RecordingMonitor(sdk.MockMonitor):
    """The SDK's mock monitor, also keeping parent links and secret markers (the SDK drops both)."""

    def __init__(self, mocks: _Mocks) -> None:
        super().__init__(mocks)
        self.errors = mocks.errors  # what the run reports (_execute): the mocks' own list
        self.lock = threading.Lock()
        self.registered: list[RegisteredResource] = []
        self.thread_loops: set[asyncio.AbstractEventLoop] = set()
        self.urns: set[str] = set()

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """The engine's URN (pkg/resource/urn.go): the parent's whole type chain before the type, the root stack
        left out. The SDK's mock keeps only the parent's own type and names the stack, so two resources of one
        name under parents of different types but one type of their own would share a URN offline only."""
        return engine_urn(self._stack_name(), self._project_name(), parent, type_, name)

    def _stack_name(self) -> str:
        return pulumi.get_stack()

    def _project_name(self) -> str:
        return pulumi.get_project()

    def remember_urn(self, urn: str) -> None:
        """As strict as the engine: a second resource with a URN already taken fails the run."""
        with self.lock:
            if urn in self.urns:
                self.errors.append(DuplicateUrnError(f"Duplicate resource URN '{urn}'; try giving it a unique name"))
            self.urns.add(urn)

    def _track_thread_loop(self) -> None:
        # The SDK gives each executor thread an event loop; keep them so the run can close them.
        loop = sdk.thread_event_loop()
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
        self.remember_urn(response.urn)
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
            self.record_registration(request, response.urn)
        return response

    def record_registration(self, request: Any, urn: str) -> None:
        """Keep what a RegisterResource asked for (secrets as SECRET), with its options."""
        record = RegisteredResource(
            type=request.type,
            name=request.name,
            urn=urn,
            parent_urn=request.parent or None,
            custom=bool(request.custom),
            inputs=_plain(json_format.MessageToDict(request.object)),
            provider=request.provider or None,
            protect=bool(request.protect),
            retain_on_delete=bool(request.retainOnDelete),
            dependencies=tuple(request.dependencies),
        )
        self.remember_urn(urn)
        with self.lock:
            self.registered.append(record)


async def _export(value: Any) -> Any:
    """Like ``_resolve``, but a secret keeps its value, wrapped in ``secret(...)`` (for ``ProgramRun.exports``)."""
    if isinstance(value, pulumi.Output):
        if not await value.is_known():
            return UNKNOWN
        inner = await _export(await value.future())
        return SecretOutput(inner) if await value.is_secret() else inner
    if asyncio.isfuture(value) or asyncio.iscoroutine(value):
        return await _export(await value)
    if isinstance(value, dict):
        return {k: await _export(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [await _export(v) for v in value]
    return value


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


#: How many runs failed so far in this process (each may strand SDK coroutines; see collect_stranded_coroutines).
failed_runs = 0


def collect_stranded_coroutines() -> None:
    """Collect garbage with the SDK's "coroutine ... was never awaited" warnings ignored.

    A failed run strands coroutines the SDK never awaits (a failed ``require_output`` leaves its ``is_known``,
    say); Python warns when they are collected, which can be at any later moment, inside other code. Call this
    once the failed run's error is no longer referenced (the test suite does after such a test).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
        gc.collect()


class _Diagnostics(logging.Handler):
    """Collects what the mock engine logs (the program's `pulumi.log` calls) for ProgramRun.diagnostics."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname.lower(), record.getMessage()))


def _engine_logger(handler: _Diagnostics) -> logging.Logger:
    """A logger of its own per run, which never reaches the root logger (where it would print bare messages)."""
    logger = logging.getLogger(f"headscale-ha.engine.{id(handler)}")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger


def _run_file(program: Path) -> None:
    """Run ``program`` as the CLI runs a project's main file.

    A ``__main__.py`` runs as its directory's main module: runpy puts the directory first on the module path for the
    run and takes it off after, so the program imports the modules beside it as under the CLI, and nothing here
    edits the path. Any other file runs on its own.
    """
    target = program.parent if program.name == "__main__.py" else program
    runpy.run_path(str(target), run_name="__main__")


def _check_stack_outputs(stack_outputs: StackOutputs | None) -> None:
    """Refuse what no engine could hold: a bare SECRET marker, a stack name that is not `org/project/stack`."""
    for name, outputs in (stack_outputs or {}).items():
        _wire_output(outputs)  # a bare SECRET marker is refused before the run, not inside the engine's read
        if name.count("/") != 2:
            raise ValueError(f"stack_outputs: {name!r} is not a fully qualified `org/project/stack` name")


def _start_runtime(
    monitor: _RecordingMonitor,
    *,
    project: str,
    stack: str,
    config: Mapping[str, str],
    secret_keys: Iterable[str],
    preview: bool,
) -> _Diagnostics:
    """A fresh runtime for one run, answering through ``monitor``; returns where the engine's log goes."""
    sdk.reset_runtime(project=project, stack=stack)
    pulumi.runtime.set_all_config(dict(config), sorted(secret_keys))
    diagnostics = _Diagnostics()
    pulumi.runtime.set_mocks(
        monitor.mocks,
        project=project,
        stack=stack,
        preview=preview,
        monitor=monitor,
        logger=_engine_logger(diagnostics),
    )
    sdk.clear_output_tasks()
    return diagnostics


def _execute(program: Path | Callable[[], object], loop: asyncio.AbstractEventLoop, mocks: _Mocks) -> None:
    """Run the program and wait for everything it started; an error the engine (the mocks) raised comes first."""
    try:
        if isinstance(program, Path):
            _run_file(program)
        else:
            program()
        loop.run_until_complete(sdk.drain_rpcs())
    except Exception:
        if mocks.errors:
            raise mocks.errors[0] from None
        raise
    if mocks.errors:
        raise mocks.errors[0]


def _result(
    loop: asyncio.AbstractEventLoop, monitor: _RecordingMonitor, diagnostics: _Diagnostics, project: str, stack: str
) -> ProgramRun:
    """What the run registered and exported."""
    exported = getattr(sdk.root_resource(), "outputs", {}) or {}
    outputs = loop.run_until_complete(_resolve(dict(exported)))
    exports = loop.run_until_complete(_export(dict(exported)))
    with monitor.lock:
        resources = list(monitor.registered)
    return ProgramRun(
        project=project,
        stack=stack,
        resources=resources,
        outputs=outputs,
        exports=exports,
        diagnostics=list(diagnostics.records),
    )


def _cancel_pending(loop: asyncio.AbstractEventLoop) -> None:
    """A failed run leaves tasks that will never finish: cancel them, and do not let asyncio report them (or
    exceptions nobody retrieved) later, in the middle of whatever runs next."""
    loop.set_exception_handler(lambda _loop, _context: None)
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    with contextlib.suppress(Exception):
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def _finish(
    loop: asyncio.AbstractEventLoop,
    monitor: _RecordingMonitor,
    *,
    failed: bool,
    registered: list[RegisteredResource] | None,
) -> None:
    """Leave the process as before the run: the SDK reset, every event loop closed, no task kept; ``registered``
    gets what the run registered, the RPCs still in flight drained first."""
    sdk.undo_dynamic_pickler_patch()
    # Drain what is left; the program's own error, if any, is the one worth reporting.
    with contextlib.suppress(Exception):
        loop.run_until_complete(sdk.drain_rpcs(all_outstanding=False))
    if registered is not None:
        with monitor.lock:
            registered.extend(monitor.registered)
    if failed:
        _cancel_pending(loop)
    sdk.reset_runtime()
    pulumi.runtime.set_all_config({}, [])
    loop.run_until_complete(loop.shutdown_default_executor())
    for thread_loop in monitor.thread_loops - {loop}:
        thread_loop.close()
    asyncio.set_event_loop(None)
    loop.close()
    # The SDK keeps every Output's task until the next run clears it; clear it now and, after a failure, collect
    # the coroutines that were never started while their warnings are ignored.
    sdk.clear_output_tasks()
    if failed:
        global failed_runs  # a counter the test suite reads
        failed_runs += 1
        collect_stranded_coroutines()


def run_program(
    *,
    project: str,
    stack: str,
    config: Mapping[str, str],
    secret_keys: frozenset[str] | set[str] = frozenset(),
    program: Path | Callable[[], object] = PROJECT_DIR / "__main__.py",
    registered: list[RegisteredResource] | None = None,
    stack_outputs: StackOutputs | None = None,
    preview: bool = False,
    monitor_factory: Callable[[_Mocks], _RecordingMonitor] | None = None,
) -> ProgramRun:
    """Run ``program`` as stack ``stack`` of ``project`` with ``config`` (CLI wire form) under mocks.

    ``program`` is a Pulumi program file (run as `__main__`; a project's ``__main__.py`` with its directory first on
    the module path while it runs, as the CLI runs it), or a callable that registers resources itself: one
    component built from hand-written args, say.

    ``stack_outputs`` is every other stack the program may reference, by fully qualified name, with its outputs
    (see ``StackOutputs``); a StackReference to any other stack fails the run with UnknownStackError, and
    ``require_output`` of an output the stack lacks raises KeyError, as in a real run.
    Exceptions raised by the program (a ConfigError, say) propagate unchanged; pass ``registered`` to
    still learn what had been registered when it failed. ``preview`` runs it as `pulumi preview` does (dry run);
    ``monitor_factory`` replaces the monitor that answers registrations (the engine model in the tests).
    """
    _check_stack_outputs(stack_outputs)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks = _Mocks(
        dict(stack_outputs or {}),
        hint=lambda referenced: stack_reference_hint(
            config, project=project, stack=stack, secret_keys=secret_keys, referenced=referenced
        ),
    )
    monitor = (monitor_factory or _RecordingMonitor)(mocks)
    try:
        diagnostics = _start_runtime(
            monitor, project=project, stack=stack, config=config, secret_keys=secret_keys, preview=preview
        )
        _execute(program, loop, mocks)
        return _result(loop, monitor, diagnostics, project, stack)
    finally:
        _finish(loop, monitor, failed=sys.exc_info()[0] is not None, registered=registered)
