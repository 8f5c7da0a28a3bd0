"""What the project's files set, for hints only: the CLI merges Pulumi.yaml and the stack file before the program
sees a value, so only the files can tell where a value came from (a misspelt namespace's file, a stack file's
object that replaced the project's whole object).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headscale_ha.components.settings import PROJECT
from headscale_ha.program.config_problems import GONE

#: Namespaces besides this project's that a stack may set: the engine's own and those of the provider packages the
#: program uses (requirements.txt: pulumi-kubernetes, pulumi-random). A key of any other namespace close to this
#: project's name is refused as a typo: nothing would read it, and its key would silently take its default.
KNOWN_NAMESPACES = ("pulumi", "kubernetes", "random")


@dataclass(frozen=True)
class ConfigFiles:
    """The config blocks of the project's ``Pulumi.yaml`` and ``Pulumi.<stack>.yaml``, as the program reads them.

    The CLI merges the two before the program sees a value, so only the files can tell where a value came from.
    Used for hints only, never as a source of values, and only where the value the program was given is the one
    the file holds. Keys are fully qualified (``headscale-ha:headscale``).
    """

    stack_file: str
    project_values: Mapping[str, Any]
    stack_values: Mapping[str, Any]

    def file_of(self, key: str) -> str | None:
        """The file that sets ``key`` (the stack file's value wins, as in the CLI), or None."""
        if key in self.stack_values:
            return self.stack_file
        return "Pulumi.yaml" if key in self.project_values else None


def read_config_files(directory: Path, *, stack: str) -> ConfigFiles | None:
    """The config of ``directory``'s Pulumi.yaml (this project's) and stack file, or None when either is missing or
    unreadable (the CLI reports those; the hints that would name a file are then left out)."""
    try:
        project_doc = yaml.safe_load((directory / "Pulumi.yaml").read_text())
        if not isinstance(project_doc, dict) or project_doc.get("name") != PROJECT:
            return None
        stack_dir = directory / str(project_doc.get("stackConfigDir") or ".")
        names = (f"Pulumi.{stack}.yaml", f"Pulumi.{stack}.yml")
        stack_path = next((stack_dir / name for name in names if (stack_dir / name).is_file()), None)
        stack_doc = yaml.safe_load(stack_path.read_text()) if stack_path is not None else None
    except (OSError, yaml.YAMLError):
        return None
    if stack_path is None or not isinstance(stack_doc, dict | None):
        return None
    project_config, stack_config = project_doc.get("config") or {}, (stack_doc or {}).get("config") or {}
    if not isinstance(project_config, dict) or not isinstance(stack_config, dict):
        return None
    project_values = {}
    for key, declaration in project_config.items():
        if isinstance(declaration, dict):  # project config declares a value (or a default) under `value:`
            if "value" not in declaration and "default" not in declaration:
                continue
            declaration = declaration.get("value", declaration.get("default"))
        project_values[str(key) if ":" in str(key) else f"{PROJECT}:{key}"] = declaration
    return ConfigFiles(
        stack_file=stack_path.name,
        project_values=project_values,
        stack_values={str(key): value for key, value in stack_config.items()},
    )


def namespace_problems(keys: Iterable[str], files: ConfigFiles | None, *, known: Sequence[str]) -> list[str]:
    """Keys of a namespace that is not this project's but is close to its name: a typo nothing reads (``known``:
    this project's keys, for the suggestion)."""
    problems = []
    for key in sorted(keys):
        namespace, colon, name = key.partition(":")
        if not colon or namespace in (PROJECT, *KNOWN_NAMESPACES):
            continue
        if not difflib.get_close_matches(namespace.lower(), [PROJECT], n=1):
            continue
        suggestion = name if name in known else next(iter(difflib.get_close_matches(name, known, n=1)), name)
        where = files.file_of(key) if files is not None else None
        # Never the value: a key in any namespace may hold a secret.
        problems.append(
            f"{key}: unknown namespace {namespace!r}{f' in {where}' if where else ''}, so nothing reads this key; "
            f"did you mean '{PROJECT}:{suggestion}'?"
        )
    return problems


#: A problem as ``problem`` writes it for a value that is not there: the key path it names.
_MISSING = re.compile(rf"^{re.escape(PROJECT)}:(?P<path>[^:\s]+): .*, got nothing$", re.DOTALL)
_PATH_PART = re.compile(r"[^.\[\]]+|\[(\d+)\]")


def _path_in(value: Any, path: str) -> bool:
    """Whether ``path`` (``sites[1].publicAddress``) is set in ``value``."""
    for match in _PATH_PART.finditer(path):
        if match.group(1) is not None:
            index = int(match.group(1))
            if not isinstance(value, list) or index >= len(value):
                return False
            value = value[index]
        elif isinstance(value, dict) and match.group(0) in value:
            value = value[match.group(0)]
        else:
            return False
    return value is not None


def replaced_objects(problems: Iterable[str], given: Mapping[str, Any], files: ConfigFiles | None) -> list[str]:
    """For each object the stack file sets over Pulumi.yaml's, when a key the config now lacks is in Pulumi.yaml's
    object: the stack file replaced the whole object (the CLI does not merge objects), so say which keys to copy."""
    if files is None:
        return []
    dropped: dict[str, list[str]] = {}
    for problem in problems:
        match = _MISSING.match(problem)
        top, _, rest = match["path"].partition(".") if match else ("", "", "")
        if "[" in top:
            top, rest = top.split("[", 1)[0], top[top.index("[") :] + (f".{rest}" if rest else "")
        key = f"{PROJECT}:{top}"
        project_value = files.project_values.get(key)
        if (
            rest
            and key in files.stack_values
            and isinstance(project_value, dict)
            and given.get(top, GONE) == files.stack_values[key]  # the program was given the stack file's object
            and _path_in(project_value, rest)
        ):
            dropped.setdefault(top, []).append(rest)
    return [
        f"{PROJECT}:{top}: the object in {files.stack_file} replaces Pulumi.yaml's whole object (objects are not "
        f"merged): copy the keys you keep ({', '.join(sorted(set(paths)))})"
        for top, paths in dropped.items()
    ]
