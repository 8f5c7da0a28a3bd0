"""HuJSON, the policy's text format: JSON with comments and trailing commas, nothing else (as tailscale/hujson).

:func:`load_hujson` turns policy text into a document; refusals are a :class:`PolicyError` at ``(root)``.
It depends only on :mod:`.problems`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from headscale_ha.policy.problems import PolicyError, PolicyProblem

__all__ = ["load_hujson"]


def _strip_hujson(text: str) -> str:
    """Blank out comments and drop trailing commas (only after a value), keeping every other character in place."""
    out: list[str] = []
    i, n = 0, len(text)
    comma: int | None = None  # index in ``out`` of a comma that follows a value and may be trailing
    last = ""  # the last significant character
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            comma, last, i = None, '"', j + 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j == -1 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j == -1:
                raise ValueError("unterminated /* comment")
            out.append(re.sub(r"[^\n]", " ", text[i : j + 2]))
            i = j + 2
            continue
        if c in " \t\r\n":
            out.append(c)
            i += 1
            continue
        if c == "," and last not in ("", "[", "{", ",", ":"):
            comma = len(out)
        elif c in "]}" and comma is not None:
            out[comma] = " "
            comma = None
        else:
            comma = None
        out.append(c)
        last = c
        i += 1
    return "".join(out)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"Duplicate key {key!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _no_lone_surrogates(value: Any) -> None:
    if isinstance(value, str):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise ValueError("invalid UTF-16 surrogate in a string")
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_lone_surrogates(key)
            _no_lone_surrogates(item)
    elif isinstance(value, list):
        for item in value:
            _no_lone_surrogates(item)


def load_hujson(text: str) -> Any:
    """Parse HuJSON: JSON plus // and /* */ comments and trailing commas (tailscale/hujson, then Go's JSON).

    Duplicate keys, NaN/Infinity and lone surrogates are refused like Headscale; JSON5 extras (single quotes,
    unquoted keys, hex numbers) are refused too, because Headscale's parser refuses them.
    """
    try:
        value = json.loads(_strip_hujson(text), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        _no_lone_surrogates(value)
    except ValueError as exc:
        raise PolicyError([PolicyProblem("(root)", f"not valid HuJSON: {exc}")]) from None
    return value
