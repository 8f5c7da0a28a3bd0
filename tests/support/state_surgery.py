"""A stack's state as an older release wrote it, for the real CLI: `pulumi stack export`, an edit, `pulumi stack
import`. The edits are the shapes 0.1.0 left behind (tests/program/test_lifecycle.py makes the same ones in the
engine model's state), so the real engine can be asked what the next `up` does with them.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import dill

from tests.support.real_pulumi import PulumiCli
from tools.harness import PROJECT_DIR, engine_urn

#: The providers as 0.1.0 pickled them, by their old class paths (`headscale_provider.resources.*`,
#: `components.version_gate.*`), which headscale_ha/class_paths.py keeps loadable.
LEGACY_PROVIDERS = PROJECT_DIR / "tests" / "support" / "legacy_providers.json"

State = dict[str, Any]


def legacy_providers() -> dict[str, str]:
    """Old class path -> the `__provider` value 0.1.0 wrote."""
    return json.loads(LEGACY_PROVIDERS.read_text())["providers"]


def provider_class(value: str) -> str:
    """The class name a `__provider` value unpickles to."""
    return type(dill.loads(base64.b64decode(value))).__name__


def child_urn(parent: str, type_: str, urn: str) -> str:
    """The URN the real engine gives a resource of ``urn``'s name as a child of ``parent`` (the whole type chain)."""
    stack, project = urn.split("::")[0].removeprefix("urn:pulumi:"), urn.split("::")[1]
    return engine_urn(stack, project, parent, type_, urn.rsplit("::", 1)[1])


def exported(cli: PulumiCli, stack: str) -> State:
    return json.loads(cli.run("stack", "export", "-s", stack).check().stdout)


def imported(cli: PulumiCli, stack: str, state: State) -> None:
    """`pulumi stack import`: the CLI checks the state's integrity (parents and dependencies first) before it
    writes it."""
    path = cli.root / f"{stack}-surgery.json"
    path.write_text(json.dumps(state))
    cli.run("stack", "import", "-s", stack, "--file", str(path)).check()


def resources(state: State) -> list[dict[str, Any]]:
    return state["deployment"]["resources"]


def by_name(state: State, name: str) -> dict[str, Any]:
    (found,) = [r for r in resources(state) if r["urn"].rsplit("::", 1)[1] == name]
    return found


def _renamed(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every string equal to a key of ``names`` (a URN, anywhere: parents, dependencies, property
    dependencies) replaced by its value; a string that merely contains one is left alone."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, list):
        return [_renamed(item, names) for item in value]
    if isinstance(value, dict):
        return {_renamed(key, names): _renamed(item, names) for key, item in value.items()}
    return value


def rename(state: State, names: dict[str, str]) -> None:
    """Give resources the URNs of ``names`` (current -> old), and every reference to them too."""
    state["deployment"]["resources"] = _renamed(resources(state), names)


def names_of_type(state: State, type_: str) -> list[str]:
    return [r["urn"].rsplit("::", 1)[1] for r in resources(state) if r["type"] == type_]


def move_under(state: State, name: str, parent_name: str) -> tuple[str, str]:
    """Make the resource ``name`` a child of ``parent_name``, as an older tree had it, moved after its new parent if
    it came first (the import checks the order; its provider and dependencies already precede it). Returns (old
    URN, current URN)."""
    resource, parent = by_name(state, name), by_name(state, parent_name)
    current = resource["urn"]
    old = child_urn(parent["urn"], resource["type"], current)
    listed = resources(state)
    if listed.index(parent) > listed.index(resource):
        listed.remove(resource)
        listed.insert(listed.index(parent) + 1, resource)
    resource["parent"] = parent["urn"]
    rename(state, {current: old})
    return old, current


def as_0_1_0_providers(state: State) -> dict[str, str]:
    """Every dynamic resource's `__provider`, in its inputs and outputs, as 0.1.0 pickled it. Returns resource
    name -> the old class path."""
    by_class = {path.rsplit(".", 1)[1]: (path, value) for path, value in legacy_providers().items()}
    rewritten = {}
    for resource in resources(state):
        if not resource["type"].startswith("pulumi-python:dynamic"):
            continue
        path, value = by_class[provider_class(resource["inputs"]["__provider"])]
        resource["inputs"]["__provider"] = resource["outputs"]["__provider"] = value
        rewritten[resource["urn"].rsplit("::", 1)[1]] = path
    return rewritten


def as_0_1_0_routers(state: State) -> tuple[str, int]:
    """0.1.0's router layout: one StatefulSet `subnet-router` of N replicas, Pulumi name `<gateway>-statefulset`,
    in place of the N per-ordinal ones (accounts, Roles and Services stay). Returns (the old URN, N); what the
    cluster holds is the caller's to change to match."""
    ordinals = [
        r for r in resources(state) if r["type"] == "kubernetes:apps/v1:StatefulSet" and "-statefulset-" in r["urn"]
    ]
    zero = next(r for r in ordinals if r["urn"].endswith("-statefulset-0"))
    old = json.loads(json.dumps(zero))
    old["urn"] = zero["urn"].removesuffix("-0")
    namespace = zero["outputs"]["metadata"]["namespace"]
    old["id"] = f"{namespace}/subnet-router"
    for section in (old["inputs"], old["outputs"]):
        section["metadata"] = {**section["metadata"], "name": "subnet-router"}
        section["spec"] = {**section["spec"], "replicas": len(ordinals), "serviceName": "subnet-router"}
    listed = resources(state)
    listed.insert(listed.index(zero), old)
    for resource in ordinals:
        listed.remove(resource)
    rename(state, {r["urn"]: old["urn"] for r in ordinals})
    return old["urn"], len(ordinals)
