"""examples/yaml: the component package from Pulumi YAML, its properties checked against the committed schema and
the program planned offline, each component built as the plugin builds it."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.yaml_program import Program, YamlProgramError, check, load, run
from tools.harness import PROJECT_DIR, SECRET, run_program
from tools.package_schema import SCHEMA

EXAMPLE = PROJECT_DIR / "examples" / "yaml" / "Pulumi.yaml"


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(SCHEMA.read_text())


def test_every_property_of_the_example_is_one_the_schema_accepts(schema: dict) -> None:
    assert check(load(EXAMPLE), schema) == []


def test_the_package_is_the_plugin_directory_of_this_repository() -> None:
    packages = yaml.safe_load(EXAMPLE.read_text())["packages"]
    assert packages == {"headscale-ha": "../../plugin"}
    assert (EXAMPLE.parent / packages["headscale-ha"] / "PulumiPlugin.yaml").is_file()


def _with(program: Program, resource: str, **properties: object) -> Program:
    changed = {**program.resources[resource], "properties": {**program.resources[resource]["properties"], **properties}}
    return Program(program.config, {**program.resources, resource: changed}, program.outputs)


@pytest.mark.parametrize(
    ("resource", "properties", "problem"),
    [
        ("backups", {"colour": "red"}, "backups.colour: not an input of this type"),
        ("backups", {"nfs": {"server": "nas", "path": "/x", "sise": "1Gi"}}, "backups.nfs.sise: not an input"),
        ("headscale", {"sqlite": {}}, "headscale.sqlite.backup: is required"),
        ("headplane", {"replicas": "one"}, "headplane.replicas: expected integer, got 'one'"),
        ("public", {"endpoint": {"failover": "dns"}}, "public.endpoint.failover: expected one of"),
        ("headplane", {"publicHostname": "${public.hostname}"}, "a plain input takes no resource output"),
        ("headplane", {"headscaleUrl": "${nowhere}"}, "names neither a config value nor a resource"),
    ],
)
def test_a_property_the_schema_refuses_is_reported_at_its_path(
    schema: dict, resource: str, properties: dict, problem: str
) -> None:
    problems = check(_with(load(EXAMPLE), resource, **properties), schema)
    assert len(problems) == 1
    assert problem in problems[0]


def test_a_missing_required_input_is_reported(schema: dict) -> None:
    program = load(EXAMPLE)
    properties = {k: v for k, v in program.resources["public"]["properties"].items() if k != "hostname"}
    broken = Program(
        program.config, {**program.resources, "public": {**program.resources["public"], "properties": properties}}
    )
    assert check(broken, schema) == ["public.hostname: is required"]


def test_the_example_plans_offline_with_the_server_ui_and_endpoint() -> None:
    planned = run_program(project="tailnet-yaml", stack="dev", config={}, program=lambda: run(load(EXAMPLE)))
    top = sorted((r.type, r.name) for r in planned.resources if r.parent_urn.split("::")[2] == "pulumi:pulumi:Stack")
    assert top == [
        ("headscale-ha:index:BackupVolume", "backups"),
        ("headscale-ha:index:Headplane", "headplane"),
        ("headscale-ha:index:HeadscaleServer", "headscale"),
        ("headscale-ha:index:PublicEndpoint", "public"),
    ]
    assert planned.outputs["url"] == "https://vpn.example.org"
    assert planned.outputs["apiUrl"] == "http://headscale.headscale.svc.cluster.local:8080"
    # Headplane signs its backups with the key HeadscaleServer derives: an output of one, a secret input of the other.
    assert planned.named("headplane-backup-backup-key").inputs["stringData"] == {"backup.key": SECRET}
    server = planned.named("headscale-identity")
    assert server.inputs["stringData"] == {"noise.key": SECRET, "derp.key": SECRET}


def test_a_program_with_a_bad_property_does_not_run() -> None:
    program = _with(load(EXAMPLE), "backups", namespace=7)
    registered: list = []
    with pytest.raises(YamlProgramError, match=r"backups\.namespace: expected string, got 7"):
        run_program(project="p", stack="s", config={}, program=lambda: run(program), registered=registered)
    assert registered == []
