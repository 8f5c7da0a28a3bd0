"""The mocks harness: isolated runs, parent links, secrets kept as markers, stack references as the SDK has them."""

from __future__ import annotations

import sys

import pulumi_kubernetes as k8s
import pytest

from headscale_ha.program.config import ConfigError
from tools.harness import (
    PROJECT_DIR,
    SECRET,
    UNKNOWN,
    DuplicateUrnError,
    RegisteredResource,
    SecretOutput,
    UnknownStackError,
    run_program,
    secret,
    stack_reference_state,
)
from tools.stack_files import read_stack_settings


def test_runs_do_not_leak_into_each_other(run_stack) -> None:
    first = run_stack("hydra")
    second = run_stack("cosmos")
    assert {r.name for r in first.resources}.isdisjoint({r.name for r in second.resources})
    assert all(":cosmos::" in r.urn for r in second.resources)
    assert run_stack("hydra").resources.__len__() == len(first.resources)


def test_program_errors_propagate_and_report_what_was_registered(tmp_path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(
        "import pulumi_kubernetes as k8s\n"
        "k8s.core.v1.Namespace('ok', metadata={'name': 'ok'})\n"
        "raise RuntimeError('boom')\n"
    )
    registered: list[RegisteredResource] = []
    with pytest.raises(RuntimeError, match="boom"):
        run_program(project="p", stack="s", config={}, program=program, registered=registered)
    assert [r.name for r in registered] == ["ok"]


def test_a_callable_program_runs_in_place_of_a_file_and_fails_the_same_way() -> None:
    """One component (here a Namespace) built by a callable: registered under the run's stack, no sys.path change,
    and its error propagates with what it had registered."""
    path = list(sys.path)
    run = run_program(project="p", stack="s", config={}, program=lambda: k8s.core.v1.Namespace("ok"))
    assert [(r.name, r.type) for r in run.resources] == [("ok", "kubernetes:core/v1:Namespace")]
    assert all(":s::p::" in r.urn for r in run.resources)
    assert sys.path == path

    def failing() -> None:
        k8s.core.v1.Namespace("first")
        raise RuntimeError("boom")

    registered: list[RegisteredResource] = []
    with pytest.raises(RuntimeError, match="boom"):
        run_program(project="p", stack="s", config={}, program=failing, registered=registered)
    assert [r.name for r in registered] == ["first"]


def test_a_urn_registered_twice_fails_the_run_as_the_engine_does() -> None:
    """The engine refuses a program that registers one URN twice ("Duplicate resource URN"); so does the offline run,
    which let two `tailnet.users` of one name through before (issue 38). The same name under another parent, or of
    another type, is another URN."""

    def twice() -> None:
        k8s.core.v1.Namespace("same")
        k8s.core.v1.Namespace("same")

    with pytest.raises(
        DuplicateUrnError, match=r"Duplicate resource URN 'urn:pulumi:s::p::[^']*kubernetes:core/v1:Namespace::same'"
    ):
        run_program(project="p", stack="s", config={}, program=twice)

    def distinct() -> None:
        k8s.core.v1.Namespace("same")
        k8s.core.v1.ConfigMap("same")

    run = run_program(project="p", stack="s", config={}, program=distinct)
    assert len(run.resources) == 2


def test_config_error_comes_before_any_resource() -> None:
    settings = read_stack_settings(PROJECT_DIR, "hydra")
    config = {**settings.config, "headscale-ha:role": "primary"}
    registered: list[RegisteredResource] = []
    with pytest.raises(ConfigError, match="headscale-ha:role: "):
        run_program(project=settings.project, stack="hydra", config=config, registered=registered)
    assert registered == []


def test_secret_outputs_and_inputs_are_markers(tmp_path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(
        "import pulumi, pulumi_kubernetes as k8s\n"
        "s = pulumi.Output.secret('hunter2')\n"
        "k8s.core.v1.ConfigMap('cm', metadata={'name': 'cm'}, data={'pw': s, 'user': 'bob'})\n"
        "pulumi.export('pw', s)\n"
        "pulumi.export('nested', {'user': 'bob', 'pw': s})\n"
    )
    run = run_program(project="p", stack="s", config={}, program=program)
    (cm,) = run.resources
    assert repr(cm.inputs["data"]["pw"]) == "[secret]"
    assert cm.inputs["data"]["user"] == "bob"
    assert repr(run.outputs["pw"]) == "[secret]"
    assert run.outputs["nested"]["user"] == "bob"
    assert repr(run.outputs["nested"]["pw"]) == "[secret]"
    assert "hunter2" not in repr(run)


REFERENCING = (
    "import pulumi\n"
    "ref = pulumi.StackReference('ref', stack_name='org/other/prod')\n"
    "pulumi.export('plain', ref.require_output('plain'))\n"
    "pulumi.export('keys', ref.require_output('keys'))\n"
    "pulumi.export('noise', ref.require_output('keys').apply(lambda keys: keys['noise']))\n"
    "pulumi.export('absent', ref.get_output('absent'))\n"
)
OTHER = {"org/other/prod": {"plain": "fp", "keys": secret({"noise": "privkey:n"})}}


def test_a_stack_reference_reads_the_given_outputs_and_their_secrecy(tmp_path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(REFERENCING)
    run = run_program(project="p", stack="s", config={}, program=program, stack_outputs=OTHER)
    assert run.outputs["plain"] == "fp"
    assert run.outputs["keys"] is SECRET, "an output the referenced stack marks secret stays secret"
    assert run.outputs["noise"] is SECRET, "and so does what is derived from it"
    assert run.outputs["absent"] is None, "get_output of a missing output is None (the SDK)"
    (reference,) = [r for r in run.resources if r.type == "pulumi:pulumi:StackReference"]
    assert reference.inputs["name"] == "org/other/prod"
    assert "privkey:n" not in repr(run)


def test_exports_keep_secret_values_for_a_later_run(tmp_path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(REFERENCING)
    run = run_program(project="p", stack="s", config={}, program=program, stack_outputs=OTHER)
    assert run.exports["plain"] == "fp"
    assert isinstance(run.exports["keys"], SecretOutput)
    assert run.exports["keys"].value == {"noise": "privkey:n"}
    assert repr(run.exports["keys"]) == "[secret]"
    # Fed to the next run, the planned outputs read back as they were planned.
    again = run_program(
        project="p", stack="s", config={}, program=program, stack_outputs={"org/other/prod": run.exports}
    )
    assert again.outputs == run.outputs


def test_an_unknown_stack_fails_the_run(tmp_path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(REFERENCING)
    for given in (None, {}, {"org/other/staging": {"plain": "fp"}}):
        with pytest.raises(UnknownStackError, match="unknown stack 'org/other/prod'"):
            run_program(project="p", stack="s", config={}, program=program, stack_outputs=given)


def test_require_output_of_a_missing_output_fails_the_run(tmp_path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text(REFERENCING)
    with pytest.raises(KeyError, match="keys"):
        run_program(project="p", stack="s", config={}, program=program, stack_outputs={"org/other/prod": {"plain": 1}})


def test_stack_outputs_are_checked_before_the_run(tmp_path) -> None:
    program = tmp_path / "__main__.py"
    program.write_text("raise RuntimeError('the program never runs')\n")
    with pytest.raises(TypeError, match="pass secret"):
        run_program(project="p", stack="s", config={}, program=program, stack_outputs={"o/p/s": {"k": SECRET}})
    with pytest.raises(ValueError, match="org/project/stack"):
        run_program(project="p", stack="s", config={}, program=program, stack_outputs={"p/s": {}})


def test_reference_state_is_what_the_engine_reads() -> None:
    state = stack_reference_state("o/p/s", {"o/p/s": {"a": 1, "b": secret([1]), "c": {"d": secret("x")}, "u": UNKNOWN}})
    assert state["outputs"]["b"] == [1]
    assert state["outputs"]["c"] == {"d": "x"}
    assert state["secretOutputNames"] == ["b", "c"], "an output holding a secret is a secret output"
    assert state["outputs"]["u"] != UNKNOWN  # the wire form of an unknown value
