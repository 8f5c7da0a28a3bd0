"""The witness of the lease tests and bench: a real kube-apiserver (the lab's) holding the Lease, and sites that run
components/scripts/witness-lease.sh against it, each with its own token and a proxy of its own to cut.

Every process is a site's pod as far as the witness knows: its own ServiceAccount token (TokenRequest), a Role that
allows leases and nothing else, its own identity. The script logs the monotonic time (/proc/uptime) of each event;
all run on this machine, so one site's fence and another's take compare directly.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headscale_ha.components.witness_lease import lease_role
from tests.support.cut_proxy import CutProxy
from tests.support.kube_lab import KubeClient, KubeError, KubeLab, running_lab
from tests.support.litestream_lab import ROOT, stop_process
from tests.support.script_checks import shell_for

SCRIPT = ROOT / "components" / "scripts" / "witness-lease.sh"
NAMESPACE, LEASE = "witness", "headscale-serving"
#: The failsafe's Lease, one in each site's namespace ("site-<name>": the site's own cluster, as far as the script
#: can tell: its own URL, token and Role).
FAILSAFE_LEASE = "headscale-failsafe"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
CURL = shutil.which("curl") or "/usr/bin/curl"
#: The tests' timing: short, and inside every rule: 2.5 + 1 < 4; 0.5 is at most half of 2.5; and a writer's stop
#: (STOP_GRACE_SECONDS 0.5 in tests/support/witness_pod.py) fits in what is left, 4 - 1 - 2.5.
TEST_TIMING = {"LEASE_SECONDS": "4", "SKEW_SECONDS": "1", "RENEW_SECONDS": "0.5", "FENCE_AFTER_SECONDS": "2.5",
               "RETRY_SECONDS": "0.2"}  # fmt: skip
EVENT = re.compile(r"^(?P<at>\d+\.\d+) witness-lease: (?P<what>.*)$")


@dataclass
class Witness:
    lab: KubeLab
    client: KubeClient
    api_port: int
    ca: Path

    def lease(self) -> dict[str, Any]:
        return self.client.get(f"{LEASES}/{LEASE}")

    def forget(self) -> None:
        """No Lease and no failsafe Lease: the next gate creates them."""
        for path in [f"{LEASES}/{LEASE}", *(f"{site_leases(site)}/{FAILSAFE_LEASE}" for site in self.site_names)]:
            try:
                self.client.delete(path)
            except KubeError as error:
                if error.status != 404:
                    raise

    def release(self) -> None:
        """A released Lease and no failsafe Lease: the next gate takes it at once (not a lease later, as a missing
        one), with the fencing counter 1."""
        self.forget()
        self.client.create(LEASES, {"metadata": {"name": LEASE}, "spec": {"holderIdentity": ""}})

    @property
    def site_names(self) -> list[str]:
        spaces = self.client.get("/api/v1/namespaces")["items"]
        return [space["metadata"]["name"].removeprefix("site-") for space in spaces
                if space["metadata"]["name"].startswith("site-")]  # fmt: skip

    def failsafe(self, site: str) -> dict[str, Any]:
        return self.client.get(f"{site_leases(site)}/{FAILSAFE_LEASE}")


def site_leases(site: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/site-{site}/leases"


@contextmanager
def running_witness() -> Iterator[Witness]:
    """A one-cluster lab, its namespace for the Lease and the Role every site is bound to."""
    with running_lab(("witness",)) as lab:
        client = lab.client("witness")
        client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        _lease_role(client, NAMESPACE, LEASE)
        cluster = lab.cluster("witness")
        yield Witness(lab, client, cluster.ports["api"], cluster.pki / "ca.crt")


@dataclass
class LeaseSite:
    """One site: its identity, token, proxy to the witness, state directory and the command it runs."""

    name: str
    root: Path
    proxy: CutProxy
    env: dict[str, str]
    process: subprocess.Popen[str] | None = None
    log: Path | None = None
    #: With the failsafe: a proxy to its own cluster ("local") and one to each other site's cluster (by name).
    links: dict[str, CutProxy] = field(default_factory=dict)

    def start(self, command: str, shell: list[str] | None = None) -> subprocess.Popen[str]:
        chosen = shell_for(shell or ["sh"], self.root / "bin")
        env = {**self.env, **({"PATH": chosen.path} if chosen.path else {})}
        self.log = self.root / f"{command}-{time.monotonic_ns()}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen([*chosen.argv, str(SCRIPT), command], env=env, stdout=out,
                                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
        return self.process

    def run(self, command: str, timeout: float = 30) -> int:
        return self.start(command).wait(timeout=timeout)

    def events(self) -> list[tuple[float, str]]:
        """(uptime, event) of every log line of this site's runs, in order."""
        found = []
        for log in sorted(self.root.glob("*.log"), key=lambda path: path.stat().st_mtime_ns):
            for line in log.read_text().splitlines():
                if match := EVENT.match(line):
                    found.append((float(match["at"]), match["what"]))
        return found

    def first(self, prefix: str) -> float:
        times = [at for at, what in self.events() if what.startswith(prefix)]
        assert times, (prefix, self.events())
        return times[0]

    def fencing(self) -> int:
        return int((self.root / "state" / "fencing").read_text())

    def fenced(self) -> str:
        return (self.root / "state" / "fenced").read_text().strip()

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process, timeout=5)
        for proxy in [self.proxy, *self.links.values()]:
            proxy.close()


def new_site(witness: Witness, root: Path, name: str, timing: Mapping[str, str]) -> LeaseSite:
    """A ServiceAccount bound to the Lease Role, a token for it, and a proxy to the witness of its own."""
    root.mkdir(parents=True)
    (root / "token").write_text(_lease_token(witness.client, NAMESPACE, name))
    proxy = CutProxy(witness.api_port)
    proxy.start()
    env = {"API_URL": f"https://127.0.0.1:{proxy.port}", "NAMESPACE": NAMESPACE, "LEASE": LEASE,
           "IDENTITY": f"{name}/headscale-0", "STATE_DIR": str(root / "state"), "TOKEN_FILE": str(root / "token"),
           "CA_FILE": str(witness.ca), "CURL_BIN": CURL, "TMPDIR": str(root), "PATH": "/usr/bin:/bin",
           **timing}  # fmt: skip
    return LeaseSite(name, root, proxy, env)


def with_failsafe(witness: Witness, sites: Mapping[str, LeaseSite]) -> None:
    """Turn the failsafe on at every site: each site's cluster is the namespace site-<name> of the same API server,
    reached through a proxy of its own; its gate's token is good for that namespace's Leases, and each other site
    gets a token good for them too, behind a proxy per (site, peer) the test can cut."""
    client = witness.client
    for name in sites:
        _create_once(client, "/api/v1/namespaces", {"metadata": {"name": f"site-{name}"}})
        _lease_role(client, f"site-{name}", FAILSAFE_LEASE)
    for name, site in sites.items():
        site.links["local"] = _cluster_dir(witness, site.root / "local", f"site-{name}", "gate")
        for peer in sites.keys() - {name}:
            site.links[peer] = _cluster_dir(witness, site.root / "peers" / peer, f"site-{peer}", f"peer-{name}")
        site.env.update({"FAILSAFE_LEASE": FAILSAFE_LEASE, "LOCAL_API_URL": f"https://127.0.0.1:{site.links['local'].port}",
                         "LOCAL_DIR": str(site.root / "local"), "PEERS_DIR": str(site.root / "peers")})  # fmt: skip


@contextmanager
def two_sites(
    witness: Witness, root: Path, timing: Mapping[str, str], *, failsafe: bool
) -> Iterator[dict[str, LeaseSite]]:
    """hydra and cosmos under ``root`` (the failsafe on at both, or at neither) and a released Lease: the first gate
    takes it at once. Every site's proxies are closed on the way out."""
    witness.release()
    made = {name: new_site(witness, root / name, name, timing) for name in ("hydra", "cosmos")}
    try:
        if failsafe:
            with_failsafe(witness, made)
        yield made
    finally:
        for site in made.values():
            site.close()


def _cluster_dir(witness: Witness, directory: Path, namespace: str, account: str) -> CutProxy:
    """A ServiceAccount mount's three files (and the URL, as a peer's directory holds it) behind a new proxy."""
    proxy = CutProxy(witness.api_port)
    proxy.start()
    directory.mkdir(parents=True)
    (directory / "token").write_text(_lease_token(witness.client, namespace, account))
    (directory / "ca.crt").write_bytes(witness.ca.read_bytes())
    (directory / "namespace").write_text(namespace)
    (directory / "api-url").write_text(f"https://127.0.0.1:{proxy.port}/\n")  # as kubeconfigs often spell it
    return proxy


def _lease_role(client: KubeClient, namespace: str, lease: str) -> None:
    """The product's Role (components/witness_lease.py) for the one Lease of ``namespace`` the sites use: every
    scenario runs with no more rights than a deployed site gets."""
    _create_once(client, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
                 lease_role("lease", namespace, lease))  # fmt: skip


def _lease_token(client: KubeClient, namespace: str, account: str) -> str:
    """A token of a ServiceAccount bound to the namespace's lease Role (both made on first use)."""
    _create_once(client, f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": account}})
    binding = {"metadata": {"name": account}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                         "name": "lease"},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}  # fmt: skip
    _create_once(client, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", binding)
    return client.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                         {"spec": {"expirationSeconds": 3600}})["status"]["token"]  # fmt: skip


def _create_once(client: KubeClient, path: str, body: dict[str, Any]) -> None:
    """Create, unless an earlier site of the same name did (409)."""
    try:
        client.create(path, body)
    except KubeError as error:
        if error.status != 409:
            raise
