"""The mocks harness: isolated runs, parent links, secrets kept as markers."""

from __future__ import annotations

import pytest

from program.config import ConfigError
from tools.harness import PROJECT_DIR, RegisteredResource, run_program
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
