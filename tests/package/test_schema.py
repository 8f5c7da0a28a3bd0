"""The component package's schema: committed, current, and documented wherever a consumer's SDK shows it."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import BaseModel

from headscale_ha.components import settings
from headscale_ha.package import types
from headscale_ha.package.host import COMPONENTS, prose
from tools import package_schema, package_types


def test_the_committed_schema_and_types_are_what_make_docs_writes() -> None:
    assert package_types.TARGET.read_text() == package_types.render(), "run `make docs`"
    assert package_schema.SCHEMA.read_text() == package_schema.schema_text(), "run `make docs`"
    assert package_schema.block() in package_schema.PACKAGE_DOC.read_text(), "run `make docs`"


def _descriptions(node: Any, path: str = "") -> list[tuple[str, str | None]]:
    """(path, description) of every resource, type, property and enum value of the schema."""
    found: list[tuple[str, str | None]] = []
    if isinstance(node, dict):
        if "type" in node or "$ref" in node or "isComponent" in node or "value" in node:
            found.append((path, node.get("description")))
        for key, value in node.items():
            if key in ("properties", "inputProperties", "resources", "types"):
                found += [item for name, child in value.items() for item in _descriptions(child, f"{path}/{name}")]
            elif key in ("enum",):
                found += [item for child in value for item in _descriptions(child, f"{path}/{child['name']}")]
            elif key in ("items", "additionalProperties"):
                continue
    return found


def test_every_component_type_property_and_enum_value_is_described_in_prose() -> None:
    described = _descriptions(package_schema.schema())
    assert len(described) > 250  # the walk reached every component and type
    missing = [path for path, text in described if not text]
    assert missing == []
    indented = [path for path, text in described if text and ("\n " in text or text != text.strip())]
    assert indented == []


def test_the_schema_exposes_every_component_with_its_required_inputs() -> None:
    resources = package_schema.schema()["resources"]
    assert list(resources) == [f"headscale-ha:index:{c.__name__}" for c in COMPONENTS]
    required = {token.rsplit(":", 1)[1]: sorted(r.get("requiredInputs", [])) for token, r in resources.items()}
    assert required["BackupVolume"] == ["namespace", "nfs", "partOf"]
    assert required["HeadscaleServer"] == ["baseDomain", "cluster", "headscale", "namespace", "serverHostname"]
    # Every input is plain: what a component renders must be known when it is constructed, except the secrets.
    inputs = resources["headscale-ha:index:HeadscaleServer"]["inputProperties"]
    assert [name for name, prop in inputs.items() if not prop.get("plain")] == ["oidcClientSecret"]


def _model_of(typed: type) -> type[BaseModel] | None:
    """The model a schema type mirrors: `Headscale` is `HeadscaleSettings` (a config section), `Nfs` is `Nfs`."""
    return getattr(settings, f"{typed.__name__}Settings", None) or getattr(settings, typed.__name__, None)


@pytest.mark.parametrize("name", [n for n in types.__all__ if isinstance(getattr(types, n), type)])
def test_each_schema_type_has_its_models_fields_and_optionality(name: str) -> None:
    typed = getattr(types, name)
    model = _model_of(typed)
    assert model is not None, f"{name} mirrors no settings model"
    if not typing.is_typeddict(typed):
        assert [m.value for m in typed] == [m.value for m in model]  # an enum: the same values
        return
    assert list(typed.__annotations__) == list(model.model_fields)
    required = {k for k, info in model.model_fields.items() if info.is_required()}
    assert typed.__required_keys__ == required


def test_a_union_in_a_model_is_refused_by_the_generator_with_its_field() -> None:
    class Either(settings.SettingsModel):
        choice: int | str

    with pytest.raises(package_types.UnsupportedFieldError, match=r"Either\.choice: a union"):
        package_types._class_lines(Either, [], [])


def test_prose_joins_the_lines_of_each_paragraph_and_keeps_the_paragraphs() -> None:
    doc = """First line
        continues here.

        Second paragraph."""
    assert prose(doc) == "First line continues here.\n\nSecond paragraph."
    assert prose(prose(doc)) == prose(doc)


def _secret_paths(node: Any, path: str = "") -> set[str]:
    if not isinstance(node, dict):
        return set()
    found = {path} if node.get("secret") is True else set()
    for key, value in node.items():
        found |= _secret_paths(value, f"{path}/{key}")
    return found


def test_every_key_client_secret_and_backup_key_is_marked_secret_and_nothing_else() -> None:
    """A consumer's SDK makes a property the schema marks secret a secret before sending it: the value is encrypted
    in the consumer's state even when given as a plain string."""
    resources, types_ = "/resources/headscale-ha:index:", "/types/headscale-ha:index:"
    assert _secret_paths(package_schema.schema()) == {
        f"{resources}LitestreamBackup/inputProperties/backupKey",
        f"{resources}HeadscaleServer/inputProperties/oidcClientSecret",
        f"{resources}HeadscaleServer/properties/backupKey",
        f"{resources}Headplane/inputProperties/oidcClientSecret",
        f"{resources}Headplane/inputProperties/apiKey",
        f"{resources}Headplane/inputProperties/backupKey",
        f"{types_}Identity/properties/noisePrivateKey",
        f"{types_}Identity/properties/derpPrivateKey",
    }
