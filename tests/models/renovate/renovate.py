"""Renovate's regex custom managers and package rules, applied in Python the way Renovate applies them.

tests/test_renovate.py proves renovate.json against the repository's files with this model: what the managers
extract, what a package rule holds back, and what one update (a Renovate branch) writes. Modelled after
Renovate's documentation (docs.renovatebot.com/modules/manager/regex, configuration-options) and its source
(lib/modules/manager/custom/regex, lib/workers/repository/update/branch/auto-replace.ts):

- a manager handles a file when one of its ``managerFilePatterns`` (``/regex/``) is found in the
  repository-relative path and no ``ignorePaths`` entry covers it;
- every ``matchStrings`` entry is compiled with the ``g`` flag only (no ``m``, no ``s``) by RE2, the JavaScript
  flavour without lookaround or back-references; each match is one dependency (``matchStringsStrategy`` "any"),
  its named groups the fields (``depName``, ``currentValue``, ``currentDigest``, ``indentation``, ...), a
  ``<field>Template`` compiled with the groups instead; the whole match is the dependency's ``replaceString``;
- package rules whose every ``match*`` selector matches are merged in order, a later one overriding;
  ``enabled: false`` drops the dependency, ``allowedVersions`` (the ``/regex/`` form) filters new versions;
- an update renders ``autoReplaceStringTemplate`` with the dependency and ``newValue`` / ``newDigest``, puts it in
  place of the first occurrence of the ``replaceString`` after which the manager, run again, extracts the new
  value at the same index; a ``replaceString`` already gone is left alone ("already updated"). One branch holds
  every update of one ``depName``, applied one after the other to the files' current text.

Everything else is refused rather than guessed: JavaScript regex syntax Python reads differently, other
strategies, glob package names, Handlebars helpers and standalone block lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The fields a regex manager takes from named groups or ``<field>Template`` (lib/modules/manager/custom/regex).
MATCH_FIELDS = (
    "depName",
    "packageName",
    "currentValue",
    "currentDigest",
    "datasource",
    "versioning",
    "extractVersion",
    "registryUrl",
    "depType",
    "indentation",
)
#: What an ``autoReplaceStringTemplate`` may name here: the dependency's fields and the update's.
UPDATE_FIELDS = (*MATCH_FIELDS, "newValue", "newDigest")
MANAGER = "custom.regex"
SELECTORS = ("matchDatasources", "matchDepTypes", "matchManagers", "matchPackageNames", "matchUpdateTypes")


class UnmodelledError(ValueError):
    """renovate.json uses something this model does not reproduce: extend the model, do not guess."""


# ------------------------------------------------------------------------------------------- regexes


def _javascript_named_group(pattern: str, index: int) -> str:
    """What replaces ``(?<`` at ``index``: Python's ``(?P<`` for a named group; lookbehind is refused."""
    after = pattern[index + 3 : index + 4]
    if after in {"=", "!"}:
        raise UnmodelledError(f"lookbehind in {pattern!r}: RE2 has none, Renovate refuses the config")
    return "(?P<"


def python_regex(pattern: str) -> re.Pattern[str]:
    """A Renovate (RE2, JavaScript syntax) pattern as Python compiles the same language.

    Named groups are spelled ``(?<name>`` in JavaScript, ``(?P<name>`` in Python. ``\\d``, ``\\w`` and ``\\s``
    are ASCII in RE2 (re.ASCII). ``$`` (no ``m`` flag) is the end of the text, Python's ``\\Z``: Python's own ``$``
    also matches before a final newline. RE2 has no lookaround or back-references: refused.
    """
    out, index, in_class = [], 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            escaped = pattern[index + 1 : index + 2]
            if not in_class and escaped and escaped in "123456789k":
                raise UnmodelledError(f"back-reference in {pattern!r}: RE2 has none")
            out.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern[index + 1 : index + 2] == "]" or pattern[index + 1 : index + 3] == "^]":
                raise UnmodelledError(f"a class opening with ']' in {pattern!r} reads differently in JavaScript")
        elif pattern.startswith("(?<", index):
            out.append(_javascript_named_group(pattern, index))
            index += 3
            continue
        elif pattern.startswith(("(?=", "(?!"), index):
            raise UnmodelledError(f"lookahead in {pattern!r}: RE2 has none")
        elif char == "$":
            out.append(r"\Z")  # JavaScript's $ without the m flag; Python's also matches before a final newline
            index += 1
            continue
        out.append(char)
        index += 1
    return re.compile("".join(out), re.ASCII)


def slash_regex(value: str) -> re.Pattern[str] | None:
    """A ``/regex/`` (or ``/regex/i``) config value as a pattern; None for a plain string."""
    found = re.fullmatch(r"/(.+)/(i?)", value, re.DOTALL)
    if found is None:
        return None
    compiled = python_regex(found[1])
    return re.compile(compiled.pattern, compiled.flags | (re.IGNORECASE if found[2] else 0))


# ------------------------------------------------------------------------------------------- templates

_TAG = re.compile(r"(\{\{\{[^{}]*\}\}\}|\{\{[^{}]*\}\})")
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;", "`": "&#x60;", "=": "&#x3D;"}


def _check_not_standalone(tokens: list[str], index: int) -> None:
    """Handlebars removes the whole line of a block tag that stands alone on it; not modelled, so refused."""
    before = "".join(tokens[:index]).rsplit("\n", 1)[-1]
    after = "".join(tokens[index + 1 :]).split("\n", 1)[0]
    if not before.strip() and not after.strip():
        raise UnmodelledError(f"standalone block tag {tokens[index]!r}: Handlebars strips its line")


def _value(name: str, fields: Mapping[str, str], known: Iterable[str]) -> str:
    if name not in fields and name not in known:
        raise UnmodelledError(f"template field {name!r} is not modelled")
    return fields.get(name) or ""


def _render(tokens: list[str], start: int, fields: Mapping[str, str], known: Iterable[str]) -> tuple[str, int, str]:
    """Render from ``start`` to the end or to a closing ``{{else}}`` / ``{{/if}}``: (text, next index, closer)."""
    out, index = [], start
    while index < len(tokens):
        token = tokens[index]
        inner = token.strip("{}").strip()
        if not _TAG.fullmatch(token):
            out.append(token)
        elif inner in {"else", "/if"}:
            _check_not_standalone(tokens, index)
            return "".join(out), index + 1, inner
        elif inner.startswith("#if "):
            _check_not_standalone(tokens, index)
            chosen = bool(_value(inner.removeprefix("#if ").strip(), fields, known))
            then, index, closer = _render(tokens, index + 1, fields, known)
            otherwise = ""
            if closer == "else":
                otherwise, index, closer = _render(tokens, index, fields, known)
            if closer != "/if":
                raise UnmodelledError(f"unclosed {{{{#if}}}} in {''.join(tokens)!r}")
            out.append(then if chosen else otherwise)
            continue
        elif not re.fullmatch(r"[A-Za-z]+", inner):
            raise UnmodelledError(f"template tag {token!r}: helpers and paths are not modelled")
        else:
            value = _value(inner, fields, known)
            out.append(value if token.startswith("{{{") else "".join(_ESCAPES.get(c, c) for c in value))
        index += 1
    return "".join(out), index, ""


def render(template: str, fields: Mapping[str, str], known: Iterable[str] = ()) -> str:
    """Handlebars as Renovate compiles its templates: ``{{{x}}}`` raw, ``{{x}}`` HTML-escaped, ``{{#if x}}``
    (with ``{{else}}``) on truthiness; a field in ``known`` but not in ``fields`` renders empty."""
    text, _, closer = _render(_TAG.split(template), 0, fields, tuple(known))
    if closer:
        raise UnmodelledError(f"{{{{{closer}}}}} without {{{{#if}}}} in {template!r}")
    return text


# ------------------------------------------------------------------------------------------- extraction


@dataclass(frozen=True, kw_only=True)
class Dependency:
    """One match of one regex manager in one file: Renovate's ``PackageDependency`` and where it came from."""

    file: str
    manager: int
    index: int
    fields: Mapping[str, str]
    replace_string: str

    @property
    def name(self) -> str:
        return self.fields.get("depName") or self.fields["packageName"]


def _ignored(config: Mapping[str, Any], relative: str) -> bool:
    """``ignorePaths``: only the ``dir/**`` globs renovate.json uses are modelled."""
    for pattern in config.get("ignorePaths", []):
        if not pattern.endswith("/**") or any(c in pattern[:-3] for c in "*?[]{}!"):
            raise UnmodelledError(f"ignorePaths entry {pattern!r}")
        if relative.startswith(pattern[:-2]):
            return True
    return False


def managers_for(config: Mapping[str, Any], relative: str) -> list[int]:
    """The indexes of the regex managers that handle the repository-relative path ``relative``."""
    if _ignored(config, relative):
        return []
    found = []
    for number, manager in enumerate(config["customManagers"]):
        patterns = [slash_regex(p) for p in manager["managerFilePatterns"]]
        if any(p is None for p in patterns):
            raise UnmodelledError(f"managerFilePatterns {manager['managerFilePatterns']!r}: only /regex/ is modelled")
        if any(p.search(relative) for p in patterns if p is not None):
            found.append(number)
    return found


def _fields(manager: Mapping[str, Any], groups: Mapping[str, str], names: Iterable[str]) -> dict[str, str]:
    """A dependency's fields from a match's groups (``names``: every group of the pattern, matched or not): a
    field's template wins over its group."""
    fields = {}
    for field in MATCH_FIELDS:
        template = manager.get(f"{field}Template")
        if template is not None:
            fields[field] = render(template, groups, known=names)
        elif groups.get(field):
            fields[field] = groups[field]
    if "indentation" in fields and fields["indentation"].strip():
        fields["indentation"] = ""  # Renovate keeps it only when it is whitespace
    return fields


def extract(config: Mapping[str, Any], number: int, relative: str, text: str) -> list[Dependency]:
    """What regex manager ``number`` extracts from ``text``: every match of every matchString, in that order."""
    manager = config["customManagers"][number]
    if manager.get("customType") != "regex" or manager.get("matchStringsStrategy", "any") != "any":
        raise UnmodelledError(f"manager {number}: only customType regex with matchStringsStrategy any is modelled")
    found = []
    for pattern in manager["matchStrings"]:
        regex = python_regex(pattern)
        for match in regex.finditer(text):
            groups = {name: value for name, value in match.groupdict().items() if value is not None}
            fields = _fields(manager, groups, regex.groupindex)
            if (fields.get("depName") or fields.get("packageName")) and (
                fields.get("currentValue") or fields.get("currentDigest")
            ):
                found.append(
                    Dependency(file=relative, manager=number, index=len(found), fields=fields, replace_string=match[0])
                )
    return found


def extract_all(config: Mapping[str, Any], files: Mapping[str, str]) -> list[Dependency]:
    """Every dependency every regex manager extracts from ``files`` (relative path → text)."""
    return [
        dep
        for relative in sorted(files)
        for number in managers_for(config, relative)
        for dep in extract(config, number, relative, files[relative])
    ]


# ------------------------------------------------------------------------------------------- package rules


def _names_match(patterns: list[str], name: str) -> bool:
    for pattern in patterns:
        regex = slash_regex(pattern)
        if regex is None and any(c in pattern for c in "*?[]{}!"):
            raise UnmodelledError(f"matchPackageNames {pattern!r}: globs and negations are not modelled")
        if regex.search(name) if regex is not None else pattern == name:
            return True
    return False


def _selected(rule: Mapping[str, Any], dep: Dependency, update_type: str | None) -> bool:
    """Every selector of ``rule`` matches ``dep`` (and the update type, None before any update is known)."""
    unknown = {key for key in rule if key.startswith(("match", "exclude"))} - set(SELECTORS)
    if unknown:
        raise UnmodelledError(f"package rule selectors {sorted(unknown)}")
    values = {
        "matchDatasources": dep.fields.get("datasource"),
        "matchDepTypes": dep.fields.get("depType"),
        "matchManagers": MANAGER,
        "matchUpdateTypes": update_type,
    }
    for key, value in values.items():
        if key in rule and value not in rule[key]:
            return False
    # Renovate matches matchPackageNames against packageName, which is depName unless a manager sets it
    package = dep.fields.get("packageName") or dep.name
    return "matchPackageNames" not in rule or _names_match(rule["matchPackageNames"], package)


def settings(config: Mapping[str, Any], dep: Dependency, update_type: str | None = None) -> dict[str, Any]:
    """The package rules' settings for ``dep``: every selecting rule merged in order, selectors left out."""
    merged: dict[str, Any] = {}
    for rule in config.get("packageRules", []):
        if _selected(rule, dep, update_type):
            merged.update({k: v for k, v in rule.items() if not k.startswith(("match", "exclude"))})
    return merged


def enabled(config: Mapping[str, Any], dep: Dependency) -> bool:
    return settings(config, dep).get("enabled", True) is not False


def allowed(config: Mapping[str, Any], dep: Dependency, new_value: str) -> bool:
    """``allowedVersions`` of ``dep``'s rules admits ``new_value`` (only the ``/regex/`` form is modelled)."""
    value = settings(config, dep).get("allowedVersions")
    if value is None:
        return True
    negated = value.startswith("!")
    regex = slash_regex(value.removeprefix("!"))
    if regex is None:
        raise UnmodelledError(f"allowedVersions {value!r}: only the /regex/ form is modelled")
    return bool(regex.search(new_value)) != negated


def update_type(current: str, new: str) -> str:
    """Docker versioning's update type of ``current`` → ``new``: the first numeric part that differs."""
    parts = [re.match(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", v) for v in (current, new)]
    if parts[0] is None or parts[1] is None:
        raise UnmodelledError(f"versions {current!r} → {new!r}")
    for kind, old_part, new_part in zip(("major", "minor", "patch"), parts[0].groups(), parts[1].groups(), strict=True):
        if old_part != new_part:
            return kind
    return "digest"


# ------------------------------------------------------------------------------------------- updates


def _confirmed(config: Mapping[str, Any], dep: Dependency, text: str, new_value: str, new_digest: str | None) -> bool:
    """Renovate's check after a replacement: the manager, run again, extracts the new value at the same index."""
    again = extract(config, dep.manager, dep.file, text)
    if dep.index >= len(again) or again[dep.index].name != dep.name:
        return False
    fields = again[dep.index].fields
    return fields.get("currentValue") == new_value and (new_digest is None or fields.get("currentDigest") == new_digest)


def auto_replace(
    config: Mapping[str, Any], dep: Dependency, text: str, new_value: str, new_digest: str | None = None
) -> str:
    """``text`` with ``dep`` updated as Renovate's doAutoReplace does it; unchanged when its match is gone."""
    start = text.find(dep.replace_string)
    if start == -1:
        return text  # "Cannot find replaceString in current file content. Was it already updated?"
    template = config["customManagers"][dep.manager].get("autoReplaceStringTemplate")
    if template is None:
        raise UnmodelledError("a regex manager without autoReplaceStringTemplate")
    update = {**dep.fields, "newValue": new_value, **({"newDigest": new_digest} if new_digest else {})}
    replacement = render(template, update, known=UPDATE_FIELDS)
    for index in range(start, len(text)):
        if text.startswith(dep.replace_string, index):
            candidate = text[:index] + replacement + text[index + len(dep.replace_string) :]
            if _confirmed(config, dep, candidate, new_value, new_digest):
                return candidate
    raise AssertionError(f"{dep.file}: updating {dep.name} fails (Renovate: WORKER_FILE_UPDATE_FAILED)")


def proposed(config: Mapping[str, Any], dep: Dependency, new_value: str, new_digest: str | None) -> bool:
    """Renovate proposes ``new_value`` for ``dep``: enabled for that update type, admitted, and a change."""
    if dep.fields.get("currentValue") == new_value and (
        new_digest is None or dep.fields.get("currentDigest") == new_digest
    ):
        return False
    kind = update_type(dep.fields.get("currentValue", new_value), new_value)
    return settings(config, dep, kind).get("enabled", True) is not False and allowed(config, dep, new_value)


def branch(
    config: Mapping[str, Any], files: Mapping[str, str], dep_name: str, new_value: str, new_digest: str | None = None
) -> dict[str, str]:
    """The files after Renovate's branch for ``dep_name`` → ``new_value`` (``@new_digest``): every dependency of
    that name it proposes the update for, extracted from ``files`` and applied in turn to the current text."""
    updated = dict(files)
    for dep in extract_all(config, files):
        if dep.name == dep_name and proposed(config, dep, new_value, new_digest):
            updated[dep.file] = auto_replace(config, dep, updated[dep.file], new_value, new_digest)
    return updated


def load(path: Path) -> dict[str, Any]:
    """renovate.json (plain JSON: a renovate.json5 would need a JSON5 reader)."""
    return json.loads(path.read_text())
