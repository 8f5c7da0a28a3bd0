"""Stack config as the Pulumi CLI would hand it to the program, read from the project's YAML files.

The CLI merges ``Pulumi.yaml``'s ``config:`` block with ``Pulumi.<stack>.yaml`` key by key: a stack value
replaces the project value as a whole (objects are not merged), and the program receives strings (JSON for
objects and lists). ``secure:`` values cannot be decrypted offline; they become labelled placeholders and
their keys are reported as secret, so the program treats them exactly as it would real secrets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SECURE_PLACEHOLDER = "[offline placeholder for secret {key}]"


class StackFileError(Exception):
    """A project or stack file that cannot be read as Pulumi would read it."""


@dataclass(frozen=True, kw_only=True)
class StackSettings:
    project: str
    stack: str
    config: dict[str, str] = field(default_factory=dict)
    secret_keys: frozenset[str] = frozenset()


def list_stacks(project_dir: Path) -> list[str]:
    """Every stack with a ``Pulumi.<stack>.yaml`` beside ``Pulumi.yaml``, sorted."""
    names = {p.name.removeprefix("Pulumi.").rsplit(".", 1)[0] for p in project_dir.glob("Pulumi.*.y*ml")}
    return sorted(names)


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise StackFileError(f"{path.name}: not valid YAML: {exc}") from None
    if not isinstance(document, dict):
        raise StackFileError(f"{path.name}: expected a mapping at the top level")
    return document


def _qualify(key: str, project: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def _project_value(key: str, declaration: Any) -> tuple[bool, Any]:
    """(has a value, value) of one entry of Pulumi.yaml's config block."""
    if isinstance(declaration, dict):
        if "value" in declaration:
            return True, declaration["value"]
        if "default" in declaration:
            return True, declaration["default"]
        if "type" in declaration or "description" in declaration:
            return False, None
        raise StackFileError(
            f"Pulumi.yaml: config.{key}: an object value must be declared as `value:` (project config rule)"
        )
    return True, declaration


def _wire(value: Any) -> str:
    """The string form the CLI passes to the program."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _replace_secure(value: Any, key: str, placeholder: Callable[[str], str]) -> tuple[Any, bool]:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return placeholder(key), True
        pairs = [(k, _replace_secure(v, key, placeholder)) for k, v in value.items()]
        return {k: v for k, (v, _) in pairs}, any(s for _, (_, s) in pairs)
    if isinstance(value, list):
        items = [_replace_secure(v, key, placeholder) for v in value]
        return [v for v, _ in items], any(s for _, s in items)
    return value, False


def read_stack_settings(
    project_dir: Path,
    stack: str,
    *,
    placeholders: Mapping[str, Callable[[], str]] | None = None,
    assume_secrets: Sequence[str] = (),
) -> StackSettings:
    """Merge ``Pulumi.yaml`` and ``Pulumi.<stack>.yaml`` of ``project_dir`` like the CLI does.

    ``placeholders`` maps a fully qualified key to a function giving a well-formed stand-in for a
    ``secure:`` value of that key (for example a parseable kubeconfig); other secure values become
    ``[offline placeholder for secret <key>]``. ``assume_secrets`` names keys to treat as set with ``--secret``
    although the stack file lacks them (to plan what a stack would do once, say, an API key is configured).
    """
    project_file = project_dir / "Pulumi.yaml"
    if not project_file.is_file():
        raise StackFileError(f"{project_file}: no Pulumi.yaml")
    project_doc = _load_yaml(project_file)
    project = project_doc.get("name")
    if not isinstance(project, str) or not project:
        raise StackFileError("Pulumi.yaml: `name` is missing")
    stack_file = next(
        (p for p in (project_dir / f"Pulumi.{stack}.yaml", project_dir / f"Pulumi.{stack}.yml") if p.is_file()), None
    )
    if stack_file is None:
        known = ", ".join(list_stacks(project_dir)) or "none"
        raise StackFileError(f"no stack file Pulumi.{stack}.yaml (stacks here: {known})")

    merged: dict[str, Any] = {}
    for key, declaration in (project_doc.get("config") or {}).items():
        has_value, value = _project_value(str(key), declaration)
        if has_value:
            merged[_qualify(str(key), project)] = value
    for key, value in (_load_yaml(stack_file).get("config") or {}).items():
        if ":" not in str(key):
            raise StackFileError(f"{stack_file.name}: config key {key!r} needs a namespace, e.g. {project}:{key}")
        merged[str(key)] = value
    for key in assume_secrets:
        merged.setdefault(_qualify(key, project), {"secure": "assumed"})

    def placeholder(key: str) -> str:
        make = (placeholders or {}).get(key)
        return make() if make else SECURE_PLACEHOLDER.format(key=key)

    config: dict[str, str] = {}
    secret_keys: set[str] = set()
    for key, value in merged.items():
        plain, is_secret = _replace_secure(value, key, placeholder)
        config[key] = _wire(plain)
        if is_secret:
            secret_keys.add(key)
    return StackSettings(project=project, stack=stack, config=config, secret_keys=frozenset(secret_keys))
