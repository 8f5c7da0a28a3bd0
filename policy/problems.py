"""What the policy model reports: refusals (:class:`PolicyProblem`, :class:`PolicyError`), lints
(:class:`PolicyLint`), the JSON path every report names (:func:`format_path`) and the "did you mean" hint.

Every other module of the model reports through these, so a message reads the same wherever it comes from.
It depends on nothing in the package (the bottom, beside :mod:`.versions`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["PolicyError", "PolicyLint", "PolicyProblem", "did_you_mean", "format_path"]


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    """One bad value: where it is (``acls[2].dst[0]``) and why Headscale refuses it."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class PolicyError(ValueError):
    """Every problem of a policy at once, so a preview shows the whole list instead of the first hit."""

    def __init__(self, problems: Sequence[PolicyProblem]) -> None:
        if not problems:
            raise ValueError("PolicyError needs at least one problem")
        self.problems: list[PolicyProblem] = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(problem) for problem in self.problems)


@dataclass(frozen=True, slots=True)
class PolicyLint:
    """A finding in a policy Headscale accepts: where, what (``finding``), the hazard it prevents, a stable code."""

    path: str
    code: str
    finding: str
    hazard: str

    def __str__(self) -> str:
        return f"{self.path}: {self.finding} ({self.hazard}) [{self.code}]"


#: Fields whose value is a JSON object keyed by user data (a group, tag, host, route or capability name).
_KEYED_FIELDS = frozenset({"groups", "hosts", "tagOwners", "routes", "app"})
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_path(parts: Iterable[str | int]) -> str:
    """JSON-ish path: ``acls[2].dst[0]``, ``tagOwners["tag:server"][1]``; the document itself is ``(root)``."""
    out = ""
    previous: str | int | None = None
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif previous in _KEYED_FIELDS or not _IDENTIFIER.match(part):
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
        else:
            out += f".{part}" if out else part
        previous = part
    return out or "(root)"


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """A ``; did you mean 'x'?`` suffix when a candidate is close (case-insensitive first), else nothing."""
    pool = sorted(set(candidates))
    folded = [c for c in pool if c.lower() == word.lower()]
    if folded:
        return f"; did you mean {folded[0]!r}?"
    prefix = word.split(":", 1)[0] + ":" if ":" in word else ""
    names = {c[len(prefix) :]: c for c in pool if c.startswith(prefix)}
    close = difflib.get_close_matches(word[len(prefix) :], list(names), n=1, cutoff=0.6)
    return f"; did you mean {names[close[0]]!r}?" if close else ""
