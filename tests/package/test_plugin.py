"""The component package as a consumer in another language meets it: the plugin process, over gRPC.

The plugin directory is copied out of the checkout and run as the engine runs a Python plugin (`python <dir>
<engine address>`, in that directory), by a fresh virtual environment where headscale-ha is the wheel `pip install`
makes: nothing of the checkout is importable. GetSchema must answer the committed schema; Construct of each
component, with its inputs as a consumer's SDK sends them, must register what the Python component registers.

A component holding a dynamic resource (HeadscaleServer's version gate) registers it with its provider pickled by
reference; the engine serves it with the CLI's `pulumi-resource-pulumi-python` shim, which runs
`${PULUMI_PYTHON_CMD:-python3} -u -m pulumi.dynamic` in the consumer's project directory (or the Python program's
virtualenv when the consumer is one). The last tests run the SDK's dynamic provider host both ways.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from headscale_ha.components import backup_volume
from headscale_ha.components.settings import Nfs
from headscale_ha.components.version_gate import GATE_ID
from headscale_ha.package.host import COMPONENTS
from tests.models.engine.component_host import (
    ComponentHost,
    Constructed,
    ConstructError,
    children_signature,
)
from tests.models.engine.dynamic import DynamicHost, ProviderCallError
from tests.support.component_run import build_component
from tests.support.package_samples import NFS, SAMPLES, Sample, wire_inputs
from tests.support.wheel import bare_venv, build_wheel, installed_venv
from tools.harness import PROJECT_DIR
from tools.package_schema import SCHEMA

PLUGIN_FILES = ("PulumiPlugin.yaml", "__main__.py", "requirements.txt")
GATE_TYPE = "pulumi-python:dynamic/upgrade:VersionGate"


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source"))
    return installed_venv(wheel, tmp_path_factory.mktemp("venv") / "venv")


@pytest.fixture(scope="module")
def host(venv_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentHost]:
    plugin = tmp_path_factory.mktemp("plugins") / "resource-headscale-ha"
    plugin.mkdir()
    for name in PLUGIN_FILES:
        shutil.copy(PROJECT_DIR / "plugin" / name, plugin / name)
    with ComponentHost(plugin, python=str(venv_python)) as started:
        yield started


@pytest.fixture(scope="module")
def constructed(host: ComponentHost) -> dict[str, Constructed]:
    schema = host.schema()
    return {sample.token: host.construct(sample.token, sample.name, wire_inputs(sample, schema)) for sample in SAMPLES}


def test_the_plugin_answers_the_committed_schema_with_every_component(host: ComponentHost) -> None:
    schema = host.schema()
    assert schema == json.loads(SCHEMA.read_text())
    assert sorted(schema["resources"]) == sorted(f"headscale-ha:index:{c.__name__}" for c in COMPONENTS)
    assert all(resource["isComponent"] for resource in schema["resources"].values())


def test_every_exposed_component_has_a_sample() -> None:
    assert sorted(sample.token for sample in SAMPLES) == sorted(f"headscale-ha:index:{c.__name__}" for c in COMPONENTS)


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.token.rsplit(":", 1)[1] for s in SAMPLES])
def test_construct_registers_what_the_python_component_registers(
    sample: Sample, constructed: dict[str, Constructed]
) -> None:
    done = constructed[sample.token]
    (component,) = [r for r in done.resources if r.urn == done.urn]
    assert (component.type, component.name) == (sample.token, sample.name)
    (child,) = [r for r in done.resources if r.parent_urn == done.urn]
    assert (child.type, child.name) == (sample.python_type, sample.name)
    python = build_component(lambda: sample.python(sample.name))
    (own,) = [r for r in python.resources if r.type == sample.python_type]
    expected = children_signature(python.resources, own.urn)
    assert expected, "the Python component registers children"
    assert children_signature(done.resources, child.urn) == expected


def test_construct_returns_the_components_outputs_as_its_state(constructed: dict[str, Constructed]) -> None:
    state = constructed["headscale-ha:index:HeadscaleServer"].state
    assert {k: v for k, v in state.items() if k not in ("identityFingerprint", "backupKey")} == {
        "apiUrl": "http://headscale.headscale.svc.cluster.local:8080",
        "serviceName": "headscale",
        "identitySecretName": "headscale-identity",
        "configMapName": "headscale-config",
        "replicas": 1,
    }
    nfs = Nfs(**NFS)  # the claim and volume are named by the export they stand for
    assert constructed["headscale-ha:index:BackupVolume"].state == {
        "claimName": backup_volume.claim_name(nfs),
        "volumeName": backup_volume.volume_name("headscale", nfs),
    }


def test_a_bad_input_fails_construct_at_its_schema_path(host: ComponentHost) -> None:
    (sample,) = [s for s in SAMPLES if s.token == "headscale-ha:index:HeadscaleServer"]
    inputs = wire_inputs(sample, host.schema())
    inputs["postgres"] = {"host": "pg", "database": "hs", "user": "hs", "passwordSecret": "pg"}
    with pytest.raises(ConstructError) as caught:
        host.construct(sample.token, "bad", inputs)
    assert caught.value.property_errors == (
        ("postgres", "set exactly one of sqlite or postgres, got sqlite, postgres"),
    )
    missing = {k: v for k, v in inputs.items() if k not in ("postgres", "baseDomain")}
    with pytest.raises(ConstructError) as caught:
        host.construct(sample.token, "bad", missing)
    assert caught.value.property_errors == (("baseDomain", "Missing required input 'baseDomain' on 'HeadscaleServer'"),)


def _gate(constructed: dict[str, Constructed]) -> tuple[str, dict]:
    done = constructed["headscale-ha:index:HeadscaleServer"]
    (gate,) = [r for r in done.resources if r.type == GATE_TYPE]
    return gate.urn, gate.inputs


def test_the_version_gate_needs_headscale_ha_where_the_engine_runs_dynamic_providers(
    constructed: dict[str, Constructed], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A consumer in TypeScript, Go, .NET or YAML has no Python virtualenv: the shim runs python3 from PATH in its
    project directory, and that interpreter (Pulumi's SDK, no headscale-ha) cannot load the gate's provider."""
    urn, inputs = _gate(constructed)
    consumer_python = bare_venv(tmp_path_factory.mktemp("consumer") / "venv")
    host = DynamicHost({}, "consumer", python=str(consumer_python), cwd=tmp_path)
    try:
        with pytest.raises(ProviderCallError, match="No module named 'headscale_ha'"):
            host.check(urn, None, inputs)
    finally:
        host.close()


def test_with_headscale_ha_installed_the_gate_works_and_refuses_a_downgrade(
    constructed: dict[str, Constructed], venv_python: Path, tmp_path: Path
) -> None:
    """PULUMI_PYTHON_CMD (or the Python program's virtualenv) naming a Python with headscale-ha: the gate is served
    as in the Python program, so a lower version is refused at preview."""
    urn, inputs = _gate(constructed)
    host = DynamicHost({}, "consumer", python=str(venv_python), cwd=tmp_path)
    try:
        checked = host.check(urn, None, inputs)
        resource_id, outputs = host.create(urn, checked)
        assert resource_id == GATE_ID
        assert outputs["version"] == "0.29.2"
        with pytest.raises(ProviderCallError, match=r"0\.29\.1"):
            host.check(urn, outputs, {**inputs, "version": "0.29.1"})
    finally:
        host.close()


def test_the_plugin_directory_installs_the_package_with_the_programs_pins() -> None:
    """The CLI installs plugin/requirements.txt into plugin/venv: headscale-ha from the repository (`..`, read from
    the plugin directory), every dependency pinned as the program pins it; the manifest names only the runtime."""
    plugin = (PROJECT_DIR / "plugin" / "requirements.txt").read_text().splitlines()
    program = (PROJECT_DIR / "requirements.txt").read_text().splitlines()

    def pins(lines: list[str]) -> set[str]:
        return {line for line in lines if "==" in line and not line.startswith("#")}

    assert ".." in plugin
    assert pins(plugin) == pins(program)
    manifest = yaml.safe_load((PROJECT_DIR / "plugin" / "PulumiPlugin.yaml").read_text())
    assert manifest == {"runtime": "python"}
