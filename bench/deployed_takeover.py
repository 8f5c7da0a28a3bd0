"""Whole takeovers on deployed sites: the time from a holder site's loss to the other site's real Headscale serving.

The lab of tests/real/test_automatic_failover.py (three real control planes, both stacks deployed by the real CLI,
automatic failover turned on as docs/witness-lease.md says, the defaults' timing, the failsafe on; each Headscale pod
run as rendered by the lab's kubelet, tests/support/kube_lab_pods.py). Each trial loses the site that holds the
Lease (every process of its pods killed, its API server gone): the other site's pod, waiting in its gate, must take
the Lease with the next fencing counter, restore the backup and serve. Then the lost site returns (its API server
and kubelet back, its stale pod deleted as the node's eviction would) and its new pod waits in its gate for the next
trial, which loses the other site.

Printed per trial and as median (min, max): the loss to the Lease's take (the gate's exit), to the pod serving
(Headscale answers /health), and what lies between (restore, the sidecars and Headscale's start). The lab's database
is small (the users of Pulumi.yaml) and its binaries are on the machine: no image pull, a restore of under a second.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import TypedDict

from tests.support.kube_lab import KubeLab, running_lab
from tests.support.kube_lab_pods import PodRunner
from tests.support.lab_failover import SITES, WITNESS, Links, automatic_tailnet, lease_holder, serving_pod
from tests.support.lab_sites import Site, start_site, tailnet_cli

APP = "app.kubernetes.io/name%3Dheadscale"


class Trial(TypedDict):
    """One trial: the site lost, and the seconds from its loss to the Lease's take, to serving, and between."""

    lost: str
    taken: float
    served: float
    between: float


def lose(lab: KubeLab, site: Site) -> float:
    """The site is lost: its pods' every process killed, its API server gone; when (time.monotonic())."""
    lost_at = time.monotonic()
    site.pods.lose()
    lab.stop_api_server(site.name)
    return lost_at


def bring_back(lab: KubeLab, site: Site, root: Path) -> None:
    """The site's API server and kubelet back; its stale pods deleted (the kubelet that ran them is gone), so that
    the Deployment makes a pod whose gate waits."""
    lab.start_api_server(site.name)
    client = lab.client(site.name)
    for pod in client.get(f"/api/v1/namespaces/headscale/pods?labelSelector={APP}")["items"]:
        client.delete(f"/api/v1/namespaces/headscale/pods/{pod['metadata']['name']}?gracePeriodSeconds=0")
    site.pods = PodRunner(client, "headscale", "headscale", root / f"pods-{site.name}-{time.monotonic_ns()}",
                          root / "nfs")  # fmt: skip
    site.pods.start()


def waiting_in_gate(site: Site, timeout: float = 120.0) -> None:
    """Until the site's new pod's gate has seen the Lease held by another (a whole renewal interval more)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = [pod.root / "lease-gate.log" for pod in site.pods.history]
        if any(log.exists() and "waiting: held by" in log.read_text() for log in logs):
            time.sleep(3)
            return
        time.sleep(0.5)
    raise TimeoutError(f"{site.name}: no pod waiting in its gate within {timeout:.0f} s")


def trial(lab: KubeLab, sites: dict[str, Site], root: Path) -> Trial:
    holder, counter = lease_holder(lab)
    lost, other = sites[holder.split("/")[0]], next(s for s in sites.values() if not holder.startswith(s.name))
    waiting = {pod.name for pod in other.pods.history if pod.ready.is_set()}
    lost_at = lose(lab, lost)
    pod = serving_pod(other, besides=waiting)
    assert pod.ready_at is not None  # serving_pod returns a pod that is ready
    taken, served = pod.init_ended["lease-gate"] - lost_at, pod.ready_at - lost_at
    assert lease_holder(lab) == (f"{other.name}/{pod.name}", counter + 1), lease_holder(lab)
    bring_back(lab, lost, root)
    waiting_in_gate(lost)  # as a standby's pod is before a loss
    return {"lost": lost.name, "taken": taken, "served": served, "between": served - taken}


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} s ({min(values):.1f}, {max(values):.1f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args(argv)
    with running_lab((*SITES, WITNESS), held_apps=("headscale",)) as lab, tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        cli, certificate = tailnet_cli(lab, root)
        sites = {name: start_site(lab, root, name, certificate) for name in SITES}
        links = Links()
        try:
            began = time.monotonic()
            automatic_tailnet(cli, lab, sites, links)
            print(f"deployed, automatic failover turned on: {time.monotonic() - began:.0f} s")
            runs: list[Trial] = []
            for n in range(args.trials):
                runs.append(trial(lab, sites, root))
                run = runs[-1]
                print(f"trial {n + 1}: {run['lost']} lost; the Lease taken after {run['taken']:.1f} s, "
                      f"serving after {run['served']:.1f} s", flush=True)  # fmt: skip
        finally:
            for site in sites.values():
                site.close()
            links.close()
    print(f"over {len(runs)} trials, loss to the take: {summary([r['taken'] for r in runs])}; to serving: "
          f"{summary([r['served'] for r in runs])}; between (restore and start): "
          f"{summary([r['between'] for r in runs])}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
