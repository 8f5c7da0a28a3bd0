"""The dynamic providers and the server they talk to, both versions: a server that is not the pinned release, a
server that does not answer (refused or blackholed connections), and the server the stack config names rather than
the provider pickled in a resource's state.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable

import dill
import pytest
from pulumi.dynamic import Config, ConfigureRequest

from headscale_ha.provider.base import (
    WRITE_PATIENCE_ENV,
    ProviderError,
    StackSettings,
    forget_shared_clients,
)
from headscale_ha.provider.client import (
    CONNECT_TIMEOUT,
    PROBE_RETRIES,
    WRITE_PATIENCE_SECONDS,
    HeadscaleClient,
    UnreachableError,
    UnsupportedError,
)
from headscale_ha.provider.resources import (
    ApiKeyProvider,
    NodeSettingsProvider,
    PolicyProvider,
    PreAuthKeyProvider,
    UserProvider,
)
from tests.models.headscale import FakeHeadscale, Unreachable
from tests.support.provider_resources import (
    KEY_PROPS,
    ROUTER_KEY,
    live_keys,
    policy_props,
    stack_config,
)
from tools.pulumi_internals import serialize_provider

# ------------------------------------------------------------------------------------------------ live version


def _configured(kind, fake, version: str):
    provider = kind(api_url=fake.url, version=version)
    provider.configure(ConfigureRequest(Config({"headscale-ha:bootstrapApiKey": fake.admin_key}, "headscale-ha")))
    return provider


@pytest.mark.parametrize(
    ("server", "reported", "pin", "fragment"),
    [
        ("0.28.0", None, "0.29.2", "runs v0.28.0 (minor 0.28) but the stack pins 0.29"),
        ("0.29.2", None, "0.28.0", "runs v0.29.2 (minor 0.29) but the stack pins 0.28"),
        ("0.29.2", "v0.27.1", "0.29.2", "runs v0.27.1, which this provider does not speak (0.28, 0.29)"),
        ("0.29.2", "v0.30.0", "0.29.2", "runs v0.30.0, which this provider does not speak (0.28, 0.29)"),
    ],
)
def test_providers_refuse_a_server_that_is_not_the_pinned_release(server, reported, pin, fragment, clock) -> None:
    with FakeHeadscale(version=server, reported_version=reported, now=clock) as fake:
        policies = _configured(PolicyProvider, fake, pin)
        with pytest.raises(UnsupportedError) as caught:
            policies.create(policy_props())
        assert fragment in str(caught.value)
        keys = _configured(PreAuthKeyProvider, fake, pin)
        with pytest.raises(UnsupportedError, match=r"does not speak|but the stack pins"):
            keys.create(dict(KEY_PROPS))
        assert [r.path for r in fake.requests] == ["/version"] * 2, "asked once per write, nothing read or written"
        assert fake.policy_text is None


def test_every_provider_of_a_run_shares_one_client_and_one_fetch_per_listing(fake, clock) -> None:
    """As the engine does: several resources of several kinds diffed on parallel threads of one process."""
    seeded = _configured(PreAuthKeyProvider, fake, fake.version)
    created = [seeded.use(seeded.client, clock=clock).create(dict(KEY_PROPS)) for _ in range(3)]
    fake.reset_requests()
    forget_shared_clients()  # a new run
    keys = _configured(PreAuthKeyProvider, fake, fake.version)
    users = _configured(UserProvider, fake, fake.version)
    assert keys.client is users.client, "one client per server, key and pin in a process"
    keys.use(keys.client, clock=clock)
    fake.inject(path="/api/v1/preauthkey", method="GET", kind="latency", delay=0.3, times=1)
    start = threading.Barrier(len(created) + 2)
    errors: list[BaseException] = []

    def diff_key(result) -> None:
        start.wait()
        try:
            keys.diff(result.id, result.outs, dict(KEY_PROPS))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def read_user() -> None:
        start.wait()
        users.read("1", {"name": "nobody"})

    threads = [threading.Thread(target=diff_key, args=(c,)) for c in created]
    threads += [threading.Thread(target=read_user) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    paths = [r.path for r in fake.requests]
    assert paths.count("/version") == 1
    assert paths.count("/api/v1/preauthkey") == 1
    assert paths.count("/api/v1/user") == 1


# ------------------------------------------------------------------------------------------------ an unreachable server

USER = {"name": "alice", "displayName": "", "email": "", "forceDelete": False}
API_KEY_PROPS = {"lifetime": "90d", "rotateBefore": "14d", "prefix": "abcdefghijkl"}
NODE = {"nodeName": "box", "user": None, "tags": None, "approvedRoutes": None, "givenName": None}


def _every_resource() -> list[tuple[type, str, dict]]:
    """One resource of each kind, as its state would hold it."""
    return [
        (UserProvider, "1", USER),
        (PreAuthKeyProvider, "2", ROUTER_KEY),
        (ApiKeyProvider, "3", API_KEY_PROPS),
        (NodeSettingsProvider, "4", {**NODE, "deleteOnDestroy": False}),
        (PolicyProvider, "policy", {**policy_props(), "liveSha256": "x"}),
    ]


def _down_config(url: str, **values) -> ConfigureRequest:
    config = {"headscale-ha:bootstrapApiKey": "hskey-api-abcdefghijkl-" + "s" * 64, "headscale-ha:headscaleApiUrl": url}
    config["headscale-ha:headscale"] = json.dumps({"version": "0.29.2"})
    config.update(values)
    return ConfigureRequest(Config(config, "headscale-ha"))


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_diff_and_read_survive_a_server_that_does_not_answer(mode: str, capsys) -> None:
    """What a preview of the promotion does with the lost active's URL: every diff and read reports no change and
    says why on stderr; the version probe is sent once for the whole run, and the run takes one connect timeout at
    most (blackhole: the default CONNECT_TIMEOUT, 3 s) instead of one per resource."""
    with Unreachable(mode) as down:
        started = time.monotonic()
        clients = set()
        for kind, id_, props in _every_resource():
            provider = kind()
            provider.configure(_down_config(down.url))
            clients.add(id(provider.client))
            diff = provider.diff(id_, dict(props), dict(props))
            assert (diff.changes, diff.replaces) == (False, [])
            read = provider.read(id_, dict(props))
            assert (read.id, read.outs) == (id_, props)
        elapsed = time.monotonic() - started
        (client,) = {provider.client}
    assert len(clients) == 1, "one client for the server: one probe, one remembered failure"
    assert client.calls.by_call == {"Version": 1 + PROBE_RETRIES if mode == "refuse" else 1}
    assert elapsed < (1.5 if mode == "refuse" else CONNECT_TIMEOUT + 1.5)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 9, "one line per diff and per read that needed the server (a user's diff does not)"
    assert all(down.url in line and "reports no change" in line for line in lines)
    assert all("s" * 20 not in line for line in lines), "never the key"
    assert "User 1: read reports no change" in lines[0]
    assert "PreAuthKey 2: diff reports no change" in lines[1]


def _write_fails_fast(down: Unreachable, write: Callable[[], object]) -> None:
    started = time.monotonic()
    with pytest.raises(UnreachableError, match=re.escape(down.url)):
        write()
    assert time.monotonic() - started < 1.0, "one probe (and its one retry), never a success"


def test_writes_wait_once_then_fail_fast_naming_the_url() -> None:
    """The run's first write waits for the server (a rollout of the same `up` may be seconds from serving); once that
    wait ran out, each later write asks the server once more (it may be back) and fails at once when it is not."""
    with Unreachable("refuse") as down:
        first = UserProvider()
        first.configure(_down_config(down.url))
        # The shared client's pauses (0.5 s before the probe's one retry, a 60 s wait), kept short here.
        first.client.backoff, first.client.write_patience = 0.01, 0.3
        with pytest.raises(UnreachableError, match=re.escape("(still, after waiting up to 0.3 s for it to serve)")):
            first.create(dict(USER))
        waited = first.client.calls.by_call["Version"]
        assert waited > 2 * (1 + PROBE_RETRIES), "the wait probed again and again"
        assert first.client.write_patience == 0, "spent"
        for kind, id_, props in _every_resource():
            provider = kind()
            provider.configure(_down_config(down.url))
            assert provider.client is first.client
            _write_fails_fast(down, lambda p=provider, v=props: p.create(dict(v)))
            gone = dict(props) | {"deleteOnDestroy": True, "resetOnDestroy": True}
            _write_fails_fast(down, lambda p=provider, i=id_, v=gone: p.delete(i, v))
        _write_fails_fast(down, lambda: first.update("1", USER, {**USER, "name": "alicia"}))
        assert first.client.calls.by_call == {"Version": waited + 11 * (1 + PROBE_RETRIES)}


def test_a_server_back_within_the_memory_is_written_to(fake, clock, capsys) -> None:
    """A crash-looping Headscale that the same `up` fixes (or an upgrade that rolls out meanwhile): the diffs that
    ran while it failed reported no change; the create that comes after the rollout asks again and succeeds."""
    keys = PreAuthKeyProvider(version=fake.version)
    keys.configure(stack_config(fake))
    keys.use(keys.client, clock=clock)
    created = keys.create(dict(ROUTER_KEY))
    forget_shared_clients()
    keys.configure(stack_config(fake))
    keys.use(keys.client, clock=clock)
    fake.inject(path="/version", kind="status", status=503, times=1 + PROBE_RETRIES)
    assert keys.diff(created.id, created.outs, dict(ROUTER_KEY)).changes is False
    assert keys.read(created.id, created.outs).outs == created.outs, "remembered: not asked again"
    assert "is not serving" in capsys.readouterr().err
    second = keys.create(dict(ROUTER_KEY))
    assert {str(k.id) for k in live_keys(fake, clock)} == {created.id, second.id}
    assert [r.path for r in fake.requests].count("/version") == 2 + (1 + PROBE_RETRIES)


def test_a_half_upgraded_server_is_diffed_as_unchanged_and_written_to_never(fake, clock, capsys) -> None:
    """Preview of a minor upgrade: the config pins the new minor, the server still runs the old one."""
    other = "0.28.0" if fake.version == "0.29.2" else "0.29.2"
    seeded = PreAuthKeyProvider().use(HeadscaleClient(fake.url, fake.admin_key), clock=clock)
    created = seeded.create(dict(ROUTER_KEY))
    keys = PreAuthKeyProvider(version=fake.version)
    keys.configure(stack_config(fake, headscale={"version": other}))
    assert keys.diff(created.id, created.outs, dict(ROUTER_KEY)).changes is False
    assert keys.read(created.id, created.outs).outs == created.outs
    assert f"but the stack pins {other.rsplit('.', 1)[0]}" in capsys.readouterr().err
    with pytest.raises(UnsupportedError, match="but the stack pins"):
        keys.delete(created.id, created.outs)
    assert [str(k.id) for k in live_keys(fake, clock)] == [created.id]


# ------------------------------------------------------------------------------------------------ the config decides


def test_the_stack_config_wins_over_the_pickled_url_and_pin(fake, clock) -> None:
    """A resource created before a minor upgrade (or a URL change) carries the old provider in its state; its read,
    diff and delete run with the config of today."""
    other = "0.28.0" if fake.version == "0.29.2" else "0.29.2"
    with Unreachable("refuse") as old:
        created = (
            PreAuthKeyProvider().use(HeadscaleClient(fake.url, fake.admin_key), clock=clock).create(dict(ROUTER_KEY))
        )
        stale = dill.loads(base64.b64decode(serialize_provider(PreAuthKeyProvider(api_url=old.url, version=other))))
        stale.configure(stack_config(fake, headscale={"version": fake.version}))
        assert (stale.client.base_url, stale.client.version) == (fake.url, fake.version.rsplit(".", 1)[0])
        stale.use(stale.client, clock=clock)
        assert stale.diff(created.id, created.outs, dict(ROUTER_KEY)).changes is False
        assert stale.read(created.id, created.outs).id == created.id
        stale.delete(created.id, created.outs)
    assert live_keys(fake, clock) == []


def test_the_pickled_url_and_pin_are_the_fallback(fake) -> None:
    provider = PolicyProvider(api_url=fake.url, version=fake.version)
    provider.configure(ConfigureRequest(Config({"headscale-ha:bootstrapApiKey": fake.admin_key}, "headscale-ha")))
    assert (provider.client.base_url, provider.client.version) == (fake.url, fake.version.rsplit(".", 1)[0])


def test_stack_settings_read_what_the_engine_sends() -> None:
    tailnet = {"publicHostname": "headscale.example.com", "users": [{"name": "alice", "forceDelete": True}]}
    config = Config(
        {
            "headscale-ha:tailnet": json.dumps(tailnet),
            "headscale-ha:headscale": json.dumps({"version": "0.29.2", "image": "x"}),
            "headscale-ha:role": "active",
        },
        "headscale-ha",
    )
    settings = StackSettings.from_config(config)
    assert settings.api_url == "https://headscale.example.com", "program/args.py api_url's default"
    assert (settings.version, settings.role) == ("0.29.2", "active")
    assert settings.users == {"alice": {"name": "alice", "forceDelete": True}}
    explicit = StackSettings.from_config(Config({"headscale-ha:headscaleApiUrl": "http://10.0.0.1:8080"}, "p"))
    assert (explicit.api_url, explicit.version, explicit.users) == ("http://10.0.0.1:8080", None, None)
    assert StackSettings.from_config(Config({"headscale-ha:headscale": "{not json"}, "p")).version is None


def test_the_wait_comes_from_the_environment_pulumi_runs_in(fake, monkeypatch) -> None:
    """`HEADSCALE_HA_WRITE_PATIENCE` sets the shared client's wait; unset, the default; a bad value fails `configure`
    naming the variable, the value and what it takes."""
    users = UserProvider()
    users.configure(stack_config(fake))
    assert users.client.write_patience == WRITE_PATIENCE_SECONDS
    forget_shared_clients()
    monkeypatch.setenv(WRITE_PATIENCE_ENV, "7.5")
    users.configure(stack_config(fake))
    assert users.client.write_patience == 7.5
    for bad in ("soon", "-1", "nan", "86400"):
        forget_shared_clients()
        monkeypatch.setenv(WRITE_PATIENCE_ENV, bad)
        with pytest.raises(ProviderError) as refused:
            users.configure(stack_config(fake))
        assert str(refused.value) == f"{WRITE_PATIENCE_ENV}: expected seconds from 0 to 3600, got {bad!r}"
