"""SQLite values seen the way PostgreSQL will hold them: fit checks for preflight, canonical text for verify.

Headscale writes times through Go's SQLite driver as ``2006-01-02 15:04:05.999999999-07:00`` text. PostgreSQL
keeps microseconds and rounds the rest (``rint`` on the parsed fraction), so both sides are compared as epoch
microseconds computed the same way. Booleans are 0/1 integers in SQLite, ``boolean`` in PostgreSQL; blobs are
compared as hex; text as the md5 of its UTF-8 bytes (what PostgreSQL's ``md5(text)`` hashes).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re

from migration.versions import BIGINT, BOOLEAN, BYTEA, TIMESTAMPTZ, Column

NULL = "\\N"  # canonical NULL on both sides; no canonical value can look like it
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1

_TIMESTAMP = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[ T](?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})(?P<frac>\.\d{1,9})?"
    r" ?(?P<zone>Z|[+-]\d{2}(?::?\d{2})?)?"
)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


def parse_timestamp(text: str) -> int:
    """Epoch microseconds PostgreSQL's timestamptz will hold for ``text`` (session time zone UTC).

    Raises ValueError for anything PostgreSQL might read differently or not at all (other formats, years
    outside 1..9999, numbers): preflight refuses those rather than letting pgloader guess.
    """
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise ValueError(f"not a 'YYYY-MM-DD HH:MM:SS[.fraction][zone]' timestamp: {text[:40]!r}")
    day = dt.date.fromisoformat(match["date"])
    hour, minute, second = int(match["h"]), int(match["m"]), int(match["s"])
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"time of day out of range: {text[:40]!r}")
    micros = round(float("0" + match["frac"]) * 1_000_000) if match["frac"] else 0  # rint, like PostgreSQL
    offset = 0
    zone = match["zone"]
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60
        if zone[0] == "-":
            offset = -offset
    seconds = (day.toordinal() - _EPOCH_ORDINAL) * 86400 + hour * 3600 + minute * 60 + second - offset
    return seconds * 1_000_000 + micros


def fit_problem(column: Column, value: object, sqlite_type: str) -> str | None:
    """Why ``value`` (as read with bytes text, ``sqlite_type`` from typeof()) will not load intact, or None."""
    if sqlite_type == "null":
        return None if column.nullable else "NULL in a NOT NULL column"
    if column.pg_type == BIGINT:
        if sqlite_type != "integer":
            return f"{sqlite_type} value where bigint needs an integer"
        assert isinstance(value, int)
        return None if BIGINT_MIN <= value <= BIGINT_MAX else "integer outside bigint"
    if column.pg_type == BOOLEAN:
        if sqlite_type != "integer" or value not in (0, 1):
            return f"{sqlite_type} value where boolean needs 0 or 1"
        return None
    if column.pg_type == BYTEA:
        return None if sqlite_type == "blob" else f"{sqlite_type} value where bytea needs a blob"
    if sqlite_type != "text":
        return f"{sqlite_type} value where {column.pg_type} needs text"
    assert isinstance(value, bytes)
    if b"\x00" in value:
        return "text contains a NUL byte (PostgreSQL text cannot hold it; pgloader cuts the value there)"
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return "text is not valid UTF-8"
    if column.pg_type == TIMESTAMPTZ:
        try:
            parse_timestamp(text)
        except ValueError as error:
            return f"unparseable timestamp: {error}"
        return None
    if column.max_length is not None and len(text) > column.max_length:
        return f"{len(text)} characters do not fit {column.pg_type}"
    if column.json and text != "":
        try:
            json.loads(text)
        except ValueError:
            return "not valid JSON"
    return None


def canonical(column: Column, value: object, sqlite_type: str) -> str:
    """The text verify expects PostgreSQL to produce for this SQLite value (see ``pg_canonical_sql``).

    A value preflight would refuse gets a marker that no PostgreSQL value produces, so it shows as a mismatch.
    """
    if sqlite_type == "null":
        return NULL
    if column.pg_type == BIGINT and sqlite_type == "integer":
        return str(value)
    if column.pg_type == BOOLEAN and sqlite_type == "integer" and value in (0, 1):
        return str(value)
    if column.pg_type == BYTEA and sqlite_type == "blob":
        assert isinstance(value, bytes)
        return value.hex()
    if column.pg_type == TIMESTAMPTZ and sqlite_type == "text":
        assert isinstance(value, bytes)
        try:
            return str(parse_timestamp(value.decode("utf-8")))
        except (UnicodeDecodeError, ValueError):
            return f"?unparseable {sqlite_type}"
    if column.pg_type not in (BIGINT, BOOLEAN, BYTEA, TIMESTAMPTZ) and sqlite_type == "text":
        assert isinstance(value, bytes)
        return hashlib.md5(value).hexdigest()  # a checksum, not a security boundary
    return f"?{sqlite_type} in {column.pg_type}"


def pg_canonical_sql(column: str, pg_type: str) -> str:
    """SQL expression giving ``canonical``'s text for a PostgreSQL column of ``pg_type``."""
    quoted = f'"{column}"'
    if pg_type in (BIGINT, "integer", "smallint"):
        expr = f"{quoted}::text"
    elif pg_type == BOOLEAN:
        expr = f"CASE WHEN {quoted} THEN '1' ELSE '0' END"
    elif pg_type == BYTEA:
        expr = f"encode({quoted}, 'hex')"
    elif pg_type == TIMESTAMPTZ:
        expr = f"(extract(epoch FROM {quoted}) * 1000000)::bigint::text"
    elif pg_type == "text" or pg_type.startswith("character varying"):
        expr = f"md5({quoted})"
    else:
        raise ValueError(f"no canonical form for PostgreSQL type {pg_type!r}")
    return f"coalesce({expr}, '{NULL}')"
