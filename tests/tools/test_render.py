"""Rendering a run: YAML per object, outputs JSON, the tree; secrets redacted whatever their marking."""

from __future__ import annotations

import base64

import pytest
import yaml

from tools import render
from tools.harness import SECRET, UNKNOWN, ProgramRun, RegisteredResource


def _resource(name: str, inputs: dict, *, parent: str | None = None, type_: str = "kubernetes:core/v1:Secret"):
    return RegisteredResource(type=type_, name=name, urn=f"urn:{name}", parent_urn=parent, custom=True, inputs=inputs)


def _run(*resources: RegisteredResource, outputs: dict | None = None) -> ProgramRun:
    return ProgramRun(project="p", stack="s", resources=list(resources), outputs=outputs or {})


def test_secret_data_is_redacted_even_when_not_marked_secret() -> None:
    secret = _resource(
        "s",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "identity", "namespace": "ns"},
            "data": {"noise": base64.b64encode(b"privkey:abcd").decode()},
            "stringData": {"derp": "privkey:beef"},
        },
    )
    files = render.manifests(_run(secret))
    text = files["ns/secret-identity.yaml"]
    assert "abcd" not in text
    assert "beef" not in text
    obj = yaml.safe_load(text)
    assert base64.b64decode(obj["data"]["noise"]) == render.REDACTED.encode()
    assert obj["stringData"] == {"derp": render.REDACTED}
    assert list(obj)[:3] == ["apiVersion", "kind", "metadata"]


def test_marked_secrets_and_unknowns_anywhere_are_replaced() -> None:
    config_map = _resource(
        "c",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg"},
            "data": {"token": SECRET, "later": UNKNOWN},
        },
        type_="kubernetes:core/v1:ConfigMap",
    )
    obj = yaml.safe_load(render.manifests(_run(config_map))["_cluster/configmap-cfg.yaml"])
    assert obj["data"] == {"token": render.REDACTED, "later": render.UNKNOWN_TEXT}


def test_two_objects_with_one_path_are_an_error() -> None:
    a = _resource("a", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": "n"}})
    b = _resource("b", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": "n"}})
    with pytest.raises(ValueError, match=r"n/secret-x\.yaml"):
        render.manifests(_run(a, b))


def test_outputs_are_redacted_and_sorted() -> None:
    text = render.outputs_json(_run(outputs={"b": {"key": SECRET}, "a": 1}))
    assert text == '{\n  "a": 1,\n  "b": {\n    "key": "[secret]"\n  }\n}\n'


def test_tree_nests_children_under_parents_sorted() -> None:
    parent = _resource("site", {}, type_="x:site:Site")
    child_b = _resource("site-b", {}, parent="urn:site", type_="x:b:B")
    child_a = _resource("site-a", {}, parent="urn:site", type_="x:a:A")
    grandchild = _resource("site-a-z", {}, parent="urn:site-a", type_="x:z:Z")
    assert render.resource_tree(_run(child_b, grandchild, parent, child_a)).splitlines() == [
        "stack s of p: 4 resources",
        "└─ x:site:Site  site",
        "   ├─ x:a:A  site-a",
        "   │  └─ x:z:Z  site-a-z",
        "   └─ x:b:B  site-b",
    ]
