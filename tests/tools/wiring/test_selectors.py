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
