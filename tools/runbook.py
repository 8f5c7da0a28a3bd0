"""The runbooks as commands: `make promote SITE=…`, `make demote SITE=…`, `make upgrade VERSION=… IMAGE=…`.

Each drives `pulumi` and `kubectl` from the project directory exactly as the `failover` output lists (both come
from program/failover.py), prints every command before it runs it, stops at the first one that fails, and is
safe to run again after any failure: every command is idempotent, and what a runbook has to do is worked out
again from the files and from what each stack last deployed (`pulumi stack output`).

    python -m tools.runbook promote cosmos                       # hydra reachable: fenced first
    python -m tools.runbook promote cosmos --lost hydra          # hydra gone: asks to confirm, skips its fence
    python -m tools.runbook demote hydra                         # hydra is back: it stops serving, follows
    python -m tools.runbook upgrade 0.29.3 ghcr.io/juanfont/headscale:0.29.3@sha256:…
    python -m tools.runbook set-active-site cosmos               # the one edit of Pulumi.yaml
    python -m tools.runbook promote cosmos --lost hydra --plan   # what it would run: no CLI, no cluster, no write

``--plan`` (``PLAN=1``) reads and checks the files as the real run does, then prints every command with what it
expects, and runs, writes and asks nothing; a promotion's plan assumes that the site `tailnet.activeSite` names is
the one last deployed as active (the real run asks each stack). Without ``--plan``, a missing `pulumi` or
`kubectl` is refused before anything runs. An upgrade checks the whole resulting config before it writes
Pulumi.yaml (atomically), and puts the file back when it stops before its first `pulumi up` has started.

Exit status: 0 done (or planned), 1 a command failed (the runbook says which; run it again once fixed), 2 refused
(bad arguments, a tool missing, or a confirmation not given).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from headscale_ha.components.settings import PROJECT, Role, Site
from headscale_ha.program.config import ConfigError, StackConfig
from headscale_ha.program.failover import (
    FENCE_TIMEOUT_SECONDS,
    LOST_RISK,
    PROJECT_FILE,
    RUNBOOK,
    Command,
    Sites,
    Step,
    demotion_runbook,
    dns_instruction,
    file_edit,
    promotion_runbook,
    pulumi_preview,
    pulumi_up,
    rollout_status,
)
from tools.availability_docs import stack_config
from tools.harness import PROJECT_DIR
from tools.hints import knob
from tools.stack_files import StackFileError, list_stacks

#: How often the fence's pod check is repeated.
POLL_SECONDS = 5.0
#: What every runbook drives, and where the installation guide gets them.
TOOLS = ("pulumi", "kubectl")
INSTALL_SECTION = 'docs/installation.md, step 1 "Tools and access"'


class RefusalError(Exception):
    """The runbook will not start: the message says why and what to do."""


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, capture: bool) -> Completed: ...


@dataclass(frozen=True)
class ProcessRunner:
    """Runs commands in the project directory; their output goes to the terminal unless captured."""

    cwd: Path

    def __call__(self, argv: Sequence[str], *, capture: bool) -> Completed:
        try:
            done = subprocess.run(list(argv), cwd=self.cwd, check=False, text=True, capture_output=capture)
        except FileNotFoundError:  # gone since the check before the run: a failed command, not a traceback
            print(f"{argv[0]}: not found on PATH ({INSTALL_SECTION})", file=sys.stderr)
            return Completed(127, "")
        return Completed(done.returncode, done.stdout if capture else "")


def missing_tools(which: Callable[[str], str | None]) -> None:
    """Refuse, in one line, when a tool the runbooks drive is not on PATH: before anything runs or is written."""
    missing = [tool for tool in TOOLS if which(tool) is None]
    if missing:
        names = " and ".join(f"`{tool}`" for tool in missing)
        raise RefusalError(
            f"{names} not found on PATH: install {'them' if len(missing) > 1 else 'it'} as {INSTALL_SECTION} says; "
            f"{knob('PLAN=1', '--plan')} prints what would run without {'them' if len(missing) > 1 else 'it'}"
        )


# ------------------------------------------------------------------------------------------------ Pulumi.yaml


def _line_of(lines: list[str], key: str, start: int, indent: int) -> int:
    """The index of ``key:`` at exactly ``indent`` inside the block that starts after ``start``."""
    for index in range(start + 1, len(lines)):
        line = lines[index]
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        depth = len(line) - len(stripped)
        if depth < indent:
            break
        if depth == indent and stripped.split(":", 1)[0] == key and ":" in stripped:
            return index
    raise RefusalError(f"{PROJECT_FILE}: no block-style `{key}:` at indentation {indent}; edit it by hand")


def set_project_values(project_dir: Path, section: str, values: dict[str, str]) -> bool:
    """Set ``config.<section>.value.<key>`` in Pulumi.yaml for each of ``values``, keeping every other line (and
    comment) as it is; True when the file changed. The edit is checked by reading the file back: exactly these
    values differ, or the file is left untouched and the edit refused."""
    path = project_dir / PROJECT_FILE
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    config = _line_of(lines, "config", -1, 0)
    block = _line_of(lines, section, config, 2)
    value = _line_of(lines, "value", block, 4)
    for key, new in values.items():
        index = _line_of(lines, key, value, 6)
        head = lines[index].split(":", 1)[0]
        comment = re.search(r"\s+#.*$", lines[index].rstrip("\n"))
        lines[index] = f"{head}: {new}{comment.group(0) if comment else ''}\n"
    edited = "".join(lines)
    before, after = yaml.safe_load(text), yaml.safe_load(edited)
    expected = json.loads(json.dumps(before))
    expected["config"][section]["value"].update(values)
    if after != expected:
        raise RefusalError(f"{PROJECT_FILE}: editing config.{section} by line would change more than {sorted(values)}")
    if edited == text:
        return False
    write_atomically(path, edited)
    return True


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path``'s content in one rename: a reader (or a crash) sees the old file or the new, never half."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as temporary:
        temporary.write(text)
    os.chmod(temporary.name, path.stat().st_mode & 0o777)
    os.replace(temporary.name, path)


def edit_project(project_dir: Path, argv: Sequence[str]) -> str:
    """This tool's own edits of Pulumi.yaml (``set-active-site SITE``, ``set-headscale VERSION IMAGE``), done in
    process; what changed, or that nothing had to."""
    if argv[0] == "set-active-site":
        Tailnet.read(project_dir).site(argv[1])
        section, values = "tailnet", {"activeSite": argv[1]}
    else:
        section, values = "headscale", {"version": argv[1], "image": argv[2]}
    changed = set_project_values(project_dir, section, values)
    shown = ", ".join(f"{section}.{key}: {value}" for key, value in values.items())
    return f"{PROJECT_FILE}: {shown}" + ("" if changed else " (already)")


def _stack_overrides(project_dir: Path, section: str) -> list[str]:
    """Stack files that set ``<project>:<section>`` themselves (replacing Pulumi.yaml's value as a whole)."""
    found = []
    for stack in list_stacks(project_dir):
        document = yaml.safe_load((project_dir / f"Pulumi.{stack}.yaml").read_text()) or {}
        if f"{PROJECT}:{section}" in (document.get("config") or {}):
            found.append(f"Pulumi.{stack}.yaml")
    return found


# ------------------------------------------------------------------------------------------------ the tailnet


@dataclass
class Tailnet:
    """Every site's stack config, read offline from the files (secrets as placeholders: only names are used)."""

    project_dir: Path
    configs: dict[str, StackConfig] = field(default_factory=dict)

    @classmethod
    def read(cls, project_dir: Path) -> Tailnet:
        tailnet = cls(project_dir)
        for stack in list_stacks(project_dir):
            try:
                config = stack_config(stack, project_dir)
            except (ConfigError, StackFileError) as error:
                raise RefusalError(f"stack {stack}: its config does not load: {error}") from error
            tailnet.configs[config.site.name] = config
        if not tailnet.configs:
            raise RefusalError(f"no Pulumi.<stack>.yaml beside {project_dir / PROJECT_FILE}")
        return tailnet

    def any_config(self) -> StackConfig:
        return next(iter(self.configs.values()))

    def site(self, name: str) -> Site:
        known = [site.name for site in self.any_config().tailnet.sites]
        if name not in known:
            raise RefusalError(f"site {name!r} is not one of tailnet.sites: {', '.join(known)}")
        return self.any_config().tailnet.site(name)

    def sites(self, focus: str) -> Sites:
        """The runbooks' view, with every site's namespace from its own stack and ``focus``'s database stage."""
        config = self.configs.get(focus) or self.any_config()
        configs = self.configs
        return Sites(
            tailnet=config.tailnet,
            namespace_of=lambda site: configs[site.name].namespace if site.name in configs else config.namespace,
            stage=config.database.stage,
            failover=config.endpoint.failover,
            ttl=config.endpoint.ttl,
        )


def check_outcome(tailnet: Tailnet, steps: Sequence[Step]) -> None:
    """Every stack's whole config as it will be once ``steps`` made their edits, loaded from a scratch copy of the
    files: a runbook whose result `make plan` would refuse is refused before it runs or writes anything."""
    with tempfile.TemporaryDirectory(prefix="runbook-outcome-") as scratch:
        project = Path(scratch)
        for path in tailnet.project_dir.glob("Pulumi*.yaml"):
            shutil.copy(path, project / path.name)
        edits = [edit for step in steps for edit in step.edits]
        for edit in edits:
            if edit["file"] == PROJECT_FILE:
                section, key = edit["key"].split(".", 1)
                set_project_values(project, section, {key: edit["value"]})
            else:
                document = yaml.safe_load((project / edit["file"]).read_text()) or {}
                document.setdefault("config", {})[edit["key"]] = edit["value"]
                (project / edit["file"]).write_text(yaml.safe_dump(document, sort_keys=False))
        try:
            Tailnet.read(project)
        except RefusalError as refused:
            changed = ", ".join(f"{edit['key']}: {edit['value']}" for edit in edits)
            raise RefusalError(f"once the runbook set {changed}, {refused}") from None


# ------------------------------------------------------------------------------------------------ running


@dataclass
class Session:
    """One runbook run: the runner, what was done, and whose cluster is not to be touched."""

    runner: Runner
    out: Callable[[str], None] = print
    sleep: Callable[[float], None] = time.sleep
    lost: str | None = None
    #: Print the commands with what each expects; run, write and ask nothing.
    plan: bool = False
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: The files this run edited, as they were before: put back when it stops before anything was applied.
    originals: dict[Path, str] = field(default_factory=dict)
    #: A `pulumi up` has started: from then on a live system may have changed, and the edits stand.
    applying: bool = False
    #: Finds a tool on PATH, for real processes: the first command that needs one checks them all (None: a test's
    #: runner stands in for them).
    which: Callable[[str], str | None] | None = None
    #: Apply without asking (`YES=1`); otherwise each `pulumi up` is previewed and asked for at the terminal.
    yes: bool = False
    #: Asks the operator at the terminal; None without one.
    ask: Callable[[str], str] | None = None
    #: The stack whose preview the last command showed: its `up` needs no second preview before the question.
    previewed: str | None = None

    def ready_to_run(self) -> None:
        """Before anything runs: the tools are there, and every `pulumi up` can be asked for (or YES=1 given)."""
        if self.which is not None:
            missing_tools(self.which)
            self.which = None
        if not self.yes and self.ask is None:
            raise RefusalError(
                "every `pulumi up` a runbook runs shows its preview and asks before it acts, and there is no terminal "
                f"to ask at: run it at one, or give {knob('YES=1', '--yes')} to apply without asking"
            )

    def deployed_role(self, sites: Sites, site: Site) -> str:
        """The role ``site``'s stack last deployed (its `endpoints` output). Not knowing it stops the runbook: a
        guess could skip the fence of a site that still serves. A plan takes it from the files instead."""
        argv = ("pulumi", "stack", "output", "-s", sites.tailnet.stack_of(site), "endpoints", "--json")
        if self.plan:
            role = Role.ACTIVE.value if site.name == sites.tailnet.active_site else Role.STANDBY.value
            self.out(f"? {shlex.join(argv)}")
            self.out(f"   the real run reads what {site.name} last deployed; this plan assumes {role} (the files)")
            return role
        self.ready_to_run()
        done = self.runner(argv, capture=True)
        try:
            role = json.loads(done.stdout).get("role") if done.returncode == 0 else None
        except (ValueError, AttributeError):
            role = None
        if role not in {Role.ACTIVE.value, Role.STANDBY.value}:
            raise RefusalError(
                f"cannot tell what {site.name} last deployed: `{' '.join(argv)}` gave no role (exit status "
                f"{done.returncode}); log in to the Pulumi backend, or deploy {site.name}'s stack first"
            )
        return role

    def run_steps(self, steps: Sequence[Step], project_dir: Path) -> None:
        if not self.plan:
            self.ready_to_run()
        for number, step in enumerate(steps, 1):
            self.out(f"== {number}. {step.name}: {step.why}")
            for command in step.commands:
                self._run(command, step, project_dir)

    def _run(self, command: Command, step: Step, project_dir: Path) -> None:
        if self.lost is not None and command.site == self.lost:
            self.out(f"   skip ({self.lost} is lost): {command.line}")
            self.skipped.append(command.line)
            return
        self.out(f"$ {command.line}")
        self.ran.append(command.line)
        if self.plan:
            self.out(f"   expect: {command.expect}")
            return
        if "tools.runbook" in command.argv:
            path = project_dir / PROJECT_FILE
            self.originals.setdefault(path, path.read_text())
            self.out(f"   {edit_project(project_dir, command.argv[command.argv.index('tools.runbook') + 1 :])}")
            self.previewed = None  # the files changed since any preview
            return
        if command.argv[:2] == ("pulumi", "up") and not self.yes:
            self._confirm(command, step)
        self.applying = self.applying or command.argv[:2] == ("pulumi", "up")
        if command.until_empty:
            self._poll(command, step)
            return
        done = self.runner(command.argv, capture=False)
        self.previewed = (
            command.argv[command.argv.index("-s") + 1] if command.argv[:2] == ("pulumi", "preview") else None
        )
        if done.returncode != 0:
            raise StepFailedError(step, command, f"exit status {done.returncode}")

    def _confirm(self, command: Command, step: Step) -> None:
        """Show what the `pulumi up` will do (its preview, unless the command before was that preview) and ask: a
        refusal stops the runbook before the stack changes."""
        stack = command.argv[command.argv.index("-s") + 1]
        if self.previewed != stack:
            flags = [flag for flag in command.argv if flag == "--refresh"]
            preview = Command(argv=("pulumi", "preview", *flags, "-s", stack), expect="", site=command.site)
            self.out(f"$ {preview.line}")
            done = self.runner(preview.argv, capture=False)
            if done.returncode != 0:
                raise StepFailedError(step, preview, f"exit status {done.returncode}")
        assert self.ask is not None  # ready_to_run refused the run otherwise
        try:
            answer = self.ask(f"Apply this preview to {stack}? Type yes to apply: ").strip()
        except EOFError:  # the terminal closed: no answer is no
            answer = ""
        if answer != "yes":
            raise StepFailedError(step, command, f"not applied: the answer was {answer!r}, not yes")

    def _poll(self, command: Command, step: Step) -> None:
        waited = 0.0
        while True:
            done = self.runner(command.argv, capture=True)
            if done.returncode != 0:
                raise StepFailedError(step, command, f"exit status {done.returncode}")
            left = done.stdout.split()
            if not left:
                return
            if waited >= FENCE_TIMEOUT_SECONDS:
                why = f"still {len(left)} pod(s) after {FENCE_TIMEOUT_SECONDS} s: {' '.join(left)}"
                raise StepFailedError(step, command, why)
            self.out(f"   {len(left)} pod(s) left; again in {POLL_SECONDS:.0f} s")
            self.sleep(POLL_SECONDS)
            waited += POLL_SECONDS


class StepFailedError(Exception):
    def __init__(self, step: Step, command: Command, why: str) -> None:
        self.step, self.command, self.why = step, command, why
        super().__init__(f"step '{step.name}' stopped: `{command.line}` failed ({why})")


# ------------------------------------------------------------------------------------------------ the runbooks


def _confirm_lost(lost: str, confirmation: str | None, ask: Callable[[str], str] | None, session: Session) -> None:
    how = f"{knob(f'CONFIRM={lost}', f'--confirm-lost {lost}')} (or typing {lost} at the prompt)"
    if session.plan and confirmation is None:
        session.out(f"? the real run asks you to confirm that {lost} is lost: {how}")
        return
    if confirmation is None and ask is not None:
        try:
            confirmation = ask(f"Type {lost} to confirm that it is lost: ").strip()
        except EOFError:  # the terminal closed: not confirmed
            confirmation = None
    if confirmation != lost:
        raise RefusalError(f"not confirmed: skipping {lost}'s fence needs {how}")


def promotion(
    tailnet: Tailnet, new_name: str, session: Session, *, confirmation: str | None, ask: Callable[[str], str] | None
) -> list[Step]:
    """The promotion's steps, worked out again on every run: the sites other than ``new`` whose stacks last
    deployed them as active are fenced (none, on a re-run after the fence), and every other site follows."""
    new = tailnet.site(new_name)
    sites = tailnet.sites(new.name)
    others = [site for site in sites.tailnet.sites if site.name != new.name]
    lost = None if session.lost is None else tailnet.site(session.lost)
    if lost is not None and lost.name == new.name:
        raise RefusalError(f"{knob('LOST', '--lost')} {lost.name}: the site being promoted cannot be the lost one")
    if not session.plan:
        session.ready_to_run()
    if lost is not None:
        session.out(f"!! {LOST_RISK.format(old=lost.name)}.")
        _confirm_lost(lost.name, confirmation, ask, session)
    actives = [site for site in others if session.deployed_role(sites, site) == Role.ACTIVE.value]
    if sites.tailnet.active_site != new.name:
        named = sites.tailnet.site(sites.tailnet.active_site)
        actives = actives if named in actives else [named, *actives]
    if len(actives) > 1:
        raise RefusalError(f"more than one site last deployed as active: {', '.join(s.name for s in actives)}")
    return promotion_runbook(sites, new, actives[0] if actives else None)


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def check_release(tailnet: Tailnet, version: str, image: str) -> None:
    """What a release's name alone says is wrong, refused before anything is touched: its form, the image's tag,
    a downgrade (the whole resulting config is checked with the other runbooks', by :func:`check_outcome`)."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise RefusalError(f"VERSION {version!r}: expected a release such as 0.29.3")
    tag = image.split("@", 1)[0].rsplit(":", 1)[-1] if ":" in image.split("@", 1)[0].rsplit("/", 1)[-1] else ""
    if tag.removeprefix("v") != version:
        raise RefusalError(f"IMAGE {image!r}: its tag must be the release {version} (image and version agree)")
    current = tailnet.any_config().headscale.version
    if _release_key(version) < _release_key(current):
        raise RefusalError(
            f"VERSION {version} is older than headscale.version {current} in {PROJECT_FILE}: "
            "Headscale's migrations are one-way, so going back is a restore of the pre-upgrade snapshot, not an "
            'upgrade (docs/upgrades.md, "To go back deliberately")'
        )


def upgrade_steps(tailnet: Tailnet, version: str, image: str) -> list[Step]:
    """The release in Pulumi.yaml, then the active previewed and rolled out on it, then every standby (a standby
    runs the active's exact release: it refuses to deploy until the active has it). The preview comes before any
    change to a live system: the program's version gate and config checks run against the active's state, and a
    refusal there leaves nothing applied (the runbook then puts Pulumi.yaml back)."""
    check_release(tailnet, version, image)
    overriding = _stack_overrides(tailnet.project_dir, "headscale")
    if overriding:
        raise RefusalError(
            f"{', '.join(overriding)} set {PROJECT}:headscale themselves, so Pulumi.yaml's release does not reach "
            "them: remove it there first (a stack file's object replaces the project's whole)"
        )
    any_config = tailnet.any_config()
    active = any_config.tailnet.site(any_config.tailnet.active_site)
    sites = tailnet.sites(active.name)
    edit = Command(
        argv=(*RUNBOOK.split(), "set-headscale", version, image),
        expect=f"{PROJECT_FILE} has headscale.version {version} and headscale.image {image}",
    )
    standbys = [site for site in sites.tailnet.sites if site.name != active.name]
    release = (file_edit(PROJECT_FILE, "headscale.version", version), file_edit(PROJECT_FILE, "headscale.image", image))
    return [
        Step(name="set the release", why="one release for every site, in Pulumi.yaml", commands=(edit,), edits=release),
        Step(
            name="upgrade the active",
            why="Headscale migrates its database when the new release starts; the pre-upgrade snapshot is taken "
            "first by the pod",
            commands=(
                pulumi_preview(sites, active, f"{active.name} plans {version}: its version gate lets it through"),
                pulumi_up(sites, active, f"{active.name} runs {version}"),
                rollout_status(sites, active),
            ),
        ),
        Step(
            name="upgrade the standbys",
            why=f"each standby must run {version} to take over the migrated database",
            commands=tuple(pulumi_up(sites, site, f"{site.name} runs {version}") for site in standbys),
        ),
    ]


def _finish(session: Session, steps: Sequence[Step], project_dir: Path, tail: str = "", *, undo: bool = False) -> int:
    """Run ``steps``; with ``undo``, a run that stops before its first `pulumi up` puts back the files it edited
    (nothing live has changed, so the files must not claim otherwise). After an up has started they stand: the
    stack may run what they say, and the next run finishes from there."""
    check_outcome(Tailnet.read(project_dir), steps)
    started = time.monotonic()
    try:
        session.run_steps(steps, project_dir)
    except (StepFailedError, KeyboardInterrupt) as failed:
        stopped = str(failed) if isinstance(failed, StepFailedError) else "interrupted"
        if undo and not session.applying and session.originals:
            for path, text in session.originals.items():
                write_atomically(path, text)
            put_back = ", ".join(path.name for path in session.originals)
            session.out(
                f"STOPPED: {stopped}. Nothing was applied, so {put_back} is as it was. Fix the cause and run "
                "the same command again."
            )
        else:
            kept = " (its edits stand: a stack may run them already)" if session.originals else ""
            session.out(
                f"STOPPED: {stopped}{kept}. Fix the cause and run the same command again: every step is safe to repeat."
            )
        return 1
    if session.plan:
        asking = (
            f" Each `pulumi up` is previewed and asked for first ({knob('YES=1', '--yes')}: applied without asking)."
            if not session.yes
            else ""
        )
        session.out(
            f"plan: {len(session.ran)} command(s) would run, {len(session.skipped)} skipped; nothing was run, written "
            f"or asked.{asking} Without {knob('PLAN=1', '--plan')} the same command carries it out."
        )
    else:
        session.out(
            f"done: {len(session.ran)} command(s) run, {len(session.skipped)} skipped, "
            f"{time.monotonic() - started:.1f} s"
        )
    if tail:
        session.out(tail)
    return 0


def main(
    argv: Sequence[str] | None = None,
    *,
    runner: Runner | None = None,
    project_dir: Path = PROJECT_DIR,
    out: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    ask: Callable[[str], str] | None = None,
) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.runbook", description=__doc__ and __doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="runbook", required=True)
    promote = commands.add_parser("promote", help="make SITE the active site")
    promote.add_argument("site")
    promote.add_argument("--lost", help="the old active is gone: skip its fence (asks to confirm)")
    promote.add_argument("--confirm-lost", help="the lost site's name again, instead of typing it at the prompt")
    demote = commands.add_parser("demote", help="a returning former active stops serving and follows the active")
    demote.add_argument("site")
    upgrade = commands.add_parser("upgrade", help="every site to another Headscale release, the active first")
    upgrade.add_argument("version")
    upgrade.add_argument("image")
    for runbook in (promote, demote, upgrade):
        runbook.add_argument("--plan", action="store_true", help="print what it would run; run, write, ask nothing")
        runbook.add_argument("--yes", action="store_true", help="apply each `pulumi up` without previewing and asking")
    active = commands.add_parser("set-active-site", help="set tailnet.activeSite in Pulumi.yaml")
    active.add_argument("site")
    release = commands.add_parser("set-headscale", help="set headscale.version and headscale.image in Pulumi.yaml")
    release.add_argument("version")
    release.add_argument("image")
    args = parser.parse_args(argv)
    plan = getattr(args, "plan", False)
    session = Session(
        runner=runner or ProcessRunner(project_dir),
        out=out,
        sleep=sleep,
        lost=getattr(args, "lost", None),
        plan=plan,
        which=shutil.which if runner is None else None,
        yes=getattr(args, "yes", False),
    )
    if ask is None and sys.stdin.isatty():
        ask = input
    session.ask = ask
    try:
        return _dispatch(args, session, project_dir, ask)
    except RefusalError as refused:
        out(f"refused: {refused}")
        return 2


def _dispatch(args: argparse.Namespace, session: Session, project_dir: Path, ask: Any) -> int:
    if args.runbook == "set-active-site":
        session.out(edit_project(project_dir, ["set-active-site", args.site]))
        return 0
    if args.runbook == "set-headscale":
        session.out(edit_project(project_dir, ["set-headscale", args.version, args.image]))
        return 0
    tailnet = Tailnet.read(project_dir)
    if args.runbook == "promote":
        steps = promotion(tailnet, args.site, session, confirmation=args.confirm_lost, ask=ask)
        return _finish(
            session,
            steps,
            project_dir,
            tail=f"DNS: {dns_instruction(tailnet.sites(args.site), tailnet.site(args.site))}",
        )
    if args.runbook == "demote":
        site = tailnet.site(args.site)
        if tailnet.any_config().tailnet.active_site == site.name:
            raise RefusalError(f"{site.name} is tailnet.activeSite: promote another site instead (make promote SITE=…)")
        return _finish(session, demotion_runbook(tailnet.sites(site.name), site), project_dir)
    return _finish(session, upgrade_steps(tailnet, args.version, args.image), project_dir, undo=True)


if __name__ == "__main__":
    sys.exit(main())
