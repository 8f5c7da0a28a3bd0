"""`make promote`, `make demote` and `make upgrade` (tools/runbook.py) run against recording fakes of `pulumi` and
`kubectl` that answer as the engine model would (tests/support/cli_model.py), on a copy of the project's files,
with the fake Headscale as the live server: what each command runs, in which order, what it refuses, and that a
run stopped by a failure is finished by running it again."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from headscale_ha.program.failover import FENCE_TIMEOUT_SECONDS
from tests.support.cli_model import CommandLine
from tests.support.engine.lifecycle import Lab
from tools.harness import PROJECT_DIR
from tools.runbook import RefusalError, main, set_project_values

HYDRA = "organization/headscale-ha/hydra"
COSMOS = "organization/headscale-ha/cosmos"


def _copy(tmp_path: Path) -> Path:
    for path in PROJECT_DIR.glob("Pulumi*.yaml"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def _deployed(tmp_path: Path, *, version: str | None = None) -> tuple[Lab, CommandLine]:
    project = _copy(tmp_path)
    if version is not None:
        image = f"ghcr.io/juanfont/headscale:{version}"
        set_project_values(project, "headscale", {"version": version, "image": image})
    lab = Lab(api=True, project_dir=project, headscale_version=version or "0.29.2")
    lab.first_deployment()
    return lab, CommandLine(lab)


@pytest.fixture
def tailnet(tmp_path: Path) -> Iterator[tuple[Lab, CommandLine]]:
    lab, cli = _deployed(tmp_path)
    yield lab, cli
    lab.close()


class Printed(list):
    def __call__(self, line: str) -> None:
        self.append(line)


def _runbook(cli: CommandLine, *argv: str, ask=None) -> tuple[int, Printed]:
    printed = Printed()
    code = main(list(argv), runner=cli, project_dir=cli.lab.project_dir, out=printed, sleep=cli.sleep, ask=ask)
    return code, printed


def _registry(lab: Lab) -> dict[str, set[int]]:
    fake = lab.headscale
    assert fake is not None
    return {"users": set(fake.users), "nodes": set(fake.nodes), "keys": set(fake.preauth_keys)}


def _replicas(lab: Lab, site: str) -> int:
    return lab.world.clusters[site].find("Deployment", "headscale", "headscale")["spec"]["replicas"]


def _shared(lab: Lab) -> dict:
    return yaml.safe_load((lab.project_dir / "Pulumi.yaml").read_text())["config"]


def _ran(cli: CommandLine) -> list[str]:
    """The commands the runbook ran, without its own look-ups of what each stack last deployed."""
    return [" ".join(call) for call in cli.calls if call[1:3] != ("stack", "output")]


def _once(lines: list[str]) -> list[str]:
    """``lines`` with a repeated check (the fence's pod poll) counted once."""
    return [line for index, line in enumerate(lines) if index == 0 or line != lines[index - 1]]


def _listed(lab: Lab, stack: str, target: str) -> list[str]:
    """The commands the stack's `failover` output lists for ``target``, the namespace look-up resolved."""
    runbook = lab.world.stacks[f"organization/headscale-ha/{stack}"].outputs["failover"][target]
    lines = [command["run"] for step in runbook["steps"] for command in step["commands"]]
    return [line.replace(f'"$(pulumi stack output -s {HYDRA} namespace)"', "headscale") for line in lines]


# ------------------------------------------------------------------------------------------------ promotion


def test_promotion_with_the_active_reachable_runs_what_the_output_lists(tailnet) -> None:
    lab, cli = tailnet
    listed = _listed(lab, "cosmos", "cosmos")
    before = _registry(lab)
    code, printed = _runbook(cli, "promote", "cosmos")
    assert code == 0, "\n".join(printed + cli.printed)
    ran = _ran(cli)
    polls = ran.count(listed[3])
    assert polls >= 2, "the pod check is repeated until hydra's pod is gone"
    assert [line for line in _once(ran) if "tools.runbook" not in line] == [
        line for line in listed if "tools.runbook" not in line
    ]
    assert any("tools.runbook set-active-site cosmos" in line for line in printed), "its own edit, in process"
    assert ran.index(f"pulumi up --yes -s {HYDRA}") < ran.index(f"pulumi up --yes -s {COSMOS}"), "fenced first"
    assert _shared(lab)["tailnet"]["value"]["activeSite"] == "cosmos"
    assert (_replicas(lab, "hydra"), _replicas(lab, "cosmos")) == (0, 1)
    assert lab.world.dns_site == "cosmos", "the fake Headscale now serves from cosmos"
    assert cli.clock >= 30, "the fence waited for hydra's pod to terminate (its grace period)"
    assert _registry(lab) == before, "no user, node or key deleted"
    assert all(result.error is None for _, _, result in cli.runs)


def test_promotion_with_the_active_lost_skips_its_fence_once_confirmed(tailnet) -> None:
    lab, cli = tailnet
    before = _registry(lab)
    lab.world.lost.add("hydra")
    refused, printed = _runbook(cli, "promote", "cosmos", "--lost", "hydra")
    assert refused == 2
    assert "--confirm-lost hydra" in printed[-1]
    assert any("diverge" in line for line in printed), "the risk is said before the confirmation is asked"
    assert cli.calls == [], "nothing ran without the confirmation"
    wrong, _ = _runbook(cli, "promote", "cosmos", "--lost", "hydra", ask=lambda prompt: "cosmos")
    assert wrong == 2
    started = time.monotonic()
    code, printed = _runbook(cli, "promote", "cosmos", "--lost", "hydra", ask=lambda prompt: "hydra")
    elapsed = time.monotonic() - started
    assert code == 0, "\n".join(printed + cli.printed)
    assert not [call for call in cli.calls if "hydra" in call and call[0] == "kubectl"]
    assert f"pulumi up --yes -s {HYDRA}" not in _ran(cli)
    assert f"pulumi config set -s {HYDRA} headscale-ha:role standby" in _ran(cli), "its file is fenced already"
    assert [line for line in printed if line.startswith("   skip (hydra is lost)")]
    assert lab.world.dns_site == "cosmos"
    assert _registry(lab) == before
    print(f"promotion with hydra lost: {elapsed:.1f} s on the model")
    # hydra comes back: demoted before anything else, it follows cosmos
    lab.world.lost.discard("hydra")
    cli.calls.clear()
    code, printed = _runbook(cli, "demote", "hydra")
    assert code == 0, "\n".join(printed + cli.printed)
    assert _once(_ran(cli)) == [
        f"pulumi config set -s {HYDRA} headscale-ha:role standby",
        f"pulumi up --refresh --yes -s {HYDRA}",
        "kubectl --context hydra -n headscale get pods -l "
        "app.kubernetes.io/name=headscale,app.kubernetes.io/part-of=headscale-ha -o name",
    ]
    assert (_replicas(lab, "hydra"), _replicas(lab, "cosmos")) == (0, 1)
    assert _registry(lab) == before


def test_a_promotion_stopped_by_a_failure_is_finished_by_running_it_again(tailnet) -> None:
    lab, cli = tailnet
    lab.cosmos.unready.add("headscale")  # cosmos' Headscale does not become ready (say, a bad node)
    code, printed = _runbook(cli, "promote", "cosmos")
    assert code == 1
    assert "STOPPED: step 'promote the data' stopped" in printed[-1]
    assert f"`pulumi up --yes -s {COSMOS}` failed (exit status 255)" in printed[-1], "pulumi-kubernetes awaits it"
    assert "waiting for its pods to become ready" in cli.printed[-1]
    lab.cosmos.unready.discard("headscale")
    cli.calls.clear()
    again, printed = _runbook(cli, "promote", "cosmos")
    assert again == 0, "\n".join(printed + cli.printed)
    assert not any("hydra" in line and "kubectl" in line for line in _ran(cli)), "hydra is fenced: no fence again"
    assert f"pulumi up --yes -s {HYDRA}" in _ran(cli), "hydra follows the new active instead"
    cli.runs.clear()
    third, _ = _runbook(cli, "promote", "cosmos")
    assert third == 0
    assert all(result.changes() == [] for kind, _, result in cli.runs if kind == "up"), "a third run changes nothing"


def test_promoting_back_is_the_same_command_the_other_way(tailnet) -> None:
    lab, cli = tailnet
    assert _runbook(cli, "promote", "cosmos")[0] == 0
    code, printed = _runbook(cli, "promote", "hydra")
    assert code == 0, "\n".join(printed + cli.printed)
    assert (_replicas(lab, "hydra"), _replicas(lab, "cosmos")) == (1, 0)
    assert lab.world.dns_site == "hydra"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("promote", "andromeda"), "site 'andromeda' is not one of tailnet.sites: hydra, cosmos"),
        (("promote", "cosmos", "--lost", "cosmos", "--confirm-lost", "cosmos"), "cannot be the lost one"),
        (("demote", "hydra"), "hydra is tailnet.activeSite"),
        (("upgrade", "0.29", "ghcr.io/juanfont/headscale:0.29"), "VERSION '0.29': expected a release"),
        (("upgrade", "0.29.3", "ghcr.io/juanfont/headscale:0.29.2"), "its tag must be the release 0.29.3"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(tailnet, argv, says) -> None:
    _, cli = tailnet
    code, printed = _runbook(cli, *argv)
    assert code == 2
    assert says in printed[-1]
    assert _ran(cli) == []


# ------------------------------------------------------------------------------------------------ upgrade


def test_a_minor_upgrade_is_one_command_active_first(tmp_path: Path) -> None:
    lab, cli = _deployed(tmp_path, version="0.28.0")
    try:
        before = _registry(lab)
        assert lab.headscale.version == "0.28.0"
        code, printed = _runbook(cli, "upgrade", "0.29.2", "ghcr.io/juanfont/headscale:0.29.2")
        assert code == 0, "\n".join(printed + cli.printed)
        assert _shared(lab)["headscale"]["value"] == {"version": "0.29.2", "image": "ghcr.io/juanfont/headscale:0.29.2"}
        ups = [stack for kind, stack, _ in cli.runs if kind == "up"]
        assert ups == ["hydra", "cosmos"]
        assert lab.headscale.version == "0.29.2", "the fake restarted on the release hydra rolled out"
        assert _registry(lab) == before
        for kind, stack, result in cli.runs:
            assert "replace" not in {step.op for step in result.changes()}, f"{kind} {stack}: {result.text()}"
    finally:
        lab.close()


def test_an_upgrade_refuses_a_stack_file_that_pins_its_own_release(tailnet) -> None:
    lab, cli = tailnet
    path = lab.project_dir / "Pulumi.cosmos.yaml"
    path.write_text(path.read_text() + "  headscale-ha:headscale: {version: 0.29.2, image: x:0.29.2}\n")
    code, printed = _runbook(cli, "upgrade", "0.29.3", "ghcr.io/juanfont/headscale:0.29.3")
    assert code == 2
    assert "Pulumi.cosmos.yaml set headscale-ha:headscale themselves" in printed[-1]


# ------------------------------------------------------------------------------------------------ the one file edit


def test_the_active_site_edit_keeps_every_other_line(tmp_path: Path) -> None:
    project = _copy(tmp_path)
    text = (project / "Pulumi.yaml").read_text()
    assert set_project_values(project, "tailnet", {"activeSite": "cosmos"}) is True
    edited = (project / "Pulumi.yaml").read_text()
    changed = [(a, b) for a, b in zip(text.splitlines(), edited.splitlines(), strict=True) if a != b]
    assert changed == [("      activeSite: hydra", "      activeSite: cosmos")]
    assert set_project_values(project, "tailnet", {"activeSite": "cosmos"}) is False, "idempotent"


def test_a_flow_style_section_is_refused_and_the_file_left_alone(tmp_path: Path) -> None:
    project = _copy(tmp_path)
    path = project / "Pulumi.yaml"
    text = path.read_text().replace(
        "  headscale:\n    value:\n      version: 0.29.2\n      image: ghcr.io/juanfont/headscale:0.29.2\n",
        "  headscale:\n    value: {version: 0.29.2, image: 'ghcr.io/juanfont/headscale:0.29.2'}\n",
    )
    path.write_text(text)
    with pytest.raises(RefusalError, match="no block-style `version:`"):
        set_project_values(project, "headscale", {"version": "0.29.3", "image": "x:0.29.3"})
    assert path.read_text() == text


def test_the_fence_gives_up_when_the_pods_never_go(tailnet, monkeypatch) -> None:
    lab, cli = tailnet
    monkeypatch.setattr(cli, "_pods", lambda site, deployment: ["headscale-stuck"])
    code, printed = _runbook(cli, "promote", "cosmos")
    assert code == 1
    assert f"still 1 pod(s) after {FENCE_TIMEOUT_SECONDS} s" in printed[-1]
    assert f"pulumi up --yes -s {COSMOS}" not in _ran(cli), "no second writer: cosmos is not promoted"
    assert _replicas(lab, "cosmos") == 0


# ------------------------------------------------------------------------------------------------ real processes


RECORDER = """#!/bin/sh
printf '%s %s\\n' "$(basename "$0")" "$*" >> "$RUNBOOK_LOG"
case "$*" in
  *"stack output"*) echo '{"role": "standby"}' ;;
  *"get pods"*) ;;
esac
"""


def test_the_command_runs_real_processes_in_the_project_directory(tmp_path: Path, monkeypatch) -> None:
    """`make demote` as a user runs it: real `pulumi` and `kubectl` executables (recorders here) on PATH, started
    in the project directory, their exit status and output read."""
    (tmp_path / "project").mkdir()
    project = _copy(tmp_path / "project")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("pulumi", "kubectl"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("RUNBOOK_LOG", str(log))
    printed = Printed()
    assert main(["demote", "cosmos"], project_dir=project, out=printed, sleep=lambda s: None) == 0
    assert log.read_text().splitlines() == [
        f"pulumi config set -s {COSMOS} headscale-ha:role standby",
        f"pulumi up --refresh --yes -s {COSMOS}",
        "kubectl --context cosmos -n headscale get pods -l "
        "app.kubernetes.io/name=headscale,app.kubernetes.io/part-of=headscale-ha -o name",
    ]
    (bin_dir / "pulumi").write_text("#!/bin/sh\nexit 255\n")
    assert main(["demote", "cosmos"], project_dir=project, out=printed, sleep=lambda s: None) == 1
    assert "exit status 255" in printed[-1]


def test_a_site_whose_last_deployment_cannot_be_read_stops_the_promotion(tailnet) -> None:
    """Without knowing whether hydra still serves, the fence cannot be decided: nothing runs."""
    lab, cli = tailnet
    del lab.world.stacks[HYDRA].outputs["endpoints"]
    code, printed = _runbook(cli, "promote", "cosmos")
    assert code == 2
    assert "cannot tell what hydra last deployed" in printed[-1]
    assert _ran(cli) == []
