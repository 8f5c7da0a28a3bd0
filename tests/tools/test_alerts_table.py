"""The README's alerts table and runbooks follow the rendered PrometheusRule."""

from __future__ import annotations

import re

from headscale_ha.components.alerts import ALERTS
from tools import alerts_table
from tools.harness import PROJECT_DIR

README = PROJECT_DIR / "docs" / "operations.md"


def test_the_readme_table_is_current() -> None:
    assert alerts_table.block() in README.read_text(), "docs/operations.md's alerts table is stale: run `make docs`"


def test_every_alert_has_a_runbook_section_its_link_reaches() -> None:
    readme = README.read_text()
    headings = {m.lower() for m in re.findall(r"^### Runbook: (\w+)$", readme, flags=re.MULTILINE)}
    missing = [name for name in ALERTS if name.lower() not in headings]
    assert not missing, f"alerts without a '### Runbook: <alert>' section: {missing}"
    rendered = {rule["alert"] for group in alerts_table.rendered_groups() for rule in group["rules"]}
    for group in alerts_table.rendered_groups():
        for rule in group["rules"]:
            assert rule["annotations"]["runbook_url"].endswith(f"#runbook-{rule['alert'].lower()}")
    assert rendered <= set(ALERTS)


def test_a_row_per_rendered_alert() -> None:
    groups = [
        {
            "rules": [
                {
                    "alert": "X",
                    "expr": "a | b",
                    "for": "5m",
                    "labels": {"severity": "warning"},
                    "annotations": {"summary": "s"},
                },
                {"record": "r", "expr": "1"},
            ]
        }
    ]
    table = alerts_table.table(groups)
    assert table.splitlines()[2] == "| [X](#runbook-x) | warning | 5m | `a \\| b` | s |"
    assert len(table.splitlines()) == 3, "recording rules are not alerts"
