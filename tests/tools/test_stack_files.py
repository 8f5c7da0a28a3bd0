"""Stack config merged the way the Pulumi CLI merges it."""

from __future__ import annotations

import json

import pytest

from tools.harness import PROJECT_DIR
from tools.stack_files import SECURE_PLACEHOLDER, StackFileError, list_stacks, read_stack_settings


def test_shipped_stacks_are_found() -> None:
    assert list_stacks(PROJECT_DIR) == ["cosmos", "hydra"]


def test_project_defaults_and_stack_values_are_merged(project_copy) -> None:
    project = project_copy(
        lab="""
        config:
          headscale-ha:role: standby
          headscale-ha:endpoint: {ttl: 30}
          kubernetes:context: lab
        """
    )
    settings = read_stack_settings(project, "lab")
    assert settings.project == "headscale-ha"
    assert settings.config["headscale-ha:role"] == "standby"
    assert json.loads(settings.config["headscale-ha:tailnet"])["publicHostname"] == "headscale.example.com"
    assert settings.config["kubernetes:context"] == "lab"


def test_a_stack_object_replaces_the_project_object_whole(project_copy) -> None:
    project = project_copy(lab="config:\n  headscale-ha:endpoint: {ttl: 30}\n")
    # Pulumi.yaml sets endpoint.failover; the CLI does not merge objects, so it is gone here too.
    assert json.loads(read_stack_settings(project, "lab").config["headscale-ha:endpoint"]) == {"ttl": 30}


def test_scalars_reach_the_program_as_the_cli_sends_them(project_copy) -> None:
    project = project_copy(lab="config:\n  headscale-ha:flag: true\n  headscale-ha:count: 3\n")
    config = read_stack_settings(project, "lab").config
    assert (config["headscale-ha:flag"], config["headscale-ha:count"]) == ("true", "3")


def test_secure_values_become_labelled_placeholders_and_secret_keys(project_copy) -> None:
    project = project_copy(
        lab="""
        config:
          headscale-ha:oidcClientSecret:
            secure: v1:AAAA
          headscale-ha:nested:
            plain: 1
            inner:
              secure: v1:BBBB
        """
    )
    settings = read_stack_settings(project, "lab")
    assert settings.config["headscale-ha:oidcClientSecret"] == SECURE_PLACEHOLDER.format(
        key="headscale-ha:oidcClientSecret"
    )
    assert json.loads(settings.config["headscale-ha:nested"])["plain"] == 1
    assert settings.secret_keys == {"headscale-ha:oidcClientSecret", "headscale-ha:nested"}
    assert "v1:AAAA" not in json.dumps(settings.config)


def test_placeholders_can_be_well_formed(project_copy) -> None:
    project = project_copy(lab="config:\n  headscale-ha:noisePrivateKey:\n    secure: v1:AAAA\n")
    settings = read_stack_settings(
        project, "lab", placeholders={"headscale-ha:noisePrivateKey": lambda: "privkey:" + "0" * 64}
    )
    assert settings.config["headscale-ha:noisePrivateKey"] == "privkey:" + "0" * 64


def test_stack_keys_need_a_namespace(project_copy) -> None:
    project = project_copy(lab="config:\n  role: active\n")
    with pytest.raises(StackFileError, match=r"config key 'role' needs a namespace, e\.g\. headscale-ha:role"):
        read_stack_settings(project, "lab")


def test_missing_stack_file_lists_the_stacks(project_copy) -> None:
    with pytest.raises(StackFileError, match=r"no stack file Pulumi.nope.yaml \(stacks here: cosmos, hydra\)"):
        read_stack_settings(project_copy(), "nope")


def test_project_objects_must_use_value(project_copy) -> None:
    project = project_copy()
    text = (project / "Pulumi.yaml").read_text().replace("  headscale:\n    value:\n", "  headscale:\n")
    (project / "Pulumi.yaml").write_text(text)
    with pytest.raises(StackFileError, match=r"config.headscale: an object value must be declared as `value:`"):
        read_stack_settings(project, "hydra")


def test_keys_of_every_namespace_reach_the_program_as_written(project_copy) -> None:
    """The CLI passes every namespace on, a typo'd one too: the program refuses it (it names the file itself)."""
    project = project_copy(
        lab="config:\n  headscale-ha:role: active\n  headscaleha:gateway: {routers: {replicas: 2}}\n"
    )
    with (project / "Pulumi.yaml").open("a") as project_file:
        project_file.write("  headscale:endpoint:\n    value: {ttl: 30}\n  kubernetes:context:\n    value: lab\n")
    config = read_stack_settings(project, "lab").config
    assert json.loads(config["headscaleha:gateway"]) == {"routers": {"replicas": 2}}
    assert json.loads(config["headscale:endpoint"]) == {"ttl": 30}
    assert config["kubernetes:context"] == "lab"
    assert "headscale-ha:gateway" not in config
