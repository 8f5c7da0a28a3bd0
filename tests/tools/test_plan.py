"""`make plan`: the identity stack first, then the active site, then the others, each reading what the earlier
ones planned; a stack reference the plan cannot satisfy fails the stack that makes it."""

from __future__ import annotations

import json
from pathlib import Path

from tools.harness import PROJECT_DIR, SecretOutput
from tools.plan import main as plan_main
from tools.plan import offline_stack_outputs, plan_all, plan_order

IDENTITY_STACK = "organization/headscale-ha-identity/tailnet"


def test_the_active_site_is_planned_before_the_others() -> None:
    assert plan_order(PROJECT_DIR, ["cosmos", "hydra"]) == ["hydra", "cosmos"]


def test_plan_all_runs_identity_then_active_then_standby() -> None:
    planned = list(plan_all())
    assert [(p.project, p.stack) for p in planned] == [
        ("headscale-ha-identity", "tailnet"),
        ("headscale-ha", "hydra"),
        ("headscale-ha", "cosmos"),
    ]
    assert all(p.error is None for p in planned), [p.error for p in planned]
    identity, hydra, cosmos = (p.run for p in planned)
    fingerprint = identity.outputs["fingerprint"]
    assert hydra.outputs["identityFingerprint"] == cosmos.outputs["identityFingerprint"] == fingerprint


def test_a_standby_asked_for_alone_still_reads_its_planned_active() -> None:
    planned = list(plan_all(stacks=["cosmos"]))
    assert [(p.stack, p.requested) for p in planned] == [("tailnet", True), ("hydra", False), ("cosmos", True)]


def test_offline_stack_outputs_are_the_identity_and_the_active_as_planned() -> None:
    outputs = offline_stack_outputs()
    assert set(outputs) == {IDENTITY_STACK, "organization/headscale-ha/hydra"}
    identity = outputs[IDENTITY_STACK]
    assert isinstance(identity["identity"], SecretOutput), "secret outputs stay secret"
    assert isinstance(identity["fingerprint"], str), "the fingerprint stays plain"
    assert outputs["organization/headscale-ha/hydra"]["identityFingerprint"] == identity["fingerprint"]
    assert "identity" not in outputs["organization/headscale-ha/hydra"], "a site exports no keys"


def _project(project_copy, shared: str, replacement: str) -> Path:
    project = project_copy()
    text = (project / "Pulumi.yaml").read_text()
    assert shared in text
    (project / "Pulumi.yaml").write_text(text.replace(shared, replacement))
    return project


def test_an_identity_stack_the_plan_does_not_know_fails_every_site(project_copy, capsys) -> None:
    project = _project(
        project_copy,
        "identityStack: organization/headscale-ha-identity/tailnet",
        "identityStack: organization/headscale-ha-identity/prod",
    )
    assert plan_main(["--project-dir", str(project), "--out", str(project / "out")]) == 1
    err = capsys.readouterr().err
    assert "error: stack hydra: unknown stack 'organization/headscale-ha-identity/prod'" in err
    # The standby then fails on the first stack it cannot read: the identity stack or its (failed) active.
    assert "error: stack cosmos: unknown stack 'organization/headscale-ha" in err
    assert not (project / "out" / "hydra").exists()
    assert json.loads((project / "out" / "identity" / "tailnet" / "outputs.json").read_text())["identity"] == "[secret]"


def test_the_identity_stack_is_rendered_with_its_outputs(tmp_path: Path) -> None:
    assert plan_main(["--stack", "hydra", "--out", str(tmp_path)]) == 0
    outputs = json.loads((tmp_path / "identity" / "tailnet" / "outputs.json").read_text())
    assert set(outputs) == {"identity", "fingerprint"}
    assert (
        json.loads((tmp_path / "hydra" / "outputs.json").read_text())["identityFingerprint"] == outputs["fingerprint"]
    )


def test_policy_lints_are_printed_as_warnings_and_never_fail_the_plan(lab_project, capsys, tmp_path: Path) -> None:
    """Where the project is stricter than Headscale it warns: a default route as an auto-approver is accepted by
    Headscale (it approves any subnet route of that family) and printed as a lint, not refused."""
    base = (PROJECT_DIR / "policy" / "base.hujson").read_text()
    linted = tmp_path / "linted.hujson"
    approver = '"autoApprovers": {\n    "routes": {"0.0.0.0/0": ["group:admins"]},'
    linted.write_text(base.replace('"autoApprovers": {', approver, 1))
    project = lab_project(f"  headscale-ha:policy: {{file: {linted}}}\n")
    assert plan_main(["--project-dir", str(project), "--stack", "lab", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    lints = [line for line in out.splitlines() if line.startswith("warning: policy lint: ")]
    assert lints, out[-2000:]
    assert any("0.0.0.0/0" in line for line in lints)
    outputs = json.loads((tmp_path / "out" / "lab" / "outputs.json").read_text())
    assert outputs["policy"]["lints"] == [line.removeprefix("warning: policy lint: ") for line in lints]
