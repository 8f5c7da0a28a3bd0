"""Entering and leaving automatic failover on the engine model (tests/models/engine): the configured active goes
first in, last out, and a run in the wrong order is refused before any step, naming the site to run first
(program/lease_gates.py). In between, no state has an ungated Headscale beside a gated one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from headscale_ha.program.lease_gates import LeaseOrderError
from tests.models.engine.lifecycle import DeployedLab, Lab
from tests.models.engine.state import RunResult
from tests.support.witness_samples import kubeconfig

WITNESS = kubeconfig(server="https://witness.example.com:6443/")
HYDRA_STACK = "organization/headscale-ha/hydra"
COSMOS_STACK = "organization/headscale-ha/cosmos"


def lease(stack: str, *, automatic: bool) -> dict[str, Any]:
    """The stack's witness and peer kubeconfigs, and automatic failover on or off."""
    other = "cosmos" if stack == "hydra" else "hydra"
    return {
        "headscale-ha:tailnet.failover.automatic": automatic,
        "headscale-ha:witnessKubeconfig": WITNESS,
        "headscale-ha:peerKubeconfigs": {other: kubeconfig(server=f"https://{other}.example.com:6443/")},
    }


def _manual_with_witness_kubeconfigs(lab: Lab) -> None:
    turn(lab, automatic=False)
    for stack in ("hydra", "cosmos"):
        applied(lab, stack)


@pytest.fixture(scope="module")
def prepared() -> Iterator[DeployedLab]:
    deployed = DeployedLab(then=_manual_with_witness_kubeconfigs)
    yield deployed
    deployed.close()


@pytest.fixture
def lab(prepared: DeployedLab) -> Lab:
    """Both sites deployed in manual mode, then each given its witness kubeconfig (the accounts prepared), as
    docs/witness-lease.md has it: the active's exit check references the other sites' stacks, which exist by then."""
    return prepared.fresh()


def headscale(lab: Lab, site: str) -> tuple[int, bool]:
    """(replicas, gated) of the site's Headscale Deployment as its cluster holds it."""
    deployment = getattr(lab, site).find("Deployment", "headscale", "headscale")
    init = [c["name"] for c in deployment["spec"]["template"]["spec"].get("initContainers", [])]
    return deployment["spec"]["replicas"], "lease-gate" in init


def refused(result: RunResult, *named: str) -> None:
    assert result.error is not None, result.text()
    assert result.error.startswith(f"{LeaseOrderError.__name__}: "), result.error
    for text in named:
        assert text in result.error, result.error
    assert result.changes() == [], result.text()


def applied(lab: Lab, stack: str) -> RunResult:
    """`pulumi up` of ``stack``, which must succeed."""
    result = lab.run("up", stack)
    assert result.error is None, result.text()
    return result


def turn(lab: Lab, *, automatic: bool) -> None:
    lab.overrides = {stack: lease(stack, automatic=automatic) for stack in ("hydra", "cosmos")}


def test_the_standby_enters_only_after_the_active(lab: Lab) -> None:
    turn(lab, automatic=True)
    first = lab.run("up", "cosmos")
    refused(first, f"the active stack {HYDRA_STACK} does not yet", "`pulumi up` the active site first")
    assert headscale(lab, "cosmos") == (0, False)
    assert applied(lab, "hydra").outputs["servingLease"] is True
    assert headscale(lab, "hydra") == (1, True)
    applied(lab, "cosmos")
    assert headscale(lab, "cosmos") == (1, True)


def test_the_active_leaves_only_after_every_other_site(lab: Lab) -> None:
    turn(lab, automatic=True)
    for stack in ("hydra", "cosmos"):
        applied(lab, stack)
    turn(lab, automatic=False)
    first = lab.run("up", "hydra")
    refused(first, f"but {COSMOS_STACK} still run Headscale behind the witness lease", "`pulumi up` them first")
    assert headscale(lab, "hydra") == (1, True)
    assert "servingLease" not in applied(lab, "cosmos").outputs
    assert headscale(lab, "cosmos") == (0, False)
    applied(lab, "hydra")
    assert headscale(lab, "hydra") == (1, False)
