"""The policy model's entry points: a Headscale 0.28 or 0.29 tailnet policy parsed, validated, linted and its
tests evaluated, in one pass (:func:`check_policy`; :func:`parse_policy`, :func:`validate_policy` and
:func:`lint_policy` are its shortcuts).

Headscale only checks a policy when it is written, which is too late for ``pulumi preview``. The model decides,
before anything is deployed, exactly what the target minor's parser decides (Headscale's ``hscontrol/policy/v2``):

- **Refusals** (:class:`PolicyError`) are what that Headscale refuses, one problem per offending value with its
  JSON path. Nothing Headscale refuses is accepted; nothing Headscale accepts is refused, apart from the few
  deliberate differences listed in :data:`DELIBERATE_DIFFERENCES`.
- **Normalisation** (:mod:`.normalise`) reads a policy the way Headscale does and renders what it understood:
  object keys match case-insensitively and ignore ``_``/``-`` (Go's ``encoding/json/v2`` with
  ``MatchCaseInsensitiveNames``), ``#`` keys inside ACL rules are dropped, protocol names are lower-cased (0.29
  also turns known numbers into names), CIDRs are masked and addresses written canonically, 0.29 trims whitespace
  around aliases, SSH actions and SSH users and reads ``[v6]:port`` destinations.
- **Lints** (:mod:`.lints`, :class:`PolicyLint`) are the project's own strictness: findings with the reason
  and the hazard they prevent, for a policy the server accepts (wildcard SSH users on 0.28 that 0.29 refuses,
  default routes in ``autoApprovers``, whitespace Headscale trims, rules that match nothing, …).
- **Tests**: 0.29 evaluates the policy's ``tests`` and ``sshTests`` when it is written and refuses the write when
  one fails. :func:`evaluate_policy_tests` (:mod:`.evaluate`) evaluates them offline over the policy's own
  definitions; a test proven to fail is refused like Headscale refuses it, one that depends on live nodes is
  reported "checked at apply".

The order of one check: HuJSON (:mod:`.hujson`), the reading (:mod:`.normalise`), the schema and its field rules
(:mod:`.schema`), the rules across the document (:mod:`.semantics`), the tests (:mod:`.evaluate`), then the lints.
The typed reading of one value, with Go's parsing rules, is in :mod:`.values`. This module is the top of the
model: it depends on all of those; only :mod:`.grant_conversion` and :mod:`.render` use it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from headscale_ha.policy.evaluate import PolicyTestOutcome, evaluate_policy_tests
from headscale_ha.policy.hujson import load_hujson
from headscale_ha.policy.lints import policy_lints
from headscale_ha.policy.normalise import read_document
from headscale_ha.policy.problems import PolicyError, PolicyLint, PolicyProblem
from headscale_ha.policy.schema import Policy, validation_problems
from headscale_ha.policy.semantics import semantic_problems
from headscale_ha.policy.versions import headscale_minor

__all__ = [
    "DELIBERATE_DIFFERENCES",
    "PolicyCheck",
    "check_policy",
    "lint_policy",
    "parse_policy",
    "policy_object",
    "validate_policy",
]


#: Where this model still differs from Headscale's parser on purpose, and why (each is a refusal of something
#: Headscale would take; none is an acceptance of something Headscale refuses).
DELIBERATE_DIFFERENCES: tuple[str, ...] = (
    "IPv6 zones ('fe80::1%eth0') are refused everywhere: Go's address parser takes them in a few places, but a "
    "zone is never meaningful in a tailnet policy and the semantics differ between Go releases.",
    "JSON null is read as 'absent' for sections, lists, maps and 0.29's checkPeriod (as Go does) but refused for "
    "the other scalars (action, proto, 0.28's checkPeriod, a test's src): Go reads some of those as '' or a "
    "default, which hides a mistake.",
    "A non-empty text that is not HuJSON is refused; Headscale reads an empty policy text as 'no policy' "
    "(allow all), the model only takes an object (write '{}' for allow-all on purpose).",
    "0.28 is modelled from the 0.28-era parser and its release notes (wildcard SSH destinations and the SSH "
    "source/destination rules refused); where the 0.28.0 behaviour is not certain, the stricter reading is kept.",
    "A 'tests'/'sshTests' entry whose source or destination names an undefined group, tag or host, or a test "
    "proven to fail, is refused: 0.29 refuses it when the policy is written (API, CLI, reload) but only logs a "
    "warning when it starts from a policy file that has it.",
)


@dataclass(frozen=True, slots=True)
class PolicyCheck:
    """A validated policy with its lints and, on 0.29, the offline outcome of its tests."""

    policy: Policy
    lints: tuple[PolicyLint, ...]
    test_outcomes: tuple[PolicyTestOutcome, ...]


def check_policy(data: Any, *, version: str) -> PolicyCheck:
    """Validate a policy document (already parsed) for a Headscale minor, and lint it; every problem at once.

    Raises :class:`PolicyError` with what that Headscale refuses, including a ``tests``/``sshTests`` entry proven
    to fail (0.29 refuses the write).
    """
    minor = headscale_minor(version)
    reading = read_document(copy.deepcopy(policy_object(data)), minor)
    problems = list(reading.problems)
    try:
        policy = Policy.model_validate(reading.document, context={"version": minor})
    except ValidationError as exc:
        raise PolicyError(problems + validation_problems(exc)) from None
    problems += semantic_problems(policy, minor)
    if problems:
        raise PolicyError(problems)
    outcomes = tuple(evaluate_policy_tests(policy, version=minor))  # none on 0.28
    failed = [o for o in outcomes if o.verdict == "fail"]
    if failed:
        raise PolicyError([PolicyProblem(o.path, f"test fails: {o.reason}") for o in failed])
    lints = tuple(reading.notes) + tuple(policy_lints(policy, minor))
    return PolicyCheck(policy, lints, outcomes)


def policy_object(data: Any) -> dict[str, Any]:
    """The document when it is a JSON object: Headscale reads nothing else as a policy (``PolicyError`` at the
    root otherwise)."""
    if not isinstance(data, dict):
        raise PolicyError([PolicyProblem("(root)", "the policy must be a JSON object")])
    return data


def validate_policy(data: Any, *, version: str) -> Policy:
    """Validate a policy document (already parsed) for a Headscale minor; the result is normalised."""
    return check_policy(data, version=version).policy


def parse_policy(text: str, *, version: str) -> Policy:
    """Parse a HuJSON policy and validate it for a Headscale minor (``"0.28"``, ``"0.29"``, or a full version)."""
    return validate_policy(load_hujson(text), version=version)


def lint_policy(document: str | Mapping[str, Any], *, version: str) -> list[PolicyLint]:
    """The project's findings on a policy the target Headscale accepts (HuJSON text or a parsed document).

    Each :class:`PolicyLint` names the path, what was found, the hazard it prevents and a stable ``code``. A policy
    Headscale refuses raises :class:`PolicyError` instead.
    """
    data = load_hujson(document) if isinstance(document, str) else dict(document)
    return list(check_policy(data, version=version).lints)
