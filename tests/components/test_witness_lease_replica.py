"""Whole sites on the witness lease with real data: each site restores the shared replica with real Litestream,
replicates with real Litestream, and commits every write to SQLite before it logs it (tests/support/witness_replica.py),
on a real kube-apiserver with the failsafe on. Each scenario judges, from the write log and the new holder's
database: no two writers, and no acknowledged write of the old holder lost beyond the stated bound.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.litestream_lab import litestream_bin
from tests.support.witness_lab import LeaseSite, Witness, two_sites
from tests.support.witness_pod import first_write, two_writers, uptime, writes
from tests.support.witness_replica import REPLICA_TIMING, ReplicatedPod, loss, wait_for_rows

pytestmark = pytest.mark.real_tool("curl", "sqlite3", "litestream", *LAB_TOOLS)

#: Litestream ships every sync interval (1 s here) on its own monitor tick: what a site lost at once may lose.
SYNC_SECONDS = 1.0


@pytest.fixture
def sites(witness: Witness, tmp_path: Path) -> Iterator[dict[str, LeaseSite]]:
    with two_sites(witness, tmp_path, REPLICA_TIMING, failsafe=True) as made:
        yield made


@pytest.fixture
def running(sites: dict[str, LeaseSite], tmp_path: Path) -> Iterator[dict[str, ReplicatedPod]]:
    binary = litestream_bin()
    assert binary is not None
    log, replica = tmp_path / "writes.log", tmp_path / "nfs" / "headscale" / "replica"
    pods = {name: ReplicatedPod(site, log, 0.5, litestream=binary, replica_dir=replica) for name, site in sites.items()}
    yield pods
    for pod in pods.values():
        pod.stop()


def _serving(running: dict[str, ReplicatedPod]) -> Path:
    """hydra serving and replicating for 3 s, cosmos waiting at its gate: the write log's path."""
    running["hydra"].start()
    log = running["hydra"].write_log
    first_write(log, "hydra", timeout=15)
    running["cosmos"].start()
    time.sleep(3)
    return log


def test_a_holder_cut_off_loses_no_acknowledged_write(
    sites: dict[str, LeaseSite], running: dict[str, ReplicatedPod]
) -> None:
    """The fence stops hydra's writer, then its Litestream (SIGTERM): what hydra acknowledged is in the replica
    before cosmos may take over, so cosmos's restore holds every write."""
    log = _serving(running)
    sites["hydra"].proxy.cut("blackhole")
    sites["hydra"].links["cosmos"].cut("blackhole")
    first_write(log, "cosmos", timeout=30)
    wait_for_rows(running["cosmos"].db_path, "cosmos", timeout=10)
    found = loss(log, running["cosmos"].db_path, below=2)
    assert two_writers(log) == []
    assert found.acknowledged > 50
    assert (found.lost, found.window) == (0, 0.0), found
    assert [restore.returncode for restore in running["cosmos"].restores] == [0]


def test_a_lost_site_loses_at_most_its_last_sync_interval(
    sites: dict[str, LeaseSite], running: dict[str, ReplicatedPod]
) -> None:
    """hydra's every process killed at once: Litestream ships nothing more, so cosmos's restore may miss the
    writes of hydra's last sync interval, and no earlier one."""
    log = _serving(running)
    lost_at = uptime()
    running["hydra"].lose()
    for proxy in [sites["hydra"].proxy, *sites["hydra"].links.values()]:
        proxy.cut("refuse")
    first = first_write(log, "cosmos", timeout=30)
    wait_for_rows(running["cosmos"].db_path, "cosmos", timeout=10)
    found = loss(log, running["cosmos"].db_path, below=2)
    assert two_writers(log) == []
    assert found.acknowledged > 50
    assert found.window <= SYNC_SECONDS + 0.5, found  # a tick of Litestream's monitor on top of the interval
    restore = running["cosmos"].restores[0]
    assert restore.returncode == 0
    assert first - lost_at < 6 + 1 + 0.5 + 1 + (restore.ended - restore.started) + 1.5  # lease, skew, renew, takeover
    assert {write.site for write in writes(log) if write.at > lost_at} == {"cosmos"}
