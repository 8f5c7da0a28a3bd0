"""The witness lease (components/scripts/witness-lease.sh), run for real against a real kube-apiserver (the lab's,
as the third cluster that holds the Lease), each site behind a proxy of its own that the test cuts
(tests/support/witness_lab.py). The safety property checked in every scenario: a holder fences (stops writing)
before any other may take the Lease.
"""

from __future__ import annotations

import calendar
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.script_checks import SHELLS_ONLY, SYNTAX_CHECKERS, assert_passes, shell_for
from tests.support.witness_lab import (
    CURL,
    FAILSAFE_LEASE,
    LEASE,
    LEASES,
    NAMESPACE,
    SCRIPT,
    TEST_TIMING,
    LeaseSite,
    Witness,
    site_leases,
    two_sites,
    with_failsafe,
)

pytestmark = pytest.mark.real_tool("curl", *LAB_TOOLS)


@pytest.fixture
def sites(witness: Witness, tmp_path: Path) -> Iterator[dict[str, LeaseSite]]:
    """hydra and cosmos, and a released Lease: the first gate takes it at once, with the fencing counter 1 (a
    missing Lease costs a lease's wait: one test of its own)."""
    with two_sites(witness, tmp_path, TEST_TIMING, failsafe=False) as made:
        yield made


def lease(witness: Witness) -> dict[str, Any]:
    return witness.lease()["spec"]


def hydra_holds_cosmos_waits(
    sites: dict[str, LeaseSite], shell: list[str] | None = None
) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
    """hydra takes the Lease and renews it; cosmos's gate waits for it: hydra's renewer and cosmos's gate."""
    assert sites["hydra"].start("acquire", shell).wait(timeout=30) == 0, sites["hydra"].events()
    return sites["hydra"].start("hold", shell), sites["cosmos"].start("acquire", shell)


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
        ({"STOP": "a b", "STOP_GRACE_SECONDS": "0.3"}, "STOP_GRACE_SECONDS times the number of STOP names must fit"),
        ({"STOP": "sign.sh;rm"}, "STOP must be process or script names"),
        ({"STOP": "headscale witness-lease.sh"}, "STOP must not name this script ('witness-lease.sh')"),
        ({"SERVE_FROM": "/config"}, "SERVE_FROM needs SERVE_DIR"),
        ({"READY_URL": "127.0.0.1:8080/health", "READY_WITHIN_SECONDS": "5"}, "READY_URL must be an http:// or"),
        ({"READY_URL": "http://127.0.0.1:8080/health"}, "READY_WITHIN_SECONDS must be a positive number"),
        ({"READY_WITHIN_SECONDS": "5"}, "READY_WITHIN_SECONDS needs READY_URL"),
        ({"POD_NAME": "Headscale-0", "POD_UID": "0a-1"}, "POD_NAME must be a Kubernetes name"),
        ({"POD_NAME": "headscale-0"}, "POD_UID must be the pod's uid (metadata.uid) with POD_NAME set (got '')"),
        ({"POD_NAME": "headscale-0", "POD_UID": "0a-1"}, "LOCAL_API_URL must be an https:// URL"),
        (
            {"POD_NAME": "headscale-0", "POD_UID": "0a-1", "LOCAL_API_URL": "https://127.0.0.1:1"},
            "LOCAL_DIR must be an absolute path",
        ),
    ],
)
def test_a_bad_invocation_is_refused_naming_the_variable(
    shell: list[str], change: dict[str, str], named: str, tmp_path: Path
) -> None:
    env = {"API_URL": "https://127.0.0.1:6443", "NAMESPACE": NAMESPACE, "LEASE": LEASE, "IDENTITY": "hydra/pod",
           "STATE_DIR": str(tmp_path / "state"), "TOKEN_FILE": str(tmp_path / "token"),
           "CA_FILE": str(tmp_path / "ca"), "CURL_BIN": CURL, **TEST_TIMING, **change}  # fmt: skip
    chosen = shell_for(shell, tmp_path / "bin")
    env["PATH"] = chosen.path or "/usr/bin:/bin"
    done = subprocess.run([*chosen.argv, str(SCRIPT), "acquire"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("shell", SHELLS_ONLY)
def test_a_timing_on_the_edge_of_every_rule_is_accepted(shell: list[str], tmp_path: Path) -> None:
    """Renewals exactly half the fencing deadline, and three stops that use the whole margin (20 - 2 - 12): past the
    checks, a renewer with no lease acquired fences (5), not a refusal (2)."""
    env = {"API_URL": "https://127.0.0.1:6443", "NAMESPACE": NAMESPACE, "LEASE": LEASE, "IDENTITY": "hydra/pod",
           "STATE_DIR": str(tmp_path / "state"), "TOKEN_FILE": str(tmp_path / "token"),
           "CA_FILE": str(tmp_path / "ca"), "CURL_BIN": CURL, "LEASE_SECONDS": "20", "SKEW_SECONDS": "2",
           "RENEW_SECONDS": "6", "FENCE_AFTER_SECONDS": "12", "STOP": "a b c", "STOP_GRACE_SECONDS": "2"}  # fmt: skip
    chosen = shell_for(shell, tmp_path / "bin")
    env["PATH"] = chosen.path or "/usr/bin:/bin"
    done = subprocess.run([*chosen.argv, str(SCRIPT), "hold"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 5, done.stderr
    assert "no lease acquired" in done.stderr


# --- against the real witness ----------------------------------------------------------------------------------


def test_a_site_token_reaches_the_one_lease_and_creates_no_other_object(
    sites: dict[str, LeaseSite], witness: Witness
) -> None:
    """The witness Role is the product's (components/witness_lease.py lease_role): a stolen site token reads and
    writes the Lease of tailnet.failover and nothing else of the witness (it may create Leases: RBAC cannot name
    an object being created)."""
    token = (sites["hydra"].root / "token").read_text()

    def status(method: str, path: str, body: dict[str, Any] | None = None) -> int:
        headers = {"Authorization": f"Bearer {token}"}
        url = f"https://127.0.0.1:{witness.api_port}{path}"
        return requests.request(method, url, json=body, headers=headers, verify=str(witness.ca), timeout=15).status_code

    assert status("GET", f"{LEASES}/{LEASE}") == 200  # released by the fixture, so present
    assert status("GET", f"{LEASES}/another") == 403
    assert status("GET", LEASES) == 403  # no list: other Leases' holders stay unread
    assert status("PATCH", f"{LEASES}/another", {"spec": {}}) == 403
    assert status("DELETE", f"{LEASES}/{LEASE}") == 403
    assert status("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets") == 403
    assert status("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", {"metadata": {"name": "x"}}) == 403


def test_the_first_gate_creates_the_lease_a_lease_later_and_holds_it(
    witness: Witness, sites: dict[str, LeaseSite]
) -> None:
    witness.forget()
    hydra = sites["hydra"]
    assert hydra.run("acquire") == 0, hydra.log.read_text() if hydra.log else ""
    assert hydra.first("acquired") - hydra.first("waiting: held by nobody") >= 5  # LEASE_SECONDS + SKEW_SECONDS
    assert hydra.fencing() == 0
    spec = lease(witness)
    held = (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"])
    assert held == ("hydra/headscale-0", 4, 0)


def test_of_two_gates_at_once_one_holds_and_the_other_waits_while_it_renews(
    witness: Witness, sites: dict[str, LeaseSite]
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
    witness: Witness, sites: dict[str, LeaseSite]
) -> None:
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    holding, gate = hydra_holds_cosmos_waits(sites)
    time.sleep(2)  # a few renewals seen by the gate
    hydra.proxy.cut("blackhole")
    assert wait_exit(holding, timeout=15) == 5, hydra.events()
    assert wait_exit(gate, timeout=15) == 0, cosmos.events()
    fenced, taken = hydra.first("fenced"), cosmos.first("acquired")
    assert fenced < taken, (hydra.events(), cosmos.events())
    reason = hydra.fenced()
    assert reason.startswith("no renewal accepted for 2.5 seconds"), reason
    last_renewal = float(reason.rsplit("sent at ", 1)[1].rstrip(")"))
    assert taken - last_renewal >= 4  # at least LEASE_SECONDS after the holder's last accepted word
    assert cosmos.fencing() == 2
    assert lease(witness)["holderIdentity"] == "cosmos/headscale-0"


def test_the_old_holder_returning_does_not_serve_and_its_gate_waits(
    witness: Witness, sites: dict[str, LeaseSite]
) -> None:
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    assert hydra.run("acquire") == 0
    hydra.proxy.cut("refuse")
    assert cosmos.run("acquire", timeout=20) == 0  # hydra never renewed: taken after LEASE + SKEW
    holding = cosmos.start("hold")
    hydra.proxy.mend()
    taken = witness.lease()["metadata"]["resourceVersion"]
    # hydra's renewer on its old state: its deadline passed long ago, so it fences without a word to the witness.
    assert hydra.run("hold", timeout=10) == 5
    assert hydra.fenced().startswith("no renewal accepted")
    gate = hydra.start("acquire")
    assert wait_exit(gate, timeout=8) is None  # cosmos renews: hydra's gate waits
    assert holding.poll() is None
    assert lease(witness)["holderIdentity"] == "cosmos/headscale-0"
    assert witness.lease()["metadata"]["resourceVersion"] != taken  # renewed, by cosmos


def test_a_holder_whose_lease_was_taken_by_hand_fences_at_its_next_renewal(
    witness: Witness, sites: dict[str, LeaseSite]
) -> None:
    """Not something the gates do (they wait out the deadline): an operator's edit. The renewal, conditional on the
    version the holder last wrote, is refused (409), and the holder fences naming the new holder."""
    hydra = sites["hydra"]
    assert hydra.run("acquire") == 0
    holding = hydra.start("hold")
    time.sleep(1)
    witness.client.merge_patch(f"{LEASES}/{LEASE}", {"spec": {"holderIdentity": "cosmos/by-hand"}})
    assert wait_exit(holding, timeout=5) == 5, hydra.events()
    assert hydra.fenced() == "the lease is cosmos/by-hand's"
    assert lease(witness)["holderIdentity"] == "cosmos/by-hand"


def test_a_released_lease_is_taken_at_once_with_the_next_fencing_counter(
    witness: Witness, sites: dict[str, LeaseSite]
) -> None:
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    holding, gate = hydra_holds_cosmos_waits(sites)
    time.sleep(1)
    holding.send_signal(signal.SIGTERM)
    assert wait_exit(holding, timeout=5) == 0, hydra.events()
    assert wait_exit(gate, timeout=3) == 0, cosmos.events()  # long before LEASE + SKEW
    assert cosmos.first("acquired") - hydra.first("released") < 2
    assert cosmos.fencing() == 2


@pytest.mark.parametrize("shell", SHELLS_ONLY)
def test_each_shell_takes_and_renews(witness: Witness, sites: dict[str, LeaseSite], shell: list[str]) -> None:
    """busybox with its applets only, as in the curl image; dash; sh."""
    hydra = sites["hydra"]
    assert hydra.start("acquire", shell).wait(timeout=20) == 0, hydra.events()
    holding = hydra.start("hold", shell)
    time.sleep(2)
    assert holding.poll() is None, hydra.events()
    version = witness.lease()["metadata"]["resourceVersion"]
    time.sleep(1)
    assert witness.lease()["metadata"]["resourceVersion"] != version, hydra.events()
    holding.send_signal(signal.SIGTERM)
    assert wait_exit(holding, timeout=5) == 0
    assert lease(witness).get("holderIdentity", "") == ""


def test_a_flapping_link_never_makes_two_holders(witness: Witness, sites: dict[str, LeaseSite]) -> None:
    """hydra's link to the witness goes down and up: outages shorter than its fencing deadline cost nothing; a longer
    one fences it, and only then may cosmos take over."""
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    holding, gate = hydra_holds_cosmos_waits(sites)
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
    assert cosmos.fencing() == 2


def test_a_site_whose_wall_clock_is_an_hour_ahead_takes_over_no_sooner(
    witness: Witness, sites: dict[str, LeaseSite]
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


def test_a_lease_deleted_by_hand_fences_its_holder_and_is_created_again_only_a_lease_later(
    witness: Witness, sites: dict[str, LeaseSite]
) -> None:
    """A missing Lease is waited out like an unrenewed one: the holder may still be serving behind a cut link, and
    only its deadline stops it. A holder whose renewal finds no Lease fences at once."""
    hydra, cosmos = sites["hydra"], sites["cosmos"]
    holding, gate = hydra_holds_cosmos_waits(sites)
    time.sleep(1)
    witness.forget()
    assert wait_exit(holding, timeout=5) == 5, hydra.events()
    assert hydra.fenced() == "the lease is gone from the witness"
    assert wait_exit(gate, timeout=15) == 0, cosmos.events()
    missing_seen = cosmos.first("waiting: held by nobody")
    assert cosmos.first("acquired") - missing_seen >= 5  # LEASE_SECONDS + SKEW_SECONDS
    assert hydra.first("fenced") < cosmos.first("acquired")
    assert cosmos.fencing() == 0  # a new Lease counts from 0 again: the price of deleting it (docs say so)


# --- the failsafe: a holder that loses the witness only keeps serving -------------------------------------------


@pytest.fixture
def failsafe_sites(witness: Witness, sites: dict[str, LeaseSite]) -> dict[str, LeaseSite]:
    """hydra and cosmos, each with its own cluster and the other's failsafe credentials."""
    with_failsafe(witness, sites)
    return sites


def test_with_the_witness_down_the_holder_keeps_serving_on_the_word_of_every_site(
    witness: Witness, failsafe_sites: dict[str, LeaseSite]
) -> None:
    hydra, cosmos = failsafe_sites["hydra"], failsafe_sites["cosmos"]
    holding, gate = hydra_holds_cosmos_waits(failsafe_sites)
    time.sleep(1)
    for site in (hydra, cosmos):
        site.proxy.cut("blackhole")
    assert wait_exit(holding, timeout=12) is None, hydra.events()  # three leases, and then some
    assert gate.poll() is None, cosmos.events()
    assert witness.failsafe("cosmos")["spec"]["holderIdentity"] == "hydra/headscale-0"
    for site in (hydra, cosmos):
        site.proxy.mend()
    time.sleep(2)  # the renewal cut in flight times out; the next is accepted
    claimed = witness.failsafe("cosmos")["metadata"]["resourceVersion"]
    time.sleep(2)
    assert holding.poll() is None, hydra.events()
    assert witness.failsafe("cosmos")["metadata"]["resourceVersion"] == claimed  # back to the witness alone
    events = [what for _, what in hydra.events()]
    assert events.index("failsafe: serving on the word of every site") < events.index("failsafe: over")
    assert lease(witness)["holderIdentity"] == "hydra/headscale-0"
    assert gate.poll() is None


def test_a_holder_cut_from_the_witness_alone_keeps_serving_and_the_other_never_takes_over(
    witness: Witness, failsafe_sites: dict[str, LeaseSite]
) -> None:
    """cosmos sees the Lease unrenewed for three leases, and still may not take it: hydra renews cosmos's failsafe."""
    hydra, cosmos = failsafe_sites["hydra"], failsafe_sites["cosmos"]
    holding, gate = hydra_holds_cosmos_waits(failsafe_sites)
    time.sleep(1)
    hydra.proxy.cut("blackhole")
    assert wait_exit(gate, timeout=15) is None, cosmos.events()
    assert holding.poll() is None, hydra.events()
    assert lease(witness)["holderIdentity"] == "hydra/headscale-0"
    assert any(what.startswith("waiting: hydra/headscale-0 claims the failsafe") for _, what in cosmos.events())


@pytest.mark.parametrize("shell", SHELLS_ONLY)
def test_a_holder_that_loses_the_witness_and_then_a_site_fences_before_that_site_takes_over(
    witness: Witness, failsafe_sites: dict[str, LeaseSite], shell: list[str]
) -> None:
    """Under each shell: busybox with its applets only, as in the curl image; dash; sh."""
    hydra, cosmos = failsafe_sites["hydra"], failsafe_sites["cosmos"]
    holding, gate = hydra_holds_cosmos_waits(failsafe_sites, shell)
    time.sleep(1)
    hydra.proxy.cut("blackhole")
    time.sleep(6)  # on the failsafe, past what the Lease alone would allow
    assert holding.poll() is None, hydra.events()
    hydra.links["cosmos"].cut("blackhole")
    assert wait_exit(holding, timeout=10) == 5, hydra.events()
    assert wait_exit(gate, timeout=15) == 0, cosmos.events()
    fenced, taken = hydra.first("fenced"), cosmos.first("acquired")
    assert fenced < taken, (hydra.events(), cosmos.events())
    last_word = float(hydra.fenced().rsplit("sent at ", 1)[1].rstrip(")"))
    assert taken - last_word >= 4  # LEASE_SECONDS after the start of the last round cosmos accepted
    assert witness.failsafe("cosmos")["spec"]["holderIdentity"] == "cosmos/headscale-0"
    assert cosmos.fencing() == 2


def test_a_site_whose_gate_claims_its_failsafe_does_not_vouch_for_the_holder(
    witness: Witness, failsafe_sites: dict[str, LeaseSite]
) -> None:
    """cosmos's own claim means a gate of cosmos is taking over: hydra never writes over it, and fences."""
    hydra = failsafe_sites["hydra"]
    holding, _ = hydra_holds_cosmos_waits(failsafe_sites)
    time.sleep(1)
    witness.client.create(site_leases("cosmos"), {"metadata": {"name": FAILSAFE_LEASE},
                                                  "spec": {"holderIdentity": "cosmos/headscale-9"}})  # fmt: skip
    hydra.proxy.cut("blackhole")
    assert wait_exit(holding, timeout=8) == 5, hydra.events()
    assert any(what == "failsafe: cosmos is taking over (cosmos/headscale-9 claims its failsafe)"
               for _, what in hydra.events())  # fmt: skip
    assert witness.failsafe("cosmos")["spec"]["holderIdentity"] == "cosmos/headscale-9"


@pytest.mark.parametrize(
    ("command", "change", "named"),
    [
        ("acquire", {"IDENTITY": "hydra"}, "IDENTITY must be SITE/POD with FAILSAFE_LEASE set"),
        ("acquire", {"LOCAL_API_URL": "http://127.0.0.1:1"}, "LOCAL_API_URL must be an https:// URL"),
        ("hold", {"PEERS_DIR": "peers"}, "PEERS_DIR must be an absolute path"),
        ("hold", {"PEERS_DIR": "/nonexistent"}, "PEERS_DIR must hold a directory per other site"),
    ],
)
def test_a_bad_failsafe_invocation_is_refused_naming_the_variable(
    failsafe_sites: dict[str, LeaseSite], command: str, change: dict[str, str], named: str
) -> None:
    hydra = failsafe_sites["hydra"]
    hydra.env.update(change)
    assert hydra.run(command) == 2
    assert hydra.log is not None
    assert named in hydra.log.read_text()


def test_a_holder_listed_among_its_own_peers_is_refused(failsafe_sites: dict[str, LeaseSite]) -> None:
    hydra = failsafe_sites["hydra"]
    (hydra.root / "peers" / "hydra").mkdir()
    assert hydra.run("hold") == 2
    assert hydra.log is not None
    assert "PEERS_DIR must not hold this site's own directory" in hydra.log.read_text()
