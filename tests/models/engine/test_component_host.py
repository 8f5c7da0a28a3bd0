"""The component host drives a real component provider plugin as the engine does, and records what it registers
the way an in-process run under mocks does (tests/models/engine/component_host.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pulumi
import pytest

from tests.models.engine.component_host import (
    ChildSignature,
    ComponentHost,
    ComponentHostError,
    ConstructError,
    RegisteredResource,
    children_signature,
    stack_urn,
)
from tests.support.sample_component_plugin.sample_components import Greeting
from tools.harness import SECRET, UNKNOWN, run_program, secret

PLUGIN = Path(__file__).resolve().parents[2] / "support" / "sample_component_plugin"
GREETING = "sample:index:Greeting"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
PASSWORD = "random:index/randomPassword:RandomPassword"
PREFIX = "urn:pulumi:unit::component-test::"


@pytest.fixture(scope="module")
def host() -> Iterator[ComponentHost]:
    with ComponentHost(PLUGIN) as started:
        yield started


def _config_map(component: str, index: int, message: object, namespace: object = "default") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{component}-{index}",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": component},
        },
        "data": {"message": message, "index": str(index)},
    }


def test_the_plugin_starts_as_the_engine_starts_it_and_reports_its_version(host: ComponentHost) -> None:
    assert host.version == "1.2.3"
    assert host.handshake_implemented is False  # the Python server leaves Handshake to the engine's fallback
    assert (host.configured.acceptSecrets, host.configured.acceptResources) == (True, True)


def test_the_schema_lists_the_component_with_its_documented_inputs_and_outputs(host: ComponentHost) -> None:
    schema = host.schema()
    assert (schema["name"], schema["version"]) == ("sample", "1.2.3")
    greeting = schema["resources"][GREETING]
    assert greeting["isComponent"] is True
    assert greeting["inputProperties"] == {
        "message": {"description": "The text every ConfigMap holds.", "type": "string"},
        "copies": {
            "description": "How many ConfigMaps hold the message (default 1).",
            "type": "integer",
            "plain": True,
        },
        "namespace": {"description": "The namespace of the ConfigMaps (default `default`).", "type": "string"},
    }
    assert greeting["requiredInputs"] == ["message"]
    assert greeting["properties"] == {
        "names": {
            "description": "The ConfigMaps' names, in order.",
            "type": "array",
            "items": {"description": "The ConfigMaps' names, in order.", "type": "string"},
        },
        "password": {"description": "The generated password (secret).", "type": "string"},
    }
    assert sorted(greeting["required"]) == ["names", "password"]


def test_construct_registers_the_component_then_its_children_under_it(host: ComponentHost) -> None:
    built = host.construct(GREETING, "hello", {"message": "hi", "copies": 2})

    component = f"{PREFIX}{GREETING}::hello"
    assert built.urn == component
    assert built.resources[0] == RegisteredResource(
        type=GREETING, name="hello", urn=component, parent_urn=None, custom=False, inputs={}
    )

    def child(type_: str, name: str, inputs: dict[str, object]) -> RegisteredResource:
        return RegisteredResource(
            type=type_,
            name=name,
            urn=f"{PREFIX}{GREETING}${type_}::{name}",
            parent_urn=component,
            custom=True,
            inputs=inputs,
        )

    assert sorted(built.child_resources(), key=lambda r: r.name) == [
        child(CONFIG_MAP, "hello-0", _config_map("hello", 0, "hi")),
        child(CONFIG_MAP, "hello-1", _config_map("hello", 1, "hi")),
        child(PASSWORD, "hello-password", {"length": 24, "special": False}),
    ]
    password = built.state["password"]
    assert isinstance(password, str)
    assert len(password) == 24
    assert built.state == {"names": ["hello-0", "hello-1"], "password": password}
    assert built.registered_outputs == {component: built.state}
    assert ("info", "greeting hello: 2 copies") in built.logs
    # Children register concurrently: their calls and records arrive in either order.
    assert sorted(call for call in built.monitor_calls if call[0] == "RegisterResource") == sorted(
        ("RegisterResource", r.type) for r in built.resources
    )


def test_each_construct_has_only_its_own_records(host: ComponentHost) -> None:
    first = host.construct(GREETING, "first", {"message": "one"})
    second = host.construct(GREETING, "second", {"message": "two"}, project="other", stack="dev")

    assert {r.name for r in first.resources} == {"first", "first-0", "first-password"}
    assert {r.name for r in second.resources} == {"second", "second-0", "second-password"}
    assert all(r.urn.startswith("urn:pulumi:dev::other::") for r in second.resources)
    assert [m for s, m in second.logs if s == "info"] == ["greeting second: 1 copies"]


def _in_process(name: str, args: Callable[[], dict[str, object]]) -> list[RegisteredResource]:
    """The component built by ``run_program`` from ``args()`` (called inside the run: Outputs need its loop)."""
    run = run_program(
        project="component-test",
        stack="unit",
        config={},
        program=lambda: Greeting(name, args()),  # type: ignore[arg-type] # the args the TypedDict describes
    )
    return run.resources


def test_a_construct_registers_what_the_same_component_registers_in_process(host: ComponentHost) -> None:
    built = host.construct(GREETING, "same", {"message": "hi", "copies": 3, "namespace": "apps"})
    local = _in_process("same", lambda: {"message": "hi", "copies": 3, "namespace": "apps"})

    (local_root,) = [r for r in local if r.type == GREETING]
    remote = children_signature(built.resources, built.urn)
    assert remote == children_signature(local, local_root.urn)
    assert [s.name for s in remote] == ["same-0", "same-1", "same-2", "same-password"]
    assert remote[0] == ChildSignature((CONFIG_MAP,), "same-0", True, _config_map("same", 0, "hi", "apps"))
    # URNs agree as they are: the engine's rule leaves the root stack's type out of a child's URN.
    assert {r.urn for r in built.child_resources()} == {r.urn for r in local if r.parent_urn == local_root.urn}
    assert local_root.urn == built.urn == f"{PREFIX}{GREETING}::same"
    under_stack = host.construct(
        GREETING,
        "same",
        {"message": "hi", "copies": 3, "namespace": "apps"},
        parent=stack_urn("component-test", "unit"),
    )
    assert sorted((r.urn, r.parent_urn) for r in under_stack.resources) == sorted((r.urn, r.parent_urn) for r in local)


def test_a_missing_required_input_fails_the_construct_naming_it(host: ComponentHost) -> None:
    with pytest.raises(ConstructError, match="message") as failed:
        host.construct(GREETING, "mute", {"copies": 2})
    assert failed.value.property_errors == (("message", "Missing required input 'message' on 'Greeting'"),)
    # The process serves on, and the next Construct's records are its own.
    assert {r.name for r in host.construct(GREETING, "after", {"message": "ok"}).resources} == {
        "after",
        "after-0",
        "after-password",
    }


def test_a_type_of_another_package_fails_with_the_providers_message(host: ComponentHost) -> None:
    with pytest.raises(ConstructError) as failed:
        host.construct("other:index:Greeting", "stray", {"message": "hi"})
    assert str(failed.value) == "invalid provider: other, expected sample"
    assert failed.value.property_errors == ()
    assert "validate_resource_type" in failed.value.details  # the traceback the SDK appends


def test_secret_inputs_reach_the_children_as_secrets(host: ComponentHost) -> None:
    built = host.construct(GREETING, "hush", {"message": secret("psst")})

    (config_map,) = [r for r in built.resources if r.type == CONFIG_MAP]
    assert config_map.inputs == _config_map("hush", 0, SECRET)
    local = _in_process("hush", lambda: {"message": pulumi.Output.secret("psst")})
    (local_root,) = [r for r in local if r.type == GREETING]
    assert children_signature(built.resources, built.urn) == children_signature(local, local_root.urn)


def test_unknown_inputs_of_a_preview_reach_the_children_as_unknowns(host: ComponentHost) -> None:
    built = host.construct(GREETING, "later", {"message": UNKNOWN, "namespace": UNKNOWN}, dry_run=True)
    (config_map,) = [r for r in built.resources if r.type == CONFIG_MAP]
    assert config_map.inputs == _config_map("later", 0, UNKNOWN, UNKNOWN)


def test_children_signature_keeps_the_components_descendants_by_type_chain() -> None:
    def resource(type_: str, name: str, parent: str | None) -> RegisteredResource:
        return RegisteredResource(
            type=type_, name=name, urn=f"urn:{name}", parent_urn=parent, custom=True, inputs={"n": name}
        )

    resources = [
        resource("pkg:index:Stack", "stack", None),
        resource("pkg:index:Root", "root", "urn:stack"),
        resource("pkg:index:Inner", "inner", "urn:root"),
        resource("pkg:index:Leaf", "leaf", "urn:inner"),
        resource("pkg:index:Leaf", "aside", "urn:stack"),
    ]
    assert children_signature(reversed(resources), "urn:root") == [
        ChildSignature(("pkg:index:Inner",), "inner", True, {"n": "inner"}),
        ChildSignature(("pkg:index:Inner", "pkg:index:Leaf"), "leaf", True, {"n": "leaf"}),
    ]


def test_a_plugin_that_fails_to_start_reports_its_stderr(tmp_path: Path) -> None:
    (tmp_path / "PulumiPlugin.yaml").write_text("runtime: python\n")
    (tmp_path / "__main__.py").write_text("raise SystemExit('no components here')\n")
    with pytest.raises(ComponentHostError, match="no components here"):
        ComponentHost(tmp_path)
