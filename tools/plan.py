"""Offline plan: run the program for one or every stack under mocks; print the tree, write the YAML.

Usage: ``python -m tools.plan [--stack NAME]... [--out DIR] [--project-dir DIR]``.
Exit status: 0 planned; 1 invalid config (the error lists every problem); 2 unreadable stack files.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from components.settings import PROJECT
from policy.pack.rules import Subject, advisories
from program.config import ConfigError
from tools import render
from tools.harness import PROJECT_DIR, ProgramRun, run_program
from tools.stack_files import StackFileError, list_stacks, read_stack_settings


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
}


def plan_stack(
    stack: str, *, project_dir: Path = PROJECT_DIR, program: Path | None = None, assume_secrets: Sequence[str] = ()
) -> ProgramRun:
    """Run the program for ``stack`` with the config in ``project_dir``'s stack files."""
    settings = read_stack_settings(project_dir, stack, placeholders=PLACEHOLDERS, assume_secrets=assume_secrets)
    return run_program(
        project=settings.project,
        stack=stack,
        config=settings.config,
        secret_keys=settings.secret_keys,
        program=program or PROJECT_DIR / "__main__.py",
    )


def write_rendered(run: ProgramRun, out_dir: Path) -> list[Path]:
    """Replace ``out_dir`` with the run's manifests and outputs.json; returns the files written."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    written = []
    for relative, text in render.manifests(run).items():
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "outputs.json").write_text(render.outputs_json(run))
    return [*written, out_dir / "outputs.json"]


def advisory_warnings(run: ProgramRun) -> list[str]:
    """The guard-rail pack's advisory findings (tag-only image pins, ...), one line each: warned, never fatal."""
    return [
        f"warning: {rule} (advisory): {resource.name}: {message}"
        for resource in run.resources
        for rule, messages in advisories(Subject(type=resource.type, name=resource.name, props=resource.inputs)).items()
        for message in messages
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make plan", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", help="stack to plan (repeatable); default: every stack file")
    parser.add_argument("--out", type=Path, default=None, help="directory for rendered/<stack>/ (default: ./rendered)")
    parser.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help="where Pulumi.yaml and stack files are")
    parser.add_argument(
        "--assume-secret",
        action="append",
        default=[],
        metavar="KEY",
        help="plan as if secret KEY were set (e.g. bootstrapApiKey); repeatable",
    )
    args = parser.parse_args(argv)
    out_root = args.out or args.project_dir / "rendered"
    stacks = args.stack or list_stacks(args.project_dir)
    if not stacks:
        print(f"error: no Pulumi.<stack>.yaml in {args.project_dir}", file=sys.stderr)
        return 2
    status = 0
    for stack in stacks:
        try:
            run = plan_stack(stack, project_dir=args.project_dir, assume_secrets=args.assume_secret)
        except StackFileError as exc:
            print(f"error: stack {stack}: {exc}", file=sys.stderr)
            status = max(status, 2)
            continue
        except ConfigError as exc:
            print(f"error: stack {stack}: {exc}", file=sys.stderr)
            status = max(status, 1)
            continue
        files = write_rendered(run, out_root / stack)
        print(render.resource_tree(run))
        for warning in advisory_warnings(run):
            print(warning)
        print(f"wrote {len(files) - 1} manifests and outputs.json to {out_root / stack}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
