"""Label selectors: matchLabels and every matchExpressions operator."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.wiring_objects import LABELS
from tools.wiring.selectors import selector_matches


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "api"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["api"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["api"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, False),
        ({}, True),
    ],
)
def test_selector_matches(selector: dict[str, Any], expected: bool) -> None:
    assert selector_matches(selector, LABELS) is expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"matchLabels": ["app", "web"]}, True),  # a part of the wrong type reads as absent
        ({"matchExpressions": [{"key": "app", "operator": "Near", "values": ["api"]}]}, True),  # ignored
        ({"matchExpressions": [{"key": "app", "operator": "In"}]}, False),  # no values: nothing is in them
        ({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["api"]}]}, True),
        ({"matchExpressions": ["app"]}, True),
    ],
)
def test_a_malformed_selector_is_the_schema_checks_to_report(selector: dict[str, Any], expected: bool) -> None:
    """The wiring check reads what was rendered; the NetworkPolicy model (tests/models/netpol/netpol.py) refuses
    these."""
    assert selector_matches(selector, LABELS) is expected
