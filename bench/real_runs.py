"""Wall times of the runbooks' real runs: the real `pulumi` CLI and plugins, two real API servers, a real Headscale
run by the lab's kubelet on one NFS export (tests/support/lab_sites.py, as the real-actor tests run them).

Printed, each once on this machine: the identity stack's `up`; per site, its first deployment and a no-op `up`
(with API access); `pulumi preview` of each site with the active's Headscale refusing connections and with it
silent (it accepts and never answers); and `make promote SITE=cosmos LOST=hydra` with hydra lost. With
``--record`` the promotion's figure goes to bench/measured/promotion.json, which the `recovery` output's
clusterLoss row reads (it measured the engine model before).

Needs the real tools (`make real-tools`) and root (the lab's kubelet binds volumes in mount namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.kube_lab import KubeLab, running_lab
from tests.support.lab_sites import ADDRESSES, Site, backed_up_users, deploy, run_runbook, start_site, tailnet_cli
from tests.support.litestream_lab import wait_until
from tests.support.real_pulumi import PulumiCli

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "bench" / "measured" / "promotion.json"
METHOD = (
    "tools/runbook.py promote with the real pulumi CLI and plugins, two real API servers and a real Headscale "
    "restored by the rendered script with real Litestream (bench/real_runs.py)"
)


def timed(figures: dict[str, float], name: str, action: Callable[[], Any]) -> Any:
    started = time.monotonic()
    result = action()
    figures[name] = round(time.monotonic() - started, 1)
    print(f"{name:48} {figures[name]:7.1f} s", flush=True)
    return result


@contextmanager
def silent(address: str) -> Iterator[None]:
    """A listener at ``address``:443 that never accepts: connections complete in the kernel, then nothing answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, 443))
    listener.listen(128)
    try:
        yield
    finally:
        listener.close()


def _deploy_both(cli: PulumiCli, lab: KubeLab, sites: dict[str, Site], figures: dict[str, float]) -> None:
    timed(figures, "identity stack: pulumi up", cli.identity)
    timed(figures, "hydra: first deployment (pulumi up)", lambda: deploy(cli, lab, "hydra"))
    sites["hydra"].pods.wait_ready()
    timed(figures, "cosmos: first deployment (pulumi up)", lambda: deploy(cli, lab, "cosmos"))
    key = sites["hydra"].server().create_api_key("2h")
    for stack in ("hydra", "cosmos"):
        cli.run("config", "set", "-s", stack, "--secret", "bootstrapApiKey", key).check()
        timed(figures, f"{stack}: pulumi up with API access", lambda s=stack: cli.run("up", "--yes", "-s", s).check())
    for stack in ("hydra", "cosmos"):
        timed(figures, f"{stack}: no-op pulumi up", lambda s=stack: cli.run("up", "--yes", "-s", s).check())


def _previews_without_the_active(cli: PulumiCli, hydra: Site, figures: dict[str, float]) -> None:
    """Each site's preview while the active's Headscale refuses, then while it is silent; how each ended."""

    def preview(stack: str, how: str) -> None:
        done = timed(figures, f"{stack}: preview, active {how}", lambda: cli.run("preview", "-s", stack))
        said = [e["diagnosticEvent"] for e in done.events if "diagnosticEvent" in e]
        unanswered = [d for d in said if "could not answer" in d["message"]]
        severities = sorted({d.get("severity", "?") for d in unanswered})
        first = unanswered[0]["message"].strip()[:200] if unanswered else "-"
        print(f"    exit {done.returncode}; {len(unanswered)} resource(s) said Headscale could not answer "
              f"({', '.join(severities) or '-'}); first: {first}")  # fmt: skip

    hydra.ingress.stop()
    for stack in ("hydra", "cosmos"):
        preview(stack, "refusing")
    with silent(ADDRESSES["hydra"][1]):
        for stack in ("hydra", "cosmos"):
            preview(stack, "silent")


def measure() -> dict[str, float]:
    figures: dict[str, float] = {}
    with running_lab(held_apps=("headscale",)) as lab, tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        cli, certificate = tailnet_cli(lab, root)
        sites = {name: start_site(lab, root, name, certificate) for name in ("hydra", "cosmos")}
        try:
            _deploy_both(cli, lab, sites, figures)
            if not wait_until(lambda: len(backed_up_users(root)) > 0, timeout=60, interval=1):
                raise SystemExit("hydra's backup never reached the export")
            _previews_without_the_active(cli, sites["hydra"], figures)
            sites["hydra"].pods.lose()
            lab.stop_api_server("hydra")
            promotion = timed(
                figures,
                "make promote SITE=cosmos LOST=hydra",
                lambda: run_runbook(cli, "promote", "cosmos", "--lost", "hydra", "--confirm-lost", "hydra"),
            )
            if promotion.code != 0:
                raise SystemExit("the promotion failed:\n" + promotion.explain(sites))
            pod = sites["cosmos"].pods.history[-1]
            assert pod.ready_at is not None
            figures["cosmos's pod: restore and start"] = round(pod.ready_at - pod.started_at, 1)
            figures["make promote: the commands' own time"] = round(
                figures["make promote SITE=cosmos LOST=hydra"] - figures["cosmos's pod: restore and start"], 1
            )
            for name in ("cosmos's pod: restore and start", "make promote: the commands' own time"):
                print(f"{name:48} {figures[name]:7.1f} s")
        finally:
            for site in sites.values():
                site.close()
    return figures


def record(figures: dict[str, float]) -> None:
    """The promotion's real figure in bench/measured/promotion.json: the commands' own time, without the rollout of
    cosmos's pod they await (the `recovery` output adds image pull, restore and start from its own inputs). The
    reachable case keeps the engine model's figure and its method."""
    data = json.loads(MEASURED.read_text())
    data["lost"] = {
        "commandSeconds": figures["make promote: the commands' own time"],
        "waitSeconds": 0.0,
        "rolloutSeconds": figures["cosmos's pod: restore and start"],
        "commands": data["lost"]["commands"],
        "pulumiUps": ["cosmos"],
        "measuredOn": datetime.now(UTC).date().isoformat(),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
        "method": METHOD,
    }
    MEASURED.write_text(json.dumps(data, indent=2) + "\n")
    print(f"recorded {MEASURED.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help=f"write {MEASURED.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    figures = measure()
    if args.record:
        record(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
