"""A holder whose pod never becomes ready gives the Lease up (components/scripts/witness-lease.sh, ``READY_URL``),
run for real against a real kube-apiserver as in tests/components/test_witness_lease.py: the writers stop first, the
Lease goes to another site at once, and this site's own next gate waits a whole lease, so that a site whose restore
keeps failing does not take the tailnet straight back.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.free_ports import free_port
from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.witness_lab import TEST_TIMING, LeaseSite, Witness, two_sites

pytestmark = pytest.mark.real_tool("curl", *LAB_TOOLS)

#: What TEST_TIMING makes a gate wait before it takes an unrenewed Lease (LEASE_SECONDS + SKEW_SECONDS).
LEASE_WAIT = 5.0
READY_WITHIN = "1.5"


@pytest.fixture
def sites(witness: Witness, tmp_path: Path) -> Iterator[dict[str, LeaseSite]]:
    with two_sites(witness, tmp_path, TEST_TIMING, failsafe=False) as made:
        yield made


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def health() -> Iterator[str]:
    """A writer that answers its readiness, at this URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/health"
    server.shutdown()


def holding_with(site: LeaseSite, ready_url: str) -> None:
    site.env.update({"READY_URL": ready_url, "READY_WITHIN_SECONDS": READY_WITHIN})
    assert site.start("acquire").wait(timeout=30) == 0, site.events()


def test_a_holder_whose_writer_never_answers_gives_the_lease_to_the_other_site_at_once(
    witness: Witness, sites: dict[str, LeaseSite]
) -> None:
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    holding_with(hydra, f"http://127.0.0.1:{free_port()}/health")  # nothing listens there
    holding = hydra.start("hold")
    gate = cosmos.start("acquire")
    assert holding.wait(timeout=10) == 5, hydra.events()
    assert "did not answer within 1.5 seconds of the take" in hydra.fenced()
    gave_up = hydra.first("gave up")
    assert gave_up - hydra.first("acquired") >= float(READY_WITHIN)
    assert gate.wait(timeout=5) == 0, cosmos.events()
    assert cosmos.first("acquired") - gave_up < LEASE_WAIT - 2  # not an expiry: the release
    assert cosmos.fencing() == hydra.fencing() + 1
    assert witness.lease()["spec"]["holderIdentity"] == "cosmos/headscale-0"


def test_the_site_that_gave_up_waits_a_whole_lease_before_it_takes_the_lease_again(
    witness: Witness, sites: dict[str, LeaseSite]
) -> None:
    hydra = sites["hydra"]
    holding_with(hydra, f"http://127.0.0.1:{free_port()}/health")
    assert hydra.start("hold").wait(timeout=10) == 5, hydra.events()
    assert witness.lease()["spec"]["holderIdentity"] == "!hydra"
    started = time.monotonic()
    assert hydra.start("acquire").wait(timeout=30) == 0, hydra.events()  # no other site: it takes it, a lease later
    assert time.monotonic() - started >= LEASE_WAIT
    assert witness.lease()["spec"]["holderIdentity"] == "hydra/headscale-0"


def test_a_holder_whose_writer_answers_keeps_the_lease(
    witness: Witness, sites: dict[str, LeaseSite], health: str
) -> None:
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    holding_with(hydra, health)
    holding = hydra.start("hold")
    gate = cosmos.start("acquire")
    time.sleep(float(READY_WITHIN) + LEASE_WAIT + 1)
    assert holding.poll() is None, hydra.events()
    assert gate.poll() is None, cosmos.events()
    assert [what for _, what in hydra.events() if what.startswith("ready")] == [f"ready: {health} answers"]
    assert witness.lease()["spec"]["holderIdentity"] == "hydra/headscale-0"
