"""A Pulumi YAML program that uses the component package, checked and run offline as Pulumi YAML would.

What it models (Pulumi YAML's language reference and the engine): a program's `config` (typed, defaults, secrets),
`resources` with `type`, `properties` and `options.dependsOn`, `outputs`; `${name}` names a config value or a
resource, `${resource.output}` one of its outputs; a resource's properties are checked against its package's
schema (unknown, missing, wrong-typed properties refused) before anything runs; a plain property takes no resource
output, since it must be known when the component is constructed. Each package component is then built as the
plugin builds it: its schema-named inputs mapped by the package's own provider (``PackageProvider.python_inputs``),
in an order that respects every reference. Interpolation is whole-value only (`${...}` as the entire string):
the example needs no more, and anything else is refused rather than guessed at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml

from headscale_ha.package.host import COMPONENTS, PACKAGE, provider

REFERENCE = re.compile(r"^\$\{([A-Za-z][A-Za-z0-9_-]*)(?:\.([A-Za-z][A-Za-z0-9_]*))?\}$")
TYPES = {f"{PACKAGE}:index:{c.__name__}": c for c in COMPONENTS}


class YamlProgramError(ValueError):
    """The program is not one Pulumi YAML would run: every problem, each naming its resource and property."""


@dataclass(frozen=True)
class Program:
    """A parsed Pulumi.yaml."""

    config: dict[str, dict[str, Any]]
    resources: dict[str, dict[str, Any]]
    outputs: dict[str, Any] = field(default_factory=dict)


def load(path: Path) -> Program:
    document = yaml.safe_load(path.read_text())
    return Program(document.get("config") or {}, document.get("resources") or {}, document.get("outputs") or {})


def _reference(value: Any) -> tuple[str, str | None] | None:
    if isinstance(value, str) and "${" in value:
        match = REFERENCE.match(value)
        if match is None:
            raise YamlProgramError(f"{value!r}: only a whole-value ${{name}} or ${{resource.output}} is supported")
        return match.group(1), match.group(2)
    return None


def _references(value: Any) -> list[tuple[str, str | None]]:
    if isinstance(value, Mapping):
        return [r for v in value.values() for r in _references(v)]
    if isinstance(value, list):
        return [r for v in value for r in _references(v)]
    found = _reference(value)
    return [found] if found else []


def _expected(prop: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    return schema["types"][prop["$ref"].removeprefix("#/types/")] if "$ref" in prop else prop


def _check_value(
    value: Any, prop: Mapping[str, Any], schema: Mapping[str, Any], where: str, program: Program, plain: bool
) -> list[str]:
    """What is wrong with ``value`` as the schema property ``prop`` (at ``where``)."""
    plain = plain or bool(prop.get("plain"))
    reference = _reference(value)
    if reference is not None:
        name, output = reference
        if name in program.resources:
            return [f"{where}: a plain input takes no resource output, got ${{{name}.{output}}}"] if plain else []
        if name not in program.config:
            return [f"{where}: ${{{name}}} names neither a config value nor a resource"]
        return []
    expected = _expected(prop, schema)
    if "enum" in expected:
        values = [member["value"] for member in expected["enum"]]
        return [] if value in values else [f"{where}: expected one of {values}, got {value!r}"]
    kind = expected.get("type")
    if kind == "object" and "properties" in expected:
        if not isinstance(value, Mapping):
            return [f"{where}: expected an object, got {value!r}"]
        return _check_object(value, expected["properties"], expected.get("required", []), schema, where, program, plain)
    if kind == "object":
        if not isinstance(value, Mapping):
            return [f"{where}: expected a map, got {value!r}"]
        inner = expected.get("additionalProperties", {})
        return [p for k, v in value.items() for p in _check_value(v, inner, schema, f"{where}.{k}", program, plain)]
    if kind == "array":
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {value!r}"]
        items = expected.get("items", {})
        return [p for i, v in enumerate(value) for p in _check_value(v, items, schema, f"{where}[{i}]", program, plain)]
    python = {"string": str, "integer": int, "boolean": bool, "number": (int, float)}.get(kind)
    wrong = python is not None and (not isinstance(value, python) or (kind != "boolean" and isinstance(value, bool)))
    return [f"{where}: expected {kind}, got {value!r}"] if wrong else []


def _check_object(
    value: Mapping[str, Any],
    properties: Mapping[str, Any],
    required: list[str],
    schema: Mapping[str, Any],
    where: str,
    program: Program,
    plain: bool,
) -> list[str]:
    problems = [f"{where}.{key}: not an input of this type" for key in value if key not in properties]
    problems += [f"{where}.{key}: is required" for key in required if key not in value]
    for key, item in value.items():
        if key in properties:
            problems += _check_value(item, properties[key], schema, f"{where}.{key}", program, plain)
    return problems


def check(program: Program, schema: Mapping[str, Any]) -> list[str]:
    """Every problem Pulumi YAML's type check would report, as `<resource>.<property path>: <problem>`."""
    problems: list[str] = []
    for name, resource in program.resources.items():
        token = resource.get("type")
        definition = schema["resources"].get(token)
        if definition is None:
            problems.append(f"{name}: type {token!r} is not in the package (known: {', '.join(schema['resources'])})")
            continue
        problems += _check_object(
            resource.get("properties") or {},
            definition["inputProperties"],
            definition.get("requiredInputs", []),
            schema,
            name,
            program,
            plain=False,
        )
        for dependency in (resource.get("options") or {}).get("dependsOn", []):
            reference = _reference(dependency)
            if reference is None or reference[0] not in program.resources or reference[1] is not None:
                problems.append(f"{name}.options.dependsOn: {dependency!r} is not a ${{resource}}")
    return problems


def _order(program: Program) -> list[str]:
    """The resources, each after every resource it references (a cycle is refused)."""
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered:
            return
        if name in visiting:
            raise YamlProgramError(f"{name}: its references form a cycle")
        visiting.add(name)
        resource = program.resources[name]
        for referenced, _ in _references([resource.get("properties"), resource.get("options")]):
            if referenced in program.resources:
                visit(referenced)
        visiting.discard(name)
        ordered.append(name)

    for name in program.resources:
        visit(name)
    return ordered


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def run(program: Program, config: Mapping[str, Any] | None = None) -> dict[str, pulumi.Resource]:
    """Build the program (inside a Pulumi run): check it, then construct each component as the plugin does."""
    component_provider = provider()
    problems = check(program, json.loads(component_provider.schema))
    if problems:
        raise YamlProgramError("; ".join(problems))
    values: dict[str, Any] = {}
    for key, spec in program.config.items():
        value = (config or {}).get(key, spec.get("default"))
        values[key] = pulumi.Output.secret(value) if spec.get("secret") else value
    built: dict[str, pulumi.Resource] = {}

    def resolve(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v) for v in value]
        reference = _reference(value)
        if reference is None:
            return value
        name, output = reference
        if name in built:
            return built[name] if output is None else getattr(built[name], _snake(output))
        return values[name]

    for name in _order(program):
        resource = program.resources[name]
        token = resource["type"]
        inputs = component_provider.python_inputs(token, resolve(resource.get("properties") or {}))
        depends_on = resolve((resource.get("options") or {}).get("dependsOn", []))
        built[name] = TYPES[token](name, inputs, pulumi.ResourceOptions(depends_on=depends_on))
    for key, value in program.outputs.items():
        pulumi.export(key, resolve(value))
    return built
