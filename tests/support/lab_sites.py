"""The lab's sites as a tailnet runs them: each cluster's Headscale pod run for real, behind an ingress at the
site's public address (tests/support/kube_lab_pods.py, tests/support/lab_ingress.py), and one NFS export for all.

The lab's copy of Pulumi.yaml gets loopback public addresses (where the ingresses listen) instead of the documentation
ones; nothing else in the project's files changes, so the stacks keep the default API URL, the public one, which
nothing here resolves.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.headscale_real import RealHeadscale
from tests.support.kube_lab import KubeLab
from tests.support.kube_lab_pods import PodRunner, RunningPod
from tests.support.lab_ingress import Ingress, make_certificate
from tests.support.litestream_lab import litestream_bin
from tests.support.real_pulumi import PulumiCli, Run, cli_for
from tools import real_tools, runbook

HOSTNAME = "headscale.example.com"


def _loopback(host: int) -> str:
    """An address of 127/8 the ingress binds on port 443: each pytest-xdist worker (`PYTEST_XDIST_WORKER`, gw0,
    gw1, …) has a /24 of its own, so two workers' labs never ask for the same address."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return f"127.0.{worker}.{host}"


#: The lab's public addresses, in place of the documentation addresses of Pulumi.yaml.
ADDRESSES = {"hydra": ("198.51.100.10", _loopback(2)), "cosmos": ("203.0.113.20", _loopback(3))}
#: The real tools a site needs beyond the CLI's: Headscale, Litestream, and the recorder's curl.
SITE_TOOLS = ("headscale", "litestream", "curl")
#: `tailnet.users` of Pulumi.yaml: what the active stack creates through the API.
USERS = ["alice", "bob", "carol"]


@dataclass
class Site:
    """One site of the lab: the kubelet of its Headscale pods and its ingress."""

    name: str
    pods: PodRunner
    ingress: Ingress

    def server(self) -> RealHeadscale:
        serving = self.pods.serving()
        assert len(serving) == 1, f"{self.name}: {len(serving)} Headscale pods serving"
        assert serving[0].headscale is not None
        return serving[0].headscale

    def close(self) -> None:
        self.ingress.stop()
        self.pods.stop()


def use_lab_addresses(cli: PulumiCli) -> None:
    """The lab's copy of Pulumi.yaml with loopback public addresses, where the lab's ingresses listen."""
    project = cli.project / "Pulumi.yaml"
    text = project.read_text()
    for documented, local in ADDRESSES.values():
        assert f"publicAddress: {documented}" in text
        text = text.replace(f"publicAddress: {documented}", f"publicAddress: {local}")
    project.write_text(text)


def start_site(lab: KubeLab, root: Path, name: str, certificate: tuple[Path, Path, Path]) -> Site:
    """Run ``name``'s Headscale pods (from now on, as they appear) and serve its public address."""
    pods = PodRunner(lab.client(name), "headscale", "headscale", root / f"pods-{name}", root / "nfs")
    pods.start()

    def backend() -> int | None:
        serving = pods.serving()
        return serving[0].headscale.ports.http if serving and serving[0].headscale else None

    ingress = Ingress(ADDRESSES[name][1], certificate[1], certificate[2], backend)
    ingress.start()
    return Site(name, pods, ingress)


def backed_up(root: Path, query: str) -> list[Any]:
    """The first column of `query` over the newest state of the replica on the export (plain Litestream)."""
    binary = litestream_bin()
    replicas = list((root / "nfs").rglob("headscale/replica"))
    if binary is None or not replicas:
        return []
    out = root / "probe.sqlite"
    out.unlink(missing_ok=True)
    done = subprocess.run(
        [str(binary), "restore", "-o", str(out), f"file://{replicas[0]}"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return []
    with sqlite3.connect(out) as db:
        return [row[0] for row in db.execute(query)]


def backed_up_users(root: Path) -> list[str]:
    """The users in the newest state of the replica on the export (plain Litestream, no verification)."""
    return backed_up(root, "SELECT name FROM users ORDER BY name")


def backed_up_key_ids(root: Path) -> set[int]:
    """The pre-auth keys in the newest state of the replica: a key minted last is the last write to reach it."""
    return set(backed_up(root, "SELECT id FROM pre_auth_keys"))


def tailnet_cli(lab: KubeLab, root: Path) -> tuple[PulumiCli, tuple[Path, Path, Path]]:
    """The real CLI for the lab's tailnet: the lab's public addresses, and its ingress CA trusted by the provider."""
    certificate = make_certificate(root / "ingress-pki", HOSTNAME)
    cli = cli_for(lab, root)
    cli.env["REQUESTS_CA_BUNDLE"] = str(certificate[0])
    use_lab_addresses(cli)
    return cli, certificate


def deploy(cli: PulumiCli, lab: KubeLab, stack: str) -> Run:
    """`pulumi stack init <stack>`, its kubeconfig (a secret), `pulumi up`: a site's first deployment."""
    cli.run("stack", "init", stack).check()
    cli.run("config", "set", "--secret", "kubeconfig", stdin=lab.kubeconfig_path(stack).read_text()).check()
    return cli.run("up", "--yes").check()


def deploy_serving(cli: PulumiCli, lab: KubeLab, site: Site) -> tuple[Run, Run]:
    """The identity stack, ``site``'s first deployment until its Headscale serves, then API access (a key from that
    Headscale as `bootstrapApiKey`) and `pulumi up`: the first deployment's run and the API run."""
    cli.identity()
    first = deploy(cli, lab, site.name)
    site.pods.wait_ready()
    cli.run("config", "set", "--secret", "bootstrapApiKey", site.server().create_api_key("2h")).check()
    return first, cli.run("up", "--yes").check()


def deploy_both(cli: PulumiCli, lab: KubeLab, sites: dict[str, Site]) -> str:
    """The identity stack, hydra's first deployment until it serves, cosmos's, then API access for hydra (a key from
    its Headscale as `bootstrapApiKey`) and its `pulumi up`: the key."""
    cli.identity()
    deploy(cli, lab, "hydra")
    sites["hydra"].pods.wait_ready()
    deploy(cli, lab, "cosmos")
    key = sites["hydra"].server().create_api_key("2h")
    cli.run("config", "set", "-s", "hydra", "--secret", "bootstrapApiKey", key).check()
    cli.run("up", "--yes", "-s", "hydra").check()
    return key


def headscale_json(site: Site, *args: str) -> Any:
    """What the site's serving Headscale's CLI prints for ``args`` with ``-o json``."""
    done = site.server().cli(*args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class RunbookRunner:
    """tools.runbook's runner for the real CLI: each command in the project copy with the CLI's environment, a
    ``pulumi up`` with an event log of its own, so the test reads what the engine did at each step."""

    def __init__(self, cli: PulumiCli) -> None:
        self.cli = cli
        self.ups: list[tuple[tuple[str, ...], Run]] = []
        self.output = ""

    def __call__(self, argv: Sequence[str], *, capture: bool) -> runbook.Completed:
        if list(argv[:2]) == ["pulumi", "up"]:
            done = self.cli.run(*argv[1:])
            self.ups.append((tuple(argv), done))
            return runbook.Completed(done.returncode, done.stdout)
        binary = shutil.which(argv[0], path=self.cli.env["PATH"]) or argv[0]
        finished = subprocess.run(
            [binary, *argv[1:]], cwd=self.cli.project, env=self.cli.env, capture_output=True, text=True, timeout=1200
        )
        self.output += finished.stdout + finished.stderr
        return runbook.Completed(finished.returncode, finished.stdout if capture else "")


@dataclass
class Runbook:
    """One runbook run (tools/runbook.py driving the real CLI): its exit status, what it printed, and the real
    `pulumi up`s it ran."""

    code: int
    runner: RunbookRunner
    lines: list[str] = field(default_factory=list)

    def explain(self, sites: dict[str, Site]) -> str:
        """Why it failed: its output, each failed `up`'s errors, each pod's failure."""
        text = "\n".join(self.lines) + "\n" + self.runner.output
        for argv, up in self.runner.ups:
            if up.returncode != 0:
                text += f"\n{' '.join(argv)}:\n" + "\n".join(up.diagnostics) + up.stderr[-3000:]
        for site in sites.values():
            text += "".join(f"\n{site.name} pod {describe(pod)}" for pod in site.pods.history)
            text += "".join(f"\n{site.name} ingress at {at:.2f}: {why}" for at, why in site.ingress.refusals[-10:])
        return text


def describe(pod: RunningPod) -> str:
    """A pod as the lab's kubelet ran it: whether it served or stopped, its init containers' exits, what failed and
    which container exited while it served (with Headscale's log tail)."""
    state = "stopped" if pod.stopped.is_set() else "serving" if pod.ready.is_set() else "starting"
    served = "headscale running" if pod.headscale is not None and pod.headscale.running else "headscale not running"
    ready = f"started at {pod.started_at:.2f}, ready at " + (f"{pod.ready_at:.2f}" if pod.ready_at else "-")
    return "; ".join([f"{pod.name}: {state}, {served}, init exits {pod.init_exits}, {ready}",
                      *([f"failed: {pod.failure}"] if pod.failure else []), *pod.exits])  # fmt: skip


def run_runbook(cli: PulumiCli, *argv: str) -> Runbook:
    """`python -m tools.runbook argv --yes` in the CLI's project copy, with the CLI's environment: as `make … YES=1`
    runs it, each `pulumi up` applied without the question a terminal would get."""
    runner = RunbookRunner(cli)
    lines: list[str] = []
    code = runbook.main([*argv, "--yes"], runner=runner, project_dir=cli.project, out=lines.append)
    return Runbook(code, runner, lines)


def join_with_key(server: RealHeadscale, key: str, hostname: str, state: Path) -> str:
    """A real Tailscale node (tools/lab_node, tsnet) joins ``server`` with the pre-auth ``key``, as `tailscale up
    --auth-key` on a router would, straight at Headscale's own address; what it printed once running."""
    node = real_tools.bin_dir() / "tailscale-node"
    argv = [str(node), "-control", server.url, "-authkey", key, "-hostname", hostname, "-dir", str(state)]
    env = {**os.environ, "TS_NO_LOGS_NO_SUPPORT": "true"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()
