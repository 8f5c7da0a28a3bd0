"""The syntax errors of ``github.com/tailscale/hujson``'s ``Parse``, the first step of Headscale's policy parser.

Why: Headscale answers a policy that is not HuJSON with ``parsing HuJSON: hujson: line L, column C: <what>``, and
the project's policy model (built on Python's ``json``) words and places those errors differently. This scanner
follows hujson's grammar (JSON with comments and trailing commas, literals checked like ``encoding/json.Valid``) only
far enough to find the first error, with hujson's wording and its byte-based line and column; it builds no value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EOF = "unexpected EOF"
_LITERAL_BYTE = re.compile(rb"[-+.a-zA-Z0-9]*")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_STRING_ESCAPE = re.compile(rb'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')


@dataclass
class _SyntaxError(Exception):
    """One hujson error: where it points (a byte offset), what it says, and whether it is the bare ``}``/``]``
    that hujson reads as the end of the enclosing object or array (``closer``, only where no value began)."""

    offset: int
    message: str
    closer: bytes = b""


def hujson_error(text: str) -> str | None:
    """hujson's ``Parse`` error for ``text`` (``hujson: line 1, column 11: parsing value: unexpected EOF``), or None
    when the text is HuJSON."""
    data = text.encode("utf-8", "surrogatepass")
    try:
        end = _parse_next(data, 0)[2]
        if end < len(data):
            raise _SyntaxError(end, _invalid_character(data[end:], "after top-level value"))
    except _SyntaxError as error:
        line = 1 + data.count(b"\n", 0, error.offset)
        column = 1 + error.offset - (data.rfind(b"\n", 0, error.offset) + 1)
        return f"hujson: line {line}, column {column}: {error.message}"
    return None


def _parse_next(data: bytes, at: int) -> tuple[bytes, int, int]:
    """A value with the white space and comments around it: (its first byte, where it starts, the offset after it
    all)."""
    start = _skip_extra(data, at)
    end = _parse_value(data, start)
    return data[start : start + 1], start, _skip_extra(data, end)


def _parse_value(data: bytes, at: int) -> int:
    if at == len(data):
        raise _SyntaxError(at, f"parsing value: {_EOF}")
    first = data[at : at + 1]
    if first in (b"}", b"]"):
        raise _SyntaxError(at, f"invalid character '{first.decode()}' at start of value", closer=first)
    if first == b"{":
        return _parse_members(data, at + 1)
    if first == b"[":
        return _parse_elements(data, at + 1)
    if first == b'"':
        return _parse_string(data, at)
    literal = _LITERAL_BYTE.match(data, at)
    end = literal.end() if literal else at
    if end == at:
        raise _SyntaxError(at, _invalid_character(data[at:], "at start of value"))
    _check_literal(data[at:end], at)
    return end


def _child(data: bytes, at: int, closer: bytes) -> tuple[bytes, int, int] | int:
    """The next member name or element, or the offset after ``closer`` when it closes the container instead.
    An error leaving a container never closes an outer one (the container is a value already)."""
    try:
        return _parse_next(data, at)
    except _SyntaxError as error:
        if error.closer == closer:
            return error.offset + 1
        error.closer = b""
        raise


def _parse_members(data: bytes, at: int) -> int:
    while True:
        name = _child(data, at, b"}")
        if isinstance(name, int):
            return name
        kind, start, at = name
        if kind != b'"':
            raise _SyntaxError(start, _invalid_character(data[start:], "at start of object name"))
        if at == len(data):
            raise _SyntaxError(at, f"parsing object after name: {_EOF}")
        if data[at : at + 1] != b":":
            raise _SyntaxError(at, _invalid_character(data[at:], "after object name"))
        at = _nested(data, at + 1)
        if at == len(data):
            raise _SyntaxError(at, f"parsing object after value: {_EOF}")
        separator = data[at : at + 1]
        if separator == b"}":
            return at + 1
        if separator != b",":
            raise _SyntaxError(at, _invalid_character(data[at:], "after object value (expecting ',' or '}')"))
        at += 1


def _parse_elements(data: bytes, at: int) -> int:
    while True:
        element = _child(data, at, b"]")
        if isinstance(element, int):
            return element
        at = element[2]
        if at == len(data):
            raise _SyntaxError(at, f"parsing array after value: {_EOF}")
        separator = data[at : at + 1]
        if separator == b"]":
            return at + 1
        if separator != b",":
            raise _SyntaxError(at, _invalid_character(data[at:], "after array value (expecting ',' or ']')"))
        at += 1


def _nested(data: bytes, at: int) -> int:
    """A member's value: any error it raises (a bare ``}`` included) is the object's error."""
    try:
        return _parse_next(data, at)[2]
    except _SyntaxError as error:
        error.closer = b""
        raise


def _parse_string(data: bytes, at: int) -> int:
    end, escaped = at + 1, False
    while True:
        if end == len(data):
            raise _SyntaxError(end, f"parsing string: {_EOF}")
        byte = data[end : end + 1]
        if escaped:
            escaped = False
        elif byte == b"\\":
            escaped = True
        elif byte == b'"':
            _check_literal(data[at : end + 1], at)
            return end + 1
        end += 1


def _check_literal(literal: bytes, at: int) -> None:
    """``Literal.IsValid``: what ``encoding/json.Valid`` accepts (strings are not checked for UTF-8)."""
    if literal.startswith(b'"'):
        body = _STRING_ESCAPE.sub(b"", literal[1:-1])
        valid = b"\\" not in body and not any(byte < 0x20 for byte in body)
    else:
        valid = literal in (b"true", b"false", b"null") or _NUMBER.fullmatch(literal) is not None
    if not valid:
        raise _SyntaxError(at, f"invalid literal: {literal.decode('utf-8', 'replace')}")


def _skip_extra(data: bytes, at: int) -> int:
    """White space and comments (``consumeExtra``): an unterminated comment, even a ``//`` one at the very end
    without its newline, is an error."""
    while at < len(data):
        byte = data[at : at + 1]
        if byte in (b" ", b"\t", b"\r", b"\n"):
            at += 1
            continue
        end_mark = {b"//": b"\n", b"/*": b"*/"}.get(data[at : at + 2])
        if byte != b"/" or end_mark is None:
            return at
        end = data.find(end_mark, at + 2)
        if end == -1:
            raise _SyntaxError(at, f"parsing comment: {_EOF}")
        end += len(end_mark)
        try:
            data[at:end].decode("utf-8")
        except UnicodeDecodeError:
            raise _SyntaxError(at, "invalid UTF-8 in comment") from None
        at = end
    return at


def _invalid_character(rest: bytes, where: str) -> str:
    """``newInvalidCharacterError``: the first rune as Go's ``%q`` prints it, or ``'\\xNN'`` for a bad byte."""
    for size in range(1, 5):
        try:
            char = rest[:size].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    else:
        return f"invalid character '\\x{rest[0]:02x}' {where}"
    if char.isprintable():
        quoted = {"'": "\\'", "\\": "\\\\"}.get(char, char)
    elif ord(char) <= 0xFFFF:
        quoted = f"\\u{ord(char):04x}"
    else:
        quoted = f"\\U{ord(char):08x}"
    return f"invalid character '{quoted}' {where}"
