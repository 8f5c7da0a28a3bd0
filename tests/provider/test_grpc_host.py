"""The providers driven as the Pulumi engine drives them: through the SDK's own dynamic provider host, over gRPC.

The host (``python -m pulumi.dynamic``, the SDK's ``DynamicResourceProviderServicer``) runs as a process of its own,
as the engine starts it. The test sends Configure (the stack config with the API key), then Check, Diff, Create,
Read and Delete with the serialized provider in ``__provider``, as the engine does, against the fake Headscale. It
guards what unit tests cannot see: that the pickled provider re-imports and configures itself in a fresh process,
that the key travels only in the config (never in state), and that one process confirms the server's version once.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from headscale_ha.provider.base import (
    API_URL_CONFIG,
    HEADSCALE_CONFIG,
    WRITE_PATIENCE_ENV,
)
from headscale_ha.provider.resources import (
    API_KEY_CONFIG,
    PolicyProvider,
    PreAuthKeyProvider,
    UserProvider,
)
from tests.models.headscale import FakeHeadscale, Unreachable
from tests.support.litestream_lab import stop_process
from tools import pulumi_internals as sdk
from tools.pulumi_internals import serialize_provider

PROJECT = Path(__file__).resolve().parents[2]
PROVIDER_KEY = "__provider"
#: The host's wait for a server that does not serve, in seconds.
PATIENCE = 1.5
#: A router key's inputs, as the program registers them.
KEY_INPUTS = {
    "user": None,
    "reusable": False,
    "ephemeral": False,
    "aclTags": ["tag:router"],
    "lifetime": "1h",
    "rotateBefore": "10m",
    "recreateIfInvalid": "always",
}


def _struct(values: dict[str, Any]) -> Any:
    return asyncio.run(sdk.serialize_properties(values, {}))


def _values(struct: Any) -> dict[str, Any]:
    return sdk.deserialize_properties(struct)


def _urn(kind: str, name: str) -> str:
    return f"urn:pulumi:test::headscale-ha::pulumi-python:dynamic:Resource::{kind}-{name}"


class Host:
    """The host's gRPC stub (attributes pass through) and what the host wrote on stderr."""

    def __init__(self, stub: provider_pb2_grpc.ResourceProviderStub, stderr: Path) -> None:
        self.stub = stub
        self.stderr_path = stderr

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stub, name)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    """The SDK's dynamic provider host in its own process, as the engine starts it; stopped by its pid.

    It runs in a directory that is not the checkout, with no PYTHONPATH: the pickled providers import from the
    installed package alone, as in a consumer's project.
    """
    # A write's wait for a server that does not serve (60 s by default) shortened, as `pulumi` passes it on.
    env = {**os.environ, "PULUMI_PROJECT": "headscale-ha", WRITE_PATIENCE_ENV: str(PATIENCE)}
    env.pop("PYTHONPATH", None)
    stderr = tmp_path / "host.stderr"
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    with stderr.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "pulumi.dynamic"],
            cwd=elsewhere,
            env=env,
            stdout=subprocess.PIPE,
            stderr=sink,
        )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().decode().strip())
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        yield Host(provider_pb2_grpc.ResourceProviderStub(channel), stderr)
        channel.close()
    finally:
        stop_process(process, timeout=10)


@pytest.fixture(params=["0.28.0", "0.29.2"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeHeadscale]:
    with FakeHeadscale(version=request.param) as fake:
        yield fake
        assert fake.contract_violations == []


def configure(host: Host, fake: FakeHeadscale, **extra: str) -> None:
    config = {API_KEY_CONFIG: fake.admin_key, API_URL_CONFIG: fake.url, **extra}
    host.Configure(provider_pb2.ConfigureRequest(args=_struct(config), acceptSecrets=False), timeout=30)


def lifecycle(host: Host, kind: str, blob: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """Check → Create → Diff (no change) → Read → Delete, as the engine sends them; the created outputs."""
    urn = _urn(kind, "one")
    news = {**inputs, PROVIDER_KEY: blob}
    checked = host.Check(provider_pb2.CheckRequest(urn=urn, olds=_struct({}), news=_struct(news)), timeout=30)
    assert list(checked.failures) == []
    checked_inputs = _values(checked.inputs)
    assert checked_inputs[PROVIDER_KEY] == blob
    created = host.Create(provider_pb2.CreateRequest(urn=urn, properties=checked.inputs), timeout=60)
    outs = _values(created.properties)
    assert created.id
    assert outs[PROVIDER_KEY] == blob, "the provider travels with the state, unchanged"
    diff = host.Diff(
        provider_pb2.DiffRequest(id=created.id, urn=urn, olds=created.properties, news=checked.inputs), timeout=30
    )
    assert diff.changes == provider_pb2.DiffResponse.DIFF_NONE
    read = host.Read(provider_pb2.ReadRequest(id=created.id, urn=urn, properties=created.properties), timeout=30)
    assert read.id == created.id
    host.Delete(provider_pb2.DeleteRequest(id=created.id, urn=urn, properties=created.properties), timeout=30)
    return outs


def test_the_engine_path_creates_reads_and_deletes_with_the_serialized_provider(host, server) -> None:
    configure(host, server)
    key_blob = serialize_provider(PreAuthKeyProvider(version=server.version))
    policy_blob = serialize_provider(PolicyProvider(version=server.version))
    for blob in (key_blob, policy_blob):
        assert server.admin_key.encode() not in base64.b64decode(blob), "the API key is never pickled"
    key_inputs = dict(KEY_INPUTS)
    outs = lifecycle(host, "PreAuthKey", key_blob, key_inputs)
    assert outs["key"].startswith("hskey-auth-")
    assert server.admin_key not in str(outs)
    with server.lock:
        assert all(k.expiration is not None and k.expiration <= server.now for k in server.preauth_keys.values())

    policy = '{"acls": [{"action": "accept", "src": ["autogroup:member"], "dst": ["autogroup:self:*"]}]}'
    policy_inputs = {"policy": policy, "mode": "apply", "overwriteExisting": False, "resetOnDestroy": False}
    outs = lifecycle(host, "Policy", policy_blob, policy_inputs)
    assert outs["appliedSha256"] == hashlib.sha256(policy.encode()).hexdigest()
    assert server.policy_text == policy
    assert [r.path for r in server.requests].count("/version") == 1, "one process: the version is confirmed once"


def test_state_written_by_0_1_0_is_served_through_the_alias_outside_the_checkout(host, server) -> None:
    """A user whose state holds the provider 0.1.0 pickled (``headscale_provider.resources.UserProvider``): the
    host loads it through the alias the package ships, and creates, diffs, reads and deletes with it."""
    configure(host, server)
    legacy = json.loads((PROJECT / "tests" / "support" / "legacy_providers.json").read_text())["providers"]
    blob = legacy["headscale_provider.resources.UserProvider"]
    inputs = {"name": "dave", "displayName": "", "email": "", "forceDelete": False}
    outs = lifecycle(host, "User", blob, inputs)
    assert outs["name"] == "dave"
    with server.lock:
        assert "dave" not in {u.name for u in server.users.values()}


def test_a_mismatched_server_fails_the_engine_call_with_both_versions(host, server) -> None:
    configure(host, server)
    other = "0.28.0" if server.version == "0.29.2" else "0.29.2"
    blob = serialize_provider(PolicyProvider(version=other))
    inputs = {"policy": "{}", "mode": "apply", "overwriteExisting": False, "resetOnDestroy": False, PROVIDER_KEY: blob}
    with pytest.raises(grpc.RpcError) as caught:
        host.Create(provider_pb2.CreateRequest(urn=_urn("Policy", "x"), properties=_struct(inputs)), timeout=30)
    details = caught.value.details()
    assert f"runs v{server.version}" in details
    assert f"pins {other.rsplit('.', 1)[0]}" in details
    assert server.admin_key not in details
    assert server.policy_text is None


def test_without_the_key_in_config_the_provider_says_what_to_set(host, server) -> None:
    host.Configure(provider_pb2.ConfigureRequest(args=_struct({}), acceptSecrets=False), timeout=30)
    blob = serialize_provider(PolicyProvider(api_url=server.url, version=server.version))
    inputs = {"policy": "{}", "mode": "dryRun", "overwriteExisting": False, "resetOnDestroy": False, PROVIDER_KEY: blob}
    with pytest.raises(grpc.RpcError) as caught:
        host.Create(provider_pb2.CreateRequest(urn=_urn("Policy", "y"), properties=_struct(inputs)), timeout=30)
    assert API_KEY_CONFIG in caught.value.details()


def test_configure_carries_the_url_and_pin_of_today_to_resources_of_an_older_provider(host, server) -> None:
    """The blob in the state names a URL that refuses and the other minor (a provider from before an upgrade and
    a URL change); the stack config sent with Configure, the `headscale` object as the engine sends it (JSON
    text), decides: the whole lifecycle runs against today's server with today's pin."""
    other = "0.28.0" if server.version == "0.29.2" else "0.29.2"
    with Unreachable("refuse") as old:
        configure(host, server, **{HEADSCALE_CONFIG: json.dumps({"version": server.version, "image": "x"})})
        blob = serialize_provider(PreAuthKeyProvider(api_url=old.url, version=other))
        outs = lifecycle(host, "PreAuthKey", blob, KEY_INPUTS)
    assert outs["key"].startswith("hskey-auth-")
    assert [r.path for r in server.requests].count("/version") == 1


def test_an_unreachable_server_makes_diff_and_read_report_no_change_and_writes_fail(host) -> None:
    """As a preview of the promotion with the lost active's URL: Diff answers DIFF_NONE, Read the state as it is,
    the host says why on its stderr (the engine shows a plugin's stderr), and Create fails naming the URL."""
    with Unreachable("refuse") as down:
        config = {API_KEY_CONFIG: "hskey-api-abcdefghijkl-" + "s" * 64, API_URL_CONFIG: down.url}
        host.Configure(provider_pb2.ConfigureRequest(args=_struct(config), acceptSecrets=False), timeout=30)
        blob = serialize_provider(PreAuthKeyProvider(version="0.29.2"))
        user_blob = serialize_provider(UserProvider(version="0.29.2"))
        state = _struct({**KEY_INPUTS, "keyId": "7", "prefix": "p", "expiration": "", "key": "k", PROVIDER_KEY: blob})
        news = _struct({**KEY_INPUTS, PROVIDER_KEY: blob})
        started = time.monotonic()
        diff = host.Diff(provider_pb2.DiffRequest(id="7", urn=_urn("PreAuthKey", "a"), olds=state, news=news))
        assert diff.changes == provider_pb2.DiffResponse.DIFF_NONE
        read = host.Read(provider_pb2.ReadRequest(id="7", urn=_urn("PreAuthKey", "a"), properties=state))
        assert read.id == "7"
        assert _values(read.properties)["keyId"] == "7"
        user = {"name": "alice", "displayName": "", "email": "", "forceDelete": False, PROVIDER_KEY: user_blob}
        with pytest.raises(grpc.RpcError) as caught:
            host.Create(provider_pb2.CreateRequest(urn=_urn("User", "alice"), properties=_struct(user)), timeout=30)
        elapsed = time.monotonic() - started
    assert down.url in caught.value.details()
    assert "UnreachableError" in caught.value.details()
    assert f"(still, after waiting up to {PATIENCE:g} s for it to serve)" in caught.value.details()
    assert elapsed < 3 + PATIENCE, "one probe for the diffs and reads, one wait for the write; not one per call"
    lines = [line for line in host.stderr().splitlines() if line.startswith("headscale-ha provider:")]
    assert len(lines) == 2
    assert all(down.url in line and "reports no change" in line for line in lines)
    assert "s" * 20 not in host.stderr()
