"""A fake Headscale per test (0.28 and 0.29), a shared clock, and a contract check after every test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from headscale_ha.provider.base import (
    forget_shared_clients,
)
from headscale_ha.provider.client import HeadscaleClient
from tests.models.headscale import FakeHeadscale

VERSIONS = ("0.28.0", "0.29.2")


@dataclass
class Clock:
    """The one notion of "now" for the fake server and the providers' rotation decisions."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(autouse=True)
def _fresh_shared_clients() -> Iterator[None]:
    """Each test is a run of its own: no shared client (version check, listings) carries over."""
    forget_shared_clients()
    yield
    forget_shared_clients()


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture(params=VERSIONS)
def fake(request: pytest.FixtureRequest, clock: Clock) -> Iterator[FakeHeadscale]:
    server = FakeHeadscale(version=request.param, now=clock).start()
    try:
        yield server
        assert server.contract_violations == [], "\n".join(server.contract_violations)
    finally:
        server.stop()


@pytest.fixture
def client(fake: FakeHeadscale) -> HeadscaleClient:
    return HeadscaleClient(fake.url, fake.admin_key, timeout=5, retries=2, backoff=0.0, sleep=lambda _: None)
