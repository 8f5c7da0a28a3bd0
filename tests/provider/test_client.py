"""HeadscaleClient against the fake server: version dialects, quirks, retries only where safe, clean errors."""

from __future__ import annotations

import math
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
import requests

from headscale_ha.provider.client import (
    DOWN_MEMORY_SECONDS,
    PROBE_RETRIES,
    HeadscaleClient,
    HeadscaleError,
    NotFoundError,
    TransientError,
    UnauthorizedError,
    UnreachableError,
    UnsupportedError,
    VersionMismatchError,
    redact,
)
from headscale_ha.provider.records import api_key_prefix, parse_time
from tests.models.headscale import FakeHeadscale, Unreachable


def _writes(fake) -> list:
    return [r for r in fake.requests if r.method != "GET"]


def test_version_is_read_once_from_the_server(fake, client) -> None:
    assert client.version == fake.version.rsplit(".", 1)[0]
    assert client.version == client.version
    assert [r.path for r in fake.requests].count("/version") == 1


def _api_requests(fake) -> list:
    return [r for r in fake.requests if r.path.startswith("/api/")]


def test_a_pinned_version_is_confirmed_once_before_the_first_call(fake) -> None:
    pinned = HeadscaleClient(fake.url, fake.admin_key, version=fake.version)
    assert pinned.list_users() == []
    assert pinned.list_nodes() == []
    assert [r.path for r in fake.requests].count("/version") == 1
    assert fake.requests[0].path == "/version", "the version is confirmed before anything else"
    assert pinned.version == fake.version.rsplit(".", 1)[0]
    assert pinned.server_version == f"v{fake.version}"


@pytest.mark.parametrize(("server", "pin"), [("0.28.0", "0.29.2"), ("0.29.2", "0.28.0")])
def test_a_server_of_the_other_minor_is_refused_naming_both(server: str, pin: str) -> None:
    with FakeHeadscale(version=server) as fake:
        client = HeadscaleClient(fake.url, fake.admin_key, version=pin, retries=0)
        with pytest.raises(VersionMismatchError) as caught:
            client.get_policy()
        assert f"runs v{server}" in str(caught.value)
        assert f"pins {pin.rsplit('.', 1)[0]}" in str(caught.value)
        assert (caught.value.pinned, caught.value.live) == (pin.rsplit(".", 1)[0], server.rsplit(".", 1)[0])
        with pytest.raises(VersionMismatchError):
            client.check_policy("{}")  # not a bare 404 from policy/check
        assert _api_requests(fake) == [], "nothing is read or written on a mismatch"
        assert [r.path for r in fake.requests] == ["/version"], "the refusal is kept, not asked again"


@pytest.mark.parametrize(
    ("reported", "fragment"),
    [("v0.27.1", "runs v0.27.1"), ("v0.30.0", "runs v0.30.0"), ("dev", "runs dev"), ("", "has no /version endpoint")],
)
def test_a_release_the_provider_does_not_speak_is_refused(reported: str, fragment: str) -> None:
    with FakeHeadscale(version="0.29.2", reported_version=reported) as fake:
        for pin in ("0.29", None):
            client = HeadscaleClient(fake.url, fake.admin_key, version=pin, retries=0)
            with pytest.raises(UnsupportedError, match=fragment) as caught:
                client.list_users()
            assert "0.28, 0.29" in str(caught.value)
        assert _api_requests(fake) == []


def test_a_transient_version_failure_is_remembered_then_probed_again(fake) -> None:
    """Was: retried at the next call. A run diffs many resources: each asking again would cost a timeout each
    (issue 24), so a failed probe stops every call for `down_memory` seconds, and is asked again after it."""
    clock = Ticker()
    client = HeadscaleClient(fake.url, fake.admin_key, version=fake.version, retries=0, monotonic=clock)
    fake.inject(path="/version", kind="status", status=503, times=1)
    with pytest.raises(UnreachableError, match=r"is not serving"):
        client.list_users()
    clock.now += DOWN_MEMORY_SECONDS - 1
    with pytest.raises(UnreachableError, match=r"ListUsers failed: not sent: .*HTTP 503.* 29\.0 s ago") as caught:
        client.list_users()
    assert caught.value.status is None, "a call that was not sent has no status of its own"
    assert [r.path for r in fake.requests] == ["/version"]
    clock.now += 1
    assert client.list_users() == []
    assert [r.path for r in fake.requests].count("/version") == 2


@dataclass
class Ticker:
    """A monotonic clock the test moves."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Pauses:
    """The client's `sleep`: records each pause and moves the test's clock by it."""

    clock: Ticker
    taken: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.taken.append(seconds)
        self.clock.now += seconds


def _patient_client(fake, patience: float, version: str | None = None) -> tuple[HeadscaleClient, Pauses]:
    """A client of ``fake`` (pinned to its minor, or ``version``) on a test clock, no retries within a probe."""
    clock = Ticker()
    pauses = Pauses(clock)
    client = HeadscaleClient(
        fake.url,
        fake.admin_key,
        version=version or fake.version,
        retries=0,
        monotonic=clock,
        sleep=pauses,
        write_patience=patience,
    )
    return client, pauses


def test_a_write_waits_for_a_server_that_starts_serving(fake) -> None:
    """A gateway's 503 for four probes (the pod rolled out, the route not yet to it), then the server: the write's
    probe waits with growing pauses and goes on; a read before any write did not wait."""
    client, pauses = _patient_client(fake, patience=60)
    fake.inject(path="/version", kind="status", status=503, times=1)
    with pytest.raises(UnreachableError, match=r"is not serving"):
        client.list_users()
    assert pauses.taken == [], "no write asked for patience"
    fake.inject(path="/version", kind="status", status=503, times=4)
    client.ask_again(patient=True)
    assert client.create_user("alice").name == "alice"
    assert pauses.taken == [0.5, 1.0, 2.0, 4.0]
    assert [r.path for r in fake.requests].count("/version") == 1 + 4 + 1
    assert client.write_patience == 60, "not spent: the server answered within it"


def test_a_wait_that_runs_out_is_not_given_again(fake) -> None:
    client, pauses = _patient_client(fake, patience=10)
    fake.inject(path="/version", kind="status", status=503, times=100)
    client.ask_again(patient=True)
    with pytest.raises(UnreachableError, match=re.escape("(still, after waiting up to 10 s for it to serve)")):
        client.create_user("alice")
    assert pauses.taken == [0.5, 1.0, 2.0, 4.0], "the next pause would have passed the 10 s"
    assert client.write_patience == 0
    client.ask_again(patient=True)
    with pytest.raises(UnreachableError, match=r"\(HTTP 503\): .* is not serving: injected fault$") as caught:
        client.create_user("alice")
    assert "still, after" not in str(caught.value)
    assert len(pauses.taken) == 4, "no second wait"
    assert _api_requests(fake) == [], "nothing but probes was sent"


def test_a_server_that_answers_ends_the_wait_even_to_refuse(fake) -> None:
    """Another minor than the pin: the server serves, so the refusal is at once, not after the wait."""
    other = "0.28" if fake.version.startswith("0.29") else "0.29"
    client, pauses = _patient_client(fake, patience=60, version=other)
    fake.inject(path="/version", kind="status", status=503, times=2)
    client.ask_again(patient=True)
    with pytest.raises(VersionMismatchError):
        client.create_user("alice")
    assert pauses.taken == [0.5, 1.0], "two pauses, then the answer"


def test_a_refused_connection_is_probed_once_and_then_refused_at_once() -> None:
    with Unreachable("refuse") as down:
        client = HeadscaleClient(down.url, "k", version="0.29", backoff=0.01)
        started = time.monotonic()
        with pytest.raises(UnreachableError, match=rf"{down.url} is unreachable: connection refused"):
            client.list_users()
        assert client.calls.by_call == {"Version": 1 + PROBE_RETRIES}
        with pytest.raises(UnreachableError, match=r"CreateUser failed: not sent: .*connection refused"):
            client.create_user("alice")
        with pytest.raises(UnreachableError):
            _ = client.server_version
        assert client.calls.by_call == {"Version": 1 + PROBE_RETRIES}, "nothing sent after the first failure"
        assert time.monotonic() - started < 2


@pytest.mark.parametrize("mode", ["blackhole", "silent"])
def test_a_server_that_does_not_answer_costs_one_timeout(mode: str) -> None:
    """`blackhole`: the SYN is dropped (a lost cluster), the connect timeout bounds it; `silent`: connected, no
    answer, the read timeout bounds it. Neither is retried, and the second call is not sent."""
    with Unreachable(mode) as down:
        client = HeadscaleClient(down.url, "k", version="0.29", connect_timeout=0.3, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(TransientError) as caught:
            client.list_nodes()
        first = time.monotonic() - started
        assert 0.25 < first < 1.5
        reason = "no connection within 0.3 s" if mode == "blackhole" else "no answer within 0.3 s"
        assert reason in str(caught.value)
        assert down.url in str(caught.value)
        assert isinstance(caught.value, UnreachableError)
        with pytest.raises(UnreachableError, match="not sent"):
            client.list_nodes()
        assert time.monotonic() - started - first < 0.1
        assert client.calls.by_call == {"Version": 1}


def test_an_unresolvable_name_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The resolver answers "no such name" (patched: the test sends nothing beyond loopback)."""

    def no_such_name(host: str, *args: object, **kwargs: object) -> list:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    client = HeadscaleClient("http://headscale.invalid", "k", version="0.29", retries=0)
    with pytest.raises(UnreachableError, match=r"http://headscale.invalid is unreachable: its name does not resolve"):
        client.list_users()


def test_a_call_that_cannot_connect_stops_the_next_ones(fake) -> None:
    """The probe succeeded, then the server went away: the first call that cannot connect is remembered too."""
    client = HeadscaleClient(fake.url, fake.admin_key, version=fake.version, retries=1, backoff=0.0)
    assert client.list_users() == []
    fake.stop()
    with pytest.raises(UnreachableError, match="connection refused"):
        client.list_nodes()
    with pytest.raises(UnreachableError, match="GetPolicy failed: not sent"):
        client.get_policy()
    assert client.calls.by_call == {"Version": 1, "ListUsers": 1, "ListNodes": 2}


def test_a_lost_answer_is_not_remembered_as_down(fake, client) -> None:
    """A reset after the request was sent is an unknown outcome, not an unreachable server: the next call goes."""
    fake.inject(path="/api/v1/apikey", method="POST", kind="reset", after_apply=True)
    with pytest.raises(TransientError) as caught:
        client.create_api_key(expiration=datetime.now(UTC) + timedelta(days=1))
    assert not isinstance(caught.value, UnreachableError)
    assert len(client.list_api_keys()) == 2


def test_listings_are_fetched_once_by_concurrent_callers(fake) -> None:
    client = HeadscaleClient(fake.url, fake.admin_key, version=fake.version, cache_seconds=math.inf)
    fake.inject(path="/api/v1/user", method="GET", kind="latency", delay=0.3, times=1)
    fake.inject(path="/version", kind="latency", delay=0.2, times=1)
    start = threading.Barrier(8)
    results: list[object] = []

    def read() -> None:
        start.wait()
        results.append(client.find_user("nobody"))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [None] * 8
    paths = [r.path for r in fake.requests]
    assert (paths.count("/version"), paths.count("/api/v1/user")) == (1, 1)
    assert client.calls.by_call == {"Version": 1, "ListUsers": 1}


def test_a_write_empties_the_listings(fake) -> None:
    client = HeadscaleClient(fake.url, fake.admin_key, cache_seconds=math.inf)
    assert client.list_users() == client.list_users() == []
    client.create_user("dora")
    assert [u.name for u in client.list_users(name="dora")] == ["dora"]
    assert [u.name for u in client.list_users()] == ["dora"]
    assert client.calls.by_call["ListUsers"] == 2


def test_a_failed_shared_read_is_not_kept(fake) -> None:
    client = HeadscaleClient(fake.url, fake.admin_key, cache_seconds=math.inf, retries=0)
    fake.inject(path="/api/v1/node", method="GET", kind="status", status=503, times=1)
    with pytest.raises(TransientError):
        client.list_nodes()
    assert client.list_nodes() == []


def test_unsupported_versions_are_refused(fake) -> None:
    with pytest.raises(UnsupportedError, match=r"0\.27\.1 is not supported"):
        HeadscaleClient(fake.url, fake.admin_key, version="0.27.1")


def test_users_round_trip_with_string_ids(client) -> None:
    user = client.create_user("alice", display_name="Alice", email="alice@example.com")
    assert isinstance(user.id, str)
    assert user.id.isdigit()
    assert client.find_user("alice") == user
    assert client.rename_user(user.id, "alice2").name == "alice2"
    client.delete_user(user.id)
    assert client.find_user("alice2") is None


def test_duplicate_user_is_a_clear_error(client) -> None:
    client.create_user("bob")
    with pytest.raises(HeadscaleError) as caught:
        client.create_user("bob")
    assert caught.value.call == "CreateUser"
    assert caught.value.status == 500
    assert str(caught.value).startswith("Headscale CreateUser failed (HTTP 500): ")


def test_keys_always_carry_an_explicit_expiration(fake, client, clock) -> None:
    user = client.create_user("carol")
    expiration = clock.now + timedelta(hours=1)
    key = client.create_preauth_key(
        user_id=user.id, reusable=False, ephemeral=False, expiration=expiration, acl_tags=[]
    )
    assert key.expiration == expiration
    assert not key.expired(clock.now)
    assert key.key.startswith("hskey-auth-")
    assert key.prefix
    assert key.prefix in key.key
    (request,) = [r for r in fake.requests if r.path == "/api/v1/preauthkey" and r.method == "POST"]
    assert request.body["expiration"] == expiration.strftime("%Y-%m-%dT%H:%M:%SZ")
    (listed,) = [k for k in client.list_preauth_keys() if k.id == key.id]
    assert listed.key != key.key, "listings mask the key"
    assert key.key not in repr(fake.requests[-1].response)


def test_zero_time_is_read_as_no_expiration() -> None:
    assert parse_time("0001-01-01T00:00:00Z") is None
    assert parse_time(None) is None
    assert parse_time("2030-01-02T03:04:05Z").year == 2030


def test_api_keys_are_listed_by_their_prefix(client, clock) -> None:
    key = client.create_api_key(expiration=clock.now + timedelta(days=1))
    prefix = api_key_prefix(key)
    assert prefix in {k.prefix for k in client.list_api_keys()}
    client.expire_api_key(prefix)
    (expired,) = [k for k in client.list_api_keys() if k.prefix == prefix]
    assert expired.expired(clock.now)
    client.delete_api_key(prefix)
    assert prefix not in {k.prefix for k in client.list_api_keys()}


def test_reads_are_retried_on_transient_faults(fake, client) -> None:
    fake.inject(path="/api/v1/user", method="GET", kind="status", status=503, times=1)
    fake.inject(path="/api/v1/user", method="GET", kind="reset", times=1)
    assert client.list_users() == []
    assert len([r for r in fake.requests if r.path == "/api/v1/user"]) >= 1
    assert client.calls.by_call["ListUsers"] == 3


@pytest.mark.parametrize("kind", ["status", "reset"])
def test_minting_is_never_retried(fake, client, clock, kind) -> None:
    fake.inject(path="/api/v1/apikey", method="POST", kind=kind, status=503, times=1)
    with pytest.raises(TransientError) as caught:
        client.create_api_key(expiration=clock.now + timedelta(days=1))
    assert caught.value.call == "CreateApiKey"
    assert client.calls.by_call["CreateApiKey"] == 1


def test_retries_give_up_with_a_transient_error(fake, client) -> None:
    fake.inject(path="/api/v1/node", method="GET", kind="status", status=502, times=10)
    with pytest.raises(TransientError, match=r"ListNodes failed \(HTTP 502\)"):
        client.list_nodes()
    assert client.calls.by_call["ListNodes"] == 3


def test_wrong_key_is_unauthorized_without_echoing_it(fake) -> None:
    bad = "hskey-api-abcdefghijkl-" + "x" * 64
    with pytest.raises(UnauthorizedError) as caught:
        HeadscaleClient(fake.url, bad, version=fake.version).list_users()
    assert bad not in str(caught.value)
    assert "x" * 20 not in str(caught.value)


def test_malformed_json_is_an_unknown_outcome(fake, client) -> None:
    fake.inject(path="/api/v1/user", method="GET", kind="malformed", times=1)
    with pytest.raises(TransientError, match="malformed JSON"):
        client.list_users()


def test_missing_objects_are_not_found(client) -> None:
    with pytest.raises(NotFoundError):
        client.get_node("999")


def test_policy_check_exists_only_on_029(fake, client) -> None:
    if client.version == "0.28":
        with pytest.raises(UnsupportedError):
            client.check_policy("{}")
    else:
        client.check_policy('{"acls": []}')
        with pytest.raises(HeadscaleError):
            client.check_policy("{not json")


def test_error_text_never_carries_key_material() -> None:
    text = "bad key hskey-auth-abcdefghijkl-" + "s" * 64 + " and " + "a" * 48
    redacted = redact(text)
    assert "s" * 10 not in redacted
    assert "a" * 48 not in redacted


def test_the_client_refuses_to_be_pickled(client) -> None:
    import pickle

    with pytest.raises(TypeError, match="must not be pickled"):
        pickle.dumps(client)


def test_session_errors_are_typed(fake) -> None:
    with Unreachable("refuse") as down:
        unreachable = HeadscaleClient(down.url, "k", version="0.29", retries=0, timeout=0.5)
        with pytest.raises(UnreachableError, match="is unreachable: connection refused"):
            unreachable.list_users()
    assert issubclass(UnreachableError, TransientError)
    assert isinstance(requests.Session(), requests.Session)


def test_timeouts_are_bounded_by_default() -> None:
    client = HeadscaleClient("http://127.0.0.1:1", "k")
    assert (client.connect_timeout, client.timeout) == (3.0, 10.0)
