"""`make plan`: the identity stack first, then the active site, then the others, each reading what the earlier
ones planned; a stack reference the plan cannot satisfy fails the stack that makes it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import tools.plan
from headscale_ha.program.examples import warning as example_warning
from tools.availability_docs import stack_config
from tools.harness import PROJECT_DIR, SecretOutput
from tools.hints import VIA_MAKE_ENV
from tools.plan import (
    FROM_MOCKS_KEY,
    advisory_warnings,
    grouped_advisory_warnings,
    image_keys,
    offline_stack_outputs,
    plan_all,
    plan_order,
)
from tools.plan import main as plan_main

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
    assert set(outputs) == {"identity", "fingerprint", FROM_MOCKS_KEY}
    assert (
        json.loads((tmp_path / "hydra" / "outputs.json").read_text())["identityFingerprint"] == outputs["fingerprint"]
    )


def test_outputs_the_mocks_made_up_are_marked_in_outputs_json_and_the_printout(capsys, tmp_path: Path) -> None:
    """A fingerprint of the mocks' stand-in random bytes looks like a real one: the plan says which outputs came
    from the mocks (they differ when the plan runs again with other stand-in bytes), and only those."""
    assert plan_main(["--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    marked = {
        stack: json.loads((tmp_path / path / "outputs.json").read_text()).get(FROM_MOCKS_KEY)
        for stack, path in (("tailnet", "identity/tailnet"), ("hydra", "hydra"), ("cosmos", "cosmos"))
    }
    assert marked == {
        "tailnet": ["fingerprint"],
        "hydra": ["identityFingerprint"],
        "cosmos": ["follows.identityFingerprint", "identityFingerprint"],
    }
    note = "note: offline, these outputs come from the mocks, not your tailnet (offlineFromMocks): "
    assert f"{note}follows.identityFingerprint, identityFingerprint" in printed


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


# ------------------------------------------------------------------------------------------- warnings

STACK_HEADER = re.compile(r"^stack (\S+) of (\S+): \d+ resources$")


def _warnings_by_stack(out: str) -> dict[str, list[str]]:
    """The warning lines `make plan` prints under each stack's tree, by stack."""
    found: dict[str, list[str]] = {}
    stack = None
    for line in out.splitlines():
        if header := STACK_HEADER.match(line):
            stack = header[1]
            found[stack] = []
        elif line.startswith("warning: "):
            assert stack is not None, line
            found[stack].append(line)
    return found


def _advisory(lines: list[str]) -> list[str]:
    return [line for line in lines if "(advisory)" in line]


def _kind(line: str) -> str:
    """The rule of an advisory line (``warning: <rule> (advisory): ...``)."""
    found = re.match(r"warning: (\S+) \(advisory\): ", line)
    assert found is not None, line
    return found[1]


def _plan_output(capsys, out_dir: Path, *extra: str) -> str:
    assert plan_main(["--out", str(out_dir), *extra]) == 0
    return capsys.readouterr().out


def test_the_shipped_stacks_print_one_line_per_advisory_kind_and_verbose_prints_each(capsys, tmp_path: Path) -> None:
    """Grouped: per stack, one line per advisory kind with its count and first finding; --verbose: every finding
    as advisory_warnings has it. Nothing else in the output differs."""
    grouped = _plan_output(capsys, tmp_path / "grouped")
    verbose = _plan_output(capsys, tmp_path / "verbose", "--verbose")
    planned = {p.stack: p.run for p in plan_all()}
    grouped_all, verbose_all = _warnings_by_stack(grouped), _warnings_by_stack(verbose)
    grouped_lines, verbose_lines = ({s: _advisory(lines) for s, lines in w.items()} for w in (grouped_all, verbose_all))
    assert set(grouped_lines) == set(verbose_lines) == {"tailnet", "hydra", "cosmos"}
    # The program's own warnings come first, never grouped, the same with or without --verbose.
    for found in (grouped_all, verbose_all):
        assert {s: [line for line in lines if "(advisory)" not in line] for s, lines in found.items()} == {
            "tailnet": [],
            # the warning's first line; its values follow one per line
            **{
                site: [f"warning: {example_warning(stack_config(site)).splitlines()[0]}"]
                for site in ("hydra", "cosmos")
            },
        }
    for stack, lines in verbose_lines.items():
        keys = image_keys(PROJECT_DIR, stack) if stack != "tailnet" else {}
        assert lines == advisory_warnings(planned[stack], keys), stack
        # each image is named by the config key that sets it, not by its container
        assert all(": headscale-ha:" in line for line in lines if "pinned by tag only" in line), stack
        expected = []
        for kind in dict.fromkeys(_kind(line) for line in lines):
            findings = [line for line in lines if _kind(line) == kind]
            prefix = f"warning: {kind} (advisory): "
            first = findings[0].removeprefix(prefix).split("; ", 1)[0]
            summary = f"{prefix}{len(findings)} findings in {stack}, e.g. {first}; --verbose lists them all"
            expected.append(summary if len(findings) > 1 else findings[0])
        assert grouped_lines[stack] == expected, stack
    assert len(verbose_lines["hydra"]) > 10, "the shipped stacks pin many images by tag only"
    assert [len(lines) for lines in grouped_lines.values()] == [0, 1, 1], "only prefer-image-digests, per site"
    assert all(len(line) < 250 for lines in grouped_lines.values() for line in lines)
    stripped = [[line for line in out.splitlines() if not line.startswith("warning: ")] for out in (grouped, verbose)]
    assert [line.replace(str(tmp_path / "verbose"), str(tmp_path / "grouped")) for line in stripped[1]] == stripped[0]


def _fake_run(monkeypatch: pytest.MonkeyPatch, findings: dict[str, dict[str, list[str]]]) -> SimpleNamespace:
    """A run whose resources (by name) have these advisory findings (by rule)."""
    monkeypatch.setattr(tools.plan, "advisories", lambda subject: findings[subject.name])
    resources = [SimpleNamespace(type="kubernetes:apps/v1:Deployment", name=name, inputs={}) for name in findings]
    return SimpleNamespace(resources=resources)


def test_each_advisory_kind_is_one_line_and_a_lone_finding_prints_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _fake_run(
        monkeypatch,
        {
            "a": {"prefer-image-digests": ["image 'x:1' is pinned by tag only; add its digest", "image 'y:2' too"]},
            "b": {"other-advice": ["consider this; because"], "prefer-image-digests": ["image 'z:3' ...; add"]},
        },
    )
    assert grouped_advisory_warnings(run, "lab") == [
        "warning: prefer-image-digests (advisory): 3 findings in lab, e.g. a: image 'x:1' is pinned by tag only; "
        "--verbose lists them all",
        "warning: other-advice (advisory): b: consider this; because",
    ]
    assert advisory_warnings(run) == [
        "warning: prefer-image-digests (advisory): a: image 'x:1' is pinned by tag only; add its digest",
        "warning: prefer-image-digests (advisory): a: image 'y:2' too",
        "warning: other-advice (advisory): b: consider this; because",
        "warning: prefer-image-digests (advisory): b: image 'z:3' ...; add",
    ]


def test_a_program_warning_is_a_diagnostic_of_the_run_never_a_bare_line_on_stderr(capsys) -> None:
    """What `pulumi.log.warn` says reaches ProgramRun.diagnostics (the CLI's Diagnostics), not the root logger."""
    (hydra,) = [p.run for p in plan_all(stacks=["hydra"]) if p.stack == "hydra"]
    assert hydra is not None
    assert hydra.warnings() == [example_warning(stack_config("hydra"))]
    assert ("warning", hydra.warnings()[0]) in hydra.diagnostics
    assert "example value(s)" not in capsys.readouterr().err


def test_from_make_the_advisory_hint_names_the_make_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make plan` users type VERBOSE=1, not --verbose (the Makefile's recipe sets the variable the hint reads)."""
    run = _fake_run(monkeypatch, {"a": {"prefer-image-digests": ["image 'x:1' is pinned by tag only", "'y:2' too"]}})
    monkeypatch.setenv(VIA_MAKE_ENV, "1")
    (line,) = grouped_advisory_warnings(run, "lab")
    assert line.endswith("; VERBOSE=1 lists them all")
