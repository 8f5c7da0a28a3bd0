"""Automatic failover's settings (components/settings/failover.py): the timing is refused exactly when the lease
script itself would refuse it, each rule names its key, the value and what is expected, and the feature cannot be
turned on before it is deployable."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from headscale_ha.components.settings import FENCED_WRITERS, PROJECT, FailoverSettings
from tests.support.config_samples import parse, problems, section
from tests.support.witness_lab import CURL, LEASE, NAMESPACE, SCRIPT

#: Past its timing and STOP checks the script checks STATE_DIR: a relative one is the first refusal of a timing it
#: accepted, so nothing is ever run (no fence stops a process of this machine named like a writer).
PAST_THE_TIMING = "STATE_DIR must be an absolute path"


def script_verdict(environment: dict[str, str], tmp_path: Path) -> str:
    """The lease script's first refusal of ``environment`` (dash; the rules are arithmetic, the same in every
    shell the script's own tests run)."""
    env = {"API_URL": "https://127.0.0.1:6443", "NAMESPACE": NAMESPACE, "LEASE": LEASE, "IDENTITY": "hydra/pod",
           "STATE_DIR": "state", "TOKEN_FILE": str(tmp_path / "token"), "CA_FILE": str(tmp_path / "ca"),
           "CURL_BIN": CURL, "RETRY_SECONDS": "1", "PATH": "/usr/bin:/bin", **environment}  # fmt: skip
    done = subprocess.run(["dash", str(SCRIPT), "hold"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    return done.stderr


def tailnet_with(**failover: object) -> dict[str, object]:
    tailnet = section("hydra", "tailnet")
    tailnet["failover"] = failover
    return tailnet


@pytest.mark.real_tool("dash")
def test_the_default_timing_is_what_the_script_accepts_with_every_writer_stopped(tmp_path: Path) -> None:
    environment = FailoverSettings().script_environment()
    assert environment == {"LEASE_SECONDS": "20", "SKEW_SECONDS": "2", "RENEW_SECONDS": "3",
                           "FENCE_AFTER_SECONDS": "12", "STOP": "headscale litestream sign.sh",
                           "STOP_GRACE_SECONDS": "2"}  # fmt: skip
    assert PAST_THE_TIMING in script_verdict(environment, tmp_path)


#: Values around each rule's edge: fence + skew against lease, twice renew against fence, the stops against the
#: margin.
GRID = list(
    itertools.product(
        [10, 20],  # leaseSeconds
        [1, 2, 3],  # skewSeconds
        [2, 3, 4, 6],  # renewSeconds
        [6, 7, 12, 16, 17, 18],  # fenceAfterSeconds
        [1, 2],  # stopGraceSeconds
    )
)


#: Each rule: the key the program reports it at, and the script's refusal (the script checks them in this order).
RULES = (
    ("fenceAfterSeconds", "FENCE_AFTER_SECONDS + SKEW_SECONDS must be below LEASE_SECONDS"),
    ("renewSeconds", "RENEW_SECONDS must be at most half of FENCE_AFTER_SECONDS"),
    ("stopGraceSeconds", "STOP_GRACE_SECONDS times the number of STOP names must fit"),
)


def program_first_rule(values: dict[str, int]) -> str | None:
    """The first rule, in the script's order, the program reports ``values`` breaking (None: accepted)."""
    try:
        FailoverSettings(**values)  # type: ignore[arg-type]
    except ValidationError as error:
        broken = [key for key, _ in RULES if f"{key}:" in str(error)]
        return broken[0] if broken else f"another problem: {error}"
    return None


def script_first_rule(values: dict[str, int], tmp_path: Path) -> str | None:
    environment = {"LEASE_SECONDS": str(values["leaseSeconds"]), "SKEW_SECONDS": str(values["skewSeconds"]),
                   "RENEW_SECONDS": str(values["renewSeconds"]),
                   "FENCE_AFTER_SECONDS": str(values["fenceAfterSeconds"]), "STOP": " ".join(FENCED_WRITERS),
                   "STOP_GRACE_SECONDS": str(values["stopGraceSeconds"])}  # fmt: skip
    verdict = script_verdict(environment, tmp_path)
    if PAST_THE_TIMING in verdict:
        return None
    broken = [key for key, refusal in RULES if refusal in verdict]
    assert len(broken) == 1, verdict
    return broken[0]


@pytest.mark.real_tool("dash")
def test_the_program_refuses_a_timing_exactly_when_and_as_the_script_does(tmp_path: Path) -> None:
    """Same verdict, and the same first broken rule, for every timing of the grid: the program never deploys a
    renewer that refuses to start, nor refuses a timing the script would run."""
    disagreements = []
    for lease, skew, renew, fence, grace in GRID:
        values = {"leaseSeconds": lease, "skewSeconds": skew, "renewSeconds": renew, "fenceAfterSeconds": fence,
                  "stopGraceSeconds": grace}  # fmt: skip
        program, script = program_first_rule(values), script_first_rule(values, tmp_path)
        if program != script:
            disagreements.append((values, program, script))
    assert disagreements == []


def test_the_grid_holds_both_verdicts_for_every_rule() -> None:
    """Without timings on both sides of each rule, the agreement above would prove less than it says."""
    found: dict[str, set[bool]] = {"fence": set(), "renew": set(), "stops": set()}
    for lease, skew, renew, fence, grace in GRID:
        found["fence"].add(fence + skew < lease)
        found["renew"].add(2 * renew <= fence)
        if fence + skew < lease:
            found["stops"].add(len(FENCED_WRITERS) * grace <= lease - skew - fence)
    assert found == {"fence": {True, False}, "renew": {True, False}, "stops": {True, False}}


@pytest.mark.parametrize(
    ("failover", "expected"),
    [
        (
            {"fenceAfterSeconds": 18},
            "tailnet.failover.fenceAfterSeconds: plus skewSeconds (2) must be below leaseSeconds (20): a holder must "
            "stop before another site may take over, got 18",
        ),
        (
            {"renewSeconds": 7},
            "tailnet.failover.renewSeconds: must be at most half of fenceAfterSeconds (12): a holder gets two tries "
            "before it fences, got 7",
        ),
        (
            {"stopGraceSeconds": 3},
            "tailnet.failover.stopGraceSeconds: times the 3 fenced writers (headscale, litestream, sign.sh) must fit "
            "in leaseSeconds - skewSeconds - fenceAfterSeconds (6 s): the writers stop before another site may take "
            "over, got 3",
        ),
        ({"leaseSeconds": 4}, "tailnet.failover.leaseSeconds: input should be greater than or equal to 5, got 4"),
        (
            {"witnessNamespace": "Witness"},
            "tailnet.failover.witnessNamespace: must be a DNS label: lowercase letters, digits and '-', 1 to 63 "
            "characters, got 'Witness'",
        ),
        ({"automatc": True}, "tailnet.failover.automatc: unknown key; did you mean 'automatic'?"),
    ],
)
def test_a_bad_failover_value_names_its_key_the_value_and_what_is_expected(
    failover: dict[str, object], expected: str
) -> None:
    found = problems(tailnet=tailnet_with(**failover))
    assert len(found) == 1, found
    assert found[0].startswith(f"{PROJECT}:{expected}")


def test_every_rule_a_timing_breaks_is_reported_at_once() -> None:
    found = problems(tailnet=tailnet_with(fenceAfterSeconds=18, renewSeconds=10))
    assert [problem.split(":")[1] for problem in found] == [
        "tailnet.failover.fenceAfterSeconds",
        "tailnet.failover.renewSeconds",
    ]


def test_without_a_failover_section_automatic_failover_is_off_at_the_documented_timing() -> None:
    failover = parse("hydra").tailnet.failover
    assert failover == FailoverSettings(
        automatic=False, witness_namespace="headscale-ha", lease="headscale", lease_seconds=20, skew_seconds=2,
        renew_seconds=3, fence_after_seconds=12, stop_grace_seconds=2, failsafe=True,
    )  # fmt: skip
    assert failover.margin_seconds == 6 == failover.stops_seconds
