"""Whole sites on the witness lease: each site a pod as the kubelet runs it (gate, then a writer restarted in place
and the renewer; replaced once fenced), around a stand-in writer that logs every write with its fencing counter
(tests/support/witness_pod.py), on a real kube-apiserver with the failsafe on. Every scenario judges "never two
writers" from that log alone: each fencing counter written by one site, and all its writes after every write of the
counters below it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.witness_lab import TEST_TIMING, LeaseSite, Witness, two_sites
from tests.support.witness_pod import LeasePod, first_write, two_writers, uptime, writes

pytestmark = pytest.mark.real_tool("curl", *LAB_TOOLS)


@pytest.fixture
def sites(witness: Witness, tmp_path: Path) -> Iterator[dict[str, LeaseSite]]:
    """hydra and cosmos with the failsafe, and a released Lease: the first gate takes it at once."""
    with two_sites(witness, tmp_path, TEST_TIMING, failsafe=True) as made:
        yield made


@pytest.fixture
def write_log(tmp_path: Path) -> Path:
    return tmp_path / "writes.log"


def pods(
    sites: dict[str, LeaseSite], write_log: Path, replace_after: float = 0.5, script_writer: bool = False
) -> dict[str, LeasePod]:
    return {name: LeasePod(site, write_log, replace_after, script_writer=script_writer) for name, site in sites.items()}


def stop_all(running: dict[str, LeasePod]) -> None:
    for pod in running.values():
        pod.stop()


@pytest.mark.parametrize("script_writer", [False, True], ids=["named-process", "shell-script"])
def test_a_holder_cut_off_stops_writing_before_the_other_site_writes(
    sites: dict[str, LeaseSite], write_log: Path, script_writer: bool
) -> None:
    """hydra loses the witness and cosmos. Its pod is replaced only 3 s after the fence, and its writer is restarted
    in place meanwhile: only the fence (config gone, writer stopped) keeps it from writing on. The writer is a
    process of its own name (as Headscale) or a script run by `sh` (as the backup signer)."""
    hydra = sites["hydra"]
    running = pods(sites, write_log, replace_after=3, script_writer=script_writer)
    running["hydra"].start()
    first_write(write_log, "hydra", timeout=10)
    running["cosmos"].start()
    time.sleep(1)
    cut_at = uptime()
    hydra.proxy.cut("blackhole")
    hydra.links["cosmos"].cut("blackhole")
    first_write(write_log, "cosmos", timeout=20)
    time.sleep(1)
    stop_all(running)
    assert two_writers(write_log) == []
    assert running["hydra"].renewer_exits[0] == 5, hydra.events()
    assert 1 in running["hydra"].writer_exits  # restarted in place, it found no config and did not start
    counters = {write.site: write.fencing for write in writes(write_log)}
    assert counters == {"hydra": 1, "cosmos": 2}
    last_hydra = max(write.at for write in writes(write_log) if write.site == "hydra")
    assert last_hydra - cut_at < 2.5 + 0.5 + 0.5  # FENCE_AFTER_SECONDS, STOP_GRACE_SECONDS, a renewal's slack


def test_a_lost_site_is_followed_by_the_other_within_a_lease(sites: dict[str, LeaseSite], write_log: Path) -> None:
    hydra = sites["hydra"]
    running = pods(sites, write_log)
    running["hydra"].start()
    first_write(write_log, "hydra", timeout=10)
    running["cosmos"].start()
    time.sleep(1)
    lost_at = uptime()
    running["hydra"].lose()
    for proxy in [hydra.proxy, *hydra.links.values()]:
        proxy.cut("refuse")
    first = first_write(write_log, "cosmos", timeout=20)
    stop_all(running)
    assert two_writers(write_log) == []
    assert first - lost_at < 4 + 1 + 0.5 + 1  # LEASE + SKEW, a renewal interval, the writer's start


def test_with_the_witness_down_the_same_writer_writes_on(sites: dict[str, LeaseSite], write_log: Path) -> None:
    running = pods(sites, write_log)
    running["hydra"].start()
    first_write(write_log, "hydra", timeout=10)
    running["cosmos"].start()
    time.sleep(1)
    cut_at = uptime()
    for site in sites.values():
        site.proxy.cut("blackhole")
    time.sleep(12)  # three leases
    latest = max(write.at for write in writes(write_log))
    stop_all(running)
    assert two_writers(write_log) == []
    assert {(write.site, write.fencing) for write in writes(write_log)} == {("hydra", 1)}
    assert latest - cut_at > 11  # hydra wrote throughout
    assert running["hydra"].renewer_exits == [0]  # released at the end, never fenced


def test_two_sites_starting_at_once_make_one_writer(sites: dict[str, LeaseSite], write_log: Path) -> None:
    running = pods(sites, write_log)
    for pod in running.values():
        pod.start()
    time.sleep(8)  # two leases
    stop_all(running)
    assert two_writers(write_log) == []
    assert len({write.site for write in writes(write_log)}) == 1


def test_a_flapping_link_hands_over_once_and_never_makes_two_writers(
    sites: dict[str, LeaseSite], write_log: Path
) -> None:
    hydra = sites["hydra"]
    running = pods(sites, write_log)
    running["hydra"].start()
    first_write(write_log, "hydra", timeout=10)
    running["cosmos"].start()
    for outage in (0.8, 0.5, 3.5, 0.5, 0.8):  # the third, with the peer cut too, outlasts the fencing deadline
        hydra.proxy.cut("blackhole")
        if outage > 2.5:
            hydra.links["cosmos"].cut("blackhole")
        time.sleep(outage)
        hydra.proxy.mend()
        hydra.links["cosmos"].mend()
        time.sleep(1.0)
    first_write(write_log, "cosmos", timeout=15)
    time.sleep(1)
    stop_all(running)
    assert two_writers(write_log) == []
    assert [write.site for write in writes(write_log)][-1] == "cosmos"
