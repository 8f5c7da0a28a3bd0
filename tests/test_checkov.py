"""checkov on every rendered stack and option set: no failed check, and every skip carries its reason inline."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.real_tools import TOOLS
from tests.support.option_sets import ALL_SETS, option_set_run
from tests.support.stacks import project_copier
from tools.harness import StackOutputs
from tools.plan import write_rendered


def _checkov(directory: Path) -> dict:
    checkov = TOOLS["checkov"].find()
    assert checkov is not None
    result = subprocess.run(
        [str(checkov), "-d", str(directory), "--framework", "kubernetes", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    (kubernetes,) = [r for r in reports if r.get("check_type") == "kubernetes"]
    return kubernetes


def _rendered(option_set: str, project_copy, tmp_path: Path, stack_outputs: dict[str, dict]) -> Path:
    run = option_set_run(option_set, project_copy, stack_outputs)
    out = tmp_path / "rendered"
    write_rendered(run, out)
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory, planned_stack_outputs: StackOutputs) -> dict[str, dict]:
    """Every option set rendered into a directory of its own and checked by one checkov run (checkov takes seconds
    to start), its results split by set: option set → {"passed", "failed", "skipped"} checks of its files."""
    if TOOLS["checkov"].find() is None:
        return {}  # the tests skip, naming the tool (tests/real_tools.py)
    root = tmp_path_factory.mktemp("rendered")
    for option_set in ALL_SETS:
        outputs = {name: dict(copy.deepcopy(values)) for name, values in planned_stack_outputs.items()}
        run = option_set_run(option_set, project_copier(tmp_path_factory.mktemp("project")), outputs)
        write_rendered(run, root / option_set)
    results = _checkov(root)["results"]
    split: dict[str, dict] = {name: {"passed": [], "failed": [], "skipped": []} for name in ALL_SETS}
    for kind in ("passed", "failed", "skipped"):
        for check in results.get(f"{kind}_checks", []):
            split[check["file_path"].strip("/").split("/", 1)[0]][kind].append(check)
    return split


@pytest.mark.real_tool("checkov")
@pytest.mark.parametrize("option_set", ALL_SETS)
def test_checkov_finds_no_unjustified_failure(option_set: str, reports: dict[str, dict]) -> None:
    report = reports[option_set]
    failed = [f"{c['check_id']} {c['resource']}: {c['check_name']}" for c in report["failed"]]
    assert failed == []
    assert len(report["passed"]) > 100
    for skipped in report["skipped"]:
        reason = (skipped.get("check_result") or {}).get("suppress_comment", "")
        assert len(reason) > 20, f"{skipped['check_id']} on {skipped['resource']} is skipped without a reason"


@pytest.mark.real_tool("checkov")
def test_checkov_does_fail_a_bad_object(project_copy, tmp_path: Path, stack_outputs) -> None:
    """The check above can fail: a privileged container with no limits is reported."""
    out = _rendered("hydra", project_copy, tmp_path, stack_outputs)
    path = next(out.rglob("deployment-headscale.yaml"))
    deployment = yaml.safe_load(path.read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"] = {"privileged": True}
    container.pop("resources")
    path.write_text(yaml.safe_dump(deployment))
    failed = {c["check_id"] for c in _checkov(out)["results"]["failed_checks"]}
    assert {"CKV_K8S_16", "CKV_K8S_13"} <= failed
