"""The rules of ``rules.py`` as CrossGuard resource-validation policies (mandatory, or advisory where the rule
says so: those warn without blocking)."""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, Policy, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from headscale_ha.guardrails.pack.rules import RULES, Rule, Subject

PACK_NAME = "headscale-ha-guardrails"


def _validator(rule: Rule):  # noqa: ANN202 - CrossGuard's callback signature
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        subject = Subject(type=args.resource_type, name=args.name, props=args.props)
        for message in rule.check(subject):
            report_violation(f"{args.name}: {message}", None)

    return validate


def build_policies() -> list[Policy]:
    return [
        ResourceValidationPolicy(
            name=rule.name,
            description=rule.description,
            enforcement_level=EnforcementLevel.ADVISORY if rule.advisory else EnforcementLevel.MANDATORY,
            validate=_validator(rule),
        )
        for rule in RULES
    ]
