"""The witness lease (components/scripts/witness-lease.sh), run for real against a real kube-apiserver (the lab's,
as the third cluster that holds the Lease), each holder behind a proxy of its own that the test cuts.

Every process is a site's pod as far as the witness knows: its own ServiceAccount token (TokenRequest), a Role that
allows the Lease and nothing else, its own identity. The scripts log the monotonic time (/proc/uptime) of each
event; all run on this machine, so one holder's fence and another's take can be compared directly. The safety
property checked in every scenario: a holder fences (stops writing) before any other may take the Lease.
"""

from __future__ import annotations

import calendar
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cut_proxy import CutProxy
from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.kube_lab import KubeClient, KubeError, KubeLab, running_lab
from tests.support.litestream_lab import ROOT, stop_process
from tests.support.script_checks import SHELLS_ONLY, SYNTAX_CHECKERS, assert_passes, shell_for

SCRIPT = ROOT / "components" / "scripts" / "witness-lease.sh"
NAMESPACE, LEASE = "witness", "headscale-serving"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
CURL = shutil.which("curl") or "/usr/bin/curl"
#: Short, and inside the rule: 2.5 + 1 < 4, and 0.5 is at most half of 2.5.
TIMING = {"LEASE_SECONDS": "4", "SKEW_SECONDS": "1", "RENEW_SECONDS": "0.5", "FENCE_AFTER_SECONDS": "2.5",
          "RETRY_SECONDS": "0.2"}  # fmt: skip
EVENT = re.compile(r"^(?P<at>\d+\.\d+) witness-lease: (?P<what>.*)$")

pytestmark = pytest.mark.real_tool("curl", *LAB_TOOLS)


@dataclass
class Witness:
    lab: KubeLab
    client: KubeClient
    api_port: int
    ca: Path


@pytest.fixture(scope="module")
def witness() -> Iterator[Witness]:
    with running_lab(("witness",)) as lab:
        client = lab.client("witness")
        client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        rules = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                  "verbs": ["get", "create", "patch"]}]  # fmt: skip
        client.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles",
                      {"metadata": {"name": "lease"}, "rules": rules})  # fmt: skip
        cluster = lab.cluster("witness")
        yield Witness(lab, client, cluster.ports["api"], cluster.pki / "ca.crt")


@dataclass
class Site:
    """One holder: its identity, token, proxy to the witness, state directory and running command."""

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

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process, timeout=5)
        self.proxy.close()


def new_site(witness: Witness, tmp_path: Path, name: str) -> Site:
    """A ServiceAccount bound to the Lease Role, a token for it, and a proxy to the witness of its own."""
    client = witness.client
    create_once(client, f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": name}})
    binding = {"metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                      "name": "lease"},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]}  # fmt: skip
    create_once(client, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings", binding)
    token = client.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
                          {"spec": {"expirationSeconds": 3600}})["status"]["token"]  # fmt: skip
    root = tmp_path / name
    root.mkdir()
    (root / "token").write_text(token)
    proxy = CutProxy(witness.api_port)
    proxy.start()
    env = {"API_URL": f"https://127.0.0.1:{proxy.port}", "NAMESPACE": NAMESPACE, "LEASE": LEASE,
           "IDENTITY": f"{name}/headscale-0", "STATE_DIR": str(root / "state"), "TOKEN_FILE": str(root / "token"),
           "CA_FILE": str(witness.ca), "CURL_BIN": CURL, "TMPDIR": str(root), "PATH": "/usr/bin:/bin",
           **TIMING}  # fmt: skip
    return Site(name, root, proxy, env)


def create_once(client: KubeClient, path: str, body: dict[str, Any]) -> None:
    """Create, unless an earlier test of the module did (409)."""
    try:
        client.create(path, body)
    except KubeError as error:
        if error.status != 409:
            raise


@pytest.fixture
def sites(witness: Witness, tmp_path: Path) -> Iterator[dict[str, Site]]:
    """hydra and cosmos, with no Lease on the witness yet."""
    try:
        witness.client.delete(f"{LEASES}/{LEASE}")
    except KubeError as error:
        if error.status != 404:  # none yet: the module's first scenario
            raise
    made = {name: new_site(witness, tmp_path, name) for name in ("hydra", "cosmos")}
    yield made
    for site in made.values():
        site.close()


def lease(witness: Witness) -> dict[str, Any]:
    return witness.client.get(f"{LEASES}/{LEASE}")["spec"]


def wait_exit(process: subprocess.Popen[str], timeout: float) -> int | None:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


# --- the script's own checks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("checker", SYNTAX_CHECKERS)
def test_the_script_passes_its_static_checks(checker: list[str]) -> None:
    assert_passes(checker, SCRIPT)


@pytest.mark.parametrize("shell", SHELLS_ONLY)
@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"FENCE_AFTER_SECONDS": "3"}, "FENCE_AFTER_SECONDS + SKEW_SECONDS must be below LEASE_SECONDS"),
        ({"RENEW_SECONDS": "1.5"}, "RENEW_SECONDS must be at most half of FENCE_AFTER_SECONDS"),
        ({"API_URL": "http://127.0.0.1:6443"}, "API_URL must be an https:// URL"),
        ({"IDENTITY": "hydra pod"}, "IDENTITY must be letters"),
        ({"LEASE_SECONDS": "0"}, "LEASE_SECONDS must be a whole number of seconds"),
        ({"RENEW_SECONDS": "-1"}, "RENEW_SECONDS must be a positive number"),
    ],
)
def test_a_bad_invocation_is_refused_naming_the_variable(
    shell: list[str], change: dict[str, str], named: str, tmp_path: Path
) -> None:
    env = {"API_URL": "https://127.0.0.1:6443", "NAMESPACE": NAMESPACE, "LEASE": LEASE, "IDENTITY": "hydra/pod",
           "STATE_DIR": str(tmp_path / "state"), "TOKEN_FILE": str(tmp_path / "token"),
           "CA_FILE": str(tmp_path / "ca"), "CURL_BIN": CURL, **TIMING, **change}  # fmt: skip
    chosen = shell_for(shell, tmp_path / "bin")
    env["PATH"] = chosen.path or "/usr/bin:/bin"
    done = subprocess.run([*chosen.argv, str(SCRIPT), "acquire"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr
    assert not (tmp_path / "state").exists()


# --- against the real witness ----------------------------------------------------------------------------------


def test_the_first_gate_creates_the_lease_and_holds_it(witness: Witness, sites: dict[str, Site]) -> None:
    hydra = sites["hydra"]
    assert hydra.run("acquire") == 0, hydra.log.read_text() if hydra.log else ""
    assert hydra.fencing() == 0
    spec = lease(witness)
    held = (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"])
    assert held == ("hydra/headscale-0", 4, 0)


def test_of_two_gates_at_once_one_holds_and_the_other_waits_while_it_renews(
    witness: Witness, sites: dict[str, Site]
) -> None:
    gates = {name: site.start("acquire") for name, site in sites.items()}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and all(gate.poll() is None for gate in gates.values()):
        time.sleep(0.05)
    (winner,) = [name for name, gate in gates.items() if gate.poll() == 0]
    loser = "cosmos" if winner == "hydra" else "hydra"
    holder = sites[winner].start("hold")
    # Three leases' worth of renewals: the other gate never takes it.
    assert wait_exit(gates[loser], timeout=12) is None, sites[loser].events()
    assert holder.poll() is None, sites[winner].events()
    assert lease(witness)["holderIdentity"] == f"{winner}/headscale-0"


def test_a_holder_cut_from_the_witness_fences_before_the_other_takes_over(
    witness: Witness, sites: dict[str, Site]
) -> None:
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    assert hydra.run("acquire") == 0
    holding = hydra.start("hold")
    gate = cosmos.start("acquire")
    time.sleep(2)  # a few renewals seen by the gate
    hydra.proxy.cut("blackhole")
    assert wait_exit(holding, timeout=15) == 5, hydra.events()
    assert wait_exit(gate, timeout=15) == 0, cosmos.events()
    fenced, taken = hydra.first("fenced"), cosmos.first("acquired")
    assert fenced < taken, (hydra.events(), cosmos.events())
    reason = (hydra.root / "state" / "fenced").read_text()
    assert reason.startswith("no renewal accepted for 2.5 seconds"), reason
    last_renewal = float(reason.rsplit("sent at ", 1)[1].rstrip(")\n"))
    assert taken - last_renewal >= 4  # at least LEASE_SECONDS after the holder's last accepted word
    assert cosmos.fencing() == 1
    assert lease(witness)["holderIdentity"] == "cosmos/headscale-0"


def test_the_old_holder_returning_does_not_serve_and_its_gate_waits(witness: Witness, sites: dict[str, Site]) -> None:
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    assert hydra.run("acquire") == 0
    hydra.proxy.cut("refuse")
    assert cosmos.run("acquire", timeout=20) == 0  # hydra never renewed: taken after LEASE + SKEW
    holding = cosmos.start("hold")
    hydra.proxy.mend()
    taken = witness.client.get(f"{LEASES}/{LEASE}")["metadata"]["resourceVersion"]
    # hydra's renewer on its old state: its deadline passed long ago, so it fences without a word to the witness.
    assert hydra.run("hold", timeout=10) == 5
    assert (hydra.root / "state" / "fenced").read_text().startswith("no renewal accepted")
    gate = hydra.start("acquire")
    assert wait_exit(gate, timeout=8) is None  # cosmos renews: hydra's gate waits
    assert holding.poll() is None
    assert lease(witness)["holderIdentity"] == "cosmos/headscale-0"
    assert witness.client.get(f"{LEASES}/{LEASE}")["metadata"]["resourceVersion"] != taken  # renewed, by cosmos


def test_a_holder_whose_lease_was_taken_by_hand_fences_at_its_next_renewal(
    witness: Witness, sites: dict[str, Site]
) -> None:
    """Not something the gates do (they wait out the deadline): an operator's edit. The renewal, conditional on the
    version the holder last wrote, is refused (409), and the holder fences naming the new holder."""
    hydra = sites["hydra"]
    assert hydra.run("acquire") == 0
    holding = hydra.start("hold")
    time.sleep(1)
    witness.client.merge_patch(f"{LEASES}/{LEASE}", {"spec": {"holderIdentity": "cosmos/by-hand"}})
    assert wait_exit(holding, timeout=5) == 5, hydra.events()
    assert (hydra.root / "state" / "fenced").read_text().strip() == "the lease is cosmos/by-hand's"
    assert lease(witness)["holderIdentity"] == "cosmos/by-hand"


def test_a_released_lease_is_taken_at_once_with_the_next_fencing_counter(
    witness: Witness, sites: dict[str, Site]
) -> None:
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    assert hydra.run("acquire") == 0
    holding = hydra.start("hold")
    gate = cosmos.start("acquire")
    time.sleep(1)
    holding.send_signal(signal.SIGTERM)
    assert wait_exit(holding, timeout=5) == 0, hydra.events()
    assert wait_exit(gate, timeout=3) == 0, cosmos.events()  # long before LEASE + SKEW
    assert cosmos.first("acquired") - hydra.first("released") < 2
    assert cosmos.fencing() == 1


@pytest.mark.parametrize("shell", SHELLS_ONLY)
def test_each_shell_takes_and_renews(witness: Witness, sites: dict[str, Site], shell: list[str]) -> None:
    """busybox with its applets only, as in the curl image; dash; sh."""
    hydra = sites["hydra"]
    assert hydra.start("acquire", shell).wait(timeout=20) == 0, hydra.events()
    holding = hydra.start("hold", shell)
    time.sleep(2)
    assert holding.poll() is None, hydra.events()
    version = witness.client.get(f"{LEASES}/{LEASE}")["metadata"]["resourceVersion"]
    time.sleep(1)
    assert witness.client.get(f"{LEASES}/{LEASE}")["metadata"]["resourceVersion"] != version, hydra.events()
    holding.send_signal(signal.SIGTERM)
    assert wait_exit(holding, timeout=5) == 0
    assert lease(witness).get("holderIdentity", "") == ""


def test_a_flapping_link_never_makes_two_holders(witness: Witness, sites: dict[str, Site]) -> None:
    """hydra's link to the witness goes down and up: outages shorter than its fencing deadline cost nothing; a longer
    one fences it, and only then may cosmos take over."""
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    assert hydra.run("acquire") == 0
    holding = hydra.start("hold")
    gate = cosmos.start("acquire")
    for outage in (0.8, 0.5, 0.8, 0.5):  # with the renewal before and after, well under FENCE_AFTER_SECONDS
        hydra.proxy.cut("blackhole")
        time.sleep(outage)
        hydra.proxy.mend()
        time.sleep(1.0)
    assert holding.poll() is None, hydra.events()
    assert gate.poll() is None, cosmos.events()
    hydra.proxy.cut("refuse")
    assert wait_exit(holding, timeout=10) == 5
    assert wait_exit(gate, timeout=15) == 0
    assert hydra.first("fenced") < cosmos.first("acquired")
    assert cosmos.fencing() == 1


def test_a_site_whose_wall_clock_is_an_hour_ahead_takes_over_no_sooner(
    witness: Witness, sites: dict[str, Site]
) -> None:
    """No decision reads the wall clock (only /proc/uptime): the times written into the Lease may be skewed at will.
    cosmos's `date` says an hour later than hydra's, and it still waits while hydra renews."""
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    skewed = cosmos.root / "skewed-bin"
    skewed.mkdir()
    date = shutil.which("date") or "/bin/date"
    (skewed / "date").write_text(f'#!/bin/sh\nexec {date} -d "@$(( $({date} +%s) + 3600 ))" "$@"\n')
    (skewed / "date").chmod(0o755)
    cosmos.env["PATH"] = f"{skewed}:{cosmos.env['PATH']}"
    assert hydra.run("acquire") == 0
    holding = hydra.start("hold")
    gate = cosmos.start("acquire")
    assert wait_exit(gate, timeout=8) is None, cosmos.events()  # two leases' worth
    holding.send_signal(signal.SIGTERM)
    assert wait_exit(holding, timeout=5) == 0
    assert wait_exit(gate, timeout=5) == 0
    acquired = lease(witness)["acquireTime"]
    written = calendar.timegm(time.strptime(acquired.split(".")[0], "%Y-%m-%dT%H:%M:%S"))
    assert abs(written - (time.time() + 3600)) < 60, acquired  # cosmos wrote its own (skewed) time
