"""Offline plan: run the program for one or every stack under mocks; print the tree, write the YAML.

Usage: ``python -m tools.plan [--stack NAME]... [--out DIR] [--project-dir DIR] [--identity-dir DIR] [--verbose]``.
Stacks are planned in the order a first deployment runs them: the identity program (identity/) first, then the
active site, then the others; each later stack's StackReferences read the outputs the earlier ones planned
(a stack that is not planned here, or an output it lacks, fails the referencing stack as in a real run).
Exit status: 0 planned; 1 invalid config (the error lists every problem) or a failed stack reference;
2 unreadable stack files.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import re
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from headscale_ha.components.settings import PROJECT
from headscale_ha.guardrails.pack.rules import Subject, advisories
from headscale_ha.program.config import ConfigError, parse_stack_config
from tools import render
from tools.harness import PROJECT_DIR, ProgramRun, StackOutputs, UnknownStackError, offline_salt, run_program
from tools.hints import knob
from tools.stack_files import StackFileError, StackSettings, list_stacks, read_stack_settings

#: The identity program (its own Pulumi project) every site stack reads its keys from.
IDENTITY_DIR = PROJECT_DIR / "identity"
IDENTITY_PROJECT = "headscale-ha-identity"
#: The organization of a stack name without one (what `pulumi stack ls` shows on a DIY backend).
DEFAULT_ORGANIZATION = "organization"


def _fake_node_key(key: str) -> Callable[[], str]:
    return lambda: "privkey:" + hashlib.sha256(f"offline placeholder {key}".encode()).hexdigest()


def _fake_kubeconfig() -> str:
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: offline-placeholder\n"
        "clusters:\n- name: offline-placeholder\n  cluster:\n    server: https://offline-placeholder.invalid:6443\n"
        "contexts:\n- name: offline-placeholder\n  context:\n    cluster: offline-placeholder\n"
        "    user: offline-placeholder\n"
        "users:\n- name: offline-placeholder\n  user:\n    token: offline-placeholder\n"
    )


#: Well-formed stand-ins for secure values whose format the program checks.
PLACEHOLDERS: dict[str, Callable[[], str]] = {
    f"{PROJECT}:kubeconfig": _fake_kubeconfig,
    f"{PROJECT}:noisePrivateKey": _fake_node_key("noise"),
    f"{PROJECT}:derpPrivateKey": _fake_node_key("derp"),
    f"{IDENTITY_PROJECT}:noisePrivateKey": _fake_node_key("identity noise"),
    f"{IDENTITY_PROJECT}:derpPrivateKey": _fake_node_key("identity derp"),
}


def plan_stack(
    stack: str,
    *,
    project_dir: Path = PROJECT_DIR,
    program: Path | None = None,
    assume_secrets: Sequence[str] = (),
    stack_outputs: StackOutputs | None = None,
) -> ProgramRun:
    """Run the program for ``stack`` with the config in ``project_dir``'s stack files.

    ``stack_outputs``: the stacks it may reference, with their outputs (tools.harness.StackOutputs); a site stack
    references the identity stack, a standby also its active site (``offline_stack_outputs`` plans both).
    """
    settings = read_stack_settings(project_dir, stack, placeholders=PLACEHOLDERS, assume_secrets=assume_secrets)
    return run_program(
        project=settings.project,
        stack=stack,
        config=settings.config,
        secret_keys=settings.secret_keys,
        program=program or PROJECT_DIR / "__main__.py",
        stack_outputs=stack_outputs,
    )


def plan_identity(
    stack: str = "tailnet", *, identity_dir: Path = IDENTITY_DIR, assume_secrets: Sequence[str] = ()
) -> ProgramRun:
    """Run the identity program (identity/) for ``stack``; it references no other stack."""
    return plan_stack(
        stack,
        project_dir=identity_dir,
        program=identity_dir / "__main__.py",
        assume_secrets=assume_secrets,
        stack_outputs={},
    )


# ------------------------------------------------------------------------------------------- stack order


def _tailnet(settings: StackSettings) -> dict[str, Any]:
    """The raw `tailnet` config of a site stack, or {} when it cannot be read (the program reports why)."""
    try:
        tailnet = json.loads(settings.config.get(f"{settings.project}:tailnet", "{}"))
    except json.JSONDecodeError:
        return {}
    return tailnet if isinstance(tailnet, dict) else {}


def qualified_stack_name(settings: StackSettings) -> str:
    """The name other stacks reference a site stack by: ``<tailnet.stackPrefix>/<stack>``."""
    prefix = _tailnet(settings).get("stackPrefix") or f"{DEFAULT_ORGANIZATION}/{settings.project}"
    return f"{prefix}/{settings.stack}"


def _active_stack(settings: StackSettings) -> str | None:
    """The stack of the site `tailnet.activeSite` names, as this stack's config sees it."""
    tailnet = _tailnet(settings)
    sites = tailnet.get("sites")
    if not isinstance(sites, list):
        return None
    site = next((s for s in sites if isinstance(s, dict) and s.get("name") == tailnet.get("activeSite")), None)
    return None if site is None else str(site.get("stack") or site.get("name"))


def _identity_names(identity_project: str, identity_stack: str, site_settings: Sequence[StackSettings]) -> set[str]:
    """The names the site stacks reference this identity stack by (their tailnet.identityStack, when it names this
    project and stack under any organization), and the default organization's."""
    names = {f"{DEFAULT_ORGANIZATION}/{identity_project}/{identity_stack}"}
    for settings in site_settings:
        named = _tailnet(settings).get("identityStack")
        if isinstance(named, str) and named.split("/")[1:] == [identity_project, identity_stack]:
            names.add(named)
    return names


def plan_order(project_dir: Path, stacks: Sequence[str]) -> list[str]:
    """``stacks`` with the active site's stack first (a standby references it), then the others in order."""
    actives = set()
    for stack in stacks:
        try:
            active = _active_stack(read_stack_settings(project_dir, stack, placeholders=PLACEHOLDERS))
        except StackFileError:
            continue
        if active is not None:
            actives.add(active)
    return sorted(stacks, key=lambda stack: (stack not in actives, list(stacks).index(stack)))


@dataclass(frozen=True, kw_only=True)
class PlannedStack:
    """One stack of a ``plan_all``: its run, or why it failed (``error``); ``requested``: asked for, not a
    dependency planned only for its outputs."""

    project: str
    stack: str
    run: ProgramRun | None
    error: Exception | None
    requested: bool


def plan_all(
    *,
    project_dir: Path = PROJECT_DIR,
    identity_dir: Path | None = IDENTITY_DIR,
    stacks: Sequence[str] | None = None,
    assume_secrets: Sequence[str] = (),
) -> Iterator[PlannedStack]:
    """Plan the identity stacks, then the active site, then the other sites (``stacks``, default every stack file),
    each later stack reading the outputs the earlier ones planned. A standby asked for alone still gets its active
    planned first (``requested`` False). Errors are yielded, not raised: one bad stack does not stop the others."""
    requested = list(stacks) if stacks is not None else list_stacks(project_dir)
    site_settings = []
    for stack in requested:
        with contextlib.suppress(StackFileError):  # reported when the stack itself is planned
            site_settings.append(read_stack_settings(project_dir, stack, placeholders=PLACEHOLDERS))
    outputs: dict[str, Mapping[str, Any]] = {}
    identity_stacks = list_stacks(identity_dir) if identity_dir is not None and identity_dir.is_dir() else []
    for stack in identity_stacks:
        try:
            run = plan_identity(stack, identity_dir=identity_dir or IDENTITY_DIR)
        except (StackFileError, pulumi.RunError, UnknownStackError) as exc:
            yield PlannedStack(project=IDENTITY_PROJECT, stack=stack, run=None, error=exc, requested=True)
            continue
        for name in _identity_names(run.project, stack, site_settings):
            outputs[name] = run.exports
        yield PlannedStack(project=run.project, stack=stack, run=run, error=None, requested=True)
    available = set(list_stacks(project_dir))
    needed = set(requested)
    for settings in site_settings:
        active = _active_stack(settings)
        if active is not None and active in available:
            needed.add(active)
    for stack in plan_order(project_dir, sorted(needed, key=lambda s: (s not in requested, s))):
        try:
            settings = read_stack_settings(project_dir, stack, placeholders=PLACEHOLDERS)
            run = plan_stack(stack, project_dir=project_dir, assume_secrets=assume_secrets, stack_outputs=outputs)
        except (StackFileError, pulumi.RunError, UnknownStackError, KeyError) as exc:
            yield PlannedStack(project=PROJECT, stack=stack, run=None, error=exc, requested=stack in requested)
            continue
        outputs[qualified_stack_name(settings)] = run.exports
        yield PlannedStack(project=run.project, stack=stack, run=run, error=None, requested=stack in requested)


def offline_stack_outputs(
    *, project_dir: Path = PROJECT_DIR, identity_dir: Path = IDENTITY_DIR, assume_secrets: Sequence[str] = ()
) -> dict[str, Mapping[str, Any]]:
    """The ``stack_outputs`` a site stack of ``project_dir`` plans with: every identity stack's planned outputs
    and the active site's (planned with them). Raises the first error of those plans."""
    outputs: dict[str, Mapping[str, Any]] = {}
    active = plan_order(project_dir, list_stacks(project_dir))[:1]
    for planned in plan_all(
        project_dir=project_dir, identity_dir=identity_dir, stacks=active, assume_secrets=assume_secrets
    ):
        if planned.error is not None:
            raise planned.error
        assert planned.run is not None
        if planned.project == PROJECT:
            settings = read_stack_settings(project_dir, planned.stack, placeholders=PLACEHOLDERS)
            outputs[qualified_stack_name(settings)] = planned.run.exports
        else:
            site_settings = [read_stack_settings(project_dir, s, placeholders=PLACEHOLDERS) for s in active]
            for name in _identity_names(planned.project, planned.stack, site_settings):
                outputs[name] = planned.run.exports
    return outputs


#: The key of outputs.json that lists the outputs an offline plan took from its mocks.
FROM_MOCKS_KEY = "offlineFromMocks"


def write_rendered(run: ProgramRun, out_dir: Path, from_mocks: Sequence[str] = ()) -> list[Path]:
    """Replace ``out_dir`` with the run's manifests and outputs.json; returns the files written. ``from_mocks``:
    the outputs whose values the mocks made up, listed under :data:`FROM_MOCKS_KEY` so nobody takes them for the
    tailnet's (a fingerprint of stand-in random bytes looks like a real one)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    written = []
    for relative, text in render.manifests(run).items():
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = json.loads(render.outputs_json(run))
    if from_mocks:
        outputs[FROM_MOCKS_KEY] = list(from_mocks)
    (out_dir / "outputs.json").write_text(json.dumps(outputs, indent=2, sort_keys=True) + "\n")
    return [*written, out_dir / "outputs.json"]


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {
            k: v for key, inner in value.items() for k, v in _leaves(inner, f"{path}.{key}" if path else key).items()
        }
    if isinstance(value, list):
        return {k: v for i, inner in enumerate(value) for k, v in _leaves(inner, f"{path}[{i}]").items()}
    return {path: value}


def outputs_from_mocks(planned: Sequence[PlannedStack], again: Sequence[PlannedStack]) -> dict[str, list[str]]:
    """Per stack, the outputs that differ between two plans with different stand-in random bytes: what the mocks
    made up rather than what the config and the program decide."""
    other = {(p.project, p.stack): p.run for p in again}
    found: dict[str, list[str]] = {}
    for plan in planned:
        twin = other.get((plan.project, plan.stack))
        if plan.run is None or twin is None:
            continue
        first, second = (
            _leaves(json.loads(render.outputs_json(plan.run))),
            _leaves(json.loads(render.outputs_json(twin))),
        )
        found[plan.stack] = sorted(path for path, value in first.items() if second.get(path) != value)
    return found


def image_keys(project_dir: Path, stack: str) -> dict[str, str]:
    """Image reference → the config key that sets it (``headscale-ha:gateway.services.corednsImage``), for this
    stack's config with its defaults: an advisory about an image names what the user edits. Empty when the config
    does not load (the plan reports that itself)."""
    settings = read_stack_settings(project_dir, stack, placeholders=PLACEHOLDERS)
    prefix = f"{PROJECT}:"
    raw = {key.removeprefix(prefix): value for key, value in settings.config.items() if key.startswith(prefix)}
    secret = {key.removeprefix(prefix) for key in settings.secret_keys if key.startswith(prefix)}
    try:
        dumped = parse_stack_config(raw, stack=stack, secret_keys=secret).model_dump(by_alias=True, mode="json")
    except ConfigError:
        return {}
    found: dict[str, str] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else key)
        elif isinstance(value, str) and path.rsplit(".", 1)[-1].lower().endswith("image"):
            found.setdefault(value, f"{prefix}{path}")

    walk(dumped, "")
    return found


_CONTAINER_IMAGE = re.compile(r"^container '[^']*': image '(?P<image>[^']+)'")


def _named_by_key(message: str, keys: Mapping[str, str]) -> str:
    """``container 'coredns': image 'x' …`` → ``headscale-ha:gateway.services.corednsImage: image 'x' …``."""
    found = _CONTAINER_IMAGE.match(message)
    key = keys.get(found["image"]) if found else None
    return message if found is None or key is None else f"{key}: {message.split(': ', 1)[1]}"


def _advisories(run: ProgramRun, keys: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(rule, resource name, message) of every advisory finding of the guard-rail pack, by resource name: the
    order resources register in varies from run to run, and the output should not. An image an advisory names is
    named by the config key that sets it, when ``keys`` knows one."""
    return [
        (rule, resource.name, _named_by_key(message, keys))
        for resource in sorted(run.resources, key=lambda r: (r.name, r.type))
        for rule, messages in advisories(Subject(type=resource.type, name=resource.name, props=resource.inputs)).items()
        for message in messages
    ]


def advisory_warnings(run: ProgramRun, keys: Mapping[str, str] | None = None) -> list[str]:
    """The guard-rail pack's advisory findings (tag-only image pins, ...), one line each: warned, never fatal."""
    return [f"warning: {rule} (advisory): {name}: {message}" for rule, name, message in _advisories(run, keys or {})]


def grouped_advisory_warnings(run: ProgramRun, label: str, keys: Mapping[str, str] | None = None) -> list[str]:
    """One line per advisory kind: its count in stack ``label`` and its first finding (``--verbose`` prints them all).

    Every plan of the shipped stacks has the same few dozen advisories; printed one by one they bury the lines
    that change. A kind with one finding prints it in full. The example stops at its first "; ": what follows is
    the remedy, the same for every finding of a kind.
    """
    by_rule: dict[str, list[tuple[str, str]]] = {}
    for rule, name, message in _advisories(run, keys or {}):
        by_rule.setdefault(rule, []).append((name, message))
    lines = []
    for rule, findings in by_rule.items():
        (name, message), count = findings[0], len(findings)
        if count == 1:
            lines.append(f"warning: {rule} (advisory): {name}: {message}")
            continue
        example = message.split("; ", 1)[0]
        every = knob("VERBOSE=1", "--verbose")
        lines.append(
            f"warning: {rule} (advisory): {count} findings in {label}, e.g. {name}: {example}; {every} lists them all"
        )
    return lines


def policy_warnings(run: ProgramRun) -> list[str]:
    """The policy's lints (what the project is stricter about than Headscale), one warning line each."""
    policy = run.outputs.get("policy") if isinstance(run.outputs, dict) else None
    lints = policy.get("lints", []) if isinstance(policy, dict) else []
    return [f"warning: policy lint: {lint}" for lint in lints]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make plan", description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", help="stack to plan (repeatable); default: every stack file")
    parser.add_argument("--out", type=Path, default=None, help="directory for rendered/<stack>/ (default: ./rendered)")
    parser.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help="where Pulumi.yaml and stack files are")
    parser.add_argument(
        "--identity-dir", type=Path, default=None, help="the identity program (default: <project-dir>/identity)"
    )
    parser.add_argument(
        "--assume-secret",
        action="append",
        default=[],
        metavar="KEY",
        help="plan as if secret KEY were set (e.g. bootstrapApiKey); repeatable",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="print every advisory finding, not one line per kind and stack"
    )
    args = parser.parse_args(argv)
    # A failed stack is reported below; what the SDK strands when a run fails is noise here.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
    out_root = args.out or args.project_dir / "rendered"
    stacks = args.stack or list_stacks(args.project_dir)
    if not stacks:
        print(f"error: no Pulumi.<stack>.yaml in {args.project_dir}", file=sys.stderr)
        return 2
    status = 0
    # The identity program beside the stack files, else this checkout's (a scratch project of stack files only).
    identity_dir = args.identity_dir or next(
        (d for d in (args.project_dir / "identity",) if (d / "Pulumi.yaml").is_file()), IDENTITY_DIR
    )
    options = {"project_dir": args.project_dir, "identity_dir": identity_dir, "stacks": stacks}
    plans = list(plan_all(**options, assume_secrets=args.assume_secret))
    with offline_salt("offline, again"):
        from_mocks = outputs_from_mocks(plans, list(plan_all(**options, assume_secrets=args.assume_secret)))
    for planned in plans:
        label = planned.stack if planned.project == PROJECT else f"{planned.project} {planned.stack}"
        if planned.error is not None:
            print(f"error: stack {label}: {planned.error}", file=sys.stderr)
            status = max(status, 2 if isinstance(planned.error, StackFileError) else 1)
            continue
        assert planned.run is not None
        if not planned.requested:
            print(f"planned {label} first, for the outputs the requested stacks reference\n")
            continue
        out_dir = out_root / planned.stack if planned.project == PROJECT else out_root / "identity" / planned.stack
        mocked = from_mocks.get(planned.stack, [])
        files = write_rendered(planned.run, out_dir, mocked)
        print(render.resource_tree(planned.run))
        if mocked:
            listed = ", ".join(mocked)
            print(f"note: offline, these outputs come from the mocks, not your tailnet ({FROM_MOCKS_KEY}): {listed}")
        keys = image_keys(args.project_dir, planned.stack) if planned.project == PROJECT else {}
        if args.verbose:
            advisory = advisory_warnings(planned.run, keys)
        else:
            advisory = grouped_advisory_warnings(planned.run, label, keys)
        # The program's own warnings (example values left, say) and the policy lints are never grouped.
        lints = policy_warnings(planned.run)
        engine = [f"warning: {message}" for message in planned.run.warnings()]
        for warning in [*(w for w in engine if w not in lints), *advisory, *lints]:
            print(warning)
        print(f"wrote {len(files) - 1} manifests and outputs.json to {out_dir}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
