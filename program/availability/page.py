"""The availability report as a Markdown page (docs/availability/<stack>.md): page.md, filled with the report.

The layout (headings, table headers, the note on regenerating) is page.md's; this module only turns the report's
lists and rows into Markdown list items and table rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib import resources
from string import Template
from typing import Any

from headscale_ha.program.availability.phrases import Page
from headscale_ha.program.availability.words import cap

#: The page, with a ``$name`` placeholder per part of the report (read when imported, so a wheel without it fails
#: at once).
PAGE = Template(resources.files("headscale_ha.program.availability").joinpath("page.md").read_text("utf-8"))


def table_cell(text: object) -> str:
    """``text`` as one cell of a Markdown table row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _rows(rows: Iterable[Iterable[object]]) -> str:
    return "\n".join("| " + " | ".join(table_cell(cell) for cell in row) + " |" for row in rows)


def _items(items: Iterable[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def _recovery_row(row: str | None) -> str:
    return Page.RECOVERY_ROW.format(row=row) if row else Page.NO_RECOVERY_ROW


def render_markdown(stack: str, report: Mapping[str, Any]) -> str:
    """``report`` (an `availability_report`, or its JSON) as a Markdown page; deterministic, ends with how to
    regenerate it."""
    # A standby says so by its role; only an active site that serves nothing needs saying it.
    plain = report["serving"] or report["role"] == "standby"
    failures = report["failures"]
    return PAGE.substitute(
        stack=stack,
        site=report["site"],
        role=report["role"] + ("" if plain else Page.NOT_SERVING),
        stage=report["stage"],
        storage=report["storage"],
        nodes=report["nodes"],
        classification=report["classification"],
        source=cap(report["source"]),
        assumptions=_items(report["assumptions"]),
        redundancy=_rows([r["component"], r["layout"], r["mechanism"]] for r in report["redundancy"]),
        failures=_rows(
            [r["scenario"], r["whatKeepsWorking"], r["whatStops"], r["rto"], r["rpo"], _recovery_row(r["recovery"])]
            for r in failures
        ),
        maintenance=_rows([r["activity"], r["effect"]] for r in report["maintenance"]),
        limits=_items(report["limits"]),
        improvements=_items(report["improvements"]),
    )
