"""The standby check is a gate: on a mismatch `pulumi up` (even with --skip-preview) and `pulumi preview` of the
standby fail before any step, so nothing of the standby changes until the mismatch is corrected.

On the engine model (tests/models/engine): its `up` runs the program without a preview, as `--skip-preview` does,
so a check that only failed the run at its end would show here as applied steps.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from headscale_ha.program.standby import StandbyMismatch
from tests.models.engine.lifecycle import IDENTITY, DeployedLab, Lab
from tests.models.engine.state import RunResult
from tests.models.engine.world import StackState

#: Both sites start on this release; the project's Pulumi.yaml pins a newer one (0.29.2).
PINNED = {
    "headscale-ha:headscale.version": "0.29.1",
    "headscale-ha:headscale.image": "ghcr.io/juanfont/headscale:0.29.1",
}
#: A routine change that would be applied if the check did not stop the run first.
ROUTINE = {"headscale-ha:headscale.logLevel": "debug"}
CONFIG = "cosmos-headscale-config"
#: What the routine change updates once it may: the config, and the Deployment it rolls (its checksum).
#: The dynamic providers' default provider: the engine gives it the whole stack config, so a config edit updates it.
CONFIG_PROVIDER = "default"
ROUTINE_STEPS = [("update", CONFIG), ("update", CONFIG_PROVIDER), ("update", "cosmos-headscale-deployment")]
#: cosmos without its pin runs Pulumi.yaml's release, the active the pinned one.
UPGRADED_FIRST = "headscaleVersion: this standby runs 0.29.2, the active runs 0.29.1"
#: cosmos moved to PostgreSQL while its active still runs SQLite: would create a whole database cluster.
POSTGRES = {
    "headscale-ha:database.stage": "postgres",
    "headscale-ha:database.postgres.objectStore": {
        "destinationPath": "s3://headscale-wal/cosmos",
        "endpointUrl": "https://s3.internal.example.com",
    },
    "headscale-ha:objectStoreAccessKeyId": "AKIA-offline",
    "headscale-ha:objectStoreSecretAccessKey": "offline-secret",
}


@pytest.fixture(scope="module")
def pinned() -> Iterator[DeployedLab]:
    deployed = DeployedLab({"hydra": dict(PINNED), "cosmos": dict(PINNED)})
    yield deployed
    deployed.close()


@pytest.fixture
def lab(pinned: DeployedLab) -> Lab:
    """Both sites deployed on 0.29.1; then cosmos alone loses its pin, so it would upgrade before the active."""
    lab = pinned.fresh()
    del lab.overrides["cosmos"]
    return lab


def _snapshot(lab: Lab) -> tuple[dict[Any, Any], StackState]:
    """What a failed run must leave as it was: every object body of the cosmos cluster, and the cosmos stack state."""
    bodies = {key: copy.deepcopy(stored.body) for key, stored in lab.cosmos.objects.items()}
    (state,) = [s for s in lab.world.stacks.values() if s.name == "cosmos"]
    return bodies, copy.deepcopy(state)


def _debug(lab: Lab) -> bool:
    """Whether cosmos's Headscale config holds the routine change (its log level)."""
    config = lab.cosmos.find("ConfigMap", "headscale-config", "headscale")
    return yaml.safe_load(config["data"]["config.yaml"])["log"]["level"] == "debug"


def _refused(result: RunResult, *mismatches: str) -> None:
    """The run failed with the check's message, each mismatch named once, and before any step: the only
    registration the engine saw is the site's component (same), not even the Kubernetes provider."""
    assert result.error is not None, result.text()
    assert result.error.startswith(f"{StandbyMismatch.__name__}: "), result.error
    count = f"{len(mismatches)} mismatch{'es' if len(mismatches) > 1 else ''}"
    assert f"cannot take over from the active stack organization/headscale-ha/hydra ({count})" in result.error
    for mismatch in mismatches:
        assert result.error.count(mismatch) == 1, result.error
    assert result.changes() == [], result.text()
    assert [(step.op, step.type) for step in result.steps] == [("same", "headscale-ha:site:TailnetSite")]


@pytest.mark.parametrize("kind", ["up", "preview"])
def test_a_mismatch_with_a_routine_change_changes_nothing(lab: Lab, kind: str) -> None:
    """`up` as with --skip-preview, and `preview`: refused before any step; cluster and state untouched."""
    before = _snapshot(lab)
    result = lab.run(kind, "cosmos", ROUTINE)
    _refused(result, UPGRADED_FIRST)
    assert _snapshot(lab) == before
    assert not _debug(lab)


def test_every_mismatch_is_named_once_and_none_is_half_applied(lab: Lab) -> None:
    """Two mismatches at once (the release, and PostgreSQL under a SQLite active): one message names both; the
    database cluster the postgres stage would create is not created."""
    before = _snapshot(lab)
    result = lab.run("up", "cosmos", {**POSTGRES, **ROUTINE})
    _refused(result, UPGRADED_FIRST, "databaseStage: this standby is in stage postgres, the active in stage sqlite")
    assert _snapshot(lab) == before
    assert lab.cosmos.find("Cluster", "headscale-db") is None


def test_once_the_mismatch_is_corrected_the_routine_change_is_applied(lab: Lab) -> None:
    assert lab.run("up", "cosmos", ROUTINE).error is not None
    corrected = lab.run("up", "cosmos", {**PINNED, **ROUTINE})
    assert corrected.error is None, corrected.text()
    # Nothing of the refused run is left to catch up. Compared as a set: the steps come in the order the program
    # registers the resources, which is not fixed between independent ones (the dynamic providers' default
    # provider registers when its first resource's inputs resolve, before or after the ConfigMap).
    assert sorted(corrected.ops()) == sorted(ROUTINE_STEPS), corrected.text()
    assert _debug(lab)


def test_an_active_that_moved_on_stops_the_standby_until_it_follows(lab: Lab) -> None:
    """The other direction: the active upgraded first (as the README says); the standby's routine change waits."""
    del lab.overrides["hydra"]
    upgraded = lab.run("up", "hydra")
    assert upgraded.error is None, upgraded.text()
    before = _snapshot(lab)
    stale = lab.run("up", "cosmos", {**PINNED, **ROUTINE})
    _refused(stale, "headscaleVersion: this standby runs 0.29.1, the active runs 0.29.2")
    assert _snapshot(lab) == before
    follows = lab.run("up", "cosmos", ROUTINE)
    assert follows.error is None, follows.text()
    assert ("update", CONFIG) in follows.ops(), follows.text()
    assert _debug(lab)
    assert follows.outputs["follows"]["headscaleVersion"] == "0.29.2"


def _imported(lab: Lab, noise: str | None = None) -> dict[str, str]:
    """The identity stack's keys imported on the standby (``noise`` replacing its Noise key), as the README allows
    instead of tailnet.identityStack: the standby's own fingerprint is then the imported key's."""
    (identity,) = [s for s in lab.world.stacks.values() if s.name == IDENTITY]
    keys = identity.exports["identity"].value
    return {
        "headscale-ha:noisePrivateKey": noise or keys["noisePrivateKey"],
        "headscale-ha:derpPrivateKey": keys["derpPrivateKey"],
    }


def test_imported_keys_pass_the_gate_when_they_are_the_tailnet_identity(lab: Lab) -> None:
    same = lab.run("up", "cosmos", {**PINNED, **_imported(lab)})
    assert same.error is None, same.text()
    # The same keys: the identity Secret stays as it is; only the config-holding default provider notices.
    assert [(step.op, step.name) for step in same.changes()] == [("update", CONFIG_PROVIDER)], same.text()
    before = _snapshot(lab)
    other = lab.run("up", "cosmos", {**PINNED, **ROUTINE, **_imported(lab, noise="privkey:" + "11" * 32)})
    _refused(other, "identityFingerprint: this standby's Noise key has fingerprint ")
    assert _snapshot(lab) == before
