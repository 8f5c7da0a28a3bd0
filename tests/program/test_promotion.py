"""Promotion as a user runs it: the edits and `pulumi up`s the `failover` output names, applied to the stack files.

Each `pulumi up -s <stack>` of a step is an offline plan of that stack, reading what the other stacks last
"deployed" (their planned outputs) and the identity stack's outputs through StackReferences, as the engine would.
Between steps every stack is planned too: it plans, or (half-way through a promotion) its config is refused
because its role disagrees with `tailnet.activeSite`; never are two sites active.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from headscale_ha.program.config import ConfigError
from tests.support.manifest_validator import validate
from tools.harness import ProgramRun
from tools.plan import plan_identity, plan_stack, write_rendered

UP = re.compile(r"pulumi up --yes -s (\S+)")
HALF_PROMOTED = "role: disagrees with tailnet.activeSite"


def _headscale_replicas(run: ProgramRun) -> int:
    (deployment,) = [
        o for o in run.kubernetes_objects() if o["kind"] == "Deployment" and o["metadata"]["name"] == "headscale"
    ]
    return deployment["spec"]["replicas"]


class Tailnet:
    """A scratch project and what each stack last deployed (its planned outputs), by fully qualified name."""

    def __init__(self, project: Path, shared_dir: Path, out: Path) -> None:
        self.project, self.shared_dir, self.out = project, shared_dir, out
        tailnet = self.shared_config()
        self.prefix: str = tailnet["stackPrefix"]
        identity = plan_identity()
        self.fingerprint: str = identity.outputs["fingerprint"]
        self.deployed: dict[str, dict[str, Any]] = {tailnet["identityStack"]: identity.exports}
        self.ups: list[str] = []
        self.validated = 0

    # ------------------------------------------------------------------------------------------ the files

    def _document(self, file: str) -> dict[str, Any]:
        return yaml.safe_load((self.project / file).read_text())

    def shared_config(self) -> dict[str, Any]:
        return self._document("Pulumi.yaml")["config"]["tailnet"]["value"]

    def stacks(self) -> dict[str, str]:
        """Site name → stack (short name), from Pulumi.yaml's sites."""
        return {site["name"]: site.get("stack", site["name"]) for site in self.shared_config()["sites"]}

    def edit(self, edit: dict[str, str]) -> None:
        """Apply one edit named by a step: exactly the file and key it names."""
        document = self._document(edit["file"])
        if edit["file"] == "Pulumi.yaml":
            assert edit["key"] == "tailnet.activeSite"
            document["config"]["tailnet"]["value"]["activeSite"] = edit["value"]
        else:
            assert edit["key"] in document["config"], f"{edit['file']} has no {edit['key']} to change"
            document["config"][edit["key"]] = edit["value"]
        (self.project / edit["file"]).write_text(yaml.safe_dump(document, sort_keys=False))

    # ------------------------------------------------------------------------------------------ the stacks

    def plan(self, stack: str) -> ProgramRun:
        return plan_stack(stack, project_dir=self.project, stack_outputs=dict(self.deployed))

    def up(self, qualified: str) -> ProgramRun:
        """`pulumi up -s <qualified>`: plan it against the others' last outputs, validate, record its outputs."""
        assert qualified.startswith(f"{self.prefix}/"), f"{qualified} is not a stack of {self.prefix}"
        stack = qualified.removeprefix(f"{self.prefix}/")
        assert stack in self.stacks().values(), f"{qualified} names no site's stack"
        run = self.plan(stack)
        self.check(run)
        self.validate(run)
        self.deployed[qualified] = run.exports
        self.ups.append(stack)
        return run

    def check(self, run: ProgramRun) -> None:
        """One identity whatever the role, from the identity stack; a standby follows the configured active."""
        assert run.outputs["identityFingerprint"] == self.fingerprint
        assert not [r for r in run.resources if r.type.startswith("random:index/randomBytes")], "no site mints keys"
        active = self.shared_config()["activeSite"]
        if run.outputs["endpoints"]["role"] == "standby":
            assert run.outputs["follows"]["stack"] == f"{self.prefix}/{self.stacks()[active]}"
            assert run.outputs["follows"]["identityFingerprint"] == self.fingerprint
            assert _headscale_replicas(run) == 0
        else:
            assert run.outputs["endpoints"]["site"] == active
            assert _headscale_replicas(run) == 1

    def validate(self, run: ProgramRun) -> None:
        self.validated += 1
        files = [f for f in write_rendered(run, self.out / f"{self.validated}-{run.stack}") if f.suffix == ".yaml"]
        result = validate(self.shared_dir, files)
        assert result.returncode == 0, result.stdout + result.stderr

    def every_stack(self) -> dict[str, ProgramRun | ConfigError]:
        """Plan every stack as its files stand now; at most one is active, the others plan or are half-promoted."""
        runs: dict[str, ProgramRun | ConfigError] = {}
        for stack in self.stacks().values():
            try:
                runs[stack] = self.plan(stack)
            except ConfigError as error:
                runs[stack] = error
        refused = [error for error in runs.values() if isinstance(error, ConfigError)]
        assert all(any(HALF_PROMOTED in problem for problem in error.problems) for error in refused), refused
        planned = [run for run in runs.values() if isinstance(run, ProgramRun)]
        for run in planned:
            self.check(run)
        assert len([run for run in planned if run.outputs["endpoints"]["role"] == "active"]) <= 1
        return runs

    def promote(self, steps: list[dict[str, Any]]) -> None:
        """Run the steps as written: edits, then each `pulumi up -s`; plan every stack after each step."""
        for step in steps:
            for edit in step["edits"]:
                self.edit(edit)
            for qualified in _ups(step):
                self.up(qualified)
            self.every_stack()

    def settled(self, active: str) -> dict[str, ProgramRun]:
        """After a promotion every stack plans, validates, and exactly ``active`` serves."""
        runs = self.every_stack()
        assert all(isinstance(run, ProgramRun) for run in runs.values()), runs
        planned = {stack: run for stack, run in runs.items() if isinstance(run, ProgramRun)}
        for run in planned.values():
            self.validate(run)
        assert [
            run.outputs["endpoints"]["site"] for run in planned.values() if run.outputs["endpoints"]["role"] == "active"
        ] == [active]
        return planned


@pytest.fixture
def tailnet(project_copy, shared_dir: Path, tmp_path: Path):
    def make(**stack_files: str) -> Tailnet:
        return Tailnet(project_copy(**stack_files), shared_dir, tmp_path / "rendered")

    return make


def _ups(step: dict[str, Any]) -> list[str]:
    """The stacks a step's commands `pulumi up`, in order."""
    return [stack for command in step["commands"] for stack in UP.findall(command["run"])]


def _runs(step: dict[str, Any]) -> list[str]:
    return [command["run"] for command in step["commands"]]


def _first_deploy(tailnet: Tailnet) -> dict[str, ProgramRun]:
    """`make plan`'s order: the active first, then the standbys, each reading what was deployed before."""
    active = tailnet.stacks()[tailnet.shared_config()["activeSite"]]
    order = [active, *[stack for stack in tailnet.stacks().values() if stack != active]]
    return {stack: tailnet.up(f"{tailnet.prefix}/{stack}") for stack in order}


def test_promotion_walks_hydra_to_cosmos_and_back_with_one_identity(tailnet) -> None:
    net = tailnet()
    runs = _first_deploy(net)
    net.settled("hydra")

    net.promote(runs["cosmos"].outputs["failover"]["cosmos"]["steps"])
    assert net.ups[-2:] == ["hydra", "cosmos"], "fence the old active first, then promote"
    back = net.settled("cosmos")

    net.promote(back["hydra"].outputs["failover"]["hydra"]["steps"])
    assert net.ups[-2:] == ["cosmos", "hydra"]
    net.settled("hydra")
    # The files are back where they started: the walk is a cycle.
    assert net.shared_config()["activeSite"] == "hydra"
    assert yaml.safe_load((net.project / "Pulumi.hydra.yaml").read_text())["config"]["headscale-ha:role"] == "active"
    assert yaml.safe_load((net.project / "Pulumi.cosmos.yaml").read_text())["config"]["headscale-ha:role"] == "standby"


def test_the_active_lists_the_same_promotion_for_each_standby(tailnet) -> None:
    """Asked from the active, the steps to cosmos run the same stacks in the same order as cosmos's own."""
    net = tailnet()
    runs = _first_deploy(net)
    from_active, from_standby = runs["hydra"].outputs["failover"], runs["cosmos"].outputs["failover"]
    assert set(from_active) == set(from_standby) == {"cosmos"}

    def shape(steps: list[dict[str, Any]]) -> list[tuple[str, list[tuple[str, str, str]], list[str]]]:
        return [(s["step"], [(e["file"], e["key"], e["value"]) for e in s["edits"]], _ups(s)) for s in steps]

    assert shape(from_active["cosmos"]["steps"]) == shape(from_standby["cosmos"]["steps"])


def test_a_half_promoted_tailnet_refuses_the_stack_not_yet_changed(tailnet) -> None:
    """After the fence, cosmos's file still says standby while activeSite says cosmos: its `pulumi up` refuses."""
    net = tailnet()
    runs = _first_deploy(net)
    fence = runs["cosmos"].outputs["failover"]["cosmos"]["steps"]
    fence = next(step for step in fence if step["step"] == "fence the old active")
    net.promote([fence])
    with pytest.raises(ConfigError, match=HALF_PROMOTED):
        net.plan("cosmos")
    assert _headscale_replicas(net.plan("hydra")) == 0, "fenced: no writer anywhere until cosmos is promoted"


#: A third site whose stack and kube context are not its name.
LAB_SITE = {
    "name": "lab",
    "stack": "lab3",
    "kubeContext": "admin@lab",
    "gatewayIp": "172.29.250.10",
    "lbPool": "172.29.250.0/28",
    "publicAddress": "192.0.2.30",
    "routes": ["10.246.0.0/16", "10.98.0.0/16"],
}
LAB_STACK = """\
config:
  headscale-ha:role: standby
  headscale-ha:cluster:
    name: lab
    nodes: 1
    workloadsOnControlPlane: true
    apiServer: {host: 10.30.0.10}
  headscale-ha:networkPolicy: {apiServerCidrs: [10.30.0.0/24]}
  headscale-ha:database:
    stage: sqlite
    postgres: {instances: 1}
  headscale-ha:gateway:
    routers: {replicas: 1}
    services: {replicas: 1}
"""


def _with_lab(net: Tailnet) -> Tailnet:
    document = yaml.safe_load((net.project / "Pulumi.yaml").read_text())
    document["config"]["tailnet"]["value"]["sites"].append(LAB_SITE)
    (net.project / "Pulumi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return net


def test_a_third_site_names_the_right_stacks_and_contexts(tailnet) -> None:
    net = _with_lab(tailnet(lab3=LAB_STACK))
    runs = _first_deploy(net)
    prefix = net.prefix
    assert set(runs["hydra"].outputs["failover"]) == {"cosmos", "lab"}, "the active lists each standby as a target"
    assert set(runs["cosmos"].outputs["failover"]) == {"cosmos"}, "a standby lists its own promotion"
    to_lab = runs["lab3"].outputs["failover"]["lab"]
    assert to_lab["command"] == "make promote SITE=lab"
    assert to_lab["ifActiveLost"]["command"] == "make promote SITE=lab LOST=hydra"
    steps = {step["step"]: step for step in to_lab["steps"]}
    assert list(steps) == ["fence the old active", "promote the data", "follow the new active"]
    fence, promote = steps["fence the old active"], steps["promote the data"]
    assert [(e["file"], e["key"], e["value"]) for e in fence["edits"]] == [
        ("Pulumi.yaml", "tailnet.activeSite", "lab"),
        ("Pulumi.hydra.yaml", "headscale-ha:role", "standby"),
    ]
    assert _ups(fence) == [f"{prefix}/hydra"]
    assert any(run.startswith("kubectl --context hydra ") for run in _runs(fence))
    assert [(e["file"], e["key"], e["value"]) for e in promote["edits"]] == [
        ("Pulumi.lab3.yaml", "headscale-ha:role", "active")
    ]
    assert _runs(promote) == [
        f"pulumi config set -s {prefix}/lab3 headscale-ha:role active",
        f"pulumi up --yes -s {prefix}/lab3",
        "kubectl --context admin@lab -n headscale rollout status deployment/headscale --timeout=900s",
    ]
    assert _ups(steps["follow the new active"]) == [f"{prefix}/cosmos"]
    assert "(192.0.2.30)" in to_lab["dns"]
    # The same promotion, asked from the active, targets the same stacks (the lab's namespace read from its stack).
    from_active = {step["step"]: step for step in runs["hydra"].outputs["failover"]["lab"]["steps"]}
    assert _runs(from_active["promote the data"])[-1].startswith(
        f'kubectl --context admin@lab -n "$(pulumi stack output -s {prefix}/lab3 namespace)" '
    )

    to_lab = to_lab["steps"]
    net.promote(to_lab)
    assert net.ups[-3:] == ["hydra", "lab3", "cosmos"]
    settled = net.settled("lab")
    assert settled["cosmos"].outputs["follows"]["stack"] == f"{prefix}/lab3"
    assert settled["hydra"].outputs["follows"]["stack"] == f"{prefix}/lab3"
