"""A component provider plugin, started and driven the way the engine does it, against a recording monitor.

Facts the fake follows (pulumi/pulumi: sdk/python/cmd/pulumi-language-python ``RunPlugin``, pkg/resource/plugin
``provider_plugin.go``; the Python SDK 3.272.0: ``pulumi/provider/experimental/host.py``
``component_provider_host``, ``pulumi/provider/server.py`` ``main`` and ``ProviderServicer``,
``pulumi/runtime/settings.py`` ``_load_monitor_feature_support``):

* The language host runs a plugin directory holding ``__main__.py`` as ``python <plugin dir> <engine address>``
  (its ``req.Args`` are the engine's address and optional flags), in the plugin's directory: Python then puts that
  directory first on the module path, so the plugin imports its sibling modules. ``component_provider_host`` passes
  ``sys.argv[1:]`` to ``server.main``, whose argparse takes the ``engine`` positional; it serves the
  ResourceProvider service on 127.0.0.1 and writes the port as stdout's first line.
* The engine calls ``Handshake`` (the Python server leaves it UNIMPLEMENTED, which the engine accepts),
  ``GetPluginInfo``, ``GetSchema(version=0)`` (anything else fails), and ``Configure`` before the first Construct;
  the server answers acceptSecrets, acceptResources and acceptOutputs.
* ``Construct`` carries project, stack, organization (the SDK takes "organization" when empty), config and its
  secret keys, dryRun, monitorEndpoint, type, name, parent, the inputs as a Struct serialized as
  ``rpc.serialize_properties`` does (a secret as the secret signature), and inputDependencies per input; the
  server resets its runtime settings to those values each time, so one process serves many Constructs.
* During a Construct the provider asks the monitor ``GetDeploymentInfo`` (``SupportsFeature`` only when that is
  UNIMPLEMENTED), registers the component itself (``RegisterResource``, custom=false, parent = the request's
  parent) then its children, calls ``RegisterResourceOutputs`` for ``register_outputs``, and sends ``pulumi.log``
  calls to the Engine service's ``Log``. It waits for its outstanding RPCs before it answers, so everything a
  Construct registers has arrived when the response does.
* A missing required input (``InputPropertyError``) aborts with INVALID_ARGUMENT and a ``google.rpc.Status`` in the
  ``grpc-status-details-bin`` trailer holding an ``InputPropertiesError`` (property path, reason); any other failure
  comes back as the exception's text followed by its traceback.

The monitor is the repository's in-process recorder (``tools.harness._RecordingMonitor`` over ``_Mocks``), served
over gRPC, so a Construct's records are the same ``RegisteredResource`` objects, with the same value conversion,
as an in-process ``run_program`` of the same component. Two deliberate choices follow from that:

* The deployment features are the SDK mock monitor's (no outputValues): the real engine also accepts output
  values, but then the provider would send inputs in a form an in-process run never records.
* URNs are formed by the real engine's rule (tools/harness.py ``engine_urn``: the parent's whole type chain, ``$``,
  the type; a child of the root stack has its type alone), with the Construct's project and stack, as in an
  in-process run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import (
    engine_pb2,
    engine_pb2_grpc,
    errors_pb2,
    provider_pb2,
    provider_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
    status_pb2,
)

from tests.support.litestream_lab import stop_process
from tools import pulumi_internals as sdk

# Private names (_Mocks, _RecordingMonitor, _plain), imported here only: the fake monitor must record exactly as an
# in-process run does, which takes the harness's own monitor, mocks and wire-to-Python conversion (a copy here
# could drift from them silently).
from tools.harness import (
    RegisteredResource,
    Secret,
    SecretOutput,
    Unknown,
    _Mocks,
    _plain,
    _RecordingMonitor,
    engine_urn,
)

#: How long the plugin may take to print its port, and a Construct to answer (a component builds in seconds).
START_TIMEOUT = 30.0
CALL_TIMEOUT = 60.0
#: The engine's message limits (pulumi's own gRPC settings): a large component's registrations fit.
_GRPC_OPTIONS = [("grpc.max_receive_message_length", 400 * 1024 * 1024)]
_STATUS_DETAILS = "grpc-status-details-bin"
#: SupportsFeature ids (the monitor's legacy question) -> the features GetDeploymentInfo lists.
_LEGACY_FEATURES = {
    "secrets": resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS,
    "resourceReferences": resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES,
    "outputValues": resource_pb2.RESOURCE_MONITOR_FEATURE_OUTPUT_VALUES,
    "deletedWith": resource_pb2.RESOURCE_MONITOR_FEATURE_DELETED_WITH,
    "replaceWith": resource_pb2.RESOURCE_MONITOR_FEATURE_REPLACE_WITH,
    "aliasSpecs": resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS,
    "transforms": resource_pb2.RESOURCE_MONITOR_FEATURE_TRANSFORMS,
    "invokeTransforms": resource_pb2.RESOURCE_MONITOR_FEATURE_INVOKE_TRANSFORMS,
    "parameterization": resource_pb2.RESOURCE_MONITOR_FEATURE_PARAMETERIZATION,
    "resourceHooks": resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_HOOKS,
    "errorHooks": resource_pb2.RESOURCE_MONITOR_FEATURE_ERROR_HOOKS,
}


class ComponentHostError(Exception):
    """The plugin did not start (or died): the message ends with what it wrote to stderr."""


class ConstructError(Exception):
    """A Construct the provider failed.

    ``property_errors`` holds the (property path, reason) pairs of the InputPropertiesError the SDK sends for
    invalid inputs (a missing required one, say); ``details`` is the provider's whole message (with its traceback
    for other failures); ``stderr`` what the plugin process had written to stderr by then.
    """

    def __init__(
        self,
        message: str,
        *,
        property_errors: tuple[tuple[str, str], ...] = (),
        details: str = "",
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.property_errors = property_errors
        self.details = details
        self.stderr = stderr


@dataclass(frozen=True)
class Constructed:
    """What one Construct produced.

    ``state`` is the component's outputs as the response carries them, converted as the harness converts
    registered inputs: secrets' leaves are ``tools.harness.SECRET``, unknown values ``tools.harness.UNKNOWN``.
    """

    urn: str
    state: dict[str, Any]
    #: Everything registered during this Construct, in arrival order: the component itself first (its children
    #: wait for its URN), then the children in whatever order their concurrent registrations arrive.
    resources: list[RegisteredResource]
    #: (severity, message) the provider sent to the Engine service: "debug", "info", "warning" or "error".
    logs: list[tuple[str, str]]
    #: What ``register_outputs`` reported, by URN, converted like ``state``.
    registered_outputs: dict[str, dict[str, Any]]
    #: The monitor calls in arrival order as (method, subject): the feature asked, the invoke's token, the type.
    monitor_calls: tuple[tuple[str, str], ...] = ()

    def child_resources(self) -> list[RegisteredResource]:
        """The registrations other than the component's own."""
        return [r for r in self.resources if r.urn != self.urn]


@dataclass(frozen=True)
class ChildSignature:
    """A descendant of a component as two runs of it can compare it: URNs and options left out."""

    #: The types from the component's child down to this resource (the component's own type excluded).
    types: tuple[str, ...]
    name: str
    custom: bool
    inputs: dict[str, Any]


def children_signature(resources: Iterable[RegisteredResource], root_urn: str) -> list[ChildSignature]:
    """The descendants of ``root_urn`` among ``resources``, sorted by type chain and name.

    Both an in-process run (where the component hangs under the stack) and a Construct (where it may have no
    parent) give the same list for the same component: the chain starts below the component, so its own
    parentage does not count, and arrival order (which concurrent registrations make vary) does not either.
    """
    listed = list(resources)
    by_urn = {r.urn: r for r in listed}
    found: list[ChildSignature] = []
    for resource in listed:
        chain: list[str] = []
        node: RegisteredResource | None = resource
        while node is not None and node.urn != root_urn:
            chain.append(node.type)
            node = by_urn.get(node.parent_urn) if node.parent_urn else None
        if node is None or not chain:
            continue  # not below the component, or the component itself
        found.append(ChildSignature(tuple(reversed(chain)), resource.name, resource.custom, resource.inputs))
    return sorted(found, key=lambda s: (s.types, s.name))


def stack_urn(project: str, stack: str) -> str:
    """The root stack's URN as the mock monitor forms it: a Construct with this parent registers the component
    under the URN an in-process run gives it."""
    return f"urn:pulumi:{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack}"


def _wire(value: Any) -> Any:
    """Test values -> what the SDK serializes: ``tools.harness.secret(v)`` as the secret signature, UNKNOWN as
    the unknown sentinel (the forms a program's secret and unknown inputs reach the engine in)."""
    if isinstance(value, SecretOutput):
        return sdk.wrap_rpc_secret(_wire(value.value))
    if isinstance(value, Secret):
        raise TypeError("a secret input needs its value: pass tools.harness.secret(value), not the SECRET marker")
    if isinstance(value, Unknown):
        return sdk.UNKNOWN
    if isinstance(value, Mapping):
        return {str(k): _wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_wire(v) for v in value]
    return value


def _struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    return asyncio.run(sdk.serialize_properties(_wire(values), {}))


def _values(struct: struct_pb2.Struct) -> dict[str, Any]:
    return _plain(json_format.MessageToDict(struct))


def _status_details(error: grpc.RpcError) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The google.rpc.Status the SDK packs into the trailer for invalid inputs: its message and property errors."""
    trailer = dict(error.trailing_metadata() or ())  # type: ignore[attr-defined] # a call error is also a grpc.Call
    raw = trailer.get(_STATUS_DETAILS)
    if not raw:
        return "", ()
    status = status_pb2.Status.FromString(raw)
    found: list[tuple[str, str]] = []
    for detail in status.details:
        errors = errors_pb2.InputPropertiesError()
        if detail.Unpack(errors):
            found.extend((e.property_path, e.reason) for e in errors.errors)
    return status.message, tuple(found)


#: How grpc.aio words an exception a servicer raised: the SDK's own message follows it.
_AIO_PREFIX = re.compile(r"^Unexpected <class '[^']*'>: ")


def _provider_message(details: str) -> str:
    """The provider's message without grpc.aio's prefix or the traceback the SDK appends after a colon."""
    lines = [line.strip() for line in (details or "").splitlines() if line.strip()]
    first = _AIO_PREFIX.sub("", lines[0]) if lines else details
    return first.removesuffix(":") if len(lines) > 1 or first.endswith(":") else first


class _Monitor(_RecordingMonitor):
    """The harness's recording monitor, with URNs for the Construct at hand and the calls MockMonitor lacks."""

    def __init__(self) -> None:
        super().__init__(_Mocks({}))
        self.project = ""
        self.stack = ""
        self.outputs: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []

    def note(self, method: str, subject: str = "") -> None:
        with self.lock:
            self.calls.append((method, subject))

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # MockMonitor.make_urn's rule, with this Construct's stack and project rather than the test process's
        # runtime settings (which belong to whatever ran last in this process).
        return engine_urn(self.stack, self.project, parent, type_, name)

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        outputs = _values(request.outputs)
        with self.lock:
            self.outputs[request.urn] = outputs
        return empty_pb2.Empty()

    def SupportsFeature(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        # The same answer GetDeploymentInfo gives (MockMonitor answers with an ad-hoc object, not a message).
        features = set(self.GetDeploymentInfo(empty_pb2.Empty()).supportedFeatures)
        return resource_pb2.SupportsFeatureResponse(hasSupport=_LEGACY_FEATURES.get(request.id, -1) in features)


class _MonitorServicer(resource_pb2_grpc.ResourceMonitorServicer):
    """The ResourceMonitor service over ``_Monitor``: each call noted, a failure sent back as its message."""

    def __init__(self, monitor: _Monitor) -> None:
        self.monitor = monitor

    def _serve(self, method: str, subject: str, request: Any, context: grpc.ServicerContext) -> Any:
        self.monitor.note(method, subject)
        try:
            return getattr(self.monitor, method)(request)
        except Exception as exc:  # noqa: BLE001 - the provider gets it as the call's error, as from the engine
            context.abort(grpc.StatusCode.UNKNOWN, f"{type(exc).__name__}: {exc}")

    def GetDeploymentInfo(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("GetDeploymentInfo", "", request, context)

    def SupportsFeature(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("SupportsFeature", request.id, request, context)

    def Invoke(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("Invoke", request.tok, request, context)

    def Call(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        # The engine would forward a method call to another provider; the mocks have none to forward it to.
        self.monitor.note("Call", request.tok)
        context.abort(grpc.StatusCode.UNIMPLEMENTED, f"the recording monitor serves no method calls ({request.tok})")

    def ReadResource(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("ReadResource", request.type, request, context)

    def ExistsResource(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("ExistsResource", request.type, request, context)

    def RegisterResource(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("RegisterResource", request.type, request, context)

    def RegisterResourceOutputs(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("RegisterResourceOutputs", request.urn, request, context)

    def RegisterStackTransform(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("RegisterStackTransform", request.token, request, context)

    def RegisterStackInvokeTransform(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("RegisterStackInvokeTransform", request.token, request, context)

    def RegisterResourceHook(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("RegisterResourceHook", request.name, request, context)

    def RegisterErrorHook(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("RegisterErrorHook", request.name, request, context)

    def RegisterPackage(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._serve("RegisterPackage", request.name, request, context)

    def SignalAndWaitForShutdown(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        # The engine answers once the deployment is done; for a provider's Construct there is nothing to wait for.
        return self._serve("SignalAndWaitForShutdown", "", request, context)


class _EngineServicer(engine_pb2_grpc.EngineServicer):
    """The Engine service a plugin logs to; the root resource is only kept (the engine's is the program's)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.logs: list[tuple[str, str]] = []
        self.root = ""

    def Log(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        severity = engine_pb2.LogSeverity.Name(request.severity).lower()
        with self.lock:
            self.logs.append((severity, request.message))
        return empty_pb2.Empty()

    def GetRootResource(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return engine_pb2.GetRootResourceResponse(urn=self.root)

    def SetRootResource(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self.root = request.urn
        return engine_pb2.SetRootResourceResponse()

    def StartDebugging(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return empty_pb2.Empty()

    def RequirePulumiVersion(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return engine_pb2.RequirePulumiVersionResponse()


class ComponentHost:
    """One plugin process and the monitor and engine it calls back; ``close()`` (or ``with``) stops them all.

    ``env`` is added to this process's environment (PYTHONPATH removed, as the engine gives a plugin none of
    ours); ``python`` is the interpreter that runs the plugin (this one by default: its environment has the SDK).
    Constructs run one at a time; each one's records are its own.
    """

    def __init__(self, plugin_dir: Path, *, python: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.plugin_dir = Path(plugin_dir).resolve()
        self.monitor = _Monitor()
        self.engine = _EngineServicer()
        self._construct_lock = threading.Lock()
        self._executor = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="component-host-monitor")
        self.server = grpc.server(self._executor, options=_GRPC_OPTIONS)
        resource_pb2_grpc.add_ResourceMonitorServicer_to_server(_MonitorServicer(self.monitor), self.server)
        engine_pb2_grpc.add_EngineServicer_to_server(self.engine, self.server)
        # One server answers as both the monitor and the engine: the provider dials each by its address, and
        # nothing in the protocol needs them apart.
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.address = f"127.0.0.1:{port}"
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the host; closed by close()
        self.stdout_lines: list[str] = []
        self.process: subprocess.Popen[bytes] | None = None
        self._stdout_reader: threading.Thread | None = None
        self.channel: grpc.Channel | None = None
        try:
            self._start(python or sys.executable, env or {})
        except BaseException:
            self.close()
            raise

    def _start(self, python: str, extra_env: Mapping[str, str]) -> None:
        environment = dict(os.environ)
        environment.pop("PYTHONPATH", None)
        environment.update(extra_env)
        # As the language host runs a plugin directory with a __main__.py: `python <dir> <engine address>` in it.
        self.process = subprocess.Popen(
            [python, str(self.plugin_dir), self.address],
            cwd=self.plugin_dir,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        port = self._read_port()
        # The engine shows a plugin's later stdout as info lines; read it on, so a chatty component never fills the
        # pipe and blocks.
        self._stdout_reader = threading.Thread(target=self._drain_stdout, name="component-host-stdout", daemon=True)
        self._stdout_reader.start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=_GRPC_OPTIONS)
        grpc.channel_ready_future(self.channel).result(timeout=START_TIMEOUT)
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)
        try:
            self.stub.Handshake(
                provider_pb2.ProviderHandshakeRequest(
                    engine_address=self.address,
                    root_directory=str(self.plugin_dir),
                    program_directory=str(self.plugin_dir),
                ),
                timeout=CALL_TIMEOUT,
            )
            self.handshake_implemented = True
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNIMPLEMENTED:  # type: ignore[attr-defined]
                raise ComponentHostError(f"Handshake failed: {error.details()}{self._stderr_tail()}") from None  # type: ignore[attr-defined]
            self.handshake_implemented = False  # the engine then carries on with Configure, as here
        self.version = self.stub.GetPluginInfo(empty_pb2.Empty(), timeout=CALL_TIMEOUT).version
        self.configured = self.stub.Configure(
            provider_pb2.ConfigureRequest(args=struct_pb2.Struct(), acceptSecrets=True, acceptResources=True),
            timeout=CALL_TIMEOUT,
        )

    def _read_port(self) -> int:
        """The first stdout line, as the engine reads it: a port, or the plugin failed to start."""
        assert self.process is not None
        assert self.process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        line = b""
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self.process.stdout], [], [], max(remaining, 0))
            if not ready:
                raise ComponentHostError(f"no port from the plugin within {START_TIMEOUT:.0f}s{self._stderr_tail()}")
            chunk = os.read(self.process.stdout.fileno(), 1)
            if not chunk:
                self.process.wait(timeout=10)
                raise ComponentHostError(
                    f"the plugin exited ({self.process.returncode}) before printing its port{self._stderr_tail()}"
                )
            line += chunk
        try:
            return int(line.decode().strip())
        except ValueError:
            raise ComponentHostError(f"the plugin's first line is not a port: {line!r}{self._stderr_tail()}") from None

    def _drain_stdout(self) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            self.stdout_lines.append(raw.decode(errors="replace").rstrip("\n"))

    def stderr_text(self) -> str:
        """What the plugin wrote to stderr so far (its tracebacks and warnings)."""
        if self.stderr.closed:
            return ""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def _stderr_tail(self, lines: int = 40) -> str:
        tail = "\n".join(self.stderr_text().splitlines()[-lines:])
        return f"\nplugin stderr:\n{tail}" if tail else ""

    def schema(self) -> dict[str, Any]:
        """GetSchema (version 0, the only one the SDK serves), parsed."""
        response = self.stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=CALL_TIMEOUT)
        return json.loads(response.schema)

    def construct(
        self,
        type_token: str,
        name: str,
        inputs: Mapping[str, Any],
        *,
        project: str = "component-test",
        stack: str = "unit",
        dry_run: bool = True,
        config: Mapping[str, str] | None = None,
        config_secret_keys: Iterable[str] = (),
        parent: str | None = None,
        organization: str = "organization",
    ) -> Constructed:
        """Construct ``type_token`` named ``name`` from ``inputs`` (plain values, ``tools.harness.secret(v)`` for a
        secret, ``tools.harness.UNKNOWN`` for a value a preview does not know), as the engine does for a program's
        remote component; raises ConstructError when the provider fails it."""
        with self._construct_lock:
            with self.monitor.lock:
                self.monitor.project, self.monitor.stack = project, stack
                first_resource, first_call = len(self.monitor.registered), len(self.monitor.calls)
                outputs_before = set(self.monitor.outputs)
            with self.engine.lock:
                first_log = len(self.engine.logs)
            request = provider_pb2.ConstructRequest(
                project=project,
                stack=stack,
                organization=organization,
                config=dict(config or {}),
                configSecretKeys=sorted(config_secret_keys),
                dryRun=dry_run,
                monitorEndpoint=self.address,
                type=type_token,
                name=name,
                parent=parent or "",
                inputs=_struct(inputs),
                inputDependencies={key: provider_pb2.ConstructRequest.PropertyDependencies() for key in inputs},
                accepts_output_values=True,
            )
            try:
                response = self.stub.Construct(request, timeout=CALL_TIMEOUT)
            except grpc.RpcError as error:
                raise self._construct_error(error) from None
            with self.monitor.lock:
                resources = list(self.monitor.registered[first_resource:])
                calls = tuple(self.monitor.calls[first_call:])
                registered_outputs = {
                    urn: values for urn, values in self.monitor.outputs.items() if urn not in outputs_before
                }
            with self.engine.lock:
                logs = list(self.engine.logs[first_log:])
        return Constructed(
            urn=response.urn,
            state=_values(response.state),
            resources=resources,
            logs=logs,
            registered_outputs=registered_outputs,
            monitor_calls=calls,
        )

    def _construct_error(self, error: grpc.RpcError) -> ConstructError:
        details = error.details() or ""  # type: ignore[attr-defined] # a call error is also a grpc.Call
        status_message, property_errors = _status_details(error)
        if property_errors:
            listed = "; ".join(f"{path}: {reason}" for path, reason in property_errors)
            message = f"{status_message}: {listed}" if status_message else listed
        else:
            message = _provider_message(details)
        return ConstructError(message, property_errors=property_errors, details=details, stderr=self.stderr_text())

    def close(self) -> None:
        """Stop the plugin, then the servers, and close the event loops the monitor's threads made."""
        if self.channel is not None:
            self.channel.close()
        if self.process is not None:
            stop_process(self.process, timeout=10)
            if self._stdout_reader is not None:
                self._stdout_reader.join(timeout=10)  # the pipe ends with the process
            if self.process.stdout is not None:
                self.process.stdout.close()
        self.server.stop(grace=None).wait(timeout=10)
        self._executor.shutdown(wait=True)
        with self.monitor.lock:
            loops = list(self.monitor.thread_loops)
            self.monitor.thread_loops.clear()
        for loop in loops:
            with contextlib.suppress(RuntimeError):  # one still running belongs to someone else: leave it
                loop.close()
        self.stderr.close()

    def __enter__(self) -> ComponentHost:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
