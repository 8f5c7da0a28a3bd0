"""The README's recovery table is generated from the planned `recovery` outputs and kept current."""

from __future__ import annotations

from tools import recovery_table
from tools.harness import PROJECT_DIR


def test_the_readme_table_is_current() -> None:
    page = (PROJECT_DIR / "docs" / "architecture.md").read_text()
    assert recovery_table.block() in page, "docs/architecture.md's recovery table is stale: run `make docs`"


def test_each_stack_has_a_row_per_failure_with_its_figures(run_stack) -> None:
    recovery = run_stack("hydra").outputs["recovery"]
    table = recovery_table.stack_table("hydra", recovery)
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| Failure")]
    assert len(rows) == len(recovery_table.FAILURES)
    node = next(r for r in recovery["applications"]["headscale"]["failures"] if r["failure"] == "nodeLoss")
    (line,) = [row for row in rows if row.startswith("| Node loss |")]
    assert f"| {node['rtoSeconds']:g} s | {node['rpoSeconds']:g} s |" in line
    assert "until the NFS export is back" in table
    assert "bench/measured/restore.json" in table
