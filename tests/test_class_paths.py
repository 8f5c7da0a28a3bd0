"""The dynamic providers' class paths (headscale_ha/class_paths.py): what a stack's state names, resolvable where
the engine's provider host runs.

The host unpickles ``__provider`` in its own process (``python -m pulumi.dynamic``, the project directory first on
the module path); each case below runs that unpickling in a fresh interpreter, in the checkout or outside it, with
the genuine pickles release 0.1.0 wrote (tests/support/legacy_providers.json).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from pulumi.dynamic import ResourceProvider

from headscale_ha.class_paths import CURRENT, LEGACY
from tools.harness import PROJECT_DIR
from tools.pulumi_internals import serialize_provider

LEGACY_PICKLES = json.loads((PROJECT_DIR / "tests" / "support" / "legacy_providers.json").read_text())["providers"]

#: Unpickles each base64 ``__provider`` read from stdin (a JSON list) as the host does, printing its class path.
RESOLVE = """
import base64, json, sys
import dill
for blob in json.load(sys.stdin):
    try:
        kind = type(dill.loads(base64.b64decode(blob)))
        print(f"{kind.__module__}.{kind.__qualname__}")
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}")
"""


def _resolve(blobs: list[str], cwd: Path) -> list[str]:
    """What a provider host started in ``cwd`` makes of each pickle: the class path it loads, or the error."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", RESOLVE],
        input=json.dumps(blobs),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.splitlines()


def _provider_classes() -> set[str]:
    """Every public ResourceProvider subclass defined in the package, by module and qualified name."""
    found = set()
    names = set()
    for package in ("headscale_ha", "headscale_provider"):  # the distribution's two top-level packages
        names.add(package)
        prefix = f"{package}."
        names |= {info.name for info in pkgutil.walk_packages(importlib.import_module(package).__path__, prefix)}
    for module_name in sorted(names):
        if module_name.endswith("__main__"):
            continue
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, ResourceProvider)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found.add(f"{value.__module__}.{value.__qualname__}")
    return found


def _class(path: str) -> type:
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def test_every_provider_class_is_listed_where_it_is() -> None:
    """Moving, renaming or adding a provider class fails here until class_paths.py says so (and, for a move,
    keeps the old path in LEGACY with an alias)."""
    assert _provider_classes() == set(CURRENT)


def test_every_old_path_is_an_old_path_and_leads_to_a_current_class() -> None:
    assert not set(LEGACY) & set(CURRENT)
    assert {target for target, _ in LEGACY.values()} <= set(CURRENT)
    assert {where for _, where in LEGACY.values()} <= {"package", "checkout"}
    assert set(LEGACY_PICKLES) == set(LEGACY), "each old path has the pickle its release wrote"


def test_the_current_paths_load_outside_the_checkout(tmp_path: Path) -> None:
    """What this release pickles loads wherever the package is installed: a consumer's project directory."""
    blobs = [serialize_provider(_class(path)()) for path in CURRENT]
    assert _resolve(blobs, tmp_path) == list(CURRENT)


def test_the_old_paths_the_package_aliases_load_the_current_class_anywhere(tmp_path: Path) -> None:
    aliased = sorted(path for path, (_, where) in LEGACY.items() if where == "package")
    assert aliased
    resolved = _resolve([LEGACY_PICKLES[path] for path in aliased], tmp_path)
    assert resolved == [LEGACY[path][0] for path in aliased], "an alias yields the current class, not a copy"


def test_the_old_paths_of_the_checkout_load_there_and_only_there(tmp_path: Path) -> None:
    """``components.version_gate``: the checkout's top-level ``components/`` is that module, loaded under its old
    name (a second copy of the current code); outside a checkout nothing provides it, as class_paths.py says."""
    local = sorted(path for path, (_, where) in LEGACY.items() if where == "checkout")
    assert local
    blobs = [LEGACY_PICKLES[path] for path in local]
    assert _resolve(blobs, PROJECT_DIR) == local
    for path, line in zip(local, _resolve(blobs, tmp_path), strict=True):
        assert line.startswith("ModuleNotFoundError"), (path, line)


@pytest.mark.parametrize("path", sorted(LEGACY))
def test_an_old_path_names_the_class_its_successor_is(path: str) -> None:
    assert path.rsplit(".", 1)[1] == LEGACY[path][0].rsplit(".", 1)[1]
