"""One count of a Go duration for the whole library (``go_duration_ns``, policy/values.py): the policy's checkPeriod,
the config's durations (settings ``go_duration_in_range``) and Litestream's knobs (``parse_go_duration``).

Each caller keeps the syntax it accepted; only the count is shared. The property tests compare every caller with
the reader it had before (kept below, as they were at commit 7e4b03d) on random durations in that caller's syntax,
where that reader counted exactly; the examples pin Go's own rules (``time.ParseDuration``) where a reader before
did not: float64 fractions, the overflow rule at -2^63 and its uint64 sum, and Litestream's knobs past Go's limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from headscale_ha.components.config_types import Duration
from headscale_ha.components.litestream_config import parse_go_duration
from headscale_ha.components.settings.base import go_duration_in_range
from headscale_ha.policy.values import INT64_MAX, go_duration_ns, parse_go_duration_ns

_UNIT_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9}
_UNIT_NS["h"] = 3600 * 10**9
_UNITS = "ns|us|µs|μs|ms|s|m|h"
#: Fraction digits that keep a part a whole number of nanoseconds, where every reader before counted exactly.
_EXACT_DIGITS = {"ns": 0, "us": 3, "µs": 3, "μs": 3, "ms": 6, "s": 9, "m": 10, "h": 11}
_CONFIG_UNITS = ("ns", "us", "ms", "s", "m", "h")
_REASON = "the reason"

# ---------------------------------------------------------------------------------------------------------------
# The readers before the one count (commit 7e4b03d)


def _checkperiod_before(text: str) -> int:
    """policy/values.py ``parse_go_duration_ns``: the exact sum, truncated; refused above 2^63-1 ns either way."""
    if not re.fullmatch(rf"[+-]?(?:0|(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:{_UNITS}))+)", text):
        raise ValueError(f"{text!r} is not a Go duration like '12h', '30m' or '1h30m'")
    total = _exact_ns(text)
    if abs(total) > INT64_MAX:
        raise ValueError(f"duration {text!r} overflows")
    return int(total)


def _config_in_range_before(duration: str, *, above: str, reason: str) -> str:
    """components/settings/base.py ``go_duration_in_range``: whole nanoseconds per part (Decimal)."""

    def count(text: str) -> int:
        return sum(int(Decimal(n) * _UNIT_NS[u]) for n, u in re.findall(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)", text))

    if count(duration) > INT64_MAX:
        raise ValueError("is longer than Go's longest duration (about 2562047h), so it cannot be parsed")
    if count(duration) <= count(above):
        raise ValueError(f"must be more than {above}: {reason}")
    return duration


def _litestream_before(value: str, *, argument: str) -> int:
    """components/litestream_config.py ``parse_go_duration``: Go's syntax, a float64 sum, no limit."""
    if not re.fullmatch(rf"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:{_UNITS}))+|[-+]?0", value):
        raise ValueError(f"{argument}: {value!r} is not a Go duration (examples: '1s', '500ms', '1h30m', '72h')")
    total = sum(float(n) * _UNIT_NS[u] for n, u in re.findall(rf"(\d+(?:\.\d*)?|\.\d+)({_UNITS})", value))
    return (-1 if value.startswith("-") else 1) * int(total)


def _parts_ns(text: str) -> list[Decimal]:
    """Each part's exact value (the reference the readers are measured against)."""
    return [Decimal(n or "0") * _UNIT_NS[u] for n, u in re.findall(rf"(\d*(?:\.\d*)?)({_UNITS})", text)]


def _exact_ns(text: str) -> Decimal:
    return (-1 if text.startswith("-") else 1) * sum(_parts_ns(text), Decimal(0))


def _outcome(read: Callable[[], object]) -> object:
    """What a reader answers: its value, or the message it refuses with."""
    try:
        return read()
    except ValueError as exc:
        return f"refused: {exc}"


# ---------------------------------------------------------------------------------------------------------------
# Random durations in each caller's syntax


@st.composite
def _go_durations(draw: st.DrawFn, *, largest: int, fractions: bool = True) -> str:
    """Go's syntax: a sign, leading zeros, ``1.`` and ``.5`` numbers, µs; each part whole nanoseconds."""
    if draw(st.integers(0, 20)) == 0:
        return draw(st.sampled_from(["0", "+0", "-0"]))
    text = draw(st.sampled_from(["", "+", "-"]))
    for _ in range(draw(st.integers(1, 4))):
        unit = draw(st.sampled_from(list(_UNIT_NS)))
        whole = draw(st.integers(0, largest // _UNIT_NS[unit]))
        digits = draw(st.integers(0, _EXACT_DIGITS[unit] if fractions else 0))
        fraction = draw(st.text("0123456789", min_size=digits, max_size=digits))
        point = bool(fraction) or (fractions and draw(st.booleans()))
        whole_text = draw(st.sampled_from(["", "0"])) + str(whole)
        if fraction and draw(st.booleans()) and whole == 0:
            whole_text = ""
        text += whole_text + ("." + fraction if point else "") + unit
    return text


@st.composite
def _config_durations(draw: st.DrawFn) -> str:
    """The config's syntax (config_types ``Duration``): no sign, no µs, a digit on both sides of a point."""
    if draw(st.integers(0, 20)) == 0:
        return "0"
    text = ""
    for _ in range(draw(st.integers(1, 4))):
        unit = draw(st.sampled_from(_CONFIG_UNITS))
        whole = draw(st.integers(0, 2**64 // _UNIT_NS[unit]))
        digits = draw(st.integers(0, _EXACT_DIGITS[unit]))
        fraction = draw(st.text("0123456789", min_size=digits, max_size=digits))
        text += str(whole) + ("." + fraction if fraction else "") + unit
    return text


def _outside_go_edges(text: str) -> bool:
    """Not at Go's edges, where the readers before differed from Go (pinned below): a part of exactly 2^63 ns (two
    wrap Go's uint64 sum to 0), or a negative total of exactly 2^63 ns (Go takes -2^63)."""
    return all(part != 2**63 for part in _parts_ns(text)) and _exact_ns(text) != -(2**63)


@settings(max_examples=400, deadline=None)
@given(_go_durations(largest=2**64))
def test_the_checkperiod_counts_and_refuses_as_before(text: str) -> None:
    assume(_outside_go_edges(text))
    assert _outcome(lambda: parse_go_duration_ns(text)) == _outcome(lambda: _checkperiod_before(text))


@settings(max_examples=400, deadline=None)
@given(_config_durations(), st.sampled_from(["0s", "65s"]))
def test_the_config_durations_count_and_refuse_as_before(text: str, above: str) -> None:
    assume(_outside_go_edges(text))
    now = _outcome(lambda: go_duration_in_range(text, above=above, reason=_REASON))
    assert now == _outcome(lambda: _config_in_range_before(text, above=above, reason=_REASON))
    if _exact_ns(text) <= INT64_MAX:
        assert go_duration_ns(text) == _exact_ns(text)


@settings(max_examples=400, deadline=None)
@given(_go_durations(largest=2**53 // 8, fractions=False))
def test_litestreams_knobs_count_as_before(text: str) -> None:
    """Whole numbers below 2^53 ns: where the float64 sum before was exact (past them it was off by a few ns)."""
    assert parse_go_duration(text, argument="x") == _litestream_before(text, argument="x") == _exact_ns(text)


@settings(max_examples=600, deadline=None)
@given(st.text("0123456789.+-nsuµμmhd ٣", max_size=10))
def test_every_caller_accepts_the_texts_it_accepted(text: str) -> None:
    """Short texts of a duration's characters (and a non-ASCII digit, which two syntaxes admit): the same texts
    accepted and refused as before, by every caller; Litestream's knobs also refuse now what Go cannot hold."""
    assert _accepted(parse_go_duration_ns, text) == _accepted(_checkperiod_before, text)
    if _accepted(TypeAdapter(Duration).validate_python, text):
        now = _outcome(lambda: go_duration_in_range(text, above="0s", reason=_REASON))
        assert now == _outcome(lambda: _config_in_range_before(text, above="0s", reason=_REASON))
    litestream = _accepted(lambda value: parse_go_duration(value, argument="x"), text)
    if _accepted(lambda value: _litestream_before(value, argument="x"), text) and abs(_exact_ns(text)) > INT64_MAX:
        assert not litestream
    else:
        assert litestream == _accepted(lambda value: _litestream_before(value, argument="x"), text)


def _accepted(read: Callable[[str], object], text: str) -> bool:
    try:
        read(text)
    except (ValueError, ValidationError):
        return False
    return True


# ---------------------------------------------------------------------------------------------------------------
# Go's rules where a reader before differed


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("2562047h47m16.854775807s", INT64_MAX),
        ("-2562047h47m16.854775808s", -(2**63)),  # Go's least duration (the checkPeriod refused it before)
        ("9223372036854775808ns9223372036854775808ns", 0),  # Go sums in a uint64: 2^63 + 2^63 wraps to 0
        ("0.9999999999999999ns", 1),  # a fraction counts through float64 (0 before)
        ("0.5ns0.5ns", 0),  # and is truncated part by part (1 in the checkPeriod before)
        ("0.99999999999999999999999h", 3600 * 10**9),  # digits past uint64's are dropped (3599999999999 exactly)
        (".5h", 1800 * 10**9),
        ("1.h", 3600 * 10**9),
        ("-0", 0),
        ("+5µs", 5000),
        ("7μs", 7000),
    ],
)
def test_go_duration_ns_counts_as_go_does(text: str, nanoseconds: int) -> None:
    assert go_duration_ns(text) == nanoseconds


@pytest.mark.parametrize(
    "text",
    [
        "2562047h47m16.854775808s",
        "-2562047h47m16.854775809s",
        "9223372036854775809ns",
        "2562048h",
        "1ns9223372036854775807ns",
        "99999999999999999999h",
    ],
)
def test_go_duration_ns_refuses_what_go_cannot_hold(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"duration {text!r} overflows")):
        go_duration_ns(text)


@pytest.mark.parametrize("text", ["", "1", "1d", ".s", "1.5.5s", "++1s", "1s ", "00", "µs"])
def test_go_duration_ns_refuses_what_is_no_duration(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Go duration"):
        go_duration_ns(text)


def test_litestreams_knobs_refuse_what_go_cannot_hold() -> None:
    """Litestream reads its knobs with time.ParseDuration, so one past Go's limit fails at plan time now (the float
    sum before took it; the config refused it already, with backup.litestream's own rule)."""
    with pytest.raises(ValueError, match=r"^sync_interval: '3000000h' is not a Go duration"):
        parse_go_duration("3000000h", argument="sync_interval")
