"""Values and paths of resource inputs, compared field by field (``make diff`` and the engine model in the tests).

A path is a tuple of tokens: a mapping key, a list index, or (key, value) for a list of records keyed by a unique
``key`` (containers, env and volumes by `name`; the stack outputs' records by their own keys), so an inserted
container reads as one change, not a shift.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class _Absent:
    """A value one side does not have."""

    def __repr__(self) -> str:
        return "absent"


ABSENT = _Absent()
#: Inputs that are no change of the resource: a dynamic resource's pickled provider (code, not state).
IGNORED_INPUTS = frozenset({"__provider"})

Token = str | int | tuple[str, str]  # a mapping key, a list index, or (key, value) for a list of records


def is_secret(value: Any) -> bool:
    """The dumper's secret marker, ``{"secret": <digest or None>}`` (not a volume's ``{"secret": {...}}``)."""
    return (
        isinstance(value, dict)
        and set(value) == {"secret"}
        and (value["secret"] is None or isinstance(value["secret"], str))
    )


def is_unknown(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"unknown"} and value["unknown"] is True


def format_path(tokens: Sequence[Token]) -> str:
    """``spec.template.spec.containers[name=headscale].image``; keys that are not identifiers as ``["k"]``."""
    text = ""
    for token in tokens:
        if isinstance(token, tuple):
            text += f"[{token[0]}={token[1]}]"
        elif isinstance(token, int):
            text += f"[{token}]"
        elif re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$-]*", token):
            text += f".{token}" if text else token
        else:
            text += f"[{json.dumps(token)}]"
    return text


@dataclass(frozen=True)
class FieldChange:
    """One changed value: ``old``/``new`` are ABSENT when the field appears or disappears."""

    path: tuple[Token, ...]
    old: Any
    new: Any
    refused: str | None = None  # why the API server refuses this update (an immutable field pulumi does not replace)
    note: str | None = None

    @property
    def secret(self) -> bool:
        return is_secret(self.old) or is_secret(self.new)

    @property
    def text(self) -> str:
        return format_path(self.path)


#: Resource inputs: Kubernetes lists of records (containers, env, volumes, ports) are keyed by `name`.
NAME_KEYS = ("name",)
#: Stack outputs: their lists of records, each keyed by the first of these its items all hold, unique and a string
#: (mustBackUp's `name`, recovery's `failure`, availability's `scenario`, failover's `step`, an edit's `key`, a
#: command's `run`).
OUTPUT_RECORD_KEYS = ("name", "failure", "scenario", "step", "key", "run")


def _record_key(old: list[Any], new: list[Any], keys: Sequence[str]) -> str | None:
    """The first of ``keys`` that every item of both lists holds, as a string unique within its list; an empty list
    takes any key (so a first record in an empty list is named too)."""
    if not (old or new):
        return None
    for key in keys:
        if all(_unique_strings(items, key) for items in (old, new)):
            return key
    return None


def _unique_strings(items: list[Any], key: str) -> bool:
    values = [i.get(key) for i in items if isinstance(i, dict)]
    return len(values) == len(items) and all(isinstance(v, str) for v in values) and len(set(values)) == len(values)


def _keyed_changes(
    old: list[Any], new: list[Any], key: str, path: tuple[Token, ...], keys: Sequence[str], align: bool
) -> list[FieldChange]:
    before = {i[key]: i for i in old}
    after = {i[key]: i for i in new}
    changes = []
    for name in [*before, *(n for n in after if n not in before)]:
        changes += diff_values(
            before.get(name, ABSENT), after.get(name, ABSENT), (*path, (key, name)), keys=keys, align=align
        )
    common_before = [n for n in before if n in after]
    common_after = [n for n in after if n in before]
    if common_before != common_after:
        changes.append(FieldChange(path, common_before, common_after, note="order changed"))
    return changes


def _aligned_changes(old: list[Any], new: list[Any], path: tuple[Token, ...], keys: Sequence[str]) -> list[FieldChange]:
    """A list compared as a sequence: an inserted or removed item is one change (at its own index), not a shift
    of every item after it; items replaced one for one are compared in place."""
    changes: list[FieldChange] = []
    matcher = difflib.SequenceMatcher(a=[_canonical(i) for i in old], b=[_canonical(i) for i in new], autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op == "replace" and a1 - a0 == b1 - b0:
            for offset in range(a1 - a0):
                changes += diff_values(old[a0 + offset], new[b0 + offset], (*path, b0 + offset), keys=keys, align=True)
            continue
        changes += [FieldChange((*path, index), old[index], ABSENT) for index in range(a0, a1)]
        changes += [FieldChange((*path, index), ABSENT, new[index]) for index in range(b0, b1)]
    return changes


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def diff_values(
    old: Any, new: Any, path: tuple[Token, ...] = (), *, keys: Sequence[str] = NAME_KEYS, align: bool = False
) -> list[FieldChange]:
    """Field-level differences. Lists of records are compared by the first of ``keys`` their items all hold
    uniquely (by `name` for resource inputs); other lists by index, or with ``align`` as sequences (stack outputs,
    where an inserted item is not a change of every item after it)."""
    if old == new:
        return []
    if is_secret(old) and is_secret(new):
        # A side planned without digests (an old harness) cannot tell: no change rather than a false one.
        if old["secret"] is None or new["secret"] is None:
            return []
        return [FieldChange(path, old, new)]
    if isinstance(old, dict) and isinstance(new, dict) and not is_secret(old) and not is_secret(new):
        changes = []
        for key in sorted(set(old) | set(new)):
            changes += diff_values(old.get(key, ABSENT), new.get(key, ABSENT), (*path, key), keys=keys, align=align)
        return changes
    if isinstance(old, list) and isinstance(new, list):
        record_key = _record_key(old, new, keys)
        if record_key is not None:
            return _keyed_changes(old, new, record_key, path, keys, align)
        if align:
            return _aligned_changes(old, new, path, keys)
        changes = []
        for index in range(max(len(old), len(new))):
            changes += diff_values(
                old[index] if index < len(old) else ABSENT,
                new[index] if index < len(new) else ABSENT,
                (*path, index),
                keys=keys,
            )
        return changes
    return [FieldChange(path, old, new)]


def value_at(value: Any, tokens: Sequence[Token]) -> Any:
    """The value at a path (ABSENT when missing); a ("name", x) token finds the list item named x."""
    for token in tokens:
        if isinstance(token, tuple):
            if not isinstance(value, list):
                return ABSENT
            value = next((i for i in value if isinstance(i, dict) and i.get(token[0]) == token[1]), ABSENT)
        elif isinstance(token, int):
            value = value[token] if isinstance(value, list) and token < len(value) else ABSENT
        else:
            value = value.get(token, ABSENT) if isinstance(value, dict) and not is_secret(value) else ABSENT
        if value is ABSENT:
            return ABSENT
    return value


def pattern(text: str) -> tuple[str | int, ...]:
    """``spec.containers[*].image`` → ("spec", "containers", "*", "image"); ``[0]`` → 0."""
    tokens: list[str | int] = []
    for part in re.findall(r"[^.\[\]]+|\[[^\]]*\]", text):
        if part.startswith("["):
            inner = part[1:-1].strip("\"'")
            tokens.append(int(inner) if inner.isdigit() else inner)
        else:
            tokens.append(part)
    return tuple(tokens)


def token_matches(pattern: str | int, token: Token) -> bool:
    """``*`` matches any list item (by index or by name); anything else matches itself."""
    return (pattern == "*" and not isinstance(token, str)) or token == pattern


def covers(pattern: Sequence[str | int], tokens: Sequence[Token]) -> bool:
    """The change at ``tokens`` is at or under ``pattern``."""
    return len(tokens) >= len(pattern) and all(token_matches(p, t) for p, t in zip(pattern, tokens, strict=False))


def reaches(pattern: Sequence[str | int], change: FieldChange) -> bool:
    """The change touches the field ``pattern``: it is at or under it, or it adds or removes a whole subtree that
    holds it."""
    if covers(pattern, change.path):
        return True
    if len(change.path) >= len(pattern) or not covers(pattern[: len(change.path)], change.path):
        return False
    rest = pattern[len(change.path) :]
    return any(exists(side, rest) for side in (change.old, change.new))


def exists(value: Any, pattern: Sequence[str | int]) -> bool:
    if not pattern:
        return value is not ABSENT
    head, rest = pattern[0], pattern[1:]
    if head == "*" or isinstance(head, int):
        if not isinstance(value, list):
            return False
        items = value if head == "*" else value[head : head + 1]
        return any(exists(i, rest) for i in items)
    return isinstance(value, dict) and head in value and exists(value[head], rest)
