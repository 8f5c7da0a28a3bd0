"""tests/workers.py: how `make test-all` spreads the suite over pytest-xdist workers, run on a suite of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.workers import RealTierAsOneFile
from tools.harness import PROJECT_DIR

#: Each test appends "<worker> <its file>" to the file WHO names, in the order the workers run them.
RECORDER = """
import os, time
from pathlib import Path

def record(name):
    with open(os.environ["WHO"], "a") as who:
        who.write(f"{os.environ['PYTEST_XDIST_WORKER']} {name}\\n")
    time.sleep(0.2)  # long enough that the other worker is handed work meanwhile
"""


def _suite(root: Path) -> None:
    """Two real-tier files and four others (two collected before the tier), with three tests each."""
    for relative in ("tests/real/test_lab_a.py", "tests/real/test_lab_b.py", "tests/test_c.py", "tests/test_d.py",
                     "tests/components/test_e.py", "tests/program/test_f.py"):  # fmt: skip
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tests = "".join(f"\ndef test_{i}():\n    record({relative!r})\n" for i in range(3))
        path.write_text(RECORDER + tests)


def test_the_real_tier_runs_first_on_one_worker_and_every_other_file_stays_whole(tmp_path: Path) -> None:
    _suite(tmp_path)
    who = tmp_path / "who"
    env = {**os.environ, "WHO": str(who), "PYTHONPATH": str(PROJECT_DIR)}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "tests.workers", "-p", "no:cacheprovider", "--rootdir",
            str(tmp_path), "--import-mode=importlib", "-c", os.devnull, "-n", "2", "--dist", "loadfile",
            "--no-loadscope-reorder", "tests"]  # fmt: skip
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = [line.split() for line in who.read_text().splitlines()]
    assert len(runs) == 18
    workers_of = {name: {worker for worker, file in runs if file == name} for _, name in runs}
    assert all(len(workers) == 1 for workers in workers_of.values()), workers_of  # each file whole
    real = {worker for worker, file in runs if file.startswith("tests/real/")}
    assert len(real) == 1, runs  # the tier on one worker, one file after the other
    (real_worker,) = real
    mine = [file for worker, file in runs if worker == real_worker]
    assert all(file.startswith("tests/real/") for file in mine[:6]), mine  # started at once
    assert {worker for worker, _ in runs} == {"gw0", "gw1"}  # the other files ran beside it


def test_the_scope_of_a_test_is_its_file_or_the_whole_real_tier() -> None:
    scheduler = RealTierAsOneFile.__new__(RealTierAsOneFile)  # _split_scope reads no state
    assert scheduler._split_scope("tests/real/test_upgrade.py::test_a") == "tests/real/"
    assert scheduler._split_scope("tests/real/test_destroy.py::test_b[x::y]") == "tests/real/"
    assert scheduler._split_scope("tests/program/test_config.py::test_c[a::b]") == "tests/program/test_config.py"
    assert scheduler._split_scope("tests/realistic/test_d.py::test_e") == "tests/realistic/test_d.py"


TIERED = {
    "tests/real/test_lab.py": "",
    "tests/components/test_lease.py": '@pytest.mark.real_tool("kube-apiserver", "dash")\n',
    "tests/provider/test_server.py": '@pytest.mark.real_tool("headscale")\n',
    "tests/components/test_script.py": '@pytest.mark.real_tool("dash")\n',
    "tests/program/test_plan.py": "",
}


def _selected(root: Path, tier: str) -> set[str]:
    """The files whose test `--tier <tier>` selects, from a collection of the suite TIERED describes."""
    for relative, marker in TIERED.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"import pytest\n\n\n{marker}def test_it():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR)}
    argv = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "tests.workers", "-p", "no:cacheprovider",
            "--rootdir", str(root), "--import-mode=importlib", "-c", os.devnull, "--tier", tier, "tests"]  # fmt: skip
    result = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 5), result.stdout + result.stderr
    return {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}


def test_the_tiers_split_the_suite_by_whether_a_test_runs_a_built_actor(tmp_path: Path) -> None:
    built = {"tests/real/test_lab.py", "tests/components/test_lease.py", "tests/provider/test_server.py"}
    assert _selected(tmp_path, "real") == built
    assert _selected(tmp_path, "everyday") == set(TIERED) - built
    assert _selected(tmp_path, "all") == set(TIERED)
