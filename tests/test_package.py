"""The distribution: what `pip install <repo>` installs, and that it imports on its own, outside the checkout.

The wheel is built from the checkout by the pinned build backend and installed into a fresh virtual environment
whose only other packages are the program's pinned dependencies (tests/support/wheel.py).
"""

from __future__ import annotations

import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from headscale_ha.class_paths import CURRENT, LEGACY
from headscale_ha.components.release import VERSION
from tests.support.wheel import build_wheel, installed_venv
from tools.harness import PROJECT_DIR

#: Imports every module of the installed package and reads its data files; prints where they came from.
SMOKE = """
import importlib, importlib.resources, pkgutil, sys
import headscale_ha
library = ("components", "guardrails", "package", "policy", "program", "provider")
names = ["headscale_ha"]
for package in library:
    package = "headscale_ha." + package
    path = importlib.import_module(package).__path__
    names += [package, *(i.name for i in pkgutil.walk_packages(path, package + "."))]
for name in names:
    if not name.endswith("__main__"):
        importlib.import_module(name)
scripts = importlib.resources.files("headscale_ha.components") / "scripts"
policy = importlib.resources.files("headscale_ha.policy") / "base.hujson"
print(headscale_ha.__version__)
print(headscale_ha.__file__)
print(sorted(p.name for p in scripts.iterdir()))
print(len(policy.read_text()) > 0)
print(sorted(m for m in sys.modules if m.split(".")[0] in (*library, "tools", "tests")))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (``pip install``, no index) and the pinned dependencies beside it."""
    return installed_venv(wheel, tmp_path_factory.mktemp("venv") / "v")


def test_the_wheel_holds_the_package_and_nothing_of_the_checkout_beside_it(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"headscale_ha", "headscale_provider"}
    packages = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert "headscale_ha.components.settings" in packages
    for package in packages:
        prefix = package.replace(".", "/")
        sources = {p.name for p in PROJECT_DIR.joinpath(prefix).glob("*.py")}  # through headscale_ha/'s links
        assert sources, package
        assert sources <= {Path(n).name for n in names if Path(n).parent.as_posix() == prefix}, package
    scripts = {p.name for p in (PROJECT_DIR / "components" / "scripts").iterdir()}
    assert scripts <= {Path(n).name for n in names if n.startswith("headscale_ha/components/scripts/")}
    assert "headscale_ha/policy/base.hujson" in names


def test_the_wheel_is_the_version_the_program_reports_with_its_dependencies_as_ranges(wheel: Path) -> None:
    assert wheel.name.startswith(f"headscale_ha-{VERSION}-py3-none-any")
    metadata = zipfile.ZipFile(wheel).read(f"headscale_ha-{VERSION}.dist-info/METADATA").decode()
    required = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")]
    declared = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["dependencies"]
    assert _ranges(required) == _ranges(declared)
    assert all("==" not in requirement and "<" in requirement for requirement in required)


def _ranges(requirements: list[str]) -> dict[str, frozenset[str]]:
    parsed = [Requirement(text) for text in requirements]
    return {canonicalize_name(r.name): frozenset(str(s) for s in r.specifier) for r in parsed}


def test_the_programs_exact_pins_satisfy_the_librarys_ranges() -> None:
    """requirements.txt (what the program runs) is one of the installs pyproject.toml allows."""
    pins = {}
    for line in (PROJECT_DIR / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    declared = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["dependencies"]
    for text in declared:
        requirement = Requirement(text)
        pinned = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(pinned), (text, pinned)


def test_the_installed_package_imports_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(installed), "-c", SMOKE], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr
    version, origin, scripts, policy, stray = done.stdout.splitlines()
    assert version == VERSION
    assert Path(origin).is_relative_to(installed.parent.parent), "imported from the venv, not the checkout"
    assert scripts == str(sorted(p.name for p in (PROJECT_DIR / "components" / "scripts").iterdir()))
    assert policy == "True"
    assert stray == "[]"


def test_the_installed_package_serves_every_provider_path_the_state_may_hold(installed: Path, tmp_path: Path) -> None:
    paths = [*CURRENT, *(path for path, (_, where) in LEGACY.items() if where == "package")]
    script = "import importlib\n" + "".join(
        f"getattr(importlib.import_module({p.rsplit('.', 1)[0]!r}), {p.rsplit('.', 1)[1]!r})\n" for p in paths
    )
    done = subprocess.run(
        [str(installed), "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr
