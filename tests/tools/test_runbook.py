"""`make promote`, `make demote` and `make upgrade` (tools/runbook.py) run against recording fakes of `pulumi` and
`kubectl` that answer as the engine model would (tests/models/cli/cli_model.py), on a copy of the project's files,
with the fake Headscale as the live server: what each command runs, in which order, what it refuses, and that a
run stopped by a failure is finished by running it again."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from headscale_ha.program.failover import FENCE_TIMEOUT_SECONDS
from tests.models.cli.cli_model import CommandLine
from tests.models.engine.lifecycle import DeployedLab, Lab
from tests.support.stacks import project_copier
from tools.harness import PROJECT_DIR
from tools.hints import VIA_MAKE_ENV
from tools.runbook import RefusalError, main, set_project_values

HYDRA = "organization/headscale-ha/hydra"
COSMOS = "organization/headscale-ha/cosmos"


def _copy(directory: Path) -> Path:
    return project_copier(directory)()


@pytest.fixture(scope="module")
def deployments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str | None], tuple[Lab, CommandLine]]]:
    """``deployments(version)``: the tailnet deployed at that Headscale release (None: the project's), on a project
    copy, with the recording CLI. Each release is deployed once per module and handed to each test as deployed."""
    made: dict[str | None, DeployedLab] = {}

    def deployment(version: str | None = None) -> tuple[Lab, CommandLine]:
        if version not in made:
            project = _copy(tmp_path_factory.mktemp("project"))
            if version is not None:
                image = f"ghcr.io/juanfont/headscale:{version}"
                set_project_values(project, "headscale", {"version": version, "image": image})
            made[version] = DeployedLab(api=True, project_dir=project, headscale_version=version or "0.29.2")
        lab = made[version].fresh()
        return lab, CommandLine(lab)

    yield deployment
    for deployed in made.values():
        deployed.close()


@pytest.fixture
def tailnet(deployments: Callable[[str | None], tuple[Lab, CommandLine]]) -> tuple[Lab, CommandLine]:
    return deployments(None)


@pytest.fixture
def on_0_28(deployments: Callable[[str | None], tuple[Lab, CommandLine]]) -> tuple[Lab, CommandLine]:
    """The tailnet on Headscale 0.28.0, the release before the project's: what an upgrade starts from."""
    return deployments("0.28.0")


class Printed(list):
    def __call__(self, line: str) -> None:
        self.append(line)


def _runbook(cli: CommandLine, *argv: str, ask=None, yes: bool = True) -> tuple[int, Printed]:
    """The runbook as `make … YES=1` runs it (``yes``), or asking through ``ask`` as at a terminal."""
    printed = Printed()
    asks_first = yes and argv[0] in {"promote", "demote", "upgrade"} and "--plan" not in argv
    argv = (*argv, "--yes") if asks_first else argv
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


def test_a_minor_upgrade_is_one_command_active_first(on_0_28) -> None:
    lab, cli = on_0_28
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
    assert main(["demote", "cosmos", "--yes"], project_dir=project, out=printed, sleep=lambda s: None) == 0
    assert log.read_text().splitlines() == [
        f"pulumi config set -s {COSMOS} headscale-ha:role standby",
        f"pulumi up --refresh --yes -s {COSMOS}",
        "kubectl --context cosmos -n headscale get pods -l "
        "app.kubernetes.io/name=headscale,app.kubernetes.io/part-of=headscale-ha -o name",
    ]
    (bin_dir / "pulumi").write_text("#!/bin/sh\nexit 255\n")
    assert main(["demote", "cosmos", "--yes"], project_dir=project, out=printed, sleep=lambda s: None) == 1
    assert "exit status 255" in printed[-1]


def test_a_site_whose_last_deployment_cannot_be_read_stops_the_promotion(tailnet) -> None:
    """Without knowing whether hydra still serves, the fence cannot be decided: nothing runs."""
    lab, cli = tailnet
    del lab.world.stacks[HYDRA].outputs["endpoints"]
    code, printed = _runbook(cli, "promote", "cosmos")
    assert code == 2
    assert "cannot tell what hydra last deployed" in printed[-1]
    assert _ran(cli) == []


# ------------------------------------------------------------------------------------------------ plan mode


def _files(project: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(project.glob("Pulumi*.yaml"))}


def _no_tools(tmp_path: Path, monkeypatch) -> None:
    """A machine with no `pulumi` and no `kubectl`: PATH holds one empty directory."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def _commands(printed: list[str]) -> list[str]:
    return [line.removeprefix("$ ") for line in printed if line.startswith("$ ")]


def test_a_promotion_plan_prints_what_the_real_run_runs_and_needs_no_cli(tailnet, tmp_path, monkeypatch) -> None:
    """The plan of `make promote SITE=cosmos PLAN=1` lists, in order, the commands the real run then runs (the
    fence's poll once), each with what it expects; it runs, writes and asks nothing."""
    lab, cli = tailnet
    before = _files(lab.project_dir)
    _no_tools(tmp_path, monkeypatch)
    planned = Printed()
    code = main(["promote", "cosmos", "--plan"], project_dir=lab.project_dir, out=planned, ask=_never_asked)
    assert code == 0, "\n".join(planned)
    assert _files(lab.project_dir) == before
    assert planned[-2].startswith("plan: 7 command(s) would run, 0 skipped; nothing was run, written or asked")
    expects = [planned[index + 1] for index, line in enumerate(planned) if line.startswith("$ ")]
    assert all(line.startswith("   expect: ") for line in expects), planned
    assert any(line.startswith("? pulumi stack output -s organization/headscale-ha/hydra") for line in planned)
    real, printed = _runbook(cli, "promote", "cosmos")
    assert real == 0, "\n".join(printed + cli.printed)
    assert _commands(planned) == _once(_commands(printed))


def test_a_promotion_plan_with_the_active_lost_skips_what_the_real_run_skips(tailnet, tmp_path, monkeypatch) -> None:
    lab, cli = tailnet
    _no_tools(tmp_path, monkeypatch)
    argv = ["promote", "cosmos", "--lost", "hydra", "--confirm-lost", "hydra"]
    planned = Printed()
    assert main([*argv, "--plan"], project_dir=lab.project_dir, out=planned, ask=_never_asked) == 0, planned
    unconfirmed = Printed()
    assert main([*argv[:4], "--plan"], project_dir=lab.project_dir, out=unconfirmed, ask=_never_asked) == 0
    assert "? the real run asks you to confirm that hydra is lost" in "\n".join(unconfirmed)
    lab.world.lost.add("hydra")
    real, printed = _runbook(cli, *argv)
    assert real == 0, "\n".join(printed + cli.printed)
    assert _commands(planned) == _commands(printed)
    skipped = [line for line in planned if line.startswith("   skip (hydra is lost)")]
    assert skipped == [line for line in printed if line.startswith("   skip (hydra is lost)")]
    assert skipped


def test_demotion_and_upgrade_plans_print_every_command_and_write_nothing(tailnet, tmp_path, monkeypatch) -> None:
    lab, cli = tailnet
    lab.world.lost.add("hydra")
    promoted, printed = _runbook(cli, "promote", "cosmos", "--lost", "hydra", "--confirm-lost", "hydra")
    assert promoted == 0, "\n".join(printed + cli.printed)
    lab.world.lost.discard("hydra")  # hydra is back: its demotion is planned first
    before = _files(lab.project_dir)
    _no_tools(tmp_path, monkeypatch)
    demoted = Printed()
    assert main(["demote", "hydra", "--plan"], project_dir=lab.project_dir, out=demoted, ask=_never_asked) == 0
    assert _commands(demoted) == [
        f"pulumi config set -s {HYDRA} headscale-ha:role standby",
        f"pulumi up --refresh --yes -s {HYDRA}",
        "kubectl --context hydra -n headscale get pods -l "
        "app.kubernetes.io/name=headscale,app.kubernetes.io/part-of=headscale-ha -o name",
    ]
    upgraded = Printed()
    argv = ["upgrade", "0.29.3", "ghcr.io/juanfont/headscale:0.29.3", "--plan"]
    assert main(argv, project_dir=lab.project_dir, out=upgraded, ask=_never_asked) == 0, upgraded
    assert _commands(upgraded) == [
        ".venv/bin/python -m tools.runbook set-headscale 0.29.3 ghcr.io/juanfont/headscale:0.29.3",
        f"pulumi preview -s {COSMOS}",
        f"pulumi up --yes -s {COSMOS}",
        "kubectl --context cosmos -n headscale rollout status deployment/headscale --timeout=900s",
        f"pulumi up --yes -s {HYDRA}",
    ]
    assert _files(lab.project_dir) == before


def _never_asked(prompt: str) -> str:
    raise AssertionError(f"a plan asked: {prompt}")


@pytest.mark.parametrize(
    "argv",
    [
        ["promote", "cosmos"],
        ["promote", "cosmos", "--lost", "hydra", "--confirm-lost", "hydra"],
        ["demote", "cosmos"],
        ["upgrade", "0.29.3", "ghcr.io/juanfont/headscale:0.29.3"],
    ],
)
def test_without_the_tools_a_runbook_refuses_in_one_line_before_anything(tmp_path, monkeypatch, argv) -> None:
    project = _copy(tmp_path)
    before = _files(project)
    _no_tools(tmp_path, monkeypatch)
    printed = Printed()
    assert main(argv, project_dir=project, out=printed, ask=_never_asked) == 2
    assert printed == [
        'refused: `pulumi` and `kubectl` not found on PATH: install them as docs/installation.md, step 1 "Tools and '
        'access" says; --plan prints what would run without them'
    ]
    assert _files(project) == before


def test_make_names_its_own_variables_and_plans_without_a_cli(tmp_path: Path) -> None:
    """`make promote … PLAN=1` as the issue's user types it, in the checkout, with no `pulumi` on PATH: the plan,
    exit 0, and the files untouched; without PLAN=1 one refusal that names PLAN=1, not --plan."""
    before = _files(PROJECT_DIR)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    make = shutil.which("make") or "make"
    args = [make, "-s", "--no-print-directory", "promote", "SITE=cosmos", "LOST=hydra", "CONFIRM=hydra"]
    if shutil.which("pulumi", path=env["PATH"]):
        pytest.skip("a pulumi CLI is installed in /usr/bin or /bin: no machine without one to try")
    planned = subprocess.run([*args, "PLAN=1"], cwd=PROJECT_DIR, env=env, capture_output=True, text=True)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "plan: 5 command(s) would run, 2 skipped" in planned.stdout
    assert "Each `pulumi up` is previewed and asked for first (YES=1: applied without asking)." in planned.stdout
    assert "Without PLAN=1 the same command carries it out." in planned.stdout
    refused = subprocess.run(args, cwd=PROJECT_DIR, env=env, capture_output=True, text=True)
    assert refused.returncode == 2
    assert refused.stdout.splitlines() == [
        'refused: `pulumi` not found on PATH: install it as docs/installation.md, step 1 "Tools and access" says; '
        "PLAN=1 prints what would run without it"
    ]
    assert _files(PROJECT_DIR) == before


# ------------------------------------------------------------------------------------------------ a failed upgrade


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("0.30.0", "headscale-ha:headscale.version: is not supported; use a 0.28.x or 0.29.x release"),
        ("0.28.0", "VERSION 0.28.0 is older than headscale.version 0.29.2 in Pulumi.yaml"),
    ],
)
def test_an_upgrade_the_config_would_refuse_is_refused_before_any_write(tailnet, version, says) -> None:
    lab, cli = tailnet
    before = _files(lab.project_dir)
    code, printed = _runbook(cli, "upgrade", version, f"ghcr.io/juanfont/headscale:{version}")
    assert code == 2
    assert says in printed[-1]
    assert _ran(cli) == []
    assert _files(lab.project_dir) == before


def test_an_upgrade_stopped_before_its_first_up_puts_pulumi_yaml_back(on_0_28) -> None:
    """hydra's cluster is unreachable: its preview fails, nothing was applied, so the release edit is undone."""
    lab, cli = on_0_28
    before = _files(lab.project_dir)
    lab.world.lost.add("hydra")
    code, printed = _runbook(cli, "upgrade", "0.29.2", "ghcr.io/juanfont/headscale:0.29.2")
    assert code == 1
    assert f"`pulumi preview -s {HYDRA}` failed (exit status 255)" in printed[-1]
    assert "Nothing was applied, so Pulumi.yaml is as it was" in printed[-1]
    assert [kind for kind, _, _ in cli.runs] == ["preview"]
    assert _files(lab.project_dir) == before


def test_an_upgrade_stopped_after_an_up_started_keeps_the_release(on_0_28) -> None:
    """hydra's new pod never becomes ready: its `up` fails after applying, so Pulumi.yaml must keep saying what the
    stack now runs; the same command finishes the upgrade once the cause is fixed."""
    lab, cli = on_0_28
    lab.hydra.unready.add("headscale")
    code, printed = _runbook(cli, "upgrade", "0.29.2", "ghcr.io/juanfont/headscale:0.29.2")
    assert code == 1
    assert f"`pulumi up --yes -s {HYDRA}` failed" in printed[-1]
    assert "its edits stand" in printed[-1]
    assert _shared(lab)["headscale"]["value"]["version"] == "0.29.2"
    lab.hydra.unready.discard("headscale")
    again, printed = _runbook(cli, "upgrade", "0.29.2", "ghcr.io/juanfont/headscale:0.29.2")
    assert again == 0, "\n".join(printed + cli.printed)
    assert lab.headscale.version == "0.29.2"


def test_from_make_the_confirmation_hint_names_confirm_not_the_flag(tailnet, monkeypatch) -> None:
    """The user typed `make promote SITE=cosmos LOST=hydra`: the hint says CONFIRM=hydra, which make passes on."""
    lab, cli = tailnet
    lab.world.lost.add("hydra")
    monkeypatch.setenv(VIA_MAKE_ENV, "1")
    code, printed = _runbook(cli, "promote", "cosmos", "--lost", "hydra")
    assert code == 2
    assert printed[-1] == (
        "refused: not confirmed: skipping hydra's fence needs CONFIRM=hydra (or typing hydra at the prompt)"
    )
    assert cli.calls == []


# ------------------------------------------------------------------------------------------------ asking first


def test_without_a_terminal_or_yes_a_runbook_refuses_before_anything(tailnet) -> None:
    _, cli = tailnet
    code, printed = _runbook(cli, "promote", "cosmos", yes=False)
    assert code == 2
    assert printed[-1] == (
        "refused: every `pulumi up` a runbook runs shows its preview and asks before it acts, and there is no "
        "terminal to ask at: run it at one, or give --yes to apply without asking"
    )
    assert cli.calls == []


def test_at_a_terminal_each_up_is_previewed_then_asked_for(tailnet) -> None:
    lab, cli = tailnet
    asked: list[str] = []
    code, printed = _runbook(cli, "promote", "cosmos", yes=False, ask=lambda prompt: asked.append(prompt) or "yes")
    assert code == 0, "\n".join(printed + cli.printed)
    pulumi = [" ".join(call) for call in cli.commands("pulumi") if call[1] in {"preview", "up"}]
    ups = [line for line in pulumi if line.startswith("pulumi up ")]
    assert pulumi == [line for up in ups for line in (up.replace("up --yes", "preview"), up)], "a preview before each"
    assert asked == [f"Apply this preview to {up.rsplit(' ', 1)[-1]}? Type yes to apply: " for up in ups]
    assert lab.world.dns_site == "cosmos"


def test_an_upgrade_declined_at_the_question_applies_nothing_and_puts_the_file_back(on_0_28) -> None:
    """The active's preview is the runbook's own step: the question follows it, with no second preview."""
    lab, cli = on_0_28
    before = _files(lab.project_dir)
    code, printed = _runbook(
        cli, "upgrade", "0.29.2", "ghcr.io/juanfont/headscale:0.29.2", yes=False, ask=lambda prompt: "no"
    )
    assert code == 1
    assert "not applied: the answer was 'no', not yes" in printed[-1]
    assert "Nothing was applied, so Pulumi.yaml is as it was" in printed[-1]
    assert [(kind, stack) for kind, stack, _ in cli.runs] == [("preview", "hydra")]
    assert _files(lab.project_dir) == before
    assert lab.headscale.version == "0.28.0"
