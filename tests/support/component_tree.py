"""What a component registered beneath it, comparable across runs that nest it differently.

Why: a package component builds the Python component of the same name as its child, so its registrations must
be the Python component's, one level down. ``subtree`` keys each resource by its type chain below the root (the
root's own type left out), its name and its inputs, so the same tree under two roots compares equal.
"""

from __future__ import annotations

import json
from typing import Any

from tests.models.engine.component_host import children_signature
from tools.harness import RegisteredResource


def subtree(resources: list[RegisteredResource], root_type: str, root_name: str) -> list[tuple[str, str, str]]:
    """(types from below the root down to the resource, `/`-joined; name; inputs as JSON) of every resource under
    the component, sorted: the order of registrations that wait on outputs is not part of the contract."""
    roots = [r for r in resources if r.type == root_type and r.name == root_name]
    if len(roots) != 1:
        raise KeyError(f"{len(roots)} resources of type {root_type} named {root_name!r}")
    return sorted(
        ("/".join(child.types), child.name, json.dumps(child.inputs, sort_keys=True, default=repr))
        for child in children_signature(resources, roots[0].urn)
    )


def one_level_down(
    resources: list[RegisteredResource], package_type: str, python_type: str, name: str
) -> list[tuple[str, str, str]]:
    """A package component's tree with its one child, the Python component of the same name, taken off the chains:
    comparable with the Python component's own subtree."""
    ours = subtree(resources, package_type, name)
    assert ours[0][:2] == (python_type, name)
    return [(chain.split("/", 1)[1], child, inputs) for chain, child, inputs in ours[1:]]


def inputs_of(resources: list[RegisteredResource], type_: str, name: str) -> dict[str, Any]:
    """The inputs of the one resource of ``type_`` named ``name``."""
    found = [r for r in resources if r.type == type_ and r.name == name]
    if len(found) != 1:
        raise KeyError(f"{len(found)} resources of type {type_} named {name!r}")
    return found[0].inputs
