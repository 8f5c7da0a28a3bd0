"""What a package component receives, turned into the args its Python component takes, with the schema's names.

The component provider host hands a component its inputs as dictionaries with Python (snake_case) keys, nested
types included. These helpers validate them with the same models and rules as the stack config, and report a bad
value as the SDK's ``InputPropertyError`` at its schema path (camelCase, as the consumer wrote it): the engine shows
it as an invalid property of that path, naming the value and what is expected. Nothing is registered before every
input of a component has been checked: a component validates all of its inputs before it creates anything.
"""

from collections.abc import Mapping
from typing import Any, TypeVar

import pulumi
from pulumi.errors import InputPropertyError
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from headscale_ha.components.settings import BackupAuthSettings, ClusterSettings, FieldProblemsError, location_text

Model = TypeVar("Model", bound=BaseModel)


def schema_path(*parts: str | int) -> str:
    """``("backup", "nfs", "storage_class")`` as the schema names it: ``backup.nfs.storageClass``."""
    return location_text(tuple(to_camel(p) if isinstance(p, str) else p for p in parts))


def _plain(value: Any, path: str) -> Any:
    """``value`` with no Output inside: settings decide what is rendered, so they must be known at construction."""
    if isinstance(value, pulumi.Output):
        raise InputPropertyError(
            path, f"{path} must be a plain value known when the component is constructed, not an output of a resource"
        )
    if isinstance(value, Mapping):
        return {k: _plain(v, f"{path}.{to_camel(str(k))}") for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _error_text(error: Mapping[str, Any]) -> str:
    if error["type"] == "missing":
        return "is required"
    if error["type"] == "extra_forbidden":
        return "is not an input of this type"
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return f"{message}, got {error.get('input')!r}"


def settings_of(model: type[Model], value: Any, *path: str | int) -> Model:
    """``value`` (the input at ``path``) validated as ``model``; the first problem raised at its own path."""
    where = schema_path(*path)
    try:
        return model.model_validate(_plain(value, where))
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = (*path, *error["loc"])
        found = error.get("ctx", {}).get("error")
        if isinstance(found, FieldProblemsError):
            problem = found.problems[0]
            at = schema_path(*loc, *problem.location)
            raise InputPropertyError(at, f"{at}: {problem.message}, got {problem.value!r}") from None
        at = schema_path(*loc)
        raise InputPropertyError(at, f"{at}: {_error_text(error)}") from None


def optional_settings(model: type[Model], args: Mapping[str, Any], key: str, *path: str | int) -> Model | None:
    """The settings at ``args[key]`` (under ``path``), or None when the input is absent."""
    value = args.get(key)
    return None if value is None else settings_of(model, value, *path, key)


def default_settings(model: type[Model], args: Mapping[str, Any], key: str, *path: str | int) -> Model:
    """The settings at ``args[key]``, or the model's defaults when the input is absent."""
    return settings_of(model, args.get(key) or {}, *path, key)


def one_of(args: Mapping[str, Any], keys: tuple[str, ...], *path: str | int) -> str:
    """The one key of ``keys`` that is set: a choice the schema carries as optional inputs, exactly one required."""
    present = [key for key in keys if args.get(key) is not None]
    if len(present) != 1:
        names = " or ".join(schema_path(*path, key) for key in keys)
        got = ", ".join(schema_path(*path, key) for key in present) or "none"
        at = schema_path(*path, present[-1] if present else keys[0])
        raise InputPropertyError(at, f"set exactly one of {names}, got {got}")
    return present[0]


def required(args: Mapping[str, Any], key: str, *path: str | int) -> Any:
    """``args[key]``: the host checks required inputs, this names a nested one the schema cannot mark required."""
    value = args.get(key)
    if value is None:
        at = schema_path(*path, key)
        raise InputPropertyError(at, f"{at} is required")
    return value


def checked_value(annotation: Any, value: Any, *path: str | int) -> Any:
    """``value`` (the input at ``path``) checked as the stack config checks the same value (``annotation``: one of
    components/config_types.py's, say)."""
    try:
        return TypeAdapter(annotation).validate_python(_plain(value, schema_path(*path)))
    except ValidationError as exc:
        at = schema_path(*path)
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise InputPropertyError(at, f"{at}: {message}, got {value!r}") from None


def dated_override(value: Any, *path: str | int) -> str:
    """``value`` (the input at ``path``) as a dated override: a UTC date YYYY-MM-DD, as the stack config's."""
    try:
        # The overrides share one validator; BackupAuth.allowStale is one of them and every other field defaults.
        BackupAuthSettings(allow_stale=value)
    except ValidationError as exc:
        at = schema_path(*path)
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise InputPropertyError(at, f"{at}: {message}") from None
    return value


def problem(message: str, value: object, *path: str | int) -> InputPropertyError:
    """An InputPropertyError at ``path`` worded as settings_of words its own: where, what is wrong and expected,
    the value."""
    at = schema_path(*path)
    return InputPropertyError(at, f"{at}: {message}, got {value!r}")


def within_nodes(replicas: int, cluster: ClusterSettings, location: str) -> None:
    """The stack config's rule: several replicas are spread one per node, so more than the nodes never schedule."""
    if replicas > cluster.nodes:
        raise problem(f"exceeds cluster.nodes ({cluster.nodes}); replicas are spread one per node", replicas, location)
