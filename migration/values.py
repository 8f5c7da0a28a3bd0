"""SQLite values seen the way PostgreSQL will hold them: fit checks for preflight, canonical text for verify.

Headscale writes times through Go's SQLite driver as ``2006-01-02 15:04:05.999999999-07:00`` text. PostgreSQL
keeps microseconds and rounds the rest (``rint`` on the parsed fraction), so both sides are compared as epoch
microseconds computed the same way. Booleans are 0/1 integers in SQLite, ``boolean`` in PostgreSQL; blobs are
compared as hex; text as the md5 of its UTF-8 bytes (what PostgreSQL's ``md5(text)`` hashes). NULL is its own
canonical value for every type, never folded into false, zero or the empty string.

The bounds below were found with the real tools (pgloader 3.6.7 on SBCL, PostgreSQL 15), see
tests/migration/test_preflight.py:

* integers: pgloader casts a SQLite ``integer`` column through ``integer-to-string``, which takes only SBCL
  fixnums (-2^62 .. 2^62-1); only the INTEGER PRIMARY KEY of a table listed in ``sqlite_sequence`` (pgloader's
  sign of AUTOINCREMENT) becomes ``bigserial`` and carries the whole int64 range;
* time zone offsets: PostgreSQL refuses hours above 15 and minutes above 59 ("time zone displacement out of
  range"), whatever the sign;
* index rows: a btree row (version 4, 8 kB pages) holds at most 2704 bytes; the size is computed the way
  PostgreSQL lays out an index tuple, uncompressed (PostgreSQL compresses some long values, preflight does not
  count on it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re

from migration.versions import BIGINT, BOOLEAN, BYTEA, TIMESTAMPTZ, Column

NULL = "\\N"  # canonical NULL on both sides; no canonical value can look like it
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
PGLOADER_INT_MIN, PGLOADER_INT_MAX = -(2**62), 2**62 - 1  # SBCL fixnums: what integer-to-string takes
MAX_OFFSET_HOURS = 15  # PostgreSQL: "time zone displacement out of range" above +-15:59
BTREE_MAX_ROW = 2704  # PostgreSQL's btree (version 4) maximum index row size on 8 kB pages

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
        offset_hours, offset_minutes = int(digits[:2]), int(digits[2:4] or 0)
        if offset_hours > MAX_OFFSET_HOURS or offset_minutes > 59:
            raise ValueError(f"time zone offset {zone} is beyond what PostgreSQL holds (-15:59 .. +15:59)")
        offset = offset_hours * 3600 + offset_minutes * 60
        if zone[0] == "-":
            offset = -offset
    seconds = (day.toordinal() - _EPOCH_ORDINAL) * 86400 + hour * 3600 + minute * 60 + second - offset
    return seconds * 1_000_000 + micros


def fit_problem(column: Column, value: object, sqlite_type: str, *, bigserial: bool = False) -> str | None:
    """Why ``value`` (as read with bytes text, ``sqlite_type`` from typeof()) will not load intact, or None.

    ``bigserial``: the column is the id of a table pgloader sees as AUTOINCREMENT (listed in sqlite_sequence),
    the only integers it carries beyond fixnums. The message never holds the value itself.
    """
    if sqlite_type == "null":
        return None if column.nullable else "NULL in a NOT NULL column"
    if column.pg_type == BIGINT:
        return _bigint_problem(value, sqlite_type, bigserial=bigserial)
    if column.pg_type == BOOLEAN:
        if sqlite_type != "integer" or value not in (0, 1):
            return f"{sqlite_type} value where boolean needs 0 or 1"
        return None
    if column.pg_type == BYTEA:
        return None if sqlite_type == "blob" else f"{sqlite_type} value where bytea needs a blob"
    if sqlite_type != "text":
        return f"{sqlite_type} value where {column.pg_type} needs text"
    assert isinstance(value, bytes)
    return _text_problem(column, value)


def _bigint_problem(value: object, sqlite_type: str, *, bigserial: bool) -> str | None:
    """An integer within what pgloader carries into this bigint column (see the module's bounds)."""
    if sqlite_type != "integer":
        return f"{sqlite_type} value where bigint needs an integer"
    assert isinstance(value, int)
    if bigserial:
        return None if BIGINT_MIN <= value <= BIGINT_MAX else "integer outside bigint"
    if PGLOADER_INT_MIN <= value <= PGLOADER_INT_MAX:
        return None
    return (
        "integer outside -2^62 .. 2^62-1, the range pgloader carries in this column (its integer-to-string"
        " cast takes SBCL fixnums only; it fails the whole batch)"
    )


def _text_problem(column: Column, value: bytes) -> str | None:
    """Text PostgreSQL can hold (no NUL, UTF-8) that also keeps the column's own rule: a timestamp, a length, JSON."""
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
            return f"unparseable timestamp: {error}" if not column.secret else "unparseable timestamp"
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
        expr = f"CASE WHEN {quoted} THEN '1' WHEN NOT {quoted} THEN '0' END"  # NULL stays NULL
    elif pg_type == BYTEA:
        expr = f"encode({quoted}, 'hex')"
    elif pg_type == TIMESTAMPTZ:
        expr = f"(extract(epoch FROM {quoted}) * 1000000)::bigint::text"
    elif pg_type == "text" or pg_type.startswith("character varying"):
        expr = f"md5({quoted})"
    else:
        raise ValueError(f"no canonical form for PostgreSQL type {pg_type!r}")
    return f"coalesce({expr}, '{NULL}')"


def _align(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment


def index_row_size(parts: list[tuple[str, object]]) -> int:
    """Bytes of the btree index tuple PostgreSQL forms for these (pg_type, value) key columns, uncompressed.

    The 8-byte tuple header (16 with a NULL bitmap), then each non-NULL value aligned for its type: 8-byte
    fixed types, or a varlena with a 1-byte header up to 126 bytes (no alignment) and a 4-byte header
    (4-aligned) above; the whole MAXALIGNed to 8. ``value`` is the UTF-8 or blob bytes of a varlena, or None.
    """
    header = 16 if any(value is None for _, value in parts) else 8
    size = 0
    for pg_type, value in parts:
        if value is None:
            continue
        if pg_type in (BIGINT, TIMESTAMPTZ):
            size = _align(size, 8) + 8
        elif pg_type == BOOLEAN:
            size += 1
        else:
            length = len(value) if isinstance(value, bytes) else len(str(value).encode())
            size = size + length + 1 if length <= 126 else _align(size, 4) + length + 4
    return _align(header + size, 8)
