"""Automatic failover on deployed sites, with real actors end to end: the runbook of docs/witness-lease.md ("Turning
it on"), then takeovers that no one runs.

Three real clusters: hydra and cosmos, whose Headscale pods the lab's kubelet runs for real (the gate, the renewer,
the restore, Litestream and Headscale of the rendered pod, in one PID namespace per pod: tests/support/
kube_lab_pods.py), and the witness, which holds the Lease. Every kubeconfig the runbook has an operator make reaches
its API server through a proxy of its own, so a test cuts one site off the witness and the other site
(tests/support/lab_failover.py). The timing is the product's default (`tailnet.failover`: a 20 s Lease, 2 s of skew,
a fence after 12 s), the failsafe on.

The story, in order: both sites deployed in manual mode, hydra serving the users with API access; the witness's and
the failsafe's kubeconfigs set and applied; `automatic: true` applied to hydra, then cosmos. Then hydra is cut from
the witness and cosmos: it must fence (its Headscale stopped, its pod replaced) before cosmos, after the deadline,
takes the Lease, restores hydra's backup and serves. hydra's links come back: it must not serve while cosmos renews.
Then cosmos is lost (its processes killed, its API server gone): hydra takes the Lease back and serves every write
cosmos backed up.

Headplane's pods run too (its restore, Litestream, signer, the follower and the watcher as rendered; its container a
stand-in that commits a row every 200 ms: tests/support/kube_lab_pods.py): at each step it must serve only where its
site holds the Lease, a whole lease after the take, never beside the other site's, on a database restored from the
other site's backup.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.kube_lab import KubeLab, running_lab
from tests.support.kube_lab_pods import PodRunner, RunningPod, headplane_writes
from tests.support.lab_failover import (
    SITES,
    WITNESS,
    Links,
    automatic_tailnet,
    lease_holder,
    ready_pod,
    serving_pod,
    taken_at,
)
from tests.support.lab_sites import (
    SITE_TOOLS,
    USERS,
    Site,
    backed_up_users,
    describe,
    headscale_json,
    start_site,
    tailnet_cli,
)
from tests.support.litestream_lab import wait_until
from tests.support.real_pulumi import RUNBOOK_TOOLS, PulumiCli, Run

pytestmark = pytest.mark.real_tool(*RUNBOOK_TOOLS, *SITE_TOOLS)

#: tailnet.failover's defaults: a gate takes an unrenewed Lease after LEASE + SKEW seconds, so no sooner than
#: EARLIEST after the holder's loss (it may have renewed just before); a holder fences FENCE_AFTER seconds after its
#: last accepted renewal, and its writers get STOP_GRACE seconds each (three of them).
LEASE_SECONDS, SKEW_SECONDS, RENEW_SECONDS, FENCE_AFTER_SECONDS, STOP_GRACE_SECONDS = 20, 2, 3, 12, 2
EARLIEST = LEASE_SECONDS + SKEW_SECONDS - RENEW_SECONDS


@dataclass
class Tailnet:
    cli: PulumiCli
    sites: dict[str, Site]
    links: Links
    root: Path
    ui: dict[str, PodRunner]  # each site's Headplane pods
    turned_on: dict[str, Run] = field(default_factory=dict)

    def describe(self) -> str:
        pods = [(name, pod) for name, s in self.sites.items() for pod in s.pods.history]
        pods += [(name, pod) for name, runner in self.ui.items() for pod in runner.history]
        return "\n".join(f"{name} pod {describe(pod)}" for name, pod in pods)

    def writes(self, site: str) -> list[tuple[str, float]]:
        """What ``site``'s Headplanes acknowledged: (pod, uptime)."""
        return headplane_writes(self.ui[site].root)


@pytest.fixture(scope="module")
def failover_lab() -> Iterator[KubeLab]:
    """hydra, cosmos and the witness, real control planes; Headscale's pods left for the lab's own kubelet."""
    with running_lab(("hydra", "cosmos", WITNESS), held_apps=("headscale", "headplane")) as started:
        yield started


@pytest.fixture(scope="module")
def tailnet(failover_lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tailnet]:
    """Both sites deployed, hydra serving with API access; then automatic failover turned on as the runbook says."""
    root = tmp_path_factory.mktemp("automatic")
    cli, certificate = tailnet_cli(failover_lab, root)
    sites = {name: start_site(failover_lab, root, name, certificate) for name in SITES}
    ui = {name: PodRunner(failover_lab.client(name), "headscale", "headplane", root / f"pods-{name}-headplane",
                          root / "nfs") for name in SITES}  # fmt: skip
    for runner in ui.values():
        runner.start()
    links = Links()
    try:
        yield Tailnet(cli, sites, links, root, ui, automatic_tailnet(cli, failover_lab, sites, links))
    finally:
        for site in sites.values():
            site.close()
        for runner in ui.values():
            runner.stop()
        links.close()


def restored_from(pod: RunningPod) -> set[str]:
    """The Headplane pods whose rows ``pod``'s database holds: its restore's and its own."""
    with sqlite3.connect(pod.root / "volumes" / "data" / "hp_persist.db") as db:
        return {row[0] for row in db.execute("SELECT DISTINCT pod FROM writes")}


def one_headplane_at_a_time(tailnet: Tailnet) -> None:
    """Every Headplane pod's writes, by first write: each pod's first comes after the last of every pod before it."""
    by_pod: dict[str, list[float]] = {}
    for site in SITES:
        for pod, at in tailnet.writes(site):
            by_pod.setdefault(pod, []).append(at)
    last, before = float("-inf"), None
    for first, end, pod in sorted((min(times), max(times), pod) for pod, times in by_pod.items()):
        assert first > last, f"{pod} wrote at {first}, before {before}'s last write at {last}"
        last, before = max(last, end), pod


def test_turning_it_on_puts_hydra_behind_the_lease_and_cosmos_in_its_gate(
    tailnet: Tailnet, failover_lab: KubeLab
) -> None:
    for step in ("witness hydra", "witness cosmos"):  # what the witness's kubeconfig adds serves nothing
        created = {s.name for s in tailnet.turned_on[step].changed() if s.op == "create"}
        assert {n for n in created if "failsafe" in n}, tailnet.turned_on[step].ops()
        assert not {s.name for s in tailnet.turned_on[step].changed() if "deployment" in s.name}
    hydra = serving_pod(tailnet.sites["hydra"], besides=set())
    assert hydra.init_exits.get("lease-gate") == 0, tailnet.describe()
    assert lease_holder(failover_lab) == (f"hydra/{hydra.name}", 0)
    # Its renewer reached Headscale's readiness in the pod: it keeps the Lease past `readyWithinSeconds`.
    assert "ready: http://127.0.0.1:8080/health answers" in (hydra.root / "lease-renewer.log").read_text()
    assert sorted(u["name"] for u in headscale_json(tailnet.sites["hydra"], "users", "list")) == USERS
    (cosmos,) = tailnet.sites["cosmos"].pods.history
    time.sleep(LEASE_SECONDS + SKEW_SECONDS)  # a whole wait of a gate: cosmos's still does not take the Lease
    assert not cosmos.ready.is_set(), tailnet.describe()
    assert cosmos.init_process is not None, tailnet.describe()
    assert cosmos.init_exits == {}, tailnet.describe()
    assert lease_holder(failover_lab) == (f"hydra/{hydra.name}", 0)
    # Headplane: hydra's serves behind its follower, a whole lease after hydra's take; cosmos's waits in its own.
    manual = tailnet.ui["hydra"].history[0]
    hydra_ui = ready_pod(tailnet.ui["hydra"], "hydra", besides={manual.name})
    assert hydra_ui.init_exits.get("lease-follower") == 0, tailnet.describe()
    assert hydra_ui.init_ended["lease-follower"] - taken_at(failover_lab) >= LEASE_SECONDS + SKEW_SECONDS
    assert manual.name in restored_from(hydra_ui), "restored from what hydra's Headplane wrote in manual mode"
    (cosmos_ui,) = tailnet.ui["cosmos"].history
    assert not cosmos_ui.ready.is_set(), tailnet.describe()
    assert cosmos_ui.init_process is not None, tailnet.describe()
    assert [pod for pod, _ in tailnet.writes("cosmos")] == []
    one_headplane_at_a_time(tailnet)


def test_a_second_up_of_either_site_changes_nothing_about_who_serves(tailnet: Tailnet) -> None:
    for stack in SITES:
        again = tailnet.cli.run("up", "--yes", "-s", stack).check()
        assert again.changed() == [], again.ops()


def test_hydra_cut_from_the_witness_and_cosmos_fences_before_cosmos_serves(
    tailnet: Tailnet, failover_lab: KubeLab
) -> None:
    hydra_site, cosmos_site = tailnet.sites["hydra"], tailnet.sites["cosmos"]
    (old,) = hydra_site.pods.serving()
    (old_ui,) = tailnet.ui["hydra"].serving()
    users = headscale_json(hydra_site, "users", "list")
    assert wait_until(lambda: backed_up_users(tailnet.root) == USERS, timeout=60, interval=1)
    cut_at = time.monotonic()
    tailnet.links.cut("hydra")
    cosmos = serving_pod(cosmos_site, besides=set())
    served_after = cosmos.ready_at - cut_at
    print(f"hydra cut: cosmos serves {served_after:.1f} s later (took the Lease after "
          f"{cosmos.init_ended['lease-gate'] - cut_at:.1f} s); hydra's Headscale stopped after "
          f"{old.headscale_stopped_at - cut_at:.1f} s")  # fmt: skip
    # One writer at a time: hydra's Headscale stopped within its deadline, before cosmos's gate took the Lease.
    assert old.headscale_stopped_at is not None, tailnet.describe()
    assert old.headscale_stopped_at - cut_at < FENCE_AFTER_SECONDS + 3 * STOP_GRACE_SECONDS, tailnet.describe()
    assert old.headscale_stopped_at < cosmos.init_ended["lease-gate"], tailnet.describe()
    assert cosmos.init_ended["lease-gate"] - cut_at >= EARLIEST, tailnet.describe()
    assert "headscale not started again: its config is gone" in old.exits or old.stopped.is_set()
    assert lease_holder(failover_lab) == (f"cosmos/{cosmos.name}", 1)
    assert [(u["id"], u["name"]) for u in headscale_json(cosmos_site, "users", "list")] == [
        (u["id"], u["name"]) for u in users
    ]
    # hydra's fenced pod was replaced (its renewer deleted it), and the new one waits in its gate.
    assert wait_until(lambda: old.stopped.is_set() and len(hydra_site.pods.history) >= 3, timeout=30, interval=0.5)
    assert hydra_site.pods.serving() == [], tailnet.describe()
    # Headplane moved too: hydra's stopped on its watcher's deadline, cosmos's serves a lease after cosmos's take,
    # on hydra's Headplane's backup.
    cosmos_ui = ready_pod(tailnet.ui["cosmos"], "cosmos", besides=set())
    assert cosmos_ui.init_ended["lease-follower"] - taken_at(failover_lab) >= LEASE_SECONDS + SKEW_SECONDS
    assert old_ui.name in restored_from(cosmos_ui), tailnet.describe()
    assert wait_until(lambda: tailnet.writes("cosmos") != [], timeout=10, interval=0.2), tailnet.describe()
    last_hydra = max(at for _, at in tailnet.writes("hydra"))
    first_cosmos = min(at for _, at in tailnet.writes("cosmos"))
    print(f"hydra cut: its Headplane's last write {last_hydra - cut_at:.1f} s later (uptime ~ monotonic); cosmos's "
          f"Headplane served {cosmos_ui.ready_at - cut_at:.1f} s later")  # fmt: skip
    assert last_hydra < first_cosmos, tailnet.describe()
    assert wait_until(lambda: old_ui.stopped.is_set(), timeout=30, interval=0.5), "replaced: its watcher deleted it"
    assert tailnet.ui["hydra"].serving() == [], tailnet.describe()
    one_headplane_at_a_time(tailnet)


def test_hydra_back_on_its_links_does_not_serve_while_cosmos_renews(tailnet: Tailnet, failover_lab: KubeLab) -> None:
    tailnet.links.mend("hydra")
    (cosmos,) = tailnet.sites["cosmos"].pods.serving()
    time.sleep(LEASE_SECONDS + SKEW_SECONDS + 3)
    assert tailnet.sites["hydra"].pods.serving() == [], tailnet.describe()
    newest = tailnet.sites["hydra"].pods.history[-1]
    assert newest.init_process is not None, tailnet.describe()
    assert "lease-gate" not in newest.init_exits, tailnet.describe()
    assert lease_holder(failover_lab) == (f"cosmos/{cosmos.name}", 1)
    assert tailnet.ui["hydra"].serving() == [], tailnet.describe()
    assert "lease-follower" not in tailnet.ui["hydra"].history[-1].init_exits, tailnet.describe()


def test_cosmos_lost_hydra_serves_every_write_cosmos_backed_up(tailnet: Tailnet, failover_lab: KubeLab) -> None:
    hydra_site, cosmos_site = tailnet.sites["hydra"], tailnet.sites["cosmos"]
    done = cosmos_site.server().cli("users", "create", "dave")
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: "dave" in backed_up_users(tailnet.root), timeout=60, interval=1)
    # ... and signed: a restore quarantines what the signer had not signed yet (the documented RPO, not this test's).
    seen = time.time() + 0.5
    manifest = next((tailnet.root / "nfs").rglob("headscale/replica.manifest"))
    assert wait_until(lambda: manifest.stat().st_mtime > seen, timeout=30, interval=0.2)
    (cosmos_ui,) = tailnet.ui["cosmos"].serving()
    lost_at = time.monotonic()
    cosmos_site.pods.lose()
    tailnet.ui["cosmos"].lose()
    cosmos_site.ingress.stop()
    failover_lab.stop_api_server("cosmos")
    hydra = serving_pod(hydra_site, besides=set())
    print(f"cosmos lost: hydra serves {hydra.ready_at - lost_at:.1f} s later")
    assert hydra.init_ended["lease-gate"] - lost_at >= EARLIEST, tailnet.describe()
    assert lease_holder(failover_lab) == (f"hydra/{hydra.name}", 2)
    assert sorted(u["name"] for u in headscale_json(hydra_site, "users", "list")) == [*USERS, "dave"]
    assert hydra.exits == [], tailnet.describe()
    hydra_ui = ready_pod(tailnet.ui["hydra"], "hydra", besides={pod.name for pod in tailnet.ui["hydra"].history[:-1]})
    assert hydra_ui.init_ended["lease-follower"] - taken_at(failover_lab) >= LEASE_SECONDS + SKEW_SECONDS
    assert cosmos_ui.name in restored_from(hydra_ui), tailnet.describe()
    print(f"cosmos lost: hydra's Headplane served {hydra_ui.ready_at - lost_at:.1f} s later")
    one_headplane_at_a_time(tailnet)
