"""Headplane behind the witness lease: a follower (components/scripts/witness-lease.sh ``follow`` and ``watch``) serves
only where its site holds the Lease, and never while another site's follower may still write.

Each site runs two pods as the kubelet would (tests/support/witness_pod.py): its Headscale's (``acquire``/``hold``)
and its Headplane's (``follow``/``watch``), each around a stand-in writer that logs its writes with the fencing
counter its gate saw, on a real kube-apiserver. Every scenario judges "never two Headplanes" from the followers' log
alone, as the holders' scenarios judge Headscale (tests/components/test_witness_lease_pods.py).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.script_checks import SHELLS_ONLY, shell_for
from tests.support.witness_lab import (
    CURL,
    LEASE,
    NAMESPACE,
    SCRIPT,
    TEST_TIMING,
    LeaseSite,
    Witness,
    new_site,
    two_sites,
)
from tests.support.witness_pod import LeasePod, first_write, two_writers, uptime, writes

pytestmark = pytest.mark.real_tool("curl", *LAB_TOOLS)

#: What TEST_TIMING makes a follower wait after its site took the Lease (LEASE_SECONDS + SKEW_SECONDS).
LEASE_WAIT = 5.0
#: FENCE_AFTER_SECONDS of TEST_TIMING.
FENCE_AFTER = 2.5


@pytest.fixture
def sites(witness: Witness, tmp_path: Path) -> Iterator[dict[str, LeaseSite]]:
    """Each site's Headscale (by site name) and its Headplane (``<site>-headplane``): a site's two pods reach the
    witness through proxies of their own, with the site's token."""
    with two_sites(witness, tmp_path, TEST_TIMING, failsafe=False) as made:
        followers = {f"{name}-headplane": new_site(witness, tmp_path / f"{name}-headplane", name, TEST_TIMING)
                     for name in ("hydra", "cosmos")}  # fmt: skip
        try:
            yield {**made, **followers}
        finally:
            for site in followers.values():
                site.close()


class Pods:
    """Both sites' pods: the holders write to one log, the followers to another."""

    def __init__(self, sites: dict[str, LeaseSite], logs: Path) -> None:
        self.serving, self.ui = logs / "headscale.log", logs / "headplane.log"
        self.pods = {
            name: LeasePod(site, self.ui if name.endswith("-headplane") else self.serving,
                           follows=name.endswith("-headplane"))
            for name, site in sites.items()
        }  # fmt: skip

    def start(self, *names: str) -> None:
        for name in names:
            self.pods[name].start()

    def stop(self) -> None:
        for pod in self.pods.values():
            pod.stop()


@pytest.fixture
def pods(sites: dict[str, LeaseSite], tmp_path: Path) -> Iterator[Pods]:
    made = Pods(sites, tmp_path)
    yield made
    made.stop()


def started(pods: Pods) -> None:
    """hydra's Headscale serving, then everything else: hydra's Headplane serves, cosmos's waits."""
    pods.start("hydra")
    first_write(pods.serving, "hydra", timeout=10)
    pods.start("hydra-headplane", "cosmos", "cosmos-headplane")
    first_write(pods.ui, "hydra", timeout=15)


def test_a_follower_serves_a_lease_after_its_site_took_it_and_only_there(
    sites: dict[str, LeaseSite], pods: Pods
) -> None:
    started(pods)
    time.sleep(2)
    assert {write.site for write in writes(pods.ui)} == {"hydra"}, "cosmos's Headplane waits: hydra holds the Lease"
    hydra_ui = sites["hydra-headplane"]
    assert hydra_ui.first("waiting: hydra/headscale-0 holds it (fencing=1)")
    # The follower counts a whole lease from its first sight of the take, which is after the take.
    assert hydra_ui.first("following fencing=1") - sites["hydra"].first("acquired") >= LEASE_WAIT
    assert {write.fencing for write in writes(pods.ui)} == {1}
    assert "waiting: held by hydra/headscale-0" in [what for _, what in sites["cosmos-headplane"].events()]


def test_a_site_cut_off_stops_its_headplane_before_the_other_sites_starts(
    sites: dict[str, LeaseSite], pods: Pods
) -> None:
    """hydra loses the witness (both its pods' links): its watcher cannot see a renewal and fences on its deadline,
    cosmos takes the Lease a lease later, and cosmos's Headplane starts a lease after that."""
    started(pods)
    time.sleep(1)
    cut_at = uptime()
    sites["hydra"].proxy.cut("blackhole")
    sites["hydra-headplane"].proxy.cut("blackhole")
    cosmos_first = first_write(pods.ui, "cosmos", timeout=30)
    time.sleep(1)
    pods.stop()
    assert two_writers(pods.ui) == []
    assert two_writers(pods.serving) == []
    hydra_ui = sites["hydra-headplane"]
    assert pods.pods["hydra-headplane"].renewer_exits[0] == 5, hydra_ui.events()
    assert hydra_ui.fenced().startswith("no renewal by hydra seen for 2.5 seconds")
    last_hydra = max(write.at for write in writes(pods.ui) if write.site == "hydra")
    assert last_hydra - cut_at < FENCE_AFTER + 0.5 + 0.5  # its deadline, STOP_GRACE_SECONDS, a read's slack
    assert last_hydra < sites["cosmos"].first("acquired"), "stopped before cosmos could even take the Lease"
    assert cosmos_first - sites["cosmos"].first("acquired") >= LEASE_WAIT
    assert {(write.site, write.fencing) for write in writes(pods.ui)} == {("hydra", 1), ("cosmos", 2)}


def test_a_handover_by_release_stops_the_old_headplane_at_once_and_the_new_one_waits_a_lease(
    sites: dict[str, LeaseSite], pods: Pods
) -> None:
    """hydra's Headscale pod is deleted (a rollout): it releases the Lease, cosmos's gate takes it at once. hydra's
    watcher sees cosmos hold it and fences; cosmos's Headplane still waits a whole lease after the take, longer
    than any watcher of hydra that missed the change could serve."""
    started(pods)
    time.sleep(1)
    pods.pods["hydra"].stop()
    cosmos_first = first_write(pods.ui, "cosmos", timeout=20)
    time.sleep(1)
    pods.stop()
    assert two_writers(pods.ui) == []
    hydra_ui, cosmos = sites["hydra-headplane"], sites["cosmos"]
    assert hydra_ui.fenced() == "the lease is cosmos/headscale-0's"
    released = sites["hydra"].first("released")
    assert cosmos.first("acquired") - released < 1.5, "a release is taken at once"
    last_hydra = max(write.at for write in writes(pods.ui) if write.site == "hydra")
    assert last_hydra - cosmos.first("acquired") < 0.5 + 0.5 + 0.5  # one watch interval, its stop, slack
    assert cosmos_first - cosmos.first("acquired") >= LEASE_WAIT


def test_a_follower_whose_sites_holder_is_lost_stops_before_another_site_may_take_over(
    sites: dict[str, LeaseSite], pods: Pods
) -> None:
    """hydra's Headscale pod is lost (no release), its Headplane's link is fine: no renewal is seen, so the watcher
    fences on its deadline, before cosmos's gate may take the unrenewed Lease."""
    started(pods)
    time.sleep(1)
    pods.pods["hydra"].lose()
    first_write(pods.ui, "cosmos", timeout=30)
    pods.stop()
    assert two_writers(pods.ui) == []
    hydra_ui = sites["hydra-headplane"]
    assert hydra_ui.fenced().startswith("no renewal by hydra seen")
    last_hydra = max(write.at for write in writes(pods.ui) if write.site == "hydra")
    assert last_hydra < sites["cosmos"].first("taking over")


@pytest.mark.parametrize("shell", SHELLS_ONLY)
@pytest.mark.parametrize(
    ("command", "change", "named", "code"),
    [
        ("follow", {"FAILSAFE_LEASE": "headscale-failsafe"}, "FAILSAFE_LEASE and READY_URL are a holder's", 2),
        ("watch", {"READY_URL": "http://127.0.0.1:1/", "READY_WITHIN_SECONDS": "5"}, "are a holder's, not a", 2),
        ("follow", {"IDENTITY": "hydra"}, "IDENTITY must be SITE/POD for follow (got 'hydra')", 2),
        ("watch", {"IDENTITY": "Hydra/headplane-0"}, "IDENTITY's site (before the '/') must be a Kubernetes name", 2),
        ("watch", {}, "fenced: no holding followed in", 5),
    ],
)
def test_a_follower_invoked_as_a_holder_is_refused_and_a_watcher_with_nothing_followed_fences(
    shell: list[str], command: str, change: dict[str, str], named: str, code: int, tmp_path: Path
) -> None:
    env = {"API_URL": "https://127.0.0.1:6443", "NAMESPACE": NAMESPACE, "LEASE": LEASE,
           "IDENTITY": "hydra/headplane-0", "STATE_DIR": str(tmp_path / "state"), "TOKEN_FILE": str(tmp_path / "t"),
           "CA_FILE": str(tmp_path / "ca"), "CURL_BIN": CURL, **TEST_TIMING, **change}  # fmt: skip
    chosen = shell_for(shell, tmp_path / "bin")
    env["PATH"] = chosen.path or "/usr/bin:/bin"
    done = subprocess.run([*chosen.argv, str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == code, done.stderr
    assert named in done.stderr
