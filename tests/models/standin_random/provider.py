"""The stand-in's gRPC server: pulumi-random's ResourceProvider service, on the Pulumi SDK's generated stubs.

Served as a plugin is: listen on a free local port, print it as the first line on stdout (the engine reads it there),
answer until killed. ``pulumi/dynamic/__main__.py`` serves its protocol the same way. Everything the engine can
observe of the two resources is in ``resources``; this module only moves it on and off the wire.
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable
from concurrent import futures
from typing import Any, TypeVar

import grpc
from google.protobuf import empty_pb2
from pulumi.runtime.proto import plugin_pb2, provider_pb2, provider_pb2_grpc

from tests.models.standin_random import resources
from tests.models.standin_random.generate import EmptyCharacterSetError
from tests.models.standin_random.wire import to_python, to_struct

Handler = TypeVar("Handler", bound=Callable[..., Any])
DIFF = provider_pb2.DiffResponse
KIND = {
    "add": provider_pb2.PropertyDiff.ADD_REPLACE,
    "delete": provider_pb2.PropertyDiff.DELETE_REPLACE,
    "update": provider_pb2.PropertyDiff.UPDATE_REPLACE,
}
#: Methods the engine may try that pulumi-random has nothing behind (no functions, components, mappings).
UNIMPLEMENTED = ("Handshake", "Parameterize", "GetMapping", "GetMappings", "Invoke", "Call", "Construct", "Attach")


def _type_and_name(request: Any) -> tuple[str, str]:
    """The resource's type token and name: the request's own fields, or (an older engine) parsed from its URN."""
    if request.type and request.name:
        return request.type, request.name
    qualified, _, name = request.urn.rpartition("::")
    return qualified.rpartition("::")[2].rpartition("$")[2], name


def _served(handler: Handler) -> Handler:
    """Turn a failure into the call's gRPC error (the engine shows its text) instead of a logged traceback."""

    @functools.wraps(handler)
    def call(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return handler(self, request, context)
        except resources.UnknownTypeError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.args[0])
        except EmptyCharacterSetError as exc:
            context.abort(grpc.StatusCode.UNKNOWN, f"Random Read Error. Original Error: {exc}")
        except Exception:  # noqa: BLE001 - every other failure is a bug of the stand-in: the engine shows the trace
            context.abort(grpc.StatusCode.UNKNOWN, f"standin-random failed:\n{traceback.format_exc()}")

    return call  # type: ignore[return-value]


class StandinRandomProvider(provider_pb2_grpc.ResourceProviderServicer):
    """pulumi-random 4.21.4's RandomPassword and RandomBytes, as the engine sees them (module docstring of
    ``resources``); no provider configuration, no functions."""

    def GetPluginInfo(self, request: Any, context: grpc.ServicerContext) -> plugin_pb2.PluginInfo:  # noqa: N802
        return plugin_pb2.PluginInfo(version=resources.VERSION)

    def GetSchema(self, request: Any, context: grpc.ServicerContext) -> provider_pb2.GetSchemaResponse:  # noqa: N802
        return provider_pb2.GetSchemaResponse(schema=json.dumps(resources.schema()))

    def CheckConfig(self, request: Any, context: grpc.ServicerContext) -> provider_pb2.CheckResponse:  # noqa: N802
        return provider_pb2.CheckResponse(inputs=request.news)

    def DiffConfig(self, request: Any, context: grpc.ServicerContext) -> provider_pb2.DiffResponse:  # noqa: N802
        return provider_pb2.DiffResponse(changes=DIFF.DIFF_NONE)

    def Configure(self, request: Any, context: grpc.ServicerContext) -> provider_pb2.ConfigureResponse:  # noqa: N802
        return provider_pb2.ConfigureResponse(acceptSecrets=True, supportsPreview=True)

    @_served
    def Check(self, request: Any, context: grpc.ServicerContext) -> provider_pb2.CheckResponse:  # noqa: N802
        token, name = _type_and_name(request)
        reasons = resources.check(resources.kind_of(token), to_python(request.news), name)
        # The bridge leaves ``property`` empty: the reason names the property ("Examine values at ...").
        failures = [provider_pb2.CheckFailure(reason=reason) for reason in reasons]
        return provider_pb2.CheckResponse(inputs=request.news, failures=failures)

    @_served
    def Diff(self, request: Any, context: grpc.ServicerContext) -> provider_pb2.DiffResponse:  # noqa: N802
        kind = resources.kind_of(_type_and_name(request)[0])
        planned = resources.plan(kind, to_python(request.news))
        changed = resources.changes(kind, to_python(request.olds), planned, set(request.ignoreChanges))
        return provider_pb2.DiffResponse(
            changes=DIFF.DIFF_SOME if changed else DIFF.DIFF_NONE,
            replaces=list(changed),
            diffs=list(changed),
            detailedDiff={
                key: provider_pb2.PropertyDiff(kind=KIND[how], inputDiff=True) for key, how in changed.items()
            },
            hasDetailedDiff=True,
            deleteBeforeReplace=False,
        )

    @_served
    def Create(self, request: Any, context: grpc.ServicerContext) -> provider_pb2.CreateResponse:  # noqa: N802
        kind = resources.kind_of(_type_and_name(request)[0])
        planned = resources.plan(kind, to_python(request.properties))
        resource_id, outputs = resources.create(kind, planned, request.preview)
        return provider_pb2.CreateResponse(id=resource_id, properties=to_struct(outputs))

    @_served
    def Read(self, request: Any, context: grpc.ServicerContext) -> provider_pb2.ReadResponse:  # noqa: N802
        """The state as it is (the real Read does nothing); an import (no state yet) is not implemented."""
        resources.kind_of(_type_and_name(request)[0])
        if not request.properties.fields:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "standin-random: import (a Read without state) is not implemented"
            )
        return provider_pb2.ReadResponse(id=request.id, properties=request.properties, inputs=request.inputs)

    @_served
    def Update(self, request: Any, context: grpc.ServicerContext) -> provider_pb2.UpdateResponse:  # noqa: N802
        """Never reached through Diff (every change replaces); the framework's Update: the plan, state's secrets."""
        kind = resources.kind_of(_type_and_name(request)[0])
        planned = resources.plan(kind, to_python(request.news))
        return provider_pb2.UpdateResponse(
            properties=to_struct(resources.update(kind, to_python(request.olds), planned))
        )

    def Delete(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:  # noqa: N802
        return empty_pb2.Empty()

    def Cancel(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:  # noqa: N802
        return empty_pb2.Empty()


def _unimplemented(method: str) -> Callable[..., Any]:
    """A quiet UNIMPLEMENTED (the engine falls back); the generated default also logs a traceback to stderr."""

    def answer(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, f"standin-random does not implement {method}")

    answer.__name__ = method
    return answer


for _method in UNIMPLEMENTED:
    setattr(StandinRandomProvider, _method, _unimplemented(_method))


def serve() -> None:
    """Listen on a free port on 127.0.0.1, tell the engine which (stdout's first line), serve until killed."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    provider_pb2_grpc.add_ResourceProviderServicer_to_server(StandinRandomProvider(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(0)
