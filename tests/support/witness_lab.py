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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cut_proxy import CutProxy
from tests.support.kube_lab import KubeClient, KubeError, KubeLab, running_lab
from tests.support.litestream_lab import ROOT, stop_process
from tests.support.script_checks import shell_for

SCRIPT = ROOT / "components" / "scripts" / "witness-lease.sh"
NAMESPACE, LEASE = "witness", "headscale-serving"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
CURL = shutil.which("curl") or "/usr/bin/curl"
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
        """No Lease: the next gate creates it."""
        try:
            self.client.delete(f"{LEASES}/{LEASE}")
        except KubeError as error:
            if error.status != 404:
                raise


@contextmanager
def running_witness() -> Iterator[Witness]:
    """A one-cluster lab, its namespace for the Lease and the Role every site is bound to."""
    with running_lab(("witness",)) as lab:
        client = lab.client("witness")
        client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        rules = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]}]
        client.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles",
                      {"metadata": {"name": "lease"}, "rules": rules})  # fmt: skip
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
        self.proxy.close()


def new_site(witness: Witness, root: Path, name: str, timing: Mapping[str, str]) -> LeaseSite:
    """A ServiceAccount bound to the Lease Role, a token for it, and a proxy to the witness of its own."""
    client = witness.client
    _create_once(client, f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": name}})
    binding = {"metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                      "name": "lease"},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]}  # fmt: skip
    _create_once(client, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings", binding)
    token = client.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
                          {"spec": {"expirationSeconds": 3600}})["status"]["token"]  # fmt: skip
    root.mkdir(parents=True)
    (root / "token").write_text(token)
    proxy = CutProxy(witness.api_port)
    proxy.start()
    env = {"API_URL": f"https://127.0.0.1:{proxy.port}", "NAMESPACE": NAMESPACE, "LEASE": LEASE,
           "IDENTITY": f"{name}/headscale-0", "STATE_DIR": str(root / "state"), "TOKEN_FILE": str(root / "token"),
           "CA_FILE": str(witness.ca), "CURL_BIN": CURL, "TMPDIR": str(root), "PATH": "/usr/bin:/bin",
           **timing}  # fmt: skip
    return LeaseSite(name, root, proxy, env)


def _create_once(client: KubeClient, path: str, body: dict[str, Any]) -> None:
    """Create, unless an earlier site of the same name did (409)."""
    try:
        client.create(path, body)
    except KubeError as error:
        if error.status != 409:
            raise
