"""The real Pulumi CLI, run as a user runs it, on a copy of the project and a local file backend.

Everything the CLI needs comes from ``make real-tools`` (tools/real_tools.py): the CLI itself, pulumi-kubernetes,
the dynamic providers' plugin and the exec shim. Two actors cannot be built here and have named stand-ins on
``PATH`` ahead of the rest: the Python language host (``tests/models/standin_language_host``; it runs the real
``pulumi-language-python-exec``) and pulumi-random (``tests/models/standin_random``). Plugins are ambient: the
engine takes ``pulumi-resource-<name>`` from ``PATH`` whatever version the SDK asks for, and never downloads one
(``PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION``).

``PULUMI_HOME`` is the run's own, so nothing is read from or written to the user's ``~/.pulumi``; the project's
files are copied, so ``pulumi config set`` never edits the checkout.

What the engine did is read from its event log (``--event-log``), not its human output: each step is
``(op, type, name)`` in the order the engine reported them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.kube_lab import TOOLS as LAB_TOOLS
from tests.support.kube_lab import KubeLab
from tools import real_tools

REPO = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parent
MODELS = SUPPORT.parent / "models"
STANDINS = (MODELS / "standin_language_host", MODELS / "standin_random")
PASSPHRASE = "headscale-ha lab passphrase"
#: The files a site stack's `pulumi up` reads: the project, both stack files and the program's entry point.
PROJECT_FILES = ("Pulumi.yaml", "Pulumi.hydra.yaml", "Pulumi.cosmos.yaml", "__main__.py")
#: The identity project, which the site stacks read through a stack reference.
IDENTITY_FILES = ("Pulumi.yaml", "Pulumi.tailnet.yaml", "__main__.py")
#: Every real tool a runbook test drives: the CLI and its plugin, kubectl, and the lab's control planes.
RUNBOOK_TOOLS = ("pulumi", "pulumi-resource-kubernetes", "kubectl", *LAB_TOOLS)
#: Engine steps that change nothing; the rest are changes. A discard drops a read resource (a stack reference) from
#: the state, which touches nothing outside it; the engine model records no read at all.
UNCHANGED_OPS = frozenset({"same", "read", "refresh", "discard"})


@dataclass(frozen=True)
class Step:
    """One step the engine reported: its operation and the resource's type and name (the URN's last parts)."""

    op: str
    type: str
    name: str
    urn: str
    #: The top-level properties the engine saw change (its `diffs`), for an update or a replace.
    diffs: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        return self.op not in UNCHANGED_OPS


@dataclass
class Run:
    """One CLI command's outcome: status, output, and the steps of its event log (empty for non-engine commands)."""

    argv: Sequence[str]
    returncode: int
    stdout: str
    stderr: str
    steps: list[Step] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def check(self) -> Run:
        if self.returncode != 0:
            errors = "\n".join(self.diagnostics) or "(none in the event log)"
            raise AssertionError(
                f"pulumi {' '.join(self.argv)} exited {self.returncode}\n--- the engine's errors\n{errors}"
                f"\n--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-3000:]}"
            )
        return self

    def ops(self) -> dict[str, list[str]]:
        """Resource names by step operation (the stack resource left out)."""
        grouped: dict[str, list[str]] = {}
        for step in self.steps:
            if step.type != "pulumi:pulumi:Stack":
                grouped.setdefault(step.op, []).append(step.name)
        return grouped

    def changed(self) -> list[Step]:
        return [step for step in self.steps if step.changes and step.type != "pulumi:pulumi:Stack"]

    def plan(self) -> set[tuple[str, str]]:
        """(op, name) of every change, as the engine model reports them: a replacement is one `replace`, where the
        engine also reports its halves (`create-replacement`, `delete-replaced`) as steps of their own."""
        changed = {(step.op, step.name) for step in self.changed()}
        replaced = {name for op, name in changed if op == "replace"}
        halves = {"create-replacement", "delete-replaced"}
        return {(op, name) for op, name in changed if not (op in halves and name in replaced)}

    @property
    def diagnostics(self) -> list[str]:
        """The engine's error diagnostics, in order."""
        return [
            f"{event['diagnosticEvent'].get('urn', '').rsplit('::', 1)[-1]}: {event['diagnosticEvent']['message']}"
            for event in self.events
            if "diagnosticEvent" in event and event["diagnosticEvent"].get("severity") == "error"
        ]


def steps_of(events: Iterable[Mapping[str, Any]]) -> list[Step]:
    """The engine's steps, from its ``resourcePreEvent``s (one per step, in the order the engine took them)."""
    steps = []
    for event in events:
        pre = event.get("resourcePreEvent")
        if pre is None:
            continue
        metadata = pre["metadata"]
        urn = metadata["urn"]
        name = urn.rsplit("::", 1)[-1]
        steps.append(Step(metadata["op"], metadata["type"], name, urn, tuple(metadata.get("diffs") or ())))
    return steps


def lab_kubernetes_release() -> tuple[int, ...]:
    """The pulumi-kubernetes release the lab's plugin was built from (tools/real_tools.json)."""
    pins = json.loads(real_tools.PINS_FILE.read_text())
    return tuple(int(part) for part in pins["actors"]["pulumi-resource-kubernetes"]["release"].split("."))


def plugin_path() -> str:
    """``PATH`` for the CLI: the stand-ins first, then the real actors, then the project's Python."""
    parts = [*(str(path) for path in STANDINS), str(real_tools.bin_dir()), str(REPO / ".venv" / "bin")]
    return os.pathsep.join([*parts, os.environ.get("PATH", "")])


def copy_project(target: Path) -> Path:
    """A copy of the site project and the identity project: what a user's checkout holds for the CLI."""
    target.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, target / name)
    # A checkout's top-level `components/` package: the engine's provider host imports old class paths from the
    # project directory, and state written by 0.1.x names `components.version_gate` (headscale_ha/class_paths.py).
    if not (target / "components").exists():
        (target / "components").symlink_to(REPO / "components", target_is_directory=True)
    (target / "identity").mkdir(exist_ok=True)
    for name in IDENTITY_FILES:
        shutil.copy2(REPO / "identity" / name, target / "identity" / name)
    for project in (target / "Pulumi.yaml", target / "identity" / "Pulumi.yaml"):
        # The virtualenv option names the checkout's environment, wherever the copy is.
        text = project.read_text().replace("virtualenv: ../.venv", f"virtualenv: {REPO / '.venv'}")
        project.write_text(text.replace("virtualenv: .venv", f"virtualenv: {REPO / '.venv'}"))
    return target


class PulumiCli:
    """The real ``pulumi`` with a home, a backend and a passphrase of its own."""

    def __init__(self, root: Path, *, extra_env: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.project = copy_project(root / "project")
        self.backend = root / "state"
        self.backend.mkdir(parents=True, exist_ok=True)
        self.home = root / "pulumi-home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs = root / "event-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "PATH": plugin_path(),
            "PULUMI_HOME": str(self.home),
            "PULUMI_BACKEND_URL": f"file://{self.backend}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "1",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_RUNTIME_VIRTUALENV": str(REPO / ".venv"),
            "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "1",
            # `--event-log` (what the engine did, as JSON events) is a flag the CLI shows only with this set.
            "PULUMI_DEBUG_COMMANDS": "true",
            **(extra_env or {}),
        }
        self._runs = 0

    def run(self, *argv: str, cwd: Path | None = None, stdin: str | None = None, timeout: float = 900) -> Run:
        """Run ``pulumi argv``; engine commands (up, preview, destroy, refresh, import) get an event log."""
        args = list(argv)
        log = None
        if args and args[0] in {"up", "preview", "destroy", "refresh", "import"}:
            self._runs += 1
            log = self.logs / f"{self._runs:03d}-{args[0]}.jsonl"
            args += ["--event-log", str(log)]
        done = subprocess.run(
            ["pulumi", *args],
            cwd=cwd or self.project,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        events = read_events(log) if log is not None else []
        return Run(argv, done.returncode, done.stdout, done.stderr, steps_of(events), events)

    def identity(self) -> Run:
        """The identity stack, once: ``cd identity && pulumi stack init tailnet && pulumi up``."""
        where = self.project / "identity"
        self.run("stack", "init", "tailnet", cwd=where).check()
        return self.run("up", "--yes", "--skip-preview", cwd=where).check()

    def set_path(self, stack: str, path: str, value: str) -> None:
        """`pulumi config set --path <path> <value>` as a user must: a stack's object replaces Pulumi.yaml's whole
        (the program refuses a half one, naming the keys to copy), so the section's keys are copied first."""
        section = path.split(".", 1)[0]
        stack_file = yaml.safe_load((self.project / f"Pulumi.{stack}.yaml").read_text())["config"]
        if f"headscale-ha:{section}" not in stack_file:
            project = yaml.safe_load((self.project / "Pulumi.yaml").read_text())["config"]
            for leaf, kept in config_leaves(project.get(section, {}).get("value", {}), section):
                self.run("config", "set", "-s", stack, "--path", leaf, kept).check()
        self.run("config", "set", "-s", stack, "--path", path, value).check()

    def stack_output(self, stack: str, *, secrets: bool = False, cwd: Path | None = None) -> dict[str, Any]:
        args = ["stack", "output", "-s", stack, "--json", *(["--show-secrets"] if secrets else [])]
        return json.loads(self.run(*args, cwd=cwd).check().stdout)


def config_leaves(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(`a.b.c`, value as `pulumi config set --path` takes it) of every leaf of a config object."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from config_leaves(inner, f"{path}.{key}")
    else:
        yield path, str(value).lower() if isinstance(value, bool) else str(value)


def read_events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def cli_for(lab: KubeLab, root: Path) -> PulumiCli:
    """The real CLI with the lab's kubeconfig as the ambient one (contexts named after the clusters)."""
    return PulumiCli(root, extra_env={"KUBECONFIG": str(lab.kubeconfig)})


def kubectl(lab: KubeLab, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real kubectl on the lab's kubeconfig (a context must be named: the file has no current one)."""
    binary = str(real_tools.bin_dir() / "kubectl")
    return subprocess.run(
        [binary, "--kubeconfig", str(lab.kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=120
    )
