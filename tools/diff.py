"""Offline preview of a change: plan a base (a git ref) and the working tree, and compare them stack by stack.

Usage: ``python -m tools.diff [--base REF] [--stack NAME]...`` (``make diff BASE=... STACK=...``).

The base is checked out with ``git worktree add --detach`` into a temporary directory and planned by its own code
and stack files; the working tree is planned the same way. Each plan runs in a subprocess (``_dumper``) that
writes a JSON dump: every Pulumi resource (type, name, URN, parent, inputs, options) and, as inputs, every
Kubernetes object. Secret values never leave that subprocess: each becomes ``{"secret": <16 hex of its SHA-256>}``,
so a change shows as ``changed`` and the value never does.

The comparison (``diff_dumps``) keys resources by URN (type, parent chain and name), follows aliases, pairs a
deleted and a created resource that are the same Kubernetes object (or of one type with similar inputs) as one
replacement, and predicts replacements the way pulumi-kubernetes (4.x), pulumi-random and this project's dynamic
providers decide them (see ``IMMUTABLE_FIELDS``). Replaced or deleted state gets a DATA LOSS line. Before the
fields, each stack says what its changes mean (tools/diff_effects.py): the workloads restarted, rolled, stopped or
started (with the outage of the `recovery` output) and a policy's rules added and removed.

Exit status: 0 no change; 1 changes; 3 changes with DATA LOSS; 2 the diff could not be made (git, a base without
the planning API, a stack that does not plan in the working tree), whatever else it found.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.diff_effects import APPLICATIONS, WorkloadEffect, policy_changes, policy_document, workload_effect
from tools.fields import (
    ABSENT,
    IGNORED_INPUTS,
    OUTPUT_RECORD_KEYS,
    FieldChange,
    Token,
    covers,
    diff_values,
    format_path,
    is_secret,
    is_unknown,
    pattern,
)
from tools.kubernetes_rules import (
    DYNAMIC_REPLACES,
    ProviderFlags,
    api_group,
    provider_replacement,
    quantity,
    refusal,
    replacing_rule,
    truthy,
)
from tools.source_tree import SourceTreeError, import_roots

#: Bumped when the dump's shape changes; the dumper writes it, the comparison refuses another.
DUMP_VERSION = 1
EXIT_NO_CHANGE = 0
EXIT_CHANGES = 1
EXIT_ERROR = 2
EXIT_DATA_LOSS = 3
#: Planning both trees takes seconds; a hung plan must still end the run.
DUMP_TIMEOUT_SECONDS = 600


class DiffError(Exception):
    """The diff cannot be made: git fails, a tree cannot be planned or lacks the planning API."""


# ------------------------------------------------------------------------------------------------ the dumper


def _dumper(request: str) -> None:
    """Plan the tree in the current directory and write its dump to ``request["out"]``.

    Runs in a subprocess with that tree as the working directory, sent as source (``python -P -c``, the tree's
    import roots on ``PYTHONPATH``, see ``tools.source_tree``): it uses only the standard library, PyYAML and the
    tree's own ``tools`` and package, so a base is planned by the base's code. Secret values
    (harness-marked inputs and outputs, every Secret's data) leave it only as SHA-256 prefixes.
    """
    import hashlib
    import inspect
    import itertools
    import json
    import logging
    import sys
    import warnings
    from collections.abc import Mapping
    from pathlib import Path

    args = json.loads(request)
    root = Path.cwd().resolve()
    out = Path(args["out"])
    notes: list[str] = []

    def fail(message: str) -> None:
        out.write_text(json.dumps({"version": args["version"], "fatal": message}))
        raise SystemExit(0)

    def digest(value: Any) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]

    try:
        import yaml
        from google.protobuf import json_format

        from tools import harness, plan, stack_files

        for module, names in (
            (plan, ("plan_all", "plan_stack", "PLACEHOLDERS", "PROJECT")),
            (harness, ("Secret", "Unknown")),
            (stack_files, ("list_stacks", "read_stack_settings", "StackFileError")),
        ):
            for name in names:
                getattr(module, name)
        accepted = set(inspect.signature(plan.plan_all).parameters)
    except (ImportError, AttributeError) as exc:
        fail(f"its tools lack what the diff needs ({exc}); a base must have tools.plan.plan_all and tools.harness")
    for module in (plan, sys.modules.get("headscale_ha.components")):
        if module is not None and not Path(module.__file__).resolve().is_relative_to(root):
            fail(f"{module.__name__} was imported from {module.__file__}, not from {root}")
    missing = {"project_dir", "identity_dir", "stacks"} - accepted
    if missing:
        fail(f"its tools.plan.plan_all lacks the parameters {', '.join(sorted(missing))}")

    class Hashed(harness.Secret):
        """A harness secret marker that remembers the digest of the value it hides."""

        def __init__(self, value_digest: str) -> None:
            self.digest = value_digest

    def hashed_leaves(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: hashed_leaves(v) for k, v in value.items()}
        if isinstance(value, list):
            return [hashed_leaves(v) for v in value]
        return Hashed(digest(value))

    if hasattr(harness, "_secret_leaves"):
        harness._secret_leaves = hashed_leaves
    else:
        notes.append("secret inputs are compared as markers only: this tree's harness has no _secret_leaves")

    extras: dict[str, dict[str, Any]] = {}
    monitor_class = getattr(harness, "_RecordingMonitor", None)
    if monitor_class is not None:
        original_register = monitor_class.RegisterResource

        def register(self: Any, request: Any) -> Any:
            response = original_register(self, request)
            aliases = [json_format.MessageToDict(a) for a in getattr(request, "aliases", [])]
            aliases += [{"urn": u} for u in getattr(request, "aliasURNs", [])]
            defined = getattr(request, "deleteBeforeReplaceDefined", False)
            extras[response.urn] = {
                "aliases": aliases,
                "ignoreChanges": list(getattr(request, "ignoreChanges", [])),
                "replaceOnChanges": list(getattr(request, "replaceOnChanges", [])),
                "deleteBeforeReplace": bool(request.deleteBeforeReplace) if defined else None,
            }
            return response

        monitor_class.RegisterResource = register
    else:
        notes.append("aliases and ignoreChanges are not captured: this tree's harness has no _RecordingMonitor")

    def secure_values(project_dir: Path, stack: str) -> dict[str, list[str]]:
        """The ciphertexts of each secure config key, in the order the stack-file reader replaces them."""

        def walk(value: Any, into: list[str]) -> None:
            if isinstance(value, dict):
                if set(value) == {"secure"}:
                    into.append(str(value["secure"]))
                    return
                for item in value.values():
                    walk(item, into)
            elif isinstance(value, list):
                for item in value:
                    walk(item, into)

        try:
            project_doc = yaml.safe_load((project_dir / "Pulumi.yaml").read_text()) or {}
            files = (project_dir / f"Pulumi.{stack}.yaml", project_dir / f"Pulumi.{stack}.yml")
            stack_file = next((p for p in files if p.is_file()), None)
            stack_doc = yaml.safe_load(stack_file.read_text()) if stack_file is not None else {}
            merged: dict[str, Any] = {}
            for key, declaration in (project_doc.get("config") or {}).items():
                qualified = str(key) if ":" in str(key) else f"{project_doc.get('name')}:{key}"
                merged[qualified] = declaration.get("value") if isinstance(declaration, dict) else declaration
            merged.update({str(k): v for k, v in ((stack_doc or {}).get("config") or {}).items()})
        except (OSError, yaml.YAMLError, AttributeError):
            return {}  # the plan reports the unreadable file
        found = {}
        for key, value in merged.items():
            texts: list[str] = []
            walk(value, texts)
            if texts:
                found[key] = texts
        return found

    original_plan_stack = plan.plan_stack
    per_stack: dict[tuple[str, str], dict[str, Any]] = {}

    def plan_stack(stack: str, **kwargs: Any) -> Any:
        """plan.plan_stack, with each secure value's placeholder carrying its ciphertext's digest (so a changed
        secret reaches the objects it feeds as a changed digest) and the stack's secure and kubernetes: config."""
        project_dir = Path(kwargs.get("project_dir") or harness.PROJECT_DIR).resolve()
        secure = secure_values(project_dir, stack)
        added = {}
        for key, texts in secure.items():
            if key not in plan.PLACEHOLDERS:
                labels = itertools.cycle(
                    [f"[offline placeholder for secret {key}, ciphertext {digest(t)}]" for t in texts]
                )
                added[key] = lambda labels=labels: next(labels)
        plan.PLACEHOLDERS.update(added)
        try:
            settings = stack_files.read_stack_settings(project_dir, stack, placeholders=plan.PLACEHOLDERS)
            kubernetes = {
                k: v
                for k, v in settings.config.items()
                if k.startswith("kubernetes:") and k not in settings.secret_keys
            }
        except stack_files.StackFileError:
            kubernetes = {}
        per_stack[(str(project_dir), stack)] = {
            "secureConfig": {key: digest(texts) for key, texts in secure.items()},
            "kubernetesConfig": kubernetes,
        }
        try:
            return original_plan_stack(stack, **kwargs)
        finally:
            for key in added:
                plan.PLACEHOLDERS.pop(key, None)

    plan.plan_stack = plan_stack

    def encode(value: Any) -> Any:
        if isinstance(value, Hashed):
            return {"secret": value.digest}
        if isinstance(value, harness.Secret):
            return {"secret": None}
        secret_output = getattr(harness, "SecretOutput", None)
        if secret_output is not None and isinstance(value, secret_output):
            return {"secret": digest(encode(value.value))}
        if isinstance(value, harness.Unknown):
            return {"unknown": True}
        if isinstance(value, Mapping):
            return {str(k): encode(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [encode(v) for v in value]
        if value is None or isinstance(value, str | int | float | bool):
            return value
        return str(value)

    def hide(value: Any) -> Any:
        """Every value of a Secret's data, marked secret or not."""
        if isinstance(value, dict) and set(value) == {"secret"} and not isinstance(value["secret"], dict):
            return value
        if isinstance(value, dict):
            return {k: hide(v) for k, v in value.items()}
        return {"secret": digest(value)}

    def resource_entry(resource: Any) -> dict[str, Any]:
        inputs = encode(resource.inputs)
        kubernetes = resource.type.startswith("kubernetes:") and isinstance(inputs, dict)
        if kubernetes and inputs.get("kind") == "Secret" and inputs.get("apiVersion") == "v1":
            for key in ("data", "stringData"):
                if key in inputs:
                    inputs[key] = hide(inputs[key])
        entry = {
            "urn": resource.urn,
            "type": resource.type,
            "name": resource.name,
            "parent": resource.parent_urn,
            "custom": resource.custom,
            "inputs": inputs,
            "protect": resource.protect,
            "retainOnDelete": resource.retain_on_delete,
            "provider": resource.provider,
            "dependencies": sorted(resource.dependencies),
        }
        entry.update(extras.get(resource.urn, {}))
        return entry

    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
    identity_dir = root / "identity"
    has_identity = (identity_dir / "Pulumi.yaml").is_file()
    site_stacks = stack_files.list_stacks(root)
    wanted = args["stacks"]
    dump: dict[str, Any] = {"version": args["version"], "root": str(root), "notes": notes, "stacks": {}}
    for planned in plan.plan_all(
        project_dir=root,
        identity_dir=identity_dir if has_identity else None,
        stacks=None if wanted is None else [s for s in wanted if s in site_stacks],
    ):
        role = "site" if planned.project == plan.PROJECT else "identity"
        entry: dict[str, Any] = {
            "role": role,
            "stack": planned.stack,
            "project": planned.project,
            "requested": planned.requested,
        }
        if planned.error is not None:
            entry["error"] = f"{type(planned.error).__name__}: {planned.error}"
        else:
            run = planned.run
            entry["resources"] = [resource_entry(r) for r in run.resources]
            entry["outputs"] = encode(run.exports if hasattr(run, "exports") else run.outputs)
        project_dir = (identity_dir if role == "identity" else root).resolve()
        entry.update(per_stack.get((str(project_dir), planned.stack), {}))
        dump["stacks"][f"{role}/{planned.stack}"] = entry
    out.write_text(json.dumps(dump, sort_keys=True))


def _dumper_source() -> str:
    """``_dumper`` as a script: its source and the call (annotations stay unevaluated, as in this module)."""
    source = textwrap.dedent(inspect.getsource(_dumper))
    return f"from __future__ import annotations\nimport sys\nfrom typing import Any\n{source}\n_dumper(sys.argv[1])\n"


@dataclass
class _PendingDump:
    """A dumper subprocess for one tree; ``result()`` waits for it and reads its dump."""

    label: str
    process: subprocess.Popen[str]
    out: Path
    links: Path  # the tree's import roots (tools.source_tree), removed with the dump

    def cancel(self) -> None:
        """Stop the subprocess (another plan failed) and drop its output file."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()
        self._drop()

    def _drop(self) -> None:
        self.out.unlink(missing_ok=True)
        shutil.rmtree(self.links, ignore_errors=True)

    def result(self) -> dict[str, Any]:
        try:
            _, stderr = self.process.communicate(timeout=DUMP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            self._drop()
            raise DiffError(f"planning {self.label} took longer than {DUMP_TIMEOUT_SECONDS} s") from None
        text = self.out.read_text() if self.out.is_file() else ""
        self._drop()
        if self.process.returncode != 0 or not text:
            tail = "\n".join(stderr.strip().splitlines()[-15:])
            raise DiffError(f"planning {self.label} failed (exit {self.process.returncode}):\n{tail}")
        dump = json.loads(text)
        if "fatal" in dump:
            raise DiffError(f"cannot plan {self.label}: {dump['fatal']}")
        if dump.get("version") != DUMP_VERSION:
            raise DiffError(f"{self.label}: dump version {dump.get('version')}, expected {DUMP_VERSION}")
        return dump


def start_dump(tree: Path, stacks: Sequence[str] | None, label: str) -> _PendingDump:
    """Start planning ``tree`` with its own code, in a subprocess of this interpreter (same packages)."""
    handle, name = tempfile.mkstemp(prefix="headscale-ha-dump-", suffix=".json")
    os.close(handle)
    request = json.dumps({"out": name, "stacks": list(stacks) if stacks else None, "version": DUMP_VERSION})
    links = Path(tempfile.mkdtemp(prefix="headscale-ha-tree-"))
    try:
        roots = import_roots(tree.resolve(), links)
    except SourceTreeError as exc:
        shutil.rmtree(links)
        raise DiffError(f"cannot plan {label}: {exc}") from None
    inherited = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    process = subprocess.Popen(
        [sys.executable, "-P", "-c", _dumper_source(), request],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, roots), *inherited])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return _PendingDump(label=label, process=process, out=Path(name), links=links)


def dump_tree(tree: Path, stacks: Sequence[str] | None = None, label: str | None = None) -> dict[str, Any]:
    """Plan ``tree`` (a project directory) in a subprocess and return its dump."""
    return start_dump(tree, stacks, label or str(tree)).result()


def collect(pending: Sequence[_PendingDump]) -> list[dict[str, Any]]:
    """The dumps of plans started together; the first failure stops the others and is raised."""
    dumps = []
    for index, item in enumerate(pending):
        try:
            dumps.append(item.result())
        except BaseException:
            for other in pending[index + 1 :]:
                other.cancel()
            raise
    return dumps


def _git(args: Sequence[str], cwd: Path) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DiffError(f"git {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip()


@contextlib.contextmanager
def base_worktree(project_dir: Path, ref: str) -> Iterator[tuple[Path, str]]:
    """A detached worktree of ``ref`` in a temporary directory: (the project directory inside it, the commit).

    The project directory sits where it sits in the repository, and ``<project>/../shared`` resolves to this
    checkout's when that exists (the reference data; planning itself does not need it). The worktree is removed
    afterwards, also on errors.
    """
    project_dir = project_dir.resolve()
    toplevel = Path(_git(["rev-parse", "--show-toplevel"], project_dir)).resolve()
    try:
        commit = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], project_dir)
    except DiffError:
        raise DiffError(
            f"git rev-parse: {ref!r} is not a commit here (in CI, fetch it: a shallow checkout lacks the base)"
        ) from None
    relative = project_dir.relative_to(toplevel)
    scratch = Path(tempfile.mkdtemp(prefix="headscale-ha-diff-"))
    worktree = scratch / (toplevel.name or "base")
    added = False
    try:
        _git(["worktree", "add", "--detach", "--quiet", str(worktree), commit], project_dir)
        added = True
        base_project = worktree / relative
        if not (base_project / "Pulumi.yaml").is_file():
            raise DiffError(f"{ref} ({commit[:12]}) has no Pulumi.yaml in {relative or '.'}")
        shared = project_dir.parent / "shared"
        link = base_project.parent / "shared"
        if shared.is_dir() and not link.exists():
            link.symlink_to(shared, target_is_directory=True)
        yield base_project, commit
    finally:
        removed = not added
        if added:
            with contextlib.suppress(DiffError):
                _git(["worktree", "remove", "--force", str(worktree)], project_dir)
                removed = True
        shutil.rmtree(scratch, ignore_errors=True)
        if not removed:  # forget the worktree whose directory is gone (git's own cleanup of stale entries)
            with contextlib.suppress(DiffError):
                _git(["worktree", "prune"], project_dir)


def dump_ref(project_dir: Path, ref: str, stacks: Sequence[str] | None = None) -> dict[str, Any]:
    """Plan ``ref`` of the repository holding ``project_dir`` (its own code and stack files)."""
    with base_worktree(project_dir, ref) as (base_project, commit):
        return dump_tree(base_project, stacks, label=f"{ref} ({commit[:12]})")


# ------------------------------------------------------------------------------------------------ values


def _show(value: Any, limit: int = 100) -> str:
    if value is ABSENT:
        return "absent"
    if is_unknown(value):
        return "[unknown until deployed]"
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + f"… ({len(text)} chars)"


def _short(change: FieldChange) -> str:
    """``spec.storageClassName changed "ceph-block" -> "local-path"`` (secrets: ``changed`` only)."""
    if change.secret:
        return f"{change.text} changed"
    return f"{change.text} changed {_show(change.old, 60)} -> {_show(change.new, 60)}"


# ------------------------------------------------------------------------------------------------ resources


@dataclass(frozen=True)
class Resource:
    """One resource of a dump."""

    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    inputs: Any
    protect: bool = False
    retain: bool = False
    provider: str | None = None
    aliases: tuple[Any, ...] = ()
    ignore_changes: tuple[str, ...] = ()
    replace_on_changes: tuple[str, ...] = ()
    delete_before_replace: bool | None = None

    @classmethod
    def from_dump(cls, entry: Mapping[str, Any]) -> Resource:
        return cls(
            urn=entry["urn"],
            type=entry["type"],
            name=entry["name"],
            parent=entry.get("parent"),
            custom=bool(entry.get("custom", True)),
            inputs=entry.get("inputs") or {},
            protect=bool(entry.get("protect")),
            retain=bool(entry.get("retainOnDelete")),
            provider=entry.get("provider"),
            aliases=tuple(entry.get("aliases") or ()),
            ignore_changes=tuple(entry.get("ignoreChanges") or ()),
            replace_on_changes=tuple(entry.get("replaceOnChanges") or ()),
            delete_before_replace=entry.get("deleteBeforeReplace"),
        )

    @property
    def is_kubernetes(self) -> bool:
        return (
            self.custom
            and self.type.startswith("kubernetes:")
            and isinstance(self.inputs, dict)
            and "apiVersion" in self.inputs
            and "kind" in self.inputs
        )

    @property
    def is_patch(self) -> bool:
        return self.is_kubernetes and self.type.endswith("Patch")

    @property
    def kind(self) -> str:
        return str(self.inputs.get("kind")) if self.is_kubernetes else ""

    @property
    def metadata(self) -> dict[str, Any]:
        metadata = self.inputs.get("metadata") if self.is_kubernetes else None
        return metadata if isinstance(metadata, dict) else {}

    @property
    def object_name(self) -> str:
        return str(self.metadata.get("name") or self.name)

    @property
    def namespace(self) -> str | None:
        namespace = self.metadata.get("namespace")
        return str(namespace) if namespace else None

    @property
    def object_id(self) -> tuple[str, str | None, str] | None:
        """(kind, namespace, name): what the API server knows the object by (its apiVersion aside)."""
        return (self.kind, self.namespace, self.object_name) if self.is_kubernetes else None

    @property
    def object_text(self) -> str:
        return f"{self.namespace}/{self.object_name}" if self.namespace else self.object_name

    @property
    def label(self) -> str:
        if self.is_kubernetes:
            patch = " (patch)" if self.is_patch else ""
            return f"{self.kind}{patch} {self.object_text}"
        return f"{self.type} {self.name}"


def _urn_parts(urn: str) -> tuple[str, str, str, str] | None:
    """(stack, project, qualified type, name) of ``urn:pulumi:<stack>::<project>::<qualified type>::<name>``."""
    parts = urn.split("::", 3)
    if len(parts) != 4 or not parts[0].startswith("urn:pulumi:"):
        return None
    return parts[0].removeprefix("urn:pulumi:"), parts[1], parts[2], parts[3]


def alias_urns(resource: Resource, by_urn: Mapping[str, Resource], _depth: int = 0) -> set[str]:
    """The URNs ``resource``'s aliases stand for, its parents' aliases included.

    Each in two spellings: the engine's (the parent's whole type chain, the stack left out) and the offline
    harness's (Pulumi's mock monitor: only the parent's own type, the stack included); a dump holds one of them.
    """
    parts = _urn_parts(resource.urn)
    if parts is None or _depth > 50:
        return set()
    stack, project, _, _ = parts

    def urns(name: str, type_: str, parent: str | None, stack_: str, project_: str) -> set[str]:
        parent_parts = _urn_parts(parent) if parent else None
        if parent_parts is None:
            return {f"urn:pulumi:{stack_}::{project_}::{type_}::{name}"}
        chain = parent_parts[2]
        engine = type_ if chain.endswith("pulumi:pulumi:Stack") else f"{chain}${type_}"
        mock = f"{chain.rsplit('$', 1)[-1]}${type_}"
        return {f"urn:pulumi:{stack_}::{project_}::{t}::{name}" for t in (engine, mock)}

    found: set[str] = set()
    for alias in resource.aliases:
        if not isinstance(alias, dict):
            continue
        if alias.get("urn"):
            found.add(str(alias["urn"]))
            continue
        spec = alias.get("spec") or {}
        parent = None if spec.get("noParent") else (spec.get("parentUrn") or resource.parent)
        found |= urns(
            spec.get("name") or resource.name,
            spec.get("type") or resource.type,
            parent,
            spec.get("stack") or stack,
            spec.get("project") or project,
        )
    parent = by_urn.get(resource.parent or "")
    if parent is not None:
        for parent_alias in alias_urns(parent, by_urn, _depth + 1):
            found |= urns(resource.name, resource.type, parent_alias, stack, project)
    found.discard(resource.urn)
    return found


def _leaves(value: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(value, dict) and not is_secret(value):
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{prefix}[{index}]")
    else:
        yield f"{prefix}={json.dumps(value, sort_keys=True)}"


def _leaf_set(resource: Resource) -> frozenset[str]:
    return frozenset(x for x in _leaves(resource.inputs) if not x.startswith(".metadata.name="))


def similarity(a: Resource | frozenset[str], b: Resource | frozenset[str]) -> float:
    """Jaccard similarity of the inputs' leaves (path=value), metadata.name aside."""
    left = a if isinstance(a, frozenset) else _leaf_set(a)
    right = b if isinstance(b, frozenset) else _leaf_set(b)
    if not left and not right:
        return 0.0
    return len(left & right) / len(left | right)


#: Inputs at least this similar pair a deleted and a created resource of one type as a replacement.
SIMILARITY_THRESHOLD = 0.6


@dataclass(frozen=True)
class Pair:
    """A base and a head resource that are the same resource (``how``: urn, alias, object, similar)."""

    base: Resource
    head: Resource
    how: str


def match_resources(
    base: Mapping[str, Resource], head: Mapping[str, Resource]
) -> tuple[list[Pair], list[Resource], list[Resource]]:
    """(pairs, deleted, created): by URN, then aliases, then Kubernetes object identity, then type and inputs."""
    pairs = [Pair(base[u], head[u], "urn") for u in head if u in base]
    left = {u: r for u, r in base.items() if u not in head}
    right = {u: r for u, r in head.items() if u not in base}
    for urn, resource in list(right.items()):
        for alias in sorted(alias_urns(resource, head)):
            if alias in left:
                pairs.append(Pair(left.pop(alias), right.pop(urn), "alias"))
                break
    by_object = {r.object_id: u for u, r in left.items() if r.object_id is not None}
    for urn, resource in list(right.items()):
        old = by_object.get(resource.object_id) if resource.object_id is not None else None
        if old is not None and old in left:
            pairs.append(Pair(left.pop(old), right.pop(urn), "the same Kubernetes object"))
    leaves = {u: _leaf_set(r) for u, r in [*left.items(), *right.items()] if r.custom}
    candidates = sorted(
        (
            (similarity(leaves[bu], leaves[hu]), bu, hu)
            for bu, b in left.items()
            for hu, h in right.items()
            if b.type == h.type and b.custom and h.custom
        ),
        reverse=True,
    )
    for score, bu, hu in candidates:
        if score >= SIMILARITY_THRESHOLD and bu in left and hu in right:
            pairs.append(Pair(left.pop(bu), right.pop(hu), f"similar inputs ({score:.0%})"))
    for type_ in {r.type for r in left.values() if not r.custom}:
        olds = [u for u, r in left.items() if r.type == type_ and not r.custom]
        news = [u for u, r in right.items() if r.type == type_ and not r.custom]
        if len(olds) == 1 and len(news) == 1:
            pairs.append(Pair(left.pop(olds[0]), right.pop(news[0]), "the only component of its type"))
    return pairs, list(left.values()), list(right.values())


# ------------------------------------------------------------------------------------------------ the report


@dataclass
class Change:
    """What happens to one resource: create, delete, update or replace."""

    action: str
    label: str
    urn: str
    type: str
    name: str
    old_urn: str | None = None
    fields: list[FieldChange] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The first replacement reason, short (what a DATA LOSS line quotes); refusals of an adopted object mention it.
    cause: str | None = None
    immutable_field: bool = False  # replaced for a field the API server refuses to update
    #: What the update does to a workload's pods (tools/diff_effects.py), and the policy rules it changes.
    effect: WorkloadEffect | None = None
    policy: list[str] = field(default_factory=list)

    def replace_because(self, cause: str, reason: str) -> None:
        self.cause = self.cause or cause
        self.reasons.append(reason)


@dataclass(frozen=True)
class Finding:
    """A DATA LOSS line (``data_loss``) or a warning."""

    data_loss: bool
    text: str


@dataclass
class StackDiff:
    """Everything that changes in one stack."""

    name: str
    changes: list[Change] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    outputs: list[FieldChange] = field(default_factory=list)
    config: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes or self.findings or self.outputs or self.config or self.notes or self.errors)

    def count(self, action: str) -> int:
        return sum(1 for c in self.changes if c.action == action)


@dataclass
class Report:
    """The diff of every compared stack."""

    base_label: str = "base"
    head_label: str = "head"
    stacks: list[StackDiff] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def data_loss(self) -> list[Finding]:
        return [f for s in self.stacks for f in s.findings if f.data_loss]


@dataclass(frozen=True)
class _Context:
    """What the rules of one stack need beyond the two resources."""

    base: Mapping[str, Resource]
    head: Mapping[str, Resource]
    head_config: Mapping[str, Any]
    stateful_namespaces: Mapping[str, list[str]]


def _provider_flags(resource: Resource, ctx: _Context) -> ProviderFlags:
    """The pulumi-kubernetes options of the resource's provider (explicit, or the default's stack config).

    Assumption: PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE / ..._SECRET_MUTABLE are not set where `pulumi up` runs.
    """
    inputs: Mapping[str, Any] = {
        key.split(":", 1)[1]: value for key, value in ctx.head_config.items() if key.startswith("kubernetes:")
    }
    if resource.provider:
        provider = ctx.head.get(resource.provider.rsplit("::", 1)[0])
        if provider is not None and isinstance(provider.inputs, dict):
            inputs = provider.inputs
    return ProviderFlags(
        config_map_mutable=truthy(inputs.get("enableConfigMapMutable")),
        secret_mutable=truthy(inputs.get("enableSecretMutable")),
    )


def _ignored(change: FieldChange, patterns: Sequence[str]) -> bool:
    return any(covers(pattern(p), change.path) for p in patterns)


def _kubernetes_rules(
    old: Resource, new: Resource, fields: list[FieldChange], ctx: _Context
) -> tuple[list[tuple[str, str, bool]], list[FieldChange]]:
    """([(cause, reason, the API server refuses it as an update)] of a replacement, the fields with API refusals
    marked) for a Kubernetes object (the rules: tools/kubernetes_rules.py)."""
    reasons: list[tuple[str, str, bool]] = []
    marked: list[FieldChange] = []
    flags = _provider_flags(new, ctx)
    for change in fields:
        replaced_by = replacing_rule(change, old.inputs, new.inputs, flags)
        if replaced_by is not None:
            refuses = replaced_by.api_refuses or any(truthy(r.inputs.get("immutable")) for r in (old, new))
            why = (
                replaced_by.why
                if "pulumi-kubernetes" in replaced_by.why
                else f"{replaced_by.why}; pulumi-kubernetes replaces"
            )
            reasons.append((_short(change), f"{_short(change)}: {why}", refuses))
            marked.append(change)
            continue
        refused = refusal(change, old.inputs, new.inputs, flags)
        note = None
        if new.kind == "PersistentVolumeClaim" and change.path == ("spec", "resources", "requests", "storage"):
            before, after = quantity(change.old), quantity(change.new)
            if refused is None and before is not None and after is not None:
                note = "expansion: needs allowVolumeExpansion on the StorageClass"
        if new.kind == "Service" and change.path == ("spec", "type") and "ExternalName" in (change.old, change.new):
            note = "to or from ExternalName: the API releases or allocates the cluster IP"
        marked.append(FieldChange(change.path, change.old, change.new, refused=refused, note=note or change.note))
    return reasons, marked


def _provider_inputs(ref: str | None, resources: Mapping[str, Resource], config: Mapping[str, Any]) -> dict:
    """The inputs of the provider a resource names (None: the default provider, from the ``kubernetes:`` config)."""
    if ref:
        provider = resources.get(ref.rsplit("::", 1)[0])
        if provider is not None and isinstance(provider.inputs, dict):
            return dict(provider.inputs)
    return {key.split(":", 1)[1]: value for key, value in config.items() if key.startswith("kubernetes:")}


def _provider_move(old: Resource, new: Resource, ctx: _Context) -> str | None:
    """Why moving a Kubernetes object to another provider replaces it (the engine asks the new provider's
    DiffConfig, tools/kubernetes_rules.provider_replacement); None: it stays, and only its provider changes."""
    before = _provider_inputs(old.provider, ctx.base, ctx.head_config)
    after = _provider_inputs(new.provider, ctx.head, ctx.head_config)
    return provider_replacement(before, after)


def _options(old: Resource, new: Resource, *, provider_moves: bool = True) -> list[FieldChange]:
    pairs = (
        ("protect", old.protect, new.protect),
        ("retainOnDelete", old.retain, new.retain),
        ("provider", old.provider, new.provider) if provider_moves else ("provider", None, None),
        ("deleteBeforeReplace", old.delete_before_replace, new.delete_before_replace),
        ("ignoreChanges", list(old.ignore_changes), list(new.ignore_changes)),
        ("replaceOnChanges", list(old.replace_on_changes), list(new.replace_on_changes)),
    )
    return [FieldChange(("options", key), a, b) for key, a, b in pairs if a != b]


def compare(pair: Pair, ctx: _Context) -> Change | None:
    """The change from ``pair.base`` to ``pair.head`` (None when nothing changes)."""
    old, new = pair.base, pair.head
    all_fields = [
        f
        for f in diff_values(old.inputs, new.inputs)
        if not (f.path and isinstance(f.path[0], str) and f.path[0] in IGNORED_INPUTS)
    ]
    ignored = [f for f in all_fields if _ignored(f, new.ignore_changes)]
    fields = [f for f in all_fields if f not in ignored]
    change = Change(action="update", label=new.label, urn=new.urn, type=new.type, name=new.name)
    if pair.how == "alias":
        change.old_urn = old.urn
        change.notes.append(f"the same resource through an alias (no replacement): was {old.urn}")
    elif pair.how != "urn":
        change.old_urn = old.urn
        change.replace_because(
            "Pulumi resource identity changed",
            f"Pulumi resource identity changed, from {old.urn} to {new.urn} (paired by {pair.how})",
        )
    if ignored:
        change.notes.append("not applied (ignoreChanges): " + ", ".join(sorted({f.text for f in ignored})))
    if new.is_kubernetes and old.is_kubernetes:
        if old.object_text != new.object_text and old.object_id != new.object_id:
            moved = [f for f in fields if f.path in (("metadata", "name"), ("metadata", "namespace"))]
            change.replace_because(
                ", ".join(_short(f) for f in moved) or "object identity changed",
                f"the Kubernetes object changed identity, {old.kind} {old.object_text} -> {new.kind} "
                f"{new.object_text}: pulumi-kubernetes creates the new object, then deletes the old one",
            )
            fields = [f for f in fields if f not in moved]
        if old.inputs.get("apiVersion") != new.inputs.get("apiVersion"):
            change.notes.append("apiVersion changed: the same object at another version, updated in place (assumed)")
        reasons, fields = _kubernetes_rules(old, new, fields, ctx)
        for cause, reason, refuses in reasons:
            change.replace_because(cause, reason)
            change.immutable_field = change.immutable_field or refuses
        if change.reasons and _same_name_replacement(change, old, new):
            change.notes.append("same name: pulumi-kubernetes deletes the old object before it creates the new one")
    elif new.type.startswith("random:") and fields:
        change.replace_because(
            ", ".join(_short(f) for f in fields),
            "pulumi-random replaces on any input change: " + ", ".join(_short(f) for f in fields),
        )
    elif new.type in DYNAMIC_REPLACES:
        replacing = [f for f in fields if f.path and f.path[0] in DYNAMIC_REPLACES[new.type]]
        if replacing:
            text = ", ".join(_short(f) for f in replacing)
            change.replace_because(text, f"its provider replaces on {text}")
    on_changes = [f for f in fields if _ignored(f, new.replace_on_changes)]
    if on_changes:
        text = ", ".join(_short(f) for f in on_changes)
        change.replace_because(text, f"replaceOnChanges: {text}")
    provider_moves = True
    if new.is_kubernetes and old.provider != new.provider:
        why = _provider_move(old, new, ctx)
        if why:
            change.replace_because(
                "provider changed", f"its provider changed and {why}: the engine replaces it, creating first"
            )
        else:
            provider_moves = False  # the engine moves it to the new provider: no step of its own
    change.fields = fields + _options(old, new, provider_moves=provider_moves)
    if change.reasons:
        change.action = "replace"
    elif not change.fields and pair.how == "urn":
        return None  # nothing, or only what ignoreChanges keeps from being applied
    return change


# ------------------------------------------------------------------------------------------------ data loss


_ROUTER_STATE = re.compile(r"^subnet-router-\d+$")


def _holds(resource: Resource) -> str | None:
    """What a Kubernetes object holds that a deletion loses (Namespaces aside), or None."""
    kind, name = resource.kind, resource.object_name
    if kind == "PersistentVolumeClaim":
        return "the data on its volume"
    if kind == "PersistentVolume":
        return "the data it points to"
    if kind == "Secret" and name == "headscale-identity":
        return "the tailnet's Noise and DERP private keys"
    if kind == "Secret" and _ROUTER_STATE.match(name):
        return "a subnet router's node key"
    if kind == "Cluster" and api_group(resource.inputs.get("apiVersion")) == "postgresql.cnpg.io":
        return "the PostgreSQL database (CloudNativePG deletes its volumes with the Cluster)"
    if kind == "ConfigMap" and name.endswith("-served"):
        return "the witness that the site has served"
    return None


def stateful_namespaces(resources: Mapping[str, Resource]) -> dict[str, list[str]]:
    """Namespace → the stateful objects it holds: deleting the namespace deletes them."""
    found: dict[str, list[str]] = {}
    for resource in resources.values():
        if resource.is_kubernetes and resource.namespace and _holds(resource) and not resource.is_patch:
            found.setdefault(resource.namespace, []).append(f"{resource.kind} {resource.object_name}")
    return found


def _same_name_replacement(change: Change, old: Resource, new: Resource) -> bool:
    """pulumi-kubernetes deletes before it creates when the replacement keeps the name and namespace."""
    if new.delete_before_replace is not None:
        return new.delete_before_replace
    return change.old_urn is None and old.object_id == new.object_id


def alias_hint(old: Resource, new: Resource) -> str:
    """The alias that makes ``new`` the same Pulumi resource as ``old`` (what changed in its URN)."""
    parts = []
    if old.name != new.name:
        parts.append(f'name="{old.name}"')
    if old.type != new.type:
        parts.append(f'type_="{old.type}"')
    if old.parent != new.parent:
        old_parent = _urn_parts(old.parent or "")
        parts.append(f"parent=<the {old_parent[2].rsplit('$', 1)[-1]} {old_parent[3]}>" if old_parent else "no_parent")
    return f"aliases=[pulumi.Alias({', '.join(parts)})]"


_PROTECTED = "; it is protected: `pulumi up` refuses until `pulumi state unprotect` (which is what would lose it)"


def _object_loss(change: Change, old: Resource, new: Resource | None, holds: str) -> Finding | None:
    """The DATA LOSS line (or warning) of a replaced or deleted stateful Kubernetes object, retainOnDelete spelled
    out: what happens to the old object, and to a new one of the same name."""
    what = f"{old.label} {'replaced' if new else 'deleted'} ({change.cause or 'removed from the program'})"
    protect = _PROTECTED if old.protect else ""
    if old.is_patch:
        if new is not None and old.object_id == new.object_id:
            return None  # the patch is applied again to the same object: nothing is deleted
        if old.retain:
            return None
        return Finding(True, f"DATA LOSS: {what}: a patch; its fields are removed from the object ({holds}){protect}")
    if new is None:
        if old.retain:
            return Finding(
                True,
                f"DATA LOSS (retained, recoverable by hand): {what}: it holds {holds}; Pulumi forgets it and the "
                "object stays in the cluster (retainOnDelete), unmanaged and used by nothing the stack deploys; a "
                "later object of the same name collides with it (pulumi-kubernetes refuses to create an existing "
                f"object) or, with PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true, adopts it as it is{protect}",
            )
        return Finding(True, f"DATA LOSS: {what}: it is deleted, and {holds} with it{protect}")
    if change.old_urn is not None and old.object_id == new.object_id and new.is_patch:
        if old.retain:
            return None  # the patch is applied to the object (never AlreadyExists); the old delete leaves it
        return Finding(
            True,
            f"DATA LOSS: {what}: the new patch applies to the object, then the old resource's delete deletes it, "
            f"and {holds} with it{protect}",
        )
    if change.old_urn is not None and old.object_id == new.object_id:
        alias = f"; to keep it, give the new resource {alias_hint(old, new)}"
        adopted = (
            "the old resource's delete leaves it (retainOnDelete): nothing is lost"
            if old.retain
            else f"the old resource's delete then deletes it, and {holds} with it"
        )
        return Finding(
            not old.retain,
            f"{'' if old.retain else 'DATA LOSS: '}{what}: the new resource is created while the old one still holds "
            "the object, so the create fails (the object exists); with PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true the "
            f"new resource adopts it and {adopted}{alias}{protect}",
        )
    if _same_name_replacement(change, old, new):
        if old.retain:
            adopt = (
                "and the API server then refuses the changed immutable field"
                if change.immutable_field
                else "and overwrites it: the old content is lost"
            )
            return Finding(
                True,
                f"DATA LOSS: {what}: it holds {holds}; pulumi-kubernetes deletes before it creates (same name), "
                "retainOnDelete skips the delete, so the old object stays in the cluster with its data and creating "
                f"the new one fails because it exists (PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true adopts it instead, "
                f"{adopt}); applying this change means deleting the old object by hand, and {holds} with it{protect}",
            )
        return Finding(
            True,
            f"DATA LOSS: {what}: pulumi-kubernetes deletes it before it creates the new one (same name): {holds} is "
            f"gone, the new one starts empty{protect}",
        )
    old_fate = (
        f"the old one is retained in the cluster (retainOnDelete) with {holds}, but nothing uses it any more"
        if old.retain
        else f"the old one is deleted, and {holds} with it"
    )
    new_text = f"{new.kind} {new.object_text}"
    return Finding(True, f"DATA LOSS: {what}: the new {new_text} starts empty; {old_fate}{protect}")


def findings_for(change: Change, old: Resource | None, new: Resource | None, ctx: _Context) -> list[Finding]:
    """DATA LOSS lines and warnings of one change: state that a replacement or deletion loses, keys that change,
    updates the API server refuses."""
    found: list[Finding] = []
    for f in change.fields if change.action == "update" else []:
        if f.refused:
            found.append(
                Finding(
                    False,
                    f"{change.label}: {_short(f)}, but the API server refuses it ({f.refused}): `pulumi preview` "
                    "shows an update and `pulumi up` fails; applying it takes a replacement "
                    "(`pulumi up --replace <urn>`), with what replacing this object costs",
                )
            )
    if old is None or change.action not in ("replace", "delete"):
        return found
    replaced = change.action == "replace"
    what = f"{old.label} {'replaced' if replaced else 'deleted'} ({change.cause or 'removed from the program'})"
    protect = _PROTECTED if old.protect else ""
    if old.is_kubernetes:
        holds = _holds(old)
        if old.kind == "Namespace" and ctx.stateful_namespaces.get(old.object_name):
            holds = "everything inside it: " + ", ".join(sorted(ctx.stateful_namespaces[old.object_name]))
        finding = _object_loss(change, old, new if replaced else None, holds) if holds else None
        if finding is not None:
            found.append(finding)
        elif old.protect:
            found.append(Finding(False, f"{what}{protect}"))
        return found
    if old.type == "random:index/randomBytes:RandomBytes":
        fate = "a new random key replaces it" if replaced else "it is gone"
        found.append(
            Finding(
                True,
                f"DATA LOSS: {what}: key material that exists only in the Pulumi state; {fate} (the tailnet's "
                f"identity keys: a different server to every client, every node must re-register){protect}",
            )
        )
    elif old.type == "random:index/randomPassword:RandomPassword":
        found.append(
            Finding(
                False,
                f"key {'replaced' if replaced else 'deleted'}: {what}: a new random value replaces the one in the "
                f"Pulumi state; whatever holds the old one must get the new one{protect}",
            )
        )
    elif old.type in ("pulumi-python:dynamic/headscale:PreAuthKey", "pulumi-python:dynamic/headscale:ApiKey"):
        text = (
            "clients of the old key must get the new one"
            if replaced
            else "it is expired and deleted on the server: whoever holds it loses access"
        )
        found.append(Finding(False, f"key {'replaced' if replaced else 'deleted'}: {what}: {text}{protect}"))
    elif old.type == "pulumi-python:dynamic/headscale:User":
        if truthy(old.inputs.get("forceDelete")):
            found.append(Finding(True, f"DATA LOSS: {what}: forceDelete: the user's nodes are deleted with it"))
        else:
            found.append(
                Finding(False, f"{what}: refused while the user has nodes (forceDelete is false): `pulumi up` fails")
            )
    elif old.type == "pulumi-python:dynamic/headscale:NodeSettings" and truthy(old.inputs.get("deleteOnDestroy")):
        found.append(Finding(True, f"DATA LOSS: {what}: deleteOnDestroy: the node is deleted from Headscale"))
    elif old.protect:
        found.append(Finding(False, f"{what}{protect}"))
    return found


# ------------------------------------------------------------------------------------------------ comparison


def _resources(entry: Mapping[str, Any] | None) -> dict[str, Resource]:
    return {r["urn"]: Resource.from_dump(r) for r in (entry or {}).get("resources") or []}


def _stack_name(entry: Mapping[str, Any]) -> str:
    return entry["stack"] if entry.get("role", "site") == "site" else f"{entry['stack']} (identity)"


def _config_changes(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    lines = []
    old, new = base.get("secureConfig") or {}, head.get("secureConfig") or {}
    for key in sorted(set(old) | set(new)):
        if key not in old:
            lines.append(f"{key}: secure value added")
        elif key not in new:
            lines.append(f"{key}: secure value removed")
        elif old[key] != new[key]:
            lines.append(f"{key}: secure value changed (its ciphertext; re-encrypting the same value shows here too)")
    old, new = base.get("kubernetesConfig") or {}, head.get("kubernetesConfig") or {}
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            lines.append(f"{key}: {_show(old.get(key, ABSENT))} -> {_show(new.get(key, ABSENT))}")
    return lines


def _describe_effects(change: Change, pair: Pair, recovery: Any) -> None:
    """The workload effect and the policy rules of an update (a replacement says enough on its own)."""
    if change.action != "update" or not (pair.base.is_kubernetes and pair.head.is_kubernetes):
        return
    change.effect = workload_effect(pair.base.inputs, pair.head.inputs, [f.path for f in change.fields], recovery)
    for item in change.fields:
        old, new = policy_document(item.old), policy_document(item.new)
        if old is not None and new is not None:
            change.policy += policy_changes(old, new)


def diff_stack(name: str, base: Mapping[str, Any] | None, head: Mapping[str, Any] | None) -> StackDiff:
    """Compare one stack's dumps (either may be None: a stack file added or removed)."""
    result = StackDiff(name=name)
    if head is not None and head.get("error"):
        result.errors.append(f"does not plan in the working tree: {head['error']}")
        return result
    if base is not None and base.get("error"):
        result.notes.append(f"the base does not plan ({base['error']}): not compared; the head plans")
        return result
    if base is None:
        result.notes.append("new stack: its stack file is new in the working tree")
    if head is None:
        count = len((base or {}).get("resources") or [])
        result.notes.append(
            f"stack file removed: this repository no longer manages the deployed stack; removing the file destroys "
            f"nothing (`pulumi destroy` of the stack would delete its {count} resources)"
        )
        return result
    old_resources, new_resources = _resources(base), _resources(head)
    ctx = _Context(
        base=old_resources,
        head=new_resources,
        head_config=head.get("kubernetesConfig") or {},
        stateful_namespaces=stateful_namespaces(old_resources),
    )
    pairs, deleted, created = match_resources(old_resources, new_resources)
    recovery = (head.get("outputs") or {}).get("recovery")
    for pair in pairs:
        change = compare(pair, ctx)
        if change is not None:
            _describe_effects(change, pair, recovery)
            result.changes.append(change)
            result.findings += findings_for(change, pair.base, pair.head, ctx)
    for resource in deleted:
        change = Change("delete", resource.label, resource.urn, resource.type, resource.name)
        if resource.retain:
            change.notes.append("retainOnDelete: Pulumi forgets it, the object (or the patched fields) stays")
        if resource.protect:
            change.notes.append("protected: `pulumi up` refuses to delete it until `pulumi state unprotect`")
        result.changes.append(change)
        result.findings += findings_for(change, resource, None, ctx)
    for resource in created:
        result.changes.append(Change("create", resource.label, resource.urn, resource.type, resource.name))
    if base is not None:
        result.outputs = diff_values(
            base.get("outputs") or {}, head.get("outputs") or {}, keys=OUTPUT_RECORD_KEYS, align=True
        )
        result.config = _config_changes(base, head)
    return result


def diff_dumps(base: Mapping[str, Any], head: Mapping[str, Any], stacks: Sequence[str] | None = None) -> Report:
    """Compare two dumps stack by stack (every stack asked for in either, or those named in ``stacks``)."""
    report = Report(
        base_label=str(base.get("label", "base")),
        head_label=str(head.get("label", "head")),
        notes=sorted({*base.get("notes", []), *head.get("notes", [])}),
    )
    old, new = base.get("stacks") or {}, head.get("stacks") or {}
    keys = [k for k in {**old, **new} if (new.get(k) or old.get(k) or {}).get("requested", True)]
    if stacks:
        names = {(new.get(k) or old.get(k))["stack"]: k for k in {**old, **new}}
        missing = [s for s in stacks if s not in names]
        if missing:
            report.errors.append(f"no stack named {', '.join(missing)} in the base or the head")
        keys = [k for k in keys if (new.get(k) or old.get(k))["stack"] in stacks]
    order = {"identity": 0, "site": 1}
    for key in sorted(keys, key=lambda k: (order.get((new.get(k) or old.get(k)).get("role", "site"), 2), k)):
        entry = new.get(key) or old.get(key)
        stack = diff_stack(_stack_name(entry), old.get(key), new.get(key))
        if stack.changed:
            report.stacks.append(stack)
    return report


def exit_code(report: Report) -> int:
    """0 no change, 1 changes, 3 DATA LOSS, 2 the diff is incomplete (errors), whatever else it found."""
    if report.errors or any(s.errors for s in report.stacks):
        return EXIT_ERROR
    if report.data_loss:
        return EXIT_DATA_LOSS
    return EXIT_CHANGES if any(s.changed for s in report.stacks) else EXIT_NO_CHANGE


# ------------------------------------------------------------------------------------------------ rendering

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
    return _show(old, limit), _show(new, limit)


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
    """Per changed stack a header and its sections; a summary line only when something changed. Empty otherwise."""
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
    return "\n\n".join(blocks)


# ------------------------------------------------------------------------------------------------ the command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make diff", description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="git ref to compare the working tree with (default: HEAD)")
    parser.add_argument("--stack", action="append", help="stack to compare (repeatable); default: every stack")
    parser.add_argument(
        "--project-dir", type=Path, default=Path.cwd(), help="the project (Pulumi.yaml) in a git checkout (default: .)"
    )
    args = parser.parse_args(argv)
    project_dir = args.project_dir.resolve()
    if not (project_dir / "Pulumi.yaml").is_file():
        print(f"error: no Pulumi.yaml in {project_dir}", file=sys.stderr)
        return EXIT_ERROR
    try:
        with base_worktree(project_dir, args.base) as (base_project, commit):
            base_label = f"{args.base} ({commit[:12]})"
            pending = [
                start_dump(base_project, args.stack, base_label),
                start_dump(project_dir, args.stack, "the working tree"),
            ]
            base, head = collect(pending)
    except DiffError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    base["label"], head["label"] = base_label, "working tree"
    report = diff_dumps(base, head, args.stack)
    text = render(report)
    if text:
        print(text)
    return exit_code(report)


if __name__ == "__main__":
    sys.exit(main())
