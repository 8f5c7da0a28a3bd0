"""The scripts' shared functions (components/scripts/shared.sh), written once and inlined where the pods get them
(components/shell_scripts.py): what a pod runs stands alone and passes shellcheck, each is the file with its shared
functions in place, and no script repeats one."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from headscale_ha.components import shell_scripts
from headscale_ha.components.shell_scripts import SHARED_LIBRARY, packaged_script, shared_functions
from tests.support.script_checks import shipped
from tools.harness import PROJECT_DIR

SCRIPTS = PROJECT_DIR / "components" / "scripts"
NAMES = sorted(path.name for path in SCRIPTS.glob("*.sh") if path.name != SHARED_LIBRARY)
#: Scripts that source another script of the folder (its path in an environment variable), and so its functions.
SOURCED = {"litestream-sign.sh": ("MANIFEST_SCRIPT", "litestream-manifest.sh")}


def test_the_library_defines_the_shared_functions() -> None:
    assert list(shared_functions()) == ["info", "die", "require_absolute"]


@pytest.mark.parametrize("name", NAMES)
def test_each_script_ships_as_its_file_with_the_shared_functions_in_place(name: str) -> None:
    assert packaged_script(name) == shipped(SCRIPTS / name)


@pytest.mark.parametrize("name", NAMES)
def test_no_script_repeats_a_shared_function(name: str) -> None:
    source = (SCRIPTS / name).read_text()
    assert [function for function, text in shared_functions().items() if text in source] == []


@pytest.mark.real_tool("shellcheck", "dash")
@pytest.mark.parametrize("name", NAMES)
def test_what_a_pod_runs_stands_alone(name: str, tmp_path: Path) -> None:
    """Alone in a folder, as in its ConfigMap: no library beside it, every shared function it calls defined in it,
    and shellcheck clean without following any source."""
    text = packaged_script(name)
    assert SHARED_LIBRARY not in text
    defined = text
    if name in SOURCED:
        variable, sourced = SOURCED[name]
        assert f'\n. "${variable}"\n' in text
        defined += packaged_script(sourced)
    for function in shared_functions():
        if re.search(rf"^\s*(?:\S.*[;&|] *)?{function} ", text, re.M):
            assert re.search(rf"^{function}\(\) \{{$", defined, re.M), f"{name} calls {function} without it"
    script = tmp_path / name
    script.write_text(text)
    checks = (["shellcheck", "--shell=sh", "--severity=style", str(script)], ["dash", "-n", str(script)])
    for argv in checks:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def test_a_function_the_library_lacks_is_refused_at_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(SCRIPTS / SHARED_LIBRARY, tmp_path / SHARED_LIBRARY)
    (tmp_path / "odd.sh").write_text(
        '#!/bin/sh\n# shellcheck source=shared.sh\n. "$(dirname -- "$0")/shared.sh"  # shared: info warn\n'
    )
    monkeypatch.setattr(shell_scripts, "_scripts", lambda: tmp_path)
    with pytest.raises(ValueError, match=r"^odd\.sh: shared\.sh defines no warn \(it has \['die', 'info', "):
        packaged_script("odd.sh")
