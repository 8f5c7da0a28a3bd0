"""package/types.py: the settings models, as the plain TypedDicts a component package schema carries.

Why generated: the components validate their settings with pydantic models (components/settings/); the SDK's
schema analyzer reads only plain annotations (no pydantic, no ``Annotated`` constraints, no unions) and takes each
field's description from a docstring written under it in the source. One definition, the model, feeds both: this
module writes a TypedDict per model (camelCase in the schema, snake_case in Python, as the analyzer maps them), its
fields' descriptions and defaults as docstrings. The package's components validate what they receive with the
models, so every rule and error stays the model's.

`python -m tools.package_types` prints the module; `make docs` writes it; a test fails when it is stale.
"""

from __future__ import annotations

import enum
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from headscale_ha.components import settings

TARGET = Path(__file__).resolve().parents[1] / "package" / "types.py"

#: The settings the exposed components take; the models they contain follow.
ROOTS: tuple[type[settings.SettingsModel], ...] = (
    settings.Nfs,
    settings.BackupSettings,
    settings.ClusterSettings,
    settings.ComputeResources,
    settings.OidcSettings,
    settings.DerpSettings,
    settings.Prefixes,
    settings.EndpointSettings,
    settings.Proxy,
    settings.HeadscaleSettings,
)

_SIMPLE = {str: "str", int: "int", bool: "bool", float: "float"}


class UnsupportedFieldError(TypeError):
    """A model field a schema cannot carry (a union of two types, say): the model must change, or stay unexposed."""


def _strip(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``Annotated`` metadata and ``None``; and whether ``None`` was allowed."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) != 1:
            raise UnsupportedFieldError(f"a union of {members}")
        inner, _ = _strip(members[0])
        return inner, True
    return annotation, False


def schema_name(model: type[BaseModel]) -> str:
    """The TypedDict's (and so the schema type's) name: the model's, without the ``Settings`` a config section's
    model carries in Python (``HeadscaleSettings`` is the package's ``Headscale``, as it always was)."""
    return model.__name__.removesuffix("Settings")


def _type_text(annotation: Any, models: list[type[BaseModel]], enums: list[type[enum.Enum]]) -> str:
    """The plain annotation text of ``annotation``, collecting the models and enums it names."""
    annotation, _ = _strip(annotation)
    origin = typing.get_origin(annotation)
    if origin is list:
        return f"list[{_type_text(typing.get_args(annotation)[0], models, enums)}]"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"dict[{_type_text(key, models, enums)}, {_type_text(value, models, enums)}]"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        if annotation not in enums:
            enums.append(annotation)
        return annotation.__name__
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation not in models:
            models.append(annotation)
        return schema_name(annotation)
    if annotation in _SIMPLE:
        return _SIMPLE[annotation]
    raise UnsupportedFieldError(f"type {annotation!r}")


def _default_text(info: FieldInfo) -> str | None:
    """What an omitted field becomes, for its description; None: the field is required."""
    if info.default is not PydanticUndefined:
        value = info.default
    elif info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    else:
        return None
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        return "the defaults of each field"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, list | dict) and not value:
        return "empty"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{value!r}`"


#: Longest line of the module, ruff's limit; a longer description is split into adjacent literals (one constant
#: to the analyzer, which reads the string statement under a field as its docstring).
LINE_LENGTH = 120


def _docstring(text: str, indent: str = "    ") -> list[str]:
    text = " ".join(text.split())
    if len(indent) + len(_quoted(text)) + 4 <= LINE_LENGTH:
        return [f'{indent}"""{text}"""']
    width = LINE_LENGTH - len(indent) - 8
    chunks, line = [], ""
    for word in text.split(" "):
        if line and len(_quoted(line + " " + word)) > width:
            chunks.append(line + " ")
            line = word
        else:
            line = f"{line} {word}" if line else word
    chunks.append(line)
    return [f"{indent}(", *(f"{indent}    {_quoted(chunk)}" for chunk in chunks), f"{indent})"]


def _quoted(text: str) -> str:
    """A double-quoted Python literal of ``text`` (JSON's escapes are Python's)."""
    return json.dumps(text, ensure_ascii=False)


def _class_lines(model: type[BaseModel], named: list[type[BaseModel]], enums: list[type[enum.Enum]]) -> list[str]:
    """The TypedDict of ``model``; ``named`` collects the models its fields name."""
    lines = [f"class {schema_name(model)}(TypedDict):"]
    if model.__doc__ and model.__doc__ is not settings.SettingsModel.__doc__:
        lines += [*_docstring(model.__doc__), ""]
    for name, info in model.model_fields.items():
        try:
            text = _type_text(info.annotation, named, enums)
        except UnsupportedFieldError as error:
            raise UnsupportedFieldError(f"{model.__name__}.{name}: {error}") from None
        default = _default_text(info)
        lines.append(f"    {name}: {text if default is None else f'NotRequired[{text}]'}")
        description = (info.description or "").rstrip()
        lines += _docstring(f"{description} Default: {default}." if default is not None else description)
    return lines


def render() -> str:
    """The module's text: every model reachable from ROOTS, each after the models it names (no forward refs)."""
    enums: list[type[enum.Enum]] = []
    bodies: dict[type[BaseModel], list[str]] = {}
    names: dict[type[BaseModel], list[type[BaseModel]]] = {}
    pending: list[type[BaseModel]] = list(ROOTS)
    while pending:
        model = pending.pop(0)
        if model in bodies:
            continue
        names[model] = []
        bodies[model] = _class_lines(model, names[model], enums)
        pending += names[model]
    ordered: list[type[BaseModel]] = []

    def place(model: type[BaseModel]) -> None:
        if model not in ordered:
            for dependency in names[model]:
                place(dependency)
            ordered.append(model)

    for model in sorted(bodies, key=schema_name):
        place(model)
    models = list(bodies)
    enum_names = ", ".join(sorted(e.__name__ for e in enums))
    header = [
        '"""The settings the package\'s components take, as plain TypedDicts: generated, do not edit.',
        "",
        "Written by `make docs` (tools/package_types.py) from the pydantic models of components/settings/, which",
        "validate every value the components receive; the descriptions are the models'.",
        '"""',
        "",
        "# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects.",
        "from typing import NotRequired, TypedDict",
        "",
    ]
    if enum_names:
        header += [f"from headscale_ha.components.settings import {enum_names}", ""]
    exported = sorted([*(schema_name(m) for m in models), *(e.__name__ for e in enums)])
    header += ["__all__ = [", *(f'    "{name}",' for name in exported), "]", ""]
    out = header
    for model in ordered:
        out += ["", *bodies[model], ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--write"]:
        TARGET.write_text(text)
        return 0
    if argv:
        print("usage: python -m tools.package_types [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
