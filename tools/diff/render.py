"""The text ``make diff`` prints: per changed stack a header with its counts, DATA LOSS, warnings, what the changes
mean, then each kind of change with its fields, the outputs and the config; a summary line last.

A SHA-256 is shown by its first 12 digits, once: the same change elsewhere in the stack names the first place. A
multi-line value is shown as a unified diff, a stack output with many changed values as one line.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from tools.diff.effects import APPLICATIONS, WorkloadEffect, policy_document
from tools.diff.report import Change, Report, StackDiff, exit_code, show_value
from tools.fields import ABSENT, FieldChange, Token, format_path

_SYMBOL = {"replace": "+-", "delete": "-", "create": "+", "update": "~"}
_SECTIONS = (("replace", "replaced"), ("delete", "deleted"), ("create", "created"), ("update", "updated"))
#: At most this many lines of a multi-line value's diff are shown.
TEXT_DIFF_LINES = 40
#: A stack output with more changed values than this is summarized in one line (outputs.json has them all).
OUTPUT_DETAIL = 6


def _show_pair(old: Any, new: Any, limit: int = 100) -> tuple[str, str]:
    """Both values for one line; two long strings are cut to where they differ, with some context."""
    if isinstance(old, str) and isinstance(new, str) and max(len(old), len(new)) > limit:
        start = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        end = 0
        while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
            end += 1
        context = 24
        cut_start = max(0, start - context)

        def cut(text: str) -> str:
            middle = text[cut_start : len(text) - max(0, end - context)]
            return ("…" if cut_start else "") + middle[:limit] + ("…" if end > context or len(middle) > limit else "")

        return json.dumps(cut(old), ensure_ascii=False), json.dumps(cut(new), ensure_ascii=False)
    return show_value(old, limit), show_value(new, limit)


#: A SHA-256 in hex (a checksum annotation, the policy's digest): shown by its first 12 digits.
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _digest_pair(change: FieldChange) -> tuple[str, str] | None:
    if all(isinstance(v, str) and _DIGEST.match(v) for v in (change.old, change.new)):
        return change.old, change.new
    return None


def _field_lines(
    change: FieldChange, indent: str, seen: dict[tuple[str, str], str] | None = None, owner: str = ""
) -> list[str]:
    """One changed field of ``owner`` (a resource's label, or "output"). ``seen`` maps a digest change already shown
    in this stack to where: a repeat of it (the policy's SHA-256 as annotation, pod checksum and output) is one
    short line naming the first."""
    marks = (change.note, f"REFUSED by the API server: {change.refused}" if change.refused else None)
    suffix = "".join(f"  [{t}]" for t in marks if t)
    if change.secret:
        verb = "added" if change.old is ABSENT else "removed" if change.new is ABSENT else "changed"
        return [f"{indent}{change.text}: {verb} (secret){suffix}"]
    old, new = change.old, change.new
    digests = _digest_pair(change)
    if digests is not None:
        if seen is not None and digests in seen:
            return [f"{indent}{change.text}: the same digest change as {seen[digests]}{suffix}"]
        if seen is not None:
            seen[digests] = f"{owner} {change.text}".strip()
        return [f"{indent}{change.text}: {old[:12]}… -> {new[:12]}…{suffix}"]
    if isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new):
        policy = policy_document(old) is not None and policy_document(new) is not None
        what = "the policy's JSON (its rules are listed above)" if policy else "text changed"
        lines = [f"{indent}{change.text}: {what}{suffix}"]
        body = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3))[2:]
        shown = body[:TEXT_DIFF_LINES]
        lines += [f"{indent}    {line}" for line in shown]
        if len(body) > len(shown):
            lines.append(f"{indent}    … {len(body) - len(shown)} more lines")
        return lines
    before, after = _show_pair(old, new)
    return [f"{indent}{change.text}: {before} -> {after}{suffix}"]


def _output_lines(stack: StackDiff, seen: dict[tuple[str, str], str]) -> list[str]:
    """Per top-level output: its changed values, or one line when there are many."""
    lines = []
    by_output: dict[Token, list[FieldChange]] = {}
    for change in stack.outputs:
        by_output.setdefault(change.path[0] if change.path else "", []).append(change)
    for output, items in by_output.items():
        if len(items) <= OUTPUT_DETAIL:
            for item in items:
                lines += _field_lines(item, "    ", seen, "output")
        else:
            where = f"rendered/{stack.name.split()[0]}/outputs.json"
            lines.append(
                f"    {format_path([output])}: {len(items)} values changed (all of it: {where} of `make plan`)"
            )
    return lines


def _resource_line(change: Change) -> str:
    pulumi_name = "" if change.label.endswith(f" {change.name}") else f"  ({change.name})"
    return f"  {_SYMBOL[change.action]:<2} {change.label}{pulumi_name}"


def _counts(stack: StackDiff) -> str:
    parts = [f"{stack.count(a)} {word}" for a, word in _SECTIONS if stack.count(a)]
    parts += [f"{e.verb} {e.app}" for e in _effects(stack) if e.verb in e.OUTAGES and e.app in APPLICATIONS.values()]
    if stack.outputs:
        parts.append(f"{len({c.path[0] for c in stack.outputs if c.path})} output(s) changed")
    if stack.config:
        parts.append(f"{len(stack.config)} config change(s)")
    return ", ".join(parts) or ("see the notes" if stack.notes else "errors")


def _effects(stack: StackDiff) -> list[WorkloadEffect]:
    return [c.effect for c in sorted(stack.changes, key=lambda c: c.label) if c.effect is not None]


def _summary_lines(stack: StackDiff) -> list[str]:
    """What the changes mean, before any field: the pods restarted or stopped, the policy rules changed."""
    lines = []
    effects = _effects(stack)
    if effects:
        lines.append("effects")
        lines += [f"  {effect.text}" for effect in effects]
    for change in sorted(stack.changes, key=lambda c: c.label):
        if change.policy:
            lines.append(f"policy rules ({change.label})")
            lines += [f"  {line}" for line in change.policy]
    return lines


def render_stack(stack: StackDiff) -> str:
    """One stack: a header with the counts, then DATA LOSS, warnings, and each kind of change."""
    loss = sum(1 for f in stack.findings if f.data_loss)
    warnings = len(stack.findings) - loss
    extra = "".join(f", {n} {word}" for n, word in ((loss, "DATA LOSS"), (warnings, "warning(s)")) if n)
    lines = [f"=== stack {stack.name}: {_counts(stack)}{extra}"]
    lines += [f"  error: {e}" for e in stack.errors]
    lines += [f"  note: {n}" for n in stack.notes]
    if loss:
        lines.append("DATA LOSS")
        lines += [f"  {f.text}" for f in stack.findings if f.data_loss]
    if warnings:
        lines.append("warnings")
        lines += [f"  WARNING: {f.text}" for f in stack.findings if not f.data_loss]
    lines += _summary_lines(stack)
    seen: dict[tuple[str, str], str] = {}
    for action, word in _SECTIONS:
        changes = sorted((c for c in stack.changes if c.action == action), key=lambda c: (c.label, c.urn))
        if not changes:
            continue
        lines.append(word)
        for change in changes:
            lines.append(_resource_line(change))
            lines += [f"      reason: {r}" for r in change.reasons]
            lines += [f"      note: {n}" for n in change.notes]
            for f in change.fields:
                lines += _field_lines(f, "      ", seen, change.label)
    if stack.outputs:
        lines.append("outputs")
        lines += _output_lines(stack, seen)
    if stack.config:
        lines.append("config")
        lines += [f"    {c}" for c in stack.config]
    return "\n".join(lines)


def render(report: Report) -> str:
    """Per changed stack a header and its sections, then a summary line; one line saying so when nothing changed
    (silence would not tell a diff that found nothing from one that did not run)."""
    blocks = [f"error: {e}" for e in report.errors]
    changed = [s for s in report.stacks if s.changed]
    blocks += [render_stack(s) for s in changed]
    if changed or report.errors:
        blocks += [f"note: {n}" for n in report.notes]
        per_stack = "; ".join(f"{s.name}: {_counts(s)}" for s in changed)
        warnings = sum(1 for s in changed for f in s.findings if not f.data_loss)
        blocks.append(
            f"diff {report.base_label} -> {report.head_label}: {per_stack or 'no change'}; "
            f"{len(report.data_loss)} DATA LOSS, {warnings} warning(s); exit {exit_code(report)}"
        )
    else:
        blocks.append(f"diff {report.base_label} -> {report.head_label}: no changes; exit {exit_code(report)}")
    return "\n\n".join(blocks)
