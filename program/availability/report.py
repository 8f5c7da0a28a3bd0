"""The availability report of a stack, built from its config and its `recovery` output, and the stack output that
summarises it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headscale_ha.program.availability.claims import assumptions, classification, improvements, limits
from headscale_ha.program.availability.facts import StackFacts, stack_facts, with_recovery
from headscale_ha.program.availability.maintenance import maintenance
from headscale_ha.program.availability.model import AvailabilityReport
from headscale_ha.program.availability.phrases import SOURCE
from headscale_ha.program.availability.redundancy import redundancy
from headscale_ha.program.availability.scenarios import failures
from headscale_ha.program.availability.words import shared_words
from headscale_ha.program.config import StackConfig

#: Where the report's prose is published, relative to the repository (tools/availability_docs.py writes it).
DETAILS = "docs/availability/{stack}.md"
#: The keys of the report the stack output keeps, and of each of its failure scenarios.
SUMMARY_KEYS = ("site", "role", "serving", "stage", "storage", "nodes", "classification")
FAILURE_KEYS = ("scenario", "rto", "rpo", "recovery", "figures")


def build_report(facts: StackFacts, recovery: Mapping[str, Any]) -> AvailabilityReport:
    """The report of a stack with ``facts``; every figure in it is ``recovery``'s (the stack's `recovery` output)."""
    f = with_recovery(facts, recovery)
    words = shared_words(f)
    return AvailabilityReport(
        source=SOURCE,
        site=f.site,
        role=f.role.value,
        serving=f.serving,
        stage=f.stage.value,
        storage=f.storage.value,
        nodes=f.nodes,
        classification=classification(f, words),
        assumptions=tuple(assumptions(f, words)),
        redundancy=tuple(redundancy(f, words)),
        failures=tuple(failures(f, words, recovery)),
        maintenance=tuple(maintenance(f, words)),
        limits=tuple(limits(f, words)),
        improvements=tuple(improvements(f, words)),
    )


def availability_report(config: StackConfig, recovery: dict[str, Any]) -> dict[str, Any]:
    """The `availability` output: classification, redundancy, failure scenarios, maintenance, limits and what would
    improve them, from ``config`` and the stack's ``recovery`` output (every figure is that output's)."""
    return build_report(stack_facts(config), recovery).to_json()


def facts_report(facts: StackFacts, recovery: dict[str, Any]) -> dict[str, Any]:
    """``availability_report`` from the facts of the config (what the site carries, not the config itself)."""
    return build_report(facts, recovery).to_json()


def availability_output(stack: str, report: dict[str, Any]) -> dict[str, Any]:
    """The `availability` stack output: the classification and, per failure scenario, its figures and the
    `recovery` row they come from. The prose (what keeps working, what stops, maintenance, limits, improvements)
    is the page ``details`` names, generated from the same report, so the output stays small enough to read in
    `pulumi stack output` and to diff."""
    return {
        "source": report["source"],
        **{key: report[key] for key in SUMMARY_KEYS},
        "failures": [{key: row[key] for key in FAILURE_KEYS} for row in report["failures"]],
        "details": DETAILS.format(stack=stack),
    }
