"""The standby checks the active it follows: Headscale release, database stage, identity and backup key epoch, through
stack outputs."""

from __future__ import annotations

import json

import pytest

from headscale_ha.program.standby import CHECKED_OUTPUTS, StandbyMismatch, check, compare
from tests.support.manifest_validator import validate
from tests.support.stack_snippets import POSTGRES, SQLITE_DB
from tests.support.stacks import ACTIVE_STACK, IDENTITY_STACK
from tools.plan import write_rendered

SAME = {"headscaleVersion": "0.29.2", "databaseStage": "sqlite", "identityFingerprint": "ab" * 32, "backupKeyEpoch": 1}

#: A refused standby fails HeadscaleServer's read of the identity stack with its parent (the gate stops the
#: provider, so every component): the SDK's require_output then drops coroutines it never awaited. Noise of a
#: failed run, as the engine model treats it (tests/models/engine/engine.py); the run's error is what counts.
pytestmark = pytest.mark.filterwarnings("ignore:coroutine 'Output\\.[a-z_]+' was never awaited:RuntimeWarning")


def _active(**changes: str) -> dict[str, str]:
    return {**SAME, **changes}


def test_a_standby_that_agrees_with_its_active_passes() -> None:
    assert compare(SAME, dict(SAME)) == []
    assert check("organization/headscale-ha/hydra", SAME, SAME) == {"stack": "organization/headscale-ha/hydra", **SAME}


def test_another_release_is_refused_even_a_patch() -> None:
    """Exact release: Headscale migrates at start, one way, and patch releases have changed migrations."""
    (mismatch,) = compare(SAME, _active(headscaleVersion="0.29.1"))
    assert mismatch.startswith("headscaleVersion: ")
    assert "this standby runs 0.29.2, the active runs 0.29.1" in mismatch
    (minor,) = compare(SAME, _active(headscaleVersion="0.28.0"))
    assert "0.28.0" in minor


@pytest.mark.parametrize(
    ("own", "active", "accepted"),
    [
        ("sqlite", "sqlite", True),
        ("postgres", "postgres", True),
        ("sqlite", "migrating", True),  # the active's Litestream replica is the frozen rollback point
        ("sqlite", "postgres", False),  # that replica is frozen: a promotion would restore a stale registry
        ("postgres", "sqlite", False),  # nothing to replicate from
        ("postgres", "migrating", False),  # the active's PostgreSQL is not the registry yet
        ("migrating", "migrating", True),  # equal (the config itself refuses a migrating standby)
    ],
)
def test_database_stages(own: str, active: str, accepted: bool) -> None:
    mismatches = compare({**SAME, "databaseStage": own}, _active(databaseStage=active))
    if accepted:
        assert mismatches == []
    else:
        (mismatch,) = mismatches
        assert mismatch.startswith("databaseStage: ")
        assert f"this standby is in stage {own}, the active in stage {active}" in mismatch


def test_a_sqlite_standby_of_a_postgres_active_says_why() -> None:
    (mismatch,) = compare(SAME, _active(databaseStage="postgres"))
    assert "Litestream replica, frozen" in mismatch
    assert "database.stage postgres" in mismatch


def test_another_identity_is_refused() -> None:
    (mismatch,) = compare(SAME, _active(identityFingerprint="cd" * 32))
    assert mismatch.startswith("identityFingerprint: ")
    assert "ab" * 32 in mismatch
    assert "cd" * 32 in mismatch


def test_every_mismatch_is_reported_at_once() -> None:
    other = {
        "headscaleVersion": "0.28.0",
        "databaseStage": "postgres",
        "identityFingerprint": "cd" * 32,
        "backupKeyEpoch": 2,
    }
    with pytest.raises(StandbyMismatch) as raised:
        check("organization/headscale-ha/hydra", SAME, other)
    error = raised.value
    assert error.active_stack == "organization/headscale-ha/hydra"
    assert [m.split(":")[0] for m in error.mismatches] == list(CHECKED_OUTPUTS)
    assert "organization/headscale-ha/hydra (4 mismatches)" in str(error)


# ------------------------------------------------------------------------------------- through stack outputs


def test_the_standby_follows_the_active_site_stack(run_stack) -> None:
    cosmos = run_stack("cosmos")
    references = {r.inputs["name"] for r in cosmos.resources if r.type == "pulumi:pulumi:StackReference"}
    assert references == {IDENTITY_STACK, ACTIVE_STACK}
    expected = {"stack": ACTIVE_STACK, **{key: cosmos.outputs[key] for key in CHECKED_OUTPUTS}}
    # JSON, so that a number read through the reference as 1.0 does not pass for the 1 the stacks export
    assert json.dumps(cosmos.outputs["follows"], sort_keys=True) == json.dumps(expected, sort_keys=True)


def test_a_whole_number_read_through_a_reference_is_reported_as_the_integer_it_was() -> None:
    """A StackReference hands numbers over as protobuf doubles: `follows` says keyEpoch 1, not 1.0."""
    follows = check(ACTIVE_STACK, SAME, {**SAME, "backupKeyEpoch": 1.0})
    assert (follows["backupKeyEpoch"], type(follows["backupKeyEpoch"])) == (1, int)
    (mismatch,) = compare(SAME, {**SAME, "backupKeyEpoch": 2.0})
    assert "keyEpoch 1, the active with 2;" in mismatch


def test_the_standby_provider_waits_for_the_check_and_the_active_provider_for_nothing(run_stack, stack_outputs) -> None:
    """The gate: cosmos's Kubernetes provider depends on the check (the active's StackReference, and the identity
    read the own fingerprint comes from), so every Kubernetes resource waits for it; hydra's provider does not."""
    cosmos = run_stack("cosmos")
    reads = {r.name: r for r in cosmos.of_type("pulumi:pulumi:StackReference")}
    assert {name: r.inputs["name"] for name, r in reads.items()} == {
        "cosmos-active": ACTIVE_STACK,
        "cosmos-standby-check-identity": IDENTITY_STACK,
        "cosmos-headscale-identity-stack": IDENTITY_STACK,  # HeadscaleServer's, for the keys: created after the gate
    }
    gate = {reads["cosmos-active"].urn, reads["cosmos-standby-check-identity"].urn}
    assert set(cosmos.named("cosmos-kubernetes").dependencies) == gate
    hydra = run_stack("hydra", stack_outputs={IDENTITY_STACK: stack_outputs[IDENTITY_STACK]})
    assert hydra.named("hydra-kubernetes").dependencies == ()


def test_the_active_checks_nobody_and_every_site_exports_what_is_checked(run_stack, stack_outputs) -> None:
    hydra = run_stack("hydra", stack_outputs={IDENTITY_STACK: stack_outputs[IDENTITY_STACK]})
    references = {r.inputs["name"] for r in hydra.resources if r.type == "pulumi:pulumi:StackReference"}
    assert references == {IDENTITY_STACK}
    assert "follows" not in hydra.outputs
    for run in (hydra, run_stack("cosmos")):
        types = {key: type(run.outputs[key]) for key in CHECKED_OUTPUTS}
        assert types == {**dict.fromkeys(CHECKED_OUTPUTS, str), "backupKeyEpoch": int}


@pytest.mark.parametrize(
    ("output", "theirs"),
    [
        ("headscaleVersion", "0.29.1"),
        ("headscaleVersion", "0.28.0"),
        ("databaseStage", "postgres"),
        ("identityFingerprint", "cd" * 32),
        ("backupKeyEpoch", 2),
    ],
)
def test_each_mismatch_fails_the_standby_naming_it(output: str, theirs: object, run_stack, stack_outputs) -> None:
    ours = str(run_stack("cosmos").outputs[output])
    stack_outputs[ACTIVE_STACK][output] = theirs
    with pytest.raises(StandbyMismatch) as raised:
        run_stack("cosmos", stack_outputs=stack_outputs)
    (mismatch,) = raised.value.mismatches
    assert mismatch.startswith(f"{output}: ")
    assert ours in mismatch
    assert str(theirs) in mismatch
    assert ACTIVE_STACK in str(raised.value)


def test_all_mismatches_are_reported_in_one_run(run_stack, stack_outputs) -> None:
    stack_outputs[ACTIVE_STACK].update(
        headscaleVersion="0.28.0", databaseStage="postgres", identityFingerprint="cd" * 32, backupKeyEpoch=3
    )
    with pytest.raises(StandbyMismatch) as raised:
        run_stack("cosmos", stack_outputs=stack_outputs)
    assert [m.split(":")[0] for m in raised.value.mismatches] == list(CHECKED_OUTPUTS)


def test_an_active_without_the_checked_outputs_fails_the_standby(run_stack, stack_outputs) -> None:
    """An active deployed by an older program lacks identityFingerprint: require_output fails, as in a real run."""
    del stack_outputs[ACTIVE_STACK]["identityFingerprint"]
    with pytest.raises(Exception, match="identityFingerprint"):
        run_stack("cosmos", stack_outputs=stack_outputs)


def test_a_standby_with_other_imported_keys_is_refused(run_stack, project_copy) -> None:
    """Keys imported on the standby instead of the identity stack's: another server to every client."""
    project = project_copy()
    keys = "  headscale-ha:noisePrivateKey:\n    secure: v1:AAAA\n  headscale-ha:derpPrivateKey:\n    secure: v1:BBBB\n"
    with (project / "Pulumi.cosmos.yaml").open("a") as stack_file:
        stack_file.write(keys)
    with pytest.raises(StandbyMismatch, match="identityFingerprint: this standby's Noise key has fingerprint"):
        run_stack("cosmos", project_dir=project)


def _postgres(project, stack: str) -> None:
    instances = "3" if stack == "hydra" else "1"
    path = project / f"Pulumi.{stack}.yaml"
    text = path.read_text().replace(SQLITE_DB[stack], "")
    path.write_text(text + POSTGRES.replace("instances: 3", f"instances: {instances}"))


def test_the_real_stages_of_a_migrated_pair(run_stack, project_copy, stack_outputs, shared_dir, tmp_path) -> None:
    """hydra planned on PostgreSQL: a SQLite cosmos is refused, a PostgreSQL cosmos follows and validates."""
    project = project_copy()
    _postgres(project, "hydra")
    hydra = run_stack("hydra", project_dir=project, stack_outputs={IDENTITY_STACK: stack_outputs[IDENTITY_STACK]})
    assert hydra.outputs["databaseStage"] == "postgres"
    references = {IDENTITY_STACK: stack_outputs[IDENTITY_STACK], ACTIVE_STACK: hydra.exports}
    with pytest.raises(
        StandbyMismatch, match="databaseStage: this standby is in stage sqlite, the active in stage postgres"
    ):
        run_stack("cosmos", project_dir=project, stack_outputs=references)
    _postgres(project, "cosmos")
    cosmos = run_stack("cosmos", project_dir=project, stack_outputs=references)
    assert cosmos.outputs["follows"]["databaseStage"] == "postgres"
    files = [f for f in write_rendered(cosmos, tmp_path) if f.suffix == ".yaml"]
    assert validate(shared_dir, files).returncode == 0
