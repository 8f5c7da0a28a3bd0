"""The offline harness is as strict about duplicate URNs as the real engine, on the same program.

``tools/harness.py`` fails a run that registers one URN twice (``DuplicateUrnError``) because the engine refuses
such a program; this module checks that claim against the real CLI, not a reading of its source. Each shape is
one tiny project, run by ``pulumi preview`` and ``pulumi up`` and then by ``tools.plan.plan_stack`` (what
``make plan`` runs), so both judge the same files.

A URN is ``stack::project::<ancestor types>$<type>::<name>``: the ancestors' *types*, never their names. So one
name under two parents of one type is a duplicate, and under two parents of different types is not. The SDK's mock
monitor (``pulumi/runtime/mocks.py`` ``make_urn``) keeps only the parent's last type and puts
``pulumi:pulumi:Stack$`` before a root resource's type; this test found that (the ``grandparents`` case collided
offline only), and the harness now forms URNs by the engine's rule (``tools.harness.engine_urn``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.real_pulumi import PulumiCli
from tools.harness import DuplicateUrnError
from tools.plan import plan_stack

pytestmark = pytest.mark.real_tool("pulumi")

VENV = Path(__file__).resolve().parents[2] / ".venv"
PROJECT, STACK = "tiny", "dev"
#: The engine's words (pkg/diag/errors.go, GetDuplicateResourceURNError), as the CLI prints them.
MESSAGE = "Duplicate resource URN '{urn}'; try giving it a unique name"
#: What the engine may add when it stops the program mid-registration (seen under load).
SHUTDOWN = ": Resource monitor has terminated, shutting down"
HEAD = "import pulumi\nfrom pulumi import ComponentResource as C, ResourceOptions as O\n"
UNDER_A_B = 'C("test:index:Thing", "same", opts=O(parent=a))\nC("test:index:Thing", "same", opts=O(parent=b))\n'


@dataclass(frozen=True)
class Shape:
    """A program, and the URN (its type path and name) the real engine refuses in it; None when it accepts it."""

    body: str
    refused: str | None


SHAPES = {
    "one-name-twice": Shape('C("test:index:Thing", "same")\n' * 2, "test:index:Thing::same"),
    "two-parents-one-type": Shape(
        'a = C("test:index:Box", "a")\nb = C("test:index:Box", "b")\n' + UNDER_A_B,
        "test:index:Box$test:index:Thing::same",
    ),
    "two-parent-types": Shape('a = C("test:index:Box", "a")\nb = C("test:index:Crate", "b")\n' + UNDER_A_B, None),
    "two-types": Shape('C("test:index:Thing", "same")\nC("test:index:Other", "same")\n', None),
    "grandparents": Shape(
        'g = C("test:index:Box", "g")\nh = C("test:index:Crate", "h")\n'
        'a = C("test:index:Mid", "a", opts=O(parent=g))\nb = C("test:index:Mid", "b", opts=O(parent=h))\n' + UNDER_A_B,
        None,
    ),
}


def urn(type_path: str) -> str:
    return f"urn:pulumi:{STACK}::{PROJECT}::{type_path}"


def tiny_project(tmp_path: Path, body: str) -> tuple[PulumiCli, Path]:
    """The program as a project of its own, with stack ``dev`` on the CLI's own file backend.

    PulumiCli is the CLI as real_pulumi runs it (plugin PATH, PULUMI_HOME, backend, passphrase); the site
    project it copies stays unused, every command runs in the tiny project."""
    cli = PulumiCli(tmp_path)
    project = tmp_path / PROJECT
    project.mkdir()
    runtime = {"name": "python", "options": {"virtualenv": str(VENV)}}
    (project / "Pulumi.yaml").write_text(json.dumps({"name": PROJECT, "runtime": runtime}))  # JSON is YAML
    (project / "__main__.py").write_text(HEAD + body)
    cli.run("stack", "init", STACK, cwd=project).check()
    return cli, project


def assert_refused(cli: PulumiCli, project: Path, type_path: str) -> None:
    """preview and up both fail with the engine's message, and the state holds no resource but the stack."""
    for command in (("preview",), ("up", "--yes")):
        run = cli.run(*command, cwd=project)
        assert run.returncode != 0, f"pulumi {' '.join(command)} accepted a duplicate URN"
        first, *rest = [message.strip() for message in run.diagnostics]
        assert first == f"same: {MESSAGE.format(urn=urn(type_path))}"
        # Under load the program may still be registering when the engine stops it; that is all that may follow.
        assert set(rest) <= {SHUTDOWN}, rest
    state = json.loads(cli.run("stack", "export", cwd=project).check().stdout)
    kept = {resource["type"] for resource in state["deployment"].get("resources", [])}
    assert kept <= {"pulumi:pulumi:Stack"}, f"a refused update created {kept}"


@pytest.mark.parametrize("shape", [pytest.param(shape, id=key) for key, shape in SHAPES.items()])
def test_the_harness_refuses_exactly_what_the_engine_refuses(tmp_path: Path, shape: Shape) -> None:
    """The real engine's verdict first; then the harness, on the same project and stack file, must agree."""
    cli, project = tiny_project(tmp_path, shape.body)
    if shape.refused is None:
        run = cli.run("preview", cwd=project).check()
        assert [step.name for step in run.steps].count("same") == 2, "the engine took both"
        plan = plan_stack(STACK, project_dir=project, program=project / "__main__.py")
        assert [resource.name for resource in plan.resources].count("same") == 2
        return
    assert_refused(cli, project, shape.refused)
    with pytest.raises(DuplicateUrnError) as refused:
        plan_stack(STACK, project_dir=project, program=project / "__main__.py")
    assert str(refused.value) == MESSAGE.format(urn=urn(shape.refused))
