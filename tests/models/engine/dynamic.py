"""The SDK's dynamic provider host, started and called the way the engine does it.

Facts (pulumi/pulumi: pkg/resource/deploy/providers, sdk/python/lib/pulumi/dynamic/__main__.py): the engine starts
one host process (`python -m pulumi.dynamic`) for a deployment, sends Configure with the stack's config (secrets as
plain values: the host answers acceptSecrets=false), then Check/Diff/Create/Update/Delete/Read with the serialized
provider in ``__provider``. The host deserializes each provider once per process. During a preview the engine
calls Check and Diff only: the host does not support preview, so the engine takes a create's or an update's inputs
as its outputs (what a provider computes is unknown).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from tests.support.litestream_lab import stop_process
from tools import pulumi_internals as sdk

PROJECT = Path(__file__).resolve().parents[3]
PROVIDER_KEY = "__provider"


class ProviderCallError(Exception):
    """A provider call failed: the message is the provider's exception (the host sends its traceback)."""


def _struct(values: Mapping[str, Any]) -> Any:
    return asyncio.run(sdk.serialize_properties(dict(values), {}))


def _values(struct: Any) -> dict[str, Any]:
    return sdk.deserialize_properties(struct, keep_unknowns=True)


def _last_line(details: str) -> str:
    lines = [line for line in (details or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else details


@dataclass(frozen=True)
class DynamicDiff:
    changes: bool | None  # None: DIFF_UNKNOWN
    replaces: tuple[str, ...]
    delete_before_replace: bool


class DynamicHost:
    """One host process; ``close()`` stops it (the engine stops its plugins when the deployment ends)."""

    def __init__(
        self, config: Mapping[str, Any], project: str, *, python: str | None = None, cwd: Path | None = None
    ) -> None:
        # As the engine starts it: in the project directory (the module path's first entry under -m), with the
        # program's environment, whose editable install is the package; no PYTHONPATH of ours. ``python`` and
        # ``cwd``: another interpreter and project, as the CLI's shim picks them for a consumer in another language
        # (`${PULUMI_PYTHON_CMD:-python3} -u -m pulumi.dynamic`, in that consumer's project directory).
        env = {**os.environ, "PULUMI_PROJECT": project}
        env.pop("PYTHONPATH", None)
        # The engine shows a plugin's stderr as info lines: kept in a file (a pipe nobody reads would block the
        # host once full), read back by ``messages``.
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the host; closed by its owner
        self.process = subprocess.Popen(
            [python or sys.executable, "-u", "-m", "pulumi.dynamic"],
            cwd=cwd or PROJECT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline().decode().strip())
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)
        self.stub.Configure(provider_pb2.ConfigureRequest(args=_struct(config), acceptSecrets=False), timeout=30)

    def close(self) -> None:
        self.channel.close()
        stop_process(self.process, timeout=10)

    def messages(self) -> list[str]:
        """What the providers wrote to stderr (their warnings), one entry per line."""
        self.stderr.seek(0)
        return [line for line in self.stderr.read().decode(errors="replace").splitlines() if line.strip()]

    def _call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self.stub, method)(request, timeout=120)
        except grpc.RpcError as error:
            raise ProviderCallError(_last_line(error.details())) from None

    def check(self, urn: str, olds: Mapping[str, Any] | None, news: Mapping[str, Any]) -> dict[str, Any]:
        request = provider_pb2.CheckRequest(urn=urn, olds=_struct(olds or {}), news=_struct(news))
        response = self._call("Check", request)
        if response.failures:
            failures = "; ".join(f"{f.property}: {f.reason}" for f in response.failures)
            raise ProviderCallError(f"check failed: {failures}")
        return _values(response.inputs)

    def diff(self, urn: str, id_: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> DynamicDiff:
        request = provider_pb2.DiffRequest(urn=urn, id=id_, olds=_struct(olds), news=_struct(news))
        response = self._call("Diff", request)
        changes = {
            provider_pb2.DiffResponse.DIFF_SOME: True,
            provider_pb2.DiffResponse.DIFF_NONE: False,
        }.get(response.changes)
        return DynamicDiff(changes, tuple(response.replaces), bool(response.deleteBeforeReplace))

    def create(self, urn: str, inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        response = self._call("Create", provider_pb2.CreateRequest(urn=urn, properties=_struct(inputs)))
        return response.id, _values(response.properties)

    def update(self, urn: str, id_: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> dict[str, Any]:
        request = provider_pb2.UpdateRequest(urn=urn, id=id_, olds=_struct(olds), news=_struct(news))
        return _values(self._call("Update", request).properties)

    def delete(self, urn: str, id_: str, outputs: Mapping[str, Any]) -> None:
        self._call("Delete", provider_pb2.DeleteRequest(urn=urn, id=id_, properties=_struct(outputs)))

    def read(self, urn: str, id_: str, outputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        response = self._call("Read", provider_pb2.ReadRequest(urn=urn, id=id_, properties=_struct(outputs)))
        return response.id, _values(response.properties)
