"""The project's CRD schemas (schemas/crds, made by tools/crd_schemas.py) and how tools/validate.py reads them: the
committed files are what the generator makes from ../shared's CRDs (when that tree is beside the checkout), they
hold no prose, and each Kubernetes schema marker means what the API server makes of it, as ../shared's validator
reads it too."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tools import crd_schemas, validate

WIDGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.test}
spec:
  group: example.test
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
    - name: v1beta1
      served: false
      storage: false
      schema:
        openAPIV3Schema: {type: object, description: an old version nobody may send}
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          description: A widget.
          properties:
            apiVersion: {type: string, description: the version}
            kind: {type: string}
            metadata: {type: object}
            spec:
              type: object
              description: What the widget should be.
              required: [size]
              x-kubernetes-validations:
                - {rule: "self.size != 0", message: size must not be zero}
              properties:
                size: {x-kubernetes-int-or-string: true, description: a count or a percentage}
                note: {type: string, nullable: true}
                address: {type: string, format: ipv4}
                network: {type: string, format: cidr}
                id: {type: string, format: uuid}
                day: {type: string, format: date}
                when: {type: string, format: date-time}
                blob: {type: string, format: byte}
                replicas: {type: integer, format: int32, minimum: 1}
                mode: {type: string, enum: [a, b], example: a}
                free: {type: object, x-kubernetes-preserve-unknown-fields: true}
                template:
                  type: object
                  x-kubernetes-embedded-resource: true
                  x-kubernetes-preserve-unknown-fields: true
                tags:
                  type: array
                  items: {type: string}
                  x-kubernetes-list-type: set
                ports:
                  type: array
                  x-kubernetes-list-type: map
                  x-kubernetes-list-map-keys: [port, protocol]
                  items:
                    type: object
                    required: [port]
                    properties:
                      port: {type: integer}
                      protocol: {type: string, default: TCP}
                either:
                  type: object
                  properties: {a: {type: string}, b: {type: string}}
                  oneOf: [{required: [a]}, {required: [b]}]
                description: {type: string, description: a field that is called description}
                labels: {type: object, additionalProperties: {type: string}}
                defaults:
                  type: object
                  default: {description: "data, not prose"}
                  x-kubernetes-preserve-unknown-fields: true
"""

#: name -> (the spec of a Widget, or a whole object when it has "apiVersion"; whether the API server takes it).
WIDGETS: dict[str, tuple[dict, bool]] = {
    "the smallest": ({"size": 3}, True),
    "int-or-string given a string": ({"size": "50%"}, True),
    "int-or-string given a float": ({"size": 1.5}, False),
    "int-or-string given a boolean": ({"size": True}, False),
    "a required field absent": ({"note": "x"}, False),
    "nullable given null": ({"size": 1, "note": None}, True),
    "not nullable given null": ({"size": 1, "mode": None}, False),
    "an ipv4": ({"size": 1, "address": "10.0.0.1"}, True),
    "an ipv4 out of range": ({"size": 1, "address": "10.0.0.256"}, False),
    "an ipv6 for an ipv4": ({"size": 1, "address": "fd00::1"}, False),
    "a cidr": ({"size": 1, "network": "10.0.0.0/8"}, True),
    "a cidr without a prefix": ({"size": 1, "network": "10.0.0.0"}, False),
    "a uuid": ({"size": 1, "id": "6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab"}, True),
    "not a uuid": ({"size": 1, "id": "widget-1"}, False),
    "a date": ({"size": 1, "day": "2026-12-01"}, True),
    "a thirteenth month": ({"size": 1, "day": "2026-13-01"}, False),
    "a date-time": ({"size": 1, "when": "2026-12-01T10:00:00Z"}, True),
    "not a date-time": ({"size": 1, "when": "yesterday"}, False),
    "base64": ({"size": 1, "blob": "aGVsbG8="}, True),
    "not base64": ({"size": 1, "blob": "not base64!"}, False),
    "an int32 (an annotation only)": ({"size": 1, "replicas": 2}, True),
    "below the minimum": ({"size": 1, "replicas": 0}, False),
    "outside the enum": ({"size": 1, "mode": "c"}, False),
    "anything where unknown fields are kept": ({"size": 1, "free": {"any": {"deep": [1, "x"]}}}, True),
    "an embedded object": ({"size": 1, "template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {}}}, True),
    "a set": ({"size": 1, "tags": ["a", "b"]}, True),
    "a set with a duplicate": ({"size": 1, "tags": ["a", "a"]}, False),
    "a map list": ({"size": 1, "ports": [{"port": 80}, {"port": 80, "protocol": "UDP"}]}, True),
    "a map list with a defaulted duplicate key": (
        {"size": 1, "ports": [{"port": 80}, {"port": 80, "protocol": "TCP"}]},
        False,
    ),
    "oneOf met": ({"size": 1, "either": {"a": "x"}}, True),
    "oneOf met twice": ({"size": 1, "either": {"a": "x", "b": "y"}}, False),
    "an unknown field in a junctor's object": ({"size": 1, "either": {"a": "x", "c": "z"}}, False),
    "a field called description": ({"size": 1, "description": "kept"}, True),
    "additionalProperties of a type": ({"size": 1, "labels": {"team": "ops"}}, True),
    "additionalProperties of the wrong type": ({"size": 1, "labels": {"team": 7}}, False),
    "an unknown spec field": ({"size": 1, "colour": "blue"}, False),
    "a CEL rule broken (CEL is not evaluated)": ({"size": 0}, True),
    "a version that is not served": (
        {"apiVersion": "example.test/v1beta1", "kind": "Widget", "metadata": {"name": "w"}},
        False,
    ),
    "a version that does not exist": (
        {"apiVersion": "example.test/v2", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}},
        False,
    ),
    "an unknown top-level field": (
        {"apiVersion": "example.test/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}, "x": 1},
        False,
    ),
    "a metadata field of the wrong type": (
        {"apiVersion": "example.test/v1", "kind": "Widget", "metadata": {"name": "w", "labels": "a=b"}},
        False,
    ),
    "a name that is no DNS subdomain": (
        {"apiVersion": "example.test/v1", "kind": "Widget", "metadata": {"name": "Widget_1"}, "spec": {"size": 1}},
        False,
    ),
}


def _widget(spec_or_object: dict) -> dict:
    if "apiVersion" in spec_or_object:
        return spec_or_object
    return {"apiVersion": "example.test/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec_or_object}


@pytest.fixture
def widget_crd(tmp_path: Path) -> Path:
    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "example.test_widgets.yaml").write_text(WIDGET_CRD)
    return crds


@pytest.fixture
def widget_schemas(widget_crd: Path, tmp_path: Path) -> Path:
    out = tmp_path / "schemas"
    assert crd_schemas.main(["--write", "--out", str(out), str(widget_crd / "example.test_widgets.yaml")]) == 0
    return out


@pytest.fixture
def widget_files(tmp_path: Path) -> dict[str, Path]:
    """One file per case, named by its index, under ``widgets/``."""
    directory = tmp_path / "widgets"
    directory.mkdir()
    files = {}
    for index, (case, (spec, _)) in enumerate(WIDGETS.items()):
        files[case] = directory / f"widget-{index:02d}.yaml"
        files[case].write_text(yaml.safe_dump(_widget(spec)))
    return files


def _refused(output: str) -> set[str]:
    return {line.split(": ", 1)[0] for line in output.splitlines() if line.startswith("/") and ": " in line}


# --------------------------------------------------------------------------- the generator


def test_prose_is_dropped_and_data_kept() -> None:
    crd = yaml.safe_load(WIDGET_CRD)
    document = crd_schemas.schema_document(crd, "example.test_widgets.yaml", "0" * 64)
    assert document["versions"]["v1beta1"] == {"served": False}, "a version nobody may send keeps no schema"
    schema = document["versions"]["v1"]["schema"]
    spec = schema["properties"]["spec"]
    assert "description" not in schema
    assert "description" not in spec
    assert "x-kubernetes-validations" not in spec
    assert "example" not in spec["properties"]["mode"]
    assert spec["properties"]["description"] == {"type": "string"}, "a field may be called description"
    assert spec["properties"]["defaults"]["default"] == {"description": "data, not prose"}
    assert spec["properties"]["ports"]["x-kubernetes-list-map-keys"] == ["port", "protocol"]
    assert document["source"] == {"file": "example.test_widgets.yaml", "sha256": "0" * 64}


def test_check_finds_stale_files_and_given_files_leave_the_others_alone(widget_crd: Path, tmp_path: Path) -> None:
    source, out = str(widget_crd / "example.test_widgets.yaml"), tmp_path / "out"
    assert crd_schemas.main(["--check", "--out", str(out), source]) == 1, "nothing written yet"
    assert crd_schemas.main(["--write", "--out", str(out), source]) == 0
    assert crd_schemas.main(["--check", "--out", str(out), source]) == 0
    (out / "example.test_widgets.json").write_text("{}")
    assert crd_schemas.main(["--check", "--out", str(out), source]) == 1
    (out / "example.test_gadgets.json").write_text("{}")
    assert crd_schemas.main(["--write", "--out", str(out), source]) == 0
    assert crd_schemas.main(["--check", "--out", str(out), source]) == 0
    assert (out / "example.test_gadgets.json").read_text() == "{}", "a CRD not given keeps its schema"


def test_the_complete_set_removes_what_no_crd_makes(widget_crd: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(crd_schemas, "SHARED_CRD_DIR", widget_crd)
    out = tmp_path / "out"
    assert crd_schemas.main(["--write", "--out", str(out)]) == 0
    (out / "example.test_gadgets.json").write_text("{}")
    assert crd_schemas.main(["--check", "--out", str(out)]) == 1
    assert "example.test_gadgets.json (not generated)" in capsys.readouterr().out
    assert crd_schemas.main(["--write", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["example.test_widgets.json"]


def test_inputs_that_hold_no_crd_exit_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "config.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n")
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    assert crd_schemas.main(["--out", str(tmp_path / "out"), str(tmp_path / "config.yaml")]) == 2
    assert crd_schemas.main(["--out", str(tmp_path / "out"), str(tmp_path / "broken.yaml")]) == 2
    assert "not readable CRD YAML" in capsys.readouterr().err


def _schema_keywords(node: object) -> set[str]:
    """The keywords used anywhere in a schema (field names under properties are not keywords)."""
    if isinstance(node, list):
        return set().union(*map(_schema_keywords, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = set(node)
    for key, value in node.items():
        if key in crd_schemas.SCHEMA_MAPS and isinstance(value, dict):
            found |= set().union(*map(_schema_keywords, value.values())) if value else set()
        elif key in crd_schemas.SCHEMA_VALUES:
            found |= _schema_keywords(value)
    return found


def test_the_committed_schemas_hold_no_prose() -> None:
    files = sorted(crd_schemas.SCHEMA_DIR.glob("*.json"))
    assert files
    for path in files:
        document = json.loads(path.read_text())
        keywords = set().union(*(_schema_keywords(v.get("schema")) for v in document["versions"].values()))
        assert not keywords & crd_schemas.DROPPED, path.name


def test_the_committed_schemas_are_what_the_generator_makes_from_shared(shared_dir: Path) -> None:
    sources = sorted((shared_dir / "reference" / "crds").glob("*.yaml"))
    files = crd_schemas.generate(sources)
    assert crd_schemas.stale(files, crd_schemas.SCHEMA_DIR) == [], "run: make crd-schemas"


# --------------------------------------------------------------------------- how the validator reads a schema


def test_each_schema_marker_means_what_the_api_server_makes_of_it(
    widget_schemas: Path, widget_files: dict[str, Path], capsys
) -> None:
    status = validate.main(["--schemas", str(widget_schemas), str(next(iter(widget_files.values())).parent)])
    output = capsys.readouterr().out
    refused = _refused(output)
    wrong = {case for case, (_, valid) in WIDGETS.items() if (str(widget_files[case]) in refused) == valid}
    assert not wrong, output
    assert status == validate.EXIT_INVALID


def test_shared_reads_the_schema_markers_the_same_way(
    widget_crd: Path, widget_files: dict[str, Path], shared_dir: Path
) -> None:
    tool = shared_dir / "tools" / "validate_manifests.py"
    files = [str(path) for path in widget_files.values()]
    result = subprocess.run(
        [sys.executable, str(tool), "--crd-dir", str(widget_crd), *files], capture_output=True, text=True, check=False
    )
    refused = _refused(result.stdout)
    wrong = {case for case, (_, valid) in WIDGETS.items() if (str(widget_files[case]) in refused) == valid}
    assert not wrong, result.stdout


def test_a_nullable_enum_and_a_junctor_stay_open() -> None:
    assert validate.to_json_schema({"type": "string", "enum": ["a"], "nullable": True}) == {
        "anyOf": [{"type": "null"}, {"type": "string", "enum": ["a"]}]
    }
    converted = validate.to_json_schema({"type": "object", "anyOf": [{"properties": {"a": {"type": "object"}}}]})
    assert converted["additionalProperties"] is False
    assert "additionalProperties" not in converted["anyOf"][0], "a junctor adds checks; it declares no fields"
    assert "additionalProperties" not in converted["anyOf"][0]["properties"]["a"]


def test_a_schema_file_that_is_not_the_generators_is_a_usage_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.json").write_text(textwrap.dedent('{"group": "example.test"}'))
    manifest = tmp_path / "ns.yaml"
    manifest.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    assert validate.main(["--schemas", str(tmp_path), str(manifest)]) == validate.EXIT_USAGE
    assert "not a schema file of tools/crd_schemas.py" in capsys.readouterr().err
