"""The readers of one value at a time, with Go's parsing rules (policy/values.py): prefixes, aliases, ports,
destinations and protocols. What a whole document makes of them is in test_conformance.py and test_check.py."""

from __future__ import annotations

import pytest

from headscale_ha.policy.values import parse_alias, parse_destination, parse_ports, parse_prefix, protocol_numbers


@pytest.mark.parametrize(
    ("text", "network", "bare"),
    [("10.0.0.1", "10.0.0.1/32", True), ("10.0.0.1/8", "10.0.0.0/8", False), ("FD00::1", "fd00::1/128", True)],
)
def test_parse_prefix(text: str, network: str, bare: bool) -> None:
    assert (str(parse_prefix(text)[0]), parse_prefix(text)[1]) == (network, bare)


@pytest.mark.parametrize("text", ["10.0.0.0/+8", "10.0.0.0/", "10.0.0.1/33", "010.0.0.1", "10.0.0.0/8 ", "fe80::1%0"])
def test_parse_prefix_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a valid|zones"):
        parse_prefix(text)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("*", "'*'"),
        ("a@", "user"),
        ("group:x@y", "user"),
        ("tag:x", "tag"),
        ("web", "host"),
        ("", "host"),
        ("10.0.0.1", "IP/CIDR"),
        ("autogroup:x", "autogroup"),
    ],
)
def test_parse_alias_follows_headscales_order(text: str, kind: str) -> None:
    assert parse_alias(text, version="0.29").kind.value == kind


@pytest.mark.parametrize(
    ("text", "ranges"),
    [
        ("*", ((0, 65535),)),
        ("22", ((22, 22),)),
        ("+22", ((22, 22),)),
        ("0-10", ((0, 10),)),
        ("80--90", ((80, 90),)),
        ("022", ((22, 22),)),
    ],
)
def test_parse_ports_like_go(text: str, ranges: tuple[tuple[int, int], ...]) -> None:
    assert parse_ports(text) == ranges


def test_destinations_and_protocols() -> None:
    alias, ports = parse_destination("[fd7a:115c:a1e0::1]:80-90", version="0.29")
    assert (alias.text, ports) == ("fd7a:115c:a1e0::1", ((80, 90),))
    assert protocol_numbers("icmp", version="0.28") == {1, 58}
    assert protocol_numbers("ICMP", version="0.29") == {1}
    assert protocol_numbers("", version="0.29") is None
    assert protocol_numbers("+6", version="0.29") == {6}
