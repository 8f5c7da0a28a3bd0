"""The dumper: plan the tree in the working directory and write its dump, a JSON file, for ``make diff``.

``tools.diff.planning`` runs this file as a script, by its path in the running checkout (``python -P <this file>
<request>``), with the planned tree as the working directory and that tree's import roots first on ``PYTHONPATH``
(tools/source_tree.py). The planned tree may be an old commit without tools/diff/, so the top of this file imports
only the standard library; once running it imports PyYAML, protobuf and the planned tree's own ``tools`` and
package, so a base is planned by the base's code. It imports nothing of tools/diff/: those would be the planned
tree's modules, or none. ``-P`` keeps this file's directory (and the working directory) off ``sys.path``: the
modules beside it cannot shadow the standard library's or the planned tree's.

The request (``sys.argv[1]``, JSON): ``out`` (the dump's path), ``stacks`` (None: every stack), ``version`` (written
into the dump; the reader refuses another). A tree that lacks the planning API gets a dump with ``fatal`` and exit
status 0; any other failure is a non-zero exit with its traceback on stderr. Secret values (harness-marked inputs
and outputs, every Secret's data) leave this process only as SHA-256 prefixes.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import logging
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


class UnfitTreeError(Exception):
    """The planned tree's tools lack what the dump needs (the message goes into the dump as ``fatal``)."""


def digest(value: Any) -> str:
    """The first 16 hex digits of the SHA-256 of ``value``'s JSON: all of a secret that leaves this process."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ the planned tree


@dataclass(frozen=True)
class Tools:
    """The planned tree's planning modules, and the libraries they are checked with."""

    harness: ModuleType
    plan: ModuleType
    stack_files: ModuleType
    yaml: ModuleType
    json_format: ModuleType


def load_tools(root: Path) -> Tools:
    """Import the planned tree's planning API; UnfitTreeError when a name is missing or was imported from elsewhere."""
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
        raise UnfitTreeError(
            f"its tools lack what the diff needs ({exc}); a base must have tools.plan.plan_all and tools.harness"
        ) from None
    for module in (plan, sys.modules.get("headscale_ha.components")):
        if module is None:
            continue
        if module.__file__ is None:  # a namespace package (a directory without __init__.py)
            raise UnfitTreeError(f"{module.__name__} has no file: it cannot be told to come from {root}")
        if not Path(module.__file__).resolve().is_relative_to(root):
            raise UnfitTreeError(f"{module.__name__} was imported from {module.__file__}, not from {root}")
    missing = {"project_dir", "identity_dir", "stacks"} - accepted
    if missing:
        raise UnfitTreeError(f"its tools.plan.plan_all lacks the parameters {', '.join(sorted(missing))}")
    return Tools(harness=harness, plan=plan, stack_files=stack_files, yaml=yaml, json_format=json_format)


# ------------------------------------------------------------------------------------------------ secrets, options


def hash_secret_inputs(harness: ModuleType, notes: list[str]) -> type:
    """Make the harness mark a secret input with the digest of its value (so a changed secret shows as changed);
    returns the marker class."""

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
        # Written into the module's namespace: a ModuleType reads as any attribute to a type checker, but takes none.
        vars(harness)["_secret_leaves"] = hashed_leaves
    else:
        notes.append("secret inputs are compared as markers only: this tree's harness has no _secret_leaves")
    return Hashed


def _registered_options(request: Any, json_format: ModuleType) -> dict[str, Any]:
    """The resource options of a RegisterResource request that the harness's records lack."""
    aliases = [json_format.MessageToDict(a) for a in getattr(request, "aliases", [])]
    aliases += [{"urn": u} for u in getattr(request, "aliasURNs", [])]
    defined = getattr(request, "deleteBeforeReplaceDefined", False)
    return {
        "aliases": aliases,
        "ignoreChanges": list(getattr(request, "ignoreChanges", [])),
        "replaceOnChanges": list(getattr(request, "replaceOnChanges", [])),
        "deleteBeforeReplace": bool(request.deleteBeforeReplace) if defined else None,
    }


def capture_options(tools: Tools, notes: list[str]) -> dict[str, dict[str, Any]]:
    """URN -> the aliases and replacement options each resource registers, filled while the tree is planned."""
    extras: dict[str, dict[str, Any]] = {}
    monitor_class = getattr(tools.harness, "_RecordingMonitor", None)
    if monitor_class is None:
        notes.append("aliases and ignoreChanges are not captured: this tree's harness has no _RecordingMonitor")
        return extras
    original_register = monitor_class.RegisterResource

    def register(self: Any, request: Any) -> Any:
        response = original_register(self, request)
        extras[response.urn] = _registered_options(request, tools.json_format)
        return response

    monitor_class.RegisterResource = register
    return extras


# ------------------------------------------------------------------------------------------------ a stack's config


def _secure_texts(value: Any, into: list[str]) -> None:
    """Append the ciphertext of every ``secure:`` value inside ``value``, in document order."""
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            into.append(str(value["secure"]))
            return
        for item in value.values():
            _secure_texts(item, into)
    elif isinstance(value, list):
        for item in value:
            _secure_texts(item, into)


def _merged_config(yaml: ModuleType, project_dir: Path, stack: str) -> dict[str, Any] | None:
    """The stack's config as its stack files merge it (Pulumi.yaml's ``config:`` values, replaced key by key by the
    stack file's); None when a file cannot be read (the plan reports it)."""
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
        return None
    return merged


def secure_values(yaml: ModuleType, project_dir: Path, stack: str) -> dict[str, list[str]]:
    """The ciphertexts of each secure config key, in the order the stack-file reader replaces them."""
    merged = _merged_config(yaml, project_dir, stack)
    if merged is None:
        return {}
    found = {}
    for key, value in merged.items():
        texts: list[str] = []
        _secure_texts(value, texts)
        if texts:
            found[key] = texts
    return found


def _digest_placeholders(
    placeholders: Mapping[str, Any], secure: Mapping[str, list[str]]
) -> dict[str, Callable[[], str]]:
    """A placeholder for each secure key the plan has none for, carrying its ciphertexts' digests in turn."""
    added = {}
    for key, texts in secure.items():
        if key not in placeholders:
            labels = itertools.cycle([f"[offline placeholder for secret {key}, ciphertext {digest(t)}]" for t in texts])
            added[key] = lambda labels=labels: next(labels)
    return added


def _kubernetes_config(tools: Tools, project_dir: Path, stack: str) -> dict[str, Any]:
    """The stack's plain ``kubernetes:`` config (the default provider's options); empty when it cannot be read."""
    try:
        settings = tools.stack_files.read_stack_settings(project_dir, stack, placeholders=tools.plan.PLACEHOLDERS)
    except tools.stack_files.StackFileError:
        return {}
    return {k: v for k, v in settings.config.items() if k.startswith("kubernetes:") and k not in settings.secret_keys}


def record_stack_config(tools: Tools) -> dict[tuple[str, str], dict[str, Any]]:
    """Wrap the tree's ``plan.plan_stack``; returns (project directory, stack) -> the stack's secure and
    ``kubernetes:`` config, filled as each stack is planned."""
    plan = tools.plan
    original_plan_stack = plan.plan_stack
    per_stack: dict[tuple[str, str], dict[str, Any]] = {}

    def plan_stack(stack: str, **kwargs: Any) -> Any:
        """plan.plan_stack, with each secure value's placeholder carrying its ciphertext's digest (so a changed
        secret reaches the objects it feeds as a changed digest) and the stack's secure and kubernetes: config."""
        project_dir = Path(kwargs.get("project_dir") or tools.harness.PROJECT_DIR).resolve()
        secure = secure_values(tools.yaml, project_dir, stack)
        added = _digest_placeholders(plan.PLACEHOLDERS, secure)
        plan.PLACEHOLDERS.update(added)
        kubernetes = _kubernetes_config(tools, project_dir, stack)
        per_stack[(str(project_dir), stack)] = {
            "secureConfig": {key: digest(texts) for key, texts in secure.items()},
            "kubernetesConfig": kubernetes,
        }
        try:
            return original_plan_stack(stack, **kwargs)
        finally:
            for key in added:
                plan.PLACEHOLDERS.pop(key, None)

    vars(plan)["plan_stack"] = plan_stack  # as the harness's _secret_leaves (hash_secret_inputs)
    return per_stack


# ------------------------------------------------------------------------------------------------ the dump


@dataclass(frozen=True)
class Encoder:
    """Planned values as JSON: secret markers and secret outputs as digests, unknowns as a marker."""

    harness: ModuleType
    hashed: type

    def encode(self, value: Any) -> Any:
        if isinstance(value, self.hashed):
            return {"secret": value.digest}
        if isinstance(value, self.harness.Secret):
            return {"secret": None}
        secret_output = getattr(self.harness, "SecretOutput", None)
        if secret_output is not None and isinstance(value, secret_output):
            return {"secret": digest(self.encode(value.value))}
        if isinstance(value, self.harness.Unknown):
            return {"unknown": True}
        if isinstance(value, Mapping):
            return {str(k): self.encode(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.encode(v) for v in value]
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


def resource_entry(resource: Any, encoder: Encoder, extras: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """One planned resource as the dump holds it."""
    inputs = encoder.encode(resource.inputs)
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


def stack_entry(planned: Any, role: str, encoder: Encoder, extras: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """One planned stack: its resources and outputs, or the error that stopped its plan."""
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
        entry["resources"] = [resource_entry(r, encoder, extras) for r in run.resources]
        entry["outputs"] = encoder.encode(run.exports if hasattr(run, "exports") else run.outputs)
    return entry


def dump_tree(tools: Tools, root: Path, request: Mapping[str, Any]) -> dict[str, Any]:
    """Plan every stack of the tree at ``root`` (its identity project first) and return the dump."""
    notes: list[str] = []
    encoder = Encoder(tools.harness, hash_secret_inputs(tools.harness, notes))
    extras = capture_options(tools, notes)
    per_stack = record_stack_config(tools)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
    identity_dir = root / "identity"
    has_identity = (identity_dir / "Pulumi.yaml").is_file()
    site_stacks = tools.stack_files.list_stacks(root)
    wanted = request["stacks"]
    dump: dict[str, Any] = {"version": request["version"], "root": str(root), "notes": notes, "stacks": {}}
    for planned in tools.plan.plan_all(
        project_dir=root,
        identity_dir=identity_dir if has_identity else None,
        stacks=None if wanted is None else [s for s in wanted if s in site_stacks],
    ):
        role = "site" if planned.project == tools.plan.PROJECT else "identity"
        entry = stack_entry(planned, role, encoder, extras)
        project_dir = (identity_dir if role == "identity" else root).resolve()
        entry.update(per_stack.get((str(project_dir), planned.stack), {}))
        dump["stacks"][f"{role}/{planned.stack}"] = entry
    return dump


def main(argv: list[str]) -> int:
    """Plan the tree in the working directory and write its dump where ``argv[1]`` (the request) says."""
    request = json.loads(argv[1])
    root = Path.cwd().resolve()
    out = Path(request["out"])
    try:
        tools = load_tools(root)
    except UnfitTreeError as exc:
        out.write_text(json.dumps({"version": request["version"], "fatal": str(exc)}))
        return 0
    out.write_text(json.dumps(dump_tree(tools, root, request), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
